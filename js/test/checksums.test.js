// A corruption of each kind of checksum the spec defines is caught: the zip CRC of a member's
// stored bytes, the metadata's crc32 against the zip header, a zstd member's content_crc32, a
// bgzstd chunk's crc32, a safetensors entry's crc32, and the JSON members' own CRCs.

import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import { IntegrityError, neutralForm, openArchive } from "../src/index.js";
import { EXAMPLES, load, patchMember, patchText } from "./helpers.js";

const flipLast = (data) => {
  data[data.length - 1] ^= 1;
  return data;
};
const readAll = (bytes) => {
  const arc = openArchive(bytes);
  neutralForm(arc);
  arc.verify();
};
const member = (bytes, prefix) => openArchive(bytes).members.get([...openArchive(bytes).members.keys()].find((n) => n.startsWith(prefix)));

test("a member's stored bytes that do not match the zip CRC", () => {
  const bytes = load(join(EXAMPLES, "torch_tensors.uncompressed.zarc"));
  const bad = patchMember(bytes, "tensors.safetensors", flipLast, { keepCrc: true });
  assert.throws(() => readAll(bad), (e) => e instanceof IntegrityError && /CRC-32/.test(e.message));
});

test("the manifest's bytes that do not match the zip CRC", () => {
  const bytes = load(join(EXAMPLES, "json_values.zarc"));
  const bad = patchMember(bytes, "manifest.json", (d) => ((d[d.length - 2] = 0x20), d), { keepCrc: true });
  assert.throws(() => openArchive(bad), IntegrityError);
});

test("metadata crc32 that disagrees with the zip header", () => {
  const bytes = load(join(EXAMPLES, "numpy_arrays.uncompressed.zarc"));
  const crc = member(bytes, "npy_float32.npy").entry.crc.toString(16).padStart(8, "0");
  const other = crc.replace(/^./, (c) => (c === "0" ? "1" : "0"));
  const bad = patchText(bytes, "metadata.json", `"crc32": "${crc}"`, `"crc32": "${other}"`);
  assert.throws(() => openArchive(bad), (e) => e instanceof IntegrityError && /disagree on the CRC/.test(e.message));
});

test("a zstd member whose content_crc32 lies", () => {
  const bytes = load(join(EXAMPLES, "python_types.zarc"));
  const m = member(bytes, "long_strings.jsonl.zst");
  const other = m.contentCrc.replace(/^./, (c) => (c === "0" ? "1" : "0"));
  const bad = patchText(bytes, "metadata.json", `"content_crc32": "${m.contentCrc}"`, `"content_crc32": "${other}"`);
  assert.throws(() => readAll(bad), (e) => e instanceof IntegrityError && /content_crc32/.test(e.message));
});

test("a bgzstd chunk whose crc32 lies", () => {
  const bytes = load(join(EXAMPLES, "compressed_weights.zarc"));
  const m = member(bytes, "big.safetensors.bgz");
  const crc = m.chunks[1].crc;
  const other = crc.replace(/^./, (c) => (c === "0" ? "1" : "0"));
  const bad = patchText(bytes, "metadata.json", `"${crc}"]`, `"${other}"]`);
  assert.throws(() => readAll(bad), (e) => e instanceof IntegrityError && /chunk/.test(e.message));
});

test("a bgzstd chunk whose stored bytes are damaged (member CRC fixed)", () => {
  const bytes = load(join(EXAMPLES, "compressed_weights.zarc"));
  const bad = patchMember(bytes, "array.npy.bgz", flipLast);
  // the metadata still records the old crc32: the zip header and the metadata disagree
  assert.throws(() => readAll(bad), IntegrityError);
});

test("a safetensors entry whose crc32 lies: verify and the neutral form (which checks the entries of the tensors it reads, as a lazy read does) refuse it", () => {
  const bytes = load(join(EXAMPLES, "tensor_root.uncompressed.zarc"));
  const entries = openArchive(bytes).metadata.get("members").get("tensors.safetensors").get("entries");
  const crc = Array.isArray(entries) ? entries.find((r) => r[0] === "tensor")[3] : entries.get("tensor").get("crc32");
  const other = crc.replace(/^./, (c) => (c === "0" ? "1" : "0"));
  const bad = patchText(bytes, "metadata.json", `"${crc}"`, `"${other}"`);
  assert.throws(() => neutralForm(openArchive(bad)), (e) => e instanceof IntegrityError && /entry 'tensor'/.test(e.message));
  assert.throws(() => openArchive(bad).verify(), (e) => e instanceof IntegrityError && /entry 'tensor'/.test(e.message));
});
