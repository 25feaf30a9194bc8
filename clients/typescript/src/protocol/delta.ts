/**
 * Fossil deltas of MESSAGE payloads (spec §11): a delta turns the previous payload a subscription received into
 * this publication's payload. Applied with `fossil-delta`, the reference implementation the spec's vectors are
 * made with (pure JavaScript, browsers and Node alike), behind two guards it does not have itself: the target
 * size the delta declares is checked against the limit before anything is built (no decompression bombs), and
 * whatever it throws on a malformed delta becomes a `DecompressionFailed` {@link HeraldError}.
 */
import { applyDelta as fossilApply, getDeltaTargetSize } from "fossil-delta";
import { HeraldError } from "./errors.js";

function failed(message: string, cause?: unknown): HeraldError {
  return new HeraldError("DecompressionFailed", message, { cause });
}

/**
 * Applies the Fossil `delta` to `source`, refusing a target over `maxBytes` before building it, and any malformed
 * delta (truncated, a bad command, a copy past the source's end, a checksum or size mismatch), with
 * `DecompressionFailed`.
 */
export function applyDelta(source: Uint8Array, delta: Uint8Array, maxBytes: number): Uint8Array {
  let size: number;
  try {
    size = getDeltaTargetSize(delta);
  } catch (e) {
    throw failed(`Delta is not valid: ${(e as Error).message}`, e);
  }
  if (size > maxBytes) throw failed(`Delta declares ${size} bytes, more than the limit of ${maxBytes}.`);
  try {
    return fossilApply(source, delta);
  } catch (e) {
    throw failed(`Delta is not valid: ${(e as Error).message}`, e);
  }
}
