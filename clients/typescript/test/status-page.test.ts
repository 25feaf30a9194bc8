/**
 * The broker's live status page (`/` on its monitoring listener) in headless Chromium: the real broker runs
 * with a monitoring token, the page asks for it, TypeScript clients publish over TCP and long-poll, and the
 * numbers the page draws must move with that traffic (connections, the publish rate, the top topic, the
 * compression of that topic, the charts). The page may load nothing but its own files and data: any
 * request elsewhere, Content-Security-Policy refusal or script error fails the test. A screenshot is kept
 * in test-results/status-page.png, and one of the login form in status-page-login.png (CI collects the folder).
 *
 * Skipped, with the reason, only when Chromium is not installed and cannot be installed.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import type { HeraldClient } from "@herald/client";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { Broker } from "./helpers/broker.js";
import { CHROMIUM, CHROMIUM_ARGS, ensureChromium } from "./helpers/chromium.js";
import { OpenClients } from "./helpers/clients.js";
import { until } from "./helpers/wait.js";

const TOKEN = "status-page-browser-token-0123456789";
const HOT = "status.page.prices";
const COLD = "status.page.news";
const resultsDir = fileURLToPath(new URL("../test-results/", import.meta.url));
const screenshot = join(resultsDir, "status-page.png");
const loginScreenshot = join(resultsDir, "status-page-login.png");

const skipReason = ensureChromium();
if (skipReason) process.stderr.write(`[status-page] SKIPPED: ${skipReason}\n`);

let broker: Broker | undefined;
let context: BrowserContext | undefined;
let userDataDir: string | undefined;
const clients = new OpenClients();

before(async () => {
  if (skipReason) return;
  broker = await Broker.start([`--Herald:Monitoring:Token=${TOKEN}`]);
});

after(async () => {
  await context?.close().catch(() => undefined);
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
  await clients.closeAll();
  await broker?.stop();
});

/** A JSON payload of 4 KiB or so that compresses well (the broker compresses from 1 KiB for Zstd subscribers). */
function quotes(seq: number): string {
  const rows = [];
  for (let i = 0; i < 60; i++) rows.push({ symbol: `ACME${i % 6}`, price: 100 + (i % 3), currency: "EUR", seq });
  return JSON.stringify(rows);
}

/** The number a tile shows, from its data-value (the raw number behind the formatted text). */
async function tile(tab: Page, id: string): Promise<number> {
  return Number(await tab.getAttribute(`#${id}`, "data-value"));
}

test(
  "status page: headless Chromium logs in with the monitoring token and sees connections, rates and the top topic move with real traffic",
  { skip: skipReason ?? false, timeout: 180_000 },
  async () => {
    const monitoring = broker!.monitoringUrl;
    userDataDir = mkdtempSync(join(tmpdir(), "herald-status-chromium-"));
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
      viewport: { width: 1440, height: 1000 },
    });
    const tab = context.pages()[0] ?? (await context.newPage());
    const problems: string[] = [];
    tab.on("console", (m) => {
      if (m.type() === "error" && !/status of 401/.test(m.text())) problems.push(`console: ${m.text()} (${m.location().url})`);
    });
    tab.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    tab.on("request", (r) => {
      if (!r.url().startsWith(`${monitoring}/`)) problems.push(`a request outside the monitoring listener: ${r.method()} ${r.url()}`);
    });
    tab.on("response", (r) => {
      if (r.status() >= 400 && r.status() !== 401) problems.push(`HTTP ${r.status()} for ${r.url()}`);
    });

    // Without the token: the login form, not the page.
    const first = await tab.goto(`${monitoring}/`);
    assert.equal(first?.status(), 401);
    assert.equal(await tab.locator("#kpi-connections").count(), 0, "no status before the token");
    mkdirSync(resultsDir, { recursive: true });
    await tab.screenshot({ path: loginScreenshot });

    // A wrong token: the form again, saying so.
    await tab.fill("#token", `${TOKEN}-wrong`);
    await Promise.all([tab.waitForNavigation(), tab.click("button[type=submit]")]);
    assert.equal(await tab.locator("p.error").isVisible(), true);
    assert.equal(await tab.locator("#kpi-connections").count(), 0);

    // The token: the page, with an HttpOnly, SameSite=Strict session cookie the page's scripts cannot read.
    await tab.fill("#token", TOKEN);
    await Promise.all([tab.waitForNavigation(), tab.click("button[type=submit]")]);
    await tab.waitForSelector("#kpi-connections", { timeout: 30_000 });
    const cookies = await context.cookies(monitoring);
    const session = cookies.find((c) => c.name === `herald-monitoring-${broker!.monitoringPort}`);
    assert.ok(session, `no session cookie among ${cookies.map((c) => c.name).join(", ")}`);
    assert.equal(session.httpOnly, true);
    assert.equal(session.sameSite, "Strict");
    assert.ok(!session.value.includes(TOKEN), "the cookie holds no token");
    assert.equal(await tab.evaluate(() => document.cookie), "");
    await tab.waitForFunction(() => document.getElementById("server-status")?.textContent === "ready", null, { timeout: 30_000 });

    // Real traffic: a subscriber and two publishers over TCP, and a long-poll subscriber whose name is HTML.
    const subscriber = await clients.open(broker!.tcpUrl, { name: "status-subscriber" });
    const poller = await clients.open(broker!.httpUrl, { name: "<b>poller</b>", transport: "longpoll" }); // http:// alone would take the WebSocket
    const publishers: HeraldClient[] = [
      await clients.open(broker!.tcpUrl, { name: "status-publisher-1" }),
      await clients.open(broker!.tcpUrl, { name: "status-publisher-2" }),
    ];
    const received = { tcp: 0, poll: 0 };
    await subscriber.subscribe("status.page.>", () => void received.tcp++).ready;
    await poller.subscribe(COLD, () => void received.poll++).ready;

    let publishing = true;
    let published = 0;
    const traffic = (async () => {
      for (let seq = 0; publishing; seq++) {
        await Promise.all(publishers.map((p) => p.publish(HOT, quotes(seq))));
        published += publishers.length;
        if (seq % 5 === 0) {
          await publishers[0]!.publish(COLD, `headline ${seq}`);
          published++;
        }
        await publishers[0]!.flush();
        await new Promise((r) => setTimeout(r, 25));
      }
    })();

    try {
      // The tiles follow: 3 TCP connections and 1 long-poll session, publications per second above 0.
      await tab.waitForFunction(
        () => document.getElementById("kpi-tcp")?.textContent === "3" && document.getElementById("kpi-longpoll")?.textContent === "1",
        null,
        { timeout: 60_000 },
      );
      assert.equal(await tile(tab, "kpi-connections"), 4);
      await tab.waitForFunction(() => Number(document.getElementById("kpi-publish-rate")?.dataset.value) > 0, null, { timeout: 60_000 });
      assert.ok((await tile(tab, "kpi-subscriptions")) >= 2);

      // The top topic is the busy one, and it is compressed (the subscribers negotiated Zstd).
      await tab.waitForFunction(
        (hot) => document.querySelector("#top-topics tbody tr td.topic")?.textContent === hot,
        HOT,
        { timeout: 60_000 },
      );
      const topics = await tab.locator("#top-topics tbody td.topic").allTextContents();
      assert.ok(topics.includes(COLD), `the quiet topic is listed too: ${topics.join(", ")}`);
      await tab.waitForFunction(
        (hot) => Array.from(document.querySelectorAll("#compression tbody td.topic")).some((td) => td.textContent === hot),
        HOT,
        { timeout: 60_000 },
      );

      // A client's name is shown as text, never as markup.
      await tab.waitForFunction(() => document.querySelector("#long-poll tbody td.name")?.textContent?.includes("<b>poller</b>"), null, { timeout: 60_000 });
      assert.equal(await tab.locator("#long-poll tbody b").count(), 0);

      // The charts move: the messages chart is redrawn differently once more samples arrive.
      const chart = () => tab.evaluate(() => (document.getElementById("chart-messages") as HTMLCanvasElement).toDataURL());
      const updates = new Set<string>();
      const before = await chart();
      await until(async () => {
        updates.add((await tab.textContent("#updated")) ?? "");
        return updates.size >= 8 && (await chart()) !== before;
      }, 90_000, "eight samples of the page and a chart that changed");
    } finally {
      publishing = false;
      await traffic;
    }

    assert.ok(received.tcp > 0 && received.poll > 0, `the subscribers got the traffic (tcp ${received.tcp}, long-poll ${received.poll})`);
    assert.ok(published > 0);
    await tab.screenshot({ path: screenshot, fullPage: true });
    assert.ok(statSync(screenshot).size > 20_000, "the screenshot has content");
    assert.deepEqual(problems, [], "no errors, refusals or outside requests in the page");

    // Logging out: back to the form, and the data is refused again.
    await Promise.all([tab.waitForNavigation(), tab.click("#logout button")]);
    assert.equal(await tab.locator("#token").count(), 1);
    const data = await tab.evaluate(async () => (await fetch("statusz")).status);
    assert.equal(data, 401);
  },
);
