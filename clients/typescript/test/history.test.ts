/**
 * History and resume (spec §13, CLIENTS.md step 12) through the client's public API, against real brokers
 * (child processes on free ports) whose `hist.>` topics keep a history, over TCP, WebSocket and HTTP long-poll.
 *
 * A connection is lost on purpose: over TCP and WebSocket the client talks to the broker through a proxy here
 * that can drop its connections (and refuse new ones for a while); over long-poll its session is deleted
 * behind its back (and creating the next one is held for a while). The proxies read the SUBSCRIBE frames the
 * client sends and the long-poll fetch reads its subscribe bodies, so the tests see the `since` that went on
 * the wire. Deltas (spec §11.2) go through the same losses: a delta subscription ends with every payload whole.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { after, before, describe, test } from "node:test";
import {
  NoRespondersError,
  connect,
  type ConnectOptions,
  type HeraldClient,
  type HistoryPosition,
  type Message,
  type ResumeEvent,
} from "@herald/client";
import { FrameReader, FrameType, decodeFrame, encodeSubscribe, type Frame } from "@herald/client/protocol";
import { WebSocket, WebSocketServer, type RawData } from "ws";
import { Broker } from "./helpers/broker.js";
import { KINDS, reach, type Kind } from "./helpers/clients.js";
import { nextMessage, once, take, uniqueTopic, until, within } from "./helpers/wait.js";

/** Topics under `hist.` keep a history (plenty for these tests); every other topic keeps none. */
const HISTORY_ARGS = ["--Herald:LongPoll:PollTimeout=00:00:03", "--Herald:History:Topics:0:Pattern=hist.>", "--Herald:History:Topics:0:MaxMessages=1000"];

let broker: Broker;
/** A broker that keeps one topic's history at a time: a second history topic evicts the first. */
let oneTopic: Broker;
/** A broker that drops the oldest of what a slow TCP subscriber has queued past 50 messages (beyond 8 KiB in its socket). */
let dropping: Broker;
/** A broker whose long-poll sessions keep 5 messages, the oldest dropped past them. */
let droppingPoll: Broker;
const clients: HeraldClient[] = [];
const closers: (() => unknown)[] = [];
const fast: ConnectOptions = { reconnectDelayMs: 100, maxReconnectDelayMs: 500, connectTimeoutMs: 5000 };

before(async () => {
  [broker, oneTopic, dropping, droppingPoll] = await Promise.all([
    Broker.start(HISTORY_ARGS),
    Broker.start([...HISTORY_ARGS, "--Herald:History:MaxTopics=1"]),
    Broker.start(["--Herald:Limits:SlowConsumerPolicy=DropOldest", "--Herald:Limits:MaxPendingMessages=50", "--Herald:Tcp:SendBufferBytes=4096"]),
    Broker.start(["--Herald:LongPoll:SlowConsumerPolicy=DropOldest", "--Herald:LongPoll:MaxPendingMessagesPerSession=5", "--Herald:LongPoll:PollTimeout=00:00:03"]),
  ]);
});

after(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
  for (const close of closers) await close();
  await Promise.all([broker?.stop(), oneTopic?.stop(), dropping?.stop(), droppingPoll?.stop()]);
});

async function open(target: Broker, kind: Kind, options: ConnectOptions = {}): Promise<HeraldClient> {
  const { url, options: route } = reach(target, kind);
  const client = await connect(url, { ...fast, ...route, name: `hist-${kind}`, ...options });
  clients.push(client);
  return client;
}

/** A SUBSCRIBE as the broker got it: a TCP frame, or a long-poll subscribe body. */
interface SeenSubscribe {
  pattern: string;
  since?: { offset: number | bigint; epoch: string };
}

/** A client whose connection the test can lose (and keep lost until `heal`). */
interface Link {
  client: HeraldClient;
  /** TCP and WebSocket: the proxy between client and broker. */
  proxy?: FrameProxy;
  /** Every SUBSCRIBE the client sent, in order. */
  subscribes: SeenSubscribe[];
  /** Loses the connection or session; resolves once the client has noticed. Reconnecting waits for `heal`. */
  cut(): Promise<void>;
  heal(): void;
}

function subscribesOf(link: Link, pattern: string): SeenSubscribe[] {
  return link.subscribes.filter((s) => s.pattern === pattern);
}

interface FrameProxy {
  /** The address the client connects to. */
  url: string;
  /** Drops every connection and refuses new ones until `heal`. */
  cut(): void;
  heal(): void;
  /** Cuts (as `cut`) right after the client has been sent the first broker frame that `test` picks. */
  cutAfter(test: (frame: Frame) => boolean): void;
}

/** Records `frame` in `subscribes` if it is a SUBSCRIBE. */
function seen(frame: Frame, subscribes: SeenSubscribe[]): void {
  if (frame.type !== FrameType.Subscribe) return;
  subscribes.push(frame.since === undefined ? { pattern: frame.pattern } : { pattern: frame.pattern, since: { ...frame.since } });
}

/** A `ws` message's bytes (a Buffer, fragments, or an ArrayBuffer). */
function bytesOf(data: RawData): Uint8Array {
  if (Array.isArray(data)) return new Uint8Array(Buffer.concat(data));
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/**
 * A TCP proxy to `port`, frame by frame: records the client's SUBSCRIBE frames, and can drop every
 * connection (at once, or right after a given frame from the broker).
 */
async function tcpProxy(port: number, subscribes: SeenSubscribe[]): Promise<FrameProxy> {
  const sockets = new Set<Socket>();
  let refusing = false;
  let cutAfter: ((frame: Frame) => boolean) | null = null;
  const cut = (): void => {
    refusing = true;
    for (const socket of sockets) socket.destroy();
  };
  const server: Server = createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = createConnection({ host: "127.0.0.1", port });
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("error", () => undefined);
      socket.on("close", () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
    const reader = new FrameReader();
    client.on("data", (chunk: Buffer) => {
      reader.push(new Uint8Array(chunk)); // a copy
      for (let body = reader.next(); body !== null; body = reader.next()) seen(decodeFrame(body), subscribes);
      upstream.write(chunk);
    });
    const fromBroker = new FrameReader();
    upstream.on("data", (chunk: Buffer) => {
      fromBroker.push(new Uint8Array(chunk));
      for (let body = fromBroker.next(); body !== null; body = fromBroker.next()) {
        const prefix = Buffer.alloc(4);
        prefix.writeUInt32BE(body.length);
        const whole = Buffer.concat([prefix, body]);
        if (cutAfter?.(decodeFrame(body))) {
          cutAfter = null;
          refusing = true;
          client.end(whole); // this frame reaches the client, then the connection ends; nothing after it
          upstream.destroy();
          for (const socket of sockets) if (socket !== client) socket.destroy();
          return;
        }
        client.write(whole);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(() => {
    for (const socket of sockets) socket.destroy();
    return new Promise((resolve) => server.close(resolve));
  });
  return {
    url: `tcp://127.0.0.1:${(server.address() as { port: number }).port}`,
    cut,
    heal() {
      refusing = false;
    },
    cutAfter(test) {
      cutAfter = test;
    },
  };
}

/**
 * A TCP proxy to `port` in a process of its own, whose socket to the broker has a 4 KiB receive buffer (no autotuning):
 * stopped (SIGSTOP), it stops reading, and what the broker sends past what the two sockets hold waits in its queue.
 */
async function stoppableProxy(port: number): Promise<{ url: string; stop(): void; go(): void }> {
  const script = `
import select, socket, sys
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
peers = {}
while True:
    for s in select.select([listener, *peers], [], [])[0]:
        if s is listener:
            client = listener.accept()[0]
            upstream = socket.socket()
            upstream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            upstream.connect(("127.0.0.1", ${port}))
            peers[client], peers[upstream] = upstream, client
        elif s in peers:
            data, other = s.recv(65536), peers[s]
            if data:
                other.sendall(data)
            else:
                for x in (s, other):
                    peers.pop(x, None)
                    x.close()
`;
  const child = spawn("python3", ["-c", script], { stdio: ["ignore", "pipe", "inherit"] });
  closers.push(() => child.kill("SIGKILL"));
  const listening = await new Promise<string>((resolve, reject) => {
    child.stdout.once("data", (line: Buffer) => resolve(line.toString().trim()));
    child.once("exit", (code) => reject(new Error(`the proxy exited (${code})`)));
  });
  return { url: `tcp://127.0.0.1:${listening}`, stop: () => child.kill("SIGSTOP"), go: () => child.kill("SIGCONT") };
}

/**
 * A WebSocket proxy to `target`'s `/ws`, message by message: records the client's SUBSCRIBE frames, and can
 * drop every connection (at once, or right after a given frame from the broker), refusing new upgrades
 * (`503`) until healed. Each frame from the broker goes on in a message of its own (a message carries whole
 * frames, spec §1).
 */
async function wsProxy(target: Broker, subscribes: SeenSubscribe[]): Promise<FrameProxy> {
  const sockets = new Set<WebSocket>();
  let refusing = false;
  let cutAfter: ((frame: Frame) => boolean) | null = null;
  const cut = (): void => {
    refusing = true;
    for (const socket of sockets) socket.terminate();
  };
  const server = new WebSocketServer({
    host: "127.0.0.1",
    port: 0,
    handleProtocols: (protocols) => (protocols.has("herald.v1") ? "herald.v1" : false),
    verifyClient: (_info, done) => done(!refusing, 503),
  });
  server.on("connection", (client) => {
    const upstream = new WebSocket(target.wsUrl, "herald.v1");
    const early: Uint8Array[] = []; // the client's first messages (HELLO), until the broker's side is open
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("error", () => undefined);
      socket.on("close", () => {
        sockets.delete(socket);
        client.terminate();
        upstream.terminate();
      });
    }
    const reader = new FrameReader();
    client.on("message", (data) => {
      const bytes = bytesOf(data);
      reader.push(bytes);
      for (let body = reader.next(); body !== null; body = reader.next()) seen(decodeFrame(body), subscribes);
      if (upstream.readyState === WebSocket.OPEN) upstream.send(bytes);
      else early.push(bytes);
    });
    upstream.on("open", () => {
      for (const bytes of early.splice(0)) upstream.send(bytes);
    });
    const fromBroker = new FrameReader();
    upstream.on("message", (data) => {
      fromBroker.push(bytesOf(data));
      for (let body = fromBroker.next(); body !== null; body = fromBroker.next()) {
        const whole = new Uint8Array(4 + body.length);
        new DataView(whole.buffer).setUint32(0, body.length);
        whole.set(body, 4);
        if (cutAfter?.(decodeFrame(body))) {
          cutAfter = null;
          refusing = true;
          client.send(whole);
          client.close(1001); // this frame reaches the client, then the close; nothing after it
          upstream.terminate();
          for (const socket of sockets) if (socket !== client && socket !== upstream) socket.terminate();
          return;
        }
        client.send(whole);
      }
    });
  });
  await new Promise<void>((resolve) => server.once("listening", () => resolve()));
  closers.push(() => {
    for (const socket of sockets) socket.terminate();
    return new Promise((resolve) => server.close(() => resolve(undefined)));
  });
  return {
    url: `ws://127.0.0.1:${(server.address() as { port: number }).port}/ws`,
    cut,
    heal() {
      refusing = false;
    },
    cutAfter(test) {
      cutAfter = test;
    },
  };
}

async function link(target: Broker, kind: Kind, options: ConnectOptions = {}): Promise<Link> {
  const subscribes: SeenSubscribe[] = [];
  if (kind !== "longpoll") {
    const proxy = kind === "tcp" ? await tcpProxy(target.tcpPort, subscribes) : await wsProxy(target, subscribes);
    const client = await connect(proxy.url, { ...fast, name: `hist-link-${kind}`, ...options });
    clients.push(client);
    return {
      client,
      proxy,
      subscribes,
      async cut() {
        const lost = once(client, "disconnect", 10_000);
        proxy.cut();
        await lost;
      },
      heal: () => proxy.heal(),
    };
  }
  let session = "";
  let hold: { promise: Promise<void>; release: () => void } | null = null;
  const spyFetch: typeof fetch = async (input, init) => {
    const url = new URL(String(input));
    if (url.pathname === "/poll/sessions" && init?.method === "POST") {
      if (hold) await hold.promise; // creating the next session waits for heal()
      const res = await fetch(input, init);
      if (res.status === 201) session = ((await res.clone().json()) as { session: string }).session;
      return res;
    }
    if (url.pathname.endsWith("/subscriptions") && init?.method === "POST") {
      const body = JSON.parse(String(init.body)) as SeenSubscribe & { sid: number; noEcho: boolean };
      subscribes.push(body.since === undefined ? { pattern: body.pattern } : { pattern: body.pattern, since: body.since });
    }
    return fetch(input, init);
  };
  const client = await connect(target.httpUrl, { ...fast, name: "hist-link-poll", transport: "longpoll", fetch: spyFetch, ...options });
  clients.push(client);
  return {
    client,
    subscribes,
    async cut() {
      let release!: () => void;
      hold = { promise: new Promise<void>((resolve) => (release = resolve)), release: () => release() };
      const lost = once(client, "disconnect", 10_000);
      // End the session behind the client's back: its held poll is answered 410, and what the session
      // had not handed over yet is gone with it.
      assert.equal((await fetch(`${target.httpUrl}/poll/sessions/${session}`, { method: "DELETE" })).status, 204);
      await lost;
    },
    heal() {
      hold?.release();
      hold = null;
    },
  };
}

/** Publishes `texts` to `topic` one after the other, then waits until the broker has routed them all. */
async function publishAll(client: HeraldClient, topic: string, texts: string[]): Promise<void> {
  for (const text of texts) await client.publish(topic, text);
  await client.flush();
}

const range = (from: number, to: number): string[] => Array.from({ length: to - from + 1 }, (_, i) => `m${from + i}`);
const offsets = (messages: Message[]): number[] => messages.map((m) => Number(m.position?.offset ?? -1));

describe("positions", () => {
  for (const kind of KINDS) {
    test(`${kind}: a message of a history topic carries its position, one offset after the last, after the publisher's headers; the status is not delivered`, async () => {
      const subscriber = await open(broker, kind);
      const publisher = await open(broker, "tcp");
      const topic = uniqueTopic("hist.pos");
      const sub = subscriber.subscribe(topic);
      await sub.ready;
      await publisher.publish(topic, "m1", { headers: { "X-Tag": "first" } });
      await publishAll(publisher, topic, range(2, 5));
      const got = await take(sub, 5);
      // A status delivered by mistake would be the first message, with an empty payload.
      assert.deepEqual(got.map((m) => m.text()), range(1, 5));
      assert.deepEqual(offsets(got), [1, 2, 3, 4, 5], "offsets counted from 1 in the topic, one apart");
      const epoch = got[0]!.position!.epoch;
      assert.match(epoch, /^[0-9a-f]{16}$/);
      assert.ok(got.every((m) => m.position!.epoch === epoch), "one epoch");
      assert.deepEqual([...got[0]!.headers.keys()], ["X-Tag", "Herald-Offset", "Herald-Epoch"], "the broker's keys after the publisher's");
      assert.equal(got[0]!.headers.get("Herald-Offset"), "1");
      assert.deepEqual(sub.position, { offset: 5, epoch }, "the subscription keeps the last position received");
      assert.equal(sub.received, 5, "the status is not counted as received");
      assert.ok(Object.isFrozen(sub.position), "read-only");
    });

    test(`${kind}: a topic without history: messages have no position, and the status answer never reaches the application`, async () => {
      const subscriber = await open(broker, kind);
      const topic = uniqueTopic("plain.pos");
      const got: Message[] = [];
      const sub = subscriber.subscribe(topic, (m) => {
        got.push(m);
      });
      await sub.ready;
      await publishAll(subscriber, topic, ["a", "b"]);
      await until(() => got.length >= 2, 10_000, "two messages");
      assert.deepEqual(got.map((m) => m.text()), ["a", "b"]);
      assert.deepEqual(got.map((m) => m.position), [null, null]);
      assert.equal(sub.position, null);
      assert.equal(sub.received, 2);
    });
  }

  test("TCP: the first SUBSCRIBE of a history topic is answered from now: the subscription knows the topic's position before any message", async () => {
    const l = await link(broker, "tcp");
    const publisher = await open(broker, "tcp");
    const topic = uniqueTopic("hist.first");
    await publishAll(publisher, topic, range(1, 3)); // before the subscription: not for it
    const sub = l.client.subscribe(topic);
    await sub.ready; // over TCP the status comes before the PONG that makes the subscription ready
    assert.deepEqual(subscribesOf(l, topic), [{ pattern: topic, since: { offset: 0, epoch: "" } }]);
    assert.equal(sub.position?.offset, 3, "the topic's last offset, from the status");
    await publisher.publish(topic, "m4");
    const m4 = await nextMessage(sub);
    assert.equal(m4.text(), "m4");
    assert.deepEqual(m4.position, { offset: 4, epoch: sub.position!.epoch });
    assert.equal(sub.received, 1);
  });
});

/**
 * A subscription on a fresh topic under `prefix`, through a link the test can cut, recording what it receives
 * and its resume events, beside a TCP publisher.
 */
async function watched(target: Broker, kind: Kind, prefix: string) {
  const l = await link(target, kind);
  const publisher = await open(target, "tcp");
  const topic = uniqueTopic(prefix);
  const got: Message[] = [];
  const resumes: ResumeEvent[] = [];
  const sub = l.client.subscribe(
    topic,
    (m) => {
      got.push(m);
    },
    { onResume: (e) => void resumes.push(e) },
  );
  await sub.ready;
  return { l, publisher, topic, got, resumes, sub };
}

describe("resume after a reconnect", () => {
  for (const kind of KINDS) {
    test(`${kind}: after the automatic reconnect the subscription gets exactly what it missed, then the live stream: no gap, no duplicate, in order`, async () => {
      const { l, publisher, topic, got, resumes, sub } = await watched(broker, kind, "hist.resume");
      const clientEvents: ResumeEvent[] = [];
      l.client.on("resume", (e) => clientEvents.push(e));
      await publishAll(publisher, topic, range(1, 5));
      await until(() => got.length >= 5, 10_000, "the first five messages");
      // A burst, and the connection lost while it arrives: what was in flight is lost with the connection.
      const burst = publishAll(publisher, topic, range(6, 30));
      await until(() => got.length >= 8, 10_000, "part of the burst");
      await l.cut();
      await burst;
      const cutAt = got.length;
      const kept = sub.position!;
      assert.equal(kept.offset, cutAt, "the position of the last message received");
      // Published while the client is away.
      await publishAll(publisher, topic, range(31, 40));
      assert.equal(got.length, cutAt, "nothing arrives while disconnected");
      const reconnected = once(l.client, "reconnect", 15_000);
      l.heal();
      await reconnected;
      await until(() => resumes.length >= 1, 10_000, "the resume event");
      await publishAll(publisher, topic, range(41, 50));
      await until(() => got.length >= 50, 15_000, "fifty messages");
      assert.deepEqual(got.map((m) => m.text()), range(1, 50));
      assert.deepEqual(offsets(got), Array.from({ length: 50 }, (_, i) => i + 1));
      assert.ok(got.every((m) => m.position!.epoch === kept.epoch));
      // Nothing more after the fiftieth (a duplicate would come before this marker).
      await publisher.publish(topic, "end");
      await until(() => got.length >= 51, 10_000, "the marker");
      assert.equal(got[50]!.text(), "end");
      assert.equal(got.length, 51);
      assert.equal(sub.received, 51, "statuses are not counted");
      assert.deepEqual(sub.position, { offset: 51, epoch: kept.epoch });
      // On the wire: the first SUBSCRIBE from now, the second from the kept position.
      assert.deepEqual(subscribesOf(l, topic), [
        { pattern: topic, since: { offset: 0, epoch: "" } },
        { pattern: topic, since: { offset: kept.offset, epoch: kept.epoch } },
      ]);
      // One resume, recovered, named with the topic's position when the live stream started again.
      assert.equal(resumes.length, 1);
      assert.equal(resumes[0]!.recovered, true);
      assert.equal(resumes[0]!.description, "Recovered");
      assert.deepEqual(resumes[0]!.position, { offset: 40, epoch: kept.epoch });
      assert.equal(resumes[0]!.subscription, sub);
      assert.deepEqual(clientEvents, resumes, "the client's resume event reports the same");
    });

    test(`${kind}: an async-iterator subscription resumes too, and a message it had received before the loss is not delivered again`, async () => {
      const l = await link(broker, kind);
      const publisher = await open(broker, "tcp");
      const topic = uniqueTopic("hist.iter");
      const sub = l.client.subscribe(topic);
      await sub.ready;
      await publishAll(publisher, topic, ["m1", "m2"]);
      // Received by the client (position kept) but not yet taken by the application when the connection goes.
      await until(() => sub.received >= 2, 10_000, "two messages received");
      await l.cut();
      await publishAll(publisher, topic, ["m3"]);
      l.heal();
      await publishAll(publisher, topic, ["m4"]);
      const got = await take(sub, 4, 15_000);
      assert.deepEqual(got.map((m) => m.text()), ["m1", "m2", "m3", "m4"]);
      assert.deepEqual(offsets(got), [1, 2, 3, 4]);
      await publisher.publish(topic, "end");
      assert.equal((await nextMessage(sub)).text(), "end");
    });

    test(`${kind}: a topic without history: no status reaches the application, and later SUBSCRIBEs send no position`, async () => {
      const l = await link(broker, kind);
      const publisher = await open(broker, "tcp");
      const topic = uniqueTopic("plain.resume");
      const got: Message[] = [];
      const resumes: ResumeEvent[] = [];
      l.client.on("resume", (e) => resumes.push(e));
      const sub = l.client.subscribe(topic, (m) => {
        got.push(m);
      });
      await sub.ready;
      await publishAll(publisher, topic, ["a", "b"]);
      await until(() => got.length >= 2, 10_000, "two messages");
      await l.cut();
      const reconnected = once(l.client, "reconnect", 15_000);
      l.heal();
      await reconnected;
      await publishAll(publisher, topic, ["c"]);
      await until(() => got.length >= 3, 10_000, "a message after the reconnect");
      assert.deepEqual(got.map((m) => m.text()), ["a", "b", "c"]);
      assert.equal(sub.received, 3);
      assert.equal(sub.position, null);
      // The first SUBSCRIBE asked (the client cannot know); the broker said "no history" (410 without a
      // position), so the one after the reconnect does not.
      assert.deepEqual(subscribesOf(l, topic), [{ pattern: topic, since: { offset: 0, epoch: "" } }, { pattern: topic }]);
      assert.deepEqual(resumes, []);
    });

    test(`${kind}: history lost (the broker evicted the topic's history): the resume event says not recovered, with the new position, and the live stream goes on`, async () => {
      const { l, publisher, topic, got, resumes, sub } = await watched(oneTopic, kind, "hist.evicted");
      await publishAll(publisher, topic, ["one"]);
      await until(() => got.length >= 1, 10_000, "the first message");
      const before: HistoryPosition = got[0]!.position!;
      assert.equal(before.offset, 1);
      await l.cut();
      // Another topic's history takes the only place (the broker keeps one): this topic's is gone. Its
      // next message starts a new history, with a new epoch, and this client misses it.
      await publishAll(publisher, uniqueTopic("hist.other"), ["elsewhere"]);
      await publishAll(publisher, topic, ["lost"]);
      l.heal();
      await until(() => resumes.length >= 1, 15_000, "the resume event");
      assert.equal(resumes.length, 1);
      const resume = resumes[0]!;
      assert.equal(resume.recovered, false);
      assert.match(resume.description, /^History lost/);
      assert.notEqual(resume.position?.epoch, before.epoch, "a new epoch");
      assert.equal(resume.position?.offset, 1, "the new history holds the missed message");
      assert.deepEqual(sub.position, resume.position, "the subscription goes on from the new position");
      assert.deepEqual(subscribesOf(l, topic)[1], { pattern: topic, since: { offset: before.offset, epoch: before.epoch } });
      await publishAll(publisher, topic, ["live"]);
      await until(() => got.length >= 2, 10_000, "a live message");
      assert.deepEqual(got.map((m) => m.text()), ["one", "live"], "what was missed is not replayed; the live stream goes on");
      assert.deepEqual(got[1]!.position, { offset: 2, epoch: resume.position!.epoch });
      assert.equal(sub.received, 2);
    });
  }

  for (const kind of ["tcp", "websocket"] as const) {
    test(`${kind}: a connection lost in the middle of a replay resumes from the last message received, not from the status's position`, async () => {
      const { l, publisher, topic, got, resumes, sub } = await watched(broker, kind, "hist.midreplay");
      await publishAll(publisher, topic, range(1, 3));
      await until(() => got.length >= 3, 10_000, "three messages");
      await l.cut();
      await publishAll(publisher, topic, range(4, 10));
      // The next connection gets the status of its resume (200, the topic at offset 10), and is lost before
      // any replayed message.
      l.proxy!.cutAfter((f) => f.type === FrameType.Message && f.sid === sub.sid && f.headers?.some(([key]) => key === "Herald-Status") === true);
      l.heal();
      await until(() => resumes.length >= 1, 15_000, "the first resume's status");
      assert.deepEqual(resumes[0]!.position?.offset, 10);
      assert.equal(sub.position?.offset, 3, "still the last message received: the replay has not come");
      assert.equal(got.length, 3);
      await until(() => l.client.state !== "connected", 10_000, "the loss after the status");
      l.heal();
      await until(() => got.length >= 10, 15_000, "the replay after the second resume");
      assert.deepEqual(got.map((m) => m.text()), range(1, 10));
      assert.deepEqual(offsets(got), Array.from({ length: 10 }, (_, i) => i + 1));
      const epoch = got[0]!.position!.epoch;
      assert.deepEqual(
        subscribesOf(l, topic).map((s) => s.since),
        [{ offset: 0, epoch: "" }, { offset: 3, epoch }, { offset: 3, epoch }],
        "both resumes from offset 3",
      );
      assert.deepEqual(resumes.map((e) => e.recovered), [true, true]);
    });
  }

  test("TCP: resume: false sends no position, on the first SUBSCRIBE or after a reconnect; positions are still read", async () => {
    const l = await link(broker, "tcp");
    const publisher = await open(broker, "tcp");
    const topic = uniqueTopic("hist.optout");
    const resumes: ResumeEvent[] = [];
    l.client.on("resume", (e) => resumes.push(e));
    const sub = l.client.subscribe(topic, { resume: false });
    await sub.ready;
    await publishAll(publisher, topic, ["m1"]);
    assert.equal((await nextMessage(sub)).position?.offset, 1);
    assert.equal(sub.position?.offset, 1);
    await l.cut();
    await publishAll(publisher, topic, ["missed"]);
    const reconnected = once(l.client, "reconnect", 15_000);
    l.heal();
    await reconnected;
    await publishAll(publisher, topic, ["m3"]);
    const next = await nextMessage(sub);
    assert.equal(next.text(), "m3", "not resumed: what was published meanwhile is not replayed");
    assert.equal(next.position?.offset, 3);
    assert.deepEqual(subscribesOf(l, topic), [{ pattern: topic }, { pattern: topic }]);
    assert.deepEqual(resumes, []);
  });

  test("TCP: wildcard patterns and clients without headers send no position", async () => {
    const l = await link(broker, "tcp");
    const bare = await link(broker, "tcp", { headers: false });
    const publisher = await open(broker, "tcp");
    const topic = uniqueTopic("hist.nopos");
    const wild = l.client.subscribe(`${topic}.>`);
    const plain = bare.client.subscribe(topic);
    await Promise.all([wild.ready, plain.ready]);
    await publishAll(publisher, `${topic}.x`, ["w"]);
    await publishAll(publisher, topic, ["p"]);
    const w = await nextMessage(wild);
    const p = await nextMessage(plain);
    assert.equal(w.text(), "w");
    assert.equal(w.position?.offset, 1, "a wildcard subscription reads positions");
    assert.equal(p.text(), "p");
    assert.equal(p.position, null, "no headers, no position");
    assert.deepEqual(subscribesOf(l, `${topic}.>`), [{ pattern: `${topic}.>` }]);
    assert.deepEqual(subscribesOf(bare, topic), [{ pattern: topic }]);
  });
});

describe("request/reply and headers beside history", () => {
  for (const kind of KINDS) {
    test(`${kind}: requests work and fail fast as before; a subscription on a reply topic still receives the no-responders status`, async () => {
      const client = await open(broker, kind);
      const responder = await open(broker, "tcp");
      const service = uniqueTopic("hist.svc");
      const answering = responder.subscribe(service, (m) => void m.respond(`re: ${m.text()}`));
      await answering.ready;
      assert.equal((await within(client.request(service, "q"), 10_000, "a reply")).text(), "re: q");
      await assert.rejects(client.request(uniqueTopic("plain.nobody"), "q"), NoRespondersError);
      // A reply topic of the application's own (one topic, so its SUBSCRIBE asked to resume): the broker's
      // 503 there is the application's, as it was before resuming existed.
      const replies = uniqueTopic("plain.replies");
      const mine = client.subscribe(replies);
      await mine.ready;
      await client.publish(uniqueTopic("plain.nobody"), "q", { replyTo: replies });
      const status = await nextMessage(mine);
      assert.equal(status.headers.get("Herald-Status"), "503");
      assert.equal(status.payload.length, 0);
    });
  }

  test("a received history message's headers can be passed on: the broker's keys are left out", async () => {
    const client = await open(broker, "tcp");
    const inbound = uniqueTopic("hist.in");
    const outbound = uniqueTopic("plain.out");
    const a = client.subscribe(inbound);
    const b = client.subscribe(outbound);
    await Promise.all([a.ready, b.ready]);
    await client.publish(inbound, "x", { headers: { "X-Tag": ["a", "b"] } });
    const received = await nextMessage(a);
    assert.ok(received.headers.has("Herald-Offset"));
    await client.publish(outbound, "y", { headers: received.headers });
    const forwarded = await nextMessage(b);
    assert.deepEqual(forwarded.headers.toJSON(), { "X-Tag": ["a", "b"] });
  });
});

describe("deltas (spec §11.2) across a loss", () => {
  /** A JSON document of which a few fields change with each publication: what deltas are made for. */
  const state = (i: number): string =>
    JSON.stringify({ id: "ord-7f3a9c21", account: "acct-20419", symbol: "ACME", side: "buy", quantity: 10000, filled: i * 25, status: i % 7 === 0 ? "amended" : "partial", seq: i });
  const states = (from: number, to: number): string[] => Array.from({ length: to - from + 1 }, (_, i) => state(from + i));

  for (const kind of KINDS) {
    test(`${kind}: a delta subscription that loses its connection resumes from its position and ends with every payload whole`, async () => {
      const lost = await link(broker, kind);
      const publisher = await open(broker, "tcp");
      const topic = uniqueTopic("hist.delta");
      const resumes: ResumeEvent[] = [];
      const sub = lost.client.subscribe(topic, { delta: true, onResume: (e) => void resumes.push(e) });
      await sub.ready;
      await publishAll(publisher, topic, states(1, 10));
      const before = await take(sub, 10);
      await lost.cut();
      await publishAll(publisher, topic, states(11, 20)); // replayed from the history after the reconnect
      lost.heal();
      const later = await take(sub, 10);
      await publishAll(publisher, topic, states(21, 25));
      const live = await take(sub, 5);
      assert.deepEqual([...before, ...later, ...live].map((m) => m.text()), states(1, 25));
      assert.deepEqual(resumes.map((e) => e.recovered), [true]);
      assert.ok(sub.deltas > 0, "some came as deltas");
    });

    test(`${kind}: without a history, a delta subscription that reconnects gets the new messages whole`, async () => {
      const lost = await link(broker, kind);
      const publisher = await open(broker, "tcp");
      const topic = uniqueTopic("plain.delta");
      const sub = lost.client.subscribe(topic, { delta: true });
      await sub.ready;
      await publishAll(publisher, topic, states(1, 10));
      const before = await take(sub, 10);
      const deltasBefore = sub.deltas;
      await lost.cut();
      const back = once(lost.client, "reconnect", 10_000);
      lost.heal();
      await back;
      await publishAll(publisher, topic, states(11, 20));
      const after = await take(sub, 10);
      assert.deepEqual([...before, ...after].map((m) => m.text()), states(1, 20));
      assert.ok(deltasBefore > 0 && sub.deltas > deltasBefore, "deltas on both connections");
    });
  }

  test("longpoll: a delta session whose broker drops the oldest messages (DropOldest) goes on with every payload whole", async () => {
    let hold: Promise<void> | null = null;
    const heldFetch: typeof fetch = async (input, init) => {
      if (new URL(String(input)).pathname.endsWith("/messages") && hold) await hold; // the poll waits: the session's messages pile up
      return fetch(input, init);
    };
    const client = await connect(droppingPoll.httpUrl, { ...fast, name: "delta-drop", transport: "longpoll", fetch: heldFetch });
    clients.push(client);
    const publisher = await open(droppingPoll, "tcp");
    const errors: string[] = [];
    client.on("error", (e) => errors.push(e.code));
    const topic = uniqueTopic("plain.delta.drop");
    const got: Message[] = [];
    const sub = client.subscribe(topic, (m) => void got.push(m), { delta: true });
    await sub.ready;
    await publishAll(publisher, topic, states(1, 3));
    await until(() => got.length === 3, 10_000, "the first messages");
    let release!: () => void;
    hold = new Promise<void>((resolve) => (release = resolve));
    await publishAll(publisher, topic, states(4, 4)); // answers the poll already waiting; the next one is held
    await until(() => got.length === 4, 10_000, "the message that answers the waiting poll");
    await publishAll(publisher, topic, states(5, 30)); // 26 for a session that keeps 5
    hold = null;
    release();
    await until(() => got.at(-1)?.text() === state(30), 10_000, "the last publication");
    const seqs = got.map((m) => m.json<{ seq: number }>().seq);
    assert.deepEqual(got.map((m) => m.text()), seqs.map(state), "every payload is the publication it says it is");
    assert.ok(seqs.every((seq, i) => i === 0 || seq > seqs[i - 1]!), "in order");
    assert.ok(got.length < 30, "the broker dropped some");
    assert.ok(errors.includes("MessagesDropped"), "the loss is told");
    assert.ok(!errors.includes("DecompressionFailed"), "no delta against a message the session lost");
    assert.ok(sub.deltas > 0, "deltas before and after the loss");
  });

  test("tcp: a delta subscriber whose broker drops the oldest of its queue (DropOldest) goes on with every payload whole", async () => {
    const proxy = await stoppableProxy(dropping.tcpPort);
    const client = await connect(proxy.url, { ...fast, name: "delta-drop" });
    clients.push(client);
    const publisher = await open(dropping, "tcp");
    const errors: string[] = [];
    client.on("error", (e) => errors.push(e.code));
    const topic = uniqueTopic("plain.delta.drop");
    const got: Message[] = [];
    const sub = client.subscribe(topic, (m) => void got.push(m), { delta: true });
    await sub.ready;
    for (let i = 1; i <= 5; i++) await publisher.publish(topic, state(i));
    await until(() => got.length === 5, 10_000, "the first messages");
    proxy.stop();
    // Deltas of about 40 B: a thousand fill the few KiB the sockets hold for a reader that stopped, then the broker's 50.
    await Promise.all(Array.from({ length: 995 }, (_, i) => publisher.publish(topic, state(i + 6))));
    await publisher.flush(); // the broker has queued (and dropped) them all
    proxy.go();
    await until(() => got.at(-1)?.text() === state(1000), 10_000, "the last publication");
    const seqs = got.map((m) => m.json<{ seq: number }>().seq);
    assert.deepEqual(got.map((m) => m.text()), seqs.map(state), "every payload is the publication it says it is");
    assert.ok(seqs.every((seq, i) => i === 0 || seq > seqs[i - 1]!), "in order");
    assert.ok(got.length < 1000, `the broker dropped some (${1000 - got.length})`);
    assert.ok(errors.includes("MessagesDropped"), "the loss is told");
    assert.ok(!errors.includes("DecompressionFailed"), "no delta against a message the subscriber lost");
    assert.ok(sub.deltas > 0, "deltas before and after the loss");
  });
});

describe("encodeSubscribe", () => {
  test("refuses a since it could not send (epoch over 64 bytes, offset not an unsigned 64-bit integer)", () => {
    assert.throws(() => encodeSubscribe(1, "a", 0, { offset: 1, epoch: "e".repeat(65) }), RangeError);
    assert.throws(() => encodeSubscribe(1, "a", 0, { offset: -1, epoch: "e" }), RangeError);
    assert.throws(() => encodeSubscribe(1, "a", 0, { offset: 1.5, epoch: "e" }), RangeError);
    assert.throws(() => encodeSubscribe(1, "a", 0, { offset: 2n ** 64n, epoch: "e" }), RangeError);
    // 2^64-1 and a 64-byte epoch are the largest it takes; null is no since (four elements).
    assert.equal(encodeSubscribe(1, "a", 0, { offset: 2n ** 64n - 1n, epoch: "e".repeat(64) })[4], 0x95);
    assert.equal(encodeSubscribe(1, "a", 0, null)[4], 0x94);
  });
});
