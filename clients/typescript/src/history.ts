/**
 * History and resume (spec §13, CLIENTS.md step 12): the positions the broker stamps on the messages of
 * topics that keep a history, and the status MESSAGE that answers a SUBSCRIBE with `since`.
 */
import type { HeraldHeaders } from "./headers.js";
import { MAX_EPOCH_BYTES, type HistoryPosition } from "./protocol/frames.js";
import type { Subscription } from "./subscription.js";

/** The broker's header keys of history and resume (spec §13). */
export const HistoryHeaders = {
  /** `200` (recovered) or `410` (not recovered) on a status MESSAGE. */
  Status: "Herald-Status",
  /** Why, for people (`Recovered`, `Live`, `History lost: ...`, ...). */
  Description: "Herald-Description",
  /** A message's offset in its topic, decimal. */
  Offset: "Herald-Offset",
  /** The history that holds it. */
  Epoch: "Herald-Epoch",
} as const;

/** What a subscription's first SUBSCRIBE sends as `since`: no position yet, "from now, tell me where" (spec §4.3). */
export const FROM_NOW: HistoryPosition = Object.freeze({ offset: 0, epoch: "" });

const DECIMAL = /^(0|[1-9][0-9]{0,19})$/;
const UINT64_MAX = 0xffffffffffffffffn;
const utf8 = new TextEncoder();

/**
 * The position a message's headers carry (`Herald-Offset` and `Herald-Epoch`), or `null` when they carry
 * none (a topic without history, a client without headers) or one that is not a valid position.
 */
export function positionOf(headers: HeraldHeaders): HistoryPosition | null {
  if (headers.size === 0) return null;
  const offsetText = headers.get(HistoryHeaders.Offset);
  const epoch = headers.get(HistoryHeaders.Epoch);
  if (offsetText === null || epoch === null || !DECIMAL.test(offsetText)) return null;
  if (utf8.encode(epoch).length > MAX_EPOCH_BYTES) return null;
  const big = BigInt(offsetText);
  if (big > UINT64_MAX) return null;
  const offset = big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
  return Object.freeze({ offset, epoch });
}

/** Whether a pattern has wildcards (spec §5): such a subscription has no single history to resume. */
export function hasWildcards(pattern: string): boolean {
  return pattern.includes("*") || pattern.includes(">");
}

/**
 * How a subscription's resume went after a reconnect (spec §13): the broker's status answer to a
 * SUBSCRIBE that carried the subscription's position. Reported by the subscription's `onResume` option
 * and the client's `resume` event.
 */
export interface ResumeEvent {
  /** The subscription that was resumed. */
  readonly subscription: Subscription;
  /**
   * `true` (status 200): every message after the kept position follows, then the live stream, nothing was
   * lost. `false` (410): what was published while disconnected cannot be replayed (the history was lost,
   * or is too short); the live stream goes on from `position`: recover from your own source of truth.
   */
  readonly recovered: boolean;
  /** The broker's reason, for people (`Recovered`, `History lost: ...`, `Too old: ...`, ...). */
  readonly description: string;
  /** The topic's position when live delivery starts again; `null` when the topic keeps no history. */
  readonly position: HistoryPosition | null;
}
