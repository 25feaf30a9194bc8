/**
 * Conformance: every vector in protocol-spec/vectors (README §12, longpoll.json, delta.json) run through this
 * client's decoder, encoder, frame reader, topic rules, long-poll body parser and delta apply.
 *
 * Frame vectors are fed whole, split at every byte boundary into two segments, and one byte at a time;
 * the answer must be the same each way (README §12).
 */
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { describe, test } from "node:test";
import {
  FrameReader,
  HeraldError,
  applyDelta,
  checkPublishTopic,
  decodeFrame,
  encodeError,
  encodeHello,
  encodeMessage,
  encodePing,
  encodePong,
  encodePresence,
  encodePresenceReply,
  encodePublish,
  encodeSubscribe,
  encodeSubscribed,
  encodeUnsubscribe,
  encodeWelcome,
  isReservedTopic,
  parsePollBody,
  topicMatches,
  validatePattern,
  validateTopic,
  type Frame,
  type MessageHeaders,
} from "@herald/client/protocol";

const vectorsDir = new URL("../../../protocol-spec/vectors/", import.meta.url);

/** JSON.parse keeping integers above 2^53 exact (as bigint): the vectors hold uint64 values. */
function readJson(name: string): any {
  const text = readFileSync(new URL(name, vectorsDir), "utf8");
  const marked = text.replace(/([:\[,]\s*)(\d{16,})(?=\s*[,\]}])/g, '$1"__bigint:$2"');
  return JSON.parse(marked, (_key, value) =>
    typeof value === "string" && value.startsWith("__bigint:") ? BigInt(value.slice(9)) : value,
  );
}

const limits = readJson("limits.json") as { max_frame: number; max_topic: number };

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString("hex");
const unhex = (text: string): Uint8Array => new Uint8Array(Buffer.from(text, "hex"));

/** Whole, every two-way split, and one-byte segments. */
function segmentations(bytes: Uint8Array): Uint8Array[][] {
  const out: Uint8Array[][] = [[bytes]];
  for (let i = 1; i < bytes.length; i++) out.push([bytes.subarray(0, i), bytes.subarray(i)]);
  if (bytes.length > 1) out.push(Array.from(bytes, (_, i) => bytes.subarray(i, i + 1)));
  if (bytes.length === 0) out.push([]);
  return out;
}

interface Outcome {
  frames: Frame[];
  error: string | null;
  buffered: number;
}

/** Feeds segments to a FrameReader, decoding every frame as soon as it is whole. */
function feed(segments: Uint8Array[], maxFrame = limits.max_frame): Outcome {
  const reader = new FrameReader(maxFrame);
  const frames: Frame[] = [];
  try {
    for (const segment of segments) {
      reader.push(segment);
      for (let body = reader.next(); body !== null; body = reader.next()) frames.push(decodeFrame(body));
    }
  } catch (e) {
    assert.ok(e instanceof HeraldError, `expected a HeraldError, got ${e}`);
    return { frames, error: e.code, buffered: reader.buffered };
  }
  return { frames, error: null, buffered: reader.buffered };
}

const camel = (key: string): string => key.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());

/** A decoded frame as the vectors' `fields` (numbers as bigint, payload as hex). */
function normalize(value: unknown): unknown {
  if (typeof value === "number") return BigInt(value);
  if (typeof value === "bigint") return value;
  if (value instanceof Uint8Array) return hex(value);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, normalize(v)]));
}

/** Trailing fields a vector names only when the frame carries them (spec §4.1, §4.2, §4.8), with the value a decoder gives when it does not. */
const optionalFields: Record<string, Record<string, unknown>> = {
  HELLO: { info: null },
  WELCOME: { inbox_prefix: null },
  ERROR: { sid: 0, sids: null },
};

function expectedFields(frame: string, fields: Record<string, unknown>): unknown {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(optionalFields[frame] ?? {})) out[camel(key)] = normalize(value);
  for (const [key, value] of Object.entries(fields)) out[camel(key)] = normalize(value);
  return out;
}

function actualFields(frame: Frame): unknown {
  const { type: _type, ...rest } = frame as Frame & Record<string, unknown>;
  if ("headers" in frame && frame.headers !== undefined) rest.headers = Object.fromEntries(frame.headers);
  return normalize(rest);
}

/** A vector's `headers` (an object, keys in encoded order, README §12) as the codec's pairs. */
const headerPairs = (h: Record<string, string[]> | undefined): MessageHeaders | undefined =>
  h === undefined ? undefined : Object.entries(h);

const frameTypes: Record<string, number> = {
  HELLO: 1,
  WELCOME: 2,
  SUBSCRIBE: 3,
  UNSUBSCRIBE: 4,
  PUBLISH: 5,
  MESSAGE: 6,
  PING: 7,
  PONG: 8,
  ERROR: 9,
  PRESENCE: 10,
  PRESENCE_REPLY: 11,
  SUBSCRIBED: 12,
};

/** The frame encoded from a vector's fields with this client's encoders. */
function encode(frame: string, f: any): Uint8Array {
  switch (frame) {
    case "HELLO":
      // info (spec §4.1): the sixth element when the vector names it (nil included), else five elements.
      return encodeHello(f.client_name, Number(f.capabilities), f.auth, Number(f.version), "info" in f ? f.info : undefined);
    case "WELCOME":
      return encodeWelcome(f.server_name, f.connection_id, Number(f.capabilities), f.limits, Number(f.version), f.inbox_prefix ?? null);
    case "SUBSCRIBE":
      // since (spec §4.3): an offset up to 2^64-1, a number or (above 2^53, as readJson gives it) a bigint;
      // queue (spec §4.3, §14): the sixth element, since then nil.
      return encodeSubscribe(Number(f.sid), f.pattern, Number(f.options), f.since, f.queue);
    case "UNSUBSCRIBE":
      return encodeUnsubscribe(Number(f.sid));
    case "PUBLISH":
      return encodePublish(f.topic, f.reply_to, Number(f.flags), unhex(f.payload), headerPairs(f.headers));
    case "MESSAGE":
      return encodeMessage(Number(f.sid), f.topic, f.reply_to, Number(f.flags), unhex(f.payload), headerPairs(f.headers));
    case "PING":
      return encodePing();
    case "PONG":
      return encodePong();
    case "ERROR":
      return encodeError(Number(f.code), f.fatal, f.message, f.count, Number(f.sid ?? 0), f.sids === undefined ? null : f.sids.map(Number));
    case "PRESENCE":
      return encodePresence(Number(f.request_id), f.topic, f.limit, f.cursor);
    case "PRESENCE_REPLY":
      // entries (spec §15.3): [client, identity, info] on the wire, objects in the vectors (and decoded).
      return encodePresenceReply(Number(f.request_id), Number(f.code), f.members, f.identities, f.entries, f.next);
    case "SUBSCRIBED":
      return encodeSubscribed(Number(f.sid), f.pattern, Number(f.options));
    default:
      throw new Error(`unknown frame ${frame}`);
  }
}

const frameFiles = readdirSync(vectorsDir)
  .filter((name) => name.endsWith(".json"))
  .map((name) => ({ name, data: readJson(name) }))
  .filter(({ data }) => typeof data.frame === "string");

test("the vectors folder has a file for every frame type", () => {
  assert.deepEqual(frameFiles.map(({ data }) => data.frame).sort(), Object.keys(frameTypes).sort());
});

for (const { name, data } of frameFiles) {
  describe(`${name} (${data.frame})`, () => {
    for (const v of data.valid) {
      test(`valid: ${v.name}`, () => {
        const bytes = unhex(v.hex);
        for (const segments of segmentations(bytes)) {
          const outcome = feed(segments);
          assert.equal(outcome.error, null, `split into ${segments.length} segments`);
          assert.equal(outcome.frames.length, 1, `split into ${segments.length} segments`);
          assert.equal(outcome.buffered, 0);
          const frame = outcome.frames[0]!;
          assert.equal(frame.type, frameTypes[data.frame]);
          assert.deepEqual(actualFields(frame), expectedFields(data.frame, v.fields));
          if (v.fields.headers !== undefined && "headers" in frame) {
            assert.deepEqual(frame.headers!.map(([key]) => key), Object.keys(v.fields.headers), "header keys in encoded order");
          }
        }
        if (v.canonical) assert.equal(hex(encode(data.frame, v.fields)), v.hex, "canonical encoding");
      });
    }
    for (const v of data.incomplete) {
      test(`incomplete: ${v.name}`, () => {
        const bytes = unhex(v.hex);
        for (const segments of segmentations(bytes)) {
          const outcome = feed(segments);
          assert.equal(outcome.error, null);
          assert.equal(outcome.frames.length, 0, "no frame yet");
          assert.equal(outcome.buffered, bytes.length, "nothing consumed");
        }
      });
    }
    for (const v of data.invalid) {
      test(`invalid: ${v.name} -> ${v.error}`, () => {
        for (const segments of segmentations(unhex(v.hex))) {
          const outcome = feed(segments);
          assert.equal(outcome.error, v.error, `split into ${segments.length} segments`);
          assert.equal(outcome.frames.length, 0);
        }
      });
    }
  });
}

describe("topics.json", () => {
  const topics = readJson("topics.json");
  const max = limits.max_topic;
  test("valid names", () => {
    for (const t of topics.valid_names) assert.equal(validateTopic(t, max), null, t);
  });
  test("valid patterns", () => {
    for (const p of topics.valid_patterns) assert.equal(validatePattern(p, max), null, p);
  });
  test("invalid names", () => {
    for (const { topic, error } of topics.invalid_names) assert.equal(validateTopic(topic, max), error, JSON.stringify(topic));
  });
  test("invalid patterns", () => {
    for (const { pattern, error } of topics.invalid_patterns) {
      assert.equal(validatePattern(pattern, max), error, JSON.stringify(pattern));
    }
  });
  test("matches", () => {
    for (const { pattern, topic, matches } of topics.matches) {
      assert.equal(isReservedTopic(topic), false, `${topic}: '$' cases belong in reserved_matches`);
      assert.equal(topicMatches(pattern, topic), matches, `${pattern} ~ ${topic}`);
    }
    for (const { pattern, topic, matches } of topics.reserved_matches) assert.equal(topicMatches(pattern, topic), matches, `${pattern} ~ ${topic}`);
  });
  test("reserved", () => {
    for (const { topic, reserved } of topics.reserved) assert.equal(isReservedTopic(topic), reserved, topic);
  });
});

describe("delta.json", () => {
  const deltas = readJson("delta.json") as {
    max_payload: number;
    valid: { name: string; source: string; target: string; delta: string }[];
    invalid: { name: string; source: string; delta: string; error: string }[];
  };
  test("assumes the max_payload of limits.json", () => {
    assert.equal(deltas.max_payload, readJson("limits.json").max_payload);
  });
  for (const v of deltas.valid) {
    test(`valid: ${v.name}`, () => {
      assert.equal(hex(applyDelta(unhex(v.source), unhex(v.delta), deltas.max_payload)), v.target);
    });
  }
  for (const v of deltas.invalid) {
    test(`invalid: ${v.name}`, () => {
      assert.throws(
        () => applyDelta(unhex(v.source), unhex(v.delta), deltas.max_payload),
        (e: unknown) => e instanceof HeraldError && e.code === v.error,
      );
    });
  }
});

describe("longpoll.json", () => {
  const lp = readJson("longpoll.json");
  const headersOf = (h: Record<string, string>) => new Headers(h);

  for (const v of lp.pollBinary) {
    test(`pollBinary: ${v.name}`, () => {
      const result = parsePollBody(Number(v.ack), headersOf(v.headers), unhex(v.hex), limits.max_frame);
      assert.deepEqual(
        result.messages.map((m) => ({ ...m, payload: hex(m.payload), ...(m.headers ? { headers: Object.fromEntries(m.headers) } : {}) })),
        v.messages.map((m: any) => ({ ...m, seq: Number(m.seq), sid: Number(m.sid), flags: Number(m.flags) })),
      );
      assert.equal(result.dropped, Number(v.headers["Herald-Dropped"]));
      // The same poll answered as JSON (pollJson): same next ack, same gap, same payloads, and `text`
      // present exactly when the payload is valid UTF-8.
      const json = lp.pollJson.find((j: any) => j.name === v.name);
      assert.ok(json, "a pollJson case of the same name");
      assert.equal(result.ack, Number(json.body.ack));
      assert.equal(result.dropped, Number(json.body.dropped));
      // Loss marks (longpoll §2): Herald-Gaps names what JSON's "gaps" does, and an answer of marks alone moves the ack past them.
      assert.deepEqual(result.gaps, (json.body.gaps ?? []).map(Number));
      assert.equal(result.ack, Number(v.headers["Herald-First-Sequence"]) + Number(v.headers["Herald-Count"]) - 1);
      const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
      json.body.messages.forEach((j: any, i: number) => {
        const m = result.messages[i]!;
        assert.equal(Buffer.from(m.payload).toString("base64"), j.payload);
        let text: string | undefined;
        try {
          text = strict.decode(m.payload);
        } catch {
          text = undefined;
        }
        assert.equal(text, j.text);
        assert.deepEqual(j.headers === undefined ? undefined : Object.entries(j.headers), m.headers, "headers: present exactly when the message has them");
      });
    });
  }

  for (const v of lp.pollRefused) {
    test(`pollRefused: ${v.name}`, () => {
      assert.throws(
        () => parsePollBody(Number(v.ack), headersOf(v.headers), unhex(v.hex), limits.max_frame),
        (e: any) => e.code === v.error && String(e.message).includes(v.header), // refused for that header, not another fault
      );
    });
  }

  test("pollBinary: a body cut short is refused (the transport then polls again with the same ack)", () => {
    const v = lp.pollBinary[1];
    assert.throws(() => parsePollBody(4, headersOf(v.headers), unhex(v.hex).subarray(0, 40)), { code: "MalformedFrame" });
  });

  test("pollBinary: without Herald-* headers the messages follow the ack", () => {
    const v = lp.pollBinary[1];
    const result = parsePollBody(4, headersOf({}), unhex(v.hex));
    assert.deepEqual(result.messages.map((m) => m.seq), [5, 6, 7]);
    assert.equal(result.ack, 7);
  });

  for (const v of [...lp.framesBody.valid, ...lp.framesBody.invalid]) {
    test(`framesBody: ${v.name}`, () => {
      const reader = new FrameReader(limits.max_frame);
      reader.push(unhex(v.hex));
      const frames: any[] = [];
      let failure: any = null;
      try {
        for (let body = reader.next(); body !== null; body = reader.next()) {
          const frame = decodeFrame(body);
          frames.push(frame);
        }
      } catch (e) {
        failure = { kind: "error", error: (e as HeraldError).code };
      }
      const names = Object.fromEntries(Object.entries(frameTypes).map(([k, t]) => [t, k]));
      assert.deepEqual(
        frames.map((f) => ({ ...f, type: names[f.type], ...(f.payload ? { payload: hex(f.payload) } : {}) })),
        v.frames.map((f: any) => normalizeNumbers(f)),
      );
      if (!failure) {
        const wrong = frames.find((f) => f.type !== 5);
        if (wrong) failure = { kind: "wrongType", type: names[wrong.type] };
        else if (reader.buffered > 0) failure = { kind: "incomplete", leftover: reader.buffered };
        else if (frames.length === 0) failure = { kind: "empty" };
        else {
          for (const f of frames) {
            try {
              checkPublishTopic(f.topic, limits.max_topic);
            } catch (e) {
              failure = { kind: "topic", error: (e as HeraldError).code };
              break;
            }
          }
        }
      }
      assert.deepEqual(failure, v.failure ?? null);
    });
  }

  test("requests: the client's pattern check agrees with the broker's answers to subscribe bodies", () => {
    const max = limits.max_topic;
    let checked = 0;
    for (const v of lp.requests) {
      if (v.endpoint !== "subscribe") continue;
      let body: any;
      try {
        body = JSON.parse(v.body);
      } catch {
        continue;
      }
      if (typeof body?.pattern !== "string" || typeof body.sid !== "number" || body.sid < 1 || body.sid > 0xffffffff) continue;
      if (!Number.isInteger(body.sid) || (body.noEcho !== undefined && typeof body.noEcho !== "boolean") || v.given) continue;
      const expected = v.code === "InvalidTopic" || v.code === "TopicTooLong" ? v.code : null;
      assert.equal(validatePattern(body.pattern, max), expected, v.name);
      checked++;
    }
    assert.ok(checked >= 10, `checked ${checked} subscribe bodies`);
  });
});

function normalizeNumbers(f: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(f).map(([k, v]) => [k, typeof v === "bigint" ? Number(v) : v]));
}
