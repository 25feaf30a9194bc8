/**
 * Presence (spec §15) against the real broker, over TCP, WebSocket and long-poll (longpoll.md §1.2, §6): joining, join and leave events in order
 * with the topic's messages, paged queries and the occupancy, the fresh join a client sees of its own after a
 * reconnect, a large topic's events suppressed and resumed, a join past the topic's limit refused, and an
 * identity without the presence permissions refused (it learns nothing, a bystander goes on). One broker with
 * token authentication and small presence limits serves every test, so identities are real names.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { createConnection, createServer, type Socket } from "node:net";
import { after, before, describe, test } from "node:test";
import { HeraldError, PresenceError, connect, type ConnectOptions, type HeraldClient, type PresenceEvent, type Subscription } from "@herald/client";
import { Broker } from "./helpers/broker.js";
import { KINDS, OpenClients, reach, type Kind } from "./helpers/clients.js";
import { nextMessage, once, uniqueTopic, until } from "./helpers/wait.js";

const sha256 = (text: string): string => createHash("sha256").update(text).digest("hex");
const TOKENS = { alice: "pres-token-alice", bob: "pres-token-bob", mallory: "pres-token-mallory" } as const;
type Identity = keyof typeof TOKENS;

/**
 * alice and bob may do everything; mallory may publish and subscribe everywhere, but neither join nor read the
 * presence of `pres.secret.>` (spec §10: the join and presence permissions, deny winning).
 */
const authArgs = [
  "--Herald:Security:Auth:Mode=Token",
  ...(Object.keys(TOKENS) as Identity[]).flatMap((name, i) => [
    `--Herald:Security:Auth:Tokens:${i}:Name=${name}`,
    `--Herald:Security:Auth:Tokens:${i}:Sha256=${sha256(TOKENS[name])}`,
    `--Herald:Security:Auth:Tokens:${i}:Permissions:Publish:0=>`,
    `--Herald:Security:Auth:Tokens:${i}:Permissions:Subscribe:0=>`,
    `--Herald:Security:Auth:Tokens:${i}:Permissions:Join:0=>`,
    `--Herald:Security:Auth:Tokens:${i}:Permissions:Presence:0=>`,
    ...(name === "mallory"
      ? [`--Herald:Security:Auth:Tokens:${i}:Permissions:DenyJoin:0=pres.secret.>`, `--Herald:Security:Auth:Tokens:${i}:Permissions:DenyPresence:0=pres.secret.>`]
      : []),
  ]),
];

/** Small limits, so a test reaches them with a few clients: events stop above 4 members, a topic holds 6. */
const EVENTS_MEMBERS = 4;
const TOPIC_MEMBERS = 6;

let broker: Broker;
const clients = new OpenClients();

before(async () => {
  broker = await Broker.start([
    ...authArgs,
    `--Herald:Presence:MaxEventsMembers=${EVENTS_MEMBERS}`,
    `--Herald:Presence:MaxMembersPerTopic=${TOPIC_MEMBERS}`,
  ]);
});

after(async () => {
  await clients.closeAll();
  await broker?.stop();
});

/** A client of `identity` over `kind`. */
function as(identity: Identity, kind: Kind, options: ConnectOptions = {}): Promise<HeraldClient> {
  const { url, options: transport } = reach(broker, kind);
  return clients.open(url, { name: `pres-${identity}-${kind}`, credential: TOKENS[identity], ...transport, ...options });
}

/** A subscription's presence events, as they arrive, and a way to wait for some. */
function collect(): { events: PresenceEvent[]; onPresence: (e: PresenceEvent) => void; count(n: number, what: string): Promise<void> } {
  const events: PresenceEvent[] = [];
  return {
    events,
    onPresence: (e) => void events.push(e),
    count: (n, what) => until(() => events.length >= n, 10_000, what),
  };
}

const shown = (e: PresenceEvent) => ({ kind: e.kind, client: e.client, identity: e.identity, info: e.info, reason: e.reason, occupancy: e.occupancy });

for (const kind of KINDS) {
  describe(`presence over ${kind}`, () => {
    test("a join is seen by a watcher before the member's messages, listed by presence(), counted by occupancy(), and its leave after", async () => {
      const topic = uniqueTopic("pres.room");
      const watcher = await as("alice", kind);
      const seen = collect();
      const order: string[] = [];
      const watching = watcher.subscribe(topic, (m) => void order.push(`message ${m.text()}`), {
        onPresence: (e) => {
          seen.onPresence(e);
          order.push(e.kind);
        },
      });
      await watching.ready;
      assert.deepEqual(await watcher.occupancy(topic), { members: 0, identities: 0 });

      const member = await as("bob", kind, { info: { name: "Bo" } });
      const joined = member.subscribe(topic, { join: true });
      await joined.ready;
      await member.publish(topic, "hi");
      await until(() => order.length >= 2, 10_000, "the join and the message");
      assert.deepEqual(order, ["join", "message hi"], "the join before what the member published after joining (spec §15.2)");
      const join = seen.events[0]!;
      assert.equal(join.kind, "join");
      assert.equal(join.topic, topic);
      assert.equal(join.identity, "bob");
      assert.equal(join.info, '{"name":"Bo"}');
      assert.equal(join.occupancy, 1);
      assert.ok(join.client !== null && join.client.length > 0 && join.client.length <= 64, `an opaque client id: ${join.client}`);
      assert.equal(join.subscription, watching);
      assert.equal(watching.received, 1, "events are not messages");

      const page = await watcher.presence(topic);
      assert.deepEqual(
        { ...page, entries: page.entries.map((e) => ({ ...e })) },
        { members: 1, identities: 1, entries: [{ client: join.client, identity: "bob", info: '{"name":"Bo"}' }], next: null },
      );
      assert.deepEqual(await member.occupancy(topic), { members: 1, identities: 1 });

      await member.publish(topic, "bye");
      await joined.unsubscribe();
      await seen.count(2, "the leave");
      assert.deepEqual(order, ["join", "message hi", "message bye", "leave"], "the leave after what the member published before leaving");
      assert.deepEqual(shown(seen.events[1]!), { kind: "leave", client: join.client, identity: "bob", info: null, reason: "unsubscribe", occupancy: 0 });
      assert.deepEqual(await watcher.presence(topic), { members: 0, identities: 0, entries: [], next: null });
    });

    test("a member that disconnects leaves with reason disconnect", async () => {
      const topic = uniqueTopic("pres.gone");
      const watcher = await as("alice", kind);
      const seen = collect();
      await watcher.subscribe(topic, { onPresence: seen.onPresence }).ready;
      const member = await as("bob", kind);
      await member.subscribe(topic, { join: true }).ready;
      await seen.count(1, "the join");
      await member.close();
      await seen.count(2, "the leave");
      assert.deepEqual(
        seen.events.map((e) => [e.kind, e.reason, e.occupancy]),
        [
          ["join", null, 1],
          ["leave", "disconnect", 0],
        ],
      );
      assert.equal(seen.events[1]!.client, seen.events[0]!.client);
    });
  });
}

describe("presence queries (TCP)", () => {
  test("pages: every member once, ordered by client, the occupancy on every page, next null on the last", async () => {
    const topic = uniqueTopic("pres.many");
    const identities: Identity[] = ["alice", "alice", "alice", "bob", "bob"];
    const members = await Promise.all(identities.map((id, i) => as(id, i % 2 === 0 ? "tcp" : "websocket", { info: `m${i}` })));
    await Promise.all(members.map((m) => m.subscribe(topic, { join: true }).ready));
    const reader = members[0]!;
    const listed: string[] = [];
    const infos: (string | null)[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page = await reader.presence(topic, { limit: 2, cursor });
      pages++;
      assert.equal(page.members, 5);
      assert.equal(page.identities, 2);
      assert.ok(page.entries.length <= 2);
      listed.push(...page.entries.map((e) => e.client));
      infos.push(...page.entries.map((e) => e.info));
      cursor = page.next;
    } while (cursor !== null && pages < 10);
    assert.equal(pages, 3);
    assert.equal(listed.length, 5);
    assert.equal(new Set(listed).size, 5, "none twice");
    assert.deepEqual(listed, [...listed].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))), "ordered by client, bytewise");
    assert.deepEqual([...infos].sort(), ["m0", "m1", "m2", "m3", "m4"]);
    assert.deepEqual(await reader.occupancy(topic), { members: 5, identities: 2 });
    // Two subscriptions of one connection that join are one member.
    await reader.subscribe(topic, { join: true }).ready;
    assert.deepEqual(await reader.occupancy(topic), { members: 5, identities: 2 });
    // One topic only: a pattern is refused here.
    await assert.rejects(reader.presence("pres.*"), { code: "InvalidTopic" });
  });
});

describe("a large topic (TCP)", () => {
  test("events stop with one suppressed past the threshold and come back with one resumed at half; a join past the topic's limit is PresenceFull", async () => {
    const topic = uniqueTopic("pres.big");
    const watcher = await as("alice", "tcp");
    const seen = collect();
    await watcher.subscribe(topic, { onPresence: seen.onPresence }).ready;
    const members = await Promise.all(Array.from({ length: TOPIC_MEMBERS + 1 }, (_, i) => as(i % 2 === 0 ? "alice" : "bob", "tcp")));
    const joined: Subscription[] = [];
    for (const member of members.slice(0, TOPIC_MEMBERS)) {
      const sub = member.subscribe(topic, { join: true });
      await sub.ready;
      joined.push(sub);
    }
    // One more: past the topic's limit, refused; the others stay members.
    const late = members[TOPIC_MEMBERS]!.subscribe(topic, { join: true });
    await assert.rejects(late.ready, (e: HeraldError) => e.code === "PresenceFull" && e.sid === late.sid && !e.fatal);
    assert.deepEqual(await watcher.occupancy(topic), { members: TOPIC_MEMBERS, identities: 2 });
    assert.equal(members[TOPIC_MEMBERS]!.state, "connected");
    // Leaves down to half the threshold: nothing until the one that reaches it, then events again.
    for (const sub of joined.splice(0, TOPIC_MEMBERS - EVENTS_MEMBERS / 2 + 1)) await sub.unsubscribe();
    await seen.count(EVENTS_MEMBERS + 3, "the joins, suppressed, resumed and one leave");
    assert.deepEqual(
      seen.events.map((e) => [e.kind, e.occupancy]),
      [
        ...Array.from({ length: EVENTS_MEMBERS }, (_, i) => ["join", i + 1]),
        ["suppressed", EVENTS_MEMBERS + 1],
        ["resumed", EVENTS_MEMBERS / 2],
        ["leave", EVENTS_MEMBERS / 2 - 1],
      ],
    );
    assert.equal(seen.events[EVENTS_MEMBERS]!.client, null);
  });
});

/** A TCP proxy to the broker whose connections can be cut (the client then reconnects through it). */
async function cuttableProxy(): Promise<{ url: string; cut(): void; close(): void }> {
  const pairs: Socket[][] = [];
  const server = createServer((inbound) => {
    const outbound = createConnection({ host: "127.0.0.1", port: broker.tcpPort });
    inbound.pipe(outbound).pipe(inbound);
    const pair = [inbound, outbound];
    pairs.push(pair);
    for (const s of pair) s.on("error", () => pair.forEach((x) => x.destroy()));
    for (const s of pair) s.on("close", () => pair.forEach((x) => x.destroy()));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `tcp://127.0.0.1:${(server.address() as { port: number }).port}`,
    cut: () => pairs.splice(0).forEach((pair) => pair.forEach((s) => s.destroy())),
    close: () => {
      pairs.splice(0).forEach((pair) => pair.forEach((s) => s.destroy()));
      server.close();
    },
  };
}

describe("presence across a reconnect (TCP)", () => {
  test("the client subscribes again with join: a fresh join of its own, with a new client id; the old one leaves", async () => {
    const topic = uniqueTopic("pres.back");
    const proxy = await cuttableProxy();
    try {
      const watcher = await as("alice", "tcp");
      const watched = collect();
      await watcher.subscribe(topic, { onPresence: watched.onPresence }).ready;
      const member = clients.add(await connect(proxy.url, { name: "pres-back", credential: TOKENS.bob, info: "Bo", reconnectDelayMs: 50 }));
      const own = collect();
      const sub = member.subscribe(topic, { join: true, onPresence: own.onPresence });
      await sub.ready;
      await watched.count(1, "the first join");
      const first = watched.events[0]!.client!;
      await until(() => own.events.some((e) => e.kind === "join" && e.client === first), 10_000, "its own first join");
      const back = once(member, "reconnect");
      proxy.cut();
      await back;
      await until(() => watched.events.some((e) => e.kind === "join" && e.client !== first), 10_000, "the second join");
      await until(() => watched.events.some((e) => e.kind === "leave" && e.client === first), 10_000, "the first member's leave");
      const second = watched.events.find((e) => e.kind === "join" && e.client !== first)!;
      assert.equal(second.identity, "bob");
      assert.equal(second.info, "Bo");
      assert.equal(watched.events.find((e) => e.kind === "leave")!.reason, "disconnect");
      // The client's own subscription sees its fresh join (spec §15.2), with the new id.
      await until(() => own.events.some((e) => e.kind === "join" && e.client === second.client), 10_000, "its own join after the reconnect");
      await until(async () => (await watcher.occupancy(topic)).members === 1, 10_000, "one member again");
      assert.deepEqual((await watcher.presence(topic)).entries.map((e) => e.client), [second.client]);
    } finally {
      proxy.close();
    }
  });
});

describe("presence refused (TCP, WebSocket, long-poll)", () => {
  for (const kind of KINDS) {
    test(`${kind}: an identity without the join or presence permission is refused and learns nothing; a bystander goes on`, async () => {
      const topic = uniqueTopic("pres.secret");
      const bystander = await as("alice", kind);
      const seen = collect();
      const messages: string[] = [];
      await bystander.subscribe(topic, (m) => void messages.push(m.text()), { join: true, onPresence: seen.onPresence }).ready;

      const mallory = await as("mallory", kind);
      const errors: HeraldError[] = [];
      mallory.on("error", (e) => errors.push(e));
      const joining = mallory.subscribe(topic, { join: true });
      await assert.rejects(joining.ready, (e: HeraldError) => e.code === "PermissionDenied" && e.sid === joining.sid);
      const watching = mallory.subscribe(topic, { presenceEvents: true });
      await assert.rejects(watching.ready, (e: HeraldError) => e.code === "PermissionDenied" && e.sid === watching.sid);
      await assert.rejects(mallory.presence(topic), (e: unknown) => e instanceof PresenceError && e.code === "PermissionDenied");
      await assert.rejects(mallory.occupancy(topic), (e: unknown) => e instanceof PresenceError && e.code === "PermissionDenied");
      assert.deepEqual(errors.map((e) => e.code), ["PermissionDenied", "PermissionDenied"]);

      // mallory's connection stays: a plain subscription of the topic and a publication work.
      const plain = mallory.subscribe(topic);
      await plain.ready;
      await mallory.publish(topic, "marker");
      assert.equal((await nextMessage(plain)).text(), "marker");
      // The bystander got the marker, and no join of mallory before it: it was never a member.
      await until(() => messages.includes("marker"), 10_000, "the marker at the bystander");
      assert.deepEqual(seen.events.filter((e) => e.identity === "mallory"), []);
      assert.deepEqual(await bystander.occupancy(topic), { members: 1, identities: 1 });
      assert.equal(mallory.state, "connected");
      assert.equal(bystander.state, "connected");
    });
  }
});
