/**
 * Security: the client against a real broker with token authentication (README "Security", spec §4.1,
 * longpoll §1.1), permissions (spec §10: refused operations over TCP, WebSocket and long-poll, and an
 * identity that tries another's inbox), and with TLS on its TCP port and HTTPS (`wss://` too; a self-signed
 * certificate made here with openssl).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { ErrorCode, HeraldError, createClient, type ConnectOptions, type HeraldClient } from "@herald/client";
import { Broker } from "./helpers/broker.js";
import { nextMessage, stateIs, uniqueTopic, within } from "./helpers/wait.js";
import { KINDS, OpenClients, fast, reach } from "./helpers/clients.js";

const TOKEN = "s3cret-token-for-alice";
const OTHER = "s3cret-token-for-bob";
/** carol may publish and subscribe under `sec.open.>` only. */
const LIMITED = "s3cret-token-for-carol";
/** dave's two tokens: the first grants `sec.>`, the newer one only `sec.kept.>` (a refresh to fewer rights). */
const DAVE_FULL = "s3cret-token-for-dave-full";
const DAVE_LESS = "s3cret-token-for-dave-less";
const sha256 = (text: string): string => createHash("sha256").update(text).digest("hex");

/** Token mode with two identities that may publish and subscribe everything, and one limited to `sec.open.>`. */
const authArgs = [
  "--Herald:Security:Auth:Mode=Token",
  ...[
    ["alice", TOKEN, ">"],
    ["bob", OTHER, ">"],
    ["carol", LIMITED, "sec.open.>"],
    ["dave", DAVE_FULL, "sec.>"],
    ["dave", DAVE_LESS, "sec.kept.>"],
  ].flatMap(([name, token, granted], i) => [
    `--Herald:Security:Auth:Tokens:${i}:Name=${name}`,
    `--Herald:Security:Auth:Tokens:${i}:Sha256=${sha256(token!)}`,
    `--Herald:Security:Auth:Tokens:${i}:Permissions:Publish:0=${granted}`,
    `--Herald:Security:Auth:Tokens:${i}:Permissions:Subscribe:0=${granted}`,
  ]),
];

const clients = new OpenClients();
const open = (url: string, options: ConnectOptions = {}): Promise<HeraldClient> => clients.open(url, options);

/** Expects `promise` to reject with a HeraldError of `code`. */
async function rejectsWith(promise: Promise<unknown>, code: string): Promise<HeraldError> {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof HeraldError, `not a HeraldError: ${e}`);
    assert.equal(e.code, code, e.message);
    return e;
  }
  assert.fail(`expected a ${code} error`);
}

/** Publishes on `pub` and expects it on a fresh subscription of `sub`. */
async function roundTrip(pub: HeraldClient, sub: HeraldClient): Promise<void> {
  const topic = uniqueTopic("sec");
  const subscription = sub.subscribe(topic);
  await subscription.ready;
  await pub.publish(topic, "hello");
  const message = await nextMessage(subscription);
  assert.equal(message.text(), "hello");
  await subscription.unsubscribe();
}

/** The errors `client` reports (its "error" event), from now on. */
function errorsOf(client: HeraldClient): HeraldError[] {
  const errors: HeraldError[] = [];
  client.on("error", (e) => errors.push(e));
  return errors;
}

/** Asserts `errors` holds one non-fatal PermissionDenied naming `topic`. */
function deniedOnce(errors: HeraldError[], topic: string): void {
  assert.deepEqual(
    errors.map((e) => e.code),
    ["PermissionDenied"],
    errors.map((e) => e.message).join("; "),
  );
  assert.notEqual(errors[0]!.fatal, true);
  assert.ok(errors[0]!.message.includes(topic), `the refusal names the topic: ${errors[0]!.message}`);
}

after(async () => {
  await clients.closeAll();
});

describe("token authentication", () => {
  let broker: Broker;
  before(async () => {
    broker = await Broker.start(authArgs);
  });
  after(async () => {
    await broker?.stop();
  });

  // Over TCP and WebSocket the credential travels in HELLO, and a refresh is a second HELLO (spec §4.1).
  for (const [label, kind] of [["TCP", "tcp"], ["WebSocket", "websocket"]] as const) {
    const url = (): string => reach(broker, kind).url;

    test(`${label}: a good token connects; pub/sub works`, async () => {
      const a = await open(url(), { credential: TOKEN });
      const b = await open(url(), { credential: () => OTHER });
      assert.equal(a.state, "connected");
      await roundTrip(a, b);
      await roundTrip(b, a);
    });

    test(`${label}: a wrong or missing token fails with AuthenticationFailed (code 19) and the client closes`, async () => {
      for (const credential of ["wrong-token", undefined]) {
        const client = createClient(url(), { ...fast, credential, waitOnFirstConnect: false });
        const error = await rejectsWith(client.opened, "AuthenticationFailed");
        assert.equal(ErrorCode[error.code as keyof typeof ErrorCode], 19);
        assert.equal(error.fatal, true);
        assert.equal(client.state, "closed");
      }
    });

    test(`${label}: a refused credential stops reconnecting even with waitOnFirstConnect`, async () => {
      let calls = 0;
      const client = createClient(url(), {
        ...fast,
        credential: () => {
          calls++;
          return "wrong-token";
        },
      });
      let closedWith: Error | undefined;
      client.on("state", (state, error) => {
        if (state === "closed") closedWith = error;
      });
      await within(client.closed, 10_000, "the client to close");
      assert.equal((closedWith as HeraldError).code, "AuthenticationFailed");
      assert.equal(calls, 1);
    });

    test(`${label}: refreshCredential sends HELLO again and the connection stays`, async () => {
      let calls = 0;
      const client = await open(url(), {
        credential: async () => {
          calls++;
          return TOKEN;
        },
      });
      const id = client.info?.connectionId;
      const other = await open(url(), { credential: OTHER });
      assert.equal(calls, 1);
      await client.refreshCredential();
      await client.refreshCredential();
      assert.equal(calls, 3);
      assert.equal(client.state, "connected");
      assert.equal(client.info?.connectionId, id);
      await roundTrip(other, client);
      await roundTrip(client, other);
    });

    test(`${label}: refreshCredential with a refused credential closes the client`, async () => {
      let token = TOKEN;
      const client = await open(url(), { credential: () => token });
      token = "expired-or-wrong";
      await rejectsWith(client.refreshCredential(), "AuthenticationFailed");
      await stateIs(client, "closed", 5000);
    });
  }

  test("refreshCredential without a credential option is an error", async () => {
    const plain = createClient(broker.tcpUrl, { ...fast, waitOnFirstConnect: false });
    await rejectsWith(plain.refreshCredential(), "NoCredential");
    await plain.close();
  });

  test("long-poll: a good token creates a session (Authorization: Bearer); pub/sub with TCP works", async () => {
    const seen: (string | null)[] = [];
    const recording: typeof fetch = (input, init) => {
      seen.push(new Headers(init?.headers).get("Authorization"));
      return fetch(input, init);
    };
    const p = await open(broker.httpUrl, { credential: TOKEN, transport: "longpoll", fetch: recording });
    const t = await open(broker.tcpUrl, { credential: OTHER });
    assert.equal(p.info?.transport, "longpoll");
    assert.equal(seen[0], `Bearer ${TOKEN}`);
    await roundTrip(p, t);
    await roundTrip(t, p);
    await p.refreshCredential(); // nothing to do on long-poll
  });

  for (const kind of KINDS) {
    test(`${kind}: a restricted responder answers a request under the requester's own inbox prefix`, async () => {
      const { url, options } = reach(broker, kind);
      const carol = await open(url, { ...options, credential: LIMITED });
      const alice = await open(broker.tcpUrl, { credential: TOKEN });
      const service = uniqueTopic("sec.open.svc");
      const responder = carol.subscribe(service, (m) => m.respond("carol answers"));
      await responder.ready;
      // carol may publish only to sec.open.>: her reply into alice's inbox is allowed because the request was delivered to her.
      const reply = await alice.request(service, "?", { timeoutMs: 10_000 });
      assert.equal(reply.text(), "carol answers");
      assert.match(carol.info?.inboxPrefix ?? "", /^_INBOX\.[0-9a-f]{24}$/);
      assert.match(alice.info?.inboxPrefix ?? "", /^_INBOX\.[0-9a-f]{24}$/);
      assert.notEqual(carol.info?.inboxPrefix, alice.info?.inboxPrefix);
    });
  }

  for (const [label, kind] of [["TCP", "tcp"], ["WebSocket", "websocket"]] as const) {
    test(`${label}: a refresh to fewer rights ends the subscription it no longer allows, and says which`, async () => {
      let token = DAVE_FULL;
      const dave = await open(reach(broker, kind).url, { credential: () => token });
      const errors = errorsOf(dave);
      const kept = dave.subscribe(uniqueTopic("sec.kept"));
      const gone = dave.subscribe(uniqueTopic("sec.gone"));
      await Promise.all([kept.ready, gone.ready]);

      token = DAVE_LESS;
      await dave.refreshCredential();

      assert.equal(gone.isClosed, true, "the revoked subscription has ended");
      const ended = await rejectsWith(nextMessage(gone), "PermissionDenied");
      assert.equal(ended.sid, gone.sid);
      assert.deepEqual(errors.map((e) => [e.code, e.sid]), [["PermissionDenied", gone.sid]]);
      await dave.publish(kept.pattern, "still delivered");
      assert.equal((await nextMessage(kept)).text(), "still delivered");
      assert.equal(kept.isClosed, false);
    });
  }

  test("long-poll: a wrong or missing token is 401 AuthenticationFailed and the client closes", async () => {
    for (const credential of ["wrong-token", undefined]) {
      const client = createClient(broker.httpUrl, { ...fast, transport: "longpoll", credential, waitOnFirstConnect: false });
      const error = await rejectsWith(client.opened, "AuthenticationFailed");
      assert.equal(error.status, 401);
      assert.equal(client.state, "closed");
    }
  });
});

describe("permissions: a refused operation is told PermissionDenied, has no effect, and harms no one", () => {
  let broker: Broker;
  before(async () => {
    broker = await Broker.start(authArgs);
  });
  after(async () => {
    await broker?.stop();
  });

  for (const [transport, kind] of [["TCP", "tcp"], ["WebSocket", "websocket"], ["long-poll", "longpoll"]] as const) {
    const url = (): string => reach(broker, kind).url;

    /** carol (limited) and bob (a bystander watching the forbidden topic) on this transport, alice publishing over TCP. */
    const cast = async () => {
      const limited = await open(url(), { ...reach(broker, kind).options, credential: LIMITED, name: "carol" });
      const bystander = await open(url(), { ...reach(broker, kind).options, credential: OTHER, name: "bob" });
      const publisher = await open(broker.tcpUrl, { credential: TOKEN, name: "alice" });
      const granted = uniqueTopic("sec.open");
      const forbidden = uniqueTopic("sec.closed");
      const watching = bystander.subscribe(forbidden);
      const allowed = limited.subscribe(granted);
      await Promise.all([watching.ready, allowed.ready]);
      return { limited, bystander, publisher, granted, forbidden, watching, allowed, errors: errorsOf(limited) };
    };

    test(`${transport}: a refused subscribe is told PermissionDenied and receives nothing; the connection and a bystander keep receiving`, async () => {
      const { limited, bystander, publisher, granted, forbidden, watching, allowed, errors } = await cast();

      const got: string[] = [];
      const refused = limited.subscribe(forbidden, (m) => {
        got.push(m.text());
      });
      if (kind !== "longpoll") {
        // The broker answers the SUBSCRIBE with a non-fatal ERROR (no sid) before the PONG behind it.
        await refused.ready;
      } else {
        // 403 PermissionDenied: the subscription ends with it.
        await assert.rejects(refused.ready, (e: HeraldError) => e.code === "PermissionDenied" && e.status === 403);
        assert.equal(refused.isClosed, true);
      }
      deniedOnce(errors, forbidden);
      if (transport === "long-poll") assert.equal(errors[0]!.status, 403);

      // No effect: a publication to the forbidden topic, then a marker to the granted one, both by alice; the
      // marker arrives on the same connection (session), so the forbidden one would have come first.
      await publisher.publish(forbidden, "not for carol");
      await publisher.publish(granted, "marker");
      assert.equal((await nextMessage(allowed)).text(), "marker");
      assert.deepEqual(got, []);
      assert.equal(limited.state, "connected");
      // The bystander got the publication made after the refusal.
      assert.equal((await nextMessage(watching)).text(), "not for carol");
      assert.equal(bystander.state, "connected");
    });

    test(`${transport}: a refused publish is told PermissionDenied and reaches no one; the client and a bystander carry on`, async () => {
      const { limited, bystander, publisher, granted, forbidden, watching, allowed, errors } = await cast();

      if (kind !== "longpoll") {
        // Written (so it resolves); the broker answers with a non-fatal ERROR before the PONG of the flush.
        await limited.publish(forbidden, "forbidden");
        await limited.flush();
        deniedOnce(errors, forbidden);
      } else {
        // The publish request is answered 403 PermissionDenied: the publish rejects with it.
        const error = await rejectsWith(limited.publish(forbidden, "forbidden"), "PermissionDenied");
        assert.equal(error.status, 403);
        assert.ok(error.message.includes(forbidden), `the refusal names the topic: ${error.message}`);
      }

      // It reached no one, and the bystander carries on: its next message is one alice published after the
      // refusal was answered.
      await publisher.publish(forbidden, "after the refusal");
      assert.equal((await nextMessage(watching)).text(), "after the refusal");
      assert.equal(bystander.state, "connected");
      // The refused client carries on too: its granted publish reaches its own subscription.
      await limited.publish(granted, "still here");
      assert.equal((await nextMessage(allowed)).text(), "still here");
      assert.equal(limited.state, "connected");
    });
  }

  test("WebSocket: an identity cannot read another's inbox nor write into it; the owner is unharmed", async () => {
    const alice = await open(broker.wsUrl, { credential: TOKEN, name: "alice" });
    const carol = await open(broker.wsUrl, { credential: LIMITED, name: "carol" });
    const bob = await open(broker.tcpUrl, { credential: OTHER, name: "bob" });
    const errors = errorsOf(carol);
    const inbox = alice.info!.inboxPrefix!;
    assert.match(inbox, /^_INBOX\.[0-9a-f]{24}$/);
    assert.notEqual(carol.info?.inboxPrefix, inbox);

    // Reading: carol's subscription to alice's inbox is refused (before the PONG behind it)...
    const stolen: string[] = [];
    const eavesdrop = carol.subscribe(`${inbox}.>`, (m) => void stolen.push(m.text()));
    await eavesdrop.ready;
    deniedOnce(errors, inbox);
    // ...and alice's reply, published by bob, reaches alice alone: bob's marker on carol's own topic, sent
    // after the reply on the same connection, is the next thing carol gets.
    const service = uniqueTopic("sec.open.svc");
    const serving = bob.subscribe(service, (m) => m.respond("for alice"));
    const own = uniqueTopic("sec.open.own");
    const carolOwn = carol.subscribe(own);
    await Promise.all([serving.ready, carolOwn.ready]);
    assert.equal((await alice.request(service, "mine", { timeoutMs: 10_000 })).text(), "for alice");
    await bob.publish(own, "marker");
    assert.equal((await nextMessage(carolOwn)).text(), "marker");
    assert.deepEqual(stolen, []);

    // Writing: a forged message into alice's inbox is refused; carol's marker after it reaches alice first.
    const forgedTopic = `${inbox}.forged`;
    const aliceInbox = alice.subscribe(forgedTopic);
    const aliceOwn = alice.subscribe(own);
    await Promise.all([aliceInbox.ready, aliceOwn.ready]);
    errors.length = 0;
    await carol.publish(forgedTopic, "forged");
    await carol.publish(own, "after the forgery");
    assert.equal((await nextMessage(aliceOwn)).text(), "after the forgery");
    await carol.flush();
    deniedOnce(errors, forgedTopic);
    await alice.publish(forgedTopic, "alice's own");
    assert.equal((await nextMessage(aliceInbox)).text(), "alice's own", "nothing forged came before alice's own message");
    assert.equal(alice.state, "connected");
    assert.equal(carol.state, "connected");
  });
});

describe("TLS", () => {
  let broker: Broker;
  let dir: string;
  let ca: string;
  let caFile: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "herald-tls-"));
    const made = spawnSync(
      "openssl",
      [
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        "-keyout", join(dir, "key.pem"), "-out", join(dir, "crt.pem"),
      ],
      { encoding: "utf8" },
    );
    assert.equal(made.status, 0, `openssl failed: ${made.stderr}`);
    caFile = join(dir, "crt.pem");
    ca = readFileSync(caFile, "utf8");
    broker = await Broker.start([
      ...authArgs,
      `--Herald:Security:Tls:CertificatePath=${caFile}`,
      `--Herald:Security:Tls:KeyPath=${join(dir, "key.pem")}`,
      "--Herald:Security:Tls:TcpPorts=all",
      "--Herald:Security:Tls:Http=true",
    ]);
  });
  after(async () => {
    await broker?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const tlsUrl = (host = "127.0.0.1") => `tls://${host}:${broker.tcpPort}`;

  test("tls:// with the self-signed certificate as ca and a token: pub/sub works", async () => {
    const a = await open(tlsUrl(), { credential: TOKEN, ca });
    const b = await open(tlsUrl("localhost"), { credential: OTHER, ca: Buffer.from(ca) });
    assert.equal(a.info?.transport, "tcp");
    await roundTrip(a, b);
    await a.refreshCredential();
    await roundTrip(b, a);
  });

  test("tls:// without trusting the certificate fails to connect", async () => {
    const client = createClient(tlsUrl(), { ...fast, credential: TOKEN, waitOnFirstConnect: false });
    const error = await rejectsWith(client.opened, "ConnectFailed");
    assert.match(error.message, /self[- ]signed|certificate/i);
  });

  test("tls:// with a wrong token fails with AuthenticationFailed", async () => {
    const client = createClient(tlsUrl(), { ...fast, credential: "wrong-token", ca, waitOnFirstConnect: false });
    await rejectsWith(client.opened, "AuthenticationFailed");
  });

  // `ca` reaches a wss:// WebSocket through the `ws` package, which Node before 22 uses; a runtime's own
  // WebSocket takes no CA (NODE_EXTRA_CA_CERTS then, as for https:// long-poll).
  const ownWebSocket = typeof (globalThis as { WebSocket?: unknown }).WebSocket === "function";
  const viaWs = { skip: ownWebSocket ? "this runtime's own WebSocket takes no ca (Node 22+)" : false };

  test("wss:// with the self-signed certificate as ca and a token: pub/sub with tls:// works, and a refresh", viaWs, async () => {
    const web = await open(`wss://localhost:${broker.httpPort}/ws`, { credential: TOKEN, ca });
    const node = await open(tlsUrl(), { credential: OTHER, ca });
    assert.equal(web.info?.transport, "websocket");
    await roundTrip(web, node);
    await web.refreshCredential();
    await roundTrip(node, web);
  });

  test("https:// in auto mode opens the WebSocket over TLS (wss://)", viaWs, async () => {
    const web = await open(`https://127.0.0.1:${broker.httpPort}`, { credential: TOKEN, ca });
    assert.equal(web.info?.transport, "websocket");
    assert.equal(web.info?.fallback, undefined);
    await roundTrip(web, web);
  });

  test("wss:// without trusting the certificate does not connect", async () => {
    const client = createClient(`wss://127.0.0.1:${broker.httpPort}/ws`, { ...fast, credential: TOKEN, waitOnFirstConnect: false });
    const error = await rejectsWith(client.opened, "ConnectFailed");
    assert.match(error.message, /self[- ]signed|certificate/i);
  });

  test("tcp:// (plain) to a TLS port does not connect", async () => {
    const client = createClient(`tcp://127.0.0.1:${broker.tcpPort}`, { ...fast, credential: TOKEN, connectTimeoutMs: 2000, waitOnFirstConnect: false });
    await assert.rejects(client.opened, HeraldError);
  });

  test("https:// long-poll with NODE_EXTRA_CA_CERTS (a child Node process) and a token", () => {
    const index = fileURLToPath(new URL("../dist/index.js", import.meta.url));
    const script = `
      const { connect } = await import(${JSON.stringify(new URL(`file://${index}`).href)});
      const poll = await connect(${JSON.stringify(`https://127.0.0.1:${broker.httpPort}`)}, { credential: ${JSON.stringify(TOKEN)}, transport: "longpoll" });
      const tls = await connect(${JSON.stringify(tlsUrl())}, { credential: ${JSON.stringify(OTHER)}, ca: process.env.HERALD_CA });
      const sub = poll.subscribe("sec.https");
      await sub.ready;
      await tls.publish("sec.https", "over https");
      const message = await sub.next();
      console.log(poll.info.transport + ":" + message.text());
      await poll.close();
      await tls.close();
    `;
    const result = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
      env: { ...process.env, NODE_EXTRA_CA_CERTS: caFile, HERALD_CA: ca },
      encoding: "utf8",
      timeout: 30_000,
    });
    assert.equal(result.status, 0, `child failed: ${result.stderr}`);
    assert.equal(result.stdout.trim(), "longpoll:over https");
  });
});
