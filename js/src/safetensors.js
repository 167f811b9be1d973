// `.safetensors` members (spec README 4.2): an 8-byte header length, a JSON header, and the
// tensors' bytes tiling the data section exactly.

import { FormatError, UnsafeArchiveError } from "./errors.js";
import { MAX_DIMS, ST_SIZE } from "./dtypes.js";
import { parseJsonBytes } from "./json.js";

export const MAX_ST_HEADER = 100_000_000;

/** Parses a member's header: Map key -> {code, shape, begin, end} (absolute offsets in the member). */
export function readSafetensors(bytes, where, budget) {
  if (bytes.length < 8) throw new FormatError(`${where}: the safetensors member does not fill the member's header length`);
  const lo = (bytes[0] | (bytes[1] << 8) | (bytes[2] << 16) | (bytes[3] << 24)) >>> 0;
  const hi = (bytes[4] | (bytes[5] << 8) | (bytes[6] << 16) | (bytes[7] << 24)) >>> 0;
  const n = hi * 2 ** 32 + lo;
  if (n > MAX_ST_HEADER) throw new UnsafeArchiveError(`${where}: a safetensors header length of ${n} bytes, over the limit of ${MAX_ST_HEADER}`);
  if (8 + n > bytes.length) throw new FormatError(`${where}: the safetensors header does not fill the member (${n} bytes declared)`);
  const raw = bytes.subarray(8, 8 + n);
  if (budget) budget(raw);
  let header;
  try {
    header = parseJsonBytes(raw, `${where} (safetensors header)`);
  } catch (e) {
    if (/duplicate key/.test(e.message)) throw new FormatError(`${where}: the safetensors header has a ${/duplicate key '[^']*'/.exec(e.message)[0]}`);
    throw new FormatError(`${where}: the safetensors header is invalid JSON (${e.message})`);
  }
  if (!(header instanceof Map)) throw new FormatError(`${where}: the safetensors header is not a JSON object`);
  const base = 8 + n;
  const dataLen = bytes.length - base;
  const out = new Map();
  for (const [key, e] of header) {
    if (key === "__metadata__") continue;
    if (!(e instanceof Map)) throw new FormatError(`${where}: safetensors entry '${key}' is not an object`);
    const code = e.get("dtype");
    if (typeof code !== "string" || !Object.hasOwn(ST_SIZE, code)) throw new FormatError(`${where}: unknown safetensors dtype ${JSON.stringify(String(code))} of '${key}'`);
    const shape = e.get("shape");
    if (!Array.isArray(shape)) throw new FormatError(`${where}: the shape of '${key}' is not a list`);
    if (shape.length > MAX_DIMS) throw new FormatError(`${where}: '${key}' has ${shape.length} dimensions; at most 64 are allowed`);
    let count = 1n;
    for (const d of shape) {
      if (typeof d !== "bigint" || d < 0n) throw new FormatError(`${where}: bad dimension in the shape of '${key}'`);
      count *= d;
    }
    const offs = e.get("data_offsets");
    if (!Array.isArray(offs) || offs.length !== 2 || !offs.every((v) => typeof v === "bigint" && v >= 0n)) {
      throw new FormatError(`${where}: bad data_offsets of '${key}'`);
    }
    if (offs[1] < offs[0] || offs[1] - offs[0] !== count * BigInt(ST_SIZE[code])) {
      throw new FormatError(`${where}: the data offsets of '${key}' disagree with its dtype and shape`);
    }
    if (offs[1] > BigInt(dataLen)) throw new FormatError(`${where}: the data of '${key}' does not fill the member (it runs past its end)`);
    out.set(key, { code, shape: shape.map(Number), begin: base + Number(offs[0]), end: base + Number(offs[1]) });
  }
  const sorted = [...out.values()].sort((a, b) => a.begin - b.begin || a.end - b.end);
  let at = base;
  for (const e of sorted) {
    if (e.begin !== at) throw new FormatError(`${where}: the safetensors data has gaps or overlaps`);
    at = e.end;
  }
  if (at !== bytes.length) throw new FormatError(`${where}: the tensors' data does not fill the member`);
  return out;
}
