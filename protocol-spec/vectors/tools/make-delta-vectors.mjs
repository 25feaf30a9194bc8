// Writes protocol-spec/vectors/delta.json: Fossil delta cases made by the reference encoder, npm fossil-delta
// 2.0.0 (installed as a devDependency of clients/typescript), and malformed deltas every SDK's apply must refuse.
//
//   cd clients/typescript && npm ci && node ../../protocol-spec/vectors/tools/make-delta-vectors.mjs
//
// The output is deterministic (random bytes come from a seeded generator), so running it again changes nothing
// unless the cases here change.
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const vectors = new URL('../', import.meta.url);
const sdk = createRequire(new URL('../../../clients/typescript/package.json', import.meta.url));
const fossilPath = sdk.resolve('fossil-delta');
const fossilVersion = JSON.parse(readFileSync(new URL('package.json', pathToFileURL(fossilPath)), 'utf8')).version;
if (fossilVersion !== '2.0.0') throw new Error(`fossil-delta ${fossilVersion} installed; the vectors are made with 2.0.0`);
const { createDelta, applyDelta } = await import(pathToFileURL(fossilPath).href);

const maxPayload = JSON.parse(readFileSync(new URL('limits.json', vectors), 'utf8')).max_payload;

const utf8 = (s) => new TextEncoder().encode(s);
const ascii = (s) => Uint8Array.from(s, (c) => c.charCodeAt(0));
const hex = (b) => Buffer.from(b).toString('hex');
const concat = (...parts) => Uint8Array.from(parts.flatMap((p) => [...p]));

/** xorshift32 with a fixed seed: the same "random" bytes on every run. */
function randomBytes(seed, n) {
  let x = seed >>> 0;
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    out[i] = x & 0xff;
  }
  return out;
}

/** Fossil's base-64 integer digits, as delta.c writes them. */
function fossilInt(v) {
  const digits = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~';
  let s = '';
  do { s = digits[v & 0x3f] + s; v = Math.floor(v / 64); } while (v > 0);
  return s;
}

/** The checksum record of `target` ("<checksum>;"), taken from what the reference encoder writes for it. */
function checksumRecord(target) {
  const d = Buffer.from(createDelta(new Uint8Array(0), target));
  const end = d.length - 1;
  let start = end;
  while (start > 0 && /[0-9A-Za-z_~]/.test(String.fromCharCode(d[start - 1]))) start--;
  return d.subarray(start, end + 1);
}

// A JSON document whose fields change a few at a time, as a state stream sends it.
const order = (status, filled, updated) => JSON.stringify({
  id: 'ord-7f3a9c21', account: 'acct-20419', symbol: 'ACME', side: 'buy', type: 'limit',
  quantity: 300, price: 101.25, filled, status, venue: 'XPAR', tif: 'day', updated,
});
const tick = (bid, ask, ts) => JSON.stringify({ s: 'ACME', bid, ask, bs: 1200, as: 900, ts });

/** A JSON array of rows exactly `size` bytes long, so that the large cases sit at the vectors' max_payload. */
function rows(size, changedRow) {
  const items = [];
  for (let i = 0; ; i++) {
    const item = { n: i, name: `sensor-${String(i).padStart(3, '0')}`, v: i === changedRow ? 2.5 : 1.5, ok: true };
    const next = JSON.stringify([...items, item]);
    if (next.length > size) break;
    items.push(item);
  }
  const s = JSON.stringify(items);
  return utf8(s.slice(0, -1) + ' '.repeat(size - s.length) + ']');
}

const valid = [
  ['json object, one field changed', utf8(order('open', 0, '2026-11-29T20:00:00.125Z')), utf8(order('open', 0, '2026-11-29T20:00:01.250Z'))],
  ['json object, three fields changed', utf8(order('open', 0, '2026-11-29T20:00:01.250Z')), utf8(order('partial', 120, '2026-11-29T20:00:02.500Z'))],
  ['ticker', utf8(tick(101.25, 101.27, 1796068800125)), utf8(tick(101.26, 101.27, 1796068800250))],
  ['identical payloads', utf8(tick(101.26, 101.27, 1796068800250)), utf8(tick(101.26, 101.27, 1796068800250))],
  ['empty source', new Uint8Array(0), utf8(tick(101.25, 101.27, 1796068800125))],
  ['empty target', utf8(tick(101.25, 101.27, 1796068800125)), new Uint8Array(0)],
  ['both empty', new Uint8Array(0), new Uint8Array(0)],
  ['source shorter than the hash window (16 bytes)', utf8('{"n":1}'), utf8('{"n":2}')],
  ['random bytes (nothing shared)', randomBytes(0x9e3779b9, 96), randomBytes(0x7f4a7c15, 96)],
  ['random bytes, a few changed', randomBytes(0x2545f491, 128), (() => { const t = randomBytes(0x2545f491, 128); t[5] ^= 1; t[64] ^= 0x80; t[127] = 0; return t; })()],
  ['every byte value, moved around', Uint8Array.from({ length: 256 }, (_, i) => i), Uint8Array.from({ length: 256 }, (_, i) => (i + 128) & 0xff)],
  ['target longer than the source', utf8(tick(101.25, 101.27, 1796068800125)), utf8(tick(101.25, 101.27, 1796068800125) + tick(101.26, 101.28, 1796068800250))],
  [`large payload at max_payload (${maxPayload} bytes), one field changed`, rows(maxPayload, -1), rows(maxPayload, 7)],
  [`large payload at max_payload (${maxPayload} bytes) from an empty source`, new Uint8Array(0), rows(maxPayload, 3)],
].map(([name, source, target]) => {
  const delta = createDelta(source, target);
  if (hex(applyDelta(source, delta)) !== hex(target)) throw new Error(`${name}: the reference apply disagrees`);
  return { name, source: hex(source), target: hex(target), delta: hex(delta) };
});

const src = utf8(order('open', 0, '2026-11-29T20:00:00.125Z'));
const tgt = utf8(order('open', 0, '2026-11-29T20:00:01.250Z'));
const good = Buffer.from(createDelta(src, tgt));
const ck = checksumRecord(tgt);
const body = good.subarray(0, good.length - ck.length); // size line and commands, checksum record cut off
const swap = (b, i, c) => { const t = Buffer.from(b); t[i] = c.charCodeAt(0); return t; };
const firstCommand = good.indexOf(0x0a) + 1 + [...good.subarray(good.indexOf(0x0a) + 1)].findIndex((c) => c === 0x40 || c === 0x3a);
const wrongChecksum = checksumRecord(utf8(order('open', 0, '2026-11-29T20:00:01.251Z')));
const oversize = rows(maxPayload + 1, -1);
const short = utf8('{"n":1,"pad":"................"}');

const invalid = [
  ['empty delta', new Uint8Array(0), new Uint8Array(0)],
  ['size not terminated by a newline', src, ascii(fossilInt(tgt.length) + ':')],
  ['truncated: checksum record cut off', src, body],
  ['truncated: in the middle of an insert', src, good.subarray(0, good.indexOf(0x3a) + 3)],
  ['truncated: size line only', src, good.subarray(0, good.indexOf(0x0a) + 1)],
  ['bad command byte', src, swap(good, firstCommand, '!')],
  ['copy past the source\'s end', short, concat(ascii(`${fossilInt(short.length + 8)}\n${fossilInt(16)}@${fossilInt(short.length - 8)},`), ascii(`${fossilInt(short.length - 8)}:`), short.subarray(0, short.length - 8), checksumRecord(short))],
  ['copy from an offset past the source\'s end', short, concat(ascii(`${fossilInt(4)}\n${fossilInt(4)}@${fossilInt(short.length + 1)},`), checksumRecord(ascii('xxxx')))],
  ['insert longer than the rest of the delta', src, concat(ascii(`${fossilInt(40)}\n${fossilInt(40)}:`), utf8('{"short":1}'), ascii(';'))],
  ['checksum mismatch', src, concat(body, wrongChecksum)],
  ['output longer than the declared size', src, concat(ascii(`${fossilInt(4)}\n${fossilInt(5)}:`), utf8('hello'), checksumRecord(utf8('hello')))],
  ['output shorter than the declared size', src, concat(ascii(`${fossilInt(6)}\n${fossilInt(5)}:`), utf8('hello'), checksumRecord(utf8('hello')))],
  [`target size over max_payload (${maxPayload + 1} bytes, otherwise well formed)`, new Uint8Array(0), createDelta(new Uint8Array(0), oversize)],
  ['declared target size of 2^30 bytes (refused before allocating)', src, concat(ascii(`${fossilInt(2 ** 30)}\n${fossilInt(5)}:`), utf8('hello'), checksumRecord(utf8('hello')))],
].map(([name, source, delta]) => {
  let refused = false;
  try {
    const out = applyDelta(source, delta);
    refused = out.length > maxPayload;
  } catch {
    refused = true;
  }
  if (!refused) throw new Error(`${name}: the reference apply accepts it`);
  return { name, source: hex(source), delta: hex(delta), error: 'DecompressionFailed' };
});

const file = {
  algorithm: 'fossil-delta',
  reference: 'npm fossil-delta 2.0.0 (createDelta); regenerate with protocol-spec/vectors/tools/make-delta-vectors.mjs',
  max_payload: maxPayload,
  valid,
  invalid,
};
writeFileSync(new URL('delta.json', vectors), JSON.stringify(file, null, 2) + '\n');
console.log(`delta.json: ${valid.length} valid, ${invalid.length} invalid`);
