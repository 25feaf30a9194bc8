/**
 * Error codes of the wire protocol (spec §8) and the client's own error type.
 */

/** ERROR frame codes (spec §8), by name. */
export const ErrorCode = {
  MalformedFrame: 1,
  FrameTooLarge: 2,
  UnknownFrameType: 3,
  UnexpectedFrame: 4,
  HelloRequired: 5,
  UnsupportedVersion: 6,
  InvalidTopic: 7,
  TopicTooLong: 8,
  ReservedTopic: 9,
  DuplicateSubscription: 10,
  UnknownSubscription: 11,
  TooManySubscriptions: 12,
  SlowConsumer: 13,
  MessagesDropped: 14,
  HandshakeTimeout: 15,
  StaleConnection: 16,
  ShuttingDown: 17,
  TruncatedFrame: 18,
  AuthenticationFailed: 19,
  PermissionDenied: 20,
  InternalError: 21,
  DecompressionFailed: 22,
  TooManyConnections: 23,
  RateLimited: 24,
  TooManyTopics: 25,
  InvalidHeaders: 26,
  FrameTimeout: 27,
  FrameBudgetFull: 28,
  PresenceFull: 29,
  PresenceUnavailable: 30,
  HookUnavailable: 31,
  Disconnected: 32,
  Revoked: 33,
  Unsubscribed: 34,
} as const;

/** A spec §8 error name such as `"InvalidTopic"`. */
export type ProtocolErrorName = keyof typeof ErrorCode;

const namesByCode = new Map<number, string>(Object.entries(ErrorCode).map(([name, code]) => [code, name]));

/** The spec §8 name of a numeric ERROR code (`"Error42"` for a code this client does not know). */
export function errorCodeName(code: number): string {
  return namesByCode.get(code) ?? `Error${code}`;
}

/**
 * Client-side codes, beside the spec §8 names and the long-poll problem codes (`PollReplaced`,
 * `SessionExpired`, `SessionNotFound`, `MalformedRequest`, `BodyTooLarge`, `TooManySessions`, ...).
 */
export type ClientErrorCode =
  | "Closed" // the client was closed
  | "ConnectionLost" // the connection or session went away
  | "ConnectFailed" // the connection could not be opened
  | "Timeout" // a request or connection attempt took too long (a request's is a RequestTimeoutError)
  | "NoResponders" // a request reached no subscriber (NoRespondersError, spec §7)
  | "InvalidHeaders" // publish headers this client refuses before sending (spec §4.9), as the broker would
  | "HeadersNotNegotiated" // publish headers on a connection whose broker did not grant them (spec §4.1)
  | "QueueGroupsNotNegotiated" // a queue group subscription on a connection whose broker did not grant them (spec §4.1, §14)
  | "PresenceNotNegotiated" // a join, presence events or a presence query on a connection whose broker did not grant presence (spec §4.1, §15)
  | "InvalidOptions" // options that cannot go together (a queue group with a history resume, spec §4.3; join on a pattern with wildcards, §15.1)
  | "BufferFull" // too much waiting to be sent while disconnected
  | "HandlerFailed" // a subscription's handler threw (reported as an `error` event)
  | "HttpError" // an HTTP answer this client does not understand
  | "NoCredential"; // refreshCredential() without a `credential` option

/**
 * Every error this library raises. `code` is a spec §8 name (`"InvalidTopic"`), a long-poll problem code
 * (`"SessionExpired"`) or one of {@link ClientErrorCode}.
 */
export class HeraldError extends Error {
  /** Spec §8 name, long-poll problem code or client code. */
  readonly code: string;
  /** For an ERROR frame: whether the broker closes the connection after it. */
  readonly fatal: boolean;
  /** For `MessagesDropped`: how many messages were lost. */
  readonly count: number | bigint;
  /** For long-poll answers: the HTTP status. */
  readonly status: number | undefined;
  /** For an ERROR naming a subscription (spec §4.8: a credential refresh ended it): its sid; else 0. */
  readonly sid: number;
  /** For HTTP 503 answers: the broker's Retry-After, in milliseconds. */
  readonly retryAfterMs: number | undefined;

  constructor(
    code: string,
    message: string,
    details: { fatal?: boolean; count?: number | bigint; status?: number; retryAfterMs?: number; sid?: number; cause?: unknown } = {},
  ) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = "HeraldError";
    this.code = code;
    this.fatal = details.fatal ?? false;
    this.count = details.count ?? 0;
    this.status = details.status;
    this.sid = details.sid ?? 0;
    this.retryAfterMs = details.retryAfterMs;
  }
}

/** A frame that breaks the wire protocol; `code` is a spec §8 name (`MalformedFrame`, `FrameTooLarge`, ...). */
export class ProtocolError extends HeraldError {
  constructor(code: ProtocolErrorName, message: string) {
    super(code, message, { fatal: true });
    this.name = "ProtocolError";
  }
}

/**
 * A request that no subscriber received: the broker answered it at once with its no-responders status
 * (spec §7), instead of letting it wait for its timeout. Only when the connection asked for it (the
 * `noResponders` option, on by default) and the broker granted it.
 */
export class NoRespondersError extends HeraldError {
  constructor(
    /** The topic the request was published to. */
    readonly topic: string,
  ) {
    super("NoResponders", `No responders: the request on '${topic}' reached no subscriber.`);
    this.name = "NoRespondersError";
  }
}

/** A request that got no reply within its timeout. */
export class RequestTimeoutError extends HeraldError {
  constructor(
    /** The topic the request was published to. */
    readonly topic: string,
    /** The timeout that ran out, in milliseconds. */
    readonly timeoutMs: number,
  ) {
    super("Timeout", `No reply to the request on '${topic}' within ${timeoutMs} ms.`);
    this.name = "RequestTimeoutError";
  }
}

export function malformed(message: string): ProtocolError {
  return new ProtocolError("MalformedFrame", message);
}
