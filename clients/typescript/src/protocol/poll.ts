/**
 * The binary long-poll answer (longpoll §2.1): MESSAGE frames back to back, numbered from the
 * `Herald-First-Sequence` header, `Herald-Count` of them, `Herald-Dropped` lost just before the first.
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
  /** Messages the broker dropped (slow consumer) between the poll's ack and the first message. */
  dropped: number;
  /** The `ack` for the next poll. */
  ack: number;
}

/** Anything with `get(name)`: a fetch `Headers` or a plain lookup. */
export interface HeaderSource {
  get(name: string): string | null;
}

function headerNumber(headers: HeaderSource, name: string): number | null {
  const text = headers.get(name);
  if (text === null) return null;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 0) throw malformed(`Header ${name} is not a sequence number: '${text}'.`);
  return value;
}

/**
 * Reads a 200 answer to `GET .../messages?ack=<ack>`. Without the `Herald-*` headers (a proxy that drops
 * them) the messages are taken to follow `ack` with no gap.
 */
export function parsePollBody(ack: number, headers: HeaderSource, body: Uint8Array, maxFrame = DEFAULT_MAX_FRAME): PollResult {
  const dropped = headerNumber(headers, "Herald-Dropped") ?? 0;
  const first = headerNumber(headers, "Herald-First-Sequence") ?? ack + dropped + 1;
  const count = headerNumber(headers, "Herald-Count");
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
  return { messages, dropped, ack: messages.length > 0 ? first + messages.length - 1 : ack };
}
