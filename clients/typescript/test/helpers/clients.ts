import { connect, type ConnectOptions, type HeraldClient } from "@herald/client";
import type { Broker } from "./broker.js";

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

/** The transports a behaviour runs over: the two over frames (TCP, WebSocket) and long-poll. */
export type Kind = "tcp" | "websocket" | "longpoll";
export const KINDS: readonly Kind[] = ["tcp", "websocket", "longpoll"];

/**
 * How to reach `broker` over `kind`: TCP and WebSocket by their own addresses (`tcp://`, `ws://.../ws`),
 * long-poll by the HTTP address with `transport: "longpoll"` (alone, an `http://` address tries the
 * WebSocket first).
 */
export function reach(broker: Broker, kind: Kind): { url: string; options: ConnectOptions } {
  switch (kind) {
    case "tcp":
      return { url: broker.tcpUrl, options: {} };
    case "websocket":
      return { url: broker.wsUrl, options: {} };
    case "longpoll":
      return { url: broker.httpUrl, options: { transport: "longpoll" } };
  }
}
