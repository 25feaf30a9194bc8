/**
 * The protocol session over a byte stream of frames (protocol-spec/README.md §2-§13): the one core that TCP
 * and WebSocket share, as the broker runs one FrameSession for both. A transport only opens a
 * {@link FrameLink} (a socket, a WebSocket) that moves bytes; everything Herald is here: HELLO/WELCOME and
 * the limits it announces, PONG for every PING, client PINGs when the broker is quiet (a dead broker is
 * noticed), PING/PONG as a flush barrier, Zstd, deltas, headers, history `since`, queue groups, presence (HELLO `info`,
 * the SUBSCRIBE bits, PRESENCE and its replies), credential refresh, ERROR frames, and the outgoing batch with
 * its backpressure.
 *
 * Outgoing frames written in one turn of the event loop go to the link together (one corked TCP write, one
 * WebSocket message of at most `max_frame` + 4 bytes, spec §1). A publication resolves once the link has
 * taken it and holds less than its own mark; above the mark it waits for the link to drain, and one that
 * would take what the link holds past `maxBufferBytes` is refused with `BufferFull`: a slow network never
 * grows memory without bound.
 */
import { DEFAULT_MAX_HEADER_BYTES, DEFAULT_MAX_HEADERS, admitHeaders, type HeaderGrant } from "./headers.js";
import { HeraldError, ProtocolError, errorCodeName } from "./protocol/errors.js";
import {
  Capabilities,
  DEFAULT_MAX_FRAME,
  FrameReader,
  FrameType,
  LENGTH_PREFIX_SIZE,
  PROTOCOL_VERSION,
  PayloadFlags,
  SubscribeOptions,
  decodeFrame,
  encodeHello,
  encodePing,
  encodePresence,
  encodePong,
  encodePublish,
  encodeSubscribe,
  encodeUnsubscribe,
  type Frame,
  type HistoryPosition,
  type PresenceReplyFrame,
  type WelcomeFrame,
} from "./protocol/frames.js";
import { DeltaBases } from "./deltas.js";
import { presenceNotNegotiated } from "./presence.js";
import { DEFAULT_MAX_TOPIC } from "./protocol/topics.js";
import { zstdDecompress } from "./protocol/zstd.js";
import { queueGroupsNotNegotiated, type PendingPublish, type Transport, type TransportEvents, type TransportInfo, type TransportOptions } from "./transport.js";
import { deferred, unrefTimer, type Deferred } from "./util.js";

const DEFAULT_PING_INTERVAL_MS = 30_000;
const MAX_PINGS_OUTSTANDING = 2;

/**
 * A byte stream a {@link FrameSession} speaks over: a TCP (or TLS) socket, a WebSocket. It moves bytes and
 * reports what happens to it; it knows nothing of frames beyond sending the batches it is given whole.
 */
export interface FrameLink {
  /** The address, for messages: `tcp://host:4502`, `ws://host:8080/ws`. */
  readonly address: string;
  /** Bytes given to `send` that are not on the network yet (TCP `writableLength`, WebSocket `bufferedAmount`). */
  readonly buffered: number;
  /**
   * Sends whole frames together (TCP: one corked write; WebSocket: one binary message). Returns false when
   * the link now holds more than its mark: {@link FrameLinkEvents.drained} follows once it holds less.
   */
  send(frames: readonly Uint8Array[]): boolean;
  /** Ends after what was sent (TCP FIN, WebSocket close 1000); resolves once closed, or after a short bound. */
  end(): Promise<void>;
  /** Drops the connection at once. */
  destroy(): void;
}

/** What a link reports to its session (each after the link was made; none after `closed`). */
export interface FrameLinkEvents {
  /** Connected (TCP connect, TLS handshake, WebSocket upgrade): HELLO may go out. */
  opened(): void;
  /** Bytes from the broker, in order (frames may span chunks, spec §1 and §2). */
  received(bytes: Uint8Array): void;
  /** The link holds less than its mark again, after a `send` that returned false. */
  drained(): void;
  /** A failure (a socket error, a refused upgrade, a text WebSocket message): the link is closing. */
  failed(error: Error): void;
  /** The link is closed; `detail` says how when the medium tells (a WebSocket close code and reason). */
  closed(detail: string | null): void;
}

/**
 * HELLO's capability bits for what the client asks for (spec §4.1; no_responders, history and presence only
 * with headers; queue_groups always).
 */
function helloCapabilities(options: Pick<TransportOptions, "compression" | "deltas" | "headers" | "noResponders" | "serverSubscriptions">): number {
  let bits = (options.compression ? Capabilities.Zstd : Capabilities.None) | Capabilities.QueueGroups;
  if (options.deltas === true) bits |= Capabilities.Deltas;
  if (options.serverSubscriptions === true) bits |= Capabilities.ServerSubscriptions;
  if (options.headers) {
    bits |= Capabilities.Headers | Capabilities.History | Capabilities.Presence | (options.noResponders ? Capabilities.NoResponders : 0);
  }
  return bits;
}

/** HELLO for these options: with the client info as its sixth element when there is one (spec §4.1, §15). */
function hello(options: Pick<TransportOptions, "name" | "compression" | "deltas" | "headers" | "noResponders" | "info" | "serverSubscriptions">, auth: string | null): Uint8Array {
  return encodeHello(options.name, helloCapabilities(options), auth, PROTOCOL_VERSION, options.info ?? undefined);
}

/** SUBSCRIBE options that need the presence capability (spec §4.3, §15.1). */
const PRESENCE_OPTIONS = SubscribeOptions.Join | SubscribeOptions.PresenceEvents;

/** A PRESENCE sent and not answered yet (spec §15.3). */
interface PendingPresence {
  reply: Deferred<PresenceReplyFrame>;
  timer: ReturnType<typeof setTimeout>;
}

function limitNumber(limits: Record<string, number | bigint>, key: string, fallback: number): number {
  const v = limits[key];
  if (v === undefined) return fallback;
  return typeof v === "bigint" ? Number.MAX_SAFE_INTEGER : v;
}

/**
 * One connection's protocol session (spec §6): a {@link Transport} over any {@link FrameLink}.
 * Single-threaded like all JavaScript: the link's events, the timers and the client's calls interleave only
 * between turns, so no state here needs a lock.
 */
export class FrameSession implements Transport {
  info: TransportInfo;
  maxTopic = DEFAULT_MAX_TOPIC;
  maxSubscriptions = Infinity;
  headerGrant: HeaderGrant = { headers: false, maxHeaders: 0, maxHeaderBytes: 0 };
  private link!: FrameLink;
  private maxFrame = DEFAULT_MAX_FRAME;
  private maxPayload = Infinity;
  private readonly reader = new FrameReader(DEFAULT_MAX_FRAME);
  private welcome: Deferred<WelcomeFrame> | null = deferred<WelcomeFrame>();
  private readonly pongWaiters: (Deferred<void> | null)[] = [];
  private pendingFlush: Promise<void> | null = null;
  private dead = false;
  private closing = false;
  private fatal: HeraldError | null = null;
  private readSinceTick = true;
  private pingsOutstanding = 0;
  private pingTimer: ReturnType<typeof setInterval> | undefined;
  /** Refreshes (a second HELLO, spec §4.1) waiting for their WELCOME, in order. */
  private readonly refreshWaiters: Deferred<WelcomeFrame>[] = [];
  /** Frames written this turn, sent together at its end; the publications among them, in order. */
  private outbox: Uint8Array[] = [];
  private outboxBytes = 0;
  private outboxPublishes: PendingPublish[] = [];
  private outboxScheduled = false;
  /** Publications the link has taken while it held more than its mark: resolved when it drains. */
  private draining: PendingPublish[] = [];
  /** PRESENCE queries waiting for their PRESENCE_REPLY, by request id (answers may come in any order, spec §15.3). */
  private readonly presenceQueries = new Map<number, PendingPresence>();
  /** The last payload of each subscription that receives deltas (spec §11.2); made once WELCOME granted them. */
  private deltaBases: DeltaBases | null = null;
  private nextPresenceId = 0;

  private constructor(
    private readonly kind: "tcp" | "websocket",
    private readonly options: TransportOptions,
    private readonly events: TransportEvents,
  ) {
    this.info = { transport: kind, compression: false, headers: false, noResponders: false, limits: {} };
  }

  /**
   * Makes a link with `connect` (given the session's link events), sends HELLO once it is open and resolves
   * on WELCOME; rejects with the broker's ERROR, `ConnectFailed`, or `Timeout` after `connectTimeoutMs`.
   */
  static async open(
    kind: "tcp" | "websocket",
    connect: (events: FrameLinkEvents) => FrameLink,
    options: TransportOptions,
    events: TransportEvents,
  ): Promise<FrameSession> {
    const session = new FrameSession(kind, options, events);
    session.link = connect({
      opened: () => session.onOpened(),
      received: (bytes) => session.onData(bytes),
      drained: () => session.onDrained(),
      failed: (error) => session.onFailed(error),
      closed: (detail) => session.onClosed(detail),
    });
    await session.handshake();
    return session;
  }

  private get address(): string {
    return this.link.address;
  }

  private async handshake(): Promise<void> {
    const welcome = this.welcome!;
    const timer = setTimeout(
      () => this.fail(new HeraldError("Timeout", `No WELCOME from ${this.address} within ${this.options.connectTimeoutMs} ms.`)),
      this.options.connectTimeoutMs,
    );
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
      transport: this.kind,
      serverName: frame.serverName,
      connectionId: frame.connectionId,
      compression: (frame.capabilities & Capabilities.Zstd) !== 0,
      headers,
      noResponders: headers && (frame.capabilities & Capabilities.NoResponders) !== 0,
      history: headers && (frame.capabilities & Capabilities.History) !== 0,
      queueGroups: (frame.capabilities & Capabilities.QueueGroups) !== 0,
      presence: headers && (frame.capabilities & Capabilities.Presence) !== 0,
      deltas: (frame.capabilities & Capabilities.Deltas) !== 0,
      limits,
      ...(frame.inboxPrefix === null ? {} : { inboxPrefix: frame.inboxPrefix }),
    };
    if (this.info.deltas) this.deltaBases = new DeltaBases(this.maxFrame);
    const interval = this.options.pingIntervalMs ?? limitNumber(limits, "ping_interval_ms", DEFAULT_PING_INTERVAL_MS);
    this.pingTimer = setInterval(() => this.keepAlive(), Math.max(100, interval));
    unrefTimer(this.pingTimer);
  }

  // ---------------------------------------------------------------------------------------------------
  // What the link reports

  private onOpened(): void {
    try {
      this.write(hello(this.options, this.options.auth));
    } catch (e) {
      this.fail(new HeraldError("ConnectFailed", `HELLO could not be sent: ${(e as Error).message}`, { cause: e }));
    }
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

  private onFailed(error: Error): void {
    if (error instanceof HeraldError) {
      this.fail(error);
      return;
    }
    const code = this.welcome ? "ConnectFailed" : "ConnectionLost";
    this.fail(new HeraldError(code, `${this.address}: ${error.message}`, { cause: error }));
  }

  private onClosed(detail: string | null): void {
    this.fail(this.fatal ?? new HeraldError("ConnectionLost", `The connection to ${this.address} closed${detail ? `: ${detail}` : ""}.`));
  }

  private onDrained(): void {
    for (const p of this.draining.splice(0)) p.resolve();
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
        const delta = (frame.flags & PayloadFlags.Delta) !== 0;
        if (this.deltaBases !== null) {
          const taken = this.deltaBases.take(frame.sid, delta, payload);
          if (taken.payload === null) {
            if (taken.failure !== null) this.events.deltaFailed(frame.sid, taken.failure);
            return;
          }
          payload = taken.payload;
        } else if (delta) {
          throw new ProtocolError("UnexpectedFrame", "A delta MESSAGE without deltas negotiated (spec §11.2).");
        }
        this.events.message(frame.sid, frame.topic, frame.replyTo, payload, frame.headers, delta);
        return;
      }
      case FrameType.Ping:
        this.write(encodePong());
        return;
      case FrameType.Pong:
        this.pongWaiters.shift()?.resolve();
        return;
      case FrameType.PresenceReply: {
        if (this.welcome) throw new ProtocolError("UnexpectedFrame", "PRESENCE_REPLY before WELCOME.");
        const pending = this.presenceQueries.get(frame.requestId);
        if (!pending) return; // the answer to a query that timed out
        this.presenceQueries.delete(frame.requestId);
        clearTimeout(pending.timer);
        pending.reply.resolve(frame);
        return;
      }
      case FrameType.Error: {
        const error = new HeraldError(errorCodeName(frame.code), `Broker: ${frame.message}`, {
          fatal: frame.fatal,
          count: frame.count,
          sid: frame.sid,
        });
        if (frame.fatal || this.welcome) {
          this.fatal = error;
          this.fail(error); // the broker writes nothing after a fatal ERROR and closes
        } else if (frame.sids !== null && frame.sids.length > 0) {
          for (const sid of frame.sids) this.events.gap(sid); // may have lost an unknown number (spec §6.3): told as a resume that did not recover
        } else if (frame.sid !== 0) {
          this.events.revoked(frame.sid, error);
        } else {
          this.events.error(error);
        }
        return;
      }
      case FrameType.Subscribed:
        if (this.welcome || this.options.serverSubscriptions !== true || !this.events.subscribed) {
          throw new ProtocolError("UnexpectedFrame", "SUBSCRIBED on a connection that did not ask for server subscriptions (spec §4.1 bit 6).");
        }
        if ((frame.options & SubscribeOptions.Delta) !== 0) this.deltaBases?.track(frame.sid);
        this.events.subscribed(frame.sid, frame.pattern, frame.options); // queued before any MESSAGE for its sid (spec §4.10)
        return;
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

  // ---------------------------------------------------------------------------------------------------
  // The outgoing batch

  /** Queues a frame; the frames of one turn go to the link together at its end. */
  private write(frame: Uint8Array, publish?: PendingPublish): void {
    if (this.dead) throw new HeraldError("ConnectionLost", `The connection to ${this.address} is closed.`);
    this.outbox.push(frame);
    this.outboxBytes += frame.length;
    if (publish) this.outboxPublishes.push(publish);
    if (!this.outboxScheduled) {
      this.outboxScheduled = true;
      queueMicrotask(() => this.sendOutbox());
    }
  }

  /**
   * Hands the turn's frames to the link in batches of at most `max_frame` + 4 bytes (a WebSocket message's
   * limit, spec §1; one frame is never larger). Publications resolve now if the link is under its mark,
   * else when it drains. After a loss they stay, for `takeUnsent` to give back.
   */
  private sendOutbox(): void {
    this.outboxScheduled = false;
    if (this.dead || this.outbox.length === 0) return;
    const limit = this.maxFrame + LENGTH_PREFIX_SIZE;
    let underMark = true;
    let batch: Uint8Array[] = [];
    let bytes = 0;
    for (const frame of this.outbox) {
      if (batch.length > 0 && bytes + frame.length > limit) {
        underMark = this.link.send(batch);
        batch = [];
        bytes = 0;
      }
      batch.push(frame);
      bytes += frame.length;
    }
    if (batch.length > 0) underMark = this.link.send(batch);
    const publishes = this.outboxPublishes;
    this.outbox = [];
    this.outboxBytes = 0;
    this.outboxPublishes = [];
    if (underMark) {
      this.onDrained(); // in order: those still waiting first
      for (const p of publishes) p.resolve();
    } else {
      this.draining.push(...publishes);
    }
  }

  private fail(error: HeraldError): void {
    if (this.dead) return;
    this.dead = true;
    if (this.pingTimer) clearInterval(this.pingTimer);
    this.link.destroy();
    for (const waiter of this.pongWaiters.splice(0)) waiter?.reject(error);
    for (const waiter of this.refreshWaiters.splice(0)) waiter.reject(error);
    for (const { reply, timer } of this.presenceQueries.values()) {
      clearTimeout(timer);
      reply.reject(error);
    }
    this.presenceQueries.clear();
    // Taken by the link but maybe not by the broker: only the caller can tell whether to publish again.
    const lost = new HeraldError("ConnectionLost", `The connection to ${this.address} closed while publishing.`, { cause: error });
    for (const p of this.draining.splice(0)) p.reject(lost);
    if (this.welcome) {
      this.welcome.reject(error.code === "ConnectionLost" ? new HeraldError("ConnectFailed", error.message, { cause: error }) : error);
      this.welcome = null;
      return;
    }
    if (!this.closing) this.events.lost(error);
  }

  // ---------------------------------------------------------------------------------------------------
  // Transport

  /**
   * Sends HELLO again with a fresh credential (spec §4.1, authentication on) and resolves on the new
   * WELCOME. A refused credential is a fatal `AuthenticationFailed`: the connection is lost with it.
   */
  async refresh(options: Pick<TransportOptions, "name" | "compression" | "deltas" | "headers" | "noResponders" | "info" | "serverSubscriptions">, auth: string): Promise<void> {
    if (this.dead) throw new HeraldError("ConnectionLost", "Not connected.");
    const d = deferred<WelcomeFrame>();
    this.refreshWaiters.push(d);
    this.write(hello(options, auth));
    await d.promise;
  }

  subscribe(sid: number, pattern: string, options: number, since: HistoryPosition | null = null, queue: string | null = null): Promise<void> {
    if (this.dead) return Promise.reject(new HeraldError("ConnectionLost", "Not connected."));
    // A queue only when granted (an older broker would take it as a plain subscription), never with since:
    // from a client that sends it anyway, either is a fatal MalformedFrame (spec §4.3).
    if (queue && this.info.queueGroups !== true) return Promise.reject(queueGroupsNotNegotiated(pattern, queue));
    // Join and presence events only when granted: from any other client they are a fatal MalformedFrame (spec §15.1).
    if ((options & PRESENCE_OPTIONS) !== 0 && this.info.presence !== true) {
      return Promise.reject(presenceNotNegotiated(`Subscription to '${pattern}' with ${(options & SubscribeOptions.Join) !== 0 ? "join" : "presence events"}`));
    }
    // Deltas only where granted; the broker may still ignore the bit (spec §4.3), then every MESSAGE is full.
    if ((options & SubscribeOptions.Delta) !== 0) {
      if (this.deltaBases !== null) this.deltaBases.track(sid);
      else options &= ~SubscribeOptions.Delta;
    }
    // since only with headers granted: from any other client it is a fatal MalformedFrame (spec §4.3).
    this.write(encodeSubscribe(sid, pattern, options, this.info.history === true ? since : null, queue));
    // A refusal (PermissionDenied, PresenceFull, PresenceUnavailable for a join: an ERROR naming the sid, spec
    // §15.1) comes before the PONG and ends the subscription (TransportEvents.revoked).
    return this.flush();
  }

  /**
   * PRESENCE (spec §15.3): resolves with the broker's PRESENCE_REPLY (whatever its code), rejects with
   * `PresenceNotNegotiated` before sending when the broker did not grant presence (it would close the
   * connection), with the connection's loss, or with `Timeout` after `timeoutMs`.
   */
  presence(topic: string, limit: number, cursor: string | null, timeoutMs: number): Promise<PresenceReplyFrame> {
    if (this.dead) return Promise.reject(new HeraldError("ConnectionLost", "Not connected."));
    if (this.info.presence !== true) return Promise.reject(presenceNotNegotiated(`Presence query of '${topic}'`));
    const requestId = this.nextPresenceId;
    this.nextPresenceId = (this.nextPresenceId + 1) >>> 0;
    const reply = deferred<PresenceReplyFrame>();
    const timer = setTimeout(() => {
      this.presenceQueries.delete(requestId);
      reply.reject(new HeraldError("Timeout", `No answer to the presence query of '${topic}' within ${timeoutMs} ms.`));
    }, timeoutMs);
    unrefTimer(timer);
    this.presenceQueries.set(requestId, { reply, timer });
    this.write(encodePresence(requestId, topic, limit, cursor));
    return reply.promise;
  }

  unsubscribe(sid: number, again = false): Promise<void> {
    if (!again) this.deltaBases?.forget(sid);
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
    if (frame.length - LENGTH_PREFIX_SIZE > this.maxFrame) {
      p.reject(
        new HeraldError("FrameTooLarge", `PUBLISH of ${frame.length - LENGTH_PREFIX_SIZE} bytes is over the broker's max_frame of ${this.maxFrame}.`),
      );
      return true;
    }
    // Backpressure: what the link still holds is bounded, as the client's buffer is while disconnected.
    const waiting = this.link.buffered + this.outboxBytes;
    if (waiting + frame.length > this.options.maxBufferBytes) {
      p.reject(
        new HeraldError("BufferFull", `${waiting} bytes are waiting to go out to ${this.address}; ${frame.length} more would pass maxBufferBytes (${this.options.maxBufferBytes}).`),
      );
      return true;
    }
    this.write(frame, p);
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
    const unsent = this.outboxPublishes;
    this.outbox = [];
    this.outboxBytes = 0;
    this.outboxPublishes = [];
    return unsent;
  }

  async close(): Promise<void> {
    this.closing = true;
    if (this.dead) {
      for (const p of this.takeUnsent()) p.reject(new HeraldError("Closed", "The client was closed."));
      return;
    }
    if (this.pingTimer) clearInterval(this.pingTimer);
    this.sendOutbox(); // what was written this turn goes out before the end
    await this.link.end();
    this.fail(new HeraldError("Closed", "The client closed the connection."));
  }
}
