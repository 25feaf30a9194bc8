/**
 * Presence (spec §15): who is on a topic. A subscription to one topic may make its connection a member
 * (`join`) and receive the topic's join and leave events (`presenceEvents`); `client.presence(topic)` reads
 * the members a page at a time, `client.occupancy(topic)` only their number.
 *
 * Events arrive as MESSAGEs of the subscription carrying a `Herald-Presence` header (spec §15.2). Only the
 * broker may set a `Herald-` header (spec §4.9), so such a MESSAGE is never an application message: the
 * subscription takes it here and hands it to its `onPresence` callback or its `presenceEvents()` stream.
 */
import type { HeraldHeaders } from "./headers.js";
import { HeraldError, errorCodeName } from "./protocol/errors.js";
import type { PresenceEntry } from "./protocol/frames.js";
import type { Subscription } from "./subscription.js";
import { deferred, type Deferred } from "./util.js";

export type { PresenceEntry } from "./protocol/frames.js";

/** The broker's header keys on a presence event (spec §15.2). */
export const PresenceHeaders = {
  /** `join`, `leave`, `suppressed` or `resumed`. */
  Presence: "Herald-Presence",
  /** The member that joined or left. */
  Client: "Herald-Client",
  /** Its identity. */
  Identity: "Herald-Identity",
  /** Why it left: `unsubscribe`, `disconnect`, `expired`, `revoked`, `node`. */
  Reason: "Herald-Reason",
  /** The topic's number of members once the event is counted. */
  Occupancy: "Herald-Occupancy",
} as const;

/**
 * - `join`, `leave`: a member joined or left (`client`, `identity`; `info` on a join, `reason` on a leave).
 * - `suppressed`: the topic passed the broker's event threshold (`max_presence_events_members`, default
 *   1 000 members): no joins or leaves follow until `resumed`.
 * - `resumed`: the topic is back at half the threshold; events follow again. The members may have changed
 *   meanwhile: read them again with `client.presence(topic)`.
 */
export type PresenceEventKind = "join" | "leave" | "suppressed" | "resumed";

/** Why a member left (spec §15.2 `Herald-Reason`); a later broker may name others. */
export type PresenceLeaveReason = "unsubscribe" | "disconnect" | "expired" | "revoked" | "node" | (string & {});

/** A join, leave, suppressed or resumed event of a topic (spec §15.2), given to the subscription that asked for them. */
export interface PresenceEvent {
  readonly kind: PresenceEventKind;
  /** The subscription it arrived on. */
  readonly subscription: Subscription;
  /** The topic. */
  readonly topic: string;
  /** The member's client id (`join`, `leave`); `null` for `suppressed` and `resumed`. */
  readonly client: string | null;
  /** The member's identity (`join`, `leave`; `""` with authentication off); else `null`. */
  readonly identity: string | null;
  /** The member's client info on a `join` (`null` when it chose none); `null` on every other event. */
  readonly info: string | null;
  /** Why the member left (`leave` only); else `null`. */
  readonly reason: PresenceLeaveReason | null;
  /** The topic's number of members once this event is counted; `null` if the broker sent none. */
  readonly occupancy: number | null;
}

/** A page of a topic's members (spec §15.3): the occupancy, up to `limit` members, and the cursor of the next page. */
export interface PresencePage {
  /** The topic's number of members (all of them, not only this page's). */
  readonly members: number;
  /** The number of distinct identities among them. */
  readonly identities: number;
  /** Up to `limit` members, ordered by `client`. */
  readonly entries: readonly PresenceEntry[];
  /** Pass as `cursor` for the next page; `null` when this page ends the list. */
  readonly next: string | null;
}

/** A topic's occupancy (spec §15.3, a PRESENCE with `limit` 0). */
export interface Occupancy {
  /** The topic's number of members. */
  readonly members: number;
  /** The number of distinct identities among them. */
  readonly identities: number;
}

export interface PresenceOptions {
  /** Most members listed in one page (1 to 1 000; the broker serves a larger one as 1 000). Default 100. */
  limit?: number;
  /** The previous page's `next`, for the page after it. Default: the first page. */
  cursor?: string | null;
  /** How long to wait for the broker's answer. Default: the client's `requestTimeoutMs`. */
  timeoutMs?: number;
}

/** The default page size of `client.presence` (spec §9: members per PRESENCE page). */
export const DEFAULT_PRESENCE_LIMIT = 100;

/**
 * The broker's refusal of a presence query (spec §15.3, a PRESENCE_REPLY with a non-zero code): `code` is
 * `PermissionDenied` (this identity may not read the topic's presence; nothing was told, not even the count),
 * `PresenceUnavailable` (a cluster's presence could not be reached; never an empty answer instead) or
 * `InvalidTopic`. The connection stays.
 */
export class PresenceError extends HeraldError {
  constructor(
    code: number,
    /** The topic that was asked about. */
    readonly topic: string,
  ) {
    const name = errorCodeName(code);
    super(name, `Presence of '${topic}' refused by the broker: ${name}.`);
    this.name = "PresenceError";
  }
}

/**
 * Presence on a connection whose broker did not grant it (spec §4.1 bit 5: presence off on the broker,
 * headers not asked for, or an older broker). Sent anyway, a join or a query would close the connection.
 */
export function presenceNotNegotiated(what: string): HeraldError {
  return new HeraldError(
    "PresenceNotNegotiated",
    `${what} refused: the broker did not grant presence (spec §4.1 capability bit 5; it needs headers, and Herald:Presence:Enabled on the broker).`,
  );
}

const KINDS: ReadonlySet<string> = new Set<PresenceEventKind>(["join", "leave", "suppressed", "resumed"]);
const DECIMAL = /^(0|[1-9][0-9]{0,15})$/;
const utf8 = new TextDecoder();

/**
 * The event a MESSAGE's headers carry, or `null` for a kind this client does not know (a later broker's): such
 * a MESSAGE is the broker's all the same and is never delivered as an application message.
 */
export function presenceEventOf(
  kind: string,
  headers: HeraldHeaders,
  topic: string,
  payload: Uint8Array,
  subscription: Subscription,
): PresenceEvent | null {
  if (!KINDS.has(kind)) return null;
  const member = kind === "join" || kind === "leave";
  const occupancyText = headers.get(PresenceHeaders.Occupancy);
  return Object.freeze({
    kind: kind as PresenceEventKind,
    subscription,
    topic,
    client: member ? (headers.get(PresenceHeaders.Client) ?? "") : null,
    identity: member ? (headers.get(PresenceHeaders.Identity) ?? "") : null,
    info: kind === "join" && payload.length > 0 ? utf8.decode(payload) : null,
    reason: kind === "leave" ? (headers.get(PresenceHeaders.Reason) ?? "") : null,
    occupancy: occupancyText !== null && DECIMAL.test(occupancyText) ? Number(occupancyText) : null,
  });
}

/**
 * The `presenceEvents()` stream of a subscription without an `onPresence` callback: events kept for one
 * reader, at most `max` (the oldest dropped beyond, counted), ended with the subscription.
 */
export class PresenceEventQueue implements AsyncIterableIterator<PresenceEvent> {
  /** Events dropped because the reader fell more than `max` behind. */
  dropped = 0;
  private items: PresenceEvent[] = [];
  private readonly waiters: Deferred<IteratorResult<PresenceEvent>>[] = [];
  private ended = false;
  private failure: unknown = undefined;

  constructor(
    private readonly max: number,
    private readonly onDropped: (dropped: number) => void,
  ) {}

  push(event: PresenceEvent): void {
    if (this.ended) return;
    const waiter = this.waiters.shift();
    if (waiter) {
      waiter.resolve({ value: event, done: false });
      return;
    }
    if (this.items.length >= this.max) {
      this.items.shift();
      this.dropped++;
      if (this.dropped === 1 || this.dropped % 1000 === 0) this.onDropped(this.dropped);
    }
    this.items.push(event);
  }

  /** Ends the stream: what is queued is still read, then it is done (or throws `error`). */
  end(error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.failure = error;
    for (const waiter of this.waiters.splice(0)) {
      if (error !== undefined) waiter.reject(error);
      else waiter.resolve({ value: undefined, done: true });
    }
  }

  next(): Promise<IteratorResult<PresenceEvent>> {
    const item = this.items.shift();
    if (item !== undefined) return Promise.resolve({ value: item, done: false });
    if (this.ended) {
      return this.failure !== undefined ? Promise.reject(this.failure) : Promise.resolve({ value: undefined, done: true });
    }
    const waiter = deferred<IteratorResult<PresenceEvent>>();
    this.waiters.push(waiter);
    return waiter.promise;
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<PresenceEvent> {
    return this;
  }
}

/** A count from a PRESENCE_REPLY as a number (a count above 2^53 is not a real topic's). */
export function countOf(value: number | bigint): number {
  return typeof value === "bigint" ? Number(value) : value;
}
