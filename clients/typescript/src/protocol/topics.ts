/**
 * Topic and pattern rules (spec §5): dot-separated non-empty tokens of printable ASCII (0x21-0x7E) other
 * than '.', '*' and '>'; in a pattern a whole token may be '*' (one token) or, last, '>' (the rest).
 * The client checks them before sending: over TCP a bad topic is a fatal error that closes the connection.
 */
import { HeraldError } from "./errors.js";

/** The broker's default `max_topic` (spec §9). */
export const DEFAULT_MAX_TOPIC = 256;

const utf8 = new TextEncoder();

export type TopicError = "InvalidTopic" | "TopicTooLong" | "ReservedTopic";

function validate(value: string, maxLength: number, wildcards: boolean): TopicError | null {
  const bytes = utf8.encode(value);
  if (bytes.length > maxLength) return "TopicTooLong";
  if (bytes.length === 0) return "InvalidTopic";
  let start = 0;
  for (let i = 0; i <= bytes.length; i++) {
    if (i < bytes.length && bytes[i] !== 0x2e) continue;
    const len = i - start;
    if (len === 0) return "InvalidTopic"; // leading, trailing or double dot
    const first = bytes[start]!;
    if (len === 1 && (first === 0x2a || first === 0x3e)) {
      if (!wildcards) return "InvalidTopic";
      if (first === 0x3e && i !== bytes.length) return "InvalidTopic"; // '>' must be last
    } else {
      for (let j = start; j < i; j++) {
        const b = bytes[j]!;
        if (b < 0x21 || b > 0x7e || b === 0x2a || b === 0x3e) return "InvalidTopic";
      }
    }
    start = i + 1;
  }
  return null;
}

/** The spec §8 error a publish topic would get, or `null` when it is valid (reserved `$` topics included). */
export function validateTopic(topic: string, maxLength = DEFAULT_MAX_TOPIC): "InvalidTopic" | "TopicTooLong" | null {
  return validate(topic, maxLength, false) as "InvalidTopic" | "TopicTooLong" | null;
}

/** The spec §8 error a subscription pattern would get, or `null` when it is valid. */
export function validatePattern(pattern: string, maxLength = DEFAULT_MAX_TOPIC): "InvalidTopic" | "TopicTooLong" | null {
  return validate(pattern, maxLength, true) as "InvalidTopic" | "TopicTooLong" | null;
}

/** Whether a topic belongs to the broker (first token starts with `$`): clients may not publish there. */
export function isReservedTopic(topic: string): boolean {
  return topic.startsWith("$");
}

/** Whether `topic` matches `pattern` (both assumed valid), as the broker's router decides. */
export function topicMatches(pattern: string, topic: string): boolean {
  const p = pattern.split(".");
  const t = topic.split(".");
  for (let i = 0; i < p.length; i++) {
    const token = p[i]!;
    if (token === ">") return t.length > i;
    if (i >= t.length) return false;
    if (token !== "*" && token !== t[i]) return false;
  }
  return p.length === t.length;
}

function describe(code: TopicError, value: string, maxLength: number): string {
  switch (code) {
    case "TopicTooLong":
      return `Topic '${value.slice(0, 64)}...' is longer than the limit of ${maxLength} bytes.`;
    case "ReservedTopic":
      return `Topic '${value}' is reserved for the broker ('$' prefix).`;
    default:
      return `Topic '${value}' is not valid (spec §5: dot-separated non-empty tokens of printable ASCII; '*' and '>' only as whole tokens of a pattern, '>' last).`;
  }
}

/** Throws a {@link HeraldError} unless `topic` may be published to. */
export function checkPublishTopic(topic: string, maxLength: number): void {
  if (typeof topic !== "string") throw new HeraldError("InvalidTopic", "The topic must be a string.");
  const error = validateTopic(topic, maxLength) ?? (isReservedTopic(topic) ? "ReservedTopic" : null);
  if (error) throw new HeraldError(error, describe(error, topic, maxLength));
}

/** Throws a {@link HeraldError} unless `replyTo` is a valid reply topic (`$` allowed, spec §4.5). */
export function checkReplyTo(replyTo: string, maxLength: number): void {
  if (typeof replyTo !== "string") throw new HeraldError("InvalidTopic", "replyTo must be a string.");
  const error = validateTopic(replyTo, maxLength);
  if (error) throw new HeraldError(error, describe(error, replyTo, maxLength));
}

/** Throws a {@link HeraldError} unless `topic` is one topic name (no wildcards; `$` allowed: the broker judges it). */
export function checkTopicName(topic: string, maxLength: number): void {
  if (typeof topic !== "string") throw new HeraldError("InvalidTopic", "The topic must be a string.");
  const error = validateTopic(topic, maxLength);
  if (error) throw new HeraldError(error, describe(error, topic, maxLength));
}

/** Throws a {@link HeraldError} unless `pattern` is a valid subscription pattern. */
export function checkPattern(pattern: string, maxLength: number): void {
  if (typeof pattern !== "string") throw new HeraldError("InvalidTopic", "The pattern must be a string.");
  const error = validatePattern(pattern, maxLength);
  if (error) throw new HeraldError(error, describe(error, pattern, maxLength));
}

/** Longest queue group name, in bytes (spec §4.3). */
export const MAX_QUEUE_NAME_BYTES = 64;

/** Whether `queue` is a valid queue group name (spec §4.3, §14): 1 to 64 printable ASCII characters other than '.', '*' and '>'. */
export function isValidQueueName(queue: string): boolean {
  if (typeof queue !== "string" || queue.length === 0 || queue.length > MAX_QUEUE_NAME_BYTES) return false;
  for (let i = 0; i < queue.length; i++) {
    const c = queue.charCodeAt(i); // anything outside ASCII is refused, so characters are bytes here
    if (c < 0x21 || c > 0x7e || c === 0x2e || c === 0x2a || c === 0x3e) return false;
  }
  return true;
}

/**
 * Throws a {@link HeraldError} (`InvalidTopic`, as the broker would answer, spec §4.3) unless `queue` is a
 * valid queue group name.
 */
export function checkQueueName(queue: string): void {
  if (isValidQueueName(queue)) return;
  const shown = typeof queue === "string" ? `'${queue.slice(0, 80)}'` : `of type ${typeof queue}`;
  throw new HeraldError(
    "InvalidTopic",
    `Queue group name ${shown} is not valid (spec §4.3: 1 to ${MAX_QUEUE_NAME_BYTES} bytes of printable ASCII other than '.', '*' and '>').`,
  );
}
