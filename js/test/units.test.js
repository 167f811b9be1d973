// Pieces checked on their own: strict JSON, Python's float repr, the weights hash's check value
// (spec/weights-hash.md section 4), zip names, and zstd frames bounded by the declared size.

import assert from "node:assert/strict";
import { test } from "node:test";
import { FormatError, IntegrityError, UnsafeArchiveError } from "../src/errors.js";
import { parseJson } from "../src/json.js";
import { pyFloatRepr } from "../src/pyjson.js";
import { combine, tensorDigest } from "../src/weights.js";
import { checkName } from "../src/zip.js";
import { decodeFrame } from "../src/zstd.js";

test("strict JSON: exact ints, floats apart from ints, ordered keys, refusals", () => {
  const v = parseJson('{"2": 1, "a": [18446744073709551615, 1.0, -0.0]}', "t");
  assert.deepEqual([...v.keys()], ["2", "a"]);
  assert.equal(v.get("a")[0], 18446744073709551615n);
  assert.equal(typeof v.get("a")[1], "number");
  assert.ok(Object.is(v.get("a")[2], -0));
  for (const bad of ['{"a": 1, "a": 2}', "[NaN]", "[Infinity]", "[1e400]", "[01]", "[1,]", '"\\x"']) {
    assert.throws(() => parseJson(bad, "t"), FormatError, bad);
  }
  assert.throws(() => parseJson("[".repeat(1001) + "]".repeat(1001), "t"), /nested too deeply/);
  assert.throws(() => parseJson("7".repeat(4301), "t"), /limit/);
});

test("floats named as Python's repr names them", () => {
  const cases = [[1.5, "1.5"], [1e-7, "1e-07"], [1e300, "1e+300"], [1, "1.0"], [-0, "-0.0"], [1e16, "1e+16"], [0.0001, "0.0001"]];
  for (const [x, want] of cases) assert.equal(pyFloatRepr(x), want);
});

test("the weights hash's check value", () => {
  const f32 = new Uint8Array(new Float32Array([0, 1, 2, 3, 4, 5]).buffer);
  const i64 = new Uint8Array(new BigInt64Array([7n]).buffer);
  const hash = combine([
    ["b", tensorDigest("float32", [2, 3], f32)],
    ["a~1x", tensorDigest("bool", [2], new Uint8Array([1, 0]))],
    ["é", tensorDigest("int64", [], i64)],
  ]);
  assert.equal(hash, "ea251ec13b5f6f4029ce97b8aa931c0eddabb93acc5ed2c217076ae61ee9149b");
});

test("member names break no rule of spec section 1", () => {
  const enc = (s) => new TextEncoder().encode(s);
  assert.equal(checkName(enc("a/b.npy")), "a/b.npy");
  for (const bad of ["/abs", "a//b", "a/./b", "../x", "c:x", "a\\b", "a\u0000b", "a/"]) {
    assert.throws(() => checkName(enc(bad)), UnsafeArchiveError, bad);
  }
  assert.throws(() => checkName(new Uint8Array([0xff, 0x41])), /not UTF-8/);
});

test("zstd frames: the declared size bounds decoding", () => {
  // one raw block of 5 bytes ("hello"), content size 5 declared (single segment, 1-byte FCS)
  const frame = new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, 0x20, 5, (5 << 3) | 1, 0, 0, ...new TextEncoder().encode("hello")]);
  assert.equal(new TextDecoder().decode(decodeFrame(frame, 5, "t")), "hello");
  assert.throws(() => decodeFrame(frame, 4, "t"), UnsafeArchiveError); // declares more than the metadata
  assert.throws(() => decodeFrame(frame, 6, "t"), IntegrityError); // declares less
  const unsized = new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00, (5 << 3) | 1, 0, 0, ...new TextEncoder().encode("hello")]);
  assert.throws(() => decodeFrame(unsized, 5, "t"), /does not declare its size/);
  assert.throws(() => decodeFrame(frame.subarray(0, 10), 5, "t"), /truncated/);
});
