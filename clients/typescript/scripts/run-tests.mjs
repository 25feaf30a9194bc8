// Runs the compiled tests with node's test runner: the spec report on stdout, a JUnit report in
// test-results/junit.xml (for CI to count the tests).
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
mkdirSync(join(root, "test-results"), { recursive: true });
const only = process.argv.slice(2);
const files = readdirSync(join(root, "build-test"))
  .filter((name) => name.endsWith(".test.js"))
  .filter((name) => only.length === 0 || only.some((o) => name.includes(o)))
  .sort()
  .map((name) => join("build-test", name));
const result = spawnSync(
  process.execPath,
  [
    "--test",
    "--test-reporter=spec",
    "--test-reporter-destination=stdout",
    "--test-reporter=junit",
    "--test-reporter-destination=test-results/junit.xml",
    ...files,
  ],
  { cwd: root, stdio: "inherit" },
);
process.exit(result.status ?? 1);
