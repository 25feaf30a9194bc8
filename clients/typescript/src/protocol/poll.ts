/**
 * The binary long-poll answer (longpoll §2.1): MESSAGE frames back to back, numbered from the
 * `Herald-First-Sequence` header, `Herald-Count` of them, `Herald-Dropped` lost just before the first, and
 * `Herald-Gaps`, the sids that may have lost an unknown number just before the first (a cluster takeover).
 */
import { ProtocolError, malformed } from "./errors.js";
import { DEFAULT_MAX_FRAME, FrameType, decodeFrames, type MessageHeaders } from "./frames.js";

export interface PolledMessage {
  /** The message's sequence number in its session. */
  seq: number;
  sid: number;
  topic: string;
  replyTo: string | null;
  flags: number;
  /** As sent (still compressed when flags has the Zstd bit). */
  payload: Uint8Array;
  /** The header block (spec §4.9); absent when the message has none. */
  headers?: MessageHeaders;
}

export interface PollResult {
  messages: PolledMessage[];
  /** Messages the broker dropped (slow consumer, or shed between cluster nodes) between the poll's ack and the first message. */
  dropped: number;
  /** The sids that may have lost an unknown number of messages just before the first one (`Herald-Gaps`; longpoll §2). */
  gaps: number[];
  /** The `ack` for the next poll. */
  ack: number;
}

/** Anything with `get(name)`: a fetch `Headers` or a plain lookup. */
export interface HeaderSource {
  get(name: string): string | null;
}

/** A `Herald-*` number (longpoll §2.1): decimal digits and nothing else (no sign, exponent, `0x` or spaces). */
function headerNumber(headers: HeaderSource, name: string): number | null {
  const text = headers.get(name);
  if (text === null) return null;
  const value = /^[0-9]+$/.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(value)) throw malformed(`Header ${name} is not a sequence number: '${text}'.`);
  return value;
}

/**
 * `Herald-Gaps` (longpoll §2.1): sids 1 to 4294967295 in decimal, without sign or leading zero, separated by a
 * comma and nothing else (`1,3`). Anything else is a malformed answer: a sid misread would tell the wrong
 * subscription it lost messages.
 */
function gapSids(text: string | null): number[] {
  if (text === null) return [];
  return text.split(",").map((sid) => {
    const value = /^[1-9][0-9]*$/.test(sid) ? Number(sid) : NaN;
    if (!(value <= 0xffffffff)) throw malformed(`Header Herald-Gaps is not a list of sids: '${text}'.`);
    return value;
  });
}

/**
 * Reads a 200 answer to `GET .../messages?ack=<ack>`. Without the `Herald-*` headers (a proxy that drops
 * them) the messages are taken to follow `ack` with no gap.
 */
export function parsePollBody(ack: number, headers: HeaderSource, body: Uint8Array, maxFrame = DEFAULT_MAX_FRAME): PollResult {
  const dropped = headerNumber(headers, "Herald-Dropped") ?? 0;
  const first = headerNumber(headers, "Herald-First-Sequence") ?? ack + dropped + 1;
  const count = headerNumber(headers, "Herald-Count");
  const gaps = gapSids(headers.get("Herald-Gaps"));
  const frames = decodeFrames(body, maxFrame);
  if (count !== null && count !== frames.length) {
    throw malformed(`Herald-Count says ${count} messages, the body holds ${frames.length}.`);
  }
  const messages = frames.map((frame, i): PolledMessage => {
    if (frame.type !== FrameType.Message) {
      throw new ProtocolError("UnexpectedFrame", `A poll body holds a frame of type ${frame.type}, not MESSAGE.`);
    }
    const message: PolledMessage = { seq: first + i, sid: frame.sid, topic: frame.topic, replyTo: frame.replyTo, flags: frame.flags, payload: frame.payload };
    if (frame.headers !== undefined) message.headers = frame.headers;
    return message;
  });
  // The next ack is first + count - 1, also with no message: an answer of loss marks alone moves past them (longpoll §2).
  const hasFirst = headers.get("Herald-First-Sequence") !== null;
  return { messages, dropped, gaps, ack: hasFirst ? Math.max(ack, first + messages.length - 1) : messages.length > 0 ? first + messages.length - 1 : ack };
}
