/**
 * A strict MessagePack reader for frame bodies (spec §2). Frames have a fixed positional schema, so this
 * reads typed fields one by one instead of decoding into generic values: an integer must be a MessagePack
 * integer (a float holding 9.0 is not the frame type 9), strings are checked UTF-8 where the spec says so,
 * lengths are checked against the bytes that are really there, and unknown trailing elements are skipped
 * with a nesting limit (no unbounded recursion on untrusted input). Every failure is `MalformedFrame`.
 */
import { malformed } from "./errors.js";

/** Deepest nesting of unknown trailing elements that is skipped over (spec §2). */
export const MAX_SKIP_DEPTH = 16;

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

export class MsgReader {
  private pos: number;
  private readonly view: DataView;

  constructor(
    private readonly buf: Uint8Array,
    start = 0,
    private readonly end = buf.length,
  ) {
    this.pos = start;
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }

  get atEnd(): boolean {
    return this.pos >= this.end;
  }

  get remaining(): number {
    return this.end - this.pos;
  }

  private need(n: number): void {
    if (this.end - this.pos < n) {
      throw malformed(`MessagePack value needs ${n} more bytes than the body has.`);
    }
  }

  private byte(): number {
    this.need(1);
    return this.buf[this.pos++]!;
  }

  private peek(): number {
    this.need(1);
    return this.buf[this.pos]!;
  }

  private u16(): number {
    this.need(2);
    const v = this.view.getUint16(this.pos);
    this.pos += 2;
    return v;
  }

  private u32(): number {
    this.need(4);
    const v = this.view.getUint32(this.pos);
    this.pos += 4;
    return v;
  }

  readArrayHeader(): number {
    const b = this.byte();
    let n: number;
    if ((b & 0xf0) === 0x90) n = b & 0x0f;
    else if (b === 0xdc) n = this.u16();
    else if (b === 0xdd) n = this.u32();
    else throw malformed("Expected a MessagePack array.");
    if (n > this.remaining) {
      throw malformed(`Array header claims ${n} elements, more than the ${this.remaining} bytes left.`);
    }
    return n;
  }

  readMapHeader(): number {
    const b = this.byte();
    let n: number;
    if ((b & 0xf0) === 0x80) n = b & 0x0f;
    else if (b === 0xde) n = this.u16();
    else if (b === 0xdf) n = this.u32();
    else throw malformed("Expected a MessagePack map.");
    if (n * 2 > this.remaining) {
      throw malformed(`Map header claims ${n} pairs, more than the ${this.remaining} bytes left.`);
    }
    return n;
  }

  /** Whether the next value is a MessagePack str (of any width). */
  nextIsString(): boolean {
    const b = this.peek();
    return (b >= 0xa0 && b <= 0xbf) || (b >= 0xd9 && b <= 0xdb);
  }

  /** Whether the next value is a MessagePack array (of any width). */
  peekIsArray(): boolean {
    const b = this.peek();
    return (b & 0xf0) === 0x90 || b === 0xdc || b === 0xdd;
  }

  /** Whether the next value is a MessagePack nil. */
  nextIsNil(): boolean {
    return this.peek() === 0xc0;
  }

  /** Whether the next value is a MessagePack integer (of any width or sign). */
  nextIsInteger(): boolean {
    const b = this.peek();
    return b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3);
  }

  /**
   * Reads a non-negative integer in any MessagePack integer encoding. Returns a `number` when it is a safe
   * integer, else a `bigint` (up to 2^64-1). A negative value or a non-integer is `MalformedFrame`.
   */
  readUnsigned(): number | bigint {
    const b = this.byte();
    if (b <= 0x7f) return b;
    switch (b) {
      case 0xcc:
        this.need(1);
        return this.buf[this.pos++]!;
      case 0xcd:
        return this.u16();
      case 0xce:
        return this.u32();
      case 0xcf: {
        this.need(8);
        const hi = this.view.getUint32(this.pos);
        const lo = this.view.getUint32(this.pos + 4);
        this.pos += 8;
        if (hi < 0x200000) return hi * 0x100000000 + lo;
        return (BigInt(hi) << 32n) | BigInt(lo);
      }
      case 0xd0: {
        this.need(1);
        const v = this.view.getInt8(this.pos++);
        if (v < 0) throw malformed("Expected a non-negative integer, got a negative one.");
        return v;
      }
      case 0xd1: {
        this.need(2);
        const v = this.view.getInt16(this.pos);
        this.pos += 2;
        if (v < 0) throw malformed("Expected a non-negative integer, got a negative one.");
        return v;
      }
      case 0xd2: {
        this.need(4);
        const v = this.view.getInt32(this.pos);
        this.pos += 4;
        if (v < 0) throw malformed("Expected a non-negative integer, got a negative one.");
        return v;
      }
      case 0xd3: {
        this.need(8);
        const v = this.view.getBigInt64(this.pos);
        this.pos += 8;
        if (v < 0n) throw malformed("Expected a non-negative integer, got a negative one.");
        return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
      }
      default:
        if (b >= 0xe0) throw malformed("Expected a non-negative integer, got a negative one.");
        throw malformed(`Expected an integer, got MessagePack type 0x${b.toString(16)}.`);
    }
  }

  /** Reads an unsigned integer that must fit 32 bits. */
  readUint32(): number {
    const v = this.readUnsigned();
    if (typeof v === "bigint" || v > 0xffffffff) {
      throw malformed(`Integer ${v} does not fit 32 bits.`);
    }
    return v;
  }

  readBool(): boolean {
    const b = this.byte();
    if (b === 0xc2) return false;
    if (b === 0xc3) return true;
    throw malformed(`Expected a boolean, got MessagePack type 0x${b.toString(16)}.`);
  }

  /** Reads a `str` (or nil: `null`) and returns its byte range. */
  private readStrRange(): [number, number] | null {
    const b = this.byte();
    let len: number;
    if ((b & 0xe0) === 0xa0) len = b & 0x1f;
    else if (b === 0xd9) {
      this.need(1);
      len = this.buf[this.pos++]!;
    } else if (b === 0xda) len = this.u16();
    else if (b === 0xdb) len = this.u32();
    else if (b === 0xc0) return null;
    else throw malformed(`Expected a string, got MessagePack type 0x${b.toString(16)}.`);
    this.need(len);
    const start = this.pos;
    this.pos += len;
    return [start, len];
  }

  /**
   * Reads a `str` or nil. Invalid UTF-8 is `MalformedFrame` in every field, topics included (spec §2; their
   * own rules, spec §5, apply to valid strings only).
   */
  readString(): string | null {
    const range = this.readStrRange();
    if (range === null) return null;
    const bytes = this.buf.subarray(range[0], range[0] + range[1]);
    try {
      return strictUtf8.decode(bytes);
    } catch {
      throw malformed("String is not valid UTF-8.");
    }
  }

  /** Reads a `bin` or nil (a `str` is not a payload, spec §2). The result is a view, not a copy. */
  readBin(): Uint8Array | null {
    const b = this.byte();
    let len: number;
    if (b === 0xc4) {
      this.need(1);
      len = this.buf[this.pos++]!;
    } else if (b === 0xc5) len = this.u16();
    else if (b === 0xc6) len = this.u32();
    else if (b === 0xc0) return null;
    else throw malformed(`Expected bin, got MessagePack type 0x${b.toString(16)}.`);
    this.need(len);
    const out = this.buf.subarray(this.pos, this.pos + len);
    this.pos += len;
    return out;
  }

  /** Skips one value of any type, nesting at most {@link MAX_SKIP_DEPTH} deep. */
  skip(depth = 0): void {
    if (depth > MAX_SKIP_DEPTH) {
      throw malformed(`Unknown elements nest deeper than ${MAX_SKIP_DEPTH}.`);
    }
    const b = this.peek();
    if ((b & 0xf0) === 0x90 || b === 0xdc || b === 0xdd) {
      const n = this.readArrayHeader();
      for (let i = 0; i < n; i++) this.skip(depth + 1);
      return;
    }
    if ((b & 0xf0) === 0x80 || b === 0xde || b === 0xdf) {
      const n = this.readMapHeader();
      for (let i = 0; i < n * 2; i++) this.skip(depth + 1);
      return;
    }
    this.pos++;
    if (b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3) return;
    if ((b & 0xe0) === 0xa0) return this.advance(b & 0x1f);
    switch (b) {
      case 0xc4:
      case 0xd9:
        this.need(1);
        return this.advance(this.buf[this.pos++]!);
      case 0xc5:
      case 0xda:
        return this.advance(this.u16());
      case 0xc6:
      case 0xdb:
        return this.advance(this.u32());
      case 0xc7:
        this.need(1);
        return this.advance(this.buf[this.pos++]! + 1);
      case 0xc8:
        return this.advance(this.u16() + 1);
      case 0xc9:
        return this.advance(this.u32() + 1);
      case 0xca:
        return this.advance(4);
      case 0xcb:
        return this.advance(8);
      case 0xcc:
      case 0xd0:
        return this.advance(1);
      case 0xcd:
      case 0xd1:
        return this.advance(2);
      case 0xce:
      case 0xd2:
        return this.advance(4);
      case 0xcf:
      case 0xd3:
        return this.advance(8);
      case 0xd4:
        return this.advance(2);
      case 0xd5:
        return this.advance(3);
      case 0xd6:
        return this.advance(5);
      case 0xd7:
        return this.advance(9);
      case 0xd8:
        return this.advance(17);
      default: // 0xc1: never used
        throw malformed(`MessagePack type 0x${b.toString(16)} is never used.`);
    }
  }

  private advance(n: number): void {
    this.need(n);
    this.pos += n;
  }
}
