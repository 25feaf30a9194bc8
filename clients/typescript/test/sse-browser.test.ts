/**
 * Server-Sent Events in a real browser (protocol-spec/sse.md): a page in headless Chromium subscribes with a plain
 * `EventSource` (no SDK) to a topic that keeps a history, receives what a TypeScript client publishes over TCP,
 * loses its connection (the loopback front the page is served from cuts it and refuses it for a while), and
 * when Chromium reconnects by itself with its `Last-Event-ID`, gets what it missed, then the live stream: every
 * message once, in order.
 *
 * Skipped, with the reason, only when Chromium is not installed and cannot be installed.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { chromium, type BrowserContext } from "playwright-core";
import { Broker } from "./helpers/broker.js";
import { CHROMIUM, CHROMIUM_ARGS, ensureChromium } from "./helpers/chromium.js";
import { OpenClients } from "./helpers/clients.js";

const skipReason = ensureChromium();
if (skipReason) process.stderr.write(`[sse-browser] SKIPPED: ${skipReason}\n`);

const TOPIC = "feed.browser";

const PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><title>Herald SSE test</title></head>
<body><pre id="out"></pre>
<script>
  window.received = [];
  window.statuses = [];
  const events = new EventSource("/sse?topic=${TOPIC}");
  events.onmessage = (e) => {
    window.received.push({ text: JSON.parse(e.data).text, id: e.lastEventId });
    document.getElementById("out").textContent += JSON.parse(e.data).text + "\\n";
  };
  events.addEventListener("status", (e) => window.statuses.push(JSON.parse(e.data)));
</script>
</body></html>`;

/**
 * The page's origin: serves the page and passes `/sse` to the broker, remembering each request's
 * `Last-Event-ID`. `cut()` ends the streams in flight and refuses new ones (a network that is down) until
 * `restore()`.
 */
class Front {
  readonly lastEventIds: (string | undefined)[] = [];
  private readonly open = new Set<ServerResponse>();
  private down = false;
  private constructor(private readonly server: Server, readonly url: string) {}

  static start(broker: Broker): Promise<Front> {
    let front: Front | undefined;
    const server = createServer((req: IncomingMessage, res: ServerResponse) => front!.handle(broker, req, res));
    return new Promise((resolve) => server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      front = new Front(server, `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}/`);
      resolve(front);
    }));
  }

  private handle(broker: Broker, req: IncomingMessage, res: ServerResponse): void {
    if (!req.url?.startsWith("/sse")) {
      res.writeHead(req.url === "/" ? 200 : 404, { "Content-Type": "text/html; charset=utf-8" }).end(req.url === "/" ? PAGE : "");
      return;
    }
    this.lastEventIds.push(req.headers["last-event-id"] as string | undefined);
    if (this.down) {
      req.socket.destroy(); // no answer at all: EventSource tries again later
      return;
    }
    const upstream = request({ host: "127.0.0.1", port: broker.httpPort, path: req.url, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    upstream.on("error", () => res.destroy());
    this.open.add(res);
    res.on("close", () => {
      this.open.delete(res);
      upstream.destroy(); // the broker sees its client leave
    });
    upstream.end();
  }

  cut(): void {
    this.down = true;
    for (const res of this.open) res.socket?.destroy();
  }

  restore(): void {
    this.down = false;
  }

  close(): void {
    this.server.closeAllConnections();
    this.server.close();
  }
}

let broker: Broker | undefined;
let front: Front | undefined;
let context: BrowserContext | undefined;
let userDataDir: string | undefined;
const clients = new OpenClients();

before(async () => {
  if (skipReason) return;
  broker = await Broker.start(["--Herald:History:Topics:0:Pattern=feed.>"]);
  front = await Front.start(broker);
});

after(async () => {
  await clients.closeAll();
  await context?.close().catch(() => undefined);
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
  front?.close();
  await broker?.stop();
});

interface SsePage {
  received: { text: string; id: string }[];
  statuses: { status: number; description: string; offset?: number }[];
}

test(
  "browser: an EventSource page receives what TCP publishes, and after a lost connection resumes with Last-Event-ID: what it missed, then the live stream, each once",
  { skip: skipReason ?? false, timeout: 120_000 },
  async () => {
    userDataDir = mkdtempSync(join(tmpdir(), "herald-chromium-"));
    context = await chromium.launchPersistentContext(userDataDir, { executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
    const tab = await context.newPage();
    const problems: string[] = [];
    tab.on("pageerror", (e) => problems.push(e.message));
    await tab.goto(front!.url);
    const statusCount = (n: number) => tab.waitForFunction((k) => (window as unknown as SsePage).statuses.length >= k, n, { timeout: 30_000 });
    const receivedCount = (n: number) => tab.waitForFunction((k) => (window as unknown as SsePage).received.length >= k, n, { timeout: 30_000 });

    await statusCount(1); // the stream is open: "Live", with the topic's position
    const live = await tab.evaluate(() => (window as unknown as SsePage).statuses[0]);
    assert.equal(live.description, "Live", problems.join("\n"));

    const publisher = await clients.open(broker!.tcpUrl, { name: "sse-publisher" });
    await publisher.publish(TOPIC, "m1");
    await publisher.publish(TOPIC, "m2");
    await receivedCount(2);
    const before = await tab.evaluate(() => (window as unknown as SsePage).received.slice());
    assert.deepEqual(before.map((r) => r.text), ["m1", "m2"]);
    assert.match(before[1].id, /^2:[0-9a-f]{16}$/);

    front!.cut(); // the network goes down
    await publisher.publish(TOPIC, "m3"); // missed while it is away
    await publisher.publish(TOPIC, "m4");
    await publisher.flush();
    front!.restore();

    await statusCount(2); // Chromium reconnected by itself, with its Last-Event-ID
    const resumed = await tab.evaluate(() => (window as unknown as SsePage).statuses[1]);
    assert.equal(resumed.description, "Recovered");
    assert.ok(front!.lastEventIds.includes(before[1].id), `the reconnects sent ${JSON.stringify(front!.lastEventIds)}`);
    await receivedCount(4);
    await publisher.publish(TOPIC, "m5");
    await receivedCount(5);

    const all = await tab.evaluate(() => (window as unknown as SsePage).received.slice());
    assert.deepEqual(all.map((r) => r.text), ["m1", "m2", "m3", "m4", "m5"]);
    assert.match(all[4].id, /^5:[0-9a-f]{16}$/);
    assert.deepEqual(problems, []);
  },
);
