/**
 * The browser tests: a page served here loads the built ESM client (dist/, with @msgpack/msgpack, fzstd,
 * fossil-delta and @opentelemetry/api from node_modules through an import map), runs in headless Chromium (the Debian
 * package, driven by playwright-core) and connects to the broker's HTTP port (another origin: CORS, and the
 * WebSocket's Origin check). With the default `transport: "auto"` it takes the WebSocket and exchanges
 * messages both ways with the .NET client's samples over TCP; with `transport: "longpoll"` it subscribes over
 * long-poll and receives what the .NET sample publisher sent over TCP.
 *
 * Skipped, with the reason, only when Chromium is not installed and cannot be installed.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { Broker } from "./helpers/broker.js";
import { CHROMIUM, CHROMIUM_ARGS, ensureChromium } from "./helpers/chromium.js";
import { servePage, type PageServer } from "./helpers/page-server.js";
import { runPublisher, sampleDll, SubscriberProcess } from "./helpers/samples.js";

const packageRoot = fileURLToPath(new URL("../", import.meta.url));

const skipReason = ensureChromium();
if (skipReason) process.stderr.write(`[browser] SKIPPED: ${skipReason}\n`);

const PAGE = `<!doctype html>
<html>
<head>
<meta charset="utf-8">
<title>Herald browser test</title>
<script type="importmap">
{ "imports": {
    "@msgpack/msgpack": "/node_modules/@msgpack/msgpack/dist.esm/index.mjs",
    "fzstd": "/node_modules/fzstd/esm/index.mjs",
    "fossil-delta": "/node_modules/fossil-delta/fossil-delta.js",
    "@opentelemetry/api": "/node_modules/@opentelemetry/api/build/esm/index.js"
} }
</script>
<script type="module">
  import { connect } from "/dist/index.js";
  // Connects with \`options\` and subscribes; resolves once the broker has the subscription.
  window.heraldSubscribe = async (url, topic, options) => {
    const client = await connect(url, { name: "browser-test", ...options });
    window.heraldClient = client;
    window.heraldStates = [];
    client.on("state", (s) => window.heraldStates.push(s));
    const sub = client.subscribe(topic);
    await sub.ready;
    (async () => {
      for await (const msg of sub) {
        window.heraldReceived = { topic: msg.topic, text: msg.text(), replyTo: msg.replyTo, bytes: msg.payload.length };
        document.getElementById("out").textContent = msg.text();
        break;
      }
    })();
    return { transport: client.info.transport, fallback: client.info.fallback ?? null, state: client.state, compression: client.info.compression };
  };
  // Publishes on the page's client; resolves once the broker has processed it (PING/PONG, or the POST answered).
  window.heraldPublish = async (topic, text) => {
    await window.heraldClient.publish(topic, text);
    await window.heraldClient.flush();
  };
  window.heraldLoaded = true;
</script>
</head>
<body><p id="out">waiting</p></body>
</html>`;

let broker: Broker | undefined;
let page: PageServer | undefined;
let context: BrowserContext | undefined;
let userDataDir: string | undefined;
const subscribers: SubscriberProcess[] = [];

before(async () => {
  if (skipReason) return;
  // The samples are built before the broker starts, so a build never runs into a test's bounds.
  sampleDll("Herald.Client.Publish");
  sampleDll("Herald.Client.Subscribe");
  broker = await Broker.start();
  page = await servePage(PAGE, packageRoot, ["/dist/", "/node_modules/@msgpack/msgpack/", "/node_modules/fzstd/", "/node_modules/fossil-delta/", "/node_modules/@opentelemetry/api/"]);
});

after(async () => {
  for (const s of subscribers) s.kill();
  await context?.close().catch(() => undefined);
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
  page?.server.close();
  await broker?.stop();
});

interface PageWindow {
  heraldLoaded?: boolean;
  heraldReceived?: { topic: string; text: string; replyTo: string | null };
  heraldClient: { close(): Promise<void> };
  heraldSubscribe(url: string, topic: string, options: Record<string, unknown>): Promise<unknown>;
  heraldPublish(topic: string, text: string): Promise<void>;
}

/** A new tab on the page (Chromium started on first use), with what goes wrong in it collected in `problems`. */
async function openTab(): Promise<{ tab: Page; problems: string[] }> {
  if (!context) {
    userDataDir = mkdtempSync(join(tmpdir(), "herald-chromium-"));
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
    });
  }
  const tab = await context.newPage();
  const problems: string[] = [];
  tab.on("console", (m) => {
    if (m.type() === "error") problems.push(`${m.text()} (${m.location().url})`);
  });
  tab.on("response", (r) => {
    if (r.status() >= 400) problems.push(`HTTP ${r.status()} for ${r.url()}`);
  });
  tab.on("pageerror", (e) => problems.push(e.message));
  await tab.goto(page!.url);
  await tab.waitForFunction(() => (window as unknown as PageWindow).heraldLoaded === true, null, { timeout: 15_000 });
  return { tab, problems };
}

/** What the page's subscription received first (waits for it). */
async function receivedIn(tab: Page): Promise<{ topic: string; text: string; replyTo: string | null }> {
  const handle = await tab.waitForFunction(() => (window as unknown as PageWindow).heraldReceived, null, { timeout: 15_000 });
  return (await handle.jsonValue()) as { topic: string; text: string; replyTo: string | null };
}

test(
  "browser: a page in headless Chromium connects in auto mode, takes the WebSocket, and exchanges messages both ways with .NET clients over TCP",
  { skip: skipReason ?? false, timeout: 120_000 },
  async () => {
    const { tab, problems } = await openTab();
    const stamp = Date.now().toString(36);
    const toPage = `browser.ws.in.${stamp}`;
    const fromPage = `browser.ws.out.${stamp}`;

    const subscribed = await tab.evaluate(
      ([url, t]) => (window as unknown as PageWindow).heraldSubscribe(url!, t!, {}),
      [broker!.httpUrl, toPage],
    );
    assert.deepEqual(subscribed, { transport: "websocket", fallback: null, state: "connected", compression: true }, problems.join("\n"));

    // .NET over TCP -> the page over WebSocket.
    const message = `Hello from .NET to Chromium over WebSocket ${Date.now()}`;
    const publish = await runPublisher(["--url", broker!.tcpUrl, "--topic", toPage, "--message", message]);
    assert.equal(publish.status, 0, `the .NET publisher failed (exit ${publish.status}):\n${publish.output}`);
    const received = await receivedIn(tab);
    assert.equal(received.topic, toPage);
    assert.equal(received.text, message);
    assert.equal(await tab.textContent("#out"), message);

    // The page over WebSocket -> .NET over TCP.
    const dotnet = SubscriberProcess.start(["--url", broker!.tcpUrl, "--pattern", fromPage, "--count", "1"]);
    subscribers.push(dotnet);
    const [ready] = await dotnet.untilLines(1, 60_000);
    assert.deepEqual(ready, { ready: true, pattern: fromPage, url: broker!.tcpUrl });
    const reply = "Grüße from Chromium over WebSocket 👋";
    await tab.evaluate(([t, text]) => (window as unknown as PageWindow).heraldPublish(t!, text!), [fromPage, reply]);
    const lines = await dotnet.untilLines(2, 30_000);
    assert.deepEqual(lines[1], { topic: fromPage, payload: reply, headers: {} });
    assert.equal(await dotnet.exited, 0, `the .NET subscriber did not exit 0 after its message\n${dotnet.output}`);

    // The broker counted the page's connection as a WebSocket one (its own /connz, by the client's name).
    const connz = (await (await fetch(`${broker!.monitoringUrl}/connz?transport=websocket`)).json()) as { connections: { name?: string }[] };
    assert.ok(connz.connections.some((c) => c.name === "browser-test"), JSON.stringify(connz));
    assert.deepEqual(problems, [], "no errors in the page");
    await tab.evaluate(() => (window as unknown as PageWindow).heraldClient.close());
  },
);

test(
  "browser: a page in headless Chromium subscribes over long-poll (transport: \"longpoll\") and receives a message a .NET client published over TCP",
  { skip: skipReason ?? false, timeout: 90_000 },
  async () => {
    const { tab, problems } = await openTab();
    const topic = `browser.test.${Date.now().toString(36)}`;
    const message = `Hello from .NET to Chromium ${Date.now()}`;
    const subscribed = await tab.evaluate(
      ([url, t]) => (window as unknown as PageWindow).heraldSubscribe(url!, t!, { transport: "longpoll" }),
      [broker!.httpUrl, topic],
    );
    assert.deepEqual(subscribed, { transport: "longpoll", fallback: null, state: "connected", compression: true }, problems.join("\n"));

    const publish = await runPublisher(["--url", broker!.tcpUrl, "--topic", topic, "--message", message]);
    assert.equal(publish.status, 0, `the .NET publisher failed (exit ${publish.status}):\n${publish.output}`);

    const received = await receivedIn(tab);
    assert.equal(received.topic, topic);
    assert.equal(received.text, message);
    assert.equal(await tab.textContent("#out"), message);
    assert.deepEqual(problems, [], "no errors in the page");
    await tab.evaluate(() => (window as unknown as PageWindow).heraldClient.close());
  },
);
