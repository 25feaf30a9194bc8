/**
 * Interop between the two SDKs through the real broker: headers published by the .NET client over TCP
 * (its sample publisher, run as a process) reach the TypeScript client over long-poll, and headers
 * published by the TypeScript client over long-poll reach the .NET client over TCP (its sample subscriber,
 * which prints what it receives as JSON lines). Multi-valued keys, case kept, non-ASCII and empty values,
 * a value holding '='; the order of keys and values as published.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect, type HeraldClient, type HeadersInit } from "@herald/client";
import { Broker } from "./helpers/broker.js";
import { runPublisher, sampleDll, SubscriberProcess } from "./helpers/samples.js";
import { nextMessage, uniqueTopic } from "./helpers/wait.js";

let broker: Broker;
const clients: HeraldClient[] = [];
const subscribers: SubscriberProcess[] = [];

/** The headers both directions send, as the TypeScript client takes them... */
const SENT: HeadersInit = {
  "Content-Type": "text/plain; charset=utf-8",
  "X-Tag": ["a", "b", "a"],
  "X-Greeting": "Grüße 👋",
  "X-Empty": "",
  "x-Case-Kept": "as written",
  "X-Eq": "k=v",
};
/** ...as the .NET sample publisher takes them (`--header Key=Value`, a key again adds a value)... */
const SENT_ARGS = [
  "Content-Type=text/plain; charset=utf-8",
  "X-Tag=a",
  "X-Tag=b",
  "X-Tag=a",
  "X-Greeting=Grüße 👋",
  "X-Empty=",
  "x-Case-Kept=as written",
  "X-Eq=k=v",
].flatMap((h) => ["--header", h]);
/** ...and as every subscriber must show them: keys in order and case, every value. */
const EXPECTED =
  '{"Content-Type":["text/plain; charset=utf-8"],"X-Tag":["a","b","a"],"X-Greeting":["Grüße 👋"],"X-Empty":[""],"x-Case-Kept":["as written"],"X-Eq":["k=v"]}';

before(async () => {
  // Both samples are built before the broker starts, so a build never runs into a test's bounds.
  sampleDll("Herald.Client.Publish");
  sampleDll("Herald.Client.Subscribe");
  broker = await Broker.start(["--Herald:LongPoll:PollTimeout=00:00:03"]);
});

after(async () => {
  for (const s of subscribers) s.kill();
  await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
  await broker?.stop();
});

test(".NET publisher over TCP → TypeScript subscriber over long-poll (binary polls) and a JSON poll: the same headers", { timeout: 120_000 }, async () => {
  const sub = await connect(broker.httpUrl, { name: "interop-ts-sub", transport: "longpoll" });
  clients.push(sub);
  assert.equal(sub.info?.transport, "longpoll");
  assert.equal(sub.info?.headers, true);
  const topic = uniqueTopic("interop.dotnet.ts");
  const s = sub.subscribe(topic);
  await s.ready;

  // The SDK polls binary only: a JSON poll (longpoll §2.2) on a session of its own, over plain HTTP.
  const created = await fetch(`${broker.httpUrl}/poll/sessions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ client: "interop-json-poller", headers: true }),
  });
  assert.equal(created.status, 201, await created.clone().text());
  const session = `${broker.httpUrl}/poll/sessions/${((await created.json()) as { session: string }).session}`;
  const subscribed = await fetch(`${session}/subscriptions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ sid: 1, pattern: topic }),
  });
  assert.ok(subscribed.ok, await subscribed.text());

  const publish = await runPublisher(["--url", broker.tcpUrl, "--topic", topic, "--message", "Grüße aus .NET 👋", ...SENT_ARGS]);
  assert.equal(publish.status, 0, `the .NET publisher failed (exit ${publish.status}):\n${publish.output}`);

  const got = await nextMessage(s, 30_000);
  assert.equal(got.topic, topic);
  assert.equal(got.text(), "Grüße aus .NET 👋");
  assert.equal(JSON.stringify(got.headers), EXPECTED);
  assert.deepEqual(got.headers.getAll("x-tag"), ["a", "b", "a"]);
  assert.equal(got.headers.get("X-EMPTY"), "", "an empty value is a value");
  assert.deepEqual([...got.headers.keys()], ["Content-Type", "X-Tag", "X-Greeting", "X-Empty", "x-Case-Kept", "X-Eq"]);

  // The publisher confirmed (PING/PONG) before it exited, so the message is queued for this session too.
  const polled = await fetch(`${session}/messages?ack=0`, { headers: { Accept: "application/json" } });
  assert.equal(polled.status, 200);
  const body = (await polled.json()) as { messages: { topic: string; text: string; headers?: Record<string, string[]> }[] };
  assert.equal(body.messages.length, 1, JSON.stringify(body));
  assert.equal(body.messages[0]!.topic, topic);
  assert.equal(body.messages[0]!.text, "Grüße aus .NET 👋");
  assert.equal(JSON.stringify(body.messages[0]!.headers), EXPECTED);
  await fetch(session, { method: "DELETE" });
});

test("TypeScript publisher over long-poll → .NET subscriber over TCP: the same headers", { timeout: 120_000 }, async () => {
  const topic = uniqueTopic("interop.ts.dotnet");
  const dotnet = SubscriberProcess.start(["--url", broker.tcpUrl, "--pattern", `${topic}.>`, "--count", "3"]);
  subscribers.push(dotnet);
  const [ready] = await dotnet.untilLines(1, 60_000);
  assert.deepEqual(ready, { ready: true, pattern: `${topic}.>`, url: broker.tcpUrl });

  const pub = await connect(broker.httpUrl, { name: "interop-ts-pub", transport: "longpoll" });
  clients.push(pub);
  assert.equal(pub.info?.transport, "longpoll");
  // One alone goes as a raw publish (headers as ?header=); several at once as PUBLISH frames in one request.
  await pub.publish(`${topic}.raw`, "Grüße aus TypeScript 👋", { headers: SENT });
  await Promise.all([
    pub.publish(`${topic}.frames`, "in a batch", { headers: SENT }),
    pub.publish(`${topic}.frames`, "without headers"),
  ]);

  const lines = await dotnet.untilLines(4, 30_000);
  assert.equal(await dotnet.exited, 0, `the .NET subscriber did not exit 0 after 3 messages\n${dotnet.output}`);
  const expected = JSON.parse(EXPECTED) as Record<string, string[]>;
  assert.deepEqual(lines.slice(1), [
    { topic: `${topic}.raw`, payload: "Grüße aus TypeScript 👋", headers: expected },
    { topic: `${topic}.frames`, payload: "in a batch", headers: expected },
    { topic: `${topic}.frames`, payload: "without headers", headers: {} },
  ]);
  // deepEqual ignores the order of keys: the .NET client kept it too.
  const [raw, batch] = lines.slice(1) as { headers: unknown }[];
  assert.equal(JSON.stringify(raw!.headers), EXPECTED);
  assert.equal(JSON.stringify(batch!.headers), EXPECTED);
});
