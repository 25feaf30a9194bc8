/**
 * The browser test: a page served here loads the built ESM client (dist/, with @msgpack/msgpack, fzstd
 * and @opentelemetry/api from node_modules through an import map), runs in headless Chromium (the Debian package, driven
 * by playwright-core), subscribes over long-poll to the broker's HTTP port (another origin: CORS), and
 * receives a message published over TCP by the .NET client's sample publisher.
 *
 * Skipped, with the reason, only when Chromium is not installed and cannot be installed.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { extname, join, normalize } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { chromium, type BrowserContext } from "playwright-core";
import { Broker } from "./helpers/broker.js";
import { runPublisher, sampleDll } from "./helpers/samples.js";

const CHROMIUM = "/usr/bin/chromium";
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
const packageRoot = fileURLToPath(new URL("../", import.meta.url));

/** Chromium from Debian's package; installed here if missing (root and apt-get needed). */
function ensureChromium(): string | null {
  if (existsSync(CHROMIUM)) return null;
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
  if (!isRoot || spawnSync("sh", ["-c", "command -v apt-get"]).status !== 0) {
    return `${CHROMIUM} is missing and cannot be installed here (needs root and apt-get): apt-get install -y chromium chromium-driver`;
  }
  process.stderr.write("[browser] installing Chromium: apt-get install -y chromium chromium-driver\n");
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  spawnSync("apt-get", ["update", "-qq"], { stdio: "ignore", timeout: 300_000, env });
  const install = spawnSync("apt-get", ["install", "-y", "-qq", "chromium", "chromium-driver"], {
    stdio: ["ignore", "ignore", "pipe"],
    timeout: 600_000,
    env,
  });
  if (install.status !== 0 || !existsSync(CHROMIUM)) {
    return `Chromium could not be installed (apt-get install chromium chromium-driver exited ${install.status}): ${String(install.stderr ?? "").slice(-500)}`;
  }
  return null;
}

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
    "@opentelemetry/api": "/node_modules/@opentelemetry/api/build/esm/index.js"
} }
</script>
<script type="module">
  import { connect } from "/dist/index.js";
  // Subscribes over long-poll; resolves once the broker has the subscription.
  window.heraldSubscribe = async (url, topic) => {
    const client = await connect(url, { name: "browser-test" });
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
    return { transport: client.info.transport, state: client.state, compression: client.info.compression };
  };
  window.heraldLoaded = true;
</script>
</head>
<body><p id="out">waiting</p></body>
</html>`;

const TYPES: Record<string, string> = {
  ".js": "text/javascript",
  ".mjs": "text/javascript",
  ".map": "application/json",
  ".html": "text/html",
};

/**
 * Serves the page, dist/ and the three runtime dependencies from node_modules. @opentelemetry/api's ESM
 * build imports its own modules without the `.js` a browser needs (a bundler adds it): added here too.
 */
function servePage(): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
    if (path === "/favicon.ico") {
      res.writeHead(204).end();
      return;
    }
    if (path === "/" || path === "/index.html") {
      res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" }).end(PAGE);
      return;
    }
    const allowed = ["/dist/", "/node_modules/@msgpack/msgpack/", "/node_modules/fzstd/", "/node_modules/@opentelemetry/api/"];
    let file = normalize(join(packageRoot, path));
    if (path.startsWith("/node_modules/@opentelemetry/api/") && !existsSync(file)) {
      file = existsSync(`${file}.js`) ? `${file}.js` : join(file, "index.js");
    }
    if (!allowed.some((prefix) => path.startsWith(prefix)) || !file.startsWith(packageRoot) || !existsSync(file)) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "Content-Type": TYPES[extname(file)] ?? "application/octet-stream" }).end(readFileSync(file));
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => {
    const address = server.address();
    resolve({ server, url: `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}/` });
  }));
}

let broker: Broker | undefined;
let page: { server: Server; url: string } | undefined;
let context: BrowserContext | undefined;
let userDataDir: string | undefined;

before(async () => {
  if (skipReason) return;
  broker = await Broker.start();
  page = await servePage();
});

after(async () => {
  await context?.close().catch(() => undefined);
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
  page?.server.close();
  await broker?.stop();
});

test(
  "browser: a page in headless Chromium subscribes over long-poll and receives a message a .NET client published over TCP",
  { skip: skipReason ?? false, timeout: 90_000 },
  async () => {
    sampleDll("Herald.Client.Publish");
    userDataDir = mkdtempSync(join(tmpdir(), "herald-chromium-"));
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
    });
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
    await tab.waitForFunction(() => (window as unknown as { heraldLoaded?: boolean }).heraldLoaded === true, null, { timeout: 15_000 });

    const topic = `browser.test.${Date.now().toString(36)}`;
    const message = `Hello from .NET to Chromium ${Date.now()}`;
    const subscribed = await tab.evaluate(
      ([url, t]) => (window as unknown as { heraldSubscribe(u: string, t: string): Promise<unknown> }).heraldSubscribe(url!, t!),
      [broker!.httpUrl, topic],
    );
    assert.deepEqual(subscribed, { transport: "longpoll", state: "connected", compression: true }, problems.join("\n"));

    const publish = await runPublisher(["--url", broker!.tcpUrl, "--topic", topic, "--message", message]);
    assert.equal(publish.status, 0, `the .NET publisher failed (exit ${publish.status}):\n${publish.output}`);

    const handle = await tab.waitForFunction(() => (window as unknown as { heraldReceived?: unknown }).heraldReceived, null, {
      timeout: 15_000,
    });
    const received = (await handle.jsonValue()) as { topic: string; text: string; replyTo: string | null };
    assert.equal(received.topic, topic);
    assert.equal(received.text, message);
    assert.equal(await tab.textContent("#out"), message);
    assert.deepEqual(problems, [], "no errors in the page");
    await tab.evaluate(() => (window as unknown as { heraldClient: { close(): Promise<void> } }).heraldClient.close());
  },
);
