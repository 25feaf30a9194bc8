/**
 * Integration: the client against a real broker (started here as a child process on free ports), over
 * TCP, WebSocket and HTTP long-poll, including reconnects across a broker restart and a lost poll response.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createConnection, createServer, type Socket } from "node:net";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import {
  HeraldError,
  NoRespondersError,
  RequestTimeoutError,
  connect,
  createClient,
  type ConnectOptions,
  type HeraldClient,
  type Subscription,
} from "@herald/client";
import {
  FrameReader,
  FrameType,
  decodeFrame,
  encodeError,
  encodeHello,
  encodeMessage,
  encodePing,
  encodeSubscribe,
  encodeWelcome,
  parsePollBody,
  zstdDecompress,
  type Frame,
} from "@herald/client/protocol";
import { Broker, freePort } from "./helpers/broker.js";
import { nextMessage, once, stateIs, take, uniqueTopic, until, within } from "./helpers/wait.js";
import { OpenClients, fast } from "./helpers/clients.js";

let broker: Broker;
const clients = new OpenClients();
const open = (url: string, options: ConnectOptions = {}): Promise<HeraldClient> => clients.open(url, options);

const tcp = (options: ConnectOptions = {}) => open(broker.tcpUrl, { name: "it-tcp", ...options });
const poll = (options: ConnectOptions = {}) => open(broker.httpUrl, { name: "it-poll", transport: "longpoll", ...options });

before(async () => {
  // Compression never backs off for CPU here (a busy test machine would skip it at random): the Zstd tests can then
  // require the first large compressible payload to travel compressed.
  broker = await Broker.start([
    "--Herald:LongPoll:PollTimeout=00:00:03",
    "--Herald:Compression:CpuBackoffStart=1",
    "--Herald:Compression:CpuDisableLimit=1",
  ]);
});

after(async () => {
  await clients.closeAll();
  await broker?.stop();
});

/**
 * Absence by a barrier: `marker` is published (on the same path, after the thing that must not arrive) to a
 * topic `sub` holds; the next message `sub` gets must be that marker, so nothing came before it.
 */
async function nothingBefore(sub: Subscription, marker: () => Promise<unknown>, text = "marker"): Promise<void> {
  await marker();
  const next = await nextMessage(sub);
  assert.equal(next.text(), text, `a message arrived before the marker: '${next.topic}': ${next.text()}`);
}

/** One poll the client sent (`GET .../messages`): its ack, then its answer's status and problem code. */
interface PollSeen {
  ack: string;
  status?: number;
  code?: string;
  retryAfter?: string;
}

/** A fetch that records the client's polls in `polls` and hands the session token of a new session to `onSession`. */
function pollSpy(polls: PollSeen[], onSession: (token: string) => void): typeof fetch {
  return async (input, init) => {
    const url = new URL(String(input));
    const seen: PollSeen | null = url.pathname.endsWith("/messages") ? { ack: url.searchParams.get("ack")! } : null;
    if (seen) polls.push(seen);
    const res = await fetch(input, init);
    if (url.pathname.endsWith("/poll/sessions") && res.status === 201) {
      onSession(((await res.clone().json()) as { session: string }).session);
    }
    if (seen) {
      if (res.status !== 200) {
        seen.code = ((await res.clone().json()) as { code?: string }).code;
        const retryAfter = res.headers.get("Retry-After");
        if (retryAfter !== null) seen.retryAfter = retryAfter;
      }
      seen.status = res.status;
    }
    return res;
  };
}

/** How many polls `broker` holds now (its /varz: the test's own broker). */
async function heldPolls(broker: Broker): Promise<number> {
  const varz = (await (await fetch(`${broker.monitoringUrl}/varz`)).json()) as { held_polls: number };
  return varz.held_polls;
}

// TCP and WebSocket carry the same frames through the same session (spec §1): every behaviour over both.
for (const kind of ["tcp", "websocket"] as const) {
  describe(kind === "tcp" ? "TCP" : "WebSocket", () => {
    const over = (options: ConnectOptions = {}) => open(kind === "tcp" ? broker.tcpUrl : broker.wsUrl, { name: `it-${kind}`, ...options });

    test("connects: WELCOME limits, state, info", async () => {
      const client = await over();
      assert.equal(client.state, "connected");
      assert.equal(client.info?.transport, kind);
      assert.equal(client.info?.serverName, "herald");
      assert.equal(client.info?.limits.max_frame, 1024 * 1024);
      assert.equal(client.info?.limits.max_payload, 1024 * 1024 - 2 * 256 - 31);
      assert.equal(client.info?.compression, true);
    });

    test("pub/sub: strings, binary, empty payloads, reply_to", async () => {
      const sub_ = await over();
      const pub = await over();
      const topic = uniqueTopic("it.tcp");
      const sub = sub_.subscribe(`${topic}.>`);
      await sub.ready;
      const binary = Uint8Array.from({ length: 256 }, (_, i) => i);
      await pub.publish(`${topic}.a`, "héllo €");
      await pub.publish(`${topic}.b`, binary, { replyTo: "_INBOX.x.1" });
      await pub.publish(`${topic}.c`, new Uint8Array(0));
      const [a, b, c] = await take(sub, 3);
      assert.equal(a!.topic, `${topic}.a`);
      assert.equal(a!.text(), "héllo €");
      assert.equal(a!.replyTo, null);
      assert.deepEqual(b!.payload, binary);
      assert.equal(b!.replyTo, "_INBOX.x.1");
      assert.equal(c!.payload.length, 0);
    });

    test("wildcards: * is one token, > the rest", async () => {
      const client = await over();
      const topic = uniqueTopic("it.wild");
      const star = client.subscribe(`${topic}.*.x`);
      const tail = client.subscribe(`${topic}.>`);
      await Promise.all([star.ready, tail.ready]);
      await client.publish(`${topic}.a.x`, "1");
      await client.publish(`${topic}.a.b.x`, "2");
      assert.equal((await nextMessage(star)).text(), "1");
      assert.deepEqual((await take(tail, 2)).map((m) => m.text()), ["1", "2"]);
      // "2" (two tokens where * takes one) never reached `star`: a marker it does match, published after, comes next.
      await nothingBefore(star, () => client.publish(`${topic}.m.x`, "marker"));
    });

    test("callback subscription and unsubscribe", async () => {
      const client = await over();
      const topic = uniqueTopic("it.cb");
      const got: string[] = [];
      const sub = client.subscribe(topic, (msg) => {
        got.push(msg.text());
      });
      const markers = client.subscribe(`${topic}.marker`); // the barrier after the unsubscribe
      await Promise.all([sub.ready, markers.ready]);
      await client.publish(topic, "one");
      await client.publish(topic, "two");
      await client.flush();
      await until(() => got.length >= 2, 5000, "two callbacks");
      await sub.unsubscribe();
      assert.equal(sub.isClosed, true);
      await client.publish(topic, "three");
      // Published after "three" on the same connection, delivered on the same one: "three" would be first.
      await nothingBefore(markers, () => client.publish(`${topic}.marker`, "marker"));
      assert.deepEqual(got, ["one", "two"]);
    });

    test("async iterator: for await, and leaving the loop unsubscribes", async () => {
      const client = await over();
      const topic = uniqueTopic("it.iter");
      const sub = client.subscribe(topic);
      await sub.ready;
      for (let i = 0; i < 5; i++) await client.publish(topic, `m${i}`);
      const got: string[] = [];
      for await (const msg of sub) {
        got.push(msg.text());
        if (got.length === 3) break;
      }
      assert.deepEqual(got, ["m0", "m1", "m2"]);
      assert.equal(sub.isClosed, true);
      assert.equal(await sub.next(), undefined);
    });

    test("noEcho skips this client's own publications", async () => {
      const a = await over();
      const b = await over();
      const topic = uniqueTopic("it.echo");
      const sub = a.subscribe(topic, { noEcho: true });
      await sub.ready;
      await a.publish(topic, "mine");
      await a.flush(); // PING/PONG: the broker has routed "mine" (to no one) before b publishes
      // b's publication is the marker: an echo of "mine" would have been queued to `a` before it.
      await nothingBefore(sub, () => b.publish(topic, "theirs"), "theirs");
    });

    test("request/reply, and a request nobody answers times out (no_responders not asked for)", async () => {
      const responder = await over();
      const requester = await over({ noResponders: false });
      const topic = uniqueTopic("it.rpc");
      const service = responder.subscribe(topic, (msg) => msg.respond(`echo:${msg.text()}`));
      await service.ready;
      const replies = await Promise.all([1, 2, 3].map((i) => requester.request(topic, `q${i}`, { timeoutMs: 5000 })));
      assert.deepEqual(replies.map((r) => r.text()), ["echo:q1", "echo:q2", "echo:q3"]);
      assert.match(replies[0]!.topic, /^_INBOX\.[0-9A-Za-z]+\.\d+$/);
      // The behaviour, not its timing: an unanswered request rejects with Timeout (the bound only catches a hang).
      const unanswered = requester.request(uniqueTopic("it.nobody"), "hello?", { timeoutMs: 300 });
      await assert.rejects(within(unanswered, 10_000, "the unanswered request to settle (a hang bound)"), (e: Error) => {
        assert.ok(e instanceof RequestTimeoutError, `not a RequestTimeoutError: ${e}`);
        assert.ok(e instanceof HeraldError, `not a HeraldError: ${e}`);
        assert.equal(e.code, "Timeout", e.message);
        return true;
      });
    });

    test("bad topics and patterns are refused locally (the broker would close the connection)", async () => {
      const client = await over();
      await assert.rejects(client.publish("a..b", "x"), { code: "InvalidTopic" });
      await assert.rejects(client.publish("$SYS.x", "x"), { code: "ReservedTopic" });
      await assert.rejects(client.publish("a.*", "x"), { code: "InvalidTopic" });
      await assert.rejects(client.publish("x".repeat(300), "x"), { code: "TopicTooLong" });
      assert.throws(() => client.subscribe("a.>.b"), { code: "InvalidTopic" });
      await assert.rejects(client.publish("ok.topic", new Uint8Array(2 * 1024 * 1024)), { code: "FrameTooLarge" });
      // Within max_frame, but over max_payload: its MESSAGE would not fit in max_frame (spec §4.2).
      const maxPayload = Number(client.info?.limits.max_payload);
      await assert.rejects(client.publish("ok.topic", new Uint8Array(maxPayload + 1)), { code: "FrameTooLarge" });
      // Still connected and working.
      const topic = uniqueTopic("it.after");
      const sub = client.subscribe(topic);
      await sub.ready;
      await client.publish(topic, "fine");
      assert.equal((await nextMessage(sub)).text(), "fine");
      assert.equal(client.state, "connected");
    });

    test("Zstd: the broker compresses large payloads for a client that asked; they arrive decompressed", async () => {
      const topic = uniqueTopic("it.zstd");
      const text = "Herald compresses repetitive payloads. ".repeat(2000); // ~78 KB
      // The raw protocol shows the MESSAGE really travels compressed (flags bit 0)...
      const raw = await rawTcp(broker.tcpPort, 1);
      assert.equal(raw.welcome.capabilities & 1, 1, "zstd granted in WELCOME");
      raw.socket.write(encodeSubscribe(1, topic));
      raw.socket.write(encodePing());
      await raw.nextOf(FrameType.Pong);
      // ...and the client's subscription gets the same payload decompressed.
      const client = await over({ compression: true });
      const sub = client.subscribe(topic);
      await sub.ready;
      const pub = await over({ compression: false });
      await pub.publish(topic, text);
      const frame = await raw.nextOf(FrameType.Message);
      assert.equal((await nextMessage(sub)).text(), text);
      assert.ok(frame.type === FrameType.Message && frame.flags === 1, "the payload travelled compressed (flags bit 0)");
      assert.ok(frame.payload.length < text.length / 10, `compressed to ${frame.payload.length} bytes`);
      assert.equal(new TextDecoder().decode(zstdDecompress(frame.payload, 1 << 20)), text);
      // Bounded: a payload that would decompress past the limit is refused (no decompression bombs).
      assert.throws(() => zstdDecompress(frame.payload, 1000), { code: "DecompressionFailed" });
      assert.throws(() => zstdDecompress(frame.payload.subarray(0, 20), 1 << 20), { code: "DecompressionFailed" });
      raw.socket.destroy();
    });
  });
}

describe("TCP against a scripted server", () => {
  test("answers PING with PONG, reports non-fatal ERRORs, drops unknown sids, and reconnects after a fatal ERROR", async () => {
    const received: Frame[] = [];
    const sockets: Socket[] = [];
    let onFrame: (() => void) | null = null;
    const server = createServer((socket) => {
      sockets.push(socket);
      const reader = new FrameReader();
      socket.on("data", (chunk) => {
        reader.push(chunk);
        for (let body = reader.next(); body; body = reader.next()) {
          const frame = decodeFrame(body);
          received.push(frame);
          if (frame.type === FrameType.Hello) {
            socket.write(encodeWelcome("scripted", sockets.length, 0, { max_frame: 65536, max_topic: 64, ping_interval_ms: 60_000 }));
          }
          // The second connection answers PINGs like the broker does.
          if (frame.type === FrameType.Ping && socket === sockets[1]) socket.write(new Uint8Array([0, 0, 0, 2, 0x91, 0x08]));
          onFrame?.();
        }
      });
      socket.on("error", () => undefined);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as { port: number }).port;
    const waitFor = (type: number, count = 1) =>
      within(
        new Promise<void>((resolve) => {
          const check = () => {
            if (received.filter((f) => f.type === type).length >= count) {
              onFrame = null;
              resolve();
            }
          };
          onFrame = check;
          check();
        }),
        5000,
        `frame type ${type} x${count}`,
      );
    try {
      const client = await open(`tcp://127.0.0.1:${port}`, { name: "scripted-test" });
      assert.equal(client.info?.serverName, "scripted");
      const hello = received.find((f) => f.type === FrameType.Hello) as Extract<Frame, { type: 1 }>;
      // zstd (1), headers (2), no_responders (4), history (8), queue_groups (16), presence (32) and deltas (128): all
      // asked for by default (spec §4.1); no client info without the `info` option.
      assert.deepEqual({ ...hello }, { type: 1, version: 1, clientName: "scripted-test", capabilities: 191, auth: null, info: null });
      // A topic over the WELCOME's max_topic (64) is refused before it is sent.
      await assert.rejects(client.publish("t".repeat(65), "x"), { code: "TopicTooLong" });
      // A broker that granted no headers (capabilities 0): publishing with headers is refused here.
      assert.equal(client.info?.headers, false);
      assert.equal(client.info?.noResponders, false);
      await assert.rejects(client.publish("a.b", "x", { headers: { "X-A": "1" } }), { code: "HeadersNotNegotiated" });

      sockets[0]!.write(encodePing());
      await waitFor(FrameType.Pong);
      // The PONG went out after both refused publications: neither was sent before it.
      assert.deepEqual(received.filter((f) => f.type === FrameType.Publish), []);

      const errors: HeraldError[] = [];
      client.on("error", (e) => errors.push(e));
      const sub = client.subscribe("a.b");
      await waitFor(FrameType.Subscribe);
      sockets[0]!.write(encodeError(14, false, "Dropped 5 messages.", 5));
      sockets[0]!.write(encodeMessage(999, "a.b", null, 0, new TextEncoder().encode("unknown sid")));
      sockets[0]!.write(encodeMessage(sub.sid, "a.b", "_INBOX.z.1", 0, new TextEncoder().encode("known")));
      const msg = await nextMessage(sub);
      assert.equal(msg.text(), "known");
      assert.equal(msg.replyTo, "_INBOX.z.1");
      assert.equal(errors.length, 1);
      assert.equal(errors[0]!.code, "MessagesDropped");
      assert.equal(errors[0]!.count, 5);
      assert.equal(client.state, "connected");

      // A fatal ERROR ends the connection: the client reconnects and subscribes again with the same sid.
      const lost = once(client, "disconnect");
      const back = once(client, "reconnect");
      sockets[0]!.write(encodeError(17, true, "Shutting down.", 0));
      const [error] = await lost;
      assert.equal((error as HeraldError).code, "ShuttingDown");
      assert.equal((error as HeraldError).fatal, true);
      await waitFor(FrameType.Subscribe, 2);
      await back; // after the PING/PONG behind the re-subscription
      assert.ok(received.filter((f) => f.type === FrameType.Ping).length >= 2);
      const resubscribe = received.filter((f) => f.type === FrameType.Subscribe).map((f) => ({ ...f }));
      assert.deepEqual(resubscribe[1], resubscribe[0]);
      await client.close();
    } finally {
      for (const socket of sockets) socket.destroy();
      server.close();
    }
  });
});

describe("long-poll", () => {
  test("connects: session, info", async () => {
    const client = await poll();
    assert.equal(client.state, "connected");
    assert.equal(client.info?.transport, "longpoll");
    assert.equal(client.info?.compression, true);
    assert.equal(client.info?.limits.pollTimeoutMs, 3000);
  });

  test("pub/sub over long-poll, both ways with TCP", async () => {
    const web = await poll();
    const node = await tcp();
    const topic = uniqueTopic("it.lp");
    const webSub = web.subscribe(`${topic}.>`);
    const nodeSub = node.subscribe(`${topic}.>`);
    await Promise.all([webSub.ready, nodeSub.ready]);
    await node.publish(`${topic}.from-tcp`, "hello long-poll", { replyTo: "_INBOX.r.1" });
    const m1 = await nextMessage(webSub);
    assert.equal(m1.topic, `${topic}.from-tcp`);
    assert.equal(m1.text(), "hello long-poll");
    assert.equal(m1.replyTo, "_INBOX.r.1");
    assert.equal((await nextMessage(nodeSub)).text(), "hello long-poll");
    const binary = Uint8Array.from({ length: 300 }, (_, i) => (i * 7) & 0xff);
    await web.publish(`${topic}.from-poll`, binary);
    const m2 = await nextMessage(nodeSub);
    assert.equal(m2.topic, `${topic}.from-poll`);
    assert.deepEqual(m2.payload, binary);
    assert.deepEqual((await nextMessage(webSub)).payload, binary);
  });

  test("publishes keep their order (batched as frames) and a subscribe made before a publish is live for it", async () => {
    let publishRequests = 0;
    const countingFetch: typeof fetch = (input, init) => {
      if (new URL(String(input)).pathname.endsWith("/publish")) publishRequests++;
      return fetch(input, init);
    };
    const web = await poll({ fetch: countingFetch });
    const node = await tcp();
    const topic = uniqueTopic("it.order");
    const nodeSub = node.subscribe(topic);
    await nodeSub.ready;
    // Not awaited one by one: they queue up and go out in few requests, in order.
    const own = web.subscribe(topic); // no await: the publishes below queue behind it
    await Promise.all(Array.from({ length: 300 }, (_, i) => web.publish(topic, `n${i}`)));
    const got = await take(nodeSub, 300, 20_000);
    assert.deepEqual(got.map((m) => m.text()), Array.from({ length: 300 }, (_, i) => `n${i}`));
    const mine = await take(own, 300, 20_000);
    assert.equal(mine[0]!.text(), "n0");
    assert.equal(mine[299]!.text(), "n299");
    assert.ok(publishRequests < 100, `300 publishes went out in ${publishRequests} requests`);
  });

  test("request/reply across transports, callback and unsubscribe over long-poll", async () => {
    const web = await poll();
    const node = await tcp();
    const topic = uniqueTopic("it.lprpc");
    const service = web.subscribe(topic, (msg) => msg.respond(msg.text().toUpperCase()));
    await service.ready;
    assert.equal((await node.request(topic, "shout", { timeoutMs: 5000 })).text(), "SHOUT");
    const back = node.subscribe(`${topic}.svc`, (msg) => msg.respond(`node:${msg.text()}`));
    await back.ready;
    assert.equal((await web.request(`${topic}.svc`, "hi", { timeoutMs: 5000 })).text(), "node:hi");
    await service.unsubscribe();
    // The broker has dropped the subscription (the DELETE was answered): the request reaches nobody, and says so at once.
    await assert.rejects(within(node.request(topic, "anyone?", { timeoutMs: 60_000 }), 30_000, "the no-responders answer"), NoRespondersError);
  });

  test("noEcho over long-poll", async () => {
    const web = await poll();
    const node = await tcp();
    const topic = uniqueTopic("it.lpecho");
    const sub = web.subscribe(topic, { noEcho: true });
    await sub.ready;
    await web.publish(topic, "mine"); // resolves once the broker accepted (and routed) it
    // node's publication is the marker: an echo of "mine" would have been queued to the session before it.
    await nothingBefore(sub, () => node.publish(topic, "theirs"), "theirs");
  });

  test("a poll response lost in transit is delivered again by the next poll (same ack): no loss, no duplicate", async () => {
    const polls: string[] = [];
    let cut = 0;
    const lossyFetch: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      const url = new URL(String(input));
      if (url.pathname.endsWith("/messages")) {
        polls.push(url.searchParams.get("ack")!);
        if (cut === 0 && res.status === 200 && res.headers.get("Herald-Count") !== "0") {
          cut++;
          await res.arrayBuffer(); // the broker sent the whole response...
          // ...and the connection broke before the client read it.
          const broken = new ReadableStream({ start: (c) => c.error(new TypeError("terminated: other side closed")) });
          return new Response(broken, { status: 200, headers: res.headers });
        }
      }
      return res;
    };
    const redeliveries = async (): Promise<number> => {
      const metrics = await (await fetch(`${broker.monitoringUrl}/metrics`)).text();
      return Number(/^herald_longpoll_redeliveries_total(?:\{[^}]*\})? (\d+)/m.exec(metrics)?.[1] ?? 0);
    };
    const before = await redeliveries(); // this file's tests run one at a time on its broker
    const web = await poll({ fetch: lossyFetch });
    const node = await tcp();
    const topic = uniqueTopic("it.lost");
    const sub = web.subscribe(topic);
    await sub.ready;
    await node.publish(topic, "first");
    await node.publish(topic, "second");
    const got = await take(sub, 2);
    assert.deepEqual(got.map((m) => m.text()), ["first", "second"]);
    await node.publish(topic, "third");
    assert.equal((await nextMessage(sub)).text(), "third");
    // No duplicate of "third" either: the next message is a marker published after it.
    await nothingBefore(sub, () => node.publish(topic, "marker"));
    assert.equal(cut, 1, "one poll response was cut");
    // The poll after the cut one asked with the same ack.
    const i = polls.findIndex((ack, k) => k > 0 && ack === polls[k - 1] && ack !== undefined);
    assert.ok(i > 0, `a poll repeated its ack: ${polls.join(",")}`);
    assert.equal((await redeliveries()) - before, 1, "the broker counted the one response it sent again");
  });

  test("409 PollReplaced: a second poll on the session answers the client's held one 409 PollReplaced; the client polls again with the same ack (answering that one 409) and nothing is lost", async () => {
    let token = "";
    const polls: PollSeen[] = [];
    const web = await poll({ fetch: pollSpy(polls, (t) => (token = t)) });
    const node = await tcp();
    const topic = uniqueTopic("it.409");
    // resume: false: a resuming subscription's status message (spec §13) would take sequence 1 of the session.
    const sub = web.subscribe(topic, { resume: false });
    await sub.ready;
    await node.publish(topic, "before");
    assert.equal((await nextMessage(sub)).text(), "before");
    const messages = `${broker.httpUrl}/poll/sessions/${token}/messages`;

    // An outside poll on the same session (a second tab sharing it) takes over the client's held poll. If it
    // reaches the broker before the client's poll, that one replaces it instead: then it is sent again.
    let replaced: PollSeen | undefined;
    let outside: Promise<Response> | undefined;
    for (let attempt = 1; !replaced; attempt++) {
      assert.ok(attempt <= 5, `the outside poll never replaced the client's: ${JSON.stringify(polls)}`);
      await until(() => polls.some((p) => p.status === undefined), 10_000, "the client's poll to be sent");
      const held = polls.find((p) => p.status === undefined)!;
      let answered = false;
      const attemptPoll = fetch(`${messages}?ack=${held.ack}`);
      void attemptPoll.then(() => (answered = true));
      await until(() => held.status !== undefined || answered, 10_000, "the client's poll or the outside poll to be answered");
      if (held.status === 409) {
        replaced = held;
        outside = attemptPoll;
      } else {
        await attemptPoll.then((r) => r.arrayBuffer()).catch(() => undefined);
      }
    }
    assert.equal(replaced.code, "PollReplaced");
    assert.equal(replaced.ack, "1");
    // The client polls again (same ack), which replaces the outside poll in turn: 409 PollReplaced.
    const taken = await within(outside!, 10_000, "the outside poll's answer (a hang bound)");
    assert.equal(taken.status, 409);
    assert.equal(((await taken.json()) as { code?: string }).code, "PollReplaced");
    const next = polls[polls.indexOf(replaced) + 1];
    assert.equal(next?.ack, replaced.ack, "the poll after the 409 asks with the same ack");
    // Nothing lost and nothing twice: the next message is the one published now, not "before" again.
    await node.publish(topic, "after");
    assert.equal((await nextMessage(sub, 8000)).text(), "after");
  });

  test("503 TooManyPolls with Retry-After (a broker that holds one poll at a time): the client waits and polls again with the same ack", async () => {
    const busy = await Broker.start(["--Herald:LongPoll:MaxConcurrentPolls=1", "--Herald:LongPoll:PollTimeout=00:00:30"]);
    const own: HeraldClient[] = [];
    try {
      const polls: PollSeen[] = [];
      // The client's first poll after a message waits here until an outside poll holds the broker's one slot.
      let openGate!: () => void;
      const gate = new Promise<void>((resolve) => (openGate = resolve));
      let gated = false;
      const spy = pollSpy(polls, () => undefined);
      const gatedFetch: typeof fetch = async (input, init) => {
        const url = new URL(String(input));
        if (!gated && url.pathname.endsWith("/messages") && url.searchParams.get("ack") !== "0") {
          gated = true;
          await gate;
        }
        return spy(input, init);
      };
      const web = await connect(busy.httpUrl, { ...fast, name: "it-503", transport: "longpoll", fetch: gatedFetch });
      own.push(web);
      const node = await connect(busy.tcpUrl, { ...fast, name: "it-503-pub" });
      own.push(node);
      const topic = uniqueTopic("it.503");
      // resume: false: a resuming subscription's status message (spec §13) would take sequence 1 of the
      // session, and the gate above expects "a" to be the first.
      const sub = web.subscribe(topic, { resume: false });
      await sub.ready;
      await node.publish(topic, "a");
      assert.equal((await nextMessage(sub)).text(), "a");
      await until(() => gated, 10_000, "the client's poll with ack 1 to be gated");
      await until(async () => (await heldPolls(busy)) === 0, 10_000, "the client's poll with ack 0 to be answered");

      // An outside session takes the one slot...
      const created = await fetch(`${busy.httpUrl}/poll/sessions`, { method: "POST" });
      assert.equal(created.status, 201);
      const other = `${busy.httpUrl}/poll/sessions/${((await created.json()) as { session: string }).session}`;
      const outside = fetch(`${other}/messages?ack=0`);
      await until(async () => (await heldPolls(busy)) === 1, 10_000, "the outside poll to be held");
      // ...so the client's poll is refused with 503 TooManyPolls and Retry-After.
      openGate();
      await until(() => polls.some((p) => p.status === 503), 10_000, "the client's poll to be refused");
      // The slot comes free (the outside session ends, its poll answered 410); the client's retry is held.
      assert.equal((await fetch(other, { method: "DELETE" })).status, 204);
      assert.equal((await outside).status, 410);
      await node.publish(topic, "b");
      assert.equal((await nextMessage(sub, 10_000)).text(), "b");

      const refused = polls.findIndex((p) => p.status === 503);
      assert.deepEqual(polls[refused], { ack: "1", status: 503, code: "TooManyPolls", retryAfter: "1" });
      // Every poll from the refused one to the one that got "b" asked with the same ack; the next with ack 2.
      const got = polls.findIndex((p, i) => i > refused && p.status === 200);
      assert.ok(got > refused, `a poll after the 503 was answered: ${JSON.stringify(polls)}`);
      assert.deepEqual(
        polls.slice(refused, got + 1).map((p) => p.ack),
        polls.slice(refused, got + 1).map(() => "1"),
      );
      await until(() => polls.length > got + 1, 10_000, "the poll after 'b'");
      assert.equal(polls[got + 1]!.ack, "2");
    } finally {
      await Promise.all(own.map((c) => c.close().catch(() => undefined)));
      await busy.stop();
    }
  });

  test("410 session ended: a new session is created and subscriptions restored", async () => {
    let token = "";
    const spyFetch: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      if (String(input).endsWith("/poll/sessions") && res.status === 201) {
        token = ((await res.clone().json()) as { session: string }).session;
      }
      return res;
    };
    const web = await poll({ fetch: spyFetch });
    const node = await tcp();
    const topic = uniqueTopic("it.410");
    const sub = web.subscribe(topic, { resume: false }); // no status poll in between: the poll is held when the session goes
    await sub.ready;
    const first = token;
    const reconnected = once(web, "reconnect");
    const disconnected = once(web, "disconnect");
    // End the session behind the client's back: its held poll is answered 410.
    assert.equal((await fetch(`${broker.httpUrl}/poll/sessions/${first}`, { method: "DELETE" })).status, 204);
    const [error] = await disconnected;
    assert.equal((error as HeraldError).code, "SessionExpired");
    await reconnected;
    assert.notEqual(token, first, "a new session");
    await node.publish(topic, "to the new session");
    assert.equal((await nextMessage(sub)).text(), "to the new session");
  });

  test("Zstd over long-poll: compressed MESSAGE frames in the poll body are decompressed", async () => {
    let compressedSeen = 0;
    const spyFetch: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      if (String(input).includes("/messages?") && res.status === 200) {
        const body = new Uint8Array(await res.clone().arrayBuffer());
        const parsed = parsePollBody(Number(new URL(String(input)).searchParams.get("ack")), res.headers, body);
        compressedSeen += parsed.messages.filter((m) => m.flags === 1).length;
      }
      return res;
    };
    const web = await poll({ fetch: spyFetch, compression: true });
    assert.equal(web.info?.compression, true);
    const node = await tcp({ compression: false });
    const topic = uniqueTopic("it.lpzstd");
    const sub = web.subscribe(topic);
    await sub.ready;
    const text = "long-poll sessions can ask for Zstd too. ".repeat(1500);
    await node.publish(topic, text);
    assert.equal((await nextMessage(sub)).text(), text);
    assert.equal(compressedSeen, 1, "the message came through the poll as a compressed frame");
  });
});

describe("README", () => {
  test("the README's example (examples/quickstart.mjs) runs", async () => {
    const example = fileURLToPath(new URL("../examples/quickstart.mjs", import.meta.url));
    const run = spawnSync(process.execPath, [example], {
      encoding: "utf8",
      timeout: 30_000,
      env: { ...process.env, HERALD_TCP_URL: broker.tcpUrl, HERALD_HTTP_URL: broker.httpUrl },
    });
    assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
    assert.match(run.stdout, /^web client over websocket$/m);
    assert.match(run.stdout, /prices\.eu\.ACME: 101\.5/);
    assert.match(run.stdout, /prices\.us\.ACME: \{"bid":99\.1,"ask":99\.3\}/);
    assert.match(run.stdout, /reply: echo: hello/);
  });
});

describe("reconnect", () => {
  test("every transport reconnects after the broker restarts on the same ports, re-subscribes, and sends what was buffered", async () => {
    const node = await tcp();
    const web = await poll();
    // http:// in auto mode: the WebSocket, and after the restart the WebSocket again (not long-poll).
    const auto = await open(broker.httpUrl, { name: "it-auto" });
    assert.equal(auto.info?.transport, "websocket");
    const autoFirst = auto.info?.connectionId;
    const topic = uniqueTopic("it.restart");
    const nodeSub = node.subscribe(`${topic}.>`);
    const webSub = web.subscribe(`${topic}.>`);
    const autoSub = auto.subscribe(`${topic}.>`);
    const autoOwn = auto.subscribe(`${topic}-ws`); // only its own buffered publication goes there
    await Promise.all([nodeSub.ready, webSub.ready, autoSub.ready, autoOwn.ready]);
    const states: string[] = [];
    node.on("state", (s) => states.push(s));
    const nodeBack = once(node, "reconnect", 60_000);
    const webBack = once(web, "reconnect", 60_000);
    const autoBack = once(auto, "reconnect", 60_000);
    const nodeLost = once(node, "disconnect", 30_000);
    const autoLost = once(auto, "disconnect", 30_000);

    const restarting = broker.restart();
    await nodeLost;
    assert.equal(node.state, "reconnecting");
    // Published while disconnected: buffered, sent after the reconnect (behind the re-subscription).
    const buffered = node.publish(`${topic}.buffered`, "sent while the broker was down");
    await autoLost;
    const autoBuffered = auto.publish(`${topic}-ws`, "buffered for the WebSocket");
    await restarting;
    await Promise.all([nodeBack, webBack, autoBack]);
    await Promise.all([buffered, autoBuffered]);
    assert.equal(node.state, "connected");
    assert.equal(web.state, "connected");
    assert.equal(auto.state, "connected");
    assert.deepEqual(states.slice(0, 2), ["reconnecting", "connected"]);
    assert.equal(auto.info?.transport, "websocket", "a lost WebSocket is tried again first");
    assert.equal(auto.info?.fallback, undefined);
    assert.notEqual(auto.info?.connectionId, autoFirst, "a new connection");

    assert.equal((await nextMessage(nodeSub, 10_000)).text(), "sent while the broker was down");
    assert.equal((await nextMessage(autoOwn, 10_000)).text(), "buffered for the WebSocket");
    // Subscriptions were restored on the new broker: a fresh client's publication reaches all three.
    const other = await tcp();
    await node.flush();
    await web.flush();
    await auto.flush();
    await other.publish(`${topic}.after`, "after the restart");
    assert.equal((await nextMessage(nodeSub, 10_000)).text(), "after the restart");
    // The other two may also have node's buffered one (if they were subscribed again in time).
    for (const sub of [autoSub, webSub]) {
      const got = await nextMessage(sub, 10_000);
      if (got.text() !== "after the restart") assert.equal((await nextMessage(sub, 10_000)).text(), "after the restart");
    }
  });

  test("with reconnect off, a lost connection closes the client", async () => {
    const client = await open(broker.tcpUrl, { reconnect: false });
    const closed = stateIs(client, "closed", 30_000);
    await broker.restart();
    await closed;
    await assert.rejects(client.publish("a.b", "x"), { code: "Closed" });
  });

  test("connect() fails fast when nothing listens; createClient keeps trying, and a publish queued before the first connection is delivered", async () => {
    const closedPort = await freePort();
    await assert.rejects(connect(`tcp://127.0.0.1:${closedPort}`, { connectTimeoutMs: 2000 }), (e: HeraldError) => e.code === "ConnectFailed");
    await assert.rejects(connect(`http://127.0.0.1:${closedPort}`, { connectTimeoutMs: 2000 }), (e: HeraldError) => e.code === "ConnectFailed");
    await assert.rejects(connect(`ws://127.0.0.1:${closedPort}/ws`, { connectTimeoutMs: 2000 }), (e: HeraldError) => e.code === "ConnectFailed");
    // Lazy: createClient keeps trying; a broker that appears later is found.
    const late = await Broker.start();
    try {
      const port = late.tcpPort;
      await late.stop();
      const client = createClient(`tcp://127.0.0.1:${port}`, { ...fast });
      clients.add(client);
      // Both wait for the connection; on it the subscription is sent before the buffered publish.
      const sub = client.subscribe("lazy.topic");
      const published = client.publish("lazy.topic", "queued before the first connection");
      assert.equal(client.state, "connecting");
      await late.restart();
      await stateIs(client, "connected", 30_000);
      await published;
      const message = await nextMessage(sub, 10_000);
      assert.equal(message.topic, "lazy.topic");
      assert.equal(message.text(), "queued before the first connection");
    } finally {
      await late.stop();
    }
  });
});

/** A raw protocol connection (for looking at the frames the broker sends). */
async function rawTcp(port: number, capabilities: number): Promise<{ socket: Socket; welcome: Extract<Frame, { type: 2 }>; nextOf(type: number): Promise<Frame> }> {
  const socket = createConnection({ host: "127.0.0.1", port });
  const reader = new FrameReader(64 * 1024 * 1024);
  const frames: Frame[] = [];
  let wake: (() => void) | null = null;
  socket.on("data", (chunk) => {
    reader.push(chunk);
    for (let body = reader.next(); body; body = reader.next()) frames.push(decodeFrame(body));
    wake?.();
  });
  await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
  socket.write(encodeHello("raw", capabilities));
  const nextOf = async (type: number): Promise<Frame> =>
    within(
      (async () => {
        for (;;) {
          const i = frames.findIndex((f) => f.type === type);
          if (i >= 0) return frames.splice(i, 1)[0]!;
          await new Promise<void>((r) => (wake = r));
        }
      })(),
      5000,
      `frame type ${type}`,
    );
  const welcome = (await nextOf(FrameType.Welcome)) as Extract<Frame, { type: 2 }>;
  return { socket, welcome, nextOf };
}
