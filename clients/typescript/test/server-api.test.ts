/**
 * `@herald/client/server` against the real broker's server API: publications (with an idempotency key repeated,
 * a batch and a broadcast) reach a client subscriber once each, history and topics are read, and a refusal is a
 * HeraldApiError with the problem's code (401 for a wrong key, 403 for a key without the scope).
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { after, before, test } from "node:test";
import { connect, type HeraldClient, type Subscription } from "@herald/client";
import { HeraldApiClient, HeraldApiError } from "@herald/client/server";
import { Broker, freePort } from "./helpers/broker.js";
import { nextMessage, within } from "./helpers/wait.js";

const sha256 = (text: string): string => createHash("sha256").update(text).digest("hex");
const ADMIN = "ts-test-admin-key-0123456789abcdef0123456789";
const PUBLISHER = "ts-test-publish-key-0123456789abcdef01234567";

let broker: Broker;
let apiUrl: string;
let client: HeraldClient | undefined;

before(async () => {
  const port = await freePort();
  apiUrl = `http://127.0.0.1:${port}`;
  broker = await Broker.start([
    "--Herald:Api:Host=127.0.0.1",
    `--Herald:Api:Port=${port}`,
    "--Herald:Api:Keys:0:Name=admin",
    `--Herald:Api:Keys:0:Hash=${sha256(ADMIN)}`,
    "--Herald:Api:Keys:0:Scope=admin",
    "--Herald:Api:Keys:1:Name=publisher",
    `--Herald:Api:Keys:1:Hash=${sha256(PUBLISHER)}`,
    "--Herald:Api:Keys:1:Scope=publish",
    "--Herald:History:Topics:0:Pattern=kept.>",
  ]);
});

after(async () => {
  await client?.close();
  await broker?.stop();
});

test("publications reach a subscriber once each and the read endpoints answer", async () => {
  const api = new HeraldApiClient(apiUrl, ADMIN);
  client = await connect(broker.tcpUrl);
  const subscription = await client.subscribe("kept.>");

  assert.equal((await api.publish("kept.a", "one", { idempotencyKey: "1", headers: { k: "v" } })).duplicate, false);
  assert.equal((await api.publish("kept.a", "one", { idempotencyKey: "1" })).duplicate, true);
  const batch = await api.batch([{ topic: "kept.a", payload: new Uint8Array([116, 119, 111]) }, { topic: "kept.*", payload: "bad" }]);
  assert.deepEqual(batch.map((r) => r.status), [200, 400]);
  const broadcast = await api.broadcast(["kept.b", "kept.c"], "all");
  assert.deepEqual(broadcast.map((r) => r.status), [200, 200]);

  const received: string[] = [];
  for (let i = 0; i < 4; i++) {
    const message = await nextMessage(subscription);
    received.push(`${message.topic}=${new TextDecoder().decode(message.payload)}`);
  }
  assert.deepEqual(received, ["kept.a=one", "kept.a=two", "kept.b=all", "kept.c=all"]);

  const history = await api.history("kept.a", 1);
  assert.deepEqual(history.entries.map((e) => [e.offset, new TextDecoder().decode(e.payload)]), [[2, "two"]]);
  const topics = await api.topics({ prefix: "kept" });
  assert.deepEqual(topics.entries, [{ pattern: "kept.>", subscribers: 1 }]);
  assert.equal((await api.presence("room.none")).members, 0);
  assert.equal((await api.info()).connections, 1);
});

test("a refusal is a HeraldApiError with the problem's code", async () => {
  await assert.rejects(new HeraldApiClient(apiUrl, "wrong").publish("a", "x"), (e: unknown) => e instanceof HeraldApiError && e.status === 401 && e.code === "Unauthorized");
  const publisher = new HeraldApiClient(apiUrl, PUBLISHER);
  await assert.rejects(publisher.history("kept.a"), (e: unknown) => e instanceof HeraldApiError && e.status === 403 && e.code === "Forbidden");
  await assert.rejects(publisher.publish("a.*", "x"), (e: unknown) => e instanceof HeraldApiError && e.status === 400);
});

test("the backend's actions: a client disconnected or revoked is told why and does not reconnect; a revocation refuses until lifted", async () => {
  await client?.close();
  client = undefined;
  const api = new HeraldApiClient(apiUrl, ADMIN);
  /** The states a client goes through from now, and the error it closed with. */
  const watch = (c: HeraldClient): { states: string[]; error?: { code: string; message: string } } => {
    const seen: { states: string[]; error?: { code: string; message: string } } = { states: [] };
    c.on("state", (state, error) => {
      seen.states.push(state);
      if (state === "closed") seen.error = error as unknown as { code: string; message: string };
    });
    return seen;
  };

  // One client by its client id (on one node: its WELCOME connection id, 16 hex digits).
  const one = await connect(broker.tcpUrl, { reconnectDelayMs: 1 });
  const oneSeen = watch(one);
  const id = BigInt(one.info!.connectionId!).toString(16).padStart(16, "0");
  assert.equal((await api.disconnect({ client: id }, "Banned for spam.")).clients, 1);
  await one.closed;
  assert.deepEqual(oneSeen.states, ["closed"], "closed at once, never reconnecting");
  assert.equal(oneSeen.error?.code, "Disconnected");
  assert.match(oneSeen.error!.message, /Banned for spam\./);

  // Every client of the identity (auth off: "anonymous"), TCP and long-poll alike.
  const tcp = await connect(broker.tcpUrl, { reconnectDelayMs: 1 });
  const poll = await connect(broker.httpUrl, { transport: "longpoll", reconnectDelayMs: 1 });
  const tcpSeen = watch(tcp);
  const pollSeen = watch(poll);
  assert.equal((await api.disconnect({ identity: "anonymous" }, "Maintenance.")).clients, 2);
  await Promise.all([tcp.closed, poll.closed]);
  assert.equal(tcpSeen.error?.code, "Disconnected");
  assert.equal(pollSeen.error?.code, "Disconnected");
  assert.deepEqual([tcpSeen.states, pollSeen.states], [["closed"], ["closed"]]);

  // Revoked until a time: a new client is refused (no retry loop), until the revocation is lifted.
  assert.equal((await api.revoke("anonymous", new Date(Date.now() + 60_000), "Suspended.")).clients, 0);
  assert.deepEqual((await api.revocations()).map((r) => [r.identity, r.reason]), [["anonymous", "Suspended."]]);
  await assert.rejects(connect(broker.tcpUrl, { reconnectDelayMs: 1 }), (e: unknown) => (e as { code?: string }).code === "Revoked");
  await assert.rejects(connect(broker.httpUrl, { transport: "longpoll", reconnectDelayMs: 1 }), (e: unknown) => (e as { code?: string }).code === "Revoked");
  assert.equal(await api.unrevoke("anonymous"), true);
  assert.equal(await api.unrevoke("anonymous"), false);
  client = await connect(broker.tcpUrl);
});

test("a subscription the backend makes is given to the app, reads its publications and ends when the backend unsubscribes", async () => {
  const api = new HeraldApiClient(apiUrl, ADMIN);
  const app = await connect(broker.tcpUrl, { acceptServerSubscriptions: true });
  try {
    const raised = new Promise<Subscription>((resolve) => app.on("serverSubscribed", resolve));
    const own = await app.subscribe("own");
    assert.ok(own.sid < 2 ** 31, `the client's own sids stay below 2^31 (${own.sid})`);

    const id = BigInt(app.info!.connectionId!).toString(16).padStart(16, "0");
    const sid = await api.subscribeClient(id, "news.>");
    const made = await within(raised, 5000, "the serverSubscribed event");
    assert.deepEqual([made.sid, made.pattern, made.isClosed], [sid, "news.>", false]);
    assert.ok(sid >= 2 ** 31);
    await api.publish("news.today", "hello");
    const message = await nextMessage(made);
    assert.deepEqual([message.topic, message.text()], ["news.today", "hello"]);

    assert.equal(await api.unsubscribeClient(id, "news.>", "Left the newsroom."), sid);
    await assert.rejects(within(made.next(), 5000, "the end of the subscription"), (e: unknown) => {
      const error = e as { code?: string; message: string };
      return error.code === "Unsubscribed" && /Left the newsroom\./.test(error.message);
    });
    assert.equal(made.isClosed, true);
    assert.equal(own.isClosed, false);
  } finally {
    await app.close();
  }
});

test("a long-poll client that accepts server subscriptions reads the backend's notices as subscribed and unsubscribed", async () => {
  const api = new HeraldApiClient(apiUrl, ADMIN);
  const app = await connect(broker.httpUrl, { transport: "longpoll", name: "ts-poll-server-subs", acceptServerSubscriptions: true });
  try {
    const raised = new Promise<Subscription>((resolve) => app.on("serverSubscribed", resolve));
    const connz = (await (await fetch(`${broker.monitoringUrl}/connz`)).json()) as { connections: { name?: string; client: string }[] };
    const id = connz.connections.find((c) => c.name === "ts-poll-server-subs")!.client;
    const sid = await api.subscribeClient(id, "polled.>");
    const made = await within(raised, 5000, "the serverSubscribed event");
    assert.deepEqual([made.sid, made.pattern], [sid, "polled.>"]);
    await api.publish("polled.one", "hello");
    const message = await nextMessage(made);
    assert.deepEqual([message.topic, message.text()], ["polled.one", "hello"]);

    await api.unsubscribeClient(id, "polled.>", "Done polling.");
    await assert.rejects(within(made.next(), 5000, "the end of the subscription"), (e: unknown) => {
      const error = e as { code?: string; message: string };
      return error.code === "Unsubscribed" && /Done polling\./.test(error.message);
    });
  } finally {
    await app.close();
  }
});
