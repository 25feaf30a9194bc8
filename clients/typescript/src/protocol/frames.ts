/**
 * Frames of the Herald wire protocol, version 1 (protocol-spec/README.md): encoders (MessagePack through
 * `@msgpack/msgpack`, which writes the smallest encoding of every value, as the reference encoder does),
 * a strict decoder for frame bodies and a streaming frame reader.
 */
import { Encoder } from "@msgpack/msgpack";
import { HeraldError, ProtocolError, malformed } from "./errors.js";
import { MsgReader } from "./reader.js";

/** The protocol version this library speaks (spec §4.1). */
export const PROTOCOL_VERSION = 1;
/** Bytes of the length prefix (spec §2). */
export const LENGTH_PREFIX_SIZE = 4;
/** Longest HELLO client name, in UTF-8 bytes (spec §4.1). */
export const MAX_CLIENT_NAME_BYTES = 128;
/** Most entries of the WELCOME limits map (spec §4.2). */
export const MAX_LIMITS = 256;
/** The broker's default max frame size (spec §9). */
export const DEFAULT_MAX_FRAME = 1024 * 1024;

/** Frame types (spec §3). */
export const FrameType = {
  Hello: 1,
  Welcome: 2,
  Subscribe: 3,
  Unsubscribe: 4,
  Publish: 5,
  Message: 6,
  Ping: 7,
  Pong: 8,
  Error: 9,
  Presence: 10,
  PresenceReply: 11,
  Subscribed: 12,
} as const;
export type FrameTypeValue = (typeof FrameType)[keyof typeof FrameType];

/** HELLO/WELCOME capability bits (spec §4.1). */
export const Capabilities = { None: 0, Zstd: 1, Headers: 2, NoResponders: 4, History: 8, QueueGroups: 16, Presence: 32, ServerSubscriptions: 64, Deltas: 128 } as const;
/**
 * A header block (spec §4.9): keys in encoded order, each with one or more values. Pairs, not an object:
 * an object would reorder keys that look like integers.
 */
export type MessageHeaders = Array<[key: string, values: string[]]>;
/** Longest header key, in bytes (spec §4.9). */
export const MAX_HEADER_KEY_BYTES = 256;
/** Prefix of the header keys only the broker sets (ASCII case-insensitive, spec §4.9). */
export const RESERVED_HEADER_PREFIX = "Herald-";
/** Longest history epoch, in UTF-8 bytes (spec §4.3, §13). */
export const MAX_EPOCH_BYTES = 64;
/**
 * A position in a topic's history (spec §13): the offset of a message in its topic (counted from 1; 0 is
 * "before the first") and the epoch naming the history that holds it. Meaningful only with its epoch. The
 * offset is a `bigint` only above 2^53-1 (the encoder takes either).
 */
export interface HistoryPosition {
  readonly offset: number | bigint;
  readonly epoch: string;
}
/**
 * SUBSCRIBE option bits (spec §4.3): no echo; join (be present on the topic, §15.1); presence events (receive
 * its join and leave events, §15.2). Join and presence events need the presence capability and one topic.
 */
export const SubscribeOptions = { None: 0, NoEcho: 1, Join: 2, PresenceEvents: 4, Delta: 8 } as const;
/** The broker's default `max_presence_info`: the longest HELLO `info`, in UTF-8 bytes (spec §4.1, §9). */
export const DEFAULT_MAX_PRESENCE_INFO_BYTES = 256;
/** Most members one PRESENCE_REPLY lists: a larger `limit` is served as this (spec §15.3). */
export const MAX_PRESENCE_PAGE = 1000;
/** One member of a topic's presence (spec §15.1): its client id, identity and client info. */
export interface PresenceEntry {
  /** The member's client id: opaque, unique among the broker's connections while it lives. Never its address. */
  readonly client: string;
  /** Its identity (a token's name, a JWT's `sub`); `""` when authentication is off. */
  readonly identity: string;
  /** The client info it chose (HELLO `info`), or `null`. */
  readonly info: string | null;
}
/** PUBLISH/MESSAGE flag bits (spec §4.5). */
export const PayloadFlags = { None: 0, Zstd: 1, Delta: 2 } as const;

export interface HelloFrame {
  type: 1;
  version: number;
  clientName: string;
  capabilities: number;
  auth: string | null;
  /** The client info shown beside this connection's presence (spec §4.1 sixth element, §15); `null` when nil or absent. */
  info: string | null;
}
export interface WelcomeFrame {
  type: 2;
  version: number;
  serverName: string;
  /** A `bigint` only above 2^53-1. */
  connectionId: number | bigint;
  capabilities: number;
  /** Integer limits by key (spec §4.2); a value is a `bigint` only above 2^53-1. */
  limits: Record<string, number | bigint>;
  /** This client's part of the inbox space (spec §4.2, §7); `null` from a broker that sends none. */
  inboxPrefix: string | null;
}
export interface SubscribeFrame {
  type: 3;
  sid: number;
  pattern: string;
  options: number;
  /** The position to resume after (spec §4.3 `since`, §13); absent when the frame has none or a nil one. */
  since?: HistoryPosition;
  /** The queue group the subscription joins (spec §4.3 `queue`, §14); absent when the frame has none, a nil or an empty one. */
  queue?: string;
}
export interface UnsubscribeFrame {
  type: 4;
  sid: number;
}
export interface PublishFrame {
  type: 5;
  topic: string;
  replyTo: string | null;
  flags: number;
  payload: Uint8Array;
  /** The header block (spec §4.9); absent when the frame has none. */
  headers?: MessageHeaders;
}
export interface MessageFrame {
  type: 6;
  sid: number;
  topic: string;
  replyTo: string | null;
  flags: number;
  payload: Uint8Array;
  /** The header block (spec §4.9), as published; absent when the message has none. */
  headers?: MessageHeaders;
}
export interface PingFrame {
  type: 7;
}
export interface PongFrame {
  type: 8;
}
export interface ErrorFrame {
  type: 9;
  code: number;
  fatal: boolean;
  message: string;
  /** A `bigint` only above 2^53-1. */
  count: number | bigint;
  /** The subscription this ERROR ended (spec §4.8: a credential refresh revoked it), or 0. */
  sid: number;
  /**
   * The seventh element (spec §4.8): on a `MessagesDropped` with count 0, the subscriptions that may have lost an
   * unknown number of messages (a cluster shard's outage); null when absent.
   */
  sids: number[] | null;
}
export interface PresenceFrame {
  type: 10;
  requestId: number;
  topic: string;
  /** How many members at most the answer lists; 0 asks for the occupancy alone. A `bigint` only above 2^53-1. */
  limit: number | bigint;
  /** The previous answer's `next`, or `null` for the first page. */
  cursor: string | null;
}
export interface PresenceReplyFrame {
  type: 11;
  requestId: number;
  /** 0 when answered, else the spec §8 code of why not (`PermissionDenied`, `InvalidTopic`, `PresenceUnavailable`). */
  code: number;
  /** The topic's number of members. A `bigint` only above 2^53-1. */
  members: number | bigint;
  /** The number of distinct identities among them. A `bigint` only above 2^53-1. */
  identities: number | bigint;
  /** Up to `limit` members, ordered by `client` (bytewise), after the cursor. */
  entries: PresenceEntry[];
  /** The cursor of the next page, or `null` when this page ends the list. */
  next: string | null;
}
/** SUBSCRIBED (spec §4.10): the server made subscription `sid` (from 2^31 up) to `pattern` for this client. */
export interface SubscribedFrame {
  type: 12;
  sid: number;
  pattern: string;
  /** SUBSCRIBE's option bits (spec §4.3). */
  options: number;
}
export type Frame =
  | HelloFrame
  | WelcomeFrame
  | SubscribeFrame
  | UnsubscribeFrame
  | PublishFrame
  | MessageFrame
  | PingFrame
  | PongFrame
  | ErrorFrame
  | PresenceFrame
  | PresenceReplyFrame
  | SubscribedFrame;

// ---------------------------------------------------------------------------------------------------------
// Encoding

const encoder = new Encoder({ useBigInt64: true, initialBufferSize: 4096 });
const utf8 = new TextEncoder();

function framed(body: Uint8Array): Uint8Array {
  const out = new Uint8Array(LENGTH_PREFIX_SIZE + body.length);
  new DataView(out.buffer).setUint32(0, body.length);
  out.set(body, LENGTH_PREFIX_SIZE);
  return out;
}

function encodeFrame(elements: unknown[]): Uint8Array {
  return framed(encoder.encodeSharedRef(elements));
}

function checkUint32(name: string, value: number): void {
  if (!Number.isInteger(value) || value < 0 || value > 0xffffffff) {
    throw new RangeError(`${name} must be an integer from 0 to 4294967295, got ${value}.`);
  }
}

/**
 * Checks an unsigned 64-bit value and returns it ready for the encoder: above 2^32-1 as a bigint, which
 * `@msgpack/msgpack` (with useBigInt64) writes as uint64 (a large `number` would become a float).
 */
function uint64(name: string, value: number | bigint): number | bigint {
  const ok =
    typeof value === "bigint" ? value >= 0n && value <= 0xffffffffffffffffn : Number.isSafeInteger(value) && value >= 0;
  if (!ok) throw new RangeError(`${name} must be an unsigned 64-bit integer, got ${value}.`);
  if (typeof value === "bigint") return value <= 0xffffffffn ? Number(value) : value;
  return value > 0xffffffff ? BigInt(value) : value;
}

/**
 * HELLO `[1, version, client_name, capabilities, auth]`, or with `info` (spec §4.1, §15: the client info
 * other clients see beside this connection's presence) `[1, version, client_name, capabilities, auth, info]`;
 * an `info` of `null` is sent as nil, `undefined` leaves the element out. Its length is the broker's to judge
 * (`max_presence_info`, default {@link DEFAULT_MAX_PRESENCE_INFO_BYTES} bytes; more closes the connection).
 */
export function encodeHello(
  clientName: string,
  capabilities = 0,
  auth: string | null = null,
  version = PROTOCOL_VERSION,
  info?: string | null,
): Uint8Array {
  checkUint32("version", version);
  checkUint32("capabilities", capabilities);
  if (utf8.encode(clientName).length > MAX_CLIENT_NAME_BYTES) {
    throw new RangeError(`The client name is longer than ${MAX_CLIENT_NAME_BYTES} UTF-8 bytes.`);
  }
  if (info !== undefined && info !== null && typeof info !== "string") throw new TypeError("info must be a string.");
  const items: unknown[] = [FrameType.Hello, version, clientName, capabilities, auth];
  if (info !== undefined) items.push(info);
  return encodeFrame(items);
}

/** WELCOME (server to client, spec §4.2); for tests and fake servers. */
export function encodeWelcome(
  serverName: string,
  connectionId: number | bigint,
  capabilities: number,
  limits: Record<string, number | bigint>,
  version = PROTOCOL_VERSION,
  inboxPrefix: string | null = null,
): Uint8Array {
  checkUint32("version", version);
  checkUint32("capabilities", capabilities);
  // A plain object keeps insertion order for name keys; @msgpack/msgpack writes it as a map.
  const map: Record<string, number | bigint> = {};
  for (const [key, value] of Object.entries(limits)) {
    Object.defineProperty(map, key, { value: uint64(`limit ${key}`, value), enumerable: true });
  }
  const items: unknown[] = [FrameType.Welcome, version, serverName, uint64("connectionId", connectionId), capabilities, map];
  if (inboxPrefix !== null) items.push(inboxPrefix);
  return encodeFrame(items);
}

/**
 * SUBSCRIBE `[3, sid, pattern, options]`, or `[3, sid, pattern, options, [offset, epoch]]` with `since`
 * (spec §4.3, §13: resume the topic's history after that position; `{ offset: 0, epoch: "" }` is "no
 * position yet: from now"). Only to a broker that granted headers (from any other it is `MalformedFrame`).
 * With a `queue` (spec §4.3, §14: join that queue group) the sixth element, `since` then nil:
 * `[3, sid, pattern, options, nil, queue]`; only to a broker that granted queue_groups, never together with
 * a `since` (the broker refuses both as `MalformedFrame`). An empty or absent `queue` is a plain subscription.
 * The queue name is not checked here (see `checkQueueName`).
 */
export function encodeSubscribe(
  sid: number,
  pattern: string,
  options = 0,
  since?: HistoryPosition | null,
  queue?: string | null,
): Uint8Array {
  checkUint32("sid", sid);
  checkUint32("options", options);
  const grouped = queue !== undefined && queue !== null && queue !== "";
  if (grouped && typeof queue !== "string") throw new TypeError("queue must be a string.");
  if (since === undefined || since === null) {
    if (grouped) return encodeFrame([FrameType.Subscribe, sid, pattern, options, null, queue]);
    return encodeFrame([FrameType.Subscribe, sid, pattern, options]);
  }
  if (grouped) {
    throw new RangeError("A SUBSCRIBE cannot name both a queue group and a since: a queue group has no position to resume (spec §4.3, §14).");
  }
  if (typeof since.epoch !== "string" || utf8.encode(since.epoch).length > MAX_EPOCH_BYTES) {
    throw new RangeError(`since.epoch must be a string of at most ${MAX_EPOCH_BYTES} UTF-8 bytes.`);
  }
  return encodeFrame([FrameType.Subscribe, sid, pattern, options, [uint64("since.offset", since.offset), since.epoch]]);
}

/** UNSUBSCRIBE `[4, sid]` (spec §4.4). */
export function encodeUnsubscribe(sid: number): Uint8Array {
  checkUint32("sid", sid);
  return encodeFrame([FrameType.Unsubscribe, sid]);
}

/** Appends a header block to a frame of fewer than 15 elements: one more in its fixarray header, the block after it. */
function withHeaders(frame: Uint8Array, headers: MessageHeaders | undefined): Uint8Array {
  if (headers === undefined) return frame;
  const block = encodeHeaderBlock(headers);
  const out = new Uint8Array(frame.length + block.length);
  out.set(frame);
  out.set(block, frame.length);
  out[LENGTH_PREFIX_SIZE]! += 1;
  new DataView(out.buffer).setUint32(0, out.length - LENGTH_PREFIX_SIZE);
  return out;
}

/** A header block (spec §4.9) in the given key order; keys and values as MessagePack str, not checked here. */
export function encodeHeaderBlock(headers: MessageHeaders): Uint8Array {
  const parts: number[] = [];
  const header = (n: number, fix: number, bits: number, b16: number, b32: number): void => {
    if (n < 1 << bits) parts.push(fix | n);
    else if (n <= 0xffff) parts.push(b16, n >> 8, n & 0xff);
    else parts.push(b32, n >>> 24, (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
  };
  const str = (s: string): void => {
    const bytes = utf8.encode(s);
    if (bytes.length < 32) parts.push(0xa0 | bytes.length);
    else if (bytes.length <= 0xff) parts.push(0xd9, bytes.length);
    else header(bytes.length, 0, 0, 0xda, 0xdb);
    for (const b of bytes) parts.push(b);
  };
  header(headers.length, 0x80, 4, 0xde, 0xdf);
  for (const [key, values] of headers) {
    str(key);
    header(values.length, 0x90, 4, 0xdc, 0xdd);
    for (const value of values) str(value);
  }
  return Uint8Array.from(parts);
}

/**
 * PUBLISH `[5, topic, reply_to, flags, payload, headers?]` (spec §4.5, §4.9). An empty `replyTo` is written as
 * nil; `headers` (even an empty list) is sent as the sixth element, only to a broker that granted headers.
 */
export function encodePublish(
  topic: string,
  replyTo: string | null,
  flags: number,
  payload: Uint8Array,
  headers?: MessageHeaders,
): Uint8Array {
  checkUint32("flags", flags);
  return withHeaders(encodeFrame([FrameType.Publish, topic, replyTo === "" ? null : replyTo, flags, payload]), headers);
}

/** MESSAGE (server to client, spec §4.6) with the sid always as uint32 (`0xce`), as the broker writes it. */
export function encodeMessage(
  sid: number,
  topic: string,
  replyTo: string | null,
  flags: number,
  payload: Uint8Array,
  headers?: MessageHeaders,
): Uint8Array {
  checkUint32("sid", sid);
  checkUint32("flags", flags);
  // 0xffffffff is always written as 0xce + 4 bytes: encode with it, then stamp the real sid in.
  const frame = withHeaders(encodeFrame([FrameType.Message, 0xffffffff, topic, replyTo === "" ? null : replyTo, flags, payload]), headers);
  new DataView(frame.buffer, frame.byteOffset).setUint32(7, sid);
  return frame;
}

export function encodePing(): Uint8Array {
  return encodeFrame([FrameType.Ping]);
}

export function encodePong(): Uint8Array {
  return encodeFrame([FrameType.Pong]);
}

/** ERROR (server to client, spec §4.8); for tests and fake servers. */
export function encodeError(code: number, fatal: boolean, message: string, count: number | bigint = 0, sid = 0, sids: number[] | null = null): Uint8Array {
  checkUint32("code", code);
  checkUint32("sid", sid);
  for (const s of sids ?? []) checkUint32("sids", s);
  const items: unknown[] = [FrameType.Error, code, fatal, message, uint64("count", count)];
  if (sid !== 0 || sids !== null) items.push(sid);
  if (sids !== null) items.push(sids);
  return encodeFrame(items);
}

/** SUBSCRIBED `[12, sid, pattern, options]` (server to client, spec §4.10); for tests and fake servers. */
export function encodeSubscribed(sid: number, pattern: string, options = 0): Uint8Array {
  checkUint32("sid", sid);
  checkUint32("options", options);
  return encodeFrame([FrameType.Subscribed, sid, pattern, options]);
}

/**
 * PRESENCE `[10, request_id, topic, limit, cursor]` (spec §15.3): ask for a topic's members, at most `limit`
 * of them after `cursor` (nil for the first page); `limit` 0 asks for the occupancy alone. Only to a broker
 * that granted presence (from any other client it is `UnexpectedFrame`). The topic is not checked here.
 */
export function encodePresence(requestId: number, topic: string, limit: number | bigint, cursor: string | null = null): Uint8Array {
  checkUint32("requestId", requestId);
  if (cursor !== null && typeof cursor !== "string") throw new TypeError("cursor must be a string or null.");
  return encodeFrame([FrameType.Presence, requestId, topic, uint64("limit", limit), cursor]);
}

/**
 * PRESENCE_REPLY `[11, request_id, code, members, identities, [[client, identity, info], ...], next]` (server
 * to client, spec §15.3); for tests and fake servers.
 */
export function encodePresenceReply(
  requestId: number,
  code: number,
  members: number | bigint,
  identities: number | bigint,
  entries: readonly PresenceEntry[] = [],
  next: string | null = null,
): Uint8Array {
  checkUint32("requestId", requestId);
  checkUint32("code", code);
  const rows = entries.map((e) => [e.client, e.identity, e.info]);
  return encodeFrame([FrameType.PresenceReply, requestId, code, uint64("members", members), uint64("identities", identities), rows, next]);
}

// ---------------------------------------------------------------------------------------------------------
// Decoding

function require(count: number, needed: number, frame: string): void {
  if (count < needed) throw malformed(`${frame} needs ${needed} elements, got ${count}.`);
}

function skipRest(r: MsgReader, elements: number): void {
  for (let i = 0; i < elements; i++) r.skip(0);
  if (!r.atEnd) throw malformed("Bytes follow the frame's MessagePack array.");
}

function nonNil<T>(value: T | null, field: string): T {
  if (value === null) throw malformed(`Field ${field} may not be nil.`);
  return value;
}

/** Reads the array header and frame type of a body. */
export function decodeHeader(r: MsgReader): { type: FrameTypeValue; count: number } {
  const count = r.readArrayHeader();
  if (count < 1) throw malformed("Frame body is an empty array; its first element must be the frame type.");
  const type = r.readUint32();
  if (type === 0 || type > FrameType.Subscribed) {
    throw new ProtocolError("UnknownFrameType", `Unknown frame type ${type}.`);
  }
  return { type: type as FrameTypeValue, count };
}

/**
 * Decodes one frame body (the bytes after the length prefix). Throws a {@link ProtocolError}
 * (`MalformedFrame`, `UnknownFrameType`) for anything the spec refuses. Payloads are views into `body`.
 */
export function decodeFrame(body: Uint8Array): Frame {
  const r = new MsgReader(body);
  const { type, count } = decodeHeader(r);
  switch (type) {
    case FrameType.Hello: {
      require(count, 5, "HELLO");
      const version = r.readUint32();
      const clientName = nonNil(r.readString(), "client_name");
      if (utf8.encode(clientName).length > MAX_CLIENT_NAME_BYTES) {
        throw malformed(`HELLO client_name is longer than ${MAX_CLIENT_NAME_BYTES} bytes.`);
      }
      const capabilities = r.readUint32();
      const auth = r.readString();
      let info: string | null = null;
      if (count > 5) {
        info = r.readString();
        if (info !== null && utf8.encode(info).length > DEFAULT_MAX_PRESENCE_INFO_BYTES) {
          throw malformed(`HELLO info is longer than ${DEFAULT_MAX_PRESENCE_INFO_BYTES} bytes.`);
        }
      }
      skipRest(r, count - 6);
      return { type, version, clientName, capabilities, auth, info };
    }
    case FrameType.Welcome: {
      require(count, 6, "WELCOME");
      const version = r.readUint32();
      const serverName = nonNil(r.readString(), "server_name");
      const connectionId = r.readUnsigned();
      const capabilities = r.readUint32();
      const pairs = r.readMapHeader();
      if (pairs > MAX_LIMITS) throw malformed(`WELCOME limits map has more than ${MAX_LIMITS} entries.`);
      const limits: Record<string, number | bigint> = Object.create(null);
      for (let i = 0; i < pairs; i++) {
        const key = nonNil(r.readString(), "limits key");
        if (r.nextIsInteger()) limits[key] = r.readUnsigned();
        else r.skip(0); // a later version's non-integer limit: ignored
      }
      let inboxPrefix: string | null = null;
      if (count > 6) {
        if (r.nextIsString()) inboxPrefix = r.readString();
        else r.skip(0); // nil, or a later version's shape: no prefix
      }
      skipRest(r, count - 7);
      return { type, version, serverName, connectionId, capabilities, limits: { ...limits }, inboxPrefix };
    }
    case FrameType.Subscribe: {
      require(count, 4, "SUBSCRIBE");
      const sid = r.readUint32();
      const pattern = nonNil(r.readString(), "pattern");
      const options = r.readUint32();
      const frame: SubscribeFrame = { type, sid, pattern, options };
      if (count > 4) {
        if (r.nextIsNil()) r.skip(0); // a nil since is the same as none
        else frame.since = readSince(r);
      }
      if (count > 5) {
        // queue (spec §4.3): nil or a str; nil and "" are no group. Its name's rules are the broker's to judge.
        if (!r.nextIsNil() && !r.nextIsString()) throw malformed("SUBSCRIBE queue must be nil or a MessagePack str.");
        const queue = r.readString();
        if (queue !== null && queue !== "") frame.queue = queue;
      }
      skipRest(r, count - 6);
      return frame;
    }
    case FrameType.Unsubscribe: {
      require(count, 2, "UNSUBSCRIBE");
      const sid = r.readUint32();
      skipRest(r, count - 2);
      return { type, sid };
    }
    case FrameType.Publish: {
      require(count, 5, "PUBLISH");
      const env = readEnvelope(r, PayloadFlags.Zstd);
      if (count === 5) {
        skipRest(r, 0);
        return { type, ...env };
      }
      const headers = readHeaders(r);
      skipRest(r, count - 6);
      return { type, ...env, headers };
    }
    case FrameType.Message: {
      require(count, 6, "MESSAGE");
      const sid = r.readUint32();
      const env = readEnvelope(r, PayloadFlags.Zstd | PayloadFlags.Delta);
      if (count === 6) {
        skipRest(r, 0);
        return { type, sid, ...env };
      }
      const headers = readHeaders(r);
      skipRest(r, count - 7);
      return { type, sid, ...env, headers };
    }
    case FrameType.Ping:
      skipRest(r, count - 1);
      return { type };
    case FrameType.Pong:
      skipRest(r, count - 1);
      return { type };
    case FrameType.Error: {
      require(count, 5, "ERROR");
      const code = r.readUint32();
      const fatal = r.readBool();
      const message = nonNil(r.readString(), "message");
      const errorCount = r.readUnsigned();
      let sid = 0;
      if (count > 5) {
        if (r.nextIsInteger()) sid = r.readUint32();
        else r.skip(0); // nil, or a later version's shape: no sid
      }
      let sids: number[] | null = null;
      if (count > 6) {
        if (r.peekIsArray()) sids = readSids(r);
        else r.skip(0); // nil, or a later version's shape: no sids
      }
      skipRest(r, count - 7);
      return { type, code, fatal, message, count: errorCount, sid, sids };
    }
    case FrameType.Presence: {
      require(count, 5, "PRESENCE");
      const requestId = r.readUint32();
      const topic = nonNil(r.readString(), "topic");
      const limit = r.readUnsigned();
      const cursor = r.readString();
      skipRest(r, count - 5);
      return { type, requestId, topic, limit, cursor };
    }
    case FrameType.PresenceReply: {
      require(count, 7, "PRESENCE_REPLY");
      const requestId = r.readUint32();
      const code = r.readUint32();
      const members = r.readUnsigned();
      const identities = r.readUnsigned();
      const entries = readPresenceEntries(r);
      const next = r.readString();
      skipRest(r, count - 7);
      return { type, requestId, code, members, identities, entries, next };
    }
    case FrameType.Subscribed: {
      require(count, 4, "SUBSCRIBED");
      const sid = r.readUint32();
      const pattern = nonNil(r.readString(), "pattern");
      const options = r.readUint32();
      if (sid === 0) throw malformed("SUBSCRIBED sid is 0.");
      skipRest(r, count - 4);
      return { type, sid, pattern, options };
    }
  }
}

/**
 * ERROR's seventh element (spec §4.8): sids, each an integer from 1 to 2^32-1; anything else in it is `MalformedFrame`
 * (a misread sid would tell the wrong subscription it lost messages).
 */
function readSids(r: MsgReader): number[] {
  const count = r.readArrayHeader();
  const sids: number[] = [];
  for (let i = 0; i < count; i++) {
    const sid = r.readUint32();
    if (sid === 0) throw malformed("ERROR names sid 0 among its sids.");
    sids.push(sid);
  }
  return sids;
}

/**
 * PRESENCE_REPLY's entries (spec §15.3): an array of `[client: str, identity: str, info: nil | str]`. An
 * entry's elements beyond those three are skipped, as a frame's are (spec §2).
 */
function readPresenceEntries(r: MsgReader): PresenceEntry[] {
  const count = r.readArrayHeader();
  const entries: PresenceEntry[] = [];
  for (let i = 0; i < count; i++) {
    const elements = r.readArrayHeader();
    if (elements < 3) throw malformed(`A PRESENCE_REPLY entry needs 3 elements (client, identity, info), got ${elements}.`);
    const client = nonNil(r.readString(), "entry client");
    const identity = nonNil(r.readString(), "entry identity");
    const info = r.readString();
    for (let e = 3; e < elements; e++) r.skip(2);
    entries.push({ client, identity, info });
  }
  return entries;
}

/** Topic, reply_to, flags and payload; `allowed` are the flag bits the frame may carry (MESSAGE: zstd or delta, never both; spec §4.5, §4.6). */
function readEnvelope(r: MsgReader, allowed: number): { topic: string; replyTo: string | null; flags: number; payload: Uint8Array } {
  const topic = nonNil(r.readString(), "topic");
  const replyTo = r.readString();
  const flags = r.readUint32();
  if ((flags & ~allowed) !== 0 || flags === (PayloadFlags.Zstd | PayloadFlags.Delta)) {
    throw malformed(`Payload flags 0x${flags.toString(16)} set reserved bits.`);
  }
  const payload = nonNil(r.readBin(), "payload");
  return { topic, replyTo, flags, payload };
}

/** SUBSCRIBE's `since` (spec §4.3): exactly an array of an unsigned integer and a `str` of at most 64 bytes. */
function readSince(r: MsgReader): HistoryPosition {
  if (r.readArrayHeader() !== 2) throw malformed("SUBSCRIBE since must be an array of exactly [offset, epoch].");
  const offset = r.readUnsigned();
  if (!r.nextIsString()) throw malformed("SUBSCRIBE since epoch must be a MessagePack str.");
  const epoch = r.readString()!;
  if (utf8.encode(epoch).length > MAX_EPOCH_BYTES) throw malformed(`SUBSCRIBE since epoch is longer than ${MAX_EPOCH_BYTES} bytes.`);
  return { offset, epoch };
}

// RFC 9110 tchar: what an HTTP field name, and so a header key, is made of.
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/**
 * A header block (spec §4.9): a map of 1-256 byte token keys, unique ignoring ASCII case, each to an array
 * of one or more UTF-8 values without CR or LF. Any other shape is `MalformedFrame`. Keys under
 * {@link RESERVED_HEADER_PREFIX} are read like any other (the broker's own status uses them).
 */
function readHeaders(r: MsgReader): MessageHeaders {
  const keys = r.readMapHeader();
  const headers: MessageHeaders = [];
  const seen = new Set<string>();
  for (let i = 0; i < keys; i++) {
    if (!r.nextIsString()) throw malformed("A header key is not a MessagePack str.");
    const key = r.readString()!;
    if (!TOKEN.test(key) || key.length > MAX_HEADER_KEY_BYTES) {
      throw malformed(`Header key '${key.slice(0, 64)}' is not 1 to ${MAX_HEADER_KEY_BYTES} bytes of HTTP token characters.`);
    }
    const folded = key.toLowerCase(); // token characters are ASCII: this is ASCII case folding
    if (seen.has(folded)) throw malformed(`Header key '${key}' appears twice (keys are compared ignoring ASCII case).`);
    seen.add(folded);
    const count = r.readArrayHeader();
    if (count === 0) throw malformed(`Header '${key}' has no value; a key has one or more.`);
    const values: string[] = [];
    for (let v = 0; v < count; v++) {
      if (!r.nextIsString()) throw malformed(`A value of header '${key}' is not a MessagePack str.`);
      const value = r.readString()!;
      if (value.includes("\r") || value.includes("\n")) throw malformed(`A value of header '${key}' holds CR or LF.`);
      values.push(value);
    }
    headers.push([key, values]);
  }
  return headers;
}

// ---------------------------------------------------------------------------------------------------------
// Framing

/**
 * Splits a byte stream into frame bodies (spec §2). Push chunks as they arrive, then call {@link next}
 * until it returns `null` ("need more data"; nothing is consumed then). The length prefix is checked
 * against `maxFrame` as soon as its four bytes are here, before the body is waited for: an oversized
 * frame is `FrameTooLarge` and a zero length `MalformedFrame`. After an error the reader stays failed.
 * Bodies are views of the pushed chunks when a frame lies in one chunk; chunks are never written to.
 */
export class FrameReader {
  private chunks: Uint8Array[] = [];
  private offset = 0; // consumed bytes of chunks[0]
  private length = 0; // unconsumed bytes in all chunks
  private failure: HeraldError | null = null;

  constructor(public maxFrame: number = DEFAULT_MAX_FRAME) {}

  /** Bytes buffered and not yet returned as frames. */
  get buffered(): number {
    return this.length;
  }

  push(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    this.chunks.push(chunk);
    this.length += chunk.length;
  }

  /** The next whole frame body, or `null` when more data is needed. */
  next(): Uint8Array | null {
    if (this.failure) throw this.failure;
    if (this.length < LENGTH_PREFIX_SIZE) return null;
    const prefix = this.peek(LENGTH_PREFIX_SIZE);
    const size = ((prefix[0]! << 24) | (prefix[1]! << 16) | (prefix[2]! << 8) | prefix[3]!) >>> 0;
    if (size > this.maxFrame) {
      this.failure = new ProtocolError(
        "FrameTooLarge",
        `Frame of ${size} bytes is larger than the limit of ${this.maxFrame} bytes.`,
      );
      throw this.failure;
    }
    if (size === 0) {
      this.failure = malformed("Frame body length is 0.");
      throw this.failure;
    }
    if (this.length - LENGTH_PREFIX_SIZE < size) return null;
    this.consume(LENGTH_PREFIX_SIZE);
    const body = this.peek(size);
    this.consume(size);
    return body;
  }

  /** The first `n` unconsumed bytes (a view when they lie in one chunk, else a copy). */
  private peek(n: number): Uint8Array {
    const first = this.chunks[0]!;
    if (first.length - this.offset >= n) return first.subarray(this.offset, this.offset + n);
    const out = new Uint8Array(n);
    let filled = 0;
    let skip = this.offset;
    for (const chunk of this.chunks) {
      const take = Math.min(chunk.length - skip, n - filled);
      out.set(chunk.subarray(skip, skip + take), filled);
      filled += take;
      skip = 0;
      if (filled === n) break;
    }
    return out;
  }

  private consume(n: number): void {
    this.length -= n;
    while (n > 0) {
      const first = this.chunks[0]!;
      const left = first.length - this.offset;
      if (n < left) {
        this.offset += n;
        return;
      }
      n -= left;
      this.chunks.shift();
      this.offset = 0;
    }
  }
}

/** Decodes a whole buffer of frames back to back (a long-poll body); throws if it ends mid-frame. */
export function decodeFrames(bytes: Uint8Array, maxFrame = DEFAULT_MAX_FRAME): Frame[] {
  const reader = new FrameReader(maxFrame);
  reader.push(bytes);
  const frames: Frame[] = [];
  for (let body = reader.next(); body !== null; body = reader.next()) frames.push(decodeFrame(body));
  if (reader.buffered > 0) throw malformed(`The body ends with ${reader.buffered} bytes of an incomplete frame.`);
  return frames;
}
