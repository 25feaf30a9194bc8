/**
 * The HTTP long-poll transport (protocol-spec/longpoll.md) over `fetch` and `AbortController`: works in
 * browsers and in Node 20.
 *
 * - A session is created with `POST /poll/sessions` (`{"zstd": true}`: compressed MESSAGE frames are
 *   decompressed here; `{"deltas": true}`: delta MESSAGE frames are applied here, README §11.2;
 *   `"headers": true, "noResponders": true` unless turned off).
 * - One poll at a time: `GET .../messages?ack=N` with the binary media type; the body is MESSAGE frames
 *   back to back; `ack` is the last sequence received. A poll that fails in transit (network error, body
 *   cut, our own timeout) is sent again with the same `ack`, so the broker sends the same messages again:
 *   nothing is lost and nothing is delivered twice.
 * - 409 `PollReplaced` (another poll took over): poll again. 410/404 (session ended or unknown, e.g. the
 *   broker restarted): the transport is lost; the client creates a new session and subscribes again.
 *   503: wait `Retry-After`, then poll again.
 * - Subscribe, unsubscribe and publish go through one ordered queue, so they reach the broker in the
 *   order they were made (a publish after a subscribe on the same client is routed after it). Publishes
 *   waiting together are sent in one request as PUBLISH frames (`application/vnd.herald.frames`); a
 *   lone one is sent raw (`?topic=`, its headers as `&header=Key:Value`), which a browser sends without a
 *   CORS preflight.
 */
import { DEFAULT_MAX_HEADER_BYTES, DEFAULT_MAX_HEADERS, admitHeaders, type HeaderGrant } from "./headers.js";
import { ErrorCode, HeraldError } from "./protocol/errors.js";
import { PayloadFlags, SubscribeOptions, encodePublish, type HistoryPosition, type MessageHeaders, type PresenceEntry, type PresenceReplyFrame } from "./protocol/frames.js";
import { parsePollBody, type PollResult } from "./protocol/poll.js";
import { DEFAULT_MAX_TOPIC } from "./protocol/topics.js";
import { zstdDecompress } from "./protocol/zstd.js";
import { DeltaBases } from "./deltas.js";
import { presenceNotNegotiated } from "./presence.js";
import { queueGroupsNotNegotiated, type PendingPublish, type Transport, type TransportEvents, type TransportInfo, type TransportOptions } from "./transport.js";
import { backoff, deferred, sleep, type Deferred } from "./util.js";

export const FRAMES_MEDIA_TYPE = "application/vnd.herald.frames";
/** Largest decompressed payload accepted (the broker's largest configurable max frame). */
const MAX_DECOMPRESSED = 64 * 1024 * 1024;
/** The first sid of the broker's half (spec §4.10): only its subscriptions' MESSAGEs may be notices (longpoll §1.4). */
const SERVER_SIDS = 0x8000_0000;
const REQUEST_TIMEOUT_MS = 30_000;
const MAX_PUBLISHES_PER_REQUEST = 1000;

type Op =
  | { kind: "sub"; sid: number; pattern: string; options: number; since: HistoryPosition | null; queue: string | null; done: Deferred<void> }
  | { kind: "unsub"; sid: number; done: Deferred<void> }
  | { kind: "pub"; p: PendingPublish; size: number; headers: MessageHeaders | undefined }
  | { kind: "flush"; done: Deferred<void> };

interface SessionInfo {
  session: string;
  pollTimeoutMs?: number;
  inactivityTimeoutMs?: number;
  maxMessagesPerPoll?: number;
  maxBytesPerPoll?: number;
  maxPendingMessages?: number;
  maxTopicLength?: number;
  maxBodyBytes?: number;
  zstd?: boolean;
  inboxPrefix?: string;
  headers?: boolean;
  noResponders?: boolean;
  history?: boolean;
  queueGroups?: boolean;
  maxHeaders?: number;
  maxHeaderBytes?: number;
  presence?: boolean;
  maxPresenceInfo?: number;
  deltas?: boolean;
  /** Server-made subscriptions granted (longpoll §1.4); absent when not asked. */
  serverSubscriptions?: boolean;
}

/** `GET /presence`'s answer (longpoll §6): spec §15.3's PRESENCE_REPLY as JSON. */
interface PresenceAnswer {
  members?: number;
  identities?: number;
  entries?: { client?: string; identity?: string; info?: string | null }[];
  next?: string | null;
}

/** The refusals of `GET /presence` a PRESENCE_REPLY carries as its code (longpoll §6); any other is thrown. */
const PRESENCE_REFUSALS: Readonly<Record<string, number>> = {
  PermissionDenied: ErrorCode.PermissionDenied,
  InvalidTopic: ErrorCode.InvalidTopic,
  PresenceUnavailable: ErrorCode.PresenceUnavailable,
};

type FetchFn = typeof fetch;

/**
 * Turns a non-2xx answer into a HeraldError with the problem's `code` (longpoll §3); a refused subscribe names
 * its `sid`, as TCP's ERROR does (spec §15.1).
 */
async function problem(res: Response, what: string, sid?: number): Promise<HeraldError> {
  let code = `Http${res.status}`;
  let detail = res.statusText;
  try {
    const body = (await res.json()) as { code?: unknown; detail?: unknown; title?: unknown; reason?: unknown };
    if (typeof body.code === "string") code = body.code;
    if (typeof body.detail === "string") detail = body.detail;
    // A session the application's backend ended (spec §8): told as TCP's fatal ERROR would be, so the client does not reconnect.
    if (res.status === 410 && (body.reason === "Disconnected" || body.reason === "Revoked")) {
      return new HeraldError(body.reason, `${what}: HTTP 410 ${body.reason}${detail ? `: ${detail}` : ""}`, { status: 410, fatal: true });
    }
  } catch {
    // not a problem document
  }
  const retryAfter = Number(res.headers.get("Retry-After"));
  return new HeraldError(code, `${what}: HTTP ${res.status} ${code}${detail ? `: ${detail}` : ""}`, {
    status: res.status,
    retryAfterMs: Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter * 1000 : undefined,
    ...(sid !== undefined ? { sid } : {}),
  });
}

function isSessionGone(e: HeraldError): boolean {
  return e.status === 410 || (e.status === 404 && e.code !== "UnknownSubscription") || e.code === "SessionExpired";
}

function isTransient(e: HeraldError): boolean {
  return e.status === undefined || e.status === 408 || e.status === 429 || e.status >= 500;
}

/**
 * The subscribe request's body (longpoll §1.2): `{"sid", "pattern", "noEcho"}`, with `"join"` and `"presence"`
 * when the options ask to be present or for the topic's events (README §15), `"delta": true` when they ask for
 * deltas (README §11.2), `"since": {"offset", "epoch"}` to
 * resume (README §13), or `"queue": "<name>"` to join a queue group (README §14; never both). The offset is
 * written as JSON digits, exact even above 2^53.
 */
function subscribeBody(sid: number, pattern: string, options: number, since: HistoryPosition | null, queue: string | null): string {
  const noEcho = (options & SubscribeOptions.NoEcho) !== 0;
  const presence = {
    ...((options & SubscribeOptions.Join) !== 0 ? { join: true } : {}),
    ...((options & SubscribeOptions.PresenceEvents) !== 0 ? { presence: true } : {}),
    ...((options & SubscribeOptions.Delta) !== 0 ? { delta: true } : {}),
  };
  if (queue !== null) return JSON.stringify({ sid, pattern, noEcho, ...presence, queue });
  const body = JSON.stringify({ sid, pattern, noEcho, ...presence });
  if (since === null) return body;
  return `${body.slice(0, -1)},"since":{"offset":${String(since.offset)},"epoch":${JSON.stringify(since.epoch)}}}`;
}

/** The `Authorization` header of a credential (longpoll §1.1), or none. */
function bearer(auth: string | null): Record<string, string> {
  return auth !== null ? { Authorization: `Bearer ${auth}` } : {};
}

/** `init` with the session owner's credential added to its headers (longpoll §1.1). */
function owned(init: RequestInit, auth: string | null): RequestInit {
  return { ...init, headers: { ...(init.headers as Record<string, string> | undefined), ...bearer(auth) } };
}

/** fetch with a timeout and an outer abort signal; network failures become `ConnectionLost` errors. */
async function timedFetch(
  fetchFn: FetchFn,
  url: string,
  init: RequestInit,
  timeoutMs: number,
  outer: AbortSignal | undefined,
): Promise<{ res: Response; done: () => void; signal: AbortSignal }> {
  const ctrl = new AbortController();
  const onAbort = (): void => ctrl.abort();
  outer?.addEventListener("abort", onAbort, { once: true });
  if (outer?.aborted) ctrl.abort();
  const timer = setTimeout(() => ctrl.abort(), timeoutMs);
  const done = (): void => {
    clearTimeout(timer);
    outer?.removeEventListener("abort", onAbort);
  };
  try {
    const res = await fetchFn(url, { ...init, signal: ctrl.signal });
    return { res, done, signal: ctrl.signal };
  } catch (e) {
    done();
    throw new HeraldError("ConnectionLost", `${init.method ?? "GET"} ${url}: ${(e as Error).message ?? e}`, { cause: e });
  }
}

export class LongPollTransport implements Transport {
  readonly info: TransportInfo;
  /** Granted at create (longpoll §1.4): MESSAGEs of the broker's sids carrying its notices are read as SUBSCRIBED and Unsubscribed. */
  private readonly serverSubscriptions: boolean;
  readonly maxTopic: number;
  readonly maxSubscriptions = Infinity;
  readonly headerGrant: HeaderGrant;
  private readonly maxBodyBytes: number;
  private readonly pollTimeoutMs: number;
  private readonly inactivityTimeoutMs: number;
  /** When the broker last answered a request of this session (a session idle longer has ended there). */
  private lastAnswer = Date.now();
  private ack = 0;
  private readonly ops: Op[] = [];
  private queuedBytes = 0;
  private opsRunning = false;
  private solo = 0;
  private stopped = false;
  private readonly stop = new AbortController();
  private readonly troubled = new Set<"poll" | "ops">();
  /** The last payload of each subscription that receives deltas (README §11.2). */
  private readonly deltaBases = new DeltaBases(MAX_DECOMPRESSED);
  private readonly sessionUrl: string;
  private readonly base: string;

  private constructor(
    base: string,
    session: SessionInfo,
    private readonly fetchFn: FetchFn,
    private readonly options: TransportOptions,
    private readonly events: TransportEvents,
  ) {
    this.base = base;
    this.sessionUrl = `${base}poll/sessions/${encodeURIComponent(session.session)}`;
    this.maxTopic = session.maxTopicLength ?? DEFAULT_MAX_TOPIC;
    this.maxBodyBytes = session.maxBodyBytes ?? 1024 * 1024;
    this.pollTimeoutMs = session.pollTimeoutMs ?? 15_000;
    this.inactivityTimeoutMs = session.inactivityTimeoutMs ?? 60_000;
    const limits: Record<string, number> = {};
    for (const [key, value] of Object.entries(session)) if (typeof value === "number") limits[key] = value;
    const headers = session.headers === true;
    this.serverSubscriptions = headers && options.serverSubscriptions === true && session.serverSubscriptions === true;
    this.headerGrant = {
      headers,
      maxHeaders: session.maxHeaders ?? DEFAULT_MAX_HEADERS,
      maxHeaderBytes: session.maxHeaderBytes ?? DEFAULT_MAX_HEADER_BYTES,
    };
    this.info = {
      transport: "longpoll",
      compression: session.zstd === true,
      headers,
      noResponders: headers && session.noResponders === true,
      history: headers && session.history === true,
      queueGroups: session.queueGroups === true,
      presence: headers && session.presence === true,
      deltas: session.deltas === true,
      limits,
      ...(typeof session.inboxPrefix === "string" ? { inboxPrefix: session.inboxPrefix } : {}),
    };
  }

  /** Creates a session (`POST /poll/sessions`) and starts polling. */
  static async open(url: URL, options: TransportOptions, events: TransportEvents): Promise<LongPollTransport> {
    const base = url.href.endsWith("/") ? url.href : `${url.href}/`;
    const fetchFn: FetchFn = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    let call;
    try {
      call = await timedFetch(
        fetchFn,
        `${base}poll/sessions`,
        {
          method: "POST",
          headers: {
            "Content-Type": "application/json",
            // longpoll §1.1: the session is bound to the credential's identity; every request on it carries it too.
            ...bearer(options.auth),
          },
          body: JSON.stringify({
            client: options.name,
            zstd: options.compression,
            headers: options.headers,
            noResponders: options.headers && options.noResponders,
            history: options.headers,
            ...(options.deltas === true ? { deltas: true } : {}),
            // README §15.1: what others see beside this session's presence; granted presence needs headers.
            ...(options.info !== null && options.info !== undefined ? { info: options.info } : {}),
            // longpoll §1.4: told of subscriptions the backend makes, with headers; off unless asked.
            ...(options.serverSubscriptions === true && options.headers ? { serverSubscriptions: true } : {}),
          }),
        },
        options.connectTimeoutMs,
        undefined,
      );
    } catch (e) {
      throw new HeraldError("ConnectFailed", (e as Error).message, { cause: e });
    }
    try {
      if (call.res.status !== 201) throw await problem(call.res, "Creating a long-poll session");
      const session = (await call.res.json()) as SessionInfo;
      if (typeof session.session !== "string") {
        throw new HeraldError("HttpError", "The broker's session answer has no session token.");
      }
      const transport = new LongPollTransport(base, session, fetchFn, options, events);
      void transport.pollLoop();
      return transport;
    } finally {
      call.done();
    }
  }

  private retryDelay(failures: number): number {
    return backoff(failures, this.options.retryDelayMs, this.options.maxRetryDelayMs);
  }

  // ---------------------------------------------------------------------------------------------------
  // Health: interrupted while a request keeps failing, resumed when both loops are fine again.

  private interrupt(source: "poll" | "ops", error: unknown): void {
    if (this.stopped) return;
    if (Date.now() - this.lastAnswer > this.inactivityTimeoutMs) {
      // No answer for longer than the session's inactivity timeout: the broker has ended it.
      this.lose(new HeraldError("SessionExpired", `No answer from the broker for ${this.inactivityTimeoutMs} ms: the session has ended.`, { cause: error }));
      return;
    }
    const wasFine = this.troubled.size === 0;
    this.troubled.add(source);
    if (wasFine) this.events.interrupted(error);
  }

  private resume(source: "poll" | "ops"): void {
    if (!this.troubled.delete(source) || this.stopped) return;
    if (this.troubled.size === 0) this.events.resumed();
  }

  private lose(error: HeraldError): void {
    if (this.stopped) return;
    this.stopped = true;
    this.stop.abort();
    // Waiting subscribes are not refused: they are sent again on the next session.
    this.rejectOps(new HeraldError("ConnectionLost", `The long-poll session was lost: ${error.message}`, { cause: error }), false);
    this.events.lost(error);
  }

  private rejectOps(error: HeraldError, publishesToo: boolean): void {
    for (let i = this.ops.length - 1; i >= 0; i--) {
      const op = this.ops[i]!;
      if (op.kind === "pub") {
        if (!publishesToo) continue;
        op.p.reject(error);
      } else {
        op.done.reject(error);
      }
      this.ops.splice(i, 1);
    }
  }

  // ---------------------------------------------------------------------------------------------------
  // Polling (longpoll §2)

  private async pollLoop(): Promise<void> {
    let failures = 0;
    while (!this.stopped) {
      let call;
      try {
        call = await timedFetch(
          this.fetchFn,
          `${this.sessionUrl}/messages?ack=${this.ack}`,
          owned({ method: "GET", headers: { Accept: FRAMES_MEDIA_TYPE }, cache: "no-store" }, this.options.auth),
          this.pollTimeoutMs + 15_000,
          this.stop.signal,
        );
      } catch (e) {
        if (this.stopped) return;
        failures++;
        this.interrupt("poll", e);
        await sleep(this.retryDelay(failures), this.stop.signal);
        continue;
      }
      this.lastAnswer = Date.now();
      try {
        const { res } = call;
        if (res.status === 200) {
          // Reading the body is part of the transit: if it fails, the same ack asks for it again.
          const body = new Uint8Array(await res.arrayBuffer());
          if (this.stopped) return;
          this.deliver(res.headers, body);
          if (failures > 0) {
            failures = 0;
            this.resume("poll");
          }
          continue;
        }
        const error = await problem(res, "Polling");
        if (this.stopped) return;
        if (res.status === 409) {
          // PollReplaced: a newer poll took over this session (ours, abandoned after a timeout, or another
          // tab sharing it). Poll again, after a pause so two pollers cannot spin.
          await sleep(1000, this.stop.signal);
          continue;
        }
        if (isSessionGone(error) || res.status === 400) {
          this.lose(error);
          return;
        }
        failures++;
        this.interrupt("poll", error);
        await sleep(Math.max(error.retryAfterMs ?? 0, this.retryDelay(failures)), this.stop.signal);
      } catch (e) {
        // The body was cut or our timeout aborted it: poll again with the same ack.
        if (this.stopped) return;
        failures++;
        this.interrupt("poll", e);
        await sleep(this.retryDelay(failures), this.stop.signal);
      } finally {
        call.done();
      }
    }
  }

  /**
   * A MESSAGE of a broker's sid whose header block carries `Herald-Subscribed` or `Herald-Unsubscribed` (longpoll §1.4):
   * the subscription made, as TCP's SUBSCRIBED makes it, or ended, as an `Unsubscribed` ERROR naming it ends it. False for
   * any other message (a presence event, a message with headers of its own).
   */
  private serverNotice(sid: number, topic: string, headers: MessageHeaders | undefined): boolean {
    for (const [key, values] of headers ?? []) {
      if (key === "Herald-Subscribed" && values.length === 1 && /^[0-9]+$/.test(values[0]!)) {
        this.events.subscribed?.(sid, topic, Number(values[0]));
        return true;
      }
      if (key === "Herald-Unsubscribed") {
        this.events.revoked(sid, new HeraldError("Unsubscribed", `Broker: ${values.join(" ")}`, { sid }));
        return true;
      }
    }
    return false;
  }

  /** Delivers a binary poll body (longpoll §2.1) and moves `ack` past it. */
  private deliver(headers: Headers, body: Uint8Array): void {
    let result: PollResult;
    try {
      result = parsePollBody(this.ack, headers, body, MAX_DECOMPRESSED + 65536);
    } catch (e) {
      // Not a transit failure (the body arrived whole): skip what the headers say it held, and say so.
      const first = Number(headers.get("Herald-First-Sequence"));
      const count = Number(headers.get("Herald-Count"));
      if (Number.isSafeInteger(first) && count > 0) this.ack = Math.max(this.ack, first + count - 1);
      this.events.error(new HeraldError("MalformedFrame", `A poll answer could not be read: ${(e as Error).message}`, { cause: e }));
      return;
    }
    if (result.dropped > 0) {
      this.events.error(
        new HeraldError("MessagesDropped", `The broker dropped ${result.dropped} messages of this session (its slow-consumer policy, or shed on their way in from another cluster node).`, {
          count: result.dropped,
        }),
      );
    }
    for (const sid of result.gaps) this.events.gap(sid); // told as a resume that did not recover (spec §13's 410)
    for (const message of result.messages) {
      if (message.seq <= this.ack) continue; // already delivered
      this.ack = message.seq;
      let payload = message.payload;
      if (message.flags & PayloadFlags.Zstd) {
        try {
          if (!this.info.compression) throw new HeraldError("DecompressionFailed", "Compressed MESSAGE without Zstd negotiated.");
          payload = zstdDecompress(payload, MAX_DECOMPRESSED);
        } catch (e) {
          this.events.error(e as HeraldError);
          continue;
        }
      }
      if (this.serverSubscriptions && message.sid >= SERVER_SIDS && this.serverNotice(message.sid, message.topic, message.headers)) continue;
      const delta = (message.flags & PayloadFlags.Delta) !== 0;
      const taken = this.deltaBases.take(message.sid, delta, payload);
      if (taken.payload === null) {
        if (taken.failure !== null) this.events.deltaFailed(message.sid, taken.failure);
        continue;
      }
      payload = taken.payload;
      this.events.message(message.sid, message.topic, message.replyTo, payload, message.headers, delta);
      if (this.stopped) return;
    }
    this.ack = Math.max(this.ack, result.ack);
  }

  // ---------------------------------------------------------------------------------------------------
  // The ordered queue of subscribe, unsubscribe and publish requests

  private enqueue(op: Op): void {
    this.ops.push(op);
    void this.runOps();
  }

  private async runOps(): Promise<void> {
    if (this.opsRunning) return;
    this.opsRunning = true;
    let failures = 0;
    try {
      while (this.ops.length > 0 && !this.stopped) {
        const op = this.ops[0]!;
        if (op.kind === "flush") {
          this.ops.shift();
          op.done.resolve();
          continue;
        }
        let taken = 1;
        try {
          if (op.kind === "sub") {
            await this.send("POST", "/subscriptions", "Subscribing", {
              headers: { "Content-Type": "application/json" },
              body: subscribeBody(op.sid, op.pattern, op.options, op.since, op.queue),
            }, op.sid);
          } else if (op.kind === "unsub") {
            try {
              await this.send("DELETE", `/subscriptions/${op.sid}`, "Unsubscribing", {});
            } catch (e) {
              if ((e as HeraldError).code !== "UnknownSubscription") throw e;
            }
          } else {
            taken = await this.sendPublishes();
          }
        } catch (e) {
          if (this.stopped) break;
          const error = e as HeraldError;
          if (isSessionGone(error)) {
            this.lose(error);
            break;
          }
          if (isTransient(error)) {
            failures++;
            this.interrupt("ops", error);
            await sleep(Math.max(error.retryAfterMs ?? 0, this.retryDelay(failures)), this.stop.signal);
            continue;
          }
          // Refused (400, 413): a batch is all or none, so send its publishes one by one to fail only the bad one.
          if (op.kind === "pub" && taken > 1) {
            this.solo = taken;
            continue;
          }
          this.ops.shift();
          if (op.kind === "pub") {
            this.queuedBytes -= op.size;
            this.solo = Math.max(0, this.solo - 1);
            op.p.reject(error);
          } else {
            op.done.reject(error);
          }
          continue;
        }
        if (failures > 0) {
          failures = 0;
          this.resume("ops");
        }
        const done = this.ops.splice(0, taken);
        for (const d of done) {
          if (d.kind === "pub") {
            this.queuedBytes -= d.size;
            this.solo = Math.max(0, this.solo - 1);
            d.p.resolve();
          } else if (d.kind !== "flush") {
            d.done.resolve();
          }
        }
      }
    } finally {
      this.opsRunning = false;
    }
  }

  /** Sends the publishes at the head of the queue (one raw, or several as frames); returns how many. */
  private async sendPublishes(): Promise<number> {
    const batch: Extract<Op, { kind: "pub" }>[] = [];
    let bytes = 0;
    const max = this.solo > 0 ? 1 : MAX_PUBLISHES_PER_REQUEST;
    for (const op of this.ops) {
      if (op.kind !== "pub" || batch.length >= max) break;
      if (batch.length > 0 && bytes + op.size > this.maxBodyBytes) break;
      batch.push(op);
      bytes += op.size;
    }
    if (batch.length === 1) {
      const { p, headers } = batch[0]!;
      let query = `?topic=${encodeURIComponent(p.topic)}${p.replyTo ? `&replyTo=${encodeURIComponent(p.replyTo)}` : ""}`;
      // longpoll §1.3: one `header=Key:Value` parameter per value, in order.
      for (const [key, values] of headers ?? []) for (const value of values) query += `&header=${encodeURIComponent(`${key}:${value}`)}`;
      const payload = p.payload;
      await this.send("POST", `/publish${query}`, "Publishing", { body: payload as BodyInit });
      return 1;
    }
    const frames = batch.map((op) => encodePublish(op.p.topic, op.p.replyTo, PayloadFlags.None, op.p.payload, op.headers));
    const body = new Uint8Array(frames.reduce((n, f) => n + f.length, 0));
    let at = 0;
    for (const frame of frames) {
      body.set(frame, at);
      at += frame.length;
    }
    await this.send("POST", "/publish", "Publishing", { headers: { "Content-Type": FRAMES_MEDIA_TYPE }, body });
    return batch.length;
  }

  /** One request on the session; anything but 2xx throws the problem as a HeraldError (naming `sid`, for a subscribe). */
  private async send(method: string, path: string, what: string, init: RequestInit, sid?: number): Promise<void> {
    const call = await timedFetch(this.fetchFn, this.sessionUrl + path, owned({ ...init, method }, this.options.auth), REQUEST_TIMEOUT_MS, this.stop.signal);
    this.lastAnswer = Date.now();
    try {
      if (call.res.status >= 200 && call.res.status < 300) {
        await call.res.arrayBuffer().catch(() => undefined);
        return;
      }
      throw await problem(call.res, what, sid);
    } finally {
      call.done();
    }
  }

  // ---------------------------------------------------------------------------------------------------
  // Transport

  subscribe(sid: number, pattern: string, options: number, since: HistoryPosition | null = null, queue: string | null = null): Promise<void> {
    if (this.stopped) return Promise.reject(new HeraldError("ConnectionLost", "The long-poll session has ended."));
    // Presence only on a session that was granted it (created with headers, README §15): any other answers 400.
    if ((options & (SubscribeOptions.Join | SubscribeOptions.PresenceEvents)) !== 0 && this.info.presence !== true) {
      return Promise.reject(presenceNotNegotiated(`Subscription to '${pattern}' with presence`));
    }
    // A queue only on a session that said queueGroups: an older broker would take it as a plain subscription.
    if (queue && this.info.queueGroups !== true) return Promise.reject(queueGroupsNotNegotiated(pattern, queue));
    if (queue && since !== null) {
      return Promise.reject(new RangeError("A subscribe cannot name both a queue group and a since: a queue group has no position to resume (README §14)."));
    }
    // Deltas only on a session granted them; the broker may still ignore the ask (README §4.3), then every message is full.
    if ((options & SubscribeOptions.Delta) !== 0) {
      if (this.info.deltas === true) this.deltaBases.track(sid);
      else options &= ~SubscribeOptions.Delta;
    }
    const done = deferred<void>();
    // since only on a session granted headers: any other answers it 400 MalformedRequest (longpoll §1.2).
    this.enqueue({ kind: "sub", sid, pattern, options, since: this.info.history === true ? since : null, queue: queue || null, done });
    return done.promise;
  }

  /**
   * A topic's presence over HTTP (longpoll §6): `GET /presence` with the session's credential, answered as the
   * PRESENCE_REPLY it stands for. Its refusals (`403 PermissionDenied`, `400 InvalidTopic`, `503
   * PresenceUnavailable`) become the reply's code, as on TCP; any other failure rejects.
   */
  async presence(topic: string, limit: number, cursor: string | null, timeoutMs: number): Promise<PresenceReplyFrame> {
    if (this.stopped) throw new HeraldError("ConnectionLost", "The long-poll session has ended.");
    if (this.info.presence !== true) throw presenceNotNegotiated(`Presence query of '${topic}'`);
    const query = new URLSearchParams({ topic, limit: String(limit) });
    if (cursor !== null) query.set("cursor", cursor);
    const call = await timedFetch(this.fetchFn, `${this.base}presence?${query.toString()}`, owned({ method: "GET" }, this.options.auth), timeoutMs, this.stop.signal);
    try {
      if (call.res.status !== 200) {
        const refused = await problem(call.res, `Presence query of '${topic}'`);
        const code = PRESENCE_REFUSALS[refused.code];
        if (code === undefined) throw refused;
        return { type: 11, requestId: 0, code, members: 0, identities: 0, entries: [], next: null };
      }
      const answer = (await call.res.json()) as PresenceAnswer;
      const entries: PresenceEntry[] = (answer.entries ?? []).map((e) => ({ client: String(e.client ?? ""), identity: String(e.identity ?? ""), info: typeof e.info === "string" ? e.info : null }));
      return { type: 11, requestId: 0, code: 0, members: answer.members ?? 0, identities: answer.identities ?? 0, entries, next: typeof answer.next === "string" ? answer.next : null };
    } finally {
      call.done();
    }
  }

  unsubscribe(sid: number, again = false): Promise<void> {
    if (!again) this.deltaBases.forget(sid);
    if (this.stopped) return Promise.resolve();
    const done = deferred<void>();
    this.enqueue({ kind: "unsub", sid, done });
    return done.promise;
  }

  publish(p: PendingPublish): boolean {
    if (this.stopped) return false;
    const headers = admitHeaders(p, this.headerGrant);
    if (headers === null) return true;
    // Frame overhead: prefix, array, type, topic and reply_to headers, flags, bin header; and the header block.
    const size = p.payload.length + p.topic.length + (p.replyTo?.length ?? 0) + 24 + headers.bytes;
    if (size > this.maxBodyBytes) {
      p.reject(new HeraldError("BodyTooLarge", `A payload of ${p.payload.length} bytes is over the session's maxBodyBytes of ${this.maxBodyBytes}.`));
      return true;
    }
    if (this.queuedBytes + size > this.options.maxBufferBytes) {
      p.reject(new HeraldError("BufferFull", `More than ${this.options.maxBufferBytes} bytes are waiting to be published.`));
      return true;
    }
    this.queuedBytes += size;
    this.enqueue({ kind: "pub", p, size, headers: headers.pairs });
    return true;
  }

  flush(): Promise<void> {
    if (this.stopped) return Promise.reject(new HeraldError("ConnectionLost", "The long-poll session has ended."));
    const done = deferred<void>();
    this.enqueue({ kind: "flush", done });
    return done.promise;
  }

  takeUnsent(): PendingPublish[] {
    const unsent: PendingPublish[] = [];
    for (const op of this.ops.splice(0)) {
      if (op.kind === "pub") unsent.push(op.p);
      else op.done.reject(new HeraldError("ConnectionLost", "The long-poll session has ended."));
    }
    this.queuedBytes = 0;
    return unsent;
  }

  async close(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.stop.abort();
    this.rejectOps(new HeraldError("Closed", "The client was closed."), true);
    // End the session on the broker (best effort: it would expire on its own).
    try {
      const call = await timedFetch(this.fetchFn, this.sessionUrl, owned({ method: "DELETE" }, this.options.auth), 2000, undefined);
      await call.res.arrayBuffer().catch(() => undefined);
      call.done();
    } catch {
      // the broker is gone or slow: the session expires by itself
    }
  }

  /** The highest sequence number received (the next poll's `ack`). */
  get acknowledged(): number {
    return this.ack;
  }
}
