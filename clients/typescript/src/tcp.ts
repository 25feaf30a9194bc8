/**
 * The TCP transport (Node only): one socket to a port of the broker's range, speaking the binary frames
 * of protocol-spec/README.md. HELLO/WELCOME handshake, PONG for every PING, client PINGs when the broker is
 * quiet (a dead broker is noticed), PING/PONG as a flush barrier, writes coalesced per tick (cork).
 */
import type { Socket } from "node:net";
import { DEFAULT_MAX_HEADER_BYTES, DEFAULT_MAX_HEADERS, admitHeaders, type HeaderGrant } from "./headers.js";
import { HeraldError, ProtocolError, errorCodeName } from "./protocol/errors.js";
import {
  Capabilities,
  DEFAULT_MAX_FRAME,
  FrameReader,
  FrameType,
  PayloadFlags,
  SubscribeOptions,
  decodeFrame,
  encodeHello,
  encodePing,
  encodePong,
  encodePublish,
  encodeSubscribe,
  encodeUnsubscribe,
  type Frame,
  type HistoryPosition,
  type WelcomeFrame,
} from "./protocol/frames.js";
import { DEFAULT_MAX_TOPIC } from "./protocol/topics.js";
import { zstdDecompress } from "./protocol/zstd.js";
import { queueGroupsNotNegotiated, type PendingPublish, type Transport, type TransportEvents, type TransportInfo, type TransportOptions } from "./transport.js";
import { deferred, type Deferred } from "./util.js";

/** The first port of the broker's TCP range (spec §1). */
export const DEFAULT_TCP_PORT = 4502;
const DEFAULT_PING_INTERVAL_MS = 30_000;
const MAX_PINGS_OUTSTANDING = 2;

/** HELLO's capability bits for what the client asks for (spec §4.1; no_responders only with headers; queue_groups always). */
function helloCapabilities(options: Pick<TransportOptions, "compression" | "headers" | "noResponders">): number {
  let bits = (options.compression ? Capabilities.Zstd : Capabilities.None) | Capabilities.QueueGroups;
  if (options.headers) bits |= Capabilities.Headers | Capabilities.History | (options.noResponders ? Capabilities.NoResponders : 0);
  return bits;
}

function limitNumber(limits: Record<string, number | bigint>, key: string, fallback: number): number {
  const v = limits[key];
  if (v === undefined) return fallback;
  return typeof v === "bigint" ? Number.MAX_SAFE_INTEGER : v;
}

export class TcpTransport implements Transport {
  info: TransportInfo = { transport: "tcp", compression: false, headers: false, noResponders: false, limits: {} };
  maxTopic = DEFAULT_MAX_TOPIC;
  maxSubscriptions = Infinity;
  headerGrant: HeaderGrant = { headers: false, maxHeaders: 0, maxHeaderBytes: 0 };
  private maxFrame = DEFAULT_MAX_FRAME;
  private maxPayload = Infinity;
  private readonly reader = new FrameReader(DEFAULT_MAX_FRAME);
  private welcome: Deferred<WelcomeFrame> | null = deferred<WelcomeFrame>();
  private readonly pongWaiters: (Deferred<void> | null)[] = [];
  private pendingFlush: Promise<void> | null = null;
  private corked = false;
  private dead = false;
  private closing = false;
  private fatal: HeraldError | null = null;
  private readSinceTick = true;
  private pingsOutstanding = 0;
  private pingTimer: ReturnType<typeof setInterval> | undefined;
  /** Refreshes (a second HELLO, spec §4.1) waiting for their WELCOME, in order. */
  private readonly refreshWaiters: Deferred<WelcomeFrame>[] = [];

  private constructor(
    private readonly socket: Socket,
    private readonly address: string,
    private readonly events: TransportEvents,
    private readonly secure: boolean,
  ) {}

  /** Connects (`tcp://`, or `tls://` over TLS), sends HELLO and waits for WELCOME (or the broker's ERROR). */
  static async open(url: URL, options: TransportOptions, events: TransportEvents): Promise<TcpTransport> {
    const secure = url.protocol === "tls:";
    let net: typeof import("node:net");
    let tls: typeof import("node:tls") | undefined;
    try {
      net = await import("node:net");
      if (secure) tls = await import("node:tls");
    } catch (e) {
      throw new HeraldError(
        "ConnectFailed",
        "tcp:// and tls:// addresses need Node (node:net). In a browser, connect to the broker's HTTP port (http://host:8080) for long-poll.",
        { cause: e },
      );
    }
    const host = url.hostname.replace(/^\[(.*)\]$/, "$1") || "127.0.0.1";
    const port = url.port ? Number(url.port) : DEFAULT_TCP_PORT;
    const address = `${secure ? "tls" : "tcp"}://${url.host || host}`;
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
    const transport = new TcpTransport(socket, address, events, secure);
    await transport.handshake(options);
    return transport;
  }

  private async handshake(options: TransportOptions): Promise<void> {
    const welcome = this.welcome!;
    const timer = setTimeout(
      () => this.fail(new HeraldError("Timeout", `No WELCOME from ${this.address} within ${options.connectTimeoutMs} ms.`)),
      options.connectTimeoutMs,
    );
    // Plain Uint8Array views (not Buffer) so payloads look the same on every transport.
    this.socket.on("data", (chunk: Buffer) => this.onData(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength)));
    this.socket.on("error", (e: Error) => {
      const code = this.welcome ? "ConnectFailed" : "ConnectionLost";
      this.fail(new HeraldError(code, `${this.address}: ${e.message}`, { cause: e }));
    });
    this.socket.on("close", () =>
      this.fail(this.fatal ?? new HeraldError("ConnectionLost", `The connection to ${this.address} closed.`)),
    );
    // Over TLS, HELLO goes out once the handshake is done (the credential only ever travels encrypted).
    this.socket.once(this.secure ? "secureConnect" : "connect", () => {
      try {
        this.write(encodeHello(options.name, helloCapabilities(options), options.auth));
      } catch (e) {
        this.fail(new HeraldError("ConnectFailed", `HELLO could not be sent: ${(e as Error).message}`, { cause: e }));
      }
    });
    let frame: WelcomeFrame;
    try {
      frame = await welcome.promise;
    } finally {
      clearTimeout(timer);
    }
    const limits = frame.limits;
    this.maxFrame = limitNumber(limits, "max_frame", DEFAULT_MAX_FRAME);
    this.maxTopic = limitNumber(limits, "max_topic", DEFAULT_MAX_TOPIC);
    this.maxSubscriptions = limitNumber(limits, "max_subscriptions", Infinity);
    this.maxPayload = limitNumber(limits, "max_payload", Infinity);
    // A broker that advertises max_payload keeps every MESSAGE within max_frame (spec §4.2). One that does not
    // (before max_payload) could send a PUBLISH of max_frame, or a payload decompressed to max_frame, plus a sid.
    this.reader.maxFrame = this.maxPayload !== Infinity ? this.maxFrame : this.maxFrame + 2 * this.maxTopic + 64 * 1024;
    const headers = (frame.capabilities & Capabilities.Headers) !== 0;
    this.headerGrant = {
      headers,
      maxHeaders: limitNumber(limits, "max_headers", DEFAULT_MAX_HEADERS),
      maxHeaderBytes: limitNumber(limits, "max_header_bytes", DEFAULT_MAX_HEADER_BYTES),
    };
    this.info = {
      transport: "tcp",
      serverName: frame.serverName,
      connectionId: frame.connectionId,
      compression: (frame.capabilities & Capabilities.Zstd) !== 0,
      headers,
      noResponders: headers && (frame.capabilities & Capabilities.NoResponders) !== 0,
      history: headers && (frame.capabilities & Capabilities.History) !== 0,
      queueGroups: (frame.capabilities & Capabilities.QueueGroups) !== 0,
      limits,
      ...(frame.inboxPrefix === null ? {} : { inboxPrefix: frame.inboxPrefix }),
    };
    const interval = options.pingIntervalMs ?? limitNumber(limits, "ping_interval_ms", DEFAULT_PING_INTERVAL_MS);
    this.pingTimer = setInterval(() => this.keepAlive(), Math.max(100, interval));
    (this.pingTimer as { unref?: () => void }).unref?.();
  }

  private onData(chunk: Uint8Array): void {
    this.readSinceTick = true;
    this.pingsOutstanding = 0;
    this.reader.push(chunk);
    try {
      for (let body = this.reader.next(); body !== null && !this.dead; body = this.reader.next()) {
        this.onFrame(decodeFrame(body));
      }
    } catch (e) {
      this.fail(e instanceof HeraldError ? e : new HeraldError("ConnectionLost", String(e), { cause: e }));
    }
  }

  private onFrame(frame: Frame): void {
    switch (frame.type) {
      case FrameType.Message: {
        if (this.welcome) throw new ProtocolError("UnexpectedFrame", "MESSAGE before WELCOME.");
        let payload = frame.payload;
        if (frame.flags & PayloadFlags.Zstd) {
          if (!this.info.compression) throw new ProtocolError("UnexpectedFrame", "Compressed MESSAGE without Zstd negotiated.");
          try {
            payload = zstdDecompress(payload, this.maxFrame);
          } catch (e) {
            this.events.error(e as HeraldError);
            return;
          }
        }
        this.events.message(frame.sid, frame.topic, frame.replyTo, payload, frame.headers);
        return;
      }
      case FrameType.Ping:
        this.write(encodePong());
        return;
      case FrameType.Pong:
        this.pongWaiters.shift()?.resolve();
        return;
      case FrameType.Error: {
        const error = new HeraldError(errorCodeName(frame.code), `Broker: ${frame.message}`, {
          fatal: frame.fatal,
          count: frame.count,
          sid: frame.sid,
        });
        if (frame.fatal || this.welcome) {
          this.fatal = error;
          this.fail(error); // the broker writes nothing after a fatal ERROR and closes
        } else if (frame.sid !== 0) {
          this.events.revoked(frame.sid, error);
        } else {
          this.events.error(error);
        }
        return;
      }
      case FrameType.Welcome:
        if (this.welcome) {
          this.welcome.resolve(frame);
          this.welcome = null;
          return;
        }
        if (this.refreshWaiters.length > 0) {
          // The answer to a refresh (spec §4.1).
          this.info = {
            ...this.info,
            serverName: frame.serverName,
            connectionId: frame.connectionId,
            ...(frame.inboxPrefix === null ? {} : { inboxPrefix: frame.inboxPrefix }),
          };
          this.refreshWaiters.shift()!.resolve(frame);
          return;
        }
        throw new ProtocolError("UnexpectedFrame", "A second WELCOME.");
      default:
        throw new ProtocolError("UnexpectedFrame", `The broker sent a client frame (type ${frame.type}).`);
    }
  }

  private keepAlive(): void {
    if (this.dead) return;
    if (this.readSinceTick) {
      this.readSinceTick = false;
      return;
    }
    if (this.pingsOutstanding >= MAX_PINGS_OUTSTANDING) {
      this.fail(new HeraldError("StaleConnection", `${this.address} answered none of ${MAX_PINGS_OUTSTANDING} PINGs.`));
      return;
    }
    this.pingsOutstanding++;
    this.pongWaiters.push(null);
    this.write(encodePing());
  }

  /** Writes a frame; writes of one tick go out together. Returns false when the socket wants a drain. */
  private write(frame: Uint8Array): boolean {
    if (this.dead) throw new HeraldError("ConnectionLost", `The connection to ${this.address} is closed.`);
    if (!this.corked) {
      this.corked = true;
      this.socket.cork();
      process.nextTick(() => {
        this.corked = false;
        this.socket.uncork();
      });
    }
    return this.socket.write(frame);
  }

  private fail(error: HeraldError): void {
    if (this.dead) return;
    this.dead = true;
    if (this.pingTimer) clearInterval(this.pingTimer);
    this.socket.destroy();
    for (const waiter of this.pongWaiters.splice(0)) waiter?.reject(error);
    for (const waiter of this.refreshWaiters.splice(0)) waiter.reject(error);
    if (this.welcome) {
      this.welcome.reject(error.code === "ConnectionLost" ? new HeraldError("ConnectFailed", error.message, { cause: error }) : error);
      this.welcome = null;
      return;
    }
    if (!this.closing) this.events.lost(error);
  }

  /**
   * Sends HELLO again with a fresh credential (spec §4.1, authentication on) and resolves on the new
   * WELCOME. A refused credential is a fatal `AuthenticationFailed`: the connection is lost with it.
   */
  async refresh(options: Pick<TransportOptions, "name" | "compression" | "headers" | "noResponders">, auth: string): Promise<void> {
    if (this.dead) throw new HeraldError("ConnectionLost", "Not connected.");
    const d = deferred<WelcomeFrame>();
    this.refreshWaiters.push(d);
    this.write(encodeHello(options.name, helloCapabilities(options), auth));
    await d.promise;
  }

  subscribe(sid: number, pattern: string, noEcho: boolean, since: HistoryPosition | null = null, queue: string | null = null): Promise<void> {
    if (this.dead) return Promise.reject(new HeraldError("ConnectionLost", "Not connected."));
    // A queue only when granted (an older broker would take it as a plain subscription), never with since:
    // from a client that sends it anyway, either is a fatal MalformedFrame (spec §4.3).
    if (queue && this.info.queueGroups !== true) return Promise.reject(queueGroupsNotNegotiated(pattern, queue));
    // since only with headers granted: from any other client it is a fatal MalformedFrame (spec §4.3).
    this.write(encodeSubscribe(sid, pattern, noEcho ? SubscribeOptions.NoEcho : SubscribeOptions.None, this.info.history === true ? since : null, queue));
    return this.flush();
  }

  unsubscribe(sid: number): Promise<void> {
    if (!this.dead) this.write(encodeUnsubscribe(sid));
    return Promise.resolve();
  }

  publish(p: PendingPublish): boolean {
    if (this.dead) return false;
    const headers = admitHeaders(p, this.headerGrant);
    if (headers === null) return true;
    // With a header block, payload and block together are held to max_payload (spec §4.5).
    const size = p.payload.length + headers.bytes;
    if (size > this.maxPayload) {
      const what = headers.pairs === undefined ? `A payload of ${size} bytes` : `A payload and header block of ${size} bytes`;
      p.reject(new HeraldError("FrameTooLarge", `${what} is over the broker's max_payload of ${this.maxPayload} (spec §4.2, §4.5).`));
      return true;
    }
    const frame = encodePublish(p.topic, p.replyTo, PayloadFlags.None, p.payload, headers.pairs);
    if (frame.length - 4 > this.maxFrame) {
      p.reject(
        new HeraldError("FrameTooLarge", `PUBLISH of ${frame.length - 4} bytes is over the broker's max_frame of ${this.maxFrame}.`),
      );
      return true;
    }
    if (this.write(frame)) {
      p.resolve();
    } else {
      // Backpressure: the caller's promise waits until the socket has taken what it buffered.
      const onDrain = (): void => {
        this.socket.off("close", onClose);
        p.resolve();
      };
      const onClose = (): void => {
        this.socket.off("drain", onDrain);
        p.reject(new HeraldError("ConnectionLost", `The connection to ${this.address} closed while publishing.`));
      };
      this.socket.once("drain", onDrain);
      this.socket.once("close", onClose);
    }
    return true;
  }

  flush(): Promise<void> {
    if (this.dead) return Promise.reject(new HeraldError("ConnectionLost", "Not connected."));
    if (!this.pendingFlush) {
      const d = deferred<void>();
      this.pendingFlush = d.promise;
      queueMicrotask(() => {
        this.pendingFlush = null;
        if (this.dead) return d.reject(new HeraldError("ConnectionLost", "Not connected."));
        this.pongWaiters.push(d);
        this.write(encodePing());
      });
    }
    return this.pendingFlush;
  }

  takeUnsent(): PendingPublish[] {
    return [];
  }

  async close(): Promise<void> {
    this.closing = true;
    if (this.dead) return;
    if (this.pingTimer) clearInterval(this.pingTimer);
    const closed = new Promise<void>((resolve) => {
      this.socket.once("close", () => resolve());
      const timer = setTimeout(resolve, 1000);
      (timer as { unref?: () => void }).unref?.();
    });
    this.socket.end(); // sends what is buffered, then FIN
    await closed;
    this.fail(new HeraldError("Closed", "The client closed the connection."));
  }
}
