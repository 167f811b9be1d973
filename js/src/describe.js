// The class-free neutral form (spec/neutral.md, "zarchive-generic-1"): every node described from
// the file alone, without any class the file names. The walk checks each node's fields and charges
// every member and inline value against the read's budget before it decodes it.

import { FormatError, UnsafeArchiveError } from "./errors.js";
import { READER_MAJOR, READER_MINOR } from "./archive.js";
import { parseCost, parseJson, decodeUtf8 } from "./json.js";
import { dumpsCompact, pyFloatRepr } from "./pyjson.js";
import { sha256 } from "./sha256.js";
import { checkShape, numpyDtype, numpyName, torchDtype } from "./dtypes.js";
import { readNpy } from "./npy.js";
import { readSafetensors } from "./safetensors.js";
import { fortranToC, fromBase64, gather, inlineData, swapInPlace, swapUnit, toHalfBits } from "./values.js";
import { tensorRows } from "./tables.js";

export const FORM_NAME = "zarchive-generic-1";
export const MAX_DEPTH = 200;
export const MAX_NODES = 20_000_000;
const NAN = "7ff8000000000000";
const SPECIAL = { nan: NAN, inf: "7ff0000000000000", "-inf": "fff0000000000000" };
const TWO53 = 2n ** 53n;

/** An object path component escaped (spec 3.1) and joined. */
export function child(path, c) {
  const e = String(c).replace(/~/g, "~0").replace(/\//g, "~1");
  return path === "" ? e : `${path}/${e}`;
}

export function floatBits(x) {
  const dv = new DataView(new ArrayBuffer(8));
  dv.setFloat64(0, x);
  return dv.getBigUint64(0).toString(16).padStart(16, "0");
}

const isMap = (v) => v instanceof Map;
const isInt = (v) => typeof v === "bigint";

export class Describer {
  constructor(archive, tables) {
    this.arc = archive;
    this.tables = tables; // $type -> (describer, node, path) => desc, for pandas and polars
    this.depth = 0;
    this.nodes = 0;
    this.arrays = new Map(); // .npy member -> first path
    this.tensors = []; // [desc, entry, identity, nonempty]
    this.identities = new Map();
    this.headers = new Map(); // safetensors member -> parsed header
  }

  run() {
    const out = this.value(this.arc.manifest.get("root"), "");
    this.storages();
    return out;
  }

  fail(path, msg) {
    return new FormatError(`at ${path === "" ? "(root)" : path}: ${msg}`);
  }

  value(node, path, extra = 0) {
    this.depth += 1 + extra;
    try {
      if (this.depth > MAX_DEPTH) throw this.fail(path, `nodes nested more than ${MAX_DEPTH} levels`);
      if (++this.nodes > MAX_NODES) throw new UnsafeArchiveError(`more than ${MAX_NODES} nodes`);
      const out = this.describe(node, path);
      out.path = path;
      return out;
    } finally {
      this.depth -= 1 + extra;
    }
  }

  describe(node, path) {
    if (node === null) return { kind: "null" };
    if (typeof node === "boolean") return { kind: "bool", value: node };
    if (typeof node === "string") return { kind: "str", value: node };
    if (isInt(node)) {
      if (node > TWO53 || node < -TWO53) throw this.fail(path, `the integer ${node} is outside [-2^53, 2^53]; larger ones are 'int' nodes`);
      return { kind: "int", value: node.toString() };
    }
    if (typeof node === "number") return { kind: "float", bits: floatBits(node) };
    if (Array.isArray(node)) return { kind: "list", items: node.map((v, i) => this.value(v, child(path, i))) };
    if (!isMap(node)) throw this.fail(path, "a node is missing here (a required field of its parent)");
    const tag = node.get("$type");
    if (tag === undefined) {
      for (const k of node.keys()) if (k.startsWith("$")) throw this.fail(path, `an object with '${k}' but no '$type'`);
      return { kind: "dict", class: "dict", entries: [...node].map(([k, v]) => [k, this.value(v, child(path, k))]) };
    }
    const method = typeof tag === "string" && Object.hasOwn(TYPED, tag) ? TYPED[tag] : null;
    if (method) return method.call(this, node, path);
    const table = typeof tag === "string" && this.tables && Object.hasOwn(this.tables, tag) ? this.tables[tag] : null;
    if (table) return table(this, node, path);
    if (typeof tag === "string" && this.arc.version[1] > READER_MINOR) throw this.fail(path, `node type '${tag}' is newer than this reader (${READER_MAJOR}.${READER_MINOR}; the file is ${this.arc.version.join(".")})`);
    throw this.fail(path, `unknown node type ${JSON.stringify(String(tag)).slice(0, 80)}`);
  }

  text(node, key, path) {
    const v = node.get(key);
    if (typeof v !== "string") throw this.fail(path, `a '${node.get("$type")}' node needs a string '${key}'`);
    return v;
  }

  count(node, key, path) {
    const v = node.get(key);
    if (!isInt(v) || v < 0n || v > TWO53) throw this.fail(path, `a '${node.get("$type")}' node needs a non-negative int '${key}'`);
    return Number(v);
  }

  // --- members ---
  memberBytes(ref, nbytes, path) {
    const m = this.arc.ref(ref, path);
    if (!isInt(nbytes) || Number(nbytes) !== m.size) {
      throw new UnsafeArchiveError(`at ${path || "(root)"}: member '${ref}' declares ${m.size} bytes, the manifest needs ${nbytes}`);
    }
    return this.arc.member(ref, path);
  }

  /** The values of a `.jsonl` member of `length` lines (spec 4.3). */
  jsonl(ref, nbytes, length, path) {
    const data = this.memberBytes(ref, nbytes, path);
    this.arc.budget.charge(parseCost(data), `parsing this JSON (member '${ref}')`);
    const text = decodeUtf8(data, `member '${ref}'`);
    if (text && !text.endsWith("\n")) throw this.fail(path, `member '${ref}': a .jsonl member must end with a newline`);
    const lines = text ? text.slice(0, -1).split("\n") : [];
    if (lines.length !== length) throw this.fail(path, `member '${ref}' holds ${lines.length} lines, the manifest declares ${length}`);
    return lines.map((l) => parseJson(l, `member '${ref}'`));
  }

  /** The nodes of a `list` node's member, checked as its `items` says. */
  lines(node, path) {
    const length = this.count(node, "length", path);
    const items = node.get("items");
    if (items !== "plain" && items !== "nodes") throw this.fail(path, "a 'list' node needs 'items' \"plain\" or \"nodes\"");
    const values = this.jsonl(node.get("$ref"), node.get("nbytes"), length, path);
    for (const v of values) {
      if (items === "plain" && (Array.isArray(v) || isMap(v))) throw this.fail(path, "a 'plain' list holds nodes");
      if (items === "nodes" && hasRef(v)) throw this.fail(path, "lines of a 'list' node point at members");
    }
    return values;
  }

  sequence(items, path) {
    if (Array.isArray(items)) return items;
    if (isMap(items) && items.get("$type") === "list") return this.lines(items, path);
    throw this.fail(path, "expected a list (an array or a 'list' node)");
  }

  // --- spec 5.1 ---
  tInt(node, path) {
    return { kind: "int", value: intFromHex(this.text(node, "hex", path), path).toString() };
  }

  tFloat(node, path) {
    return { kind: "float", bits: specialBits(node, path) };
  }

  tList(node, path) {
    return { kind: "list", items: this.lines(node, path).map((v, i) => this.value(v, child(path, i))) };
  }

  tTuple(node, path) {
    const items = this.sequence(node.get("items"), path);
    return { kind: "tuple", items: items.map((v, i) => this.value(v, child(path, i), 1)) };
  }

  tSet(node, path) {
    const items = node.get("items");
    if (!Array.isArray(items)) throw this.fail(path, "set items must be a list");
    return { kind: "set", frozen: node.get("frozen") === true, items: items.map((v, i) => this.value(v, child(path, i))) };
  }

  tDict(node, path) {
    const cls = node.has("class") ? node.get("class") : "dict";
    if (!["dict", "OrderedDict", "defaultdict"].includes(cls)) throw this.fail(path, `unknown dict class ${JSON.stringify(String(cls))}`);
    const out = { kind: "dict", class: cls };
    let entries;
    if (isMap(node.get("data"))) {
      entries = [...node.get("data")].map(([k, v]) => [k, this.value(v, child(path, k))]);
    } else if (node.has("tensors")) {
      entries = tensorRows(node.get("tensors"), (m) => this.fail(path, m)).map(([name, n]) => [name, this.value(n, child(path, name))]);
    } else if (Array.isArray(node.get("items"))) {
      entries = node.get("items").map((pair) => {
        if (!Array.isArray(pair) || pair.length !== 2) throw this.fail(path, "dict items must be [key, value] pairs");
        const name = nodeLabel(pair[0]);
        const key = typeof pair[0] === "string" ? pair[0] : this.value(pair[0], child(path, `${name}.key`));
        return [key, this.value(pair[1], child(path, name))];
      });
    } else throw this.fail(path, "a 'dict' node needs 'data', 'tensors' or 'items'");
    out.entries = entries;
    if (cls === "defaultdict") out.default_factory = node.has("default_factory") ? node.get("default_factory") : null;
    const attrs = node.get("attrs");
    if (isMap(attrs) && attrs.has("_metadata")) out._metadata = this.value(attrs.get("_metadata"), child(path, "_metadata"));
    return out;
  }

  tBytes(node, path) {
    let data;
    if (node.has("$ref")) data = this.memberBytes(node.get("$ref"), node.get("nbytes"), path);
    else {
      const text = this.text(node, "base64", path);
      this.arc.budget.charge((text.length / 4) * 3, `at ${path || "(root)"}: inline bytes`);
      data = fromBase64(text, `at ${path || "(root)"}`);
    }
    return { kind: "bytes", bytearray: node.get("bytearray") === true, length: data.length, sha256: sha256(data) };
  }

  tComplex(node, path) {
    return { kind: "complex", real: floatPart(node.get("real"), path), imag: floatPart(node.get("imag"), path) };
  }

  tDatetime(node, path) {
    const kind = node.get("kind");
    if (kind === "timedelta") {
      const out = { kind };
      for (const k of ["days", "seconds", "microseconds"]) {
        if (!isInt(node.get(k))) throw this.fail(path, "a timedelta needs int days, seconds and microseconds");
        out[k] = node.get(k);
      }
      return out;
    }
    if (!["datetime", "date", "time"].includes(kind)) throw this.fail(path, `unknown datetime kind ${JSON.stringify(String(kind))}`);
    const out = { kind, iso: this.text(node, "iso", path), ...zoneFields(this, node, path) };
    if (node.get("fold") === 1n) out.fold = 1;
    return out;
  }

  tPath(node, path) {
    const cls = node.get("class");
    if (!["PurePosixPath", "PureWindowsPath", "PosixPath", "WindowsPath"].includes(cls)) throw this.fail(path, `unknown path class ${JSON.stringify(String(cls))}`);
    return { kind: "path", class: cls, value: this.text(node, "value", path) };
  }

  tEnum(node, path) {
    const out = { kind: "enum", class: this.text(node, "class", path) };
    const name = node.has("name") ? node.get("name") : null;
    if (name !== null && typeof name !== "string") throw this.fail(path, "an enum member's 'name' must be a string");
    out.name = name;
    out.value = node.has("value") ? this.value(node.get("value"), child(path, "value")) : null;
    const names = node.has("names") ? node.get("names") : null;
    if (names !== null && !(Array.isArray(names) && names.every((n) => typeof n === "string"))) throw this.fail(path, "an enum's 'names' must be a list of strings");
    out.names = names;
    return out;
  }

  tText(node, path) {
    const kind = { Decimal: "decimal", UUID: "uuid" }[node.get("kind")];
    if (!kind) throw this.fail(path, `unknown text_value kind ${JSON.stringify(String(node.get("kind")))}`);
    return { kind, value: this.text(node, "value", path) };
  }

  // --- numpy (5.2) ---
  tNdarray(node, path) {
    const dtext = node.get("dtype");
    if (dtext === "object") {
      const shape = checkShape(node.get("shape"), `at ${path || "(root)"}`);
      const base = child(path, "items");
      const items = this.sequence(node.get("items"), base);
      if (items.length !== shape.count) throw this.fail(path, "an object array's items do not fill its shape");
      return { kind: "ndarray", dtype: "object", shape: shape.dims, order: "C", items: items.map((v, i) => this.value(v, child(base, i))) };
    }
    const a = this.arrayBytes(node, path);
    const out = { kind: "ndarray", dtype: dtext, shape: a.dims, order: a.order, sha256: sha256(a.bytes) };
    if (a.ref !== undefined) {
      const first = this.arrays.get(a.ref);
      if (first === undefined) this.arrays.set(a.ref, path);
      else out.same_as = first;
    }
    return out;
  }

  /** A numpy.ndarray node's values (not `object`): {d, dims, count, order, ref, bytes (little-endian, C order)}. */
  arrayBytes(node, path) {
    const where = `at ${path || "(root)"}`;
    if (!isMap(node) || node.get("$type") !== "numpy.ndarray") throw this.fail(path, "expected a numpy.ndarray node");
    const dtext = node.get("dtype");
    const shape = checkShape(node.get("shape"), where);
    const order = node.has("order") ? node.get("order") : "C";
    if (order !== "C" && order !== "F") throw this.fail(path, `bad order ${JSON.stringify(String(order))}`);
    const d = numpyDtype(dtext, where);
    const need = shape.count * d.itemsize;
    const out = { d, dims: shape.dims, count: shape.count, order };
    let bytes;
    if (node.has("$ref")) {
      const ref = node.get("$ref");
      const npy = readNpy(this.arc.member(ref, path), `member '${ref}' (${where})`);
      if (npy.dtype.str !== dtext || npy.shape.join() !== shape.dims.join()) {
        throw this.fail(path, `the member's header says ${npy.dtype.str}[${npy.shape.join(", ")}], the manifest ${dtext}[${shape.dims.join(", ")}]`);
      }
      bytes = npy.fortran ? fortranToC(npy.data, npy.shape, d.itemsize) : npy.data.slice();
      out.ref = ref;
    } else if (node.has("data")) {
      this.arc.budget.charge(need, `${where}: inline array data`);
      out.bytes = inlineData(node.get("data"), d, shape.dims, where);
      return out; // already little-endian
    } else if (node.has("base64")) {
      this.arc.budget.charge(need, `${where}: inline array data`);
      bytes = fromBase64(node.get("base64"), where, need);
    } else throw this.fail(path, "a numpy.ndarray node needs '$ref', 'data', 'base64' or 'items'");
    if (d.order === ">") swapInPlace(bytes, swapUnit(d));
    out.bytes = bytes;
    return out;
  }

  /** A one-dimensional integer or bool array's values as Numbers (BigInt past 2^53 refused). */
  arrayNumbers(node, path, length, kinds, what) {
    const a = this.arrayBytes(node, path);
    if (a.dims.length !== 1 || !kinds.includes(a.d.kind) || (length !== null && a.dims[0] !== length)) {
      throw this.fail(path, `${what} must be a one-dimensional ${kinds.includes("b") ? "bool" : "signed integer"} array of ${length} items (int64 or int32 for offsets)`);
    }
    const dv = new DataView(a.bytes.buffer, a.bytes.byteOffset, a.bytes.byteLength);
    const out = new Array(a.count);
    const s = a.d.itemsize;
    for (let i = 0; i < a.count; i++) {
      if (a.d.kind === "b") out[i] = a.bytes[i] !== 0;
      else if (s === 8) {
        const v = a.d.kind === "i" ? dv.getBigInt64(8 * i, true) : dv.getBigUint64(8 * i, true);
        out[i] = v > TWO53 || v < -TWO53 ? (v < 0n ? -Infinity : Infinity) : Number(v);
      } else if (s === 4) out[i] = a.d.kind === "i" ? dv.getInt32(4 * i, true) : dv.getUint32(4 * i, true);
      else if (s === 2) out[i] = a.d.kind === "i" ? dv.getInt16(2 * i, true) : dv.getUint16(2 * i, true);
      else out[i] = a.d.kind === "i" ? dv.getInt8(i) : dv.getUint8(i);
    }
    return { values: out, d: a.d };
  }

  tScalar(node, path) {
    const where = `at ${path || "(root)"}`;
    const dtext = node.get("dtype");
    const d = numpyDtype(dtext, where);
    this.arc.budget.charge(d.itemsize, `${where}: a numpy scalar`);
    let bytes;
    if (node.has("base64")) bytes = fromBase64(node.get("base64"), where, d.itemsize);
    else if (node.has("real") || node.has("imag")) {
      if (d.kind !== "c" || d.size > 16) throw this.fail(path, `a ${dtext} scalar has no real and imag`);
      bytes = new Uint8Array(d.size);
      const dv = new DataView(bytes.buffer);
      const re = bitsToFloat(floatPart(node.get("real"), path));
      const im = bitsToFloat(floatPart(node.get("imag"), path));
      if (d.size === 16) dv.setFloat64(0, re, true), dv.setFloat64(8, im, true);
      else dv.setFloat32(0, re, true), dv.setFloat32(4, im, true);
      return { kind: "numpy.scalar", dtype: dtext, hex: hex(bytes) };
    } else if (node.has("value")) {
      let v = node.get("value");
      if (d.kind === "U") {
        if (typeof v !== "string") throw this.fail(path, "a unicode scalar's value must be a string");
        const cps = [...v].map((c) => c.codePointAt(0));
        if (cps.length > d.size) throw this.fail(path, `the value is longer than ${dtext}`);
        bytes = new Uint8Array(d.itemsize);
        cps.forEach((c, i) => new DataView(bytes.buffer).setUint32(4 * i, c, true));
        return { kind: "numpy.scalar", dtype: dtext, hex: hex(bytes) };
      }
      if (d.kind === "f" && d.size <= 8 && (isMap(v) || typeof v === "number" || isInt(v))) {
        const bits = BigInt(`0x${floatPart(v, path)}`);
        return { kind: "numpy.scalar", dtype: dtext, hex: hex(narrow(bits, d.size)) };
      }
      bytes = inlineData(v, { ...d }, [], where);
      return { kind: "numpy.scalar", dtype: dtext, hex: hex(bytes) };
    } else throw this.fail(path, "a numpy.scalar node needs 'value', 'real'/'imag' or 'base64'");
    if (d.order === ">") swapInPlace(bytes, swapUnit(d));
    return { kind: "numpy.scalar", dtype: dtext, hex: hex(bytes) };
  }

  tDtype(node, path) {
    return { kind: "numpy.dtype", value: this.text(node, "value", path) };
  }

  // --- torch (5.4) ---
  tensorBytes(node, path) {
    const where = `at ${path || "(root)"}`;
    const t = torchDtype(node.get("dtype"), where);
    const shape = checkShape(node.get("shape"), where);
    const ref = node.get("$ref");
    const key = node.get("key");
    if (typeof key !== "string") throw this.fail(path, "a torch.Tensor node needs a string 'key'");
    this.arc.ref(ref, path);
    let header = this.headers.get(ref);
    if (!header) {
      const bytes = this.arc.member(ref, path);
      header = readSafetensors(bytes, `member '${ref}'`, (raw) => this.arc.budget.charge(parseCost(raw), `parsing this JSON (member '${ref}' header)`));
      this.headers.set(ref, header);
    }
    const e = header.get(key);
    if (!e) throw this.fail(path, `tensor '${key}' is not in the member '${ref}'`);
    this.arc.checkEntry(ref, "$header");
    this.arc.checkEntry(ref, key);
    const storage = this.arc.member(ref, path).subarray(e.begin, e.end);
    const view = node.get("view");
    const need = shape.count * t.size;
    this.arc.budget.charge(need, `${where}: hashing the tensor's values`);
    if (view !== undefined) {
      if (!isMap(view)) throw this.fail(path, "bad tensor view");
      const off = view.get("storage_offset");
      const stride = view.get("stride");
      if (e.code !== "U8" || e.shape.length !== 1 || storage.length % t.size) throw this.fail(path, `bad tensor view: the member stores '${key}' as ${e.code}[${e.shape.join(", ")}]`);
      if (!isInt(off) || off < 0n || !Array.isArray(stride) || stride.length !== shape.dims.length || !stride.every((s) => isInt(s) && s >= 0n)) {
        throw this.fail(path, "bad tensor view (storage_offset and one non-negative stride per dimension)");
      }
      const strides = stride.map(Number);
      const bytes = gather(storage, t.size, shape.dims, strides, Number(off), where);
      return { t, shape, bytes, offset: Number(off), stride: strides, entry: [ref, key] };
    }
    const same = e.code === t.code && e.shape.join() === shape.dims.join();
    const raw = e.code === "U8" && e.shape.length === 1 && e.shape[0] === need && (t.code === null || true);
    if (!same && !(raw && (t.code === null || t.code === "U8" || e.shape[0] === need))) {
      throw this.fail(path, `the member stores '${key}' as ${e.code}[${e.shape.join(", ")}], the node says ${t.name}[${shape.dims.join(", ")}]`);
    }
    if (!same && t.code !== null && t.code !== "U8") {
      throw this.fail(path, `the member stores '${key}' as ${e.code}[${e.shape.join(", ")}], the node says ${t.name}[${shape.dims.join(", ")}]`);
    }
    return { t, shape, bytes: storage, offset: 0, stride: cStrides(shape.dims), entry: [ref, key] };
  }

  tTensor(node, path) {
    const v = this.tensorBytes(node, path);
    const out = {
      kind: "tensor",
      dtype: v.t.name,
      shape: v.shape.dims,
      device: node.get("device"),
      parameter: node.get("parameter") === true,
      requires_grad: node.get("requires_grad") === true,
      sha256: sha256(v.bytes),
    };
    const identity = dumpsCompact(new Map(["$ref", "key", "dtype", "shape", "device", "view"].map((k) => [k, node.has(k) ? node.get(k) : null]).concat([["parameter", out.parameter], ["requires_grad", out.requires_grad]])));
    const first = this.identities.get(identity);
    if (first === undefined) this.identities.set(identity, path);
    else out.same_as = first;
    out.storage = { offset: v.offset, stride: v.stride };
    if (this.onTensor) this.onTensor(path, v.t.name, v.shape.dims, v.bytes);
    this.tensors.push([out, v.entry.join("\u0000"), identity, v.shape.count > 0]);
    return out;
  }

  storages() {
    const users = new Map();
    const firsts = new Map();
    for (const [desc, entry, identity, nonempty] of this.tensors) {
      if (!nonempty) continue;
      if (!users.has(entry)) users.set(entry, new Set()), firsts.set(entry, desc.path);
      users.get(entry).add(identity);
    }
    for (const [desc, entry, , nonempty] of this.tensors) {
      if (!nonempty || (users.get(entry)?.size ?? 0) < 2) delete desc.storage;
      else desc.storage = { first: firsts.get(entry), ...desc.storage };
    }
  }

  tDevice(node, path) {
    return { kind: "torch.device", value: this.text(node, "value", path) };
  }

  tTorchDtype(node, path) {
    return { kind: "torch.dtype", value: this.text(node, "value", path) };
  }

  tSize(node, path) {
    const items = node.get("items");
    if (!Array.isArray(items) || !items.every(isInt)) throw this.fail(path, "a torch.Size needs a list of ints");
    return { kind: "torch.Size", items };
  }

  // --- classes (models.md) ---
  tFields(node, path) {
    const fields = node.get("fields");
    if (!isMap(fields)) throw this.fail(path, `a '${node.get("$type")}' node lacks its 'fields' object`);
    return { kind: node.get("$type"), class: this.text(node, "class", path), fields: [...fields].map(([k, v]) => [k, this.value(v, child(path, k))]) };
  }

  tModel(node, path) {
    const obj = (k) => {
      const v = node.has(k) ? node.get(k) : new Map();
      if (!isMap(v)) throw this.fail(path, `a model's '${k}' must be an object`);
      return v;
    };
    const strings = (v, k) => {
      if (!Array.isArray(v) || !v.every((s) => typeof s === "string")) throw this.fail(path, `a model's '${k}' must be a list of strings`);
      return v;
    };
    const out = { kind: "model", class: this.text(node, "class", path) };
    out.config = this.value(node.get("config"), child(path, "config"));
    out.state_dict = this.value(node.get("state_dict"), child(path, "state_dict"));
    if (typeof node.get("training") !== "boolean") throw this.fail(path, "a model node needs a boolean 'training'");
    out.training = node.get("training");
    out.training_modules = [...obj("training_modules")].map(([k, v]) => [k, v]);
    out.unsaved_buffers = [...obj("unsaved_buffers")].map(([k, v]) => (isMap(v) ? [k, v.get("dtype") ?? null, v.get("device") ?? null] : [k, null, null]));
    out.tensor_attributes = strings(node.has("tensor_attributes") ? node.get("tensor_attributes") : [], "tensor_attributes");
    if (node.has("training_records")) out.training_records = this.value(node.get("training_records"), child(path, "training_records"));
    out.modules = node.has("modules") ? [...obj("modules")].map(([k, v]) => [k, v]) : null;
    out.parameters = node.has("parameters") ? [...obj("parameters")].map(([k, v]) => [k, v]) : null;
    out.buffers = node.has("buffers") ? strings(node.get("buffers"), "buffers") : null;
    return out;
  }
}

const TYPED = {
  int: Describer.prototype.tInt,
  float: Describer.prototype.tFloat,
  list: Describer.prototype.tList,
  tuple: Describer.prototype.tTuple,
  set: Describer.prototype.tSet,
  dict: Describer.prototype.tDict,
  bytes: Describer.prototype.tBytes,
  complex: Describer.prototype.tComplex,
  datetime: Describer.prototype.tDatetime,
  path: Describer.prototype.tPath,
  enum: Describer.prototype.tEnum,
  text_value: Describer.prototype.tText,
  "numpy.ndarray": Describer.prototype.tNdarray,
  "numpy.scalar": Describer.prototype.tScalar,
  "numpy.dtype": Describer.prototype.tDtype,
  "torch.Tensor": Describer.prototype.tTensor,
  "torch.device": Describer.prototype.tDevice,
  "torch.dtype": Describer.prototype.tTorchDtype,
  "torch.Size": Describer.prototype.tSize,
  dataclass: Describer.prototype.tFields,
  namedtuple: Describer.prototype.tFields,
  "torch.ConfiguredModel": Describer.prototype.tModel,
};

function hasRef(v) {
  if (Array.isArray(v)) return v.some(hasRef);
  if (isMap(v)) return v.has("$ref") || [...v.values()].some(hasRef);
  return false;
}

export function hex(bytes) {
  let s = "";
  for (const b of bytes) s += b.toString(16).padStart(2, "0");
  return s;
}

/**
 * A double (its 64 bits) narrowed to a float of `size` bytes, little-endian (neutral.md section 4):
 * a NaN keeps its sign, gets the quiet bit and the top bits of its fraction; others round.
 */
function narrow(bits, size) {
  const out = new Uint8Array(size);
  const dv = new DataView(out.buffer);
  const x = bitsToFloat(bits.toString(16).padStart(16, "0"));
  const sign = Number(bits >> 63n);
  const frac = bits & ((1n << 52n) - 1n);
  if (size === 8) dv.setBigUint64(0, bits, true);
  else if (size === 4) {
    if (Number.isNaN(x)) dv.setUint32(0, ((sign << 31) | 0x7fc00000 | Number(frac >> 29n)) >>> 0, true);
    else dv.setFloat32(0, x, true);
  } else if (size === 2) {
    if (Number.isNaN(x)) dv.setUint16(0, (sign << 15) | 0x7e00 | Number(frac >> 42n), true);
    else dv.setUint16(0, toHalfBits(x), true);
  } else throw new FormatError(`a float scalar of ${size} bytes cannot be given as a number`);
  return out;
}

function bitsToFloat(bits) {
  const dv = new DataView(new ArrayBuffer(8));
  dv.setBigUint64(0, BigInt(`0x${bits}`));
  return dv.getFloat64(0);
}

export function cStrides(dims) {
  const out = [];
  let step = 1;
  for (let k = dims.length - 1; k >= 0; k--) {
    out.unshift(step);
    step *= Math.max(dims[k], 1);
  }
  return out;
}

export function intFromHex(text, path) {
  const neg = text.startsWith("-");
  const body = neg ? text.slice(1) : text;
  if (!/^0x[0-9a-f]+$/i.test(body) || text.length > 2 ** 20) throw new FormatError(`at ${path || "(root)"}: malformed 'int' node hex ${JSON.stringify(text.slice(0, 40))}`);
  const v = BigInt(body);
  return neg ? -v : v;
}

export function specialBits(node, path) {
  const value = node.get("value");
  if (!Object.hasOwn(SPECIAL, value)) throw new FormatError(`at ${path || "(root)"}: a 'float' node's value must be nan, inf or -inf`);
  const bits = node.get("bits");
  if (value === "nan" && typeof bits === "string") {
    if (!/^[0-9a-f]{16}$/.test(bits) || !Number.isNaN(bitsToFloat(bits))) throw new FormatError(`at ${path || "(root)"}: a 'float' node's bits are not a NaN's 16 hex digits`);
    return bits;
  }
  return SPECIAL[value];
}

/** A number DESC (no path) of a JSON number or an int/float node. */
export function numberDesc(x, path) {
  if (isInt(x)) return { kind: "int", value: x.toString() };
  if (typeof x === "number") return { kind: "float", bits: floatBits(x) };
  if (isMap(x) && x.get("$type") === "int" && typeof x.get("hex") === "string") return { kind: "int", value: intFromHex(x.get("hex"), path).toString() };
  if (isMap(x) && x.get("$type") === "float") return { kind: "float", bits: specialBits(x, path) };
  throw new FormatError(`at ${path || "(root)"}: expected a number`);
}

function floatPart(x, path) {
  const d = numberDesc(x, path);
  return d.kind === "int" ? floatBits(Number(BigInt(d.value))) : d.bits;
}

export function zoneFields(self, node, path) {
  const out = {};
  if (node.has("tz")) out.tz = self.text(node, "tz", path);
  if (node.has("tz_offset_seconds")) out.tz_offset_seconds = numberDesc(node.get("tz_offset_seconds"), path);
  for (const k of ["tz_name", "tz_lib"]) if (node.has(k)) out[k] = self.text(node, k, path);
  return out;
}

/** The object-path name of a dict key from its node (spec 3.1). */
export function nodeLabel(node) {
  if (isMap(node)) {
    const tag = node.get("$type");
    if (tag === "int" && typeof node.get("hex") === "string" && node.get("hex").length <= 64) {
      try {
        return intFromHex(node.get("hex"), "").toString();
      } catch {
        /* fall through */
      }
    } else if (tag === "float" && ["nan", "inf", "-inf"].includes(node.get("value"))) return node.get("value");
    else if (tag === "tuple" && Array.isArray(node.get("items"))) return node.get("items").map(nodeLabel).join(",");
    return dumpsCompact(node).slice(0, 200);
  }
  if (Array.isArray(node)) return dumpsCompact(node).slice(0, 200);
  if (typeof node === "string") return node;
  if (typeof node === "number") return pyFloatRepr(node);
  return dumpsCompact(node);
}

export { numpyName };
