/**
 * The .NET client's sample CLIs (clients/dotnet/samples): the publisher and the subscriber that the
 * browser and interop tests run as processes. Found in their Debug output, built if only the project is there
 * (CI builds the solution before `npm test`).
 */
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { repoRoot } from "./broker.js";

export type Sample = "Herald.Client.Publish" | "Herald.Client.Subscribe";

/** The sample's DLL (`dotnet <dll> ...`), built with `dotnet build` if it is missing. */
export function sampleDll(sample: Sample): string {
  const project = `${repoRoot}clients/dotnet/samples/${sample}`;
  const dll = `${project}/bin/Debug/net10.0/${sample}.dll`;
  if (existsSync(dll)) return dll;
  assert.ok(
    existsSync(`${project}/${sample}.csproj`),
    `The .NET sample ${sample} is missing: no project in ${project} (clients/dotnet, the .NET client's samples). ` +
      `This test runs it as a process; build it with \`dotnet build clients/dotnet/samples/${sample}\`.`,
  );
  process.stderr.write(`[samples] ${dll} is missing: dotnet build ${project}\n`);
  const build = spawnSync("dotnet", ["build", project], { stdio: ["ignore", process.stderr, process.stderr], timeout: 600_000 });
  assert.ok(build.status === 0 && existsSync(dll), `dotnet build ${project} failed (exit ${build.status}); ${dll} is needed.`);
  return dll;
}

/**
 * Runs the sample publisher to its end (it exits once the broker confirmed): exit code and output; `env` is
 * added to this process's environment. Async,
 * so a subscriber in this process keeps polling meanwhile; killed after 60 s (a hang bound).
 */
export function runPublisher(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ status: number | null; output: string }> {
  const child = spawn("dotnet", [sampleDll("Herald.Client.Publish"), ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
  let output = "";
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const killer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  return new Promise((resolve) =>
    child.once("close", (status) => {
      clearTimeout(killer);
      resolve({ status, output });
    }),
  );
}

/**
 * The sample subscriber as a child process: its stdout lines parsed as JSON as they come
 * (`{"ready":true,...}` once subscribed, then one object per message), its exit awaited.
 */
export class SubscriberProcess {
  readonly lines: unknown[] = [];
  private stderr = "";
  private readonly waiters = new Set<() => void>();
  private closed = false;
  readonly exited: Promise<number | null>;

  private constructor(private readonly child: ChildProcess) {
    createInterface({ input: child.stdout! }).on("line", (line) => {
      this.lines.push(JSON.parse(line));
      this.wake();
    });
    child.stderr!.on("data", (chunk: Buffer) => (this.stderr += chunk.toString()));
    // "close", not "exit": its stdout is read to the end by then.
    this.exited = new Promise((resolve) => child.once("close", (code) => resolve(code)));
    child.once("close", () => {
      this.closed = true;
      this.wake();
    });
  }

  private wake(): void {
    for (const waiter of this.waiters) waiter();
    this.waiters.clear();
  }

  /** `env` is added to this process's environment (the OpenTelemetry variables, say). */
  static start(args: string[], env: NodeJS.ProcessEnv = {}): SubscriberProcess {
    const child = spawn("dotnet", [sampleDll("Herald.Client.Subscribe"), ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
    return new SubscriberProcess(child);
  }

  /** What it printed so far, for failure messages. */
  get output(): string {
    return `stdout: ${this.lines.map((l) => JSON.stringify(l)).join("\n")}\nstderr: ${this.stderr}`;
  }

  /** Resolves once `n` lines were printed; rejects if it ends first, or after `ms` (a hang bound, not a time measured). */
  async untilLines(n: number, ms: number): Promise<unknown[]> {
    const deadline = Date.now() + ms;
    while (this.lines.length < n) {
      if (this.closed) {
        throw new Error(`the subscriber exited after ${this.lines.length} of ${n} lines\n${this.output}`);
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`Timed out after ${ms} ms waiting for ${n} lines\n${this.output}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.add(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return this.lines.slice(0, n);
  }

  /** Kills it if it still runs (a failed test leaves no process behind). */
  kill(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
  }
}
