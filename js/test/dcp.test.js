// The sharded checkpoint example (spec/distributed.md, spec/examples/dcp_sharded): assembled from
// its chunks to the values of expected.json; a missing shard, a shard of the wrong size and lying
// chunk offsets are refused.

import assert from "node:assert/strict";
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { readCheckpoint, tensorValues } from "../src/dcp.js";
import { ZarcError } from "../src/index.js";
import { EXAMPLES } from "./helpers.js";

const DIR = join(EXAMPLES, "dcp_sharded");
const disk = {
  get: (n) => (existsSync(join(DIR, n)) ? new Uint8Array(readFileSync(join(DIR, n))) : null),
  size: (n) => (existsSync(join(DIR, n)) ? statSync(join(DIR, n)).size : null),
};
const plain = (v) =>
  v && v.bytes ? { dtype: v.dtype, shape: v.shape, values: tensorValues(v) }
  : Array.isArray(v) ? v.map(plain)
  : v && typeof v === "object" ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]))
  : v;

test("the DCP example reads to expected.json", () => {
  const want = JSON.parse(readFileSync(join(DIR, "expected.json"), "utf8"));
  assert.deepStrictEqual(plain(readCheckpoint(disk)), want);
});

test("a missing shard is refused", () => {
  const files = { get: (n) => (n.startsWith("shard-") && n.endsWith("1.zarc") ? null : disk.get(n)), size: (n) => (n.startsWith("shard-") && n.endsWith("1.zarc") ? null : disk.size(n)) };
  assert.throws(() => readCheckpoint(files), (e) => e instanceof ZarcError && /missing/.test(e.message));
});

test("a shard whose length differs from the index is refused", () => {
  const files = { get: disk.get, size: (n) => (n.startsWith("shard-") ? disk.size(n) + 1 : disk.size(n)) };
  assert.throws(() => readCheckpoint(files), ZarcError);
});

test("the index's checks: lying offsets, overlaps, an unknown layout", async () => {
  const { checkIndex } = await import("../src/dcp.js");
  const base = () => ({
    layout: "zarchive-dcp", layout_version: 1, save_id: "ab", objects: [],
    shards: [{ file: "shard-abcdef01-00000.zarc", rank: 0, size: 10 }],
    tensors: [{ fqn: "w", path: ["w"], dtype: "float32", shape: [4], chunks: [[0, "a", [0], [2]], [0, "b", [2], [2]]] }],
  });
  const size = () => 10;
  checkIndex(base(), size);
  const past = base();
  past.tensors[0].chunks[1][2] = [3];
  assert.throws(() => checkIndex(past, size), /past its shape/);
  const overlap = base();
  overlap.tensors[0].chunks = [[0, "a", [0], [3]], [0, "b", [1], [1]]];
  assert.throws(() => checkIndex(overlap, size), /overlap/);
  const twice = base();
  twice.tensors[0].chunks[1][1] = "a";
  assert.throws(() => checkIndex(twice, size), /named twice/);
  assert.throws(() => checkIndex({ ...base(), layout: "other" }, size), /layout/);
  assert.throws(() => checkIndex({ ...base(), layout_version: 2 }, size), /newer/);
});

test("the DCP example's class-free form equals dcp_sharded.generic.json", async () => {
  const { checkpointForm } = await import("../src/dcp.js");
  const { canonicalJson } = await import("../src/index.js");
  assert.equal(canonicalJson(checkpointForm(disk)), readFileSync(join(EXAMPLES, "dcp_sharded.generic.json"), "utf8"));
});
