/**
 * The WebSocket transport (browsers and Node): `ws://host:8080/ws` with the subprotocol `herald.v1`, binary
 * messages carrying the {@link FrameSession}'s frames exactly as TCP does (protocol-spec/README.md §1). It
 * moves bytes; the protocol is the session's.
 *
 * The WebSocket is the runtime's (browsers, Node 22+, Deno, Bun), else the `ws` package's (Node 20 and 21),
 * imported only then: a browser build never loads it.
 */
import { HeraldError } from "./protocol/errors.js";
import { FrameSession, type FrameLink, type FrameLinkEvents } from "./session.js";
import type { TransportEvents, TransportOptions } from "./transport.js";
import { unrefTimer } from "./util.js";

/** The broker's WebSocket endpoint on its HTTP port, and the subprotocol it speaks there (spec §1). */
export const WEBSOCKET_PATH = "ws";
export const SUBPROTOCOL = "herald.v1";

/**
 * Bytes a WebSocket may hold unsent before a publication waits for it to drain (the broker's own outbound
 * pipe pauses at the same size). A WebSocket has no drain event: while someone waits, `bufferedAmount` is
 * looked at every {@link DRAIN_CHECK_MS}.
 */
const HIGH_WATER_MARK = 64 * 1024;
const DRAIN_CHECK_MS = 10;
const OPEN = 1;

/**
 * The WebSocket could not be opened (no WebSocket in this runtime, the upgrade refused or never answered,
 * nothing listening): a `ConnectFailed` after which `transport: "auto"` falls back to long-poll. A failure
 * after the upgrade (the broker's ERROR to HELLO, a lost connection) is not one.
 */
export class WebSocketNotOpened extends HeraldError {
  constructor(message: string, cause?: unknown) {
    super("ConnectFailed", message, { cause });
  }
}

/**
 * The WebSocket address of a broker address: `ws(s)://` as written (`/ws` when it names no path);
 * `http(s)://host:port/prefix/` gives `ws(s)://host:port/prefix/ws`, beside long-poll's `/prefix/poll/`.
 */
export function webSocketAddress(url: URL): string {
  const ws = new URL(url.href);
  ws.hash = "";
  if (url.protocol === "http:" || url.protocol === "https:") {
    ws.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    ws.pathname = `${url.pathname.endsWith("/") ? url.pathname : `${url.pathname}/`}${WEBSOCKET_PATH}`;
    ws.search = "";
  } else if (ws.pathname === "/" || ws.pathname === "") {
    ws.pathname = `/${WEBSOCKET_PATH}`;
  }
  return ws.href;
}

type CreateWebSocket = (address: string) => WebSocket;

/** How to make a WebSocket here: the runtime's, else the `ws` package's; none is a {@link WebSocketNotOpened}. */
async function webSocketMaker(options: TransportOptions): Promise<CreateWebSocket> {
  const native = (globalThis as { WebSocket?: typeof WebSocket }).WebSocket;
  if (native !== undefined) return (address) => new native(address, SUBPROTOCOL);
  let ws: typeof import("ws");
  try {
    ws = await import("ws");
  } catch (e) {
    throw new WebSocketNotOpened(
      "This runtime has no WebSocket (Node before 22): install the `ws` package (npm install ws) for WebSocket, or connect with transport: \"longpoll\".",
      e,
    );
  }
  const Client = ws.WebSocket;
  return (address) =>
    // `ws` implements the WHATWG interface used here (binaryType "arraybuffer", the on* handlers, send,
    // close, bufferedAmount, readyState). The broker never takes permessage-deflate (payloads are Zstd).
    new Client(address, SUBPROTOCOL, {
      perMessageDeflate: false,
      ...(options.ca === undefined ? {} : { ca: typeof options.ca === "string" ? options.ca : Buffer.from(options.ca) }),
    }) as unknown as WebSocket;
}

/** A WebSocket as a session's link: one binary message per batch; `bufferedAmount` for backpressure. */
class WebSocketLink implements FrameLink {
  /** Whether the upgrade succeeded (before it, a failure lets `auto` fall back to long-poll). */
  opened = false;
  private lastError: string | null = null;
  private drainTimer: ReturnType<typeof setInterval> | undefined;
  private readonly closed: Promise<void>;

  constructor(
    private readonly socket: WebSocket,
    readonly address: string,
    private readonly events: FrameLinkEvents,
  ) {
    socket.binaryType = "arraybuffer";
    let markClosed!: () => void;
    this.closed = new Promise((resolve) => (markClosed = resolve));
    socket.onopen = () => {
      this.opened = true;
      events.opened();
    };
    socket.onmessage = (event: MessageEvent) => {
      const data: unknown = event.data;
      if (data instanceof ArrayBuffer) {
        events.received(new Uint8Array(data));
      } else if (ArrayBuffer.isView(data)) {
        events.received(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      } else {
        events.failed(new HeraldError("UnexpectedFrame", `${address} sent a text message: Herald frames travel in binary messages (spec §1).`));
      }
    };
    // A browser tells nothing more than that an error happened; `ws` says what (say, "Unexpected server
    // response: 404"). The close that always follows reports it.
    socket.onerror = (event: Event) => {
      const message = (event as Event & { message?: unknown }).message;
      this.lastError = typeof message === "string" && message !== "" ? message : "WebSocket error";
    };
    socket.onclose = (event: CloseEvent) => {
      this.stopDrainCheck();
      markClosed();
      const how = `WebSocket closed with ${event.code}${event.reason ? ` (${event.reason})` : ""}`;
      events.closed(this.lastError === null ? how : `${this.lastError}; ${how}`);
    };
  }

  get buffered(): number {
    return this.socket.bufferedAmount;
  }

  send(frames: readonly Uint8Array[]): boolean {
    // Closing: nothing more goes out. The close event follows, and the session fails what waits for a drain.
    if (this.socket.readyState !== OPEN) return false;
    this.socket.send(frames.length === 1 ? frames[0]! : concat(frames));
    if (this.socket.bufferedAmount <= HIGH_WATER_MARK) return true;
    this.startDrainCheck();
    return false;
  }

  private startDrainCheck(): void {
    if (this.drainTimer !== undefined) return;
    this.drainTimer = setInterval(() => {
      if (this.socket.bufferedAmount > HIGH_WATER_MARK) return;
      this.stopDrainCheck();
      this.events.drained();
    }, DRAIN_CHECK_MS);
    unrefTimer(this.drainTimer);
  }

  private stopDrainCheck(): void {
    if (this.drainTimer === undefined) return;
    clearInterval(this.drainTimer);
    this.drainTimer = undefined;
  }

  async end(): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const bound = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        this.destroy();
        resolve();
      }, 1000);
    });
    this.socket.close(1000);
    await Promise.race([this.closed, bound]);
    clearTimeout(timer);
  }

  destroy(): void {
    this.stopDrainCheck();
    // `ws` can drop the connection at once; a browser's WebSocket can only start its closing handshake.
    const terminate = (this.socket as WebSocket & { terminate?: () => void }).terminate;
    if (typeof terminate === "function") terminate.call(this.socket);
    else this.socket.close(1000);
  }
}

function concat(frames: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(frames.reduce((n, f) => n + f.length, 0));
  let at = 0;
  for (const frame of frames) {
    out.set(frame, at);
    at += frame.length;
  }
  return out;
}

/**
 * Opens the WebSocket (`ws://`, `wss://`, or the `/ws` of an `http(s)://` address), sends HELLO once it is
 * open and waits for WELCOME. Rejects with a {@link WebSocketNotOpened} when it never opened.
 */
export async function openWebSocket(url: URL, options: TransportOptions, events: TransportEvents): Promise<FrameSession> {
  const address = webSocketAddress(url);
  const create = await webSocketMaker(options);
  let link: WebSocketLink | undefined;
  try {
    return await FrameSession.open("websocket", (linkEvents) => (link = new WebSocketLink(create(address), address, linkEvents)), options, events);
  } catch (e) {
    if (link?.opened === true) throw e;
    throw new WebSocketNotOpened(`The WebSocket ${address} did not open: ${(e as Error)?.message ?? e}`, e);
  }
}
