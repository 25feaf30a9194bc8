/**
 * Presence (spec §15) without a broker: the codec against frames built by hand from the spec (HELLO `info`,
 * the SUBSCRIBE join and presence-events bits, PRESENCE, PRESENCE_REPLY, error codes 29 and 30), and the
 * client's API against a scripted TCP server: what goes on the wire, how events are taken from the
 * subscription's messages, how answers, refusals and losses reach the caller. Against the real broker:
 * presence-broker.test.ts.
 */
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import type { Socket } from "node:net";
import {
  createClient,
  HeraldError,
  PresenceError,
  type ConnectOptions,
  type HeraldClient,
  type PresenceEvent,
} from "@herald/client";
import {
  Capabilities,
  ErrorCode,
  FrameReader,
  FrameType,
  SubscribeOptions,
  decodeFrame,
  encodeError,
  encodeHello,
  encodeMessage,
  encodePresence,
  encodePresenceReply,
  encodeSubscribe,
  errorCodeName,
  type Frame,
  type MessageHeaders,
} from "@herald/client/protocol";
import { OpenClients } from "./helpers/clients.js";
import { ScriptedServer, type FrameOf } from "./helpers/scripted.js";
import { nextMessage, once, until, within } from "./helpers/wait.js";

const clients = new OpenClients();
const open = (url: string, options: ConnectOptions = {}): Promise<HeraldClient> => clients.open(url, options);
after(() => clients.closeAll());

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString("hex");
const unhex = (text: string): Uint8Array => new Uint8Array(Buffer.from(text.replace(/\s+/g, ""), "hex"));
/** A whole frame: the body (hex, spaces allowed) behind its length prefix. */
const framed = (body: string): Uint8Array => {
  const bytes = unhex(body);
  const out = new Uint8Array(4 + bytes.length);
  new DataView(out.buffer).setUint32(0, bytes.length);
  out.set(bytes, 4);
  return out;
};

/** Decodes `bytes` fed whole, split at every byte, and one byte at a time: the same answer each way (spec §12). */
function decodeEverySplit(bytes: Uint8Array): Frame | string {
  const answers: string[] = [];
  let first: Frame | string | null = null;
  const splits: Uint8Array[][] = [[bytes], Array.from(bytes, (_, i) => bytes.subarray(i, i + 1))];
  for (let i = 1; i < bytes.length; i++) splits.push([bytes.subarray(0, i), bytes.subarray(i)]);
  for (const segments of splits) {
    const reader = new FrameReader(1024);
    let answer: Frame | string;
    try {
      const frames: Frame[] = [];
      for (const segment of segments) {
        reader.push(segment);
        for (let body = reader.next(); body !== null; body = reader.next()) frames.push(decodeFrame(body));
      }
      assert.equal(frames.length, 1);
      answer = frames[0]!;
    } catch (e) {
      answer = (e as HeraldError).code;
    }
    first ??= answer;
    answers.push(JSON.stringify(answer, (_k, v) => (typeof v === "bigint" ? `${v}n` : v instanceof Uint8Array ? hex(v) : v)));
  }
  assert.equal(new Set(answers).size, 1, "the same answer for every split");
  return first!;
}

// ---------------------------------------------------------------------------------------------------------
// Codec

describe("presence codec (frames built by hand from spec §4.1, §4.3, §15.3)", () => {
  test("the frame types, capability, option bits and error codes", () => {
    assert.equal(FrameType.Presence, 10);
    assert.equal(FrameType.PresenceReply, 11);
    assert.equal(Capabilities.Presence, 32);
    assert.equal(SubscribeOptions.Join, 2);
    assert.equal(SubscribeOptions.PresenceEvents, 4);
    assert.equal(ErrorCode.PresenceFull, 29);
    assert.equal(ErrorCode.PresenceUnavailable, 30);
    assert.equal(errorCodeName(29), "PresenceFull");
    assert.equal(errorCodeName(30), "PresenceUnavailable");
  });

  test("HELLO with info: the sixth element; nil kept as nil; without it five elements as before", () => {
    // [1, 1, "app", 34, nil, "Ann"]
    const withInfo = hex(framed("96 01 01 a3617070 22 c0 a3416e6e"));
    assert.equal(withInfo, "0000000d960101a361707022c0a3416e6e");
    assert.equal(hex(encodeHello("app", 34, null, 1, "Ann")), withInfo);
    assert.deepEqual({ ...(decodeEverySplit(unhex(withInfo)) as Frame) }, { type: 1, version: 1, clientName: "app", capabilities: 34, auth: null, info: "Ann" });
    // [1, 1, "app", 34, nil, nil]
    assert.equal(hex(encodeHello("app", 34, null, 1, null)), "0000000a960101a361707022c0c0");
    assert.equal((decodeEverySplit(unhex("0000000a960101a361707022c0c0")) as FrameOf<1>).info, null);
    // [1, 1, "app", 34, nil]: no info
    assert.equal(hex(encodeHello("app", 34)), "00000009950101a361707022c0");
    assert.equal((decodeEverySplit(unhex("00000009950101a361707022c0")) as FrameOf<1>).info, null);
  });

  test("HELLO info: 256 bytes is read, 257 or a non-str is MalformedFrame", () => {
    const hello = (info: Uint8Array): Uint8Array => {
      const head = unhex("960101a3617070 22 c0");
      const body = new Uint8Array(head.length + info.length);
      body.set(head);
      body.set(info, head.length);
      const out = new Uint8Array(4 + body.length);
      new DataView(out.buffer).setUint32(0, body.length);
      out.set(body, 4);
      return out;
    };
    const str8 = (n: number): Uint8Array => new Uint8Array([0xd9, n, ...new Uint8Array(n).fill(0x61)]);
    assert.equal((decodeEverySplit(hello(str8(256 - 1))) as FrameOf<1>).info!.length, 255);
    const longest = new Uint8Array([0xda, 0x01, 0x00, ...new Uint8Array(256).fill(0x61)]);
    assert.equal((decodeEverySplit(hello(longest)) as FrameOf<1>).info!.length, 256);
    const over = new Uint8Array([0xda, 0x01, 0x01, ...new Uint8Array(257).fill(0x61)]);
    assert.equal(decodeEverySplit(hello(over)), "MalformedFrame");
    assert.equal(decodeEverySplit(hello(new Uint8Array([0x07]))), "MalformedFrame", "an integer info");
    assert.equal(decodeEverySplit(hello(new Uint8Array([0xc4, 0x01, 0x61]))), "MalformedFrame", "a bin info");
  });

  test("SUBSCRIBE with join and presence events: the option bits, nothing else", () => {
    // [3, 7, "room.1", 6]
    const frame = hex(framed("94 03 07 a6726f6f6d2e31 06"));
    assert.equal(hex(encodeSubscribe(7, "room.1", SubscribeOptions.Join | SubscribeOptions.PresenceEvents)), frame);
    assert.deepEqual({ ...(decodeEverySplit(unhex(frame)) as Frame) }, { type: 3, sid: 7, pattern: "room.1", options: 6 });
    assert.equal(encodeSubscribe(7, "room.1", 7)[4 + 10], 7, "no echo, join and events together");
  });

  test("PRESENCE: [10, request_id, topic, limit, cursor]", () => {
    // [10, 5, "room.1", 100, nil]
    const first = hex(framed("95 0a 05 a6726f6f6d2e31 64 c0"));
    assert.equal(hex(encodePresence(5, "room.1", 100)), first);
    assert.deepEqual({ ...(decodeEverySplit(unhex(first)) as Frame) }, { type: 10, requestId: 5, topic: "room.1", limit: 100, cursor: null });
    // [10, 4294967295, "room.1", 0, "c1"]: the largest request id, the occupancy alone, a cursor
    const later = hex(framed("95 0a ceffffffff a6726f6f6d2e31 00 a26331"));
    assert.equal(hex(encodePresence(0xffffffff, "room.1", 0, "c1")), later);
    assert.deepEqual({ ...(decodeEverySplit(unhex(later)) as Frame) }, { type: 10, requestId: 0xffffffff, topic: "room.1", limit: 0, cursor: "c1" });
    // a limit above 1 000 is the broker's to serve as 1 000; it travels as given
    assert.equal(hex(encodePresence(1, "t", 5000)), hex(framed("95 0a 01 a174 cd1388 c0")));
    assert.throws(() => encodePresence(-1, "t", 1), RangeError);
    assert.throws(() => encodePresence(2 ** 32, "t", 1), RangeError);
    assert.throws(() => encodePresence(1, "t", -1), RangeError);
    // four elements, or a nil topic: MalformedFrame
    assert.equal(decodeEverySplit(framed("94 0a 05 a174 64")), "MalformedFrame");
    assert.equal(decodeEverySplit(framed("95 0a 05 c0 64 c0")), "MalformedFrame");
  });

  // [11, 5, 0, 2, 1, [["c1", "", nil], ["c2", "", "Bo"]], "c2"]
  const reply = hex(framed("97 0b 05 00 02 01 92 93a26331a0c0 93a26332a0a2426f a26332"));

  test("PRESENCE_REPLY: [11, request_id, code, members, identities, entries, next]", () => {
    const frame = decodeEverySplit(unhex(reply)) as FrameOf<11>;
    assert.deepEqual(
      { ...frame, entries: frame.entries.map((e) => ({ ...e })) },
      {
        type: 11,
        requestId: 5,
        code: 0,
        members: 2,
        identities: 1,
        entries: [
          { client: "c1", identity: "", info: null },
          { client: "c2", identity: "", info: "Bo" },
        ],
        next: "c2",
      },
    );
    assert.equal(
      hex(encodePresenceReply(5, 0, 2, 1, [{ client: "c1", identity: "", info: null }, { client: "c2", identity: "", info: "Bo" }], "c2")),
      reply,
    );
    // A refusal: code 20 (PermissionDenied), nothing else set: [11, 6, 20, 0, 0, [], nil]
    const refused = hex(framed("97 0b 06 14 00 00 90 c0"));
    assert.equal(hex(encodePresenceReply(6, 20, 0, 0)), refused);
    assert.deepEqual({ ...(decodeEverySplit(unhex(refused)) as Frame) }, { type: 11, requestId: 6, code: 20, members: 0, identities: 0, entries: [], next: null });
  });

  test("PRESENCE_REPLY: unknown trailing elements are skipped, in the frame and in an entry", () => {
    // [11, 1, 0, 1, 1, [["c1", "id", "x", [true]]], nil, {}]
    const frame = decodeEverySplit(framed("98 0b 01 00 01 01 91 94a26331a26964a178 91c3 c0 80")) as FrameOf<11>;
    assert.deepEqual(frame.entries.map((e) => ({ ...e })), [{ client: "c1", identity: "id", info: "x" }]);
    assert.equal(frame.next, null);
  });

  test("PRESENCE_REPLY of the wrong shape is MalformedFrame", () => {
    const cases: Record<string, string> = {
      "six elements": "96 0b 05 00 00 00 90",
      "an entry of two elements": "97 0b 05 00 01 01 91 92a26331a0 c0",
      "a nil client": "97 0b 05 00 01 01 91 93c0a0c0 c0",
      "a nil identity": "97 0b 05 00 01 01 91 93a26331c0c0 c0",
      "an integer info": "97 0b 05 00 01 01 91 93a26331a001 c0",
      "entries not an array": "97 0b 05 00 00 00 c0 c0",
      "an entry not an array": "97 0b 05 00 01 01 91 a0 c0",
      "a negative count": "97 0b 05 00 ff 00 90 c0",
      "an integer next": "97 0b 05 00 00 00 90 01",
      "a request id over uint32": "97 0b cf0000000100000000 00 00 00 90 c0",
    };
    for (const [name, frame] of Object.entries(cases)) {
      assert.equal(decodeEverySplit(framed(frame)), "MalformedFrame", name);
    }
    assert.equal(decodeEverySplit(framed("91 0d")), "UnknownFrameType", "type 13 (one past SUBSCRIBED)");
  });
});

// ---------------------------------------------------------------------------------------------------------
// API against a scripted server

const PRESENCE_BROKER = Capabilities.Headers | Capabilities.History | Capabilities.QueueGroups | Capabilities.Presence;

/** A presence event as the broker sends it (spec §15.2): a MESSAGE of the sid with the Herald-Presence headers. */
function event(sid: number, topic: string, headers: MessageHeaders, info = ""): Uint8Array {
  return encodeMessage(sid, topic, null, 0, new TextEncoder().encode(info), headers);
}
const join = (sid: number, topic: string, client: string, identity: string, occupancy: number, info = ""): Uint8Array =>
  event(sid, topic, [["Herald-Presence", ["join"]], ["Herald-Client", [client]], ["Herald-Identity", [identity]], ["Herald-Occupancy", [String(occupancy)]]], info);
const leave = (sid: number, topic: string, client: string, identity: string, reason: string, occupancy: number): Uint8Array =>
  event(sid, topic, [
    ["Herald-Presence", ["leave"]],
    ["Herald-Client", [client]],
    ["Herald-Identity", [identity]],
    ["Herald-Reason", [reason]],
    ["Herald-Occupancy", [String(occupancy)]],
  ]);

/** The fields of an event a test compares (the subscription left out). */
const shown = (e: PresenceEvent) => ({ kind: e.kind, topic: e.topic, client: e.client, identity: e.identity, info: e.info, reason: e.reason, occupancy: e.occupancy });

describe("presence on the wire (scripted server)", () => {
  test("HELLO asks for presence with headers and carries the info (a string, or an object as JSON); without info five elements", async () => {
    const server = await ScriptedServer.start({ capabilities: PRESENCE_BROKER });
    try {
      const named = await open(server.url, { name: "p-info", info: "Ann" });
      const json = await open(server.url, { name: "p-json", info: { name: "Bo", color: "blue" } });
      const none = await open(server.url, { name: "p-none" });
      const noHeaders = await open(server.url, { name: "p-noheaders", headers: false, info: "Cy" });
      const hellos = server.frames(FrameType.Hello);
      const byName = (n: string) => hellos.find((h) => h.clientName === n)!;
      assert.equal(byName("p-info").info, "Ann");
      assert.equal(byName("p-json").info, '{"name":"Bo","color":"blue"}');
      assert.equal(byName("p-none").info, null);
      for (const n of ["p-info", "p-json", "p-none"]) assert.equal(byName(n).capabilities & Capabilities.Presence, Capabilities.Presence, n);
      assert.equal(byName("p-noheaders").capabilities & Capabilities.Presence, 0, "presence only with headers (spec §4.1)");
      assert.equal(named.info?.presence, true);
      assert.equal(json.info?.presence, true);
      assert.equal(none.info?.presence, true);
      assert.equal(noHeaders.info?.presence, false);
      assert.throws(() => createClient(server.url, { info: 7 as unknown as string }), { code: "InvalidOptions" });
    } finally {
      server.close();
    }
  });

  test("join and presenceEvents set SUBSCRIBE's bits; a reconnect subscribes with the same bits; refresh keeps the info", async () => {
    const server = await ScriptedServer.start({ capabilities: PRESENCE_BROKER });
    try {
      const client = await open(server.url, { name: "p-bits", info: "Ann", credential: "t" });
      const joined = client.subscribe("room.1", { join: true });
      const watching = client.subscribe("room.2", { presenceEvents: true });
      const both = client.subscribe("room.3", { join: true, onPresence: () => undefined, noEcho: true });
      const plain = client.subscribe("room.4");
      await Promise.all([joined.ready, watching.ready, both.ready, plain.ready]);
      const bits = () => new Map(server.frames(FrameType.Subscribe).map((f) => [f.sid, f.options]));
      assert.deepEqual(
        [...bits()],
        [
          [joined.sid, 2],
          [watching.sid, 4],
          [both.sid, 7],
          [plain.sid, 0],
        ],
      );
      assert.equal(joined.joins, true);
      assert.equal(plain.joins, false);
      // The broker ends the connection: the client subscribes again, with the same bits (the broker rebuilds presence).
      const back = once(client, "reconnect");
      server.sockets[0]!.write(encodeError(17, true, "Shutting down.", 0));
      await back;
      const again = server.frames(FrameType.Subscribe).slice(4);
      assert.deepEqual(new Map(again.map((f) => [f.sid, f.options])), new Map([[joined.sid, 2], [watching.sid, 4], [both.sid, 7], [plain.sid, 0]]));
      assert.equal(server.frames(FrameType.Hello)[1]!.info, "Ann", "the new connection's HELLO carries the info");
      await client.refreshCredential();
      const refresh = server.frames(FrameType.Hello)[2]!;
      assert.equal(refresh.info, "Ann", "a refresh's HELLO keeps it");
      assert.equal(refresh.auth, "t");
    } finally {
      server.close();
    }
  });

  test("checked before sending: one topic, options that agree, a broker that granted presence", async () => {
    const server = await ScriptedServer.start({ capabilities: Capabilities.Headers });
    try {
      const client = await open(server.url, { name: "p-checks" });
      assert.equal(client.info?.presence, false);
      for (const pattern of ["room.*", "room.>", ">"]) {
        assert.throws(() => client.subscribe(pattern, { join: true }), { code: "InvalidOptions" }, pattern);
        assert.throws(() => client.subscribe(pattern, { presenceEvents: true }), { code: "InvalidOptions" }, pattern);
        assert.throws(() => client.subscribe(pattern, () => undefined, { onPresence: () => undefined }), { code: "InvalidOptions" }, pattern);
      }
      assert.throws(() => client.subscribe("room.1", { presenceEvents: false, onPresence: () => undefined }), { code: "InvalidOptions" });
      assert.throws(() => client.subscribe("room..1", { join: true }), { code: "InvalidTopic" }, "the pattern is judged first");
      // Not granted: refused here (sent, the broker would close the connection, spec §15.1), the connection stays.
      const errors: HeraldError[] = [];
      client.on("error", (e) => errors.push(e));
      const sub = client.subscribe("room.1", { join: true });
      await assert.rejects(sub.ready, (e: HeraldError) => e.code === "PresenceNotNegotiated" && /join/.test(e.message));
      await within(sub.closed, 5000, "the refused subscription to end");
      const events = client.subscribe("room.1", { presenceEvents: true });
      await assert.rejects(events.ready, { code: "PresenceNotNegotiated" });
      await assert.rejects(events.presenceEvents().next(), { code: "PresenceNotNegotiated" });
      await assert.rejects(client.presence("room.1"), { code: "PresenceNotNegotiated" });
      await assert.rejects(client.occupancy("room.1"), { code: "PresenceNotNegotiated" });
      assert.deepEqual(errors.map((e) => e.code), ["PresenceNotNegotiated", "PresenceNotNegotiated"]);
      const plain = client.subscribe("room.1");
      await plain.ready;
      await client.flush();
      assert.deepEqual(server.frames(FrameType.Subscribe).map((f) => f.sid), [plain.sid], "only the plain SUBSCRIBE went out");
      assert.deepEqual(server.frames(FrameType.Presence), []);
      assert.throws(() => plain.presenceEvents(), TypeError);
      assert.equal(client.state, "connected");
    } finally {
      server.close();
    }
  });

  test("events go to onPresence in order, never to the handler; the application's messages around them do", async () => {
    let socket: Socket | null = null;
    const server = await ScriptedServer.start({
      capabilities: PRESENCE_BROKER,
      answer: (frame, s) => {
        if (frame.type === FrameType.Subscribe) socket = s;
      },
    });
    try {
      const client = await open(server.url, { name: "p-events" });
      const seen: string[] = [];
      const events: PresenceEvent[] = [];
      const sub = client.subscribe("room.1", (m) => void seen.push(`message ${m.text()}`), {
        join: true,
        onPresence: (e) => {
          events.push(e);
          seen.push(`${e.kind} ${e.client ?? ""}`);
        },
      });
      await sub.ready;
      const sid = sub.sid;
      const s = socket! as Socket;
      s.write(join(sid, "room.1", "c1", "alice", 1, '{"name":"Ann"}'));
      s.write(encodeMessage(sid, "room.1", null, 0, new TextEncoder().encode("hi")));
      s.write(join(sid, "room.1", "c2", "", 2));
      s.write(leave(sid, "room.1", "c1", "alice", "disconnect", 1));
      s.write(event(sid, "room.1", [["Herald-Presence", ["suppressed"]], ["Herald-Occupancy", ["1001"]]]));
      s.write(event(sid, "room.1", [["Herald-Presence", ["resumed"]], ["Herald-Occupancy", ["500"]]]));
      s.write(event(sid, "room.1", [["Herald-Presence", ["renamed"]], ["Herald-Client", ["c9"]]])); // a later broker's kind
      s.write(encodeMessage(sid, "room.1", null, 0, new TextEncoder().encode("bye"), [["X-Tag", ["a"]]]));
      await until(() => seen.length === 7, 5000, "seven deliveries");
      assert.deepEqual(seen, ["join c1", "message hi", "join c2", "leave c1", "suppressed ", "resumed ", "message bye"]);
      assert.deepEqual(events.map(shown), [
        { kind: "join", topic: "room.1", client: "c1", identity: "alice", info: '{"name":"Ann"}', reason: null, occupancy: 1 },
        { kind: "join", topic: "room.1", client: "c2", identity: "", info: null, reason: null, occupancy: 2 },
        { kind: "leave", topic: "room.1", client: "c1", identity: "alice", info: null, reason: "disconnect", occupancy: 1 },
        { kind: "suppressed", topic: "room.1", client: null, identity: null, info: null, reason: null, occupancy: 1001 },
        { kind: "resumed", topic: "room.1", client: null, identity: null, info: null, reason: null, occupancy: 500 },
      ]);
      assert.equal(events[0]!.subscription, sub);
      assert.equal(sub.received, 2, "only the two messages count as received");
    } finally {
      server.close();
    }
  });

  test("events without a callback: read from presenceEvents(), apart from the messages' iterator; the stream ends with the subscription", async () => {
    let socket: Socket | null = null;
    const server = await ScriptedServer.start({
      capabilities: PRESENCE_BROKER,
      answer: (frame, s) => {
        if (frame.type === FrameType.Subscribe) socket = s;
      },
    });
    try {
      const client = await open(server.url, { name: "p-stream" });
      const sub = client.subscribe("room.1", { presenceEvents: true });
      await sub.ready;
      const s = socket! as Socket;
      s.write(join(sub.sid, "room.1", "c1", "alice", 1));
      s.write(encodeMessage(sub.sid, "room.1", null, 0, new TextEncoder().encode("hi")));
      s.write(leave(sub.sid, "room.1", "c1", "alice", "unsubscribe", 0));
      const stream = sub.presenceEvents();
      const first = await within(stream.next(), 5000, "the join");
      assert.equal(first.done, false);
      assert.deepEqual(shown(first.value as PresenceEvent), { kind: "join", topic: "room.1", client: "c1", identity: "alice", info: null, reason: null, occupancy: 1 });
      assert.equal((await nextMessage(sub)).text(), "hi");
      const second = await within(stream.next(), 5000, "the leave");
      assert.equal((second.value as PresenceEvent).reason, "unsubscribe");
      assert.equal((second.value as PresenceEvent).occupancy, 0);
      await sub.unsubscribe();
      assert.deepEqual(await stream.next(), { value: undefined, done: true });
      await client.flush();
      assert.equal(server.frames(FrameType.Unsubscribe).length, 1);
      // The broker keeps only what it sends a subscription that asked; a presence header on another is dropped, never delivered.
      const plain = client.subscribe("room.2");
      await plain.ready;
      s.write(join(plain.sid, "room.2", "c1", "alice", 1));
      s.write(encodeMessage(plain.sid, "room.2", null, 0, new TextEncoder().encode("after")));
      assert.equal((await nextMessage(plain)).text(), "after");
    } finally {
      server.close();
    }
  });

  test("a refused join (an ERROR naming the sid, spec §15.1) fails that subscription; the connection and the others stay", async () => {
    const codes = new Map([
      ["room.denied", ErrorCode.PermissionDenied],
      ["room.full", ErrorCode.PresenceFull],
      ["room.down", ErrorCode.PresenceUnavailable],
    ]);
    const refusedSids = new Map<number, string>();
    const server = await ScriptedServer.start({
      capabilities: PRESENCE_BROKER,
      answer: (frame, s) => {
        if (frame.type === FrameType.Unsubscribe) {
          // as one node answers an UNSUBSCRIBE of what it never made (a cluster node keeps it, without its join)
          s.write(encodeError(ErrorCode.UnknownSubscription, false, `No live subscription with id ${frame.sid}.`, 0, 0));
          return;
        }
        if (frame.type !== FrameType.Subscribe) return;
        const code = codes.get(frame.pattern);
        if (code !== undefined) {
          refusedSids.set(frame.sid, frame.pattern);
          s.write(encodeError(code, false, `Refused: ${errorCodeName(code)} on '${frame.pattern}'.`, 0, frame.sid));
        }
      },
    });
    try {
      const client = await open(server.url, { name: "p-refused" });
      const errors: HeraldError[] = [];
      client.on("error", (e) => errors.push(e));
      const ok = client.subscribe("room.ok", { join: true });
      const refused = [...codes.keys()].map((topic) => client.subscribe(topic, { join: true, presenceEvents: true }));
      await ok.ready;
      for (const [i, sub] of refused.entries()) {
        const code = [...codes.values()][i]!;
        await assert.rejects(sub.ready, (e: HeraldError) => e.code === errorCodeName(code) && e.sid === sub.sid && e.fatal === false);
        await within(sub.closed, 5000, "the refused subscription to end");
        await assert.rejects(sub.next(), { code: errorCodeName(code) });
        await assert.rejects(sub.presenceEvents().next(), { code: errorCodeName(code) });
      }
      // A join refused PresenceFull or PresenceUnavailable is UNSUBSCRIBEd (a cluster node kept the subscription
      // without its join, spec §15.5); a PermissionDenied one is not (nothing was made); one node's UnknownSubscription
      // answer is absorbed, never reported.
      await client.flush();
      await client.flush();
      const unsubscribed = server.frames(FrameType.Unsubscribe).map((f) => refusedSids.get(f.sid)).sort();
      assert.deepEqual(unsubscribed, ["room.down", "room.full"]);
      assert.deepEqual(errors.map((e) => e.code).sort(), ["PermissionDenied", "PresenceFull", "PresenceUnavailable"]);
      assert.equal(client.state, "connected");
      assert.equal(ok.isClosed, false);
    } finally {
      server.close();
    }
  });

  test("presence(): PRESENCE out, the reply's page back; paging by cursor; occupancy() asks for limit 0; answers matched by request id", async () => {
    const members = [
      { client: "a1", identity: "alice", info: "Ann" },
      { client: "b2", identity: "bob", info: null },
      { client: "c3", identity: "alice", info: null },
    ];
    const held: Array<() => void> = [];
    const server = await ScriptedServer.start({
      capabilities: PRESENCE_BROKER,
      answer: (frame, s) => {
        if (frame.type !== FrameType.Presence) return;
        const limit = Number(frame.limit);
        const after = members.filter((m) => frame.cursor === null || m.client > frame.cursor);
        const page = after.slice(0, limit);
        const next = limit > 0 && after.length > limit ? page[page.length - 1]!.client : null;
        const write = () => s.write(encodePresenceReply(frame.requestId, 0, members.length, 2, page, next));
        if (frame.topic === "room.slow") held.push(write);
        else write();
        if (frame.topic === "room.fast") for (const w of held.splice(0)) w(); // the earlier query answered after this one
      },
    });
    try {
      const client = await open(server.url, { name: "p-query" });
      const first = await client.presence("room.1", { limit: 2 });
      assert.deepEqual({ ...first, entries: first.entries.map((e) => ({ ...e })) }, { members: 3, identities: 2, entries: members.slice(0, 2), next: "b2" });
      const second = await client.presence("room.1", { limit: 2, cursor: first.next });
      assert.deepEqual(second.entries.map((e) => e.client), ["c3"]);
      assert.equal(second.next, null);
      const all = await client.presence("room.1");
      assert.equal(all.entries.length, 3);
      assert.deepEqual(await client.occupancy("room.1"), { members: 3, identities: 2 });
      const queries = server.frames(FrameType.Presence);
      assert.deepEqual(
        queries.map((q) => ({ topic: q.topic, limit: q.limit, cursor: q.cursor })),
        [
          { topic: "room.1", limit: 2, cursor: null },
          { topic: "room.1", limit: 2, cursor: "b2" },
          { topic: "room.1", limit: 100, cursor: null },
          { topic: "room.1", limit: 0, cursor: null },
        ],
      );
      assert.equal(new Set(queries.map((q) => q.requestId)).size, 4, "a request id per query");
      // Two queries answered out of order (spec §15.3: answers may come in any order): each gets its own.
      const slow = client.presence("room.slow", { limit: 1 });
      const fast = client.occupancy("room.fast");
      assert.deepEqual(await fast, { members: 3, identities: 2 });
      assert.deepEqual((await slow).entries.map((e) => e.client), ["a1"]);
      // Checked here: one topic, a limit that is an integer.
      await assert.rejects(client.presence("room.*"), { code: "InvalidTopic" });
      await assert.rejects(client.occupancy("room.>"), { code: "InvalidTopic" });
      await assert.rejects(client.presence("room..1"), { code: "InvalidTopic" });
      await assert.rejects(client.presence("room.1", { limit: -1 }), { code: "InvalidOptions" });
      await assert.rejects(client.presence("room.1", { limit: 1.5 }), { code: "InvalidOptions" });
      assert.equal(server.frames(FrameType.Presence).length, 6);
    } finally {
      server.close();
    }
  });

  test("a refused query is a PresenceError with the reply's code (PermissionDenied, PresenceUnavailable); the connection stays", async () => {
    const server = await ScriptedServer.start({
      capabilities: PRESENCE_BROKER,
      answer: (frame, s) => {
        if (frame.type !== FrameType.Presence) return;
        const code = frame.topic === "secret.room" ? ErrorCode.PermissionDenied : frame.topic === "far.room" ? ErrorCode.PresenceUnavailable : 0;
        s.write(encodePresenceReply(frame.requestId, code, code === 0 ? 1 : 0, code === 0 ? 1 : 0));
      },
    });
    try {
      const client = await open(server.url, { name: "p-query-refused" });
      await assert.rejects(
        client.presence("secret.room"),
        (e: unknown) => e instanceof PresenceError && e.code === "PermissionDenied" && e.topic === "secret.room" && !e.fatal,
      );
      await assert.rejects(client.occupancy("far.room"), (e: unknown) => e instanceof PresenceError && e.code === "PresenceUnavailable");
      assert.deepEqual(await client.occupancy("open.room"), { members: 1, identities: 1 });
      assert.equal(client.state, "connected");
    } finally {
      server.close();
    }
  });

  test("a query waits for the connection, rejects when it is lost before the answer, and times out without one", async () => {
    let answering = false;
    const server = await ScriptedServer.start({
      capabilities: PRESENCE_BROKER,
      answer: (frame, s) => {
        if (frame.type === FrameType.Presence && answering) s.write(encodePresenceReply(frame.requestId, 0, 4, 3));
      },
    });
    try {
      // Asked before the connection is up: sent once it is.
      answering = true;
      const client = clients.add(createClient(server.url, { name: "p-query-wait", reconnectDelayMs: 50 }));
      assert.deepEqual(await within(client.occupancy("room.1"), 5000, "the occupancy"), { members: 4, identities: 3 });
      // Not answered: a timeout, then the connection's loss rejects what waits.
      answering = false;
      await assert.rejects(client.occupancy("room.1", { timeoutMs: 50 }), { code: "Timeout" });
      const waiting = client.presence("room.1");
      await until(() => server.frames(FrameType.Presence).length === 3, 5000, "the third PRESENCE");
      const back = once(client, "reconnect");
      server.sockets[0]!.destroy();
      await assert.rejects(waiting, { code: "ConnectionLost" });
      answering = true;
      await back;
      assert.deepEqual(await client.occupancy("room.1"), { members: 4, identities: 3 });
    } finally {
      server.close();
    }
  });
});
