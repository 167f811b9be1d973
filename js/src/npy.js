// `.npy` members (spec README 4.1): versions 1.0 to 3.0, a header of at most 10 KiB holding exactly
// descr, fortran_order and shape, and data that fills the member.

import { FormatError, UnsafeArchiveError } from "./errors.js";
import { checkShape, numpyDtype } from "./dtypes.js";

const MAX_HEADER = 10 * 1024;

/** Parses an .npy member: {dtype, shape, count, fortran, data (a view of the bytes)}. */
export function readNpy(bytes, where) {
  if (bytes.length < 10 || bytes[0] !== 0x93 || String.fromCharCode(...bytes.subarray(1, 6)) !== "NUMPY") {
    throw new FormatError(`${where}: not an .npy member (bad magic)`);
  }
  const major = bytes[6];
  let hlen;
  let start;
  if (major === 1) {
    hlen = bytes[8] | (bytes[9] << 8);
    start = 10;
  } else if (major === 2 || major === 3) {
    if (bytes.length < 12) throw new FormatError(`${where}: truncated .npy header`);
    hlen = (bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | (bytes[11] << 24)) >>> 0;
    start = 12;
  } else throw new FormatError(`${where}: .npy version ${major} is not 1, 2 or 3`);
  if (hlen > MAX_HEADER) throw new UnsafeArchiveError(`${where}: an .npy header of ${hlen} bytes, over the limit of ${MAX_HEADER}`);
  if (start + hlen > bytes.length) throw new FormatError(`${where}: the .npy member is shorter than its ${start} plus a header of ${hlen} bytes`);
  const text = new TextDecoder(major === 3 ? "utf-8" : "latin1").decode(bytes.subarray(start, start + hlen));
  const h = parseHeader(text, where);
  const dtype = numpyDtype(h.descr, where);
  const shape = checkShape(h.shape, where);
  const data = bytes.subarray(start + hlen);
  const need = shape.count * dtype.itemsize;
  if (need !== data.length) {
    throw new FormatError(`${where}: the .npy header declares ${need} data bytes (${h.descr}${JSON.stringify(shape.dims)}), the member holds ${data.length}`);
  }
  return { dtype, shape: shape.dims, count: shape.count, fortran: h.fortran, data };
}

/** The header dict, a Python literal: exactly {'descr': str, 'fortran_order': bool, 'shape': (ints,)}. */
function parseHeader(text, where) {
  const bad = () => new FormatError(`${where}: unreadable .npy header`);
  let i = 0;
  const ws = () => {
    while (i < text.length && " \t\n".includes(text[i])) i++;
  };
  const expect = (c) => {
    ws();
    if (text[i] !== c) throw bad();
    i++;
  };
  const str = () => {
    ws();
    const q = text[i];
    if (q !== "'" && q !== '"') throw bad();
    const j = text.indexOf(q, i + 1);
    if (j < 0 || text.slice(i + 1, j).includes("\\")) throw bad();
    const s = text.slice(i + 1, j);
    i = j + 1;
    return s;
  };
  const out = {};
  expect("{");
  for (;;) {
    ws();
    if (text[i] === "}") {
      i++;
      break;
    }
    const key = str();
    expect(":");
    ws();
    if (key in out) throw bad();
    if (key === "descr") {
      if (text[i] !== "'" && text[i] !== '"') throw new UnsafeArchiveError(`${where}: a structured .npy dtype is not allowed`);
      out.descr = str();
    } else if (key === "fortran_order") {
      const m = /^(True|False)/.exec(text.slice(i));
      if (!m) throw new FormatError(`${where}: fortran_order must be a bool`);
      out.fortran = m[1] === "True";
      i += m[1].length;
    } else if (key === "shape") {
      expect("(");
      const dims = [];
      for (;;) {
        ws();
        if (text[i] === ")") {
          i++;
          break;
        }
        const m = /^[0-9]{1,19}/.exec(text.slice(i, i + 20));
        if (!m) throw bad();
        dims.push(BigInt(m[0]));
        i += m[0].length;
        ws();
        if (text[i] === ",") i++;
        else if (text[i] !== ")") throw bad();
        if (dims.length > 64) throw new FormatError(`${where}: the .npy shape has more than 64 dimensions; at most 64 are allowed`);
      }
      out.shape = dims;
    } else throw bad();
    ws();
    if (text[i] === ",") i++;
    else if (text[i] !== "}") throw bad();
  }
  if (text.slice(i).trim() !== "" || !("descr" in out && "fortran" in out && "shape" in out)) throw bad();
  return out;
}
