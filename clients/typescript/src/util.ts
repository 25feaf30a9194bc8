/** Small helpers shared by the transports and the client (browser and Node). */

export interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
  settled: boolean;
}

export function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  const d: Deferred<T> = {
    promise,
    settled: false,
    resolve(value) {
      if (d.settled) return;
      d.settled = true;
      resolve(value);
    },
    reject(error) {
      if (d.settled) return;
      d.settled = true;
      reject(error);
    },
  };
  return d;
}

/** Marks a promise as handled (callers may still await it and see the rejection). */
export function quiet<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => undefined);
  return promise;
}

/** A timer that does not keep Node alive. */
export function unrefTimer(timer: ReturnType<typeof setTimeout>): void {
  (timer as { unref?: () => void }).unref?.();
}

/** Sleeps `ms`, or less if `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * Exponential backoff with jitter: attempt 1 waits about `initial`, each next attempt twice as long, up
 * to `max`; the wait is drawn between half and all of that ("equal jitter"), so clients that lost the
 * same broker do not all come back at the same instant.
 */
export function backoff(attempt: number, initial: number, max: number): number {
  const ceiling = Math.min(max, initial * 2 ** Math.max(0, Math.min(attempt - 1, 30)));
  return ceiling / 2 + Math.random() * (ceiling / 2);
}

const utf8 = new TextEncoder();

export function toBytes(payload: Uint8Array | ArrayBuffer | string | undefined | null): Uint8Array {
  if (payload === undefined || payload === null) return new Uint8Array(0);
  if (typeof payload === "string") return utf8.encode(payload);
  if (payload instanceof Uint8Array) return payload;
  if (payload instanceof ArrayBuffer) return new Uint8Array(payload);
  if (ArrayBuffer.isView(payload)) {
    const view = payload as ArrayBufferView;
    return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  }
  throw new TypeError("A payload is a Uint8Array, an ArrayBuffer or a string.");
}

const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/** A random token of `length` letters and digits (crypto-strong; safe as a topic token). */
export function randomToken(length = 22): string {
  const bytes = new Uint8Array(length);
  globalThis.crypto.getRandomValues(bytes);
  let out = "";
  for (const b of bytes) out += ALPHABET[b % ALPHABET.length];
  return out;
}
