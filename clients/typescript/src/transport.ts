/**
 * What the client needs from a transport (TCP, WebSocket or HTTP long-poll). One transport object is one
 * connection or one long-poll session; the client opens a new one to reconnect.
 */
import type { HeaderGrant, OutgoingHeaders } from "./headers.js";
import { HeraldError } from "./protocol/errors.js";
import type { HistoryPosition, MessageHeaders, PresenceReplyFrame } from "./protocol/frames.js";

/** A publication waiting to be sent, with the promise returned to the caller. */
export interface PendingPublish {
  topic: string;
  replyTo: string | null;
  payload: Uint8Array;
  /** The checked header block (the caller's and the trace context), or null for none. */
  headers: OutgoingHeaders | null;
  resolve(): void;
  reject(error: unknown): void;
}

/** Events a transport reports to its client. */
export interface TransportEvents {
  /**
   * A MESSAGE for subscription `sid` (payload already decompressed, or rebuilt from a delta: `delta` says so, spec
   * §11.2; `headers` absent when it has none).
   */
  message(sid: number, topic: string, replyTo: string | null, payload: Uint8Array, headers: MessageHeaders | undefined, delta: boolean): void;
  /** A non-fatal problem (`MessagesDropped`, `UnknownSubscription`, a bad message, ...). */
  error(error: HeraldError): void;
  /**
   * Subscription `sid` may have lost an unknown number of messages (long-poll: a cluster node took the session over,
   * longpoll §2 `Herald-Gaps`; any transport: a Redis shard was unreachable, spec §6.3 `MessagesDropped` with `sids`).
   */
  gap(sid: number): void;
  /** SUBSCRIBED (spec §4.10): the broker made subscription `sid` to `pattern` for this client (only when asked for). */
  subscribed?(sid: number, pattern: string, options: number): void;
  /**
   * A delta for subscription `sid` could not be applied (spec §11.2): that message is lost, and the sid's deltas are
   * dropped until a full message comes. Reported once per failure; the client subscribes the sid again.
   */
  deltaFailed(sid: number, error: HeraldError): void;
  /** The broker ended subscription `sid` (a credential refresh took the right to it away, spec §4.1). */
  revoked(sid: number, error: HeraldError): void;
  /** Long-poll: requests are failing, the session is kept and retried (state `reconnecting`). */
  interrupted(error: unknown): void;
  /** Long-poll: requests succeed again on the same session, nothing was lost. */
  resumed(): void;
  /** The connection or session is gone for good: the client opens a new one. Reported once. */
  lost(error: HeraldError): void;
}

export interface TransportInfo {
  /** The transport this connection uses: with `transport: "auto"`, `websocket` or (after a fallback) `longpoll`. */
  transport: "tcp" | "websocket" | "longpoll";
  /**
   * Present when `transport: "auto"` chose long-poll because the WebSocket could not be opened: why (the
   * refused upgrade, the timeout, no WebSocket in this runtime).
   */
  fallback?: string;
  /** WELCOME server name (TCP, WebSocket). */
  serverName?: string;
  /** WELCOME connection id (TCP, WebSocket). */
  connectionId?: number | bigint;
  /** Whether Zstd compression was negotiated. */
  compression: boolean;
  /** Whether the broker granted headers (spec §4.1 bit 1): messages carry them, publications may. */
  headers: boolean;
  /** Whether the broker granted no_responders (spec §4.1 bit 2): a request nobody receives fails at once. */
  noResponders: boolean;
  /** Whether the broker keeps topic histories (spec §4.1 bit 3, §13): only then do subscriptions send `since`. */
  history?: boolean;
  /** Whether the broker granted queue groups (spec §4.1 bit 4, §14; long-poll `queueGroups`): only then may a subscription name one. */
  queueGroups?: boolean;
  /**
   * Whether the broker granted presence (spec §4.1 bit 5, §15; only with headers): only then may a
   * subscription join or ask for presence events, and the client query presence. Long-poll: the session's
   * `presence`, granted to a session created with headers (longpoll §1.1).
   */
  presence?: boolean;
  /**
   * Whether the broker granted deltas (spec §4.1 bit 7, §11.2; long-poll `deltas`, binary poll answers only): only
   * then do subscriptions that ask for them receive them.
   */
  deltas?: boolean;
  /** WELCOME limits (TCP, WebSocket) or the long-poll session's answer. */
  limits: Record<string, number | bigint>;
  /** This client's part of the inbox space (spec §7: WELCOME `inbox_prefix`, long-poll `inboxPrefix`); absent from an older broker. */
  inboxPrefix?: string;
}

export interface Transport {
  readonly info: TransportInfo;
  /** Longest topic or pattern the broker accepts, in bytes. */
  readonly maxTopic: number;
  /** Most subscriptions the broker allows at once (Infinity when it does not say). */
  readonly maxSubscriptions: number;
  /** Whether this connection may publish headers, and their limits. */
  readonly headerGrant: HeaderGrant;
  /**
   * Sends a SUBSCRIBE; resolves when the broker has it (live for publications routed after). `options`: the
   * SUBSCRIBE option bits (spec §4.3: no echo, join, presence events, delta); join and presence events only when
   * presence was granted (else rejects with `PresenceNotNegotiated` before sending anything). `since` (only when headers were granted): resume the topic's history after that
   * position (spec §4.3, §13). `queue` (only when queue groups were granted, never with a `since`): join that
   * queue group (spec §14); rejects with `QueueGroupsNotNegotiated` before sending anything when the broker
   * did not grant them.
   */
  subscribe(sid: number, pattern: string, options: number, since?: HistoryPosition | null, queue?: string | null): Promise<void>;
  /**
   * Asks for a topic's presence (spec §15.3): at most `limit` members after `cursor` (0: the occupancy
   * alone). Resolves with the broker's answer whatever its code; rejects when it cannot be asked
   * (`PresenceNotNegotiated`), the connection is lost, or after `timeoutMs`. Long-poll asks `GET /presence`
   * (longpoll §6) and gives its refusals as the answer's code.
   */
  presence(topic: string, limit: number, cursor: string | null, timeoutMs: number): Promise<PresenceReplyFrame>;
  /**
   * Ends a subscription on the broker. `again`: the sid is subscribed again at once (a delta failed), so its deltas
   * still in flight are dropped until a full message comes.
   */
  unsubscribe(sid: number, again?: boolean): Promise<void>;
  /**
   * Takes a publication: it resolves or rejects it when sent. Returns false when the transport is gone
   * (the client keeps it for the next connection).
   */
  publish(p: PendingPublish): boolean;
  /** Resolves when everything sent before has been processed by the broker. */
  flush(): Promise<void>;
  /** Publications taken but not sent when the transport was lost (to send again on the next one). */
  takeUnsent(): PendingPublish[];
  /** Closes on purpose (no `lost` event). */
  close(): Promise<void>;
}

export interface TransportOptions {
  name: string;
  compression: boolean;
  /** Ask for headers (HELLO capability bit 1, long-poll `"headers": true`). */
  headers: boolean;
  /** Ask for the no-responders status (bit 2, `"noResponders": true`); only with `headers`. */
  noResponders: boolean;
  connectTimeoutMs: number;
  pingIntervalMs: number | undefined;
  maxBufferBytes: number;
  fetch: typeof fetch | undefined;
  /** Long-poll: first and longest wait between retries of a failing request. */
  retryDelayMs: number;
  maxRetryDelayMs: number;
  /** The credential for this connection (HELLO `auth`, long-poll `Authorization: Bearer`), or null. */
  auth: string | null;
  /** TLS (tls://, and wss:// through the `ws` package): PEM certificate(s) to trust besides the system's (e.g. a self-signed one). */
  ca: string | Uint8Array | undefined;
  /** The client info shown beside this connection's presence (HELLO `info`, spec §4.1, §15), or null for none. */
  info: string | null;
  /** Ask for deltas (HELLO capability bit 7, long-poll `"deltas": true`, spec §11.2). */
  deltas?: boolean;
  /** Ask for server_subscriptions (HELLO capability bit 6, spec §4.10; TCP and WebSocket). */
  serverSubscriptions?: boolean;
}

/**
 * The refusal of a queue group subscription on a connection whose broker did not grant queue groups (spec
 * §4.1 bit 4, §14): sent anyway, an older broker would take it as a plain subscription.
 */
export function queueGroupsNotNegotiated(pattern: string, queue: string): HeraldError {
  return new HeraldError(
    "QueueGroupsNotNegotiated",
    `Subscription to '${pattern}' in queue group '${queue}' refused: the broker did not grant queue groups (spec §4.1, §14), it would deliver every message to every member.`,
  );
}
