/**
 * Deltas (spec §11.2) without a broker: what the client asks for (HELLO bit 7, SUBSCRIBE option 8, long-poll
 * `"deltas"` and `"delta"`), and how it takes what a broker may send: a full message then deltas against the
 * previous payload of the same sid, a loss (a reconnect, a new session, a dropped message), and a delta that cannot be
 * applied. Over a scripted TCP server and a scripted long-poll `fetch`; the application must always get full payloads.
 */
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { createDelta } from "fossil-delta";
import { type ConnectOptions, type HeraldClient, type HeraldError, type Message, type ResumeEvent } from "@herald/client";
import { Capabilities, FrameType, PayloadFlags, SubscribeOptions, encodeMessage } from "@herald/client/protocol";
import { OpenClients } from "./helpers/clients.js";
import { ScriptedServer } from "./helpers/scripted.js";
import { take, until } from "./helpers/wait.js";

const clients = new OpenClients();
const open = (url: string, options: ConnectOptions = {}): Promise<HeraldClient> => clients.open(url, options);
after(() => clients.closeAll());

const utf8 = new TextEncoder();
const GRANTED = Capabilities.Headers | Capabilities.QueueGroups | Capabilities.Deltas;

/** A JSON state stream: one document whose fields change a few at a time. */
const states = Array.from({ length: 8 }, (_, i) =>
  utf8.encode(JSON.stringify({ id: "ord-7f3a9c21", symbol: "ACME", side: "buy", quantity: 300, filled: i * 25, status: i < 7 ? "partial" : "filled", seq: i })),
);
const text = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);

/** The frames a broker sends for `payloads` on `sid`: the first full, each next one a delta against the one before. */
function stream(sid: number, topic: string, payloads: Uint8Array[]): Uint8Array[] {
  return payloads.map((p, i) =>
    i === 0 ? encodeMessage(sid, topic, null, PayloadFlags.None, p) : encodeMessage(sid, topic, null, PayloadFlags.Delta, createDelta(payloads[i - 1]!, p)),
  );
}

describe("deltas over TCP (scripted server)", () => {
  test("HELLO asks for deltas; a subscription asks for them on one topic only, and not where the broker did not grant them", async () => {
    const server = await ScriptedServer.start({ capabilities: GRANTED });
    const refusing = await ScriptedServer.start({ capabilities: Capabilities.Headers });
    try {
      const client = await open(server.url);
      assert.equal(client.info!.deltas, true);
      const one = client.subscribe("prices.ACME", { delta: true });
      const wild = client.subscribe("prices.*", { delta: true });
      const grouped = client.subscribe("prices.BETA", { delta: true, queue: "workers" });
      const plain = client.subscribe("prices.GAMMA");
      await Promise.all([one.ready, wild.ready, grouped.ready, plain.ready]);
      assert.equal(server.frames(FrameType.Hello)[0]!.capabilities & Capabilities.Deltas, Capabilities.Deltas);
      const options = new Map(server.frames(FrameType.Subscribe).map((s) => [s.pattern, s.options & SubscribeOptions.Delta]));
      assert.deepEqual(Object.fromEntries(options), { "prices.ACME": 8, "prices.*": 0, "prices.BETA": 0, "prices.GAMMA": 0 });

      const off = await open(server.url, { deltas: false });
      await off.subscribe("prices.ACME", { delta: true }).ready;
      assert.equal(server.frames(FrameType.Hello)[1]!.capabilities & Capabilities.Deltas, 0, "deltas: false asks for none");
      assert.equal(server.frames(FrameType.Subscribe).at(-1)!.options & SubscribeOptions.Delta, 0);

      const notGranted = await open(refusing.url);
      assert.equal(notGranted.info!.deltas, false);
      await notGranted.subscribe("prices.ACME", { delta: true }).ready;
      assert.equal(refusing.frames(FrameType.Subscribe)[0]!.options & SubscribeOptions.Delta, 0, "not granted: the bit is not sent");
    } finally {
      server.close();
      refusing.close();
    }
  });

  test("a full message then deltas: the application gets every full payload, also one equal to the one before and an empty one", async () => {
    const server = await ScriptedServer.start({ capabilities: GRANTED });
    try {
      const client = await open(server.url);
      const sub = client.subscribe("orders.7", { delta: true });
      await sub.ready;
      const sid = server.frames(FrameType.Subscribe)[0]!.sid;
      const payloads = [...states, states[7]!, new Uint8Array(), states[0]!];
      for (const frame of stream(sid, "orders.7", payloads)) server.sockets[0]!.write(frame);
      const got = await take(sub, payloads.length);
      assert.deepEqual(got.map((m) => text(m.payload)), payloads.map(text));
      assert.equal(sub.deltas, payloads.length - 1, "every message but the first came as a delta");
    } finally {
      server.close();
    }
  });

  test("a subscriber whose iterator drops the oldest still gets the right payloads: deltas are applied as they arrive", async () => {
    const server = await ScriptedServer.start({ capabilities: GRANTED });
    try {
      const client = await open(server.url);
      const errors: HeraldError[] = [];
      client.on("error", (e) => errors.push(e));
      const sub = client.subscribe("orders.7", { delta: true, maxPending: 2 });
      await sub.ready;
      const sid = server.frames(FrameType.Subscribe)[0]!.sid;
      for (const frame of stream(sid, "orders.7", states)) server.sockets[0]!.write(frame);
      await until(() => sub.received === states.length, 5000, "every message received");
      const got = await take(sub, 2);
      assert.equal(sub.dropped, states.length - 2);
      assert.deepEqual(got.map((m) => text(m.payload)), states.slice(-2).map(text));
      assert.deepEqual(errors.map((e) => e.code), ["MessagesDropped"], "the iterator's drop, no delta failure");
    } finally {
      server.close();
    }
  });

  test("after a reconnect the new connection's full message starts again: the right payloads on both sides of it", async () => {
    const server = await ScriptedServer.start({ capabilities: GRANTED });
    try {
      const client = await open(server.url);
      const got: Message[] = [];
      const sub = client.subscribe("orders.7", (m) => void got.push(m), { delta: true });
      await sub.ready;
      const sid = server.frames(FrameType.Subscribe)[0]!.sid;
      for (const frame of stream(sid, "orders.7", states.slice(0, 4))) server.sockets[0]!.write(frame);
      await until(() => got.length === 4, 5000, "the first connection's messages");
      server.sockets[0]!.destroy();
      await until(() => server.frames(FrameType.Subscribe).length === 2, 10_000, "the subscription made again on the new connection");
      const again = server.frames(FrameType.Subscribe)[1]!;
      assert.equal(again.options & SubscribeOptions.Delta, SubscribeOptions.Delta);
      for (const frame of stream(again.sid, "orders.7", states.slice(4))) server.sockets[1]!.write(frame);
      await until(() => got.length === states.length, 5000, "the second connection's messages");
      assert.deepEqual(got.map((m) => text(m.payload)), states.map(text));
    } finally {
      server.close();
    }
  });

  test("a delta that cannot be applied: one error event naming the sid, a resume that did not recover, the sid subscribed again; the deltas before the next full message are dropped", async () => {
    const server = await ScriptedServer.start({ capabilities: GRANTED });
    try {
      const client = await open(server.url);
      const errors: HeraldError[] = [];
      client.on("error", (e) => errors.push(e));
      const resumes: ResumeEvent[] = [];
      const got: Message[] = [];
      const sub = client.subscribe("orders.7", (m) => void got.push(m), { delta: true, onResume: (e) => void resumes.push(e) });
      const bystander: Message[] = [];
      const other = client.subscribe("orders.8", (m) => void bystander.push(m), { delta: true });
      await Promise.all([sub.ready, other.ready]);
      const [sid, otherSid] = server.frames(FrameType.Subscribe).map((s) => s.sid);
      const socket = server.sockets[0]!;
      socket.write(encodeMessage(sid!, "orders.7", null, PayloadFlags.None, states[0]!));
      const corrupt = createDelta(states[0]!, states[1]!);
      corrupt[corrupt.length - 2] ^= 1; // the checksum's last digit
      socket.write(encodeMessage(sid!, "orders.7", null, PayloadFlags.Delta, corrupt));
      socket.write(encodeMessage(sid!, "orders.7", null, PayloadFlags.Delta, createDelta(states[1]!, states[2]!))); // against the lost one: dropped
      for (const frame of stream(otherSid!, "orders.8", states.slice(0, 3))) socket.write(frame); // another subscription carries on

      await until(() => server.frames(FrameType.Subscribe).length === 3, 5000, "the failed sid subscribed again");
      const unsubscribes = server.frames(FrameType.Unsubscribe);
      assert.deepEqual(unsubscribes.map((u) => u.sid), [sid], "UNSUBSCRIBE then SUBSCRIBE of the same sid");
      const again = server.frames(FrameType.Subscribe)[2]!;
      assert.equal(again.sid, sid);
      assert.equal(again.options & SubscribeOptions.Delta, SubscribeOptions.Delta);
      socket.write(encodeMessage(sid!, "orders.7", null, PayloadFlags.Delta, createDelta(states[2]!, states[3]!))); // still in flight: dropped
      for (const frame of stream(sid!, "orders.7", states.slice(4))) socket.write(frame); // the new subscription: full first
      await until(() => got.length === 1 + states.length - 4 && bystander.length === 3, 5000, "the messages after the full one");

      assert.deepEqual(got.map((m) => text(m.payload)), [states[0]!, ...states.slice(4)].map(text));
      assert.deepEqual(bystander.map((m) => text(m.payload)), states.slice(0, 3).map(text), "the other subscription is not disturbed");
      assert.deepEqual(errors.map((e) => [e.code, e.sid]), [["DecompressionFailed", sid]], "one error, naming the subscription");
      assert.equal(resumes.length, 1);
      assert.equal(resumes[0]!.recovered, false);
      assert.equal(client.state, "connected");
      assert.equal(sub.isClosed, false);
    } finally {
      server.close();
    }
  });

  test("a delta before any full message, or for a subscription that did not ask, is refused the same way", async () => {
    const server = await ScriptedServer.start({ capabilities: GRANTED });
    try {
      const client = await open(server.url);
      const errors: HeraldError[] = [];
      client.on("error", (e) => errors.push(e));
      const got: Message[] = [];
      await client.subscribe("orders.7", (m) => void got.push(m), { delta: true }).ready;
      await client.subscribe("orders.9", (m) => void got.push(m)).ready;
      const [sid, plainSid] = server.frames(FrameType.Subscribe).map((s) => s.sid);
      server.sockets[0]!.write(encodeMessage(sid!, "orders.7", null, PayloadFlags.Delta, createDelta(new Uint8Array(), states[0]!)));
      server.sockets[0]!.write(encodeMessage(plainSid!, "orders.9", null, PayloadFlags.Delta, createDelta(new Uint8Array(), states[0]!)));
      server.sockets[0]!.write(encodeMessage(plainSid!, "orders.9", null, PayloadFlags.None, states[1]!));
      await until(() => got.length === 1, 5000, "the full message after");
      assert.deepEqual(errors.map((e) => [e.code, e.sid]).sort(), [["DecompressionFailed", sid], ["DecompressionFailed", plainSid]].sort());
      assert.equal(text(got[0]!.payload), text(states[1]!));
    } finally {
      server.close();
    }
  });
});

/**
 * A long-poll broker in a `fetch`: sessions, subscriptions and binary poll answers of the frames a test queues
 * (longpoll §1-§2); a poll waits until there is something past its ack.
 */
class ScriptedPoll {
  readonly sessions: Record<string, unknown>[] = [];
  readonly subscribes: Record<string, unknown>[] = [];
  readonly unsubscribes: number[] = [];
  private frames: Uint8Array[] = [];
  private firstSeq = 1;
  private wake: (() => void) | null = null;

  constructor(private readonly grant: boolean) {}

  /** Queues MESSAGE frames for the current session's next poll. */
  send(...frames: Uint8Array[]): void {
    this.frames.push(...frames);
    this.wake?.();
  }

  /** Ends the session: the next poll is answered 410, and the client makes a new one. */
  expire(): void {
    this.gone = true;
    this.wake?.();
  }

  private gone = false;

  readonly fetch: typeof fetch = async (input, init) => {
    const url = new URL(String(input));
    const method = init?.method ?? "GET";
    const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
    if (url.pathname === "/poll/sessions" && method === "POST") {
      const body = JSON.parse(String(init!.body)) as Record<string, unknown>;
      this.sessions.push(body);
      this.gone = false;
      this.frames = [];
      this.firstSeq = 1;
      return json(201, { session: `s${this.sessions.length}`, headers: true, pollTimeoutMs: 5000, ...(this.grant && body.deltas === true ? { deltas: true } : {}) });
    }
    if (url.pathname.endsWith("/subscriptions") && method === "POST") {
      this.subscribes.push(JSON.parse(String(init!.body)) as Record<string, unknown>);
      return new Response(null, { status: 204 });
    }
    if (url.pathname.includes("/subscriptions/") && method === "DELETE") {
      this.unsubscribes.push(Number(url.pathname.split("/").at(-1)));
      return new Response(null, { status: 204 });
    }
    if (url.pathname.endsWith("/messages")) {
      const ack = Number(url.searchParams.get("ack"));
      while (!this.gone && this.firstSeq + this.frames.length - 1 <= ack) {
        await new Promise<void>((resolve) => {
          this.wake = resolve;
          init?.signal?.addEventListener("abort", () => resolve(), { once: true });
        });
        if (init?.signal?.aborted) throw new DOMException("aborted", "AbortError");
      }
      if (this.gone) return json(410, { code: "SessionExpired", detail: "gone" });
      const from = ack + 1 - this.firstSeq;
      const answer = this.frames.slice(from);
      const body = new Uint8Array(answer.reduce((n, f) => n + f.length, 0));
      answer.reduce((at, f) => (body.set(f, at), at + f.length), 0);
      return new Response(body, {
        status: 200,
        headers: { "Content-Type": "application/vnd.herald.frames", "Herald-First-Sequence": String(ack + 1), "Herald-Count": String(answer.length), "Herald-Dropped": "0" },
      });
    }
    return json(404, { code: "NotFound" });
  };
}

describe("deltas over long-poll (scripted fetch)", () => {
  test("the session and the subscription ask for deltas; full then deltas give the full payloads; a new session starts from a full message", async () => {
    const poll = new ScriptedPoll(true);
    const client = await open("http://127.0.0.1:1", { transport: "longpoll", fetch: poll.fetch });
    assert.equal(poll.sessions[0]!.deltas, true);
    assert.equal(client.info!.deltas, true);
    const got: Message[] = [];
    const sub = client.subscribe("orders.7", (m) => void got.push(m), { delta: true });
    await sub.ready;
    assert.equal(poll.subscribes[0]!.delta, true);
    const sid = poll.subscribes[0]!.sid as number;
    poll.send(...stream(sid, "orders.7", states.slice(0, 4)));
    await until(() => got.length === 4, 5000, "the first session's messages");

    poll.expire();
    await until(() => poll.subscribes.length === 2, 10_000, "the subscription made again on a new session");
    assert.equal(poll.subscribes[1]!.delta, true);
    poll.send(...stream(sid, "orders.7", states.slice(4)));
    await until(() => got.length === states.length, 5000, "the new session's messages");
    assert.deepEqual(got.map((m) => text(m.payload)), states.map(text));
  });

  test("not granted: no delta asked per subscription; a delta that cannot be applied is reported and the sid subscribed again", async () => {
    const refusing = new ScriptedPoll(false);
    const plain = await open("http://127.0.0.1:1", { transport: "longpoll", fetch: refusing.fetch });
    assert.equal(plain.info!.deltas, false);
    await plain.subscribe("orders.7", { delta: true }).ready;
    assert.equal(refusing.subscribes[0]!.delta, undefined);

    const poll = new ScriptedPoll(true);
    const client = await open("http://127.0.0.1:1", { transport: "longpoll", fetch: poll.fetch });
    const errors: HeraldError[] = [];
    client.on("error", (e) => errors.push(e));
    const got: Message[] = [];
    await client.subscribe("orders.7", (m) => void got.push(m), { delta: true }).ready;
    const sid = poll.subscribes[0]!.sid as number;
    poll.send(encodeMessage(sid, "orders.7", null, PayloadFlags.Delta, createDelta(states[0]!, states[1]!)));
    await until(() => poll.subscribes.length === 2, 5000, "the sid subscribed again");
    assert.deepEqual(poll.unsubscribes, [sid]);
    poll.send(...stream(sid, "orders.7", states.slice(2, 5)));
    await until(() => got.length === 3, 5000, "the full message and its deltas");
    assert.deepEqual(got.map((m) => text(m.payload)), states.slice(2, 5).map(text));
    assert.deepEqual(errors.map((e) => [e.code, e.sid]), [["DecompressionFailed", sid]]);
  });
});
