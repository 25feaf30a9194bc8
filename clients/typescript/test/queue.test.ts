/**
 * Queue groups (spec §4.1 bit 4, §4.3 `queue`, §14): each publication goes to one member of a group, not to
 * all, while plain subscriptions still get every one. Against a real broker (a child process on free ports)
 * over TCP, WebSocket and HTTP long-poll, across a broker restart; against a scripted TCP server (and a long-poll
 * session whose answer is rewritten) for what the client sends, refuses and checks before sending.
 */
import assert from "node:assert/strict";
import { createServer, type Socket } from "node:net";
import { after, before, describe, test } from "node:test";
import { HeraldError, type ConnectOptions, type HeraldClient, type Message, type Subscription } from "@herald/client";
import {
  Capabilities,
  FrameReader,
  FrameType,
  decodeFrame,
  encodeError,
  encodeSubscribe,
  encodeWelcome,
  isValidQueueName,
  type Frame,
} from "@herald/client/protocol";
import { Broker } from "./helpers/broker.js";
import { nextMessage, once, uniqueTopic, until, within } from "./helpers/wait.js";
import { OpenClients } from "./helpers/clients.js";

let broker: Broker;
const clients = new OpenClients();
const open = (url: string, options: ConnectOptions = {}): Promise<HeraldClient> => clients.open(url, options);

const tcp = (name = "queue-tcp", options: ConnectOptions = {}) => open(broker.tcpUrl, { name, ...options });
const poll = (name = "queue-poll", options: ConnectOptions = {}) => open(broker.httpUrl, { name, transport: "longpoll", ...options });
const ws = (name = "queue-ws", options: ConnectOptions = {}) => open(broker.wsUrl, { name, ...options });

before(async () => {
  broker = await Broker.start(["--Herald:LongPoll:PollTimeout=00:00:03"]);
});

after(async () => {
  await clients.closeAll();
  await broker?.stop();
});

/** One member of a group under test: what its subscription received, and a fence on its own connection. */
interface Member {
  client: HeraldClient;
  sub: Subscription;
  texts: string[];
  fence: Subscription;
}

/**
 * Subscribes `client` to `topic` in queue group `queue` (collecting texts), and plainly to `fence`: a
 * marker published there after the publications (by the same publisher) reaches every member after all
 * that was routed to it, as a connection's messages arrive in order (spec §4.6).
 */
function member(client: HeraldClient, topic: string, queue: string, fence: string): Member {
  const texts: string[] = [];
  const sub = client.subscribe(topic, (m: Message) => void texts.push(m.text()), { queue });
  return { client, sub, texts, fence: client.subscribe(fence) };
}

const numbered = (n: number): string[] => Array.from({ length: n }, (_, i) => `m${i}`);

/**
 * Publishes `n` messages to `topic` and then the fence; waits until every member has the fence and `plain`
 * (if any) all `n`; then checks: the plain subscriber got every one in order, the members together got each
 * exactly once, and every member got at least one.
 */
async function distribute(publisher: HeraldClient, topic: string, fence: string, members: Member[], plain: string[] | null, n: number): Promise<void> {
  await Promise.all(members.flatMap((m) => [m.sub.ready, m.fence.ready]));
  for (const text of numbered(n)) await publisher.publish(topic, text);
  await publisher.publish(fence, "fence");
  await publisher.flush();
  for (const m of members) assert.equal((await nextMessage(m.fence, 20_000)).text(), "fence");
  if (plain !== null) await until(() => plain.length >= n, 20_000, `${n} messages on the plain subscription (got ${plain.length})`);

  if (plain !== null) assert.deepEqual(plain, numbered(n), "the plain subscription gets every publication, in order");
  const all = members.flatMap((m) => m.texts);
  const counts = new Map<string, number>();
  for (const text of all) counts.set(text, (counts.get(text) ?? 0) + 1);
  const twice = [...counts].filter(([, c]) => c > 1).map(([t]) => t);
  assert.deepEqual(twice, [], "no publication reaches two members");
  assert.equal(all.length, n, `the members together got ${all.length} of ${n}`);
  assert.deepEqual([...counts.keys()].sort(), numbered(n).sort(), "every publication reaches one member");
  for (const [i, m] of members.entries()) assert.ok(m.texts.length >= 1, `member ${i} got none of ${n}`);
}

describe("queue groups against the broker", () => {
  test("TCP: three members of one group and one plain subscriber, 300 publications: the plain one gets all, the group each once", async () => {
    const topic = uniqueTopic("queue.jobs");
    const fence = `${topic}.fence`;
    const [a, b, c, watcher, publisher] = await Promise.all([tcp("member-a"), tcp("member-b"), tcp("member-c"), tcp("plain"), tcp("publisher")]);
    for (const client of [a, b, c]) assert.equal(client.info?.queueGroups, true, "the broker grants queue_groups (spec §4.1 bit 4)");
    const members = [member(a, topic, "workers", fence), member(b, topic, "workers", fence), member(c, topic, "workers", fence)];
    assert.equal(members[0]!.sub.queue, "workers");
    const plain: string[] = [];
    const plainSub = watcher.subscribe(topic, (m) => void plain.push(m.text()));
    assert.equal(plainSub.queue, null);
    await plainSub.ready;
    await distribute(publisher, topic, fence, members, plain, 300);
  });

  test("TCP: the same name on another pattern is another group, and a member that unsubscribes leaves it", async () => {
    const topic = uniqueTopic("queue.two");
    const fence = `${topic}.fence`;
    const [a, b, publisher] = await Promise.all([tcp("member-a"), tcp("member-b"), tcp("publisher")]);
    // One client in two groups of the same name on two patterns (the topic, and its parent's `.>`): a group is
    // its name with its pattern (spec §14), so each of them gets its own copy of every publication.
    const exact = member(a, topic, "workers", fence);
    const wide: string[] = [];
    const wideSub = a.subscribe(`${topic.split(".").slice(0, -1).join(".")}.>`, (m) => {
      if (m.topic === topic) wide.push(m.text());
    }, { queue: "workers" });
    await wideSub.ready;
    await distribute(publisher, topic, fence, [exact], null, 20);
    await until(() => wide.length >= 20, 10_000, "the other group's copies");
    assert.deepEqual(wide, numbered(20), "the group on the other pattern, alone in it, got every publication");
    await wideSub.unsubscribe();

    // b joins exact's group; exact leaves: b alone then gets all.
    const other = member(b, topic, "workers", fence);
    await Promise.all([other.sub.ready, other.fence.ready]);
    await exact.sub.unsubscribe();
    await a.flush();
    exact.texts.length = 0;
    await publisher.publish(topic, "after");
    await publisher.publish(fence, "fence");
    await publisher.flush();
    assert.equal((await nextMessage(other.fence, 10_000)).text(), "fence");
    await until(() => other.texts.includes("after"), 10_000, "the remaining member's message");
    assert.deepEqual(exact.texts, [], "a member that unsubscribed gets nothing more");
  });

  test("long-poll, WebSocket and TCP members of one group: each publication once in total", async () => {
    const topic = uniqueTopic("queue.mixed");
    const fence = `${topic}.fence`;
    const [web, socket, node, publisher] = await Promise.all([poll("member-poll"), ws("member-ws"), tcp("member-tcp"), tcp("publisher")]);
    assert.equal(web.info?.transport, "longpoll");
    assert.equal(web.info?.queueGroups, true, "the session said queueGroups: true");
    assert.equal(socket.info?.transport, "websocket");
    assert.equal(socket.info?.queueGroups, true, "WELCOME granted queue_groups over the WebSocket");
    const members = [member(web, topic, "mixed", fence), member(socket, topic, "mixed", fence), member(node, topic, "mixed", fence)];
    await distribute(publisher, topic, fence, members, null, 300);
  });

  test("after a broker restart every transport subscribes again in its group: still each publication once", async () => {
    const topic = uniqueTopic("queue.restart");
    const fence = `${topic}.fence`;
    const [web, socket, node, watcher] = await Promise.all([poll("member-poll"), ws("member-ws"), tcp("member-tcp"), tcp("plain")]);
    const members = [member(web, topic, "survivors", fence), member(socket, topic, "survivors", fence), member(node, topic, "survivors", fence)];
    const plain: string[] = [];
    const plainSub = watcher.subscribe(topic, (m) => void plain.push(m.text()));
    await Promise.all([plainSub.ready, ...members.map((m) => m.sub.ready)]);
    const back = [web, socket, node, watcher].map((c) => once(c, "reconnect", 60_000));
    await broker.restart();
    await Promise.all(back);
    const publisher = await tcp("publisher");
    await distribute(publisher, topic, fence, members, plain, 300);
  });
});

// ---------------------------------------------------------------------------------------------------------
// Against a scripted server: what goes on the wire, and what is refused before it.

interface Scripted {
  url: string;
  received: Frame[];
  sockets: Socket[];
  subscribes(): Extract<Frame, { type: 3 }>[];
  close(): void;
}

/** A TCP server that answers HELLO with a WELCOME granting `capabilities` and PING with PONG, and records every frame. */
async function scripted(capabilities: number): Promise<Scripted> {
  const received: Frame[] = [];
  const sockets: Socket[] = [];
  const server = createServer((socket) => {
    sockets.push(socket);
    const reader = new FrameReader();
    socket.on("data", (chunk) => {
      reader.push(new Uint8Array(chunk));
      for (let body = reader.next(); body; body = reader.next()) {
        const frame = decodeFrame(body);
        received.push(frame);
        if (frame.type === FrameType.Hello) {
          socket.write(encodeWelcome("scripted", sockets.length, capabilities, { max_frame: 65536, max_topic: 64, ping_interval_ms: 60_000 }));
        }
        if (frame.type === FrameType.Ping) socket.write(new Uint8Array([0, 0, 0, 2, 0x91, 0x08]));
      }
    });
    socket.on("error", () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `tcp://127.0.0.1:${(server.address() as { port: number }).port}`,
    received,
    sockets,
    subscribes: () => received.filter((f): f is Extract<Frame, { type: 3 }> => f.type === FrameType.Subscribe),
    close() {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}

describe("queue groups on the wire (scripted server)", () => {
  test("HELLO asks for queue_groups; the SUBSCRIBE carries the queue (and no since, though history is granted); a reconnect sends it again", async () => {
    const server = await scripted(Capabilities.Headers | Capabilities.History | Capabilities.QueueGroups);
    try {
      const client = await open(server.url, { name: "scripted-queue" });
      const hello = server.received.find((f) => f.type === FrameType.Hello) as Extract<Frame, { type: 1 }>;
      assert.equal(hello.capabilities & Capabilities.QueueGroups, Capabilities.QueueGroups, "HELLO capability bit 4 (16)");
      assert.equal(client.info?.queueGroups, true);
      const sub = client.subscribe("jobs.eu", { queue: "workers", noEcho: true });
      await sub.ready;
      const plain = client.subscribe("jobs.us");
      await plain.ready;
      assert.deepEqual(
        server.subscribes().map((f) => ({ ...f })),
        [
          { type: 3, sid: sub.sid, pattern: "jobs.eu", options: 1, queue: "workers" },
          { type: 3, sid: plain.sid, pattern: "jobs.us", options: 0, since: { offset: 0, epoch: "" } }, // a plain one asks to resume
        ],
      );
      // The broker's fatal ERROR: the client reconnects and subscribes again, in the same group.
      const back = once(client, "reconnect");
      server.sockets[0]!.write(encodeError(17, true, "Shutting down.", 0));
      await back;
      const again = server.subscribes().slice(2).map((f) => ({ ...f }));
      assert.deepEqual(
        again.find((f) => f.sid === sub.sid),
        { type: 3, sid: sub.sid, pattern: "jobs.eu", options: 1, queue: "workers" },
      );
      await client.close();
    } finally {
      server.close();
    }
  });

  test("a broker that did not grant queue_groups: the subscription is refused (QueueGroupsNotNegotiated), nothing is sent, the connection stays", async () => {
    const server = await scripted(Capabilities.Headers);
    try {
      const client = await open(server.url, { name: "scripted-no-queue" });
      assert.equal(client.info?.queueGroups, false);
      const errors: HeraldError[] = [];
      client.on("error", (e) => errors.push(e));
      const sub = client.subscribe("jobs.eu", { queue: "workers" });
      await assert.rejects(sub.ready, (e: HeraldError) => e instanceof HeraldError && e.code === "QueueGroupsNotNegotiated" && /queue group 'workers'/.test(e.message));
      await within(sub.closed, 5000, "the refused subscription to end");
      await assert.rejects(sub.next(), { code: "QueueGroupsNotNegotiated" });
      assert.deepEqual(errors.map((e) => e.code), ["QueueGroupsNotNegotiated"]);
      // A plain subscription still works, and it is the only SUBSCRIBE sent.
      const plain = client.subscribe("jobs.eu");
      await plain.ready;
      await client.flush();
      assert.deepEqual(server.subscribes().map((f) => f.sid), [plain.sid]);
      assert.equal(client.state, "connected");
      await client.close();
    } finally {
      server.close();
    }
  });

  test("an invalid queue name, or a queue with a resume, throws before anything is sent", async () => {
    const server = await scripted(Capabilities.Headers | Capabilities.History | Capabilities.QueueGroups);
    try {
      const client = await open(server.url, { name: "scripted-bad-queue" });
      const bad = ["", "a.b", "a*", "*", ">", "work>ers", "x".repeat(65), "with space", "tab\t", "caf\u00e9", "\u0000", "\u007f"];
      for (const queue of bad) {
        assert.equal(isValidQueueName(queue), false, JSON.stringify(queue));
        assert.throws(
          () => client.subscribe("jobs.eu", { queue }),
          (e: HeraldError) => e instanceof HeraldError && e.code === "InvalidTopic" && /Queue group name/.test(e.message),
          JSON.stringify(queue),
        );
        assert.throws(() => client.subscribe("jobs.eu", () => undefined, { queue }), { code: "InvalidTopic" }, JSON.stringify(queue));
      }
      assert.throws(() => client.subscribe("jobs.eu", { queue: 7 as unknown as string }), { code: "InvalidTopic" });
      // A group has no position to resume (spec §4.3, §14).
      assert.throws(() => client.subscribe("jobs.eu", { queue: "workers", resume: true }), { code: "InvalidOptions" });
      assert.throws(() => client.subscribe("jobs.eu", { queue: "workers", onResume: () => undefined }), { code: "InvalidOptions" });
      // A bad pattern is still judged first (as the broker does, spec §12 step 6).
      assert.throws(() => client.subscribe("jobs..eu", { queue: "a.b" }), /Topic 'jobs..eu'/);
      await client.flush();
      assert.deepEqual(server.subscribes(), [], "nothing was sent");
      assert.equal(client.state, "connected");

      // The longest name and every kind of allowed character are fine.
      const longest = "q".repeat(64);
      const okNames = [longest, "eu-workers_2", "!#$%&'()+,-/:;<=?@[\\]^_`{|}~"];
      const subs = okNames.map((queue) => client.subscribe("jobs.eu", { queue, resume: false }));
      await Promise.all(subs.map((s) => s.ready));
      assert.deepEqual(server.subscribes().map((f) => f.queue), okNames);
      await client.close();
    } finally {
      server.close();
    }
  });

  test("long-poll: a session that did not say queueGroups refuses a queue subscription before sending it", async () => {
    const posted: string[] = [];
    const rewriting: typeof fetch = async (input, init) => {
      const url = new URL(String(input));
      if (url.pathname.endsWith("/subscriptions") && init?.method === "POST") posted.push(String(init.body));
      const res = await fetch(input, init);
      if (url.pathname === "/poll/sessions" && res.status === 201) {
        // An older broker's answer: no queueGroups.
        const { queueGroups: _dropped, ...body } = (await res.json()) as Record<string, unknown>;
        return new Response(JSON.stringify(body), { status: 201, headers: { "Content-Type": "application/json" } });
      }
      return res;
    };
    const client = await poll("poll-no-queue", { fetch: rewriting });
    assert.notEqual(client.info?.queueGroups, true);
    const sub = client.subscribe(uniqueTopic("queue.old"), { queue: "workers" });
    await assert.rejects(sub.ready, { code: "QueueGroupsNotNegotiated" });
    const plain = client.subscribe(uniqueTopic("queue.old"));
    await plain.ready;
    assert.equal(posted.length, 1);
    assert.equal((JSON.parse(posted[0]!) as { queue?: string }).queue, undefined, "only the plain subscription was sent");
  });

  test("long-poll: the subscribe body names the queue beside sid, pattern and noEcho, and no since", async () => {
    const posted: Record<string, unknown>[] = [];
    const spy: typeof fetch = async (input, init) => {
      const url = new URL(String(input));
      if (url.pathname.endsWith("/subscriptions") && init?.method === "POST") posted.push(JSON.parse(String(init.body)) as Record<string, unknown>);
      return fetch(input, init);
    };
    const client = await poll("poll-queue-body", { fetch: spy });
    const topic = uniqueTopic("queue.body");
    const sub = client.subscribe(topic, { queue: "workers" });
    await sub.ready;
    assert.deepEqual(posted, [{ sid: sub.sid, pattern: topic, noEcho: false, queue: "workers" }]);
  });
});

describe("encodeSubscribe with a queue", () => {
  test("the sixth element, since nil; refused beside a since; empty or absent: four elements", () => {
    const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString("hex");
    assert.equal(hex(encodeSubscribe(9, "jobs.>", 0, undefined, "workers")), "00000014960309a66a6f62732e3e00c0a7776f726b657273");
    assert.equal(hex(encodeSubscribe(9, "jobs.>", 0, null, "workers")), "00000014960309a66a6f62732e3e00c0a7776f726b657273");
    assert.equal(encodeSubscribe(1, "a", 0, null, "")[4], 0x94);
    assert.equal(encodeSubscribe(1, "a", 0, null, null)[4], 0x94);
    assert.throws(() => encodeSubscribe(1, "a", 0, { offset: 0, epoch: "" }, "workers"), RangeError);
    const frame = decodeFrame(encodeSubscribe(10, "jobs.eu", 1, null, "eu-workers").subarray(4));
    assert.deepEqual({ ...frame }, { type: 3, sid: 10, pattern: "jobs.eu", options: 1, queue: "eu-workers" });
  });
});
