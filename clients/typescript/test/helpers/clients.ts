import { connect, type ConnectOptions, type HeraldClient } from "@herald/client";

/** Reconnect and connect timeouts short enough for tests. */
export const fast: ConnectOptions = { reconnectDelayMs: 100, maxReconnectDelayMs: 1000, connectTimeoutMs: 5000 };

/** The clients a test file opens (with `fast` timeouts), closed together when it ends. */
export class OpenClients {
  private readonly clients: HeraldClient[] = [];

  /** Connects to `url` with `fast` and `options`, and keeps the client to close. */
  async open(url: string, options: ConnectOptions = {}): Promise<HeraldClient> {
    return this.add(await connect(url, { ...fast, ...options }));
  }

  /** Keeps a client made elsewhere (createClient) to close. */
  add(client: HeraldClient): HeraldClient {
    this.clients.push(client);
    return client;
  }

  async closeAll(): Promise<void> {
    await Promise.all(this.clients.map((c) => c.close().catch(() => undefined)));
  }
}
