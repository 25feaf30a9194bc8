/**
 * The Herald client: one API over TCP (Node, `tcp://host:4502`), WebSocket (browsers and Node,
 * `ws://host:8080/ws`) and HTTP long-poll (browsers and Node), with automatic reconnect (exponential backoff
 * with jitter), re-subscription and a bounded buffer for what is published while disconnected. An
 * `http(s)://host:8080` address tries the WebSocket first and falls back to long-poll (`transport`).
 */
import { HeraldHeaders, headerPairs, outgoing, type HeadersInit } from "./headers.js";
import { HeraldError, NoRespondersError, RequestTimeoutError } from "./protocol/errors.js";
import { hasWildcards, type ResumeEvent } from "./history.js";
import {
  DEFAULT_PRESENCE_LIMIT,
  PresenceError,
  countOf,
  type Occupancy,
  type PresenceOptions,
  type PresencePage,
} from "./presence.js";
import type { MessageHeaders, PresenceReplyFrame } from "./protocol/frames.js";
import { SubscribeOptions as OptionBits } from "./protocol/frames.js";
import { checkPattern, checkPublishTopic, checkQueueName, checkReplyTo, checkTopicName, DEFAULT_MAX_TOPIC } from "./protocol/topics.js";
import { LongPollTransport } from "./longpoll.js";
import { FrameSession } from "./session.js";
import { Message, Subscription, type MessageHandler, type SubscribeOptions, type SubscriptionOwner, type SubscriptionPresence } from "./subscription.js";
import { openTcp } from "./tcp.js";
import { endSend, injectTrace, startSend } from "./tracing.js";
import { WebSocketNotOpened, openWebSocket } from "./websocket.js";
import type { PendingPublish, Transport, TransportEvents, TransportInfo, TransportOptions } from "./transport.js";
import { backoff, deferred, quiet, randomToken, sleep, toBytes, type Deferred } from "./util.js";

/**
 * - `connecting`: opening the first connection.
 * - `connected`: subscriptions are live, publications go out at once.
 * - `reconnecting`: the connection was lost (or long-poll requests are failing); publications are
 *   buffered and subscriptions will be restored.
 * - `closed`: `close()` was called, or reconnecting gave up. Final.
 */
export type ConnectionState = "connecting" | "connected" | "reconnecting" | "closed";

export type Payload = Uint8Array | ArrayBuffer | string;

/**
 * How an `http(s)://` address is reached: `"auto"` tries the WebSocket at its `/ws` and falls back to
 * long-poll when it cannot be opened; `"websocket"` and `"longpoll"` use that one only.
 */
export type TransportChoice = "auto" | "websocket" | "longpoll";

export interface ConnectOptions {
  /** Client name shown in the broker's logs and `/connz` (HELLO client_name; at most 128 bytes). */
  name?: string;
  /**
   * For an `http(s)://` address: `"auto"` (default) opens a WebSocket to the same host and port (`/ws`) and
   * falls back to long-poll when it cannot be opened (the upgrade refused, stripped by a proxy, or not
   * answered within `connectTimeoutMs`; no WebSocket in this runtime); `info.transport` says which was
   * chosen, `info.fallback` why. A client that fell back stays on long-poll for its reconnects. `"websocket"`
   * or `"longpoll"` uses that transport only. `tcp://`, `tls://`, `ws://` and `wss://` addresses name their
   * transport themselves (`"auto"` or that one).
   */
  transport?: TransportChoice;
  /** Ask for Zstd-compressed messages (spec §11); they are decompressed here. Default true. */
  compression?: boolean;
  /**
   * Let subscriptions that ask for it (their `delta` option) receive deltas against their previous message
   * (spec §11.2; TCP, WebSocket and binary long-poll); they are applied here, the application always gets the
   * full payload. Default true.
   */
  deltas?: boolean;
  /**
   * Ask for headers (spec §4.1, §4.9): received messages carry their headers, and `publish` may send some.
   * Default true. Off (or a broker that does not grant them): publishing with headers is refused here
   * (`HeadersNotNegotiated`), and no trace context is added.
   */
  headers?: boolean;
  /**
   * Ask for fail-fast requests (spec §7): a request that reaches no subscriber rejects at once with a
   * {@link NoRespondersError} instead of waiting for its timeout. Needs `headers`. Default true.
   */
  noResponders?: boolean;
  /** Reconnect automatically when the connection is lost. Default true. */
  reconnect?: boolean;
  /** First reconnect delay; doubles each attempt, with jitter. Default 250 ms. */
  reconnectDelayMs?: number;
  /** Longest reconnect delay. Default 5000 ms. */
  maxReconnectDelayMs?: number;
  /** Attempts in a row before giving up (state `closed`). Default: never give up. */
  maxReconnectAttempts?: number;
  /** Time for one connection attempt (TCP handshake, session creation). Default 10 000 ms. */
  connectTimeoutMs?: number;
  /**
   * `connect()` keeps trying (with backoff) instead of failing when the first attempt fails.
   * Default false: `connect()` rejects with the first attempt's error.
   */
  waitOnFirstConnect?: boolean;
  /** TCP and WebSocket: PING the broker after this long without hearing from it. Default: the broker's ping_interval_ms. */
  pingIntervalMs?: number;
  /** Default timeout of `request()`. Default 10 000 ms. */
  requestTimeoutMs?: number;
  /**
   * Bytes of publications kept while disconnected, and waiting to go out on a connection (TCP and WebSocket:
   * what the socket has not sent yet; long-poll: queued requests); more is `BufferFull`. Default 8 MiB.
   */
  maxBufferBytes?: number;
  /** Messages a subscription's iterator keeps for a slow consumer before dropping the oldest. Default 65 536. */
  maxPendingMessages?: number;
  /** Long-poll: the `fetch` to use (default: the global one). */
  fetch?: typeof fetch;
  /**
   * The credential (a static token or a JWT) when the broker has authentication on: sent as HELLO `auth`
   * over TCP/TLS and WebSocket, and as `Authorization: Bearer` when a long-poll session is created. A function is called
   * for every new connection or session and by {@link HeraldClient.refreshCredential}, so it can hand out
   * fresh tokens. A refused credential (`AuthenticationFailed`) closes the client: it does not reconnect.
   */
  credential?: string | (() => string | Promise<string>);
  /**
   * `tls://` (and `wss://` when the `ws` package makes the WebSocket, Node before 22): PEM certificate(s) to
   * trust besides the system's, e.g. a self-signed broker certificate (a `Buffer` works too). Not used by
   * `https://` long-poll nor by a runtime's own WebSocket: they take no CA, start Node with
   * `NODE_EXTRA_CA_CERTS=ca.pem` instead (browsers use their own trust store).
   */
  ca?: string | Uint8Array;
  /**
   * The client info other clients see beside this client's presence (spec §4.1 HELLO `info`, §15): a display
   * name, or an object (sent as its JSON text), shown as sent, so never a credential. At most 256 UTF-8 bytes
   * with the broker's defaults (`max_presence_info`; a longer one is refused when connecting, `MalformedFrame`).
   * A JWT's `herald_info` claim replaces it. Only used by subscriptions that `join` a topic.
   */
  info?: string | object;
  /**
   * Let the application's backend subscribe this client through the broker's server API (spec §4.1 bit 6, §4.10;
   * TCP and WebSocket; long-poll with headers, longpoll §1.4). Each such subscription is given to the `serverSubscribed` event and read like one of the
   * application's own. Default `false`: an application that does not listen to that event would otherwise receive
   * messages it never asked for. A server-made subscription ends with its connection; a reconnect does not make it again.
   */
  acceptServerSubscriptions?: boolean;
}

export interface PublishOptions {
  /** Topic the receivers should reply to (request/reply). */
  replyTo?: string | null;
  /**
   * Headers of the message (spec §4.9): `{ "Content-Type": "application/json", "X-Tag": ["a", "b"] }`.
   * Checked here as the broker would (token keys, no CR/LF, no `Herald-` prefix, the broker's limits):
   * a bad one rejects the publish with `InvalidHeaders`, and the connection carries on.
   */
  headers?: HeadersInit;
}

export interface RequestOptions {
  /** How long to wait for the reply. Default: the client's `requestTimeoutMs`. */
  timeoutMs?: number;
  /** Headers of the request (as {@link PublishOptions.headers}). */
  headers?: HeadersInit;
}

export interface ClientEvents {
  /** Every state change; `error` is why the connection was lost or the client closed. */
  state: (state: ConnectionState, error?: Error) => void;
  /** The connection was lost (state turns `reconnecting` or `closed`). */
  disconnect: (error: Error) => void;
  /** Connected again after a loss, subscriptions restored. */
  reconnect: () => void;
  /**
   * Problems that do not end the connection: `MessagesDropped` (the broker's slow-consumer policy, messages a cluster node shed on their way in, or a
   * slow iterator), `UnknownSubscription`, a refused subscription, a handler that threw, ...
   */
  error: (error: HeraldError) => void;
  /**
   * A subscription resumed after a reconnect (spec §13): the broker's answer to the position it sent,
   * `recovered` or not (then what was published meanwhile is lost to it). Also given to the subscription's
   * `onResume` option.
   */
  resume: (event: ResumeEvent) => void;
  /**
   * The application's backend subscribed this client through the server API (spec §4.10; only with
   * `acceptServerSubscriptions`): the subscription, read like one of the application's own. It ends when the
   * backend unsubscribes it (its iterator throws `Unsubscribed`), when the application unsubscribes it, or with
   * its connection: a reconnect does not make it again.
   */
  serverSubscribed: (subscription: Subscription) => void;
}

type Listener = (...args: never[]) => void;

const DEFAULTS = {
  name: "herald-ts",
  transport: "auto" as TransportChoice,
  compression: true,
  deltas: true,
  headers: true,
  noResponders: true,
  reconnect: true,
  reconnectDelayMs: 250,
  maxReconnectDelayMs: 5000,
  maxReconnectAttempts: Infinity,
  connectTimeoutMs: 10_000,
  waitOnFirstConnect: false,
  requestTimeoutMs: 10_000,
  maxBufferBytes: 8 * 1024 * 1024,
  maxPendingMessages: 65_536,
};

/**
 * Errors no reconnect can fix: a refused credential, or the application's backend ending this client (`Disconnected`,
 * `Revoked`, spec §8): reconnecting would undo its decision, so the client closes with the reason (its `close` event and
 * `closed` state carry it) and the application decides what comes next.
 */
function isFinal(error: HeraldError): boolean {
  return error.code === "AuthenticationFailed" || error.code === "Disconnected" || error.code === "Revoked";
}

function asHeraldError(e: unknown, code = "ConnectionLost"): HeraldError {
  if (e instanceof HeraldError) return e;
  return new HeraldError(code, (e as Error)?.message ?? String(e), { cause: e });
}

/** The transport an address asks for: its scheme decides, and for `http(s)://` the `transport` option. */
function routeOf(url: URL, choice: TransportChoice): "tcp" | TransportChoice {
  let named: "tcp" | "websocket";
  switch (url.protocol) {
    case "http:":
    case "https:":
      return choice;
    case "tcp:":
    case "tls:":
      named = "tcp";
      break;
    case "ws:":
    case "wss:":
      named = "websocket";
      break;
    default:
      throw new HeraldError(
        "ConnectFailed",
        `Unsupported address '${url.href}': use tcp://host:4502 or tls://host:4502 (Node), ws(s)://host:8080/ws (WebSocket), or http(s)://host:8080 (WebSocket, else long-poll).`,
      );
  }
  if (choice !== "auto" && choice !== named) {
    throw new HeraldError("InvalidOptions", `transport: "${choice}" does not go with '${url.href}', a ${named} address; use http(s)://host:port to choose.`);
  }
  return named;
}

export class HeraldClient implements SubscriptionOwner {
  /** The broker address this client connects to. */
  readonly url: URL;
  /** Resolves when the client has closed. */
  readonly closed: Promise<void>;

  private readonly options: typeof DEFAULTS & ConnectOptions;
  /** How the address is reached: its scheme, and for `http(s)://` the `transport` option. */
  private readonly route: "tcp" | TransportChoice;
  /** `auto` only: why the WebSocket could not be opened, once long-poll worked instead (kept for the reconnects). */
  private webSocketRefused: string | null = null;
  /** `auto` only: whether a WebSocket has opened in this client (a later failed upgrade is then tried once more). */
  private webSocketWorked = false;
  private _state: ConnectionState = "connecting";
  private transport: Transport | null = null;
  private lastInfo: TransportInfo | null = null;
  private lastMaxTopic = DEFAULT_MAX_TOPIC;
  private generation = 0;
  private currentLost: Deferred<HeraldError> | null = null;
  private readonly subs = new Map<number, Subscription>();
  private nextSid = 1;
  private buffer: PendingPublish[] = [];
  private bufferedBytes = 0;
  private inboxPrefix: string | null = null; // <the broker's inbox prefix>.<random>, fixed on the first request
  private inbox: Subscription | null = null;
  private unsubscribingRefused = 0; // refused joins being UNSUBSCRIBEd between fences (unsubscribeRefused)
  private requestCounter = 0;
  private readonly requests = new Map<string, { reply: Deferred<Message>; timer: ReturnType<typeof setTimeout>; topic: string }>();
  private readonly listeners = new Map<keyof ClientEvents, Set<Listener>>();
  private readonly stop = new AbortController();
  private readonly closedD = deferred<void>();
  /** HELLO `info` (the `info` option as text), or null. */
  private readonly infoText: string | null;
  /** @internal resolves on the first connection; rejects if it fails and the client fails fast. */
  readonly opened: Promise<void>;
  private readonly openedD = deferred<void>();

  constructor(url: string | URL, options: ConnectOptions = {}) {
    this.url = typeof url === "string" ? new URL(url) : url;
    this.options = { ...DEFAULTS, ...Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) };
    this.route = routeOf(this.url, this.options.transport);
    if (new TextEncoder().encode(this.options.name).length > 128) {
      throw new HeraldError("ConnectFailed", "The client name is longer than 128 UTF-8 bytes (spec §4.1).");
    }
    const info = this.options.info;
    if (info !== undefined && info !== null && typeof info !== "string" && typeof info !== "object") {
      throw new HeraldError("InvalidOptions", "info must be a string or an object (sent as JSON).");
    }
    this.infoText = info === undefined || info === null ? null : typeof info === "string" ? info : JSON.stringify(info);
    this.closed = this.closedD.promise;
    this.opened = quiet(this.openedD.promise);
    this.run(!this.options.waitOnFirstConnect).catch((e) => this.shutdown(asHeraldError(e, "InternalError")));
  }

  /** The connection state (see {@link ConnectionState}); changes are reported by the `state` event. */
  get state(): ConnectionState {
    return this._state;
  }

  /** What the current (or last) connection negotiated: transport, server name, compression, limits. */
  get info(): TransportInfo | null {
    return this.transport?.info ?? this.lastInfo;
  }

  on<E extends keyof ClientEvents>(event: E, listener: ClientEvents[E]): () => void {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    set.add(listener as Listener);
    return () => this.off(event, listener);
  }

  off<E extends keyof ClientEvents>(event: E, listener: ClientEvents[E]): void {
    this.listeners.get(event)?.delete(listener as Listener);
  }

  private emit<E extends keyof ClientEvents>(event: E, ...args: Parameters<ClientEvents[E]>): void {
    for (const listener of [...(this.listeners.get(event) ?? [])]) {
      try {
        (listener as (...a: unknown[]) => void)(...args);
      } catch (e) {
        setTimeout(() => {
          throw e; // a listener bug surfaces like an EventEmitter listener's would
        });
      }
    }
  }

  private setState(state: ConnectionState, error?: Error): void {
    if (this._state === state || this._state === "closed") return;
    this._state = state;
    this.emit("state", state, error);
  }

  private isClosed(): boolean {
    return this._state === "closed";
  }

  /** @internal */
  reportError(error: HeraldError): void {
    this.emit("error", error);
  }

  /** @internal */
  reportResume(event: ResumeEvent): void {
    this.emit("resume", event);
  }

  // -------------------------------------------------------------------------------------------------------
  // Connection loop

  /** The credential for a new connection or a refresh (calls the `credential` function). */
  private async resolveCredential(): Promise<string | null> {
    const credential = this.options.credential;
    if (credential === undefined) return null;
    let value: string;
    try {
      value = typeof credential === "function" ? await credential() : credential;
    } catch (e) {
      throw new HeraldError("AuthenticationFailed", `The credential function failed: ${(e as Error)?.message ?? e}`, { cause: e });
    }
    if (typeof value !== "string") throw new HeraldError("AuthenticationFailed", "The credential function returned no string.");
    return value;
  }

  private transportOptions(auth: string | null): TransportOptions {
    return {
      auth,
      ca: this.options.ca,
      name: this.options.name,
      compression: this.options.compression,
      deltas: this.options.deltas,
      headers: this.options.headers,
      noResponders: this.options.noResponders,
      serverSubscriptions: this.options.acceptServerSubscriptions === true,
      connectTimeoutMs: this.options.connectTimeoutMs,
      pingIntervalMs: this.options.pingIntervalMs,
      maxBufferBytes: this.options.maxBufferBytes,
      fetch: this.options.fetch,
      retryDelayMs: this.options.reconnectDelayMs,
      maxRetryDelayMs: this.options.maxReconnectDelayMs,
      info: this.infoText,
    };
  }

  private async run(failFast: boolean): Promise<void> {
    let attempt = 0;
    let everConnected = false;
    while (this._state !== "closed") {
      const gen = ++this.generation;
      const lost = deferred<HeraldError>();
      this.currentLost = lost;
      const events: TransportEvents = {
        message: (sid, topic, replyTo, payload, headers, delta) => {
          if (gen === this.generation) this.dispatch(sid, topic, replyTo, payload, headers, delta);
        },
        error: (error) => {
          if (error.code === "UnknownSubscription" && this.unsubscribingRefused > 0) return; // one node's answer to unsubscribeRefused
          if (gen === this.generation) this.emit("error", error);
        },
        subscribed: (sid, pattern, options) => {
          if (gen === this.generation) this.acceptServerSubscription(sid, pattern, options);
        },
        gap: (sid) => {
          if (gen !== this.generation) return;
          this.subs.get(sid)?.reportGap();
        },
        deltaFailed: (sid, error) => {
          if (gen === this.generation) this.deltaFailed(sid, error);
        },
        revoked: (sid, error) => {
          if (gen !== this.generation) return;
          const sub = this.subs.get(sid);
          if (sub) {
            this.subs.delete(sid);
            sub.end(error); // its iterator throws the PermissionDenied
            if (sub === this.inbox) this.inbox = null;
            if ((error.code === "PresenceFull" || error.code === "PresenceUnavailable") && this.transport) {
              void this.unsubscribeRefused(this.transport, sid);
            }
          }
          this.emit("error", error);
        },
        interrupted: (error) => {
          if (gen === this.generation && this._state === "connected") {
            this.setState("reconnecting", asHeraldError(error));
          }
        },
        resumed: () => {
          if (gen === this.generation && this._state === "reconnecting" && this.transport) {
            this.setState("connected");
            this.emit("reconnect");
          }
        },
        lost: (error) => lost.resolve(error),
      };

      let transport: Transport;
      try {
        transport = await this.openTransport(this.transportOptions(await this.resolveCredential()), events);
      } catch (e) {
        if (this.isClosed()) return;
        const error = asHeraldError(e, "ConnectFailed");
        attempt++;
        if (isFinal(error)) {
          // A refused credential, or an identity the backend revoked, is not a passing network problem: retrying would only hammer the broker.
          this.openedD.reject(error);
          await this.shutdown(error);
          return;
        }
        if (!everConnected && failFast) {
          this.openedD.reject(error);
          await this.shutdown(error);
          return;
        }
        if (attempt > this.options.maxReconnectAttempts) {
          await this.shutdown(error);
          return;
        }
        await sleep(
          Math.max(error.retryAfterMs ?? 0, backoff(attempt, this.options.reconnectDelayMs, this.options.maxReconnectDelayMs)),
          this.stop.signal,
        );
        continue;
      }
      if (this.isClosed()) {
        await transport.close();
        return;
      }

      this.transport = transport;
      this.lastInfo = transport.info;
      this.lastMaxTopic = transport.maxTopic;
      let lostError: HeraldError | null = null;
      try {
        await Promise.race([this.restore(transport), lost.promise.then((e) => Promise.reject(e))]);
        attempt = 0;
        const first = !everConnected;
        everConnected = true;
        this.setState("connected");
        this.drainBuffer(transport);
        if (first) this.openedD.resolve();
        else this.emit("reconnect");
        lostError = await lost.promise;
      } catch (e) {
        lostError = asHeraldError(e);
        attempt++;
      }
      if (this.isClosed()) return;
      this.transport = null;
      for (const sub of this.subs.values()) {
        if (!sub.madeByServer) continue;
        this.subs.delete(sub.sid); // the broker made it for that connection only: the backend decides again (spec §4.10)
        sub.end(lostError);
      }
      const unsent = transport.takeUnsent();
      if (unsent.length > 0) {
        this.buffer.unshift(...unsent);
        this.bufferedBytes += unsent.reduce((n, p) => n + p.payload.length, 0);
      }
      await transport.close().catch(() => undefined);
      this.emit("disconnect", lostError);
      if (!this.options.reconnect || attempt > this.options.maxReconnectAttempts || isFinal(lostError)) {
        await this.shutdown(lostError);
        return;
      }
      this.setState(everConnected ? "reconnecting" : "connecting", lostError);
      if (attempt > 0) {
        await sleep(
          Math.max(lostError.retryAfterMs ?? 0, backoff(attempt, this.options.reconnectDelayMs, this.options.maxReconnectDelayMs)),
          this.stop.signal,
        );
      }
    }
  }

  /**
   * Opens the next connection. `auto`: the WebSocket first; when it cannot be opened, long-poll, and once
   * long-poll has worked the client keeps to it (the network between here and the broker does not carry
   * WebSockets: trying again on every reconnect would make each wait for the failed upgrade). A WebSocket
   * that was lost is tried again first, and once more after long-poll answered (the broker may have been
   * starting when the upgrade failed). A failure after the upgrade (an ERROR to HELLO) is no reason to
   * fall back and is reported as it is.
   */
  private async openTransport(options: TransportOptions, events: TransportEvents): Promise<Transport> {
    switch (this.route) {
      case "tcp":
        return openTcp(this.url, options, events);
      case "websocket":
        return openWebSocket(this.url, options, events);
      case "longpoll":
        return LongPollTransport.open(this.url, options, events);
      case "auto": {
        let refused = this.webSocketRefused;
        if (refused === null) {
          try {
            const socket = await openWebSocket(this.url, options, events);
            this.webSocketWorked = true;
            return socket;
          } catch (e) {
            if (!(e instanceof WebSocketNotOpened) || this.isClosed()) throw e;
            refused = e.message;
          }
        }
        let transport: LongPollTransport;
        try {
          transport = await LongPollTransport.open(this.url, options, events);
        } catch (e) {
          const error = asHeraldError(e, "ConnectFailed");
          throw new HeraldError(error.code, `${error.message} (after: ${refused})`, { cause: e, status: error.status, retryAfterMs: error.retryAfterMs });
        }
        if (this.webSocketRefused === null && this.webSocketWorked) {
          // A WebSocket worked on this network before: its failed upgrade may have been the broker still
          // starting (nothing listening), which long-poll, a moment later, no longer met. Now that the broker
          // answers, the WebSocket is tried once more before the client settles on long-poll.
          try {
            const socket = await openWebSocket(this.url, options, events);
            await transport.close();
            return socket;
          } catch (e) {
            if (!(e instanceof WebSocketNotOpened) || this.isClosed()) {
              await transport.close();
              throw e;
            }
            refused = e.message;
          }
        }
        this.webSocketRefused = refused;
        transport.info.fallback = refused;
        return transport;
      }
    }
  }

  /**
   * A cluster node keeps a subscription whose join it refused (PresenceFull, PresenceUnavailable: without its join,
   * spec §15.5), one node makes nothing (CLIENTS.md step 13): the ended subscription is UNSUBSCRIBEd between two
   * fences, and an UnknownSubscription between them is one node's answer, not an error to report.
   */
  private async unsubscribeRefused(transport: Transport, sid: number): Promise<void> {
    try {
      await transport.flush(); // the opening fence: an UnknownSubscription before it answers something else
    } catch {
      return; // the connection is gone, and the subscription with it
    }
    this.unsubscribingRefused++;
    try {
      await transport.unsubscribe(sid);
      await transport.flush();
    } catch {
      // the connection is gone, and the subscription with it
    } finally {
      this.unsubscribingRefused--;
    }
  }

  /** Subscribes every live subscription again on a new transport (same sids). */
  private async restore(transport: Transport): Promise<void> {
    await Promise.all([...this.subs.values()].map((sub) => this.register(sub, transport)));
  }

  /** Sends a subscription to the broker; never rejects (a refusal ends that subscription). */
  private async register(sub: Subscription, transport: Transport): Promise<void> {
    try {
      // With a history position (spec §13) when the subscription resumes: see Subscription.sinceForSubscribe.
      // A queue group member sends its queue on every connection (the transport refuses it where not granted).
      // A joined subscription (spec §15.1) joins again: the new connection is a new member.
      await transport.subscribe(sub.sid, sub.pattern, sub.optionBits, sub.sinceForSubscribe(transport.info.history === true), sub.queue);
      sub.markReady();
    } catch (e) {
      const error = asHeraldError(e);
      // Only a long-poll 4xx answer, or a queue group or presence the broker did not grant, is a refusal;
      // anything else means the connection failed, and the subscription is restored on the next one. (The
      // broker's refusal of a join, an ERROR naming the sid, ends the subscription as it arrives.)
      const refused =
        (error.status !== undefined && error.status >= 400 && error.status < 500) ||
        error.code === "QueueGroupsNotNegotiated" ||
        error.code === "PresenceNotNegotiated";
      if (!refused || sub.isClosed) return;
      // The broker refused it: end it, and say so.
      this.subs.delete(sub.sid);
      sub.end(error);
      this.emit("error", error);
    }
  }

  /**
   * A delta for `sid` could not be applied (spec §11.2): an `error` event naming the sid, the subscription told of
   * the loss as a resume that did not recover, and the sid subscribed again on the same connection, so that the
   * broker sends a full message first (with the history position when it resumes: the broker may replay the lost
   * message). The deltas that come before that full message are dropped by the transport.
   */
  private deltaFailed(sid: number, error: HeraldError): void {
    this.emit("error", error);
    const sub = this.subs.get(sid);
    const transport = this.transport;
    if (!sub || !transport) return;
    sub.reportGap("A delta could not be applied (spec §11.2); subscribed again for a full message");
    void transport.unsubscribe(sid, true).then(
      () => (this.subs.get(sid) === sub && this.transport === transport ? this.register(sub, transport) : undefined),
      () => undefined,
    );
  }

  private drainBuffer(transport: Transport): void {
    while (this.buffer.length > 0 && this.transport === transport) {
      const p = this.buffer.shift()!;
      this.bufferedBytes -= p.payload.length;
      if (!transport.publish(p)) {
        this.buffer.unshift(p);
        this.bufferedBytes += p.payload.length;
        return;
      }
    }
  }

  private dispatch(sid: number, topic: string, replyTo: string | null, payload: Uint8Array, headers: MessageHeaders | undefined, delta: boolean): void {
    const sub = this.subs.get(sid);
    if (!sub) return; // a MESSAGE already queued for a subscription that ended (spec §4.4)
    if (delta) sub.deltas++;
    sub.receive(new Message(topic, replyTo, payload, sid, this, headers === undefined ? HeraldHeaders.empty : new HeraldHeaders(headers)));
  }

  private async shutdown(error: HeraldError): Promise<void> {
    if (this._state === "closed") return;
    this.setState("closed", error);
    this.stop.abort();
    this.currentLost?.resolve(error);
    const transport = this.transport;
    this.transport = null;
    for (const p of this.buffer.splice(0)) p.reject(error);
    this.bufferedBytes = 0;
    for (const { reply, timer } of this.requests.values()) {
      clearTimeout(timer);
      reply.reject(error);
    }
    this.requests.clear();
    for (const sub of this.subs.values()) sub.end();
    this.subs.clear();
    this.openedD.reject(error);
    if (transport) await transport.close().catch(() => undefined);
    this.closedD.resolve();
  }

  // -------------------------------------------------------------------------------------------------------
  // API

  /**
   * Publishes `payload` (bytes, or a string sent as UTF-8) to `topic`, with `options.headers` if given.
   * Resolves when it has been handed to the connection (TCP: written; long-poll: accepted by the broker).
   * While disconnected it is buffered (up to `maxBufferBytes`) and sent after the reconnect. With a
   * tracer provider registered it runs in a PRODUCER span whose sampled context travels in the headers.
   */
  publish(topic: string, payload: Payload, options: PublishOptions = {}): Promise<void> {
    try {
      if (this._state === "closed") throw new HeraldError("Closed", "The client is closed.");
      const maxTopic = this.transport?.maxTopic ?? this.lastMaxTopic;
      checkPublishTopic(topic, maxTopic);
      const replyTo = options.replyTo ? options.replyTo : null;
      if (replyTo !== null) checkReplyTo(replyTo, maxTopic);
      const bytes = toBytes(payload);
      let pairs = options.headers === undefined ? null : headerPairs(options.headers);
      const user = pairs !== null && pairs.length > 0;
      const span = startSend(topic, bytes.length);
      if (span !== null) {
        const carrier = pairs ?? [];
        if (injectTrace(span, carrier)) pairs = carrier;
      }
      const headers = pairs !== null && pairs.length > 0 ? outgoing(pairs, user) : null;
      const sent = new Promise<void>((resolve, reject) => {
        const p: PendingPublish = { topic, replyTo, payload: bytes, headers, resolve, reject };
        if (this.transport && this.buffer.length === 0 && this.transport.publish(p)) return;
        if (this.bufferedBytes + bytes.length > this.options.maxBufferBytes) {
          reject(new HeraldError("BufferFull", `More than ${this.options.maxBufferBytes} bytes are waiting for the connection.`));
          return;
        }
        this.buffer.push(p);
        this.bufferedBytes += bytes.length;
      });
      if (span !== null) endSend(span, sent);
      return sent;
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Subscribes to a topic pattern (`prices.>`, `chat.*.room`). Without a handler the subscription is an
   * async iterable (`for await (const msg of sub)`); with one, the handler gets every message.
   * `sub.ready` resolves when the broker has the subscription. With `options.queue` it joins that queue
   * group (spec §14): each message goes to one member of the group (see {@link SubscribeOptions.queue}).
   */
  subscribe(pattern: string, options?: SubscribeOptions): Subscription;
  subscribe(pattern: string, handler: MessageHandler, options?: SubscribeOptions): Subscription;
  subscribe(pattern: string, handlerOrOptions?: MessageHandler | SubscribeOptions, maybeOptions?: SubscribeOptions): Subscription {
    const handler = typeof handlerOrOptions === "function" ? handlerOrOptions : undefined;
    const options = (typeof handlerOrOptions === "function" ? maybeOptions : handlerOrOptions) ?? {};
    return this.track(pattern, handler, options, true);
  }

  /** Subscribes; `traced`: the handler runs in a CONSUMER span (not for the request inbox). */
  private track(pattern: string, handler: MessageHandler | undefined, options: SubscribeOptions, traced: boolean): Subscription {
    if (this._state === "closed") throw new HeraldError("Closed", "The client is closed.");
    checkPattern(pattern, this.transport?.maxTopic ?? this.lastMaxTopic);
    const queue = options.queue ?? null;
    if (queue !== null) {
      checkQueueName(queue);
      if (options.resume === true || options.onResume !== undefined) {
        throw new HeraldError(
          "InvalidOptions",
          `Subscription to '${pattern}' in queue group '${queue}': a queue group member does not resume from a history position (spec §4.3, §14); leave out resume and onResume.`,
        );
      }
    }
    const presence = this.presenceOf(pattern, options);
    const max = this.transport?.maxSubscriptions ?? Infinity;
    if (this.subs.size >= max) {
      throw new HeraldError("TooManySubscriptions", `The broker allows ${max} subscriptions per connection.`);
    }
    const sid = this.allocateSid();
    const sub = new Subscription(
      this,
      sid,
      pattern,
      options.noEcho === true,
      handler,
      options.maxPending ?? this.options.maxPendingMessages,
      traced,
      options.resume !== false,
      options.onResume,
      queue,
      presence,
      options.delta === true,
    );
    this.subs.set(sid, sub);
    if (this.transport) void this.register(sub, this.transport);
    return sub;
  }

  /**
   * What a subscription asks of presence (spec §15.1, §15.2), checked before anything is sent: one topic
   * (join or events on a pattern with wildcards would close the connection) and options that agree; the
   * transport refuses it when the broker did not grant presence.
   */
  private presenceOf(pattern: string, options: SubscribeOptions): SubscriptionPresence {
    const join = options.join === true;
    const onPresence = options.onPresence;
    if (onPresence !== undefined && typeof onPresence !== "function") throw new HeraldError("InvalidOptions", "onPresence must be a function.");
    if (onPresence !== undefined && options.presenceEvents === false) {
      throw new HeraldError("InvalidOptions", `Subscription to '${pattern}': onPresence needs presence events; leave out presenceEvents: false.`);
    }
    const events = options.presenceEvents === true || onPresence !== undefined;
    if (join || events) {
      const what = join ? "join" : "presence events";
      if (hasWildcards(pattern)) {
        throw new HeraldError("InvalidOptions", `Subscription to '${pattern}' with ${what}: presence is of one topic, a pattern with wildcards has none (spec §15.1).`);
      }
    }
    return { join, events, onPresence };
  }

  /**
   * SUBSCRIBED (spec §4.10): the subscription the broker made under its own sid, marked as the server's (never
   * sent again on a reconnect), given to the `serverSubscribed` listeners.
   */
  private acceptServerSubscription(sid: number, pattern: string, options: number): void {
    if (this.subs.has(sid)) return; // the broker never picks a live sid
    const sub = new Subscription(this, sid, pattern, (options & OptionBits.NoEcho) !== 0, undefined, this.options.maxPendingMessages, true, false);
    sub.madeByServer = true;
    this.subs.set(sid, sub);
    sub.markReady();
    this.emit("serverSubscribed", sub);
  }

  /** Below 2^31: the upper half is the broker's, for the subscriptions it makes (spec §4.10). */
  private allocateSid(): number {
    for (;;) {
      const sid = this.nextSid;
      this.nextSid = this.nextSid >= 0x7fffffff ? 1 : this.nextSid + 1;
      if (!this.subs.has(sid)) return sid;
    }
  }

  /** @internal Ends subscription `sid` here at once and on the broker. */
  async unsubscribeSid(sid: number): Promise<void> {
    const sub = this.subs.get(sid);
    if (!sub) return;
    this.subs.delete(sid);
    sub.end();
    const transport = this.transport;
    if (transport) await transport.unsubscribe(sid).catch(() => undefined);
  }

  /**
   * Request/reply (spec §7): publishes with a fresh `replyTo` under this client's inbox
   * (`<inbox prefix>.<random>.>`, under the prefix the broker gave this identity, subscribed on first use)
   * and resolves with the first reply. Rejects with a {@link NoRespondersError} as soon as the broker says
   * no subscriber received the request (with `noResponders` granted, the default), or with a
   * {@link RequestTimeoutError} (code `Timeout`) when no reply came in time.
   */
  async request(topic: string, payload: Payload, options: RequestOptions = {}): Promise<Message> {
    if (this._state === "closed") throw new HeraldError("Closed", "The client is closed.");
    if (this.inboxPrefix === null && this.info === null) await this.opened.catch(() => undefined); // the broker names the prefix
    if (this.inboxPrefix === null || this.inbox === null) {
      const prefix = this.inboxPrefix ?? `${this.info?.inboxPrefix ?? "_INBOX"}.${randomToken()}`;
      const onReply = (message: Message): void => {
        const token = message.topic.slice(prefix.length + 1);
        const pending = this.requests.get(token);
        if (!pending) return; // late reply
        this.requests.delete(token);
        clearTimeout(pending.timer);
        // The broker's no-responders status (spec §7): only the broker may set Herald- headers.
        if (message.headers.get("Herald-Status") === "503") pending.reply.reject(new NoRespondersError(pending.topic));
        else pending.reply.resolve(message);
      };
      this.inbox = this.track(`${prefix}.>`, onReply, {}, false); // the request's own span covers it
      this.inboxPrefix = prefix;
    }
    const token = String(++this.requestCounter);
    const timeoutMs = options.timeoutMs ?? this.options.requestTimeoutMs;
    const reply = deferred<Message>();
    // The answer may come before the publish is acknowledged (long-poll: a held poll brings the no-responders
    // status while the publish POST is still in flight): marked handled now, it still rejects for the caller.
    reply.promise.catch(() => undefined);
    const timer = setTimeout(() => {
      this.requests.delete(token);
      reply.reject(new RequestTimeoutError(topic, timeoutMs));
    }, timeoutMs);
    this.requests.set(token, { reply, timer, topic });
    try {
      await this.publish(topic, payload, { replyTo: `${this.inboxPrefix}.${token}`, ...(options.headers === undefined ? {} : { headers: options.headers }) });
    } catch (e) {
      clearTimeout(timer);
      this.requests.delete(token);
      throw e;
    }
    return reply.promise;
  }

  /**
   * The members of `topic` (spec §15.3), a page at a time: its occupancy (`members`, distinct `identities`),
   * up to `limit` members (default 100, at most 1 000) ordered by client id after `cursor`, and the `next`
   * cursor (`null` on the last page). Pages are read as the topic is then: a member that joins or leaves
   * between two pages is listed or not, none twice. To follow a topic, subscribe with `presenceEvents` first,
   * then read, and apply the events that overtake the answer by `client`. Rejects with a {@link PresenceError}
   * when the broker refuses (`PermissionDenied`: this identity may not read the topic's presence;
   * `PresenceUnavailable`), and `PresenceNotNegotiated` when the broker did not grant presence. On long-poll it
   * is `GET /presence` (longpoll §6) with the client's credential. While disconnected it waits for the connection.
   */
  async presence(topic: string, options: PresenceOptions = {}): Promise<PresencePage> {
    const limit = options.limit ?? DEFAULT_PRESENCE_LIMIT;
    if (!Number.isInteger(limit) || limit < 0 || limit > 0xffffffff) {
      throw new HeraldError("InvalidOptions", `limit must be an integer from 0 to 1000 (a larger one is served as 1000), got ${limit}.`);
    }
    const cursor = options.cursor ?? null;
    if (cursor !== null && typeof cursor !== "string") throw new HeraldError("InvalidOptions", "cursor must be a string (a page's next) or null.");
    const reply = await this.askPresence(topic, limit, cursor, options.timeoutMs);
    return Object.freeze({
      members: countOf(reply.members),
      identities: countOf(reply.identities),
      entries: Object.freeze(reply.entries.map((e) => Object.freeze(e))),
      next: reply.next,
    });
  }

  /**
   * The number of members of `topic` and of distinct identities among them (spec §15.3: a PRESENCE with limit
   * 0), the cheap call for large topics. Rejects as {@link presence} does.
   */
  async occupancy(topic: string, options: { timeoutMs?: number } = {}): Promise<Occupancy> {
    const reply = await this.askPresence(topic, 0, null, options.timeoutMs);
    return Object.freeze({ members: countOf(reply.members), identities: countOf(reply.identities) });
  }

  private async askPresence(topic: string, limit: number, cursor: string | null, timeoutMs: number | undefined): Promise<PresenceReplyFrame> {
    if (this._state === "closed") throw new HeraldError("Closed", "The client is closed.");
    checkTopicName(topic, this.transport?.maxTopic ?? this.lastMaxTopic);
    if (!this.transport) await this.waitForState("connected");
    const reply = await this.transport!.presence(topic, limit, cursor, timeoutMs ?? this.options.requestTimeoutMs);
    if (reply.code !== 0) throw new PresenceError(reply.code, topic);
    return reply;
  }

  /**
   * Resolves when everything published and subscribed before has been processed by the broker (TCP: a
   * PING/PONG round trip; long-poll: every queued request answered).
   */
  async flush(): Promise<void> {
    if (this._state === "closed") throw new HeraldError("Closed", "The client is closed.");
    if (!this.transport || this.buffer.length > 0) await this.waitForState("connected");
    await this.transport!.flush();
  }

  private waitForState(state: ConnectionState): Promise<void> {
    if (this._state === state) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const off = this.on("state", (s, error) => {
        if (s === state) {
          off();
          resolve();
        } else if (s === "closed") {
          off();
          reject(error ?? new HeraldError("Closed", "The client is closed."));
        }
      });
    });
  }

  /**
   * Sends a fresh credential (the `credential` option, called again if it is a function) before the
   * current one expires. TCP/TLS and WebSocket: HELLO again (spec §4.1); resolves when the broker's new WELCOME has
   * come. A refused one closes the client with `AuthenticationFailed` (and rejects with it). Long-poll: a
   * session is bound to the credential it was created with, so this does nothing (a new session, after
   * the old one expired, is created with a fresh credential). While disconnected it does nothing either:
   * the next connection calls the credential function anyway.
   */
  async refreshCredential(): Promise<void> {
    if (this._state === "closed") throw new HeraldError("Closed", "The client is closed.");
    if (this.options.credential === undefined) {
      throw new HeraldError("NoCredential", "refreshCredential() needs the `credential` option.");
    }
    const transport = this.transport;
    if (!(transport instanceof FrameSession)) return;
    const auth = (await this.resolveCredential())!;
    if (this.transport !== transport) return;
    await transport.refresh({ ...this.options, info: this.infoText }, auth);
  }

  /**
   * Closes the client: gives what was published up to 2 s to reach the broker, ends the connection (and
   * the long-poll session), ends every subscription and rejects what is still waiting.
   */
  async close(): Promise<void> {
    if (this._state === "closed") return this.closed;
    const transport = this.transport;
    if (transport && this._state === "connected") {
      await Promise.race([transport.flush().catch(() => undefined), sleep(2000, this.stop.signal)]);
    }
    await this.shutdown(new HeraldError("Closed", "The client was closed."));
  }
}

/**
 * Connects to a broker and resolves once connected (subscriptions can be made before that too).
 * `tcp://host:4502` or `tls://host:4502` (Node), `ws(s)://host:8080/ws` (WebSocket; browsers and Node), or
 * `http(s)://host:8080` (WebSocket, falling back to long-poll: the `transport` option).
 * Rejects if the first attempt fails, unless `waitOnFirstConnect` is set.
 */
export async function connect(url: string | URL, options: ConnectOptions = {}): Promise<HeraldClient> {
  const client = new HeraldClient(url, options);
  await client.opened;
  return client;
}

/**
 * Creates a client that connects in the background and keeps trying (lazy connect): use it at once;
 * publications wait in the buffer until the connection is up.
 */
export function createClient(url: string | URL, options: ConnectOptions = {}): HeraldClient {
  return new HeraldClient(url, { waitOnFirstConnect: true, ...options });
}

