/**
 * What one connection (or long-poll session) keeps to apply deltas (spec §11.2): for each subscription that asked
 * for them, the last payload it received, full or rebuilt, which the next delta on that sid is made against. The
 * TCP/WebSocket session and the long-poll transport share it, so both take a MESSAGE the same way.
 *
 * A delta that cannot be applied (none kept to apply it to, a malformed delta, a checksum mismatch, a target over
 * the limit) loses that message: the sid then waits for a full message, dropping the deltas that come before it
 * (they are made against what was lost), and the failure is reported once so that the client can subscribe the sid
 * again, which makes the broker send a full message first.
 */
import { applyDelta } from "./protocol/delta.js";
import { HeraldError } from "./protocol/errors.js";

/** A delta sid that has received nothing yet: its first MESSAGE is full (spec §11.2). */
const NOTHING: unique symbol = Symbol("nothing yet");
/** A delta sid whose last delta failed: deltas are dropped until a full message comes. */
const WAITING_FOR_FULL: unique symbol = Symbol("waiting for a full message");

type Base = Uint8Array | typeof NOTHING | typeof WAITING_FOR_FULL;

/** What {@link DeltaBases.take} made of a MESSAGE: the payload to deliver, or nothing (`failure` says why, once). */
export type Taken = { payload: Uint8Array; failure?: undefined } | { payload: null; failure: HeraldError | null };

export class DeltaBases {
  private readonly bases = new Map<number, Base>();

  /** @param maxBytes The largest payload a delta may rebuild (the connection's limit). */
  constructor(private readonly maxBytes: number) {}

  /**
   * Subscription `sid` asked for deltas (and the broker granted them). Keeps a sid that is waiting for a full message
   * waiting: deltas sent to its previous subscription may still be on their way.
   */
  track(sid: number): void {
    if (this.bases.get(sid) !== WAITING_FOR_FULL) this.bases.set(sid, NOTHING);
  }

  /** Subscription `sid` ended: its payload is no longer kept. */
  forget(sid: number): void {
    this.bases.delete(sid);
  }

  /**
   * A MESSAGE for `sid` (its payload already decompressed): a full one is kept as the sid's base and delivered; a
   * delta (`delta` true) is applied to the base and the result kept and delivered. A delta that cannot be applied
   * gives no payload, and a failure the first time (a `DecompressionFailed` naming the sid).
   */
  take(sid: number, delta: boolean, payload: Uint8Array): Taken {
    const base = this.bases.get(sid);
    if (!delta) {
      // Kept only for delta sids; a payload that is a view of a larger read buffer is copied, so as not to hold it all.
      if (base !== undefined) this.bases.set(sid, payload.byteLength === payload.buffer.byteLength ? payload : payload.slice());
      return { payload };
    }
    if (base === WAITING_FOR_FULL) return { payload: null, failure: null };
    this.bases.set(sid, WAITING_FOR_FULL);
    if (base === undefined || base === NOTHING) {
      const why = base === undefined ? "that did not ask for deltas" : "before any full message";
      return { payload: null, failure: new HeraldError("DecompressionFailed", `A delta for subscription ${sid}, ${why} (spec §11.2).`, { sid }) };
    }
    try {
      const full = applyDelta(base, payload, this.maxBytes);
      this.bases.set(sid, full);
      return { payload: full };
    } catch (e) {
      const error = e as HeraldError;
      return { payload: null, failure: new HeraldError("DecompressionFailed", `Subscription ${sid}: ${error.message}`, { sid, cause: error }) };
    }
  }
}
