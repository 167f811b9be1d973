// The weights hash (spec/weights-hash.md): a SHA-256 of named tensors by name, dtype, shape and
// values, whatever the file's layout.

import { Describer } from "./describe.js";
import { FormatError } from "./errors.js";
import { TABLE_TYPES } from "./frames.js";
import { Sha256, sha256 } from "./sha256.js";

const enc = new TextEncoder();

function u32(n) {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n, true);
  return b;
}

function u64(n) {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, BigInt(n), true);
  return b;
}

/** TENSOR_DIGEST of one tensor (section 2): `data` its little-endian values in C order. */
export function tensorDigest(dtype, shape, data) {
  const h = new Sha256();
  const d = enc.encode(dtype);
  h.update(enc.encode("zarchive.tensor.v1\u0000")).update(u32(d.length)).update(d).update(u32(shape.length));
  for (const s of shape) h.update(u64(s));
  return h.update(u64(data.length)).update(data).digest();
}

/** WEIGHTS_HASH (section 3) of [name, digest] pairs, as 64 hex digits. */
export function combine(named) {
  const rows = named.map(([name, digest]) => [enc.encode(name), digest]);
  const cmp = (a, b) => {
    for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i];
    return a.length - b.length;
  };
  rows.sort((x, y) => cmp(x[0], y[0]) || cmp(x[1], y[1]));
  const h = new Sha256().update(enc.encode("zarchive.weights.v1\u0000")).update(u64(rows.length));
  for (const [name, digest] of rows) h.update(u32(name.length)).update(name).update(digest);
  return h.hex();
}

/** The node at an object path of the manifest (plain objects and typed nodes' NODE fields by key). */
function nodeAt(root, objpath) {
  let node = root;
  if (objpath === "") return node;
  for (const raw of objpath.split("/")) {
    const c = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (node instanceof Map && node.get("$type") === "dict" && node.get("data") instanceof Map) node = node.get("data").get(c);
    else if (node instanceof Map && node.get("$type") === "torch.ConfiguredModel") node = node.get(c);
    else if (node instanceof Map && !node.has("$type")) node = node.get(c);
    else if (Array.isArray(node) && /^[0-9]+$/.test(c)) node = node[Number(c)];
    else node = undefined;
    if (node === undefined) throw new FormatError(`no value at object path '${objpath}'`);
  }
  return node;
}

/** The weights hash of the value at `objpath` of an opened archive (a model: its state dict). */
export function weightsHash(archive, objpath = "") {
  let base = objpath;
  const node = nodeAt(archive.manifest.get("root"), objpath);
  if (node instanceof Map && node.get("$type") === "torch.ConfiguredModel") base = base === "" ? "state_dict" : `${base}/state_dict`;
  const named = [];
  const w = new Describer(archive, TABLE_TYPES);
  w.onTensor = (path, dtype, shape, bytes) => {
    if (base === "" || path === base || path.startsWith(`${base}/`)) {
      const name = base === "" ? path : path === base ? "" : path.slice(base.length + 1);
      named.push([name, tensorDigest(dtype, shape, bytes)]);
    }
  };
  w.run();
  return combine(named);
}

export { sha256 };
