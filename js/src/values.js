// Array and tensor values as bytes: inline numpy data and base64 (spec README 5.2), `.npy` data in
// C order, tensor views gathered from their entries (5.4), each as little-endian bytes in C order,
// the form both the neutral description and the weights hash take.

import { FormatError, UnsafeArchiveError } from "./errors.js";

/** Standard base64 (padded) to bytes; `expect` (bytes) is checked from the text's length first. */
export function fromBase64(text, where, expect = null) {
  if (typeof text !== "string" || text.length % 4 || !/^[A-Za-z0-9+/]*={0,2}$/.test(text)) {
    throw new FormatError(`${where}: malformed base64`);
  }
  const pad = text.endsWith("==") ? 2 : text.endsWith("=") ? 1 : 0;
  const n = (text.length / 4) * 3 - pad;
  if (expect !== null && n !== expect) throw new FormatError(`${where}: the base64 data holds ${n} bytes, the dtype and shape need ${expect}`);
  const out = new Uint8Array(n);
  const A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const map = new Int8Array(128).fill(-1);
  for (let i = 0; i < 64; i++) map[A.charCodeAt(i)] = i;
  let o = 0;
  for (let i = 0; i < text.length; i += 4) {
    const a = map[text.charCodeAt(i)], b = map[text.charCodeAt(i + 1)];
    const c = text[i + 2] === "=" ? 0 : map[text.charCodeAt(i + 2)];
    const d = text[i + 3] === "=" ? 0 : map[text.charCodeAt(i + 3)];
    const v = (a << 18) | (b << 12) | (c << 6) | d;
    if (o < n) out[o++] = (v >> 16) & 255;
    if (o < n) out[o++] = (v >> 8) & 255;
    if (o < n) out[o++] = v & 255;
  }
  return out;
}

/** Big-endian element bytes swapped in place to little-endian (`unit`: the size of one swapped part). */
export function swapInPlace(bytes, unit) {
  if (unit <= 1) return bytes;
  for (let i = 0; i + unit <= bytes.length; i += unit) bytes.subarray(i, i + unit).reverse();
  return bytes;
}

/** The byte-swap unit of a numpy dtype: complex by component, unicode by code unit, bytes never. */
export function swapUnit(d) {
  if (d.kind === "c") return d.size / 2;
  if (d.kind === "U") return 4;
  if (d.kind === "S" || d.kind === "b") return 1;
  return d.size;
}

/** Fortran-ordered element bytes rearranged into C order. */
export function fortranToC(bytes, dims, item) {
  if (dims.length < 2) return bytes;
  const n = dims.reduce((a, b) => a * b, 1);
  const out = new Uint8Array(bytes.length);
  const fstride = [];
  let s = 1;
  for (const d of dims) {
    fstride.push(s);
    s *= d;
  }
  const idx = new Array(dims.length).fill(0);
  for (let c = 0; c < n; c++) {
    let f = 0;
    for (let k = 0; k < dims.length; k++) f += idx[k] * fstride[k];
    out.set(bytes.subarray(f * item, f * item + item), c * item);
    for (let k = dims.length - 1; k >= 0; k--) {
      if (++idx[k] < dims[k]) break;
      idx[k] = 0;
    }
  }
  return out;
}

/** A double rounded to IEEE half precision bits (round to nearest, ties to even). */
export function toHalfBits(x) {
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  if (Number.isNaN(x)) return 0x7e00;
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  if (a === Infinity) return sign | 0x7c00;
  if (a >= 65520) return sign | 0x7c00;
  if (a < 2 ** -25) return sign; // rounds to zero (2^-25 is a tie that goes to 0)
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  if (2 ** (e + 1) <= a) e++;
  if (e < -14) {
    const m = roundEven(a / 2 ** -24);
    return sign | m;
  }
  let m = roundEven((a / 2 ** e - 1) * 1024);
  if (m === 1024) {
    m = 0;
    e++;
  }
  if (e > 15) return sign | 0x7c00;
  void f; void u;
  return sign | ((e + 15) << 10) | m;
}

function roundEven(v) {
  const fl = Math.floor(v);
  const d = v - fl;
  if (d > 0.5) return fl + 1;
  if (d < 0.5) return fl;
  return fl % 2 === 0 ? fl : fl + 1;
}

/** Inline `data` (nested lists in C order) of a numpy dtype of kind b, i, u or f as little-endian bytes. */
export function inlineData(data, d, dims, where) {
  const count = dims.reduce((a, b) => a * b, 1);
  const out = new Uint8Array(count * d.itemsize);
  const dv = new DataView(out.buffer);
  let at = 0;
  const bad = (msg) => new FormatError(`${where}: inline values do not match dtype ${d.str} and shape ${JSON.stringify(dims)} (${msg})`);
  const put = (v) => {
    const o = at * d.itemsize;
    if (d.kind === "b") {
      if (typeof v !== "boolean") throw bad("a value is not a boolean");
      out[o] = v ? 1 : 0;
    } else if (d.kind === "i" || d.kind === "u") {
      if (typeof v !== "bigint") throw bad("a value is not an integer");
      const bits = BigInt(d.size * 8);
      const lo = d.kind === "i" ? -(1n << (bits - 1n)) : 0n;
      const hi = d.kind === "i" ? (1n << (bits - 1n)) - 1n : (1n << bits) - 1n;
      if (v < lo || v > hi) throw bad(`${v} is out of range`);
      const u = BigInt.asUintN(Number(bits), v);
      for (let k = 0; k < d.size; k++) out[o + k] = Number((u >> BigInt(8 * k)) & 255n);
    } else if (d.kind === "f") {
      const x = typeof v === "bigint" ? Number(v) : v;
      if (typeof x !== "number") throw bad("a value is not a number");
      if (d.size === 8) dv.setFloat64(o, x, true);
      else if (d.size === 4) dv.setFloat32(o, x, true);
      else if (d.size === 2) dv.setUint16(o, toHalfBits(x), true);
      else throw bad("inline data of this float size");
    } else throw bad("this dtype is not written as data");
    at++;
  };
  const walk = (v, k) => {
    if (k === dims.length) return put(v);
    if (!Array.isArray(v) || v.length !== dims[k]) throw bad("the nesting differs from the shape");
    for (const x of v) walk(x, k + 1);
  };
  walk(data, 0);
  return out;
}

/**
 * A view's elements gathered in C order: `shape` from `storage` (bytes) with `stride` and `offset`
 * (in elements of `size` bytes). Every element must lie inside the storage.
 */
export function gather(storage, size, shape, stride, offset, where) {
  const count = shape.reduce((a, b) => a * b, 1);
  if (count === 0) return new Uint8Array(0);
  let lo = offset;
  let hi = offset;
  for (let k = 0; k < shape.length; k++) {
    if (stride[k] < 0) throw new FormatError(`${where}: bad tensor view (a negative stride)`);
    hi += (shape[k] - 1) * stride[k];
  }
  if (lo < 0 || (hi + 1) * size > storage.length) {
    throw new FormatError(`${where}: bad tensor view: elements up to ${hi} lie outside its storage of ${Math.floor(storage.length / size)} elements`);
  }
  const contiguous = shape.every((d, k) => d === 1 || stride[k] === shape.slice(k + 1).reduce((a, b) => a * b, 1));
  if (contiguous) return storage.subarray(offset * size, (offset + count) * size);
  const out = new Uint8Array(count * size);
  const idx = new Array(shape.length).fill(0);
  for (let c = 0; c < count; c++) {
    let e = offset;
    for (let k = 0; k < shape.length; k++) e += idx[k] * stride[k];
    out.set(storage.subarray(e * size, e * size + size), c * size);
    for (let k = shape.length - 1; k >= 0; k--) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
  return out;
}

/** Charges `n` bytes against a budget-like `{charge(n, what)}`. */
export function charge(budget, n, what) {
  if (!Number.isFinite(n)) throw new UnsafeArchiveError(`${what}: a size past what this reader can count`);
  budget.charge(n, what);
}
