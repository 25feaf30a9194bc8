/**
 * Starts the real Herald broker (the Debug build of broker/src/Herald.Broker) as a child process on free
 * loopback ports, waits until it takes connections, and stops or restarts it.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { fileURLToPath } from "node:url";

/** The repository root (this file is clients/typescript/build-test/helpers/broker.js once compiled). */
export const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
export const brokerProject = `${repoRoot}broker/src/Herald.Broker`;
export const brokerDll = `${brokerProject}/bin/Debug/net10.0/Herald.Broker.dll`;

/**
 * A TCP port free now on 127.0.0.1, probed by listening on it: a random one in 10000-19999, below the kernel's
 * ephemeral range (32768-60999 here), so no outgoing connection of another test process takes it between this
 * probe and the broker's bind (port 0 would hand out an ephemeral one), and away from the .NET suites' 20000-32767.
 */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = 10_000 + Math.floor(Math.random() * 10_000);
    if (await canListen(port)) return port;
  }
  throw new Error("No free port found in 10000-19999.");
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** Builds the broker if its DLL is missing (CI builds the solution before `npm test`). */
export function ensureBrokerBuilt(): void {
  if (existsSync(brokerDll)) return;
  process.stderr.write(`[broker] ${brokerDll} is missing: dotnet build ${brokerProject}\n`);
  const result = spawnSync("dotnet", ["build", brokerProject], { stdio: ["ignore", process.stderr, process.stderr], timeout: 600_000 });
  if (result.status !== 0 || !existsSync(brokerDll)) {
    throw new Error(`dotnet build ${brokerProject} failed (exit ${result.status}); the broker is needed for these tests.`);
  }
}

// A test process that ends leaves no broker behind.
const children = new Set<ChildProcess>();
function killChildren(): void {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
}
process.on("exit", killChildren);
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    killChildren();
    process.exit(1);
  });
}

export class Broker {
  private child: ChildProcess | null = null;
  private output: string[] = [];
  private exited: Promise<void> = Promise.resolve();

  private constructor(
    readonly tcpPort: number,
    readonly httpPort: number,
    readonly monitoringPort: number,
    private readonly extraArgs: string[],
  ) {}

  get tcpUrl(): string {
    return `tcp://127.0.0.1:${this.tcpPort}`;
  }

  /** The HTTP port: `http://` alone tries the WebSocket first, then long-poll (the client's `transport` option). */
  get httpUrl(): string {
    return `http://127.0.0.1:${this.httpPort}`;
  }

  /** The WebSocket endpoint on the HTTP port (spec §1). */
  get wsUrl(): string {
    return `ws://127.0.0.1:${this.httpPort}/ws`;
  }

  /** The monitoring listener (/varz, /metrics, probes): never on the client HTTP port. */
  get monitoringUrl(): string {
    return `http://127.0.0.1:${this.monitoringPort}`;
  }

  /** The broker's last lines of output (for failure messages). */
  get log(): string {
    return this.output.join("");
  }

  static async start(extraArgs: string[] = []): Promise<Broker> {
    ensureBrokerBuilt();
    // Another process may still bind a probed port before the broker does (the suites run side by side): the
    // broker then exits saying the port is in use, and it starts again on other ports.
    for (let attempt = 1; ; attempt++) {
      const broker = new Broker(await freePort(), await freePort(), await freePort(), extraArgs);
      try {
        await broker.launch();
        return broker;
      } catch (error) {
        if (attempt >= 5 || !/already in use/.test(broker.log)) throw error;
      }
    }
  }

  private async launch(): Promise<void> {
    const args = [
      brokerDll,
      "--Herald:Tcp:Host=127.0.0.1",
      `--Herald:Tcp:PortRangeStart=${this.tcpPort}`,
      `--Herald:Tcp:PortRangeEnd=${this.tcpPort}`,
      "--Herald:Http:Host=127.0.0.1",
      `--Herald:Http:Port=${this.httpPort}`,
      "--Herald:Monitoring:Host=127.0.0.1",
      `--Herald:Monitoring:Port=${this.monitoringPort}`,
      "--Herald:Policy:Port=-1",
      ...this.extraArgs,
    ];
    const child = spawn("dotnet", args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, DOTNET_NOLOGO: "1" } });
    this.child = child;
    children.add(child);
    child.once("exit", () => children.delete(child));
    const keep = (chunk: Buffer): void => {
      this.output.push(chunk.toString());
      if (this.output.length > 200) this.output.splice(0, this.output.length - 200);
    };
    child.stdout!.on("data", keep);
    child.stderr!.on("data", keep);
    this.exited = new Promise((resolve) => child.once("exit", () => resolve()));
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`The broker exited with ${child.exitCode} while starting:\n${this.log}`);
      if ((await canConnect(this.tcpPort)) && (await canConnect(this.httpPort))) return;
      if (Date.now() > deadline) {
        await this.stop();
        throw new Error(`The broker did not open ports ${this.tcpPort}/${this.httpPort} within 60 s:\n${this.log}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Stops the broker (SIGTERM: graceful; SIGKILL after 10 s). */
  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGTERM");
    const killer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await this.exited;
    clearTimeout(killer);
    this.child = null;
  }

  /** Stops the broker and starts a new process on the same ports. */
  async restart(): Promise<void> {
    await this.stop();
    await this.launch();
  }
}
