// Sharded checkpoints (spec/distributed.md, layout `zarchive-dcp` version 1): a directory of an
// index archive and shard archives. The caller hands over the files' bytes by name (a thin Node
// layer reads the directory); the index is checked whole before any shard is opened.

import { Archive } from "./archive.js";
import { Describer, FORM_NAME, child } from "./describe.js";
import { sha256 } from "./sha256.js";
import { FormatError, IntegrityError, MemberNotFoundError, UnsafeArchiveError, VersionError } from "./errors.js";
import { TORCH } from "./dtypes.js";
import { TABLE_TYPES } from "./frames.js";
import { asSource } from "./zip.js";

const SHARD = /^shard-[0-9a-f]{8,64}-[0-9]{5,9}\.zarc$/;
const FORMATS = ["contiguous_format", "channels_last", "channels_last_3d", "preserve_format"];
const MAX_INT = 2 ** 53;

/** A neutral DESC of plain JSON turned back into a value; anything else is refused. */
function plainOf(d, where) {
  switch (d.kind) {
    case "null": return null;
    case "bool": case "str": return d.value;
    case "int": return Number(d.value) <= MAX_INT && Number(d.value) >= -MAX_INT ? Number(d.value) : BigInt(d.value);
    case "float": {
      const dv = new DataView(new ArrayBuffer(8));
      dv.setBigUint64(0, BigInt(`0x${d.bits}`));
      return dv.getFloat64(0);
    }
    case "list": case "tuple": return d.items.map((x) => plainOf(x, where));
    case "dict":
      if (d.class === "dict" && d.entries.every(([k]) => typeof k === "string")) return Object.fromEntries(d.entries.map(([k, v]) => [k, plainOf(v, where)]));
  }
  throw new FormatError(`${where}: the index must hold plain JSON, not a '${d.kind}' value (at ${d.path})`);
}

const isInt = (v) => Number.isInteger(v) && v >= 0 && v <= MAX_INT;

/**
 * No two chunks of a tensor overlap: each element is marked once on a map of the tensor (one byte
 * per element, the memory the tensor itself takes when read), so the check is linear in the
 * tensor's size and never compares chunks pairwise.
 */
function checkTiling(t, boxes, bad, limit) {
  const total = t.shape.reduce((a, b) => a * b, 1);
  if (total > limit) throw new UnsafeArchiveError(`index.zarc: tensor ${t.fqn} has ${total} elements, over max_read_bytes (${limit})`);
  const seen = new Uint8Array(total);
  const strides = t.shape.map((_, k) => t.shape.slice(k + 1).reduce((a, b) => a * b, 1));
  for (const [, , offs, sizes] of boxes) {
    const n = sizes.reduce((a, b) => a * b, 1);
    const idx = new Array(sizes.length).fill(0);
    for (let c = 0; c < n; c++) {
      let e = 0;
      for (let k = 0; k < sizes.length; k++) e += (offs[k] + idx[k]) * strides[k];
      if (seen[e]) throw bad(`chunks of ${t.fqn} overlap`);
      seen[e] = 1;
      for (let k = sizes.length - 1; k >= 0; k--) {
        if (++idx[k] < sizes[k]) break;
        idx[k] = 0;
      }
    }
  }
}

/** Checks an index root (section 5); returns it. */
export function checkIndex(root, sizes, { indexSize = 0, maxReadBytes = null } = {}) {
  const bad = (msg) => new FormatError(`index.zarc: ${msg}`);
  if (root === null || typeof root !== "object" || Array.isArray(root)) throw bad("the root must be an object");
  if (root.layout !== "zarchive-dcp") throw bad(`layout ${JSON.stringify(root.layout)} is not "zarchive-dcp"`);
  if (!isInt(root.layout_version)) throw bad("bad layout_version");
  if (root.layout_version > 1) throw new VersionError(`index.zarc: layout_version ${root.layout_version} is newer than this reader (1): upgrade it`);
  if (typeof root.save_id !== "string") throw bad("save_id must be a string");
  for (const k of ["shards", "tensors", "objects"]) if (!Array.isArray(root[k])) throw bad(`'${k}' must be a list`);
  const files = new Set();
  for (const s of root.shards) {
    if (!s || typeof s.file !== "string" || !isInt(s.rank) || !isInt(s.size)) throw bad("a shard needs 'file', 'rank' and 'size'");
    if (!SHARD.test(s.file)) throw bad(`shard file ${JSON.stringify(s.file)} is not a shard name`);
    if (files.has(s.file)) throw bad(`shard file ${s.file} is listed twice`);
    files.add(s.file);
    const size = sizes(s.file);
    if (size === null) throw new MemberNotFoundError(`index.zarc: shard ${s.file} is missing`);
    if (size !== s.size) throw new IntegrityError(`index.zarc: shard ${s.file} is ${size} bytes, the index says ${s.size}`);
  }
  const limit = maxReadBytes ?? 2 ** 30 + 16 * root.shards.reduce((a, s) => a + s.size, indexSize);
  const fqns = new Set();
  const paths = new Set();
  const stored = new Set();
  const checkPath = (e) => {
    if (typeof e.fqn !== "string" || fqns.has(e.fqn)) throw bad(`fqn ${JSON.stringify(e.fqn)} is missing or present twice`);
    fqns.add(e.fqn);
    if (!Array.isArray(e.path) || e.path.length > 200 || !e.path.every((c) => typeof c === "string" || isInt(c))) throw bad(`bad path of ${e.fqn}`);
    const key = JSON.stringify(e.path);
    if (paths.has(key)) throw bad(`two entries have the path ${key}`);
    paths.add(key);
  };
  for (const t of root.tensors) {
    checkPath(t);
    if (typeof t.dtype !== "string" || !Object.hasOwn(TORCH, t.dtype)) throw bad(`unknown dtype of ${t.fqn}`);
    if (!Array.isArray(t.shape) || t.shape.length > 64 || !t.shape.every(isInt)) throw bad(`bad shape of ${t.fqn}`);
    if (t.memory_format !== undefined && !FORMATS.includes(t.memory_format)) throw bad(`unknown memory_format of ${t.fqn}`);
    if (!Array.isArray(t.chunks)) throw bad(`chunks of ${t.fqn} must be a list`);
    const total = t.shape.reduce((a, b) => a * b, 1);
    let covered = 0;
    const boxes = [];
    for (const c of t.chunks) {
      const ok = Array.isArray(c) && c.length === 4 && isInt(c[0]) && c[0] < root.shards.length && typeof c[1] === "string" &&
        Array.isArray(c[2]) && Array.isArray(c[3]) && c[2].length === t.shape.length && c[3].length === t.shape.length &&
        c[2].every(isInt) && c[3].every(isInt);
      if (!ok) throw bad(`a malformed chunk of ${t.fqn}`);
      if (c[2].some((o, k) => o + c[3][k] > t.shape[k])) throw bad(`a chunk of ${t.fqn} reaches past its shape`);
      const sk = `${c[0]}\u0000${c[1]}`;
      if (stored.has(sk)) throw bad(`stored chunk ${c[1]} of shard ${c[0]} is named twice`);
      stored.add(sk);
      covered += c[3].reduce((a, b) => a * b, 1);
      boxes.push(c);
    }
    if (covered !== total) throw bad(`the chunks of ${t.fqn} do not tile it (${covered} elements for ${total})`);
    checkTiling(t, boxes, bad, limit);
  }
  for (const o of root.objects) {
    checkPath(o);
    if (!isInt(o.shard) || o.shard >= root.shards.length || typeof o.key !== "string") throw bad(`bad value entry ${o.fqn}`);
  }
  const all = [...root.tensors, ...root.objects].map((e) => JSON.stringify(e.path).slice(0, -1));
  const sorted = [...all].sort();
  for (let i = 1; i < sorted.length; i++) if (sorted[i].startsWith(`${sorted[i - 1]},`)) throw bad("an entry lies inside another's path");
  return root;
}

/**
 * Opens a sharded checkpoint. `files.get(name)` gives a file (a Uint8Array or a byte source, null
 * when absent), `files.size(name)` its size (null when absent); only files the index names are
 * asked for. Returns {root (the checked index), tensor(entry) -> bytes, value(entry) -> {shard, node},
 * verify()}.
 */
export function openCheckpoint(files, opts = {}) {
  const indexBytes = files.get("index.zarc");
  if (!indexBytes) throw new MemberNotFoundError("the directory has no index.zarc: not a sharded checkpoint");
  const index = new Archive(indexBytes, opts);
  const root = checkIndex(plainOf(new Describer(index, {}).run(), "index.zarc"), (n) => files.size(n), {
    indexSize: asSource(indexBytes).size,
    maxReadBytes: opts.maxReadBytes ?? null,
  });
  const total = root.shards.reduce((a, s) => a + s.size, asSource(indexBytes).size);
  const budget = opts.maxReadBytes ?? 2 ** 30 + 16 * total;
  let used = 0;
  const shards = new Map();
  const shard = (k) => {
    if (!shards.has(k)) {
      const name = root.shards[k].file;
      const arc = new Archive(files.get(name), { ...opts, name });
      const r = arc.manifest.get("root");
      if (!(r instanceof Map) || r.get("save_id") !== root.save_id) throw new IntegrityError(`${name}: its save_id is not the index's (a shard of another save?)`);
      shards.set(k, { arc, root: r, w: new Describer(arc, TABLE_TYPES), name });
    }
    return shards.get(k);
  };
  const tensor = (t) => {
    const size = TORCH[t.dtype][1];
    const count = t.shape.reduce((a, b) => a * b, 1);
    used += count * size;
    if (used > budget) throw new UnsafeArchiveError(`${t.fqn}: assembling the checkpoint's tensors needs more than max_read_bytes (${budget})`);
    const bytes = new Uint8Array(count * size);
    const seenRefs = new Set();
    for (const [k, key, offs, sizes] of t.chunks) {
      const s = shard(k);
      const tensors = s.root.get("tensors");
      const node = tensors instanceof Map ? tensors.get(key) : undefined;
      if (!(node instanceof Map) || node.get("$type") !== "torch.Tensor") throw new FormatError(`${s.name}: chunk '${key}' of ${t.fqn} is not a tensor of its shard`);
      const ref = `${s.name}\u0000${node.get("$ref")}\u0000${node.get("key")}`;
      if (seenRefs.has(ref)) throw new FormatError(`${s.name}: two chunks name the same stored bytes`);
      seenRefs.add(ref);
      const v = s.w.tensorBytes(node, `tensors/${key}`);
      if (v.t.name !== t.dtype || v.shape.dims.join() !== sizes.join()) throw new FormatError(`${s.name}: chunk '${key}' is ${v.t.name}[${v.shape.dims}], the index says ${t.dtype}[${sizes}]`);
      copyBox(bytes, t.shape, v.bytes, offs, sizes, size);
    }
    return bytes;
  };
  const value = (o) => {
    const s = shard(o.shard);
    const objects = s.root.get("objects");
    if (!(objects instanceof Map) || !objects.has(o.key)) throw new FormatError(`${s.name}: value '${o.key}' of ${o.fqn} is not in its shard`);
    return { shard: s, node: objects.get(o.key) };
  };
  return { root, tensor, value, verify: () => [...shards.values()].forEach((s) => s.arc.verify()) };
}

/**
 * Reads a sharded checkpoint (see openCheckpoint for `files`). Returns the nested state dict:
 * tensors as {dtype, shape, bytes}, values as plain JSON where they are plain, else their neutral DESC.
 */
export function readCheckpoint(files, opts = {}) {
  const ck = openCheckpoint(files, opts);
  const out = {};
  const put = (path, v) => {
    let node = out;
    for (let i = 0; i < path.length - 1; i++) node = node[path[i]] ??= typeof path[i + 1] === "number" ? [] : {};
    node[path[path.length - 1]] = v;
  };
  for (const t of ck.root.tensors) put(t.path, { dtype: t.dtype, shape: t.shape, bytes: ck.tensor(t) });
  for (const o of ck.root.objects) {
    const { shard, node } = ck.value(o);
    const d = shard.w.value(node, `objects/${o.key}`);
    let v;
    try {
      v = plainOf(d, shard.name);
    } catch {
      v = d;
    }
    put(o.path, v);
  }
  ck.verify();
  return out;
}

/**
 * The class-free neutral form of a sharded checkpoint directory (spec/neutral.md section 8): the
 * index's entries nested by path, tensors described by the values put together from their chunks,
 * values by their nodes in their shards.
 */
export function checkpointForm(files, opts = {}) {
  const ck = openCheckpoint(files, opts);
  const top = { keys: [], kids: new Map() };
  const place = (path) => {
    let c = top;
    for (let i = 0; i < path.length - 1; i++) {
      const k = path[i];
      if (!c.kids.has(k)) c.keys.push(k), c.kids.set(k, { keys: [], kids: new Map() });
      c = c.kids.get(k);
    }
    return c;
  };
  for (const t of ck.root.tensors) {
    const c = place(t.path);
    const k = t.path[t.path.length - 1];
    c.keys.push(k);
    c.kids.set(k, { tensor: t });
  }
  for (const o of ck.root.objects) {
    const c = place(o.path);
    const k = o.path[o.path.length - 1];
    c.keys.push(k);
    c.kids.set(k, { object: o });
  }
  const describe = (n, path) => {
    if (n.tensor) {
      const t = n.tensor;
      return { kind: "tensor", dtype: t.dtype, shape: t.shape, sha256: sha256(ck.tensor(t)), path };
    }
    if (n.object) {
      const { shard } = ck.value(n.object);
      const w = new Describer(shard.arc, TABLE_TYPES);
      const out = w.value(ck.value(n.object).node, path);
      w.storages();
      return out;
    }
    const ints = n.keys.every((k) => typeof k === "number");
    if (ints && n.keys.length && [...n.keys].sort((a, b) => a - b).every((k, i) => k === i)) {
      return { kind: "list", items: n.keys.map((_, i) => describe(n.kids.get(i), child(path, i))), path };
    }
    if (ints && n.keys.length) {
      const entries = n.keys.map((k) => [{ kind: "int", value: String(k), path: child(path, `${k}.key`) }, describe(n.kids.get(k), child(path, k))]);
      return { kind: "dict", class: "dict", entries, path };
    }
    return { kind: "dict", class: "dict", entries: n.keys.map((k) => [String(k), describe(n.kids.get(k), child(path, k))]), path };
  };
  const value = describe(top, "");
  ck.verify();
  return { format: FORM_NAME, value };
}

/** Copies a chunk (C order, `sizes`) into the whole tensor (`shape`) at `offs`. */
function copyBox(dst, shape, src, offs, sizes, item) {
  const n = sizes.reduce((a, b) => a * b, 1);
  if (n === 0) return;
  const dims = shape.length;
  if (dims === 0) return dst.set(src.subarray(0, item));
  const strides = new Array(dims);
  let s = 1;
  for (let k = dims - 1; k >= 0; k--) (strides[k] = s), (s *= shape[k]);
  const row = sizes[dims - 1] * item;
  const idx = new Array(dims - 1).fill(0);
  for (let r = 0; r < n / sizes[dims - 1]; r++) {
    let e = offs[dims - 1];
    for (let k = 0; k < dims - 1; k++) e += (offs[k] + idx[k]) * strides[k];
    dst.set(src.subarray(r * row, r * row + row), e * item);
    for (let k = dims - 2; k >= 0; k--) {
      if (++idx[k] < sizes[k]) break;
      idx[k] = 0;
    }
  }
}

/** A tensor's values as Numbers (floats, ints and bool; bfloat16 and float16 widened). */
export function tensorValues(t) {
  const dv = new DataView(t.bytes.buffer, t.bytes.byteOffset, t.bytes.byteLength);
  const size = TORCH[t.dtype][1];
  const n = t.bytes.length / size;
  const get = {
    float32: (i) => dv.getFloat32(4 * i, true),
    float64: (i) => dv.getFloat64(8 * i, true),
    bfloat16: (i) => new Float32Array(new Uint32Array([dv.getUint16(2 * i, true) << 16]).buffer)[0],
    float16: (i) => half(dv.getUint16(2 * i, true)),
    int64: (i) => Number(dv.getBigInt64(8 * i, true)),
    int32: (i) => dv.getInt32(4 * i, true),
    int16: (i) => dv.getInt16(2 * i, true),
    int8: (i) => dv.getInt8(i),
    uint8: (i) => dv.getUint8(i),
    bool: (i) => dv.getUint8(i),
  }[t.dtype];
  if (!get) throw new FormatError(`no numeric view of ${t.dtype}`);
  return Array.from({ length: n }, (_, i) => get(i));
}

function half(h) {
  const e = (h >> 10) & 31;
  const m = h & 1023;
  const s = h & 0x8000 ? -1 : 1;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}
