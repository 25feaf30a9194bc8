import { HeraldHeaders, type HeadersInit } from "./headers.js";
import { FROM_NOW, HistoryHeaders, hasWildcards, positionOf, type ResumeEvent } from "./history.js";
import { PresenceEventQueue, PresenceHeaders, presenceEventOf, type PresenceEvent } from "./presence.js";
import { HeraldError } from "./protocol/errors.js";
import { SubscribeOptions as OptionBits, type HistoryPosition } from "./protocol/frames.js";
import { processTraced } from "./tracing.js";
import { deferred, quiet, type Deferred } from "./util.js";

const utf8 = new TextDecoder();

/** What a `publish` from a message's `respond` needs; the client implements it. */
interface Publisher {
  publish(topic: string, payload: Uint8Array | ArrayBuffer | string, options?: { replyTo?: string | null; headers?: HeadersInit }): Promise<void>;
}

/** A message received on a subscription. */
export class Message {
  readonly #publisher: Publisher | undefined;
  #position: HistoryPosition | null | undefined;

  constructor(
    /** The topic it was published to. */
    readonly topic: string,
    /** Where the publisher wants a reply (request/reply), or `null`. */
    readonly replyTo: string | null,
    /** The payload, as published (decompressed if it travelled compressed). */
    readonly payload: Uint8Array,
    /** The subscription id it arrived on. */
    readonly sid: number,
    publisher?: Publisher,
    /** The headers it was published with (spec §4.9); empty when it has none. */
    readonly headers: HeraldHeaders = HeraldHeaders.empty,
  ) {
    this.#publisher = publisher;
  }

  /**
   * Where this message is in its topic's history (spec §13: the broker's `Herald-Offset` and `Herald-Epoch`
   * headers), or `null` when its topic keeps no history (or the connection was not granted headers).
   */
  get position(): HistoryPosition | null {
    if (this.#position === undefined) this.#position = positionOf(this.headers);
    return this.#position;
  }

  /** The payload as UTF-8 text (invalid bytes become U+FFFD). */
  text(): string {
    return utf8.decode(this.payload);
  }

  /** The payload parsed as JSON text. */
  json<T = unknown>(): T {
    return JSON.parse(this.text()) as T;
  }

  /** Publishes `payload` (with `headers`, if given) to this message's `replyTo` (the answer to a request). */
  respond(payload: Uint8Array | ArrayBuffer | string, options: { headers?: HeadersInit } = {}): Promise<void> {
    if (!this.replyTo) return Promise.reject(new HeraldError("InvalidTopic", "This message has no replyTo to respond to."));
    if (!this.#publisher) return Promise.reject(new HeraldError("Closed", "This message has no client to respond with."));
    return this.#publisher.publish(this.replyTo, payload, options);
  }
}

export type MessageHandler = (message: Message) => void | Promise<void>;

export interface SubscribeOptions {
  /** Do not receive what this same client publishes (spec §4.3 no echo). */
  noEcho?: boolean;
  /**
   * Messages kept for a slow `for await` loop before the oldest are dropped (counted in `dropped`, and
   * reported as a `MessagesDropped` error event). Default: the client's `maxPendingMessages`.
   */
  maxPending?: number;
  /**
   * Resume after a reconnect (spec §13). Default true: a subscription to one topic (no wildcards), on a
   * connection granted headers, sends its position with every SUBSCRIBE, so that after a reconnect the
   * broker replays what it missed from the topic's history, if the topic keeps one. `false`: it subscribes
   * from "now" every time (its `position` is still kept).
   */
  resume?: boolean;
  /**
   * Called with the broker's answer to each resume after a reconnect: `recovered` (nothing was lost), or
   * not (what was published meanwhile cannot be replayed). The client's `resume` event reports it too.
   */
  onResume?: (event: ResumeEvent) => void | Promise<void>;
  /**
   * Join this queue group (spec §14): each message published to the pattern goes to one member of the group
   * (the subscriptions with the same pattern and queue name, on any client), chosen at random, instead of to
   * all of them; plain subscriptions still get every message. A name is 1 to 64 characters of printable
   * ASCII other than `.`, `*` and `>` (anything else throws `InvalidTopic` here). A member does not resume
   * (a group has no position): `resume: true` or `onResume` beside it throws `InvalidOptions`. Against a
   * broker that does not grant queue groups the subscription is refused (`QueueGroupsNotNegotiated`: its
   * `ready` rejects, an `error` event says so) rather than made a plain one.
   */
  queue?: string;
  /**
   * Be present on the topic (spec §15.1): while this subscription lives, this connection is a member of the
   * topic, shown to others with the client's `info`. One topic only (no wildcards: `InvalidOptions` here). The
   * broker may refuse it (`PermissionDenied` without the join permission, `PresenceFull` past a limit,
   * `PresenceUnavailable`): the subscription then ends, its `ready` rejects with that error and an `error`
   * event says so. After a reconnect the new connection joins again (a new member, with a new client id).
   * On long-poll the session joins (`"join"`, longpoll §1.2) and leaves `expired` if it times out.
   */
  join?: boolean;
  /**
   * Receive the topic's join and leave events (spec §15.2) beside its messages, in order with them: given to
   * `onPresence` when there is one, else read with `sub.presenceEvents()`. They are never delivered as messages.
   * Needs the presence permission (a refusal ends the subscription as for `join`). One topic only.
   * Default: true when `onPresence` is given, else false.
   */
  presenceEvents?: boolean;
  /** Called with each presence event (join, leave, suppressed, resumed) of the topic; implies `presenceEvents`. */
  onPresence?: (event: PresenceEvent) => void | Promise<void>;
  /**
   * Receive each message as a delta against the previous one when the broker finds it pays (spec §11.2): fewer
   * bytes for a stream of small updates (a JSON document with a few fields changed, a ticker). Applied here: the
   * handler or iterator always gets the full payload. Honoured on one topic (no wildcards) outside a queue group,
   * with the client's `deltas` option on and a broker that grants them; otherwise ignored (full messages). A delta
   * that cannot be applied loses that message: an `error` event (`DecompressionFailed`, its `sid` this
   * subscription's), a resume event that did not recover, and the subscription is made again on the same
   * connection, so the broker sends a full message next. Default false.
   */
  delta?: boolean;
}

/** @internal What a subscription asks of presence (spec §15): join, events, and where the events go. */
export interface SubscriptionPresence {
  readonly join: boolean;
  readonly events: boolean;
  readonly onPresence: ((event: PresenceEvent) => void | Promise<void>) | undefined;
}

/** @internal The client side a subscription talks to. */
export interface SubscriptionOwner {
  unsubscribeSid(sid: number): Promise<void>;
  reportError(error: HeraldError): void;
  reportResume(event: ResumeEvent): void;
}

/**
 * One subscription: iterate it with `for await (const msg of sub)`, or give a handler to `subscribe`.
 * Leaving a `for await` loop (break, return, throw) unsubscribes.
 */
export class Subscription implements AsyncIterable<Message> {
  /** Resolves once the broker has the subscription (publications routed from then on reach it). */
  readonly ready: Promise<void>;
  /** Resolves when the subscription ends (unsubscribed, refused, or client closed). */
  readonly closed: Promise<void>;
  /** Messages received. */
  received = 0;
  /** Messages dropped because the iterator fell more than `maxPending` behind. */
  dropped = 0;
  /** Messages that came as deltas (spec §11.2) and were rebuilt here: what the `delta` option saved is on these. */
  deltas = 0;

  private readonly readyD: Deferred<void> = deferred<void>();
  private readonly closedD: Deferred<void> = deferred<void>();
  private pending: Message[] = [];
  private head = 0;
  private readonly waiters: Deferred<IteratorResult<Message>>[] = [];
  private ended = false;
  private failure: unknown = null;
  #position: HistoryPosition | null = null;
  /** The topic keeps no history (a status said so): no more `since` for it. */
  private noHistory = false;
  /** A SUBSCRIBE with `since` went out on this connection, its status MESSAGE has not come yet. */
  private awaitingStatus: { resumed: boolean } | null = null;
  /** Presence events for `presenceEvents()`, when they were asked for without an `onPresence` callback. */
  private readonly presenceQueue: PresenceEventQueue | null;

  /** Made by the broker for the application's backend (spec §4.10, the `serverSubscribed` event): it ends with its connection. */
  madeByServer = false;

  /** @internal */
  constructor(
    private readonly owner: SubscriptionOwner,
    /** Subscription id on the wire (chosen by the client). */
    readonly sid: number,
    /** The topic pattern (spec §5; `*` and `>` wildcards). */
    readonly pattern: string,
    /** Whether this client's own publications are skipped. */
    readonly noEcho: boolean,
    private readonly handler: MessageHandler | undefined,
    private readonly maxPending: number,
    /** Whether the handler runs in a CONSUMER span (not for the client's own request inbox). */
    private readonly traced = true,
    /** Whether SUBSCRIBEs carry the position (spec §13), see {@link SubscribeOptions.resume}. */
    private readonly resume = true,
    private readonly onResume?: (event: ResumeEvent) => void | Promise<void>,
    /** The queue group it is a member of (spec §14), or `null` for a plain subscription. */
    readonly queue: string | null = null,
    private readonly presence: SubscriptionPresence = { join: false, events: false, onPresence: undefined },
    /** Whether it asks for deltas (spec §11.2), see {@link SubscribeOptions.delta}. */
    private readonly delta = false,
  ) {
    this.ready = quiet(this.readyD.promise);
    this.closed = this.closedD.promise;
    this.presenceQueue =
      presence.events && presence.onPresence === undefined
        ? new PresenceEventQueue(maxPending, (dropped) =>
            owner.reportError(
              new HeraldError("MessagesDropped", `Subscription ${sid} ('${pattern}') is ${maxPending} presence events behind; dropped ${dropped} so far.`, {
                count: dropped,
              }),
            ),
          )
        : null;
  }

  /** Whether this subscription makes its connection present on the topic (spec §15.1). */
  get joins(): boolean {
    return this.presence.join;
  }

  /**
   * @internal The SUBSCRIBE option bits (spec §4.3): no echo, join, presence events, and delta where the broker
   * would honour it (one topic, no queue group; it ignores it elsewhere, so asking would only keep payloads here).
   */
  get optionBits(): number {
    return (
      (this.noEcho ? OptionBits.NoEcho : 0) |
      (this.presence.join ? OptionBits.Join : 0) |
      (this.presence.events ? OptionBits.PresenceEvents : 0) |
      (this.delta && this.queue === null && !hasWildcards(this.pattern) ? OptionBits.Delta : 0)
    );
  }

  /**
   * The topic's presence events (join, leave, suppressed, resumed; spec §15.2), in order with its messages,
   * for one reader: `for await (const event of sub.presenceEvents())`. Events wait here until read (at most
   * `maxPending`, the oldest dropped beyond); the stream ends with the subscription. Only for a subscription
   * made with `presenceEvents: true` and no `onPresence` callback (else a TypeError).
   */
  presenceEvents(): AsyncIterableIterator<PresenceEvent> {
    if (this.presenceQueue === null) {
      throw new TypeError(
        this.presence.events
          ? "This subscription gives its presence events to its onPresence callback."
          : "This subscription did not ask for presence events (the presenceEvents option).",
      );
    }
    return this.presenceQueue;
  }

  /** Whether the subscription has ended. */
  get isClosed(): boolean {
    return this.ended;
  }

  /**
   * The position of the last message received (as received, before the application had it), or the one the
   * broker named when the subscription (re)started (spec §13); `null` when its topic keeps no history, or
   * nothing has said where it is yet. A subscription resumes from here after a reconnect.
   */
  get position(): HistoryPosition | null {
    return this.#position;
  }

  /**
   * @internal The `since` of the SUBSCRIBE about to go out on a connection (spec §4.3, CLIENTS.md step 12):
   * the kept position, or "from now" without one; `null` (send none) when resuming is off, the pattern has
   * wildcards, the broker keeps no history (capability bit 3), the topic keeps none, or it is a queue group
   * member (spec §14: a group has no position). With one, the broker's status MESSAGE is expected next on this sid.
   */
  sinceForSubscribe(historyGranted: boolean): HistoryPosition | null {
    this.awaitingStatus = null;
    if (!this.resume || this.queue !== null || this.noHistory || !historyGranted || hasWildcards(this.pattern)) return null;
    const since = this.#position ?? FROM_NOW;
    this.awaitingStatus = { resumed: since.epoch !== "" };
    return since;
  }

  /**
   * @internal A MESSAGE for this subscription: the status answering its `since` (spec §13) is taken here and
   * never delivered; any other message moves the position on, then goes to the handler or iterator.
   */
  receive(message: Message): void {
    if (this.ended) return;
    // A presence event (spec §15.2): the broker's, never the application's message (only the broker sets Herald- keys).
    const presence = message.headers.size === 0 ? null : message.headers.get(PresenceHeaders.Presence);
    if (presence !== null) {
      this.takePresence(presence, message);
      return;
    }
    if (this.awaitingStatus !== null) {
      const status = message.headers.get(HistoryHeaders.Status);
      if (status !== null) {
        this.takeStatus(status, message);
        return;
      }
      this.awaitingStatus = null; // the status comes first or not at all (a broker without history)
    }
    const position = message.position;
    if (position !== null) this.#position = position;
    this.deliver(message);
  }

  /** A presence event: to the `onPresence` callback, or to the `presenceEvents()` stream; dropped if neither asked. */
  private takePresence(kind: string, message: Message): void {
    if (!this.presence.events) return;
    const event = presenceEventOf(kind, message.headers, message.topic, message.payload, this);
    if (event === null) return; // a kind a later broker added: not for this client
    const onPresence = this.presence.onPresence;
    if (onPresence === undefined) {
      this.presenceQueue!.push(event);
      return;
    }
    try {
      const result = onPresence(event);
      if (result && typeof (result as Promise<void>).then === "function") {
        (result as Promise<void>).then(undefined, (e) => this.handlerFailed(e, "onPresence"));
      }
    } catch (e) {
      this.handlerFailed(e, "onPresence");
    }
  }

  /** The broker's answer to a SUBSCRIBE with `since`: the position to go on from, and the application told of a resume. */
  private takeStatus(status: string, message: Message): void {
    const { resumed } = this.awaitingStatus!;
    this.awaitingStatus = null;
    const recovered = status === "200";
    const position = message.position;
    if (position === null) {
      if (!recovered) this.noHistory = true; // the topic keeps no history: stop asking
    } else if (!(recovered && resumed && this.#position?.epoch === position.epoch)) {
      // From now (Live), or not recovered: go on from the topic's position. Recovered keeps the one sent:
      // the missed messages follow and move it on, so a loss in the middle of the replay resumes from there.
      this.#position = position;
    }
    if (!resumed) return; // the first answer ("Live") is no news
    this.tellResume(Object.freeze({
      subscription: this,
      recovered,
      description: message.headers.get(HistoryHeaders.Description) ?? "",
      position,
    }));
  }

  /**
   * @internal The broker says this subscription may have lost an unknown number of messages (long-poll: a cluster
   * node took the session over and could not resume it, longpoll §2 `Herald-Gaps`; any transport: a Redis shard that
   * carries its topic was unreachable, spec §6.3 `MessagesDropped` with `sids`): told as a resume that did not
   * recover, with its last position (if it keeps one, the application may resume from there).
   */
  reportGap(description = "Messages may have been lost: a cluster node or Redis shard the broker relies on failed"): void {
    if (this.ended) return;
    this.tellResume(Object.freeze({
      subscription: this,
      recovered: false,
      description,
      position: this.#position,
    }));
  }

  private tellResume(event: ResumeEvent): void {
    if (this.onResume) {
      try {
        const result = this.onResume(event);
        if (result && typeof (result as Promise<void>).then === "function") {
          (result as Promise<void>).then(undefined, (e) => this.handlerFailed(e, "onResume"));
        }
      } catch (e) {
        this.handlerFailed(e, "onResume");
      }
    }
    this.owner.reportResume(event);
  }

  /** @internal */
  markReady(): void {
    this.readyD.resolve();
  }

  /** @internal */
  deliver(message: Message): void {
    if (this.ended) return;
    this.received++;
    if (this.handler) {
      try {
        const result = this.traced ? processTraced(message, this.pattern, this.handler) : this.handler(message);
        if (result && typeof (result as Promise<void>).then === "function") {
          (result as Promise<void>).then(undefined, (e) => this.handlerFailed(e));
        }
      } catch (e) {
        this.handlerFailed(e);
      }
      return;
    }
    const waiter = this.waiters.shift();
    if (waiter) {
      waiter.resolve({ value: message, done: false });
      return;
    }
    if (this.pending.length - this.head >= this.maxPending) {
      this.head++;
      this.dropped++;
      if (this.dropped === 1 || this.dropped % 1000 === 0) {
        this.owner.reportError(
          new HeraldError("MessagesDropped", `Subscription ${this.sid} ('${this.pattern}') is ${this.maxPending} messages behind; dropped ${this.dropped} so far.`, {
            count: this.dropped,
          }),
        );
      }
    }
    this.pending.push(message);
    if (this.head > 1024 && this.head * 2 > this.pending.length) {
      this.pending = this.pending.slice(this.head);
      this.head = 0;
    }
  }

  private handlerFailed(error: unknown, what = "handler"): void {
    this.owner.reportError(
      new HeraldError("HandlerFailed", `The ${what} of subscription ${this.sid} ('${this.pattern}') threw: ${(error as Error)?.message ?? error}`, {
        cause: error,
      }),
    );
  }

  /**
   * @internal Ends the subscription; messages not yet taken from the iterator are discarded. `error` makes
   * the iterator throw (e.g. the broker refused the subscription).
   */
  end(error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.pending = [];
    this.head = 0;
    if (error !== undefined) {
      this.failure = error;
      this.readyD.reject(error);
    } else {
      this.readyD.reject(new HeraldError("Closed", `Subscription ${this.sid} ('${this.pattern}') ended before the broker confirmed it.`));
    }
    for (const waiter of this.waiters.splice(0)) {
      if (error !== undefined) waiter.reject(error);
      else waiter.resolve({ value: undefined, done: true });
    }
    this.presenceQueue?.end(error);
    this.closedD.resolve();
  }

  /** Ends the subscription (here at once, on the broker as soon as it gets the request). */
  unsubscribe(): Promise<void> {
    return this.owner.unsubscribeSid(this.sid);
  }

  /** The next message, or `undefined` once the subscription has ended. */
  async next(): Promise<Message | undefined> {
    const result = await this.pull();
    return result.done ? undefined : result.value;
  }

  private pull(): Promise<IteratorResult<Message>> {
    if (this.handler) {
      return Promise.reject(new TypeError("This subscription delivers to its handler; it cannot be iterated."));
    }
    if (this.head < this.pending.length) {
      const value = this.pending[this.head]!;
      this.pending[this.head++] = undefined as unknown as Message;
      if (this.head === this.pending.length) {
        this.pending = [];
        this.head = 0;
      }
      return Promise.resolve({ value, done: false });
    }
    if (this.ended) {
      if (this.failure !== null) return Promise.reject(this.failure);
      return Promise.resolve({ value: undefined, done: true });
    }
    const waiter = deferred<IteratorResult<Message>>();
    this.waiters.push(waiter);
    return waiter.promise;
  }

  [Symbol.asyncIterator](): AsyncIterator<Message> {
    return {
      next: () => this.pull(),
      return: async () => {
        await this.unsubscribe().catch(() => undefined);
        return { value: undefined, done: true };
      },
    };
  }
}
