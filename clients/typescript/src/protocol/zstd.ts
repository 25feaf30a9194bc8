/**
 * Zstd decompression of compressed MESSAGE payloads (spec §11) with `fzstd`, a pure-JavaScript
 * decompressor that runs in browsers and Node alike. Bounded: a frame that declares, or turns out, to be
 * larger than the limit is refused before or while it is decompressed (no decompression bombs).
 */
import { Decompress, decompress } from "fzstd";
import { HeraldError } from "./errors.js";

const ZSTD_MAGIC = 0xfd2fb528;
/** Largest window this client accepts when the frame does not say its content size. */
const MAX_WINDOW = 128 * 1024 * 1024;

function failed(message: string, cause?: unknown): HeraldError {
  return new HeraldError("DecompressionFailed", message, { cause });
}

/** Frame_Content_Size and window size from a Zstd frame header (RFC 8878 §3.1.1.1), or null when absent. */
function readHeader(data: Uint8Array): { contentSize: number | null; windowSize: number } {
  if (data.length < 6) throw failed("Zstd payload is shorter than a frame header.");
  const magic = (data[0]! | (data[1]! << 8) | (data[2]! << 16) | (data[3]! << 24)) >>> 0;
  if (magic !== ZSTD_MAGIC) throw failed("Payload is not a Zstd frame (bad magic number).");
  const fhd = data[4]!;
  const fcsFlag = fhd >> 6;
  const singleSegment = (fhd >> 5) & 1;
  const dictFlag = fhd & 3;
  let pos = 5;
  let windowSize = 0;
  if (!singleSegment) {
    const wd = data[pos++]!;
    const base = 2 ** (10 + (wd >> 3));
    windowSize = base + (base / 8) * (wd & 7);
  }
  pos += [0, 1, 2, 4][dictFlag]!;
  const fcsBytes = fcsFlag === 0 ? singleSegment : 1 << fcsFlag;
  if (fcsBytes === 0) return { contentSize: null, windowSize };
  if (data.length < pos + fcsBytes) throw failed("Zstd frame header is truncated.");
  let size = 0;
  for (let i = fcsBytes - 1; i >= 0; i--) size = size * 256 + data[pos + i]!;
  if (fcsBytes === 2) size += 256;
  return { contentSize: size, windowSize: singleSegment ? size : windowSize };
}

/**
 * Decompresses one Zstd frame, refusing more than `maxBytes` of output (`DecompressionFailed`).
 */
export function zstdDecompress(data: Uint8Array, maxBytes: number): Uint8Array {
  const { contentSize, windowSize } = readHeader(data);
  if (contentSize !== null && contentSize > maxBytes) {
    throw failed(`Zstd frame declares ${contentSize} bytes, more than the limit of ${maxBytes}.`);
  }
  if (windowSize > Math.max(MAX_WINDOW, maxBytes)) {
    throw failed(`Zstd frame asks for a window of ${windowSize} bytes.`);
  }
  try {
    if (contentSize !== null) {
      const out = decompress(data);
      if (out.length > maxBytes) throw failed(`Zstd payload decompresses past ${maxBytes} bytes.`);
      return out;
    }
    // No content size: stream it and count.
    const parts: Uint8Array[] = [];
    let total = 0;
    const stream = new Decompress((chunk) => {
      total += chunk.length;
      if (total > maxBytes) throw failed(`Zstd payload decompresses past ${maxBytes} bytes.`);
      if (chunk.length) parts.push(chunk.slice());
    });
    stream.push(data, true);
    if (parts.length === 1) return parts[0]!;
    const out = new Uint8Array(total);
    let at = 0;
    for (const part of parts) {
      out.set(part, at);
      at += part.length;
    }
    return out;
  } catch (e) {
    if (e instanceof HeraldError) throw e;
    throw failed(`Zstd payload is not valid: ${(e as Error).message}`, e);
  }
}
