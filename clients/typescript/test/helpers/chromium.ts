/**
 * Headless Chromium for the browser tests: Debian's package (/usr/bin/chromium), driven by playwright-core,
 * installed here with apt-get when missing and the tests run as root; otherwise the tests are skipped with
 * the reason.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";

export const CHROMIUM = "/usr/bin/chromium";

export const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** Chromium from Debian's package; installed here if missing (root and apt-get needed). Null when present, else why not. */
export function ensureChromium(): string | null {
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
