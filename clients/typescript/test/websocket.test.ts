/**
 * The WebSocket transport (spec §1) and `transport: "auto"` against real brokers (child processes on free
 * ports): an `http://` address takes the WebSocket at `/ws`; in front of the broker, a small HTTP server
 * here that forwards long-poll but answers the upgrade with 404, strips it (the broker answers 426) or never
 * answers it makes the client fall back to long-poll, visibly, and stay there; a runtime without WebSocket
 * falls back too. A fatal ERROR from the broker surfaces and the client reconnects over the WebSocket again;
 * a network that stops carrying the client's bytes makes publications wait and then refuses them past
 * `maxBufferBytes`, with nothing lost of what was taken.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { createServer as createHttpServer, request, type IncomingHttpHeaders } from "node:http";
import { createConnection, createServer, type Socket } from "node:net";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { HeraldClient, HeraldError, createClient, type ConnectOptions, type Subscription } from "@herald/client";
import { Broker } from "./helpers/broker.js";
import { OpenClients } from "./helpers/clients.js";
import { nextMessage, once, take, uniqueTopic } from "./helpers/wait.js";

let broker: Broker;
const clients = new OpenClients();
const open = (url: string, options: ConnectOptions = {}): Promise<HeraldClient> => clients.open(url, options);
const closers: (() => unknown)[] = [];

before(async () => {
  broker = await Broker.start(["--Herald:LongPoll:PollTimeout=00:00:03"]);
});

after(async () => {
  await clients.closeAll();
  for (const close of closers) await close();
  await broker?.stop();
});

/** What the broker lists as open WebSocket connections (its own /connz). */
async function webSocketConnections(target: Broker): Promise<{ cid: number; name?: string }[]> {
  const connz = (await (await fetch(`${target.monitoringUrl}/connz?transport=websocket`)).json()) as { connections: { cid: number; name?: string }[] };
  return connz.connections;
}

/** A TCP client of `target` that reads everything published to `topic` (ready once the broker has the subscription). */
async function watch(topic: string, target = broker): Promise<Subscription> {
  const node = await open(target.tcpUrl, { name: "ws-watcher" });
  const sub = node.subscribe(topic);
  await sub.ready;
  return sub;
}

/** How the HTTP front answers a WebSocket upgrade (`"pass"`: carried to the broker byte for byte). */
type UpgradeAnswer = "404" | "strip" | "silence" | "pass";

interface HttpFront {
  url: string;
  /** Upgrade requests it got (WebSocket attempts). */
  upgrades: number;
  /** Long-poll session creations it forwarded. */
  sessions: number;
  /** How the next upgrades are answered, one each, before the front's own `answer`. */
  next: UpgradeAnswer[];
  /** Drops every WebSocket it carries (`"pass"`), as a network that went away would. */
  dropWebSockets(): void;
}

/**
 * An HTTP server on loopback in front of `target`'s HTTP port, as a proxy without WebSocket support would
 * be: every plain request is forwarded to the broker and its answer sent back; an upgrade is answered
 * 404 (`"404"`), sent on without its `Upgrade` and `Connection` headers so the broker answers it as a plain
 * request, 426 (`"strip"`), or never answered (`"silence"`).
 */
async function httpFront(target: Broker, answer: UpgradeAnswer): Promise<HttpFront> {
  const held = new Set<Socket>();
  const forward = (method: string, path: string, headers: IncomingHttpHeaders, onAnswer: (status: number, message: string, headers: IncomingHttpHeaders, body: NodeJS.ReadableStream) => void, body?: NodeJS.ReadableStream) => {
    const upstream = request({ host: "127.0.0.1", port: target.httpPort, method, path, headers }, (res) =>
      onAnswer(res.statusCode ?? 502, res.statusMessage ?? "", res.headers, res),
    );
    upstream.on("error", () => undefined);
    if (body) body.pipe(upstream);
    else upstream.end();
  };
  const carried = new Set<Socket>();
  const front: HttpFront = {
    url: "",
    upgrades: 0,
    sessions: 0,
    next: [],
    dropWebSockets: () => {
      for (const socket of carried) socket.destroy();
    },
  };
  const server = createHttpServer((req, res) => {
    if (req.method === "POST" && req.url === "/poll/sessions") front.sessions++;
    forward(req.method ?? "GET", req.url ?? "/", req.headers, (status, _message, headers, body) => {
      res.writeHead(status, headers);
      body.pipe(res);
    }, req);
  });
  server.on("upgrade", (req, socket: Socket, head: Buffer) => {
    front.upgrades++;
    held.add(socket);
    socket.on("error", () => undefined);
    socket.on("close", () => held.delete(socket));
    const how = front.next.shift() ?? answer;
    if (how === "pass") {
      carried.add(socket);
      const upstream = createConnection({ host: "127.0.0.1", port: target.httpPort }, () => {
        const lines = [];
        for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
        upstream.write(`${req.method} ${req.url} HTTP/1.1\r\n${lines.join("\r\n")}\r\n\r\n`, "latin1");
        upstream.write(head);
        socket.pipe(upstream).pipe(socket);
      });
      upstream.on("error", () => socket.destroy());
      socket.on("close", () => {
        carried.delete(socket);
        upstream.destroy();
      });
    } else if (how === "404") {
      socket.end("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    } else if (how === "strip") {
      const headers = { ...req.headers };
      delete headers.upgrade;
      delete headers.connection;
      forward(req.method ?? "GET", req.url ?? "/", headers, (status, message, answerHeaders, body) => {
        const chunks: Buffer[] = [];
        body.on("data", (chunk: Buffer) => chunks.push(chunk));
        body.on("end", () => {
          const content = Buffer.concat(chunks);
          const lines = Object.entries(answerHeaders)
            .filter(([key]) => !["connection", "transfer-encoding", "content-length"].includes(key))
            .map(([key, value]) => `${key}: ${Array.isArray(value) ? value.join(", ") : value}`);
          socket.end(`HTTP/1.1 ${status} ${message}\r\n${[...lines, `content-length: ${content.length}`, "connection: close"].join("\r\n")}\r\n\r\n${content.toString("latin1")}`, "latin1");
        });
      });
    } // "silence": the socket is held, never answered
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  front.url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  closers.push(() => {
    for (const socket of held) socket.destroy();
    server.closeAllConnections();
    return new Promise((resolve) => server.close(() => resolve(undefined)));
  });
  return front;
}

/**
 * A TCP proxy to `target`'s HTTP port that carries a WebSocket byte for byte, and can stop reading what the
 * client sends (a network that stopped carrying it: the client's socket fills up) and start again.
 */
async function stallingProxy(target: Broker): Promise<{ url: string; stall(): void; resume(): void }> {
  const pairs: { client: Socket; upstream: Socket }[] = [];
  const server = createServer((client) => {
    const upstream = createConnection({ host: "127.0.0.1", port: target.httpPort });
    for (const socket of [client, upstream]) {
      socket.on("error", () => undefined);
      socket.on("close", () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
    pairs.push({ client, upstream });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(() => {
    for (const { client, upstream } of pairs) {
      client.destroy();
      upstream.destroy();
    }
    return new Promise((resolve) => server.close(() => resolve(undefined)));
  });
  return {
    url: `ws://127.0.0.1:${(server.address() as { port: number }).port}/ws`,
    stall() {
      for (const { client, upstream } of pairs) {
        client.unpipe(upstream);
        client.pause();
      }
    },
    resume() {
      for (const { client, upstream } of pairs) client.pipe(upstream);
    },
  };
}

/** A fetch that hands the token of each long-poll session it creates to `onSession`. */
function sessionSpy(onSession: (token: string) => void): typeof fetch {
  return async (input, init) => {
    const res = await fetch(input, init);
    if (new URL(String(input)).pathname.endsWith("/poll/sessions") && res.status === 201) {
      onSession(((await res.clone().json()) as { session: string }).session);
    }
    return res;
  };
}

describe("the WebSocket, and auto taking it", () => {
  test("an http:// address takes the WebSocket at /ws: info says so, the broker lists it, messages go both ways with TCP", async () => {
    const web = await open(broker.httpUrl, { name: "ws-auto" });
    assert.equal(web.info?.transport, "websocket");
    assert.equal(web.info?.fallback, undefined);
    assert.equal(web.info?.serverName, "herald");
    assert.equal(web.info?.limits.max_frame, 1024 * 1024, "WELCOME's limits");
    const listed = await webSocketConnections(broker);
    assert.ok(
      listed.some((c) => c.cid === Number(web.info?.connectionId) && c.name === "ws-auto"),
      `the broker's /connz lists connection ${web.info?.connectionId} as websocket: ${JSON.stringify(listed)}`,
    );

    const topic = uniqueTopic("ws.auto");
    const watcher = await watch(`${topic}.>`);
    const own = web.subscribe(`${topic}.>`);
    await own.ready;
    await web.publish(`${topic}.from-web`, "over the WebSocket", { headers: { "X-Via": "ws" } });
    const atTcp = await nextMessage(watcher);
    assert.equal(atTcp.text(), "over the WebSocket");
    assert.equal(atTcp.headers.get("X-Via"), "ws");
    assert.equal((await nextMessage(own)).text(), "over the WebSocket");
    const node = await open(broker.tcpUrl, { name: "ws-auto-node" });
    await node.publish(`${topic}.from-tcp`, Uint8Array.of(0, 1, 2, 255));
    assert.deepEqual((await nextMessage(own)).payload, Uint8Array.of(0, 1, 2, 255));
  });

  test("ws:// names the WebSocket (without a path, the broker's /ws); a transport option that contradicts an address is refused", async () => {
    const bare = await open(`ws://127.0.0.1:${broker.httpPort}`, { name: "ws-bare" });
    assert.equal(bare.info?.transport, "websocket");
    assert.throws(() => new HeraldClient(broker.tcpUrl, { transport: "longpoll" }), { code: "InvalidOptions" });
    assert.throws(() => new HeraldClient(broker.wsUrl, { transport: "longpoll" }), { code: "InvalidOptions" });
    assert.throws(() => new HeraldClient(`ftp://127.0.0.1:${broker.httpPort}`), { code: "ConnectFailed" });
    const forced = await open(broker.wsUrl, { name: "ws-forced", transport: "websocket" });
    assert.equal(forced.info?.transport, "websocket");
  });

  test("publications made in one turn go out in WebSocket messages of at most max_frame + 4 bytes (spec §1): all arrive, the connection stays", async () => {
    const web = await open(broker.wsUrl, { name: "ws-burst" });
    let disconnects = 0;
    web.on("disconnect", () => disconnects++);
    const topic = uniqueTopic("ws.burst");
    const watcher = await watch(topic);
    // Ten of 300 KiB written together: 3 MB in one turn, where the broker closes a message over 1 MiB + 4 (1009).
    const payload = new Uint8Array(300 * 1024).fill(1);
    await Promise.all(Array.from({ length: 10 }, (_, i) => web.publish(topic, payload, { headers: { "X-N": String(i) } })));
    await web.flush();
    const got = await take(watcher, 10, 30_000);
    assert.deepEqual(got.map((m) => m.headers.get("X-N")), Array.from({ length: 10 }, (_, i) => String(i)));
    assert.equal(disconnects, 0);
  });
});

describe("auto: the fallback to long-poll", () => {
  for (const [answer, why] of [
    ["404", /404/],
    ["strip", /426/],
  ] as const) {
    test(`a front that answers the upgrade ${answer === "404" ? "404" : "without it (the broker: 426 Upgrade Required)"}: long-poll, saying why; messages flow; a reconnect stays on long-poll`, async () => {
      const front = await httpFront(broker, answer);
      let session = "";
      const web = await open(front.url, { name: `ws-fallback-${answer}`, fetch: sessionSpy((token) => (session = token)) });
      assert.equal(web.info?.transport, "longpoll");
      assert.match(web.info?.fallback ?? "", why);
      assert.match(web.info?.fallback ?? "", /WebSocket ws:\/\/127\.0\.0\.1:\d+\/ws did not open/);
      assert.equal(front.upgrades, 1, "one WebSocket attempt");
      assert.deepEqual(await webSocketConnections(broker).then((l) => l.filter((c) => c.name === `ws-fallback-${answer}`)), []);

      const topic = uniqueTopic(`ws.fallback.${answer}`);
      const watcher = await watch(topic);
      const own = web.subscribe(topic, { resume: false });
      await own.ready;
      await web.publish(topic, "through the front, over long-poll");
      assert.equal((await nextMessage(watcher)).text(), "through the front, over long-poll");
      assert.equal((await nextMessage(own)).text(), "through the front, over long-poll");

      // The session ends behind the client's back: it reconnects, and goes straight to long-poll.
      const back = once(web, "reconnect");
      const first = session;
      assert.equal((await fetch(`${broker.httpUrl}/poll/sessions/${first}`, { method: "DELETE" })).status, 204);
      await back;
      assert.notEqual(session, first, "a new long-poll session");
      assert.equal(front.upgrades, 1, "no second WebSocket attempt");
      assert.equal(front.sessions, 2);
      assert.equal(web.info?.transport, "longpoll");
      assert.match(web.info?.fallback ?? "", why, "still says why");
      await web.flush();
      const node = await open(broker.tcpUrl, { name: "ws-fallback-node" });
      await node.publish(topic, "after the reconnect");
      assert.equal((await nextMessage(own)).text(), "after the reconnect");
    });
  }

  test("a lost WebSocket whose next upgrade fails while long-poll answers (a broker still starting): the upgrade is tried once more, and the client stays on the WebSocket", async () => {
    const front = await httpFront(broker, "pass");
    const web = await open(front.url, { name: "ws-tried-again" });
    assert.equal(web.info?.transport, "websocket");
    const topic = uniqueTopic("ws.again");
    const own = web.subscribe(topic, { resume: false });
    await own.ready;

    front.next.push("404"); // the first upgrade after the loss fails; long-poll, right after, works
    const back = once(web, "reconnect");
    front.dropWebSockets();
    await back;
    assert.equal(web.info?.transport, "websocket", "not settled on long-poll for one failed upgrade");
    assert.equal(web.info?.fallback, undefined);
    assert.equal(front.upgrades, 3, "the first, the one that failed, the one tried again");
    assert.equal(front.sessions, 1, "the long-poll session that answered (then closed)");
    const watcher = await watch(topic);
    await web.publish(topic, "over the WebSocket again");
    assert.equal((await nextMessage(watcher)).text(), "over the WebSocket again");
    assert.equal((await nextMessage(own)).text(), "over the WebSocket again");

    // Failing twice in a row (the upgrade, then again once long-poll answered) is a front that does not carry it.
    front.next.push("404", "404");
    const fellBack = once(web, "reconnect");
    front.dropWebSockets();
    await fellBack;
    assert.equal(web.info?.transport, "longpoll");
    assert.match(web.info?.fallback ?? "", /404/);
  });

  test("a front that never answers the upgrade: long-poll once connectTimeoutMs has passed", async () => {
    const front = await httpFront(broker, "silence");
    const web = await open(front.url, { name: "ws-fallback-silence", connectTimeoutMs: 3000 });
    assert.equal(web.info?.transport, "longpoll");
    assert.match(web.info?.fallback ?? "", /within 3000 ms/);
    assert.equal(front.upgrades, 1);
    const topic = uniqueTopic("ws.fallback.silence");
    const watcher = await watch(topic);
    await web.publish(topic, "after the silence");
    assert.equal((await nextMessage(watcher)).text(), "after the silence");
  });

  test("transport: \"websocket\" does not fall back (ConnectFailed, why), and \"longpoll\" never tries the WebSocket", async () => {
    const front = await httpFront(broker, "404");
    const forced = createClient(front.url, { transport: "websocket", waitOnFirstConnect: false, connectTimeoutMs: 5000 });
    clients.add(forced);
    await assert.rejects(forced.opened, (e: HeraldError) => {
      assert.equal(e.code, "ConnectFailed", e.message);
      assert.match(e.message, /404/);
      return true;
    });
    assert.equal(front.upgrades, 1);
    assert.equal(front.sessions, 0, "no long-poll session was tried");

    const poll = await open(front.url, { name: "ws-forced-poll", transport: "longpoll" });
    assert.equal(poll.info?.transport, "longpoll");
    assert.equal(poll.info?.fallback, undefined, "chosen, not fallen back to");
    assert.equal(front.upgrades, 1, "no WebSocket attempt");
  });

  test("a runtime without WebSocket (no global one, the `ws` package missing): auto falls back to long-poll and says so; ws:// fails with the reason", () => {
    const index = new URL(`file://${fileURLToPath(new URL("../dist/index.js", import.meta.url))}`).href;
    // A child Node process in which importing `ws` fails as it does when the package is not installed.
    const hook = `data:text/javascript,${encodeURIComponent(
      "export async function resolve(specifier, context, next) { if (specifier === 'ws') { const e = new Error(\"Cannot find package 'ws'\"); e.code = 'ERR_MODULE_NOT_FOUND'; throw e; } return next(specifier, context); }",
    )}`;
    const script = `
      import { register } from "node:module";
      delete globalThis.WebSocket;
      register(${JSON.stringify(hook)});
      const { connect } = await import(${JSON.stringify(index)});
      const web = await connect(${JSON.stringify(broker.httpUrl)}, { name: "no-ws" });
      const out = { transport: web.info.transport, fallback: web.info.fallback };
      await web.close();
      try {
        await connect(${JSON.stringify(broker.wsUrl)}, { connectTimeoutMs: 2000 });
        out.ws = "connected";
      } catch (e) {
        out.ws = { code: e.code, message: e.message };
      }
      console.log(JSON.stringify(out));
    `;
    const run = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 60_000 });
    assert.equal(run.status, 0, `the child failed: ${run.stderr}`);
    const out = JSON.parse(run.stdout) as { transport: string; fallback: string; ws: { code: string; message: string } };
    assert.equal(out.transport, "longpoll");
    assert.match(out.fallback, /no WebSocket.*install the `ws` package/);
    assert.equal(out.ws.code, "ConnectFailed");
    assert.match(out.ws.message, /install the `ws` package/);
  });
});

describe("errors, reconnect and backpressure", () => {
  const LIMITED = "s3cret-token-for-a-limited-identity";
  let strict: Broker;
  let roomy: Broker;
  before(async () => {
    // For the stalled network: a subscriber may fall far behind while the burst comes through, and a frame
    // begun before the stall may wait for its end (the test's own broker, so nothing else is loosened).
    roomy = await Broker.start(["--Herald:Limits:MaxPendingBytes=268435456", "--Herald:Limits:FrameGracePeriod=00:02:00"]);
    // One identity allowed only ws.open.>, on a broker that closes a connection after a refused operation.
    strict = await Broker.start([
      "--Herald:Security:Auth:Mode=Token",
      "--Herald:Security:DisconnectOnPermissionDenied=true",
      "--Herald:Security:Auth:Tokens:0:Name=limited",
      `--Herald:Security:Auth:Tokens:0:Sha256=${createHash("sha256").update(LIMITED).digest("hex")}`,
      "--Herald:Security:Auth:Tokens:0:Permissions:Publish:0=ws.open.>",
      "--Herald:Security:Auth:Tokens:0:Permissions:Subscribe:0=ws.open.>",
    ]);
  });
  after(async () => {
    await Promise.all([strict?.stop(), roomy?.stop()]);
  });

  test("the broker's fatal ERROR surfaces (disconnect, state) and the client reconnects over the WebSocket, subscriptions restored", async () => {
    const web = await open(strict.httpUrl, { name: "ws-strict", credential: LIMITED });
    assert.equal(web.info?.transport, "websocket");
    const firstId = web.info?.connectionId;
    const topic = uniqueTopic("ws.open.kept");
    const sub = web.subscribe(topic);
    await sub.ready;
    const states: [string, string | undefined][] = [];
    web.on("state", (state, error) => states.push([state, (error as HeraldError | undefined)?.code]));
    const lost = once(web, "disconnect");
    const back = once(web, "reconnect");

    await web.publish(uniqueTopic("ws.closed"), "not allowed"); // written; the broker refuses it and closes
    const [error] = await lost;
    assert.ok(error instanceof HeraldError, `not a HeraldError: ${error}`);
    assert.equal(error.code, "PermissionDenied", error.message);
    assert.equal(error.fatal, true);
    assert.match(error.message, /^Broker: /);
    await back;
    assert.deepEqual(states.slice(0, 2), [["reconnecting", "PermissionDenied"], ["connected", undefined]]);
    assert.equal(web.info?.transport, "websocket", "a reconnect tries the WebSocket first");
    assert.notEqual(web.info?.connectionId, firstId, "a new connection");
    await web.publish(topic, "after the reconnect");
    assert.equal((await nextMessage(sub)).text(), "after the reconnect", "the subscription was made again");
  });

  test("a network that stops carrying the client's bytes: publications wait for it, and past maxBufferBytes are refused (BufferFull); what was taken arrives in order", async () => {
    const limit = 1024 * 1024;
    const proxy = await stallingProxy(roomy);
    const web = await open(proxy.url, { name: "ws-stalled", maxBufferBytes: limit });
    let disconnects = 0;
    web.on("disconnect", () => disconnects++);
    const topic = uniqueTopic("ws.stalled");
    const watcher = await watch(topic, roomy);
    const payload = new Uint8Array(256 * 1024).fill(7);
    proxy.stall();

    // One publication a turn, so each reaches the WebSocket before the next: without the bound the client
    // would hold all 400 (100 MiB); with it, BufferFull comes once what the socket holds passes 1 MiB.
    const taken: Promise<void>[] = [];
    const settled: boolean[] = [];
    let refused: HeraldError | null = null;
    for (let i = 0; i < 400 && refused === null; i++) {
      const sent = web.publish(topic, payload, { headers: { "X-N": String(i) } });
      sent.then(
        () => (settled[i] = true),
        (e: unknown) => {
          if (e instanceof HeraldError && e.code === "BufferFull") refused = e;
          settled[i] = true;
        },
      );
      taken.push(sent);
      await new Promise((resolve) => setImmediate(resolve));
    }
    assert.ok(refused, "BufferFull before 100 MiB were taken");
    assert.match((refused as HeraldError).message, /maxBufferBytes \(1048576\)/);
    const accepted = taken.length - 1; // the last one was refused
    const waiting = Array.from({ length: accepted }, (_, i) => settled[i] === true).filter((done) => !done).length;
    assert.ok(waiting > 0, "publications taken while the network was stalled wait for it");

    proxy.resume();
    await Promise.all(taken.slice(0, accepted));
    const got = await take(watcher, accepted, 60_000);
    assert.deepEqual(
      got.map((m) => m.headers.get("X-N")),
      Array.from({ length: accepted }, (_, i) => String(i)),
      "everything taken arrived, in order; the refused one did not",
    );
    assert.ok(got.every((m) => m.payload.length === payload.length));
    // The connection carries on: the next publication goes out, and nothing came before it.
    await web.publish(topic, "after", { headers: { "X-N": "after" } });
    assert.equal((await nextMessage(watcher)).headers.get("X-N"), "after");
    assert.equal(disconnects, 0);
    assert.equal(web.state, "connected");
  });
});
