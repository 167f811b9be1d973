// `arrow.array` nodes (spec/pandas.md 5.4) in the class-free neutral form (spec/neutral.md 5.1): the
// array as stored, buffer by buffer. Bitmaps (validity, `bool` values) are described by their first
// `length` bits, one byte each; every other buffer as a numpy array description. Before anything is
// described, the node is checked as the spec says a reader must: the type grammar, each buffer's
// dtype and item count, children and dictionary, then the values (bitmap counts, offsets, dictionary
// indices, UTF-8 of text). Sizes are checked against the declared lengths before any allocation.

import { child, MAX_DEPTH } from "./describe.js";
import { sha256 } from "./sha256.js";

const FIXED_WIDTH = {
  int8: "|i1", int16: "<i2", int32: "<i4", int64: "<i8",
  uint8: "|u1", uint16: "<u2", uint32: "<u4", uint64: "<u8",
  float16: "<f2", float32: "<f4", float64: "<f8",
  date32: "<i4", date64: "<i8", time32: "<i4", time64: "<i8",
  timestamp: "<i8", duration: "<i8",
};
const INDEX_IDS = new Set(["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]);
const BINARY_IDS = { utf8: "<i4", binary: "<i4", large_utf8: "<i8", large_binary: "<i8" };
const LIST_IDS = { list: "<i4", large_list: "<i8" };
const TS_UNITS = ["s", "ms", "us", "ns"];
const UNITS = { time32: ["s", "ms"], time64: ["us", "ns"], timestamp: TS_UNITS, duration: TS_UNITS };
const TZ_TEXT = /^[A-Za-z0-9_+\-:]{1,40}(\/[A-Za-z0-9_+\-:]{1,40}){0,3}$/;
const TZ_OFFSET = /^[+-][0-9]{2}:?[0-9]{2}$/;
const MAX_NAME_CHARS = 1000;
const MAX_FIELDS = 10_000;
const NODE_KEYS = new Set(["$type", "type", "length", "null_count", "buffers", "children", "dictionary"]);
const utf8 = new TextDecoder("utf-8", { fatal: true });
const isMap = (v) => v instanceof Map;
const has = (o, k) => Object.hasOwn(o, k);

function knownZone(tz) {
  if (TZ_OFFSET.test(tz)) return true;
  try {
    const resolved = new Intl.DateTimeFormat("en-US", { timeZone: tz }).resolvedOptions().timeZone;
    return resolved === tz || resolved.toLowerCase() !== tz.toLowerCase(); // (names are case-sensitive)
  } catch {
    return false;
  }
}

/** The `id` of an Arrow type's JSON after checking its whole shape; `bad(msg)` makes the error. */
function checkType(t, depth, bad) {
  if (depth > MAX_DEPTH) throw bad(`Arrow type nested more than ${MAX_DEPTH} levels deep`);
  if (!isMap(t) || typeof t.get("id") !== "string") throw bad("an Arrow type must be an object with an 'id'");
  const tid = t.get("id");
  if (has(UNITS, tid) && !UNITS[tid].includes(t.get("unit"))) throw bad(`a ${tid} needs a 'unit' of ${UNITS[tid].join(", ")}`);
  if (tid === "timestamp") {
    const tz = t.get("tz");
    if (!(tz === null || tz === undefined || (typeof tz === "string" && TZ_TEXT.test(tz)))) throw bad("bad timestamp 'tz'");
    if (typeof tz === "string" && !knownZone(tz)) throw bad(`unknown time zone ${JSON.stringify(tz)}`);
  } else if (tid === "decimal128") {
    const [p, s] = [t.get("precision"), t.get("scale")];
    const ok = typeof p === "bigint" && p >= 1n && p <= 38n && typeof s === "bigint" && s >= -p && s <= p;
    if (!ok) throw bad("bad decimal128 precision/scale");
  } else if (has(LIST_IDS, tid)) {
    checkField(t.get("item"), depth + 1, bad);
  } else if (tid === "struct") {
    const fields = t.get("fields");
    if (!Array.isArray(fields) || fields.length > MAX_FIELDS) throw bad("a struct needs 'fields', a list of fields");
    for (const f of fields) checkField(f, depth + 1, bad);
  } else if (tid === "dictionary") {
    if (!INDEX_IDS.has(t.get("index"))) throw bad("a dictionary's 'index' must be an integer type id");
    if (typeof t.get("ordered") !== "boolean") throw bad("a dictionary needs 'ordered' (true or false)");
    if (checkType(t.get("value"), depth + 1, bad) === "dictionary") throw bad("a dictionary of dictionaries");
  } else if (!(has(FIXED_WIDTH, tid) || has(BINARY_IDS, tid) || tid === "bool" || tid === "null")) {
    throw bad(`unknown Arrow type ${JSON.stringify(tid.slice(0, 30))}`);
  }
  return tid;
}

function checkField(f, depth, bad) {
  if (!isMap(f)) throw bad("an Arrow field must be an object");
  const name = f.get("name");
  if (typeof name !== "string" || name.length > MAX_NAME_CHARS) throw bad("an Arrow field needs a string 'name'");
  if (typeof f.get("nullable") !== "boolean") throw bad("an Arrow field needs 'nullable' (true or false)");
  checkType(f.get("type"), depth, bad);
}

/** [{role, dtype, count (null: any), optional}] of an array of (checked) type `t` and `n` values. */
function bufferSpecs(t, n) {
  const tid = t.get("id");
  if (tid === "null") return [];
  const bitmap = Math.ceil(n / 8);
  const specs = [{ role: "validity", dtype: "|u1", count: bitmap, optional: true }];
  const add = (role, dtype, count) => specs.push({ role, dtype, count, optional: false });
  if (tid === "bool") add("values", "|u1", bitmap);
  else if (has(FIXED_WIDTH, tid)) add("values", FIXED_WIDTH[tid], n);
  else if (tid === "decimal128") add("values", "<u8", 2 * n);
  else if (has(BINARY_IDS, tid)) {
    add("offsets", BINARY_IDS[tid], n + 1);
    add("values", "|u1", null);
  } else if (has(LIST_IDS, tid)) add("offsets", LIST_IDS[tid], n + 1);
  else if (tid === "dictionary") add("indices", FIXED_WIDTH[t.get("index")], n);
  return specs;
}

function childTypes(t) {
  const tid = t.get("id");
  if (has(LIST_IDS, tid)) return [t.get("item").get("type")];
  if (tid === "struct") return t.get("fields").map((f) => f.get("type"));
  return [];
}

/** Two parsed JSON values alike (Maps compared key by key, in any order). */
function same(a, b) {
  if (isMap(a) && isMap(b)) return a.size === b.size && [...a].every(([k, v]) => b.has(k) && same(v, b.get(k)));
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((v, i) => same(v, b[i]));
  return a === b;
}

const TYPE_KEYS = {
  time32: ["unit"], time64: ["unit"], duration: ["unit"], timestamp: ["unit", "tz"],
  decimal128: ["precision", "scale"], dictionary: ["index", "value", "ordered"],
};

/** A (checked) type with only the grammar's keys (others a writer added do not show); ints stay BigInt. */
function typeForm(t) {
  const tid = t.get("id");
  const out = { id: tid };
  for (const key of has(TYPE_KEYS, tid) ? TYPE_KEYS[tid] : []) {
    out[key] = key === "value" ? typeForm(t.get(key)) : t.has(key) ? t.get(key) : null;
  }
  const field = (f) => ({ name: f.get("name"), type: typeForm(f.get("type")), nullable: f.get("nullable") });
  if (has(LIST_IDS, tid)) out.item = field(t.get("item"));
  else if (tid === "struct") out.fields = t.get("fields").map(field);
  return out;
}

/** The first `n` bits of a bitmap, one byte (0 or 1) each. */
function unpackBits(bytes, n) {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (bytes[i >> 3] >> (i & 7)) & 1;
  return out;
}

/** The items of a 1-D integer buffer as Numbers (past 2^53: ±Infinity, which every range check refuses). */
function ints(a) {
  const dv = new DataView(a.bytes.buffer, a.bytes.byteOffset, a.bytes.byteLength);
  const s = a.d.itemsize;
  const signed = a.d.kind === "i";
  const out = new Float64Array(a.count);
  for (let i = 0; i < a.count; i++) {
    if (s === 8) {
      const v = signed ? dv.getBigInt64(8 * i, true) : dv.getBigUint64(8 * i, true);
      out[i] = v > 2n ** 53n ? Infinity : v < -(2n ** 53n) ? -Infinity : Number(v);
    } else if (s === 4) out[i] = signed ? dv.getInt32(4 * i, true) : dv.getUint32(4 * i, true);
    else if (s === 2) out[i] = signed ? dv.getInt16(2 * i, true) : dv.getUint16(2 * i, true);
    else out[i] = signed ? dv.getInt8(i) : dv.getUint8(i);
  }
  return out;
}

function checkOffsets(offsets, end, bad) {
  if (offsets.length === 0 || offsets[0] !== 0) throw bad("offsets must start at 0");
  for (let i = 1; i < offsets.length; i++) if (offsets[i] < offsets[i - 1]) throw bad(`offsets decrease at value ${i - 1}`);
  const last = offsets[offsets.length - 1];
  if (last !== end) throw bad(`offsets end at ${last}, what they index holds ${end}`);
}

/** The structure of an arrow.array node, checked from the manifest alone (what zarchive's plan checks). */
function checkNode(w, node, path) {
  const bad = (msg) => w.fail(path, msg);
  const tid = checkType(node.get("type"), 0, bad);
  const [length, nulls] = [node.get("length"), node.get("null_count")];
  if (!(typeof length === "bigint" && typeof nulls === "bigint" && nulls >= 0n && nulls <= length && length <= 2n ** 53n)) {
    throw bad("an Arrow array needs int 'length' and 'null_count' (0 to length)");
  }
  const n = Number(length);
  if (tid === "null" && nulls !== length) throw bad("every value of a null array is missing");
  for (const k of node.keys()) if (!NODE_KEYS.has(k)) throw bad(`unexpected field ${JSON.stringify(k.slice(0, 40))} in an arrow.array node`);
  const t = node.get("type");
  const specs = bufferSpecs(t, n);
  const buffers = node.get("buffers");
  if (!Array.isArray(buffers) || buffers.length !== specs.length) throw bad(`an Arrow ${tid} array needs ${specs.length} buffers`);
  specs.forEach((spec, i) => {
    const buf = buffers[i];
    if (buf === null) {
      if (!spec.optional || (spec.role === "validity" && nulls > 0n)) throw bad(`buffer ${i} (${spec.role}) is missing`);
      return;
    }
    if (!isMap(buf) || buf.get("$type") !== "numpy.ndarray" || buf.get("dtype") !== spec.dtype) {
      throw bad(`buffer ${i} (${spec.role}) must be a numpy.ndarray node of dtype ${spec.dtype}`);
    }
    const shape = buf.get("shape");
    if (!(Array.isArray(shape) && shape.length === 1 && typeof shape[0] === "bigint" && shape[0] >= 0n)) throw bad(`buffer ${i} (${spec.role}) must be 1-D`);
    if (spec.count !== null && shape[0] !== BigInt(spec.count)) throw bad(`buffer ${i} (${spec.role}) holds ${shape[0]} items, ${spec.count} expected`);
  });
  const want = childTypes(t);
  const children = node.has("children") ? node.get("children") : [];
  if (!Array.isArray(children) || children.length !== want.length) throw bad(`an Arrow ${tid} array needs ${want.length} child arrays`);
  children.forEach((c, i) => {
    if (!isMap(c) || c.get("$type") !== "arrow.array" || !same(c.get("type"), want[i])) throw bad(`child ${i} must be an arrow.array node of its field's type`);
    if (tid === "struct" && c.get("length") !== length) throw bad(`child ${i} of a struct must hold ${n} values`);
  });
  const dictionary = node.has("dictionary") ? node.get("dictionary") : null;
  if (tid === "dictionary") {
    if (!isMap(dictionary) || dictionary.get("$type") !== "arrow.array") throw bad("a dictionary array needs its 'dictionary', an arrow.array node");
    if (!same(dictionary.get("type"), t.get("value"))) throw bad("the dictionary's type is not the value type");
  } else if (dictionary !== null) throw bad("only a dictionary array has a 'dictionary'");
  return { tid, t, n, nulls: Number(nulls), specs, buffers, children, dictionary };
}

export function arrowArray(w, node, path) {
  const bad = (msg) => w.fail(path, msg);
  const { tid, t, n, nulls, specs, buffers, children, dictionary } = checkNode(w, node, path);
  const out = { kind: "arrow.array", type: typeForm(t), length: n, null_count: nulls };
  const loaded = [];
  let valid = null; // the validity bits, when stored
  out.buffers = specs.map((spec, i) => {
    const buf = buffers[i];
    const bpath = child(path, spec.role);
    if (buf === null) {
      loaded.push(null);
      return null;
    }
    if (spec.role === "validity" || tid === "bool") {
      const a = w.arrayBytes(buf, bpath);
      const bits = unpackBits(a.bytes, n);
      loaded.push(bits);
      if (spec.role === "validity") {
        valid = bits;
        if (nulls === 0) return null;
      }
      return { kind: "bits", length: n, sha256: sha256(bits), path: bpath };
    }
    const desc = w.value(buf, bpath);
    loaded.push(w.arrayBytes(buf, bpath));
    return desc;
  });
  if (specs.length) {
    if (valid === null && nulls) throw bad(`${nulls} values are missing but the array has no validity bitmap`);
    if (valid !== null) {
      let present = 0;
      for (let i = 0; i < n; i++) present += valid[i];
      if (present !== n - nulls) throw bad(`the validity bitmap marks ${n - present} values missing, 'null_count' says ${nulls}`);
    }
  }
  out.children = children.map((c, i) => w.value(c, child(path, `child${i}`)));
  out.dictionary = dictionary === null ? null : w.value(dictionary, child(path, "dictionary"));
  if (has(BINARY_IDS, tid)) {
    const offsets = ints(loaded[1]);
    const data = loaded[2].bytes;
    checkOffsets(offsets, data.length, bad);
    if (tid.endsWith("utf8")) {
      for (let i = 0; i < n; i++) {
        try {
          utf8.decode(data.subarray(offsets[i], offsets[i + 1]));
        } catch {
          throw bad(`text value ${i} is not valid UTF-8`);
        }
      }
    }
  } else if (has(LIST_IDS, tid)) {
    checkOffsets(ints(loaded[1]), Number(children[0].get("length")), bad);
  } else if (tid === "dictionary") {
    const count = Number(dictionary.get("length"));
    const indices = ints(loaded[1]);
    for (let i = 0; i < n; i++) {
      if ((valid === null || valid[i]) && !(indices[i] >= 0 && indices[i] < count)) throw bad(`a dictionary index is outside the dictionary's ${count} values`);
    }
  }
  return out;
}
