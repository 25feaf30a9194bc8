/**
 * Message headers (spec §4.9) in the public API: what a publisher passes in (a plain record), the
 * read-only view a subscriber gets, and the checks that make a bad header block a thrown error here
 * instead of a broker's fatal ERROR that would close the connection.
 */
import { HeraldError } from "./protocol/errors.js";
import { MAX_HEADER_KEY_BYTES, RESERVED_HEADER_PREFIX, type MessageHeaders } from "./protocol/frames.js";
import type { PendingPublish } from "./transport.js";

/**
 * Headers to publish: each key (HTTP token characters, case kept) to one value or several, in the order
 * given. A received message's {@link HeraldHeaders} may be passed on as they are (without the broker's
 * `Herald-` keys, such as its history position).
 */
export type HeadersInit = Readonly<Record<string, string | readonly string[]>> | HeraldHeaders;

/**
 * The headers of a received message, read-only, keys in the order and case the publisher sent them.
 * Lookups ignore ASCII case, as HTTP field names do. A message without headers has an empty view.
 *
 * ```ts
 * msg.headers.get("content-type");   // first value, or null
 * msg.headers.getAll("X-Tag");       // every value, [] when absent
 * for (const [key, values] of msg.headers) console.log(key, values);
 * ```
 */
export class HeraldHeaders implements Iterable<[string, readonly string[]]> {
  /** The view of a message that has no headers (shared: a message without headers costs no allocation). */
  static readonly empty: HeraldHeaders = new HeraldHeaders([]);

  readonly #pairs: MessageHeaders;

  /** @internal Over the decoded block of a message (not copied). */
  constructor(pairs: MessageHeaders) {
    this.#pairs = pairs;
  }

  /** How many keys. */
  get size(): number {
    return this.#pairs.length;
  }

  #find(key: string): readonly string[] | undefined {
    const pairs = this.#pairs;
    for (let i = 0; i < pairs.length; i++) {
      const pair = pairs[i]!;
      if (pair[0].length === key.length && (pair[0] === key || pair[0].toLowerCase() === key.toLowerCase())) return pair[1];
    }
    return undefined;
  }

  /** The first value of `key` (ASCII case ignored), or `null` when the message has no such header. */
  get(key: string): string | null {
    return this.#find(key)?.[0] ?? null;
  }

  /** Every value of `key` (ASCII case ignored), in order; empty when the message has no such header. */
  getAll(key: string): readonly string[] {
    return this.#find(key) ?? [];
  }

  /** Whether the message has header `key` (ASCII case ignored). */
  has(key: string): boolean {
    return this.#find(key) !== undefined;
  }

  /** The keys, as published. */
  *keys(): IterableIterator<string> {
    for (const [key] of this.#pairs) yield key;
  }

  /** `[key, values]` pairs, as published. */
  *entries(): IterableIterator<[string, readonly string[]]> {
    for (const [key, values] of this.#pairs) yield [key, values];
  }

  [Symbol.iterator](): IterableIterator<[string, readonly string[]]> {
    return this.entries();
  }

  /** A plain object of the headers (`{"X-Tag": ["a", "b"]}`), e.g. for `JSON.stringify` or logging. */
  toJSON(): Record<string, string[]> {
    const out: Record<string, string[]> = {};
    for (const [key, values] of this.#pairs) Object.defineProperty(out, key, { value: [...values], enumerable: true });
    return out;
  }

  /** @internal The pairs, for passing a received message's headers on. */
  get pairs(): MessageHeaders {
    return this.#pairs;
  }
}

/** @internal A checked header block on its way out, with what the broker's limits are judged on. */
export interface OutgoingHeaders {
  pairs: MessageHeaders;
  /** Values over all keys (judged against `max_headers`). */
  values: number;
  /** Bytes of the encoded block (judged against `max_header_bytes`, and counted in the payload limit). */
  bytes: number;
  /** Whether the caller gave headers (false: only the trace context this client added). */
  user: boolean;
}

/** @internal What a connection's broker granted (WELCOME capabilities and limits, or the session answer). */
export interface HeaderGrant {
  headers: boolean;
  maxHeaders: number;
  maxHeaderBytes: number;
}

/** The spec's defaults (§9), for a broker that grants headers without announcing their limits. */
export const DEFAULT_MAX_HEADERS = 64;
export const DEFAULT_MAX_HEADER_BYTES = 8 * 1024;

// RFC 9110 tchar, as the broker judges keys (spec §4.9).
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const LONE_SURROGATE = /\p{Cs}/u;

function invalid(message: string): HeraldError {
  return new HeraldError("InvalidHeaders", `${message} (spec §4.9).`);
}

/**
 * @internal The caller's headers as wire pairs, checked as the broker would check their shape and keys:
 * token keys of 1-256 bytes, no key twice (ASCII case ignored), none under the reserved `Herald-` prefix,
 * one or more string values per key, no CR or LF, no unpaired surrogate (it would not arrive as sent).
 */
export function headerPairs(init: HeadersInit): MessageHeaders {
  if (init instanceof HeraldHeaders) {
    const pairs: MessageHeaders = [];
    for (const [key, values] of init.pairs) {
      // A received message's broker keys (its history position, spec §13, or a status) are not the
      // publisher's: passed on, they are left out (the broker stamps the new message's own).
      if (reserved(key)) continue;
      checkKey(key);
      pairs.push([key, [...values]]);
    }
    return pairs;
  }
  if (typeof init !== "object" || init === null) throw invalid("Headers are an object of keys to a string or an array of strings");
  const pairs: MessageHeaders = [];
  const seen = new Set<string>();
  for (const key of Object.keys(init)) {
    checkKey(key);
    const folded = key.toLowerCase();
    if (seen.has(folded)) throw invalid(`Header '${key}' is given twice (keys are compared ignoring ASCII case)`);
    seen.add(folded);
    const given = init[key];
    const values = typeof given === "string" ? [given] : Array.isArray(given) ? [...(given as readonly unknown[])] : null;
    if (values === null) throw invalid(`Header '${key}' is neither a string nor an array of strings`);
    if (values.length === 0) throw invalid(`Header '${key}' has no value; a key has one or more`);
    for (const value of values) {
      if (typeof value !== "string") throw invalid(`A value of header '${key}' is not a string`);
      if (value.includes("\r") || value.includes("\n")) throw invalid(`A value of header '${key}' holds CR or LF`);
      if (LONE_SURROGATE.test(value)) throw invalid(`A value of header '${key}' holds an unpaired UTF-16 surrogate (not UTF-8 text)`);
    }
    pairs.push([key, values as string[]]);
  }
  return pairs;
}

/** Whether a key is under the broker's reserved prefix (ASCII case-insensitive, spec §4.9). */
function reserved(key: string): boolean {
  return key.length >= RESERVED_HEADER_PREFIX.length && key.slice(0, RESERVED_HEADER_PREFIX.length).toLowerCase() === "herald-";
}

function checkKey(key: string): void {
  if (!TOKEN.test(key) || key.length > MAX_HEADER_KEY_BYTES) {
    throw invalid(`Header key '${key.slice(0, 64)}' is not 1 to ${MAX_HEADER_KEY_BYTES} HTTP token characters (letters, digits, !#$%&'*+-.^_\`|~)`);
  }
  if (reserved(key)) {
    throw invalid(`Header key '${key}' is under the reserved prefix '${RESERVED_HEADER_PREFIX}', which only the broker sets`);
  }
}

/** @internal Seals checked pairs with their value count and encoded size. */
export function outgoing(pairs: MessageHeaders, user: boolean): OutgoingHeaders {
  let values = 0;
  let bytes = containerHeader(pairs.length);
  for (const [key, list] of pairs) {
    values += list.length;
    bytes += strSize(key) + containerHeader(list.length);
    for (const value of list) bytes += strSize(value);
  }
  return { pairs, values, bytes, user };
}

/** @internal A header block a connection sends: its pairs (`undefined`: none) and encoded bytes. */
export interface AdmittedHeaders {
  readonly pairs: MessageHeaders | undefined;
  readonly bytes: number;
}

const NO_HEADERS: AdmittedHeaders = { pairs: undefined, bytes: 0 };

/**
 * @internal The header block `p` goes out with on a connection with `grant`, or `null` after rejecting `p`
 * (nothing sent): when the broker did not grant headers and the caller gave some (a trace context alone
 * is dropped instead), or when the block is over the limits the broker announced.
 */
export function admitHeaders(p: PendingPublish, grant: HeaderGrant): AdmittedHeaders | null {
  try {
    return admit(p.headers, grant);
  } catch (e) {
    p.reject(e);
    return null;
  }
}

function admit(headers: OutgoingHeaders | null, grant: HeaderGrant): AdmittedHeaders {
  if (headers === null) return NO_HEADERS;
  if (!grant.headers) {
    if (!headers.user) return NO_HEADERS;
    throw new HeraldError(
      "HeadersNotNegotiated",
      "This connection cannot publish headers: the broker did not grant the headers capability (spec §4.1), or the client was created with `headers: false`.",
    );
  }
  if (headers.values > grant.maxHeaders) {
    throw invalid(`${headers.values} header values are over the broker's max_headers of ${grant.maxHeaders}`);
  }
  if (headers.bytes > grant.maxHeaderBytes) {
    throw invalid(`A header block of ${headers.bytes} bytes is over the broker's max_header_bytes of ${grant.maxHeaderBytes}`);
  }
  return headers;
}

/** Bytes of a MessagePack map or array header for `n` entries (fix form below 16). */
function containerHeader(n: number): number {
  return n < 16 ? 1 : n <= 0xffff ? 3 : 5;
}

/** Bytes of a string as a MessagePack str (header and UTF-8 bytes), as `encodeHeaderBlock` writes it. */
function strSize(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      n += 4; // a surrogate pair (lone ones are refused before)
      i++;
    } else n += 3;
  }
  return n + (n < 32 ? 1 : n <= 0xff ? 2 : n <= 0xffff ? 3 : 5);
}
