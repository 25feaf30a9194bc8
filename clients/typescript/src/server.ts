/**
 * The broker's server API (protocol-spec/server-api.yaml) for Node backends: publish, broadcast and batch
 * publications, read a topic's history, presence and topics, the node's information, and act on clients (disconnect,
 * revoke, subscribe, unsubscribe: an admin key), over HTTP with an API key
 * (not a client token). Exported as `@herald/client/server` only, so a browser bundle of `@herald/client` never
 * carries it (nor a key). Each call is one `fetch`; the client holds no connection.
 *
 * ```ts
 * import { HeraldApiClient } from "@herald/client/server";
 * const api = new HeraldApiClient("http://127.0.0.1:8224", process.env.HERALD_API_KEY!);
 * const { duplicate } = await api.publish("orders.42", "paid", { idempotencyKey: "order-42-paid" });
 * ```
 */

/** What a publication may carry besides its topic and payload. */
export interface ApiPublishOptions {
  /** Headers, one value per key; none under `Herald-`. */
  headers?: Record<string, string>;
  /** A repeat on the same topic within the broker's idempotency window is not delivered again. */
  idempotencyKey?: string;
}

/** One publication of a batch. */
export interface ApiPublication extends ApiPublishOptions {
  topic: string;
  payload: string | Uint8Array;
}

/** One item's answer in a batch or broadcast: 200, or the status the item alone would have had, with the problem's code and detail. */
export interface ApiResult {
  status: number;
  duplicate?: boolean;
  code?: string;
  detail?: string;
}

export interface ApiHistoryEntry {
  offset: number;
  payload: Uint8Array;
  headers: Record<string, string[]>;
}

export interface ApiHistoryPage {
  topic: string;
  epoch: string;
  last: number;
  entries: ApiHistoryEntry[];
  /** The offset to pass as `after` for the next page; absent: none. */
  next?: number;
}

export interface ApiPresencePage {
  topic: string;
  members: number;
  identities: number;
  entries: { client: string; identity: string; info?: string }[];
  next?: string;
}

export interface ApiTopicsPage {
  subscriptions: number;
  patterns: number;
  truncated: boolean;
  entries: { pattern: string; subscribers: number }[];
  next?: string;
  /** The nodes that answered (their cluster id, absent on a single node) with their totals. */
  nodes: { node?: string; subscriptions: number; patterns: number; truncated: boolean }[];
  /** Cluster ids of the members that did not answer in time: their subscriptions are not counted. */
  silent: string[];
}

/** What a disconnect or revoke reached: the clients it ended, and the nodes that answered of those asked. */
export interface ApiReach {
  clients: number;
  nodes: number;
  nodes_asked: number;
}

/** An identity revoked until a time (RFC 3339), and the reason its clients are told. */
export interface ApiRevocation {
  identity: string;
  until: string;
  reason: string;
}

/** The server API refused a request: its HTTP status, the problem's `code` (`Unauthorized`, `Forbidden`, `RateLimited` ...), and `Retry-After` in seconds. */
export class HeraldApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = "HeraldApiError";
  }
}

export class HeraldApiClient {
  private readonly base: string;

  /**
   * @param baseUrl The API listener (`Herald:Api:Host`, `Herald:Api:Port`: http://127.0.0.1:8224 by default).
   * @param key The API key, sent as a bearer on every request.
   */
  constructor(
    baseUrl: string,
    private readonly key: string,
  ) {
    this.base = baseUrl.replace(/\/+$/, "");
  }

  /** Publishes one message; `duplicate` when its idempotency key was seen within the window (not delivered again). */
  async publish(topic: string, payload: string | Uint8Array, options: ApiPublishOptions = {}): Promise<{ duplicate: boolean }> {
    return (await this.send("POST", "publish", publication({ topic, payload, ...options }))) as { duplicate: boolean };
  }

  /** Publishes one message to every topic; one result per topic, in order. */
  async broadcast(topics: string[], payload: string | Uint8Array, options: ApiPublishOptions = {}): Promise<ApiResult[]> {
    const { topic: _, ...body } = publication({ topic: "", payload, ...options });
    return ((await this.send("POST", "broadcast", { topics, ...body })) as { results: ApiResult[] }).results;
  }

  /** Publishes in order, in one request; one result per publication. */
  async batch(items: ApiPublication[]): Promise<ApiResult[]> {
    return ((await this.send("POST", "batch", { items: items.map(publication) })) as { results: ApiResult[] }).results;
  }

  /** A history topic's kept messages with an offset above `after`, oldest first. */
  async history(topic: string, after = 0, limit = 100): Promise<ApiHistoryPage> {
    const page = (await this.send("GET", `history?${new URLSearchParams({ topic, after: String(after), limit: String(limit) })}`)) as Omit<ApiHistoryPage, "entries"> & {
      entries: { offset: number; data_base64: string; headers?: Record<string, string[]> }[];
    };
    return {
      ...page,
      entries: page.entries.map((e) => ({ offset: e.offset, payload: new Uint8Array(Buffer.from(e.data_base64, "base64")), headers: e.headers ?? {} })),
    };
  }

  /** A topic's occupancy and a page of its members, ordered by client id after `cursor`. */
  async presence(topic: string, limit?: number, cursor?: string): Promise<ApiPresencePage> {
    const query = new URLSearchParams({ topic });
    if (limit !== undefined) query.set("limit", String(limit));
    if (cursor !== undefined) query.set("cursor", cursor);
    return (await this.send("GET", `presence?${query}`)) as ApiPresencePage;
  }

  /** The patterns subscribed on the answering node with their subscribers, in ordinal order, after `after`. */
  async topics(options: { prefix?: string; after?: string; limit?: number } = {}): Promise<ApiTopicsPage> {
    const query = new URLSearchParams({ prefix: options.prefix ?? "", after: options.after ?? "" });
    if (options.limit !== undefined) query.set("limit", String(options.limit));
    return (await this.send("GET", `topics?${query}`)) as ApiTopicsPage;
  }

  /**
   * Ends one client (`{ client }`: its client id, from presence or `/connz`) or every client of an identity on every node
   * (`{ identity }`), telling each `reason` (a fatal `Disconnected`; the SDKs do not reconnect after it). Admin scope.
   */
  async disconnect(target: { client: string } | { identity: string }, reason?: string): Promise<ApiReach> {
    return (await this.send("POST", "clients/disconnect", { ...target, ...(reason === undefined ? {} : { reason }) })) as ApiReach;
  }

  /** Refuses `identity` until `until` on every node (HELLO, refresh, long-poll and SSE answered `Revoked`), ending what it holds now. */
  async revoke(identity: string, until: Date, reason?: string): Promise<ApiReach> {
    return (await this.send("POST", "revocations", { identity, until: until.toISOString(), ...(reason === undefined ? {} : { reason }) })) as ApiReach;
  }

  /** Lifts `identity`'s revocation everywhere; false when the answering node held none. */
  async unrevoke(identity: string): Promise<boolean> {
    try {
      await this.send("DELETE", `revocations/${encodeURIComponent(identity)}`);
      return true;
    } catch (e) {
      if (e instanceof HeraldApiError && e.status === 404) return false;
      throw e;
    }
  }

  /** The revocations in force on the answering node, earliest end first. */
  async revocations(): Promise<ApiRevocation[]> {
    return ((await this.send("GET", "revocations")) as { entries: ApiRevocation[] }).entries;
  }

  /**
   * Subscribes a connected client that asked for server subscriptions (TCP, WebSocket, a long-poll session or SSE stream
   * that asked) to `pattern`; resolves with the sid the broker gave it (from 2^31 up). Held to the client's subscribe
   * permissions unless `force`. `join` makes it a member of the topic, `presence` brings it the topic's presence events:
   * one topic, the client granted presence, its identity allowed to (which `force` does not lift).
   */
  async subscribeClient(client: string, pattern: string, options: { noEcho?: boolean; force?: boolean; join?: boolean; presence?: boolean } = {}): Promise<number> {
    const body = { client, pattern, no_echo: options.noEcho ?? false, force: options.force ?? false, join: options.join ?? false, presence: options.presence ?? false };
    return ((await this.send("POST", "clients/subscribe", body)) as { sid: number }).sid;
  }

  /** Ends every subscription of `client` to exactly `pattern`, telling it `reason`; resolves with the first sid ended. */
  async unsubscribeClient(client: string, pattern: string, reason?: string): Promise<number> {
    return ((await this.send("POST", "clients/unsubscribe", { client, pattern, ...(reason === undefined ? {} : { reason }) })) as { sid: number }).sid;
  }

  /** The answering node's information (`GET /api/v1/info`), as the broker sent it. */
  async info(): Promise<Record<string, unknown>> {
    return (await this.send("GET", "info")) as Record<string, unknown>;
  }

  private async send(method: "GET" | "POST" | "DELETE", path: string, body?: unknown): Promise<unknown> {
    const response = await fetch(`${this.base}/api/v1/${path}`, {
      method,
      headers: { authorization: `Bearer ${this.key}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    if (response.ok) return text === "" ? {} : JSON.parse(text); // 204: no body
    let code = response.status === 401 ? "Unauthorized" : response.statusText;
    let detail = `The server API answered ${response.status}.`;
    try {
      const problem = JSON.parse(text) as { code?: string; detail?: string };
      code = problem.code ?? code;
      detail = problem.detail ?? detail;
    } catch {
      // 401's empty body, or a proxy's page: the status says it.
    }
    const retryAfter = response.headers.get("retry-after");
    throw new HeraldApiError(response.status, code, detail, retryAfter === null ? undefined : Number(retryAfter));
  }
}

/** A publication as the API's JSON: text as `data`, bytes as `data_base64`. */
function publication(p: ApiPublication): Record<string, unknown> {
  return {
    topic: p.topic,
    ...(typeof p.payload === "string" ? { data: p.payload } : { data_base64: Buffer.from(p.payload).toString("base64") }),
    ...(p.headers === undefined ? {} : { headers: p.headers }),
    ...(p.idempotencyKey === undefined ? {} : { idempotency_key: p.idempotencyKey }),
  };
}
