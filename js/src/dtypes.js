// Dtypes: numpy dtype strings (spec README 5.2) and torch dtype names with their safetensors codes
// (spec README 4.2 and 5.4).

import { FormatError, UnsafeArchiveError } from "./errors.js";

export const MAX_DIMS = 64;
const MAX_ELEMENTS = 2n ** 62n;

/** A numpy dtype string (`<f4`, `|b1`, `<M8[ns]`, `<U5`) parsed: {str, order, kind, size, unit, itemsize}. */
export function numpyDtype(text, where) {
  if (typeof text !== "string" || text.length > 64) throw new FormatError(`${where}: bad dtype ${JSON.stringify(String(text)).slice(0, 80)}`);
  const m = /^([<>|=])([biufcmMSUOV])([0-9]{1,10})(?:\[([0-9]*)(Y|M|W|D|h|m|s|ms|us|ns|ps|fs|as|generic)\])?$/.exec(text);
  if (!m) {
    if (/[(),{}]|^\[/.test(text)) throw new UnsafeArchiveError(`${where}: the structured dtype ${text} is not allowed`);
    throw new FormatError(`${where}: bad dtype ${JSON.stringify(text)}`);
  }
  const [, order, kind, n, mult, unit] = m;
  if (kind === "O" || kind === "V") throw new UnsafeArchiveError(`${where}: dtype ${text} (object or void) is not allowed`);
  if ((kind === "m" || kind === "M") !== (unit !== undefined)) throw new FormatError(`${where}: bad dtype ${JSON.stringify(text)}`);
  const size = Number(n);
  const itemsize = kind === "U" ? 4 * size : size;
  const ok = { b: [1], i: [1, 2, 4, 8], u: [1, 2, 4, 8], f: [2, 4, 8, 12, 16], c: [8, 16, 24, 32], m: [8], M: [8] }[kind];
  if (ok && !ok.includes(size)) throw new FormatError(`${where}: bad dtype ${JSON.stringify(text)}`);
  if ((kind === "S" || kind === "U") && size === 0) throw new FormatError(`${where}: dtype ${text} has no size`);
  const single = itemsize === 1 || kind === "S";
  if (single && order !== "|" && kind !== "b" && kind !== "S" && kind !== "i" && kind !== "u") throw new FormatError(`${where}: bad dtype ${text}`);
  return { str: text, order: order === ">" ? ">" : "<", kind, size, unit: unit && `${mult}${unit}`, itemsize };
}

/** numpy's dtype name (`float32`, `datetime64[ns]`, `str160`, `bytes24`) of a parsed dtype. */
export function numpyName(d) {
  const bits = d.size * 8;
  switch (d.kind) {
    case "b": return "bool";
    case "i": return `int${bits}`;
    case "u": return `uint${bits}`;
    case "f": return d.size === 16 || d.size === 12 ? `float${bits}` : `float${bits}`;
    case "c": return `complex${bits}`;
    case "M": return `datetime64[${d.unit}]`;
    case "m": return `timedelta64[${d.unit}]`;
    case "S": return `bytes${bits}`;
    case "U": return `str${d.itemsize * 8}`;
  }
  return d.str;
}

/** A shape checked (spec 7): at most 64 non-negative int dims, at most 2^62 elements; returns numbers. */
export function checkShape(shape, where) {
  if (!Array.isArray(shape)) throw new FormatError(`${where}: the shape must be a list of sizes`);
  if (shape.length > MAX_DIMS) throw new FormatError(`${where}: the shape has ${shape.length} dimensions, at most 64 are allowed`);
  let n = 1n;
  for (const d of shape) {
    if (typeof d !== "bigint" || d < 0n) throw new FormatError(`${where}: bad dimension ${typeof d === "number" ? d.toFixed(1) : String(d)} in the shape`);
    n *= d;
    if (n > MAX_ELEMENTS) throw new UnsafeArchiveError(`${where}: the shape has more elements than 2^62`);
  }
  return { dims: shape.map(Number), count: Number(n) };
}

/** torch dtype name -> [safetensors code, element size in bytes]; a null code is stored as U8. */
export const TORCH = {
  float64: ["F64", 8], float32: ["F32", 4], float16: ["F16", 2], bfloat16: ["BF16", 2],
  int64: ["I64", 8], int32: ["I32", 4], int16: ["I16", 2], int8: ["I8", 1],
  uint64: ["U64", 8], uint32: ["U32", 4], uint16: ["U16", 2], uint8: ["U8", 1], bool: ["BOOL", 1],
  complex64: ["C64", 8], float8_e4m3fn: ["F8_E4M3", 1], float8_e5m2: ["F8_E5M2", 1],
  float8_e4m3fnuz: ["F8_E4M3FNUZ", 1], float8_e5m2fnuz: ["F8_E5M2FNUZ", 1],
  complex128: [null, 16], complex32: [null, 4], float8_e8m0fnu: [null, 1], float4_e2m1fn_x2: [null, 1],
  bits8: [null, 1], bits16: [null, 2], bits1x8: [null, 1], bits2x4: [null, 1], bits4x2: [null, 1],
};

/** safetensors code -> element size. */
export const ST_SIZE = {
  F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U64: 8, U32: 4, U16: 2, U8: 1, BOOL: 1,
  C64: 8, F8_E4M3: 1, F8_E5M2: 1, F8_E4M3FNUZ: 1, F8_E5M2FNUZ: 1,
};

/** A torch dtype name checked; returns {name, code, size}. */
export function torchDtype(name, where) {
  const t = typeof name === "string" && Object.hasOwn(TORCH, name) ? TORCH[name] : null;
  if (!t) throw new FormatError(`${where}: unknown torch dtype ${JSON.stringify(String(name)).slice(0, 60)}`);
  return { name, code: t[0], size: t[1] };
}
