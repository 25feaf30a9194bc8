/**
 * The package as a user gets it: `npm pack` (its `prepack` builds dist/) in a copy of this folder, the tarball
 * installed into an empty project from the npm registry's dependencies, and that installed copy used against
 * the real broker: from Node (TCP, and an http:// address that takes the WebSocket through the optional `ws`),
 * type-checked by tsc from its own declarations, and from a page in headless Chromium that loads the installed
 * dist/ files. `npm publish --dry-run --json` lists what would be published: every file must match the
 * allow-list below.
 *
 * The copy (this folder without node_modules, dist/ and test-results/; node_modules linked) keeps the pack's
 * rebuild of dist/ away from the other test files, which load this folder's dist/. The browser part is skipped,
 * with the reason, only when Chromium is not installed and cannot be installed.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { chromium, type Browser } from "playwright-core";
import { Broker } from "./helpers/broker.js";
import { CHROMIUM, CHROMIUM_ARGS, ensureChromium } from "./helpers/chromium.js";
import { servePage, type PageServer } from "./helpers/page-server.js";

const packageRoot = fileURLToPath(new URL("../", import.meta.url));
const npm = process.platform === "win32" ? "npm.cmd" : "npm";

/** What may be published: the build (JS, declarations, their maps), the sources the maps point at, and the docs. */
const ALLOWED = [
  /^package\.json$/,
  /^README\.md$/,
  /^LICENSE$/,
  /^dist\/(?:[a-z][\w-]*\/)*[a-z][\w-]*\.(?:js|d\.ts)(?:\.map)?$/,
  /^src\/(?:[a-z][\w-]*\/)*[a-z][\w-]*(?<!\.test)\.ts$/,
];

/** Runs a command; resolves with its output, rejects (with the output) on a non-zero exit. */
function run(command: string, args: string[], cwd: string, timeout = 180_000): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { cwd, timeout, maxBuffer: 16 * 1024 * 1024, env: { ...process.env, npm_config_update_notifier: "false" } }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${command} ${args.join(" ")} (in ${cwd}) failed: ${error.message}\n${stdout}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

/** npm's JSON: the pack/publish summary (npm 11 keys `publish --json` by the package's name). */
function summaryOf(json: string): { filename: string; files: { path: string }[] } {
  const parsed = JSON.parse(json) as unknown;
  const summary = Array.isArray(parsed) ? parsed[0] : (parsed as Record<string, unknown>)["@herald/client"] ?? parsed;
  return summary as { filename: string; files: { path: string }[] };
}

const skipBrowser = ensureChromium();
if (skipBrowser) process.stderr.write(`[package] browser part SKIPPED: ${skipBrowser}\n`);

let work: string;
let app: string;
let published: string[];
let broker: Broker | undefined;

before(async () => {
  work = mkdtempSync(join(tmpdir(), "herald-package-"));
  const copy = join(work, "package");
  mkdirSync(copy);
  for (const entry of readdirSync(packageRoot)) {
    if (["node_modules", "dist", "test-results"].includes(entry)) continue;
    cpSync(join(packageRoot, entry), join(copy, entry), { recursive: true });
  }
  // What must stay out is there to be left out: the tests' build and a test report.
  mkdirSync(join(copy, "test-results"));
  writeFileSync(join(copy, "test-results", "junit.xml"), "<testsuites/>");
  symlinkSync(join(packageRoot, "node_modules"), join(copy, "node_modules"), "dir");

  const started = Date.now();
  const seconds = (): string => ((Date.now() - started) / 1000).toFixed(1);
  const packed = summaryOf(await run(npm, ["pack", "--json", "--pack-destination", work], copy));
  process.stderr.write(`[package] npm pack (its prepack builds dist/): ${seconds()} s\n`);
  // The scripts ran with the pack; the dry run lists the same folder without building it again.
  published = summaryOf(await run(npm, ["publish", "--dry-run", "--json", "--ignore-scripts"], copy)).files.map((f) => f.path).sort();
  assert.deepEqual(packed.files.map((f) => f.path).sort(), published, "npm pack and npm publish take the same files");

  app = join(work, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "herald-package-test-app", private: true, type: "module" }));
  await run(npm, ["install", join(work, packed.filename), "--no-audit", "--no-fund", "--prefer-offline", "--no-package-lock"], app);
  process.stderr.write(`[package] + npm publish --dry-run and npm install of the tarball: ${seconds()} s\n`);
  broker = await Broker.start();
});

after(async () => {
  await broker?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

test("package: npm publish --dry-run lists only the build, its sources, README, LICENSE and package.json, with the entry points and their types", () => {
  const unexpected = published.filter((path) => !ALLOWED.some((pattern) => pattern.test(path)));
  assert.deepEqual(unexpected, [], `files that do not belong in the package:\n${unexpected.join("\n")}`);
  const manifest = JSON.parse(readFileSync(join(packageRoot, "package.json"), "utf8")) as { exports: Record<string, string | Record<string, string>> };
  const entryPoints = Object.values(manifest.exports).flatMap((target) => (typeof target === "string" ? [target] : Object.values(target)));
  for (const required of ["dist/index.js", "dist/index.d.ts", "README.md", "LICENSE", "package.json", ...entryPoints.map((p) => p.replace(/^\.\//, ""))]) {
    assert.ok(published.includes(required), `${required} is published (published: ${published.join(", ")})`);
  }
  // Every module has its declarations.
  for (const js of published.filter((p) => p.endsWith(".js"))) {
    assert.ok(published.includes(js.replace(/\.js$/, ".d.ts")), `${js} has its .d.ts`);
  }
});

const ROUND_TRIP = `
import { connect } from "@herald/client";
const [url, topic] = process.argv.slice(2);
const client = await connect(url, { name: "installed-package" });
const sub = client.subscribe(topic);
await sub.ready;
await client.publish(topic, "hello from the installed package");
const message = await sub.next();
console.log(JSON.stringify({ topic: message?.topic, text: message?.text(), transport: client.info.transport }));
await client.close();
`;

test("package: the installed package publishes and receives from Node over TCP and over an http:// address (the WebSocket, through the optional ws)", async () => {
  writeFileSync(join(app, "round-trip.mjs"), ROUND_TRIP);
  for (const [url, transport] of [[broker!.tcpUrl, "tcp"], [broker!.httpUrl, "websocket"]] as const) {
    const topic = `package.node.${transport}.${Date.now().toString(36)}`;
    const out = await run(process.execPath, ["round-trip.mjs", url, topic], app, 30_000);
    assert.deepEqual(JSON.parse(out.trim()), { topic, text: "hello from the installed package", transport }, `${url}\n${broker!.log}`);
  }
});

test("package: the installed package's declarations type-check a TypeScript user of it (NodeNext, strict)", async () => {
  writeFileSync(
    join(app, "use.ts"),
    `import { connect, type HeraldClient, type Message } from "@herald/client";
import { validateTopic } from "@herald/client/protocol";
export async function roundTrip(url: string): Promise<string> {
  validateTopic("a.b");
  const client: HeraldClient = await connect(url);
  const message: Message | undefined = await client.subscribe("a.b").next();
  return message ? message.text() : "";
}
`,
  );
  writeFileSync(
    join(app, "tsconfig.json"),
    JSON.stringify({ compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", strict: true, noEmit: true, types: [] }, files: ["use.ts"] }),
  );
  await run(process.execPath, [join(packageRoot, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json"], app);
});

const page = (imports: Record<string, string>): string => `<!doctype html>
<html>
<head>
<meta charset="utf-8">
<title>Herald installed-package test</title>
<script type="importmap">
${JSON.stringify({ imports })}
</script>
<script type="module">
  import { connect } from "@herald/client";
  window.heraldRoundTrip = async (url, topic) => {
    const client = await connect(url, { name: "installed-package-browser" });
    const sub = client.subscribe(topic);
    await sub.ready;
    await client.publish(topic, "hello from the installed package in Chromium");
    const message = await sub.next();
    const answer = { topic: message?.topic, text: message?.text(), transport: client.info.transport };
    await client.close();
    return answer;
  };
  window.heraldLoaded = true;
</script>
</head>
<body></body>
</html>`;

/** The browser's ES module entry of an installed package, as its package.json names it (`exports`, else `module`, else `main`). */
function browserEntry(name: string): string {
  const manifest = JSON.parse(readFileSync(join(app, "node_modules", name, "package.json"), "utf8")) as { exports?: unknown; module?: string; main?: string };
  const pick = (target: unknown): string | undefined => {
    if (typeof target === "string") return target;
    if (!target || typeof target !== "object") return undefined;
    const conditions = target as Record<string, unknown>;
    if ("." in conditions) return pick(conditions["."]);
    for (const condition of ["browser", "import", "default"]) {
      const found = pick(conditions[condition]);
      if (found) return found;
    }
    return undefined;
  };
  const entry = pick(manifest.exports) ?? manifest.module ?? manifest.main ?? "index.js";
  return `/node_modules/${name}/${entry.replace(/^\.\//, "")}`;
}

const RUNTIME = ["@herald/client", "@msgpack/msgpack", "fzstd", "fossil-delta", "@opentelemetry/api"];

/**
 * Serves the page and, from the project the tarball was installed into, the installed package's dist/ and its
 * four runtime dependencies, each at the entry its package.json names (the versions npm picked today, not
 * this folder's lock file).
 */
function serveInstalledPage(): Promise<PageServer> {
  const html = page(Object.fromEntries(RUNTIME.map((name) => [name, browserEntry(name)])));
  return servePage(html, app, ["/node_modules/@herald/client/dist/", ...RUNTIME.slice(1).map((name) => `/node_modules/${name}/`)]);
}

test(
  "package: a page in headless Chromium loads the installed package's dist/ and publishes and receives over the WebSocket",
  { skip: skipBrowser ?? false, timeout: 90_000 },
  async () => {
    const page = await serveInstalledPage();
    let browser: Browser | undefined;
    try {
      browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
      const tab = await browser.newPage();
      const problems: string[] = [];
      tab.on("console", (m) => {
        if (m.type() === "error") problems.push(`${m.text()} (${m.location().url})`);
      });
      tab.on("response", (r) => {
        if (r.status() >= 400) problems.push(`HTTP ${r.status()} for ${r.url()}`);
      });
      tab.on("pageerror", (e) => problems.push(e.message));
      await tab.goto(page.url);
      await tab.waitForFunction(() => (window as unknown as { heraldLoaded?: boolean }).heraldLoaded === true, null, { timeout: 15_000 }).catch((e: Error) => {
        throw new Error(`${e.message}\n${problems.join("\n")}`);
      });
      const topic = `package.browser.${Date.now().toString(36)}`;
      const answer = await tab.evaluate(
        ([url, t]) => (window as unknown as { heraldRoundTrip(url: string, topic: string): Promise<unknown> }).heraldRoundTrip(url!, t!),
        [broker!.httpUrl, topic],
      );
      assert.deepEqual(answer, { topic, text: "hello from the installed package in Chromium", transport: "websocket" }, problems.join("\n"));
      assert.deepEqual(problems, [], "no errors in the page");
    } finally {
      await browser?.close();
      page.server.close();
    }
  },
);
