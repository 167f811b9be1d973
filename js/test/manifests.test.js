// Malformed manifests (their checksums right) are refused with a FormatError naming the path, never
// with a TypeError or RangeError.

import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import { FormatError, MemberNotFoundError, neutralForm, openArchive } from "../src/index.js";
import { EXAMPLES, load, withManifest } from "./helpers.js";

const base = load(join(EXAMPLES, "python_types.uncompressed.zarc")); // a long manifest to replace
const form = (root) => neutralForm(openArchive(withManifest(base, `{"format": "zarchive", "format_version": "1.0", "root": ${root}}`)));

test("a model node without its config", () => {
  assert.throws(() => form('{"m": {"$type": "torch.ConfiguredModel", "class": "a:B", "training": true}}'), (e) => e instanceof FormatError && /at m\/config/.test(e.message));
});

test("objects with $-keys but no $type, unknown types, bad shapes", () => {
  assert.throws(() => form('{"a": {"$ref": "x"}}'), /no '\$type'/);
  assert.throws(() => form('{"$type": "evil.Pickle"}'), /unknown node type/);
  assert.throws(() => form('{"$type": "json"}'), FormatError);
  assert.throws(() => form('{"$type": "numpy.ndarray", "dtype": "<f4", "shape": [-1], "base64": ""}'), /bad dimension -1/);
  assert.throws(() => form('{"$type": "numpy.ndarray", "dtype": "|O8", "shape": [1], "base64": "AAAAAAAAAAA="}'), /not allowed/);
  assert.throws(() => form('{"$type": "numpy.ndarray", "dtype": "<f8", "shape": [1000000, 1000000, 1000000], "base64": ""}'), /max_read_bytes/);
  assert.throws(() => form('{"$type": "numpy.ndarray", "dtype": "<i4", "shape": [2], "data": [1, 2, 3]}'), /nesting/);
});

test("references to members that are not there, or reserved", () => {
  assert.throws(() => form('{"$type": "bytes", "$ref": "../x.bin", "nbytes": 1}'), MemberNotFoundError);
  assert.throws(() => form('{"$type": "bytes", "$ref": "metadata.json", "nbytes": 1}'), MemberNotFoundError);
  assert.throws(() => form('{"$type": "bytes", "$ref": 7, "nbytes": 1}'), FormatError);
});

test("nesting past 200 levels of nodes", () => {
  const deep = '{"$type": "tuple", "items": ['.repeat(101) + "1" + "]}".repeat(101);
  assert.throws(() => form(deep), /nested more than 200/);
});
