import { HeraldHeaders, type HeadersInit } from "./headers.js";
import { HeraldError } from "./protocol/errors.js";
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
}

/** @internal The client side a subscription talks to. */
export interface SubscriptionOwner {
  unsubscribeSid(sid: number): Promise<void>;
  reportError(error: HeraldError): void;
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

  private readonly readyD: Deferred<void> = deferred<void>();
  private readonly closedD: Deferred<void> = deferred<void>();
  private queue: Message[] = [];
  private head = 0;
  private readonly waiters: Deferred<IteratorResult<Message>>[] = [];
  private ended = false;
  private failure: unknown = null;

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
  ) {
    this.ready = quiet(this.readyD.promise);
    this.closed = this.closedD.promise;
  }

  /** Whether the subscription has ended. */
  get isClosed(): boolean {
    return this.ended;
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
    if (this.queue.length - this.head >= this.maxPending) {
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
    this.queue.push(message);
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
  }

  private handlerFailed(error: unknown): void {
    this.owner.reportError(
      new HeraldError("HandlerFailed", `The handler of subscription ${this.sid} ('${this.pattern}') threw: ${(error as Error)?.message ?? error}`, {
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
    this.queue = [];
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
    if (this.head < this.queue.length) {
      const value = this.queue[this.head]!;
      this.queue[this.head++] = undefined as unknown as Message;
      if (this.head === this.queue.length) {
        this.queue = [];
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
