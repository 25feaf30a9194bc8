/**
 * The TCP transport (Node only): one socket (plain, or TLS for `tls://`) to a port of the broker's range
 * (spec §1), carrying the {@link FrameSession}'s frames. It moves bytes; the protocol is the session's.
 */
import type { Socket } from "node:net";
import { HeraldError } from "./protocol/errors.js";
import { FrameSession, type FrameLink, type FrameLinkEvents } from "./session.js";
import type { TransportEvents, TransportOptions } from "./transport.js";

/** The first port of the broker's TCP range (spec §1). */
export const DEFAULT_TCP_PORT = 4502;

/** A socket as a session's link: writes of one batch corked together, `drain` for backpressure. */
class TcpLink implements FrameLink {
  private readonly closed: Promise<void>;

  constructor(
    private readonly socket: Socket,
    readonly address: string,
    secure: boolean,
    events: FrameLinkEvents,
  ) {
    this.closed = new Promise((resolve) => socket.once("close", () => resolve()));
    // Plain Uint8Array views (not Buffer) so payloads look the same on every transport.
    socket.on("data", (chunk: Buffer) => events.received(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength)));
    socket.on("drain", () => events.drained());
    socket.on("error", (e: Error) => events.failed(e));
    socket.on("close", () => events.closed(null));
    // Over TLS, HELLO goes out once the handshake is done (the credential only ever travels encrypted).
    socket.once(secure ? "secureConnect" : "connect", () => events.opened());
  }

  get buffered(): number {
    return this.socket.writableLength;
  }

  send(frames: readonly Uint8Array[]): boolean {
    if (frames.length === 1) return this.socket.write(frames[0]!);
    this.socket.cork();
    let underMark = true;
    for (const frame of frames) underMark = this.socket.write(frame);
    this.socket.uncork();
    return underMark;
  }

  async end(): Promise<void> {
    const timer = setTimeout(() => this.socket.destroy(), 1000);
    this.socket.end(); // sends what is buffered, then FIN
    await this.closed;
    clearTimeout(timer);
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** Connects (`tcp://`, or `tls://` over TLS), sends HELLO and waits for WELCOME (or the broker's ERROR). */
export async function openTcp(url: URL, options: TransportOptions, events: TransportEvents): Promise<FrameSession> {
  const secure = url.protocol === "tls:";
  let net: typeof import("node:net");
  let tls: typeof import("node:tls") | undefined;
  try {
    net = await import("node:net");
    if (secure) tls = await import("node:tls");
  } catch (e) {
    throw new HeraldError(
      "ConnectFailed",
      "tcp:// and tls:// addresses need Node (node:net). In a browser, connect to the broker's HTTP port (http://host:8080): WebSocket, or long-poll.",
      { cause: e },
    );
  }
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1") || "127.0.0.1";
  const port = url.port ? Number(url.port) : DEFAULT_TCP_PORT;
  const address = `${secure ? "tls" : "tcp"}://${url.host || host}`;
  return FrameSession.open(
    "tcp",
    (linkEvents) => {
      const socket = tls
        ? tls.connect({
            host,
            port,
            // SNI takes a host name only (not an IP address); the certificate is checked against `host` either way.
            servername: net.isIP(host) ? undefined : host,
            ca: options.ca === undefined ? undefined : typeof options.ca === "string" ? options.ca : Buffer.from(options.ca),
          })
        : net.createConnection({ host, port });
      socket.setNoDelay(true);
      socket.setKeepAlive(true, 30_000);
      return new TcpLink(socket, address, secure, linkEvents);
    },
    options,
    events,
  );
}
