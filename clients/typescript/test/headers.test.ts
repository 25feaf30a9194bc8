/**
 * Headers (spec §4.9) and fail-fast requests (spec §7) through the client's public API, against a real
 * broker (a child process on free ports) over TCP, WebSocket and HTTP long-poll: headers round-trip between
 * every pair of transports (raw and frame long-poll publishes, binary and JSON polls), bad headers are thrown
 * here while the connection carries on, and a request nobody serves fails at once.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  HeraldError,
  NoRespondersError,
  RequestTimeoutError,
  connect,
  type ConnectOptions,
  type HeraldClient,
  type HeadersInit,
  type Message,
} from "@herald/client";
import { Broker } from "./helpers/broker.js";
import { KINDS, reach, type Kind } from "./helpers/clients.js";
import { nextMessage, take, uniqueTopic, within } from "./helpers/wait.js";

// Small limits, so the client's own checks against what the broker announced can be reached.
const MAX_HEADERS = 8;
const MAX_HEADER_BYTES = 512;

let broker: Broker;
const clients: HeraldClient[] = [];
const fast: ConnectOptions = { reconnectDelayMs: 100, maxReconnectDelayMs: 1000, connectTimeoutMs: 5000 };

async function open(kind: Kind, options: ConnectOptions = {}): Promise<HeraldClient> {
  const { url, options: route } = reach(broker, kind);
  const client = await connect(url, { ...fast, ...route, name: `hdr-${kind}`, ...options });
  clients.push(client);
  return client;
}

/** Counts the client's disconnects: a header the broker refused would have ended the connection. */
function disconnects(client: HeraldClient): () => number {
  let n = 0;
  client.on("disconnect", () => n++);
  return () => n;
}

before(async () => {
  broker = await Broker.start([
    "--Herald:LongPoll:PollTimeout=00:00:03",
    `--Herald:Limits:MaxHeaders=${MAX_HEADERS}`,
    `--Herald:Limits:MaxHeaderBytes=${MAX_HEADER_BYTES}`,
  ]);
});

after(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
  await broker?.stop();
});

const SENT: HeadersInit = {
  "Content-Type": "text/plain; charset=utf-8",
  "X-Tag": ["a", "b", "a"],
  "x-lower-case": "kept as written",
  "X-Name": "Zoë 東京 ✓ 😀",
  "X-Empty": "",
};

/** What a subscriber must see of {@link SENT}: keys in order and case, every value. */
function assertSent(message: Message): void {
  const h = message.headers;
  assert.deepEqual([...h.keys()], ["Content-Type", "X-Tag", "x-lower-case", "X-Name", "X-Empty"]);
  assert.equal(h.size, 5);
  assert.equal(h.get("content-type"), "text/plain; charset=utf-8", "lookups ignore ASCII case");
  assert.deepEqual(h.getAll("x-tag"), ["a", "b", "a"]);
  assert.equal(h.get("X-Tag"), "a", "get is the first value");
  assert.equal(h.get("X-LOWER-CASE"), "kept as written");
  assert.equal(h.get("X-Name"), "Zoë 東京 ✓ 😀");
  assert.equal(h.get("X-Empty"), "", "an empty value is a value");
  assert.equal(h.has("X-Empty"), true);
  assert.equal(h.get("X-Missing"), null);
  assert.deepEqual(h.getAll("X-Missing"), []);
  assert.deepEqual(
    [...h].map(([k, v]) => [k, [...v]]),
    [
      ["Content-Type", ["text/plain; charset=utf-8"]],
      ["X-Tag", ["a", "b", "a"]],
      ["x-lower-case", ["kept as written"]],
      ["X-Name", ["Zoë 東京 ✓ 😀"]],
      ["X-Empty", [""]],
    ],
  );
  assert.equal(
    JSON.stringify(h),
    '{"Content-Type":["text/plain; charset=utf-8"],"X-Tag":["a","b","a"],"x-lower-case":["kept as written"],"X-Name":["Zoë 東京 ✓ 😀"],"X-Empty":[""]}',
  );
}

describe("headers round-trip", () => {
  for (const from of KINDS) {
    for (const to of KINDS) {
      test(`${from} publisher → ${to} subscriber: multi-valued, case kept, non-ASCII and empty values; none is an empty view`, async () => {
        const sub = await open(to);
        const pub = await open(from);
        const topic = uniqueTopic(`hdr.${from}.${to}`);
        const s = sub.subscribe(topic);
        await s.ready;
        await pub.publish(topic, "one", { headers: SENT });
        // Several at once: long-poll sends them as PUBLISH frames in one request (one alone goes raw, ?header=).
        await Promise.all([
          pub.publish(topic, "two", { headers: SENT }),
          pub.publish(topic, "three"),
          pub.publish(topic, "four", { headers: { "X-Only": "this" } }),
        ]);
        const [one, two, three, four] = await take(s, 4);
        assert.equal(one!.text(), "one");
        assertSent(one!);
        assert.equal(two!.text(), "two");
        assertSent(two!);
        assert.equal(three!.text(), "three");
        assert.equal(three!.headers.size, 0, "a message published without headers has an empty view");
        assert.equal(three!.headers.get("X-Tag"), null);
        assert.deepEqual([...three!.headers], []);
        assert.deepEqual(four!.headers.toJSON(), { "X-Only": ["this"] });
      });
    }
  }

  test("a received message's headers can be passed on as they are", async () => {
    const client = await open("tcp");
    const topic = uniqueTopic("hdr.forward");
    const s = client.subscribe(`${topic}.>`);
    await s.ready;
    await client.publish(`${topic}.in`, "x", { headers: SENT });
    const received = await nextMessage(s);
    await client.publish(`${topic}.out`, "y", { headers: received.headers });
    const forwarded = await nextMessage(s);
    assert.equal(forwarded.topic, `${topic}.out`);
    assertSent(forwarded);
  });

  test("a JSON poll shows the headers a client published (longpoll §2.2)", async () => {
    const created = await fetch(`${broker.httpUrl}/poll/sessions`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ client: "json-poller", headers: true }),
    });
    assert.equal(created.status, 201);
    const session = ((await created.json()) as { session: string }).session;
    const base = `${broker.httpUrl}/poll/sessions/${session}`;
    const topic = uniqueTopic("hdr.json");
    const subscribed = await fetch(`${base}/subscriptions`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ sid: 1, pattern: topic }),
    });
    assert.ok(subscribed.ok, await subscribed.text());
    const pub = await open("longpoll");
    await pub.publish(topic, "as JSON", { headers: SENT });
    const polled = await fetch(`${base}/messages?ack=0`, { headers: { Accept: "application/json" } });
    assert.equal(polled.status, 200);
    const body = (await polled.json()) as { messages: { text: string; headers?: Record<string, string[]> }[] };
    assert.equal(body.messages.length, 1);
    assert.equal(body.messages[0]!.text, "as JSON");
    assert.equal(
      JSON.stringify(body.messages[0]!.headers),
      '{"Content-Type":["text/plain; charset=utf-8"],"X-Tag":["a","b","a"],"x-lower-case":["kept as written"],"X-Name":["Zoë 東京 ✓ 😀"],"X-Empty":[""]}',
    );
    await fetch(base, { method: "DELETE" });
  });
});

for (const kind of KINDS) {
  describe(`headers over ${kind}: negotiation and checks`, () => {
    test("asked for by default: info says headers and no_responders were granted, with the broker's limits", async () => {
      const client = await open(kind);
      assert.equal(client.info?.headers, true);
      assert.equal(client.info?.noResponders, true);
      const limits = client.info!.limits;
      assert.equal(client.info?.transport, kind);
      // WELCOME's limits (TCP, WebSocket), or the long-poll session's answer.
      assert.equal(Number(kind === "longpoll" ? limits.maxHeaders : limits.max_headers), MAX_HEADERS);
      assert.equal(Number(kind === "longpoll" ? limits.maxHeaderBytes : limits.max_header_bytes), MAX_HEADER_BYTES);
    });

    test("headers: false asks for none: messages arrive without them, publishing with headers is refused here", async () => {
      const plain = await open(kind, { headers: false });
      const lost = disconnects(plain);
      assert.equal(plain.info?.headers, false);
      assert.equal(plain.info?.noResponders, false);
      const other = await open(kind);
      const topic = uniqueTopic(`hdr.off.${kind}`);
      const s = plain.subscribe(topic);
      await s.ready;
      await other.publish(topic, "with", { headers: SENT });
      const got = await nextMessage(s);
      assert.equal(got.text(), "with", "a client without headers still receives the message");
      assert.equal(got.headers.size, 0);
      await assert.rejects(plain.publish(topic, "mine", { headers: { "X-A": "1" } }), (e: Error) => {
        assert.ok(e instanceof HeraldError);
        assert.equal(e.code, "HeadersNotNegotiated", e.message);
        assert.match(e.message, /headers/);
        return true;
      });
      // The connection carries on: the next message (published after the refused one) arrives first.
      await plain.publish(topic, "after");
      assert.equal((await nextMessage(s)).text(), "after");
      assert.equal(lost(), 0);
      assert.equal(plain.state, "connected");
    });

    test("bad headers are thrown here, before sending: the connection carries on", async () => {
      // Long-poll: the broker would answer a bad block with a 400 of the same code, so count what was sent.
      let publishRequests = 0;
      const spy: typeof fetch = (input, init) => {
        if (new URL(String(input)).pathname.endsWith("/publish")) publishRequests++;
        return fetch(input, init);
      };
      const client = await open(kind, kind === "longpoll" ? { fetch: spy } : {});
      const lost = disconnects(client);
      const topic = uniqueTopic(`hdr.bad.${kind}`);
      const s = client.subscribe(topic);
      await s.ready;
      const bad: [string, HeadersInit][] = [
        ["reserved prefix", { "Herald-Status": "200" }],
        ["reserved prefix, any case", { "herald-anything": "x" }],
        ["a space in the key", { "X Bad": "x" }],
        ["a colon in the key", { "X:Bad": "x" }],
        ["a non-ASCII key", { "X-Ünï": "x" }],
        ["an empty key", { "": "x" }],
        ["a key over 256 bytes", { ["K".repeat(257)]: "x" }],
        ["CR in a value", { "X-A": "a\rb" }],
        ["LF in a value", { "X-A": ["ok", "a\nb"] }],
        ["no value", { "X-A": [] }],
        ["a key twice, ignoring case", { "X-A": "1", "x-a": "2" }],
        ["a lone surrogate", { "X-A": "\ud800" }],
        ["a value that is not a string", { "X-A": 5 as unknown as string }],
        [`over max_headers (${MAX_HEADERS} values)`, { "X-Many": Array.from({ length: MAX_HEADERS + 1 }, (_, i) => `${i}`) }],
        [`over max_header_bytes (${MAX_HEADER_BYTES})`, { "X-Big": "x".repeat(MAX_HEADER_BYTES) }],
      ];
      for (const [what, headers] of bad) {
        await assert.rejects(client.publish(topic, "bad", { headers }), (e: Error) => {
          assert.ok(e instanceof HeraldError, `${what}: not a HeraldError: ${e}`);
          assert.equal(e.code, "InvalidHeaders", `${what}: ${e.message}`);
          return true;
        }, what);
      }
      assert.equal(publishRequests, 0, "nothing was sent to the broker");
      // Right at the limits is fine.
      const atLimit = { "X-Many": Array.from({ length: MAX_HEADERS }, (_, i) => `${i}`) };
      await client.publish(topic, "at the limit", { headers: atLimit });
      const got = await nextMessage(s);
      assert.equal(got.text(), "at the limit", "no refused publication reached the broker before it");
      assert.deepEqual(got.headers.getAll("x-many"), atLimit["X-Many"]);
      assert.equal(lost(), 0, "no disconnect");
      assert.equal(client.state, "connected");
    });
  });

  describe(`fail-fast requests over ${kind}`, () => {
    test("a request to a topic nobody serves rejects at once with NoRespondersError", async () => {
      const client = await open(kind);
      const topic = uniqueTopic(`rpc.nobody.${kind}`);
      // A long timeout and a shorter hang bound: only the broker's answer can settle it in time.
      const request = client.request(topic, "anyone?", { timeoutMs: 120_000 });
      await assert.rejects(within(request, 30_000, "the no-responders answer (a hang bound)"), (e: Error) => {
        assert.ok(e instanceof NoRespondersError, `not a NoRespondersError: ${e}`);
        assert.ok(e instanceof HeraldError);
        assert.equal(e.code, "NoResponders");
        assert.equal(e.topic, topic);
        assert.match(e.message, new RegExp(topic.replace(/\./g, "\\.")));
        return true;
      });
      assert.equal(client.state, "connected");
    });

    test("with a responder the request succeeds (headers both ways)", async () => {
      const responder = await open(kind === "tcp" ? "longpoll" : "tcp");
      const client = await open(kind);
      const topic = uniqueTopic(`rpc.served.${kind}`);
      const service = responder.subscribe(topic, (msg) =>
        msg.respond(`echo:${msg.text()}`, { headers: { "X-Seen": msg.headers.get("X-Request") ?? "none" } }),
      );
      await service.ready;
      const reply = await client.request(topic, "hi", { timeoutMs: 120_000, headers: { "X-Request": "r1" } });
      assert.equal(reply.text(), "echo:hi");
      assert.equal(reply.headers.get("X-Seen"), "r1");
    });

    test("no_responders off: a request nobody serves times out with RequestTimeoutError", async () => {
      const client = await open(kind, { noResponders: false });
      assert.equal(client.info?.noResponders, false);
      assert.equal(client.info?.headers, true);
      const topic = uniqueTopic(`rpc.off.${kind}`);
      const request = client.request(topic, "anyone?", { timeoutMs: 300 });
      await assert.rejects(within(request, 30_000, "the request to time out (a hang bound)"), (e: Error) => {
        assert.ok(e instanceof RequestTimeoutError, `not a RequestTimeoutError: ${e}`);
        assert.ok(e instanceof HeraldError);
        assert.equal(e.code, "Timeout");
        assert.equal(e.topic, topic);
        assert.equal(e.timeoutMs, 300);
        return true;
      });
    });
  });
}
