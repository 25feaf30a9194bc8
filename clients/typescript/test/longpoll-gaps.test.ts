/**
 * A long-poll answer that names subscriptions which may have lost messages (`Herald-Gaps`, longpoll §2: a cluster
 * node took the session over and could not resume them) reaches the application as a resume that did not
 * recover, as a 410 status does (spec §13); the next ack moves past an answer of loss marks alone. Against a
 * real broker; the test's fetch adds the header to one poll answer, as a node taking the session over would.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect, type HeraldClient, type Message, type ResumeEvent } from "@herald/client";
import { parsePollBody } from "@herald/client/protocol";
import { Broker } from "./helpers/broker.js";
import { uniqueTopic, until } from "./helpers/wait.js";

let broker: Broker;
const clients: HeraldClient[] = [];

before(async () => {
  broker = await Broker.start(["--Herald:LongPoll:PollTimeout=00:00:01"]);
});

after(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
  await broker?.stop();
});

test("parsePollBody reads Herald-Gaps, and an answer of loss marks alone moves the ack past them", () => {
  const headers = new Map([["Herald-First-Sequence", "8"], ["Herald-Count", "0"], ["Herald-Dropped", "0"], ["Herald-Gaps", "1,3"]]);
  const result = parsePollBody(6, { get: (name) => headers.get(name) ?? null }, new Uint8Array());
  assert.deepEqual(result.gaps, [1, 3]);
  assert.equal(result.ack, 7);
  const plain = parsePollBody(6, { get: (name) => (name === "Herald-Gaps" ? null : headers.get(name) ?? null) }, new Uint8Array());
  assert.deepEqual(plain.gaps, []);
});

test("a poll answer naming a subscription in Herald-Gaps is told as a resume that did not recover, and messages go on", async () => {
  const topic = uniqueTopic("plain.gap");
  let marked = false;
  let gapSid = 0;
  const spyFetch: typeof fetch = async (input, init) => {
    const url = new URL(String(input));
    if (url.pathname.endsWith("/subscriptions") && init?.method === "POST") {
      gapSid = (JSON.parse(String(init.body)) as { sid: number }).sid;
    }
    const res = await fetch(input, init);
    if (url.pathname.endsWith("/messages") && res.status === 200 && Number(res.headers.get("Herald-Count")) > 0 && !marked) {
      marked = true; // the first answer with messages: as if a takeover's mark lay just before them
      const headers = new Headers(res.headers);
      headers.set("Herald-Gaps", String(gapSid));
      return new Response(await res.arrayBuffer(), { status: res.status, headers });
    }
    return res;
  };
  const client = await connect(broker.httpUrl, { name: "gap-poll", transport: "longpoll", fetch: spyFetch });
  clients.push(client);
  const resumes: ResumeEvent[] = [];
  const clientResumes: ResumeEvent[] = [];
  client.on("resume", (e) => clientResumes.push(e));
  const got: Message[] = [];
  const sub = client.subscribe(topic, (m) => void got.push(m), { onResume: (e) => void resumes.push(e) });
  await sub.ready;
  client.publish(topic, "m1");
  client.publish(topic, "m2");
  await until(() => got.length >= 2, 10_000, "both messages");
  assert.deepEqual(got.map((m) => m.text()), ["m1", "m2"]);
  assert.equal(resumes.length, 1);
  assert.equal(resumes[0]!.recovered, false);
  assert.equal(resumes[0]!.subscription, sub);
  assert.deepEqual(clientResumes, resumes, "the client's resume event reports the same");
});
