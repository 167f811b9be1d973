// `arrow.array` (spec/pandas.md 5.4) in the class-free form (spec/neutral.md 5.1): what shows and what
// does not, and zone names checked as the spec says. The golden example is edited in place (same
// length, checksums fixed) so each test changes one thing.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { FormatError, neutralText } from "../src/index.js";
import { crc32 } from "../src/crc32.js";
import { EXAMPLES, load, patchMember, patchText } from "./helpers.js";

const FILE = join(EXAMPLES, "columns_arrow.uncompressed.zarc");
const hex = (c) => c.toString(16).padStart(8, "0");

/** The example with the ASCII text `from` replaced by `to` (same length) in its manifest, every checksum fixed. */
function edit(from, to) {
  assert.equal(from.length, to.length);
  let oldCrc;
  let newCrc;
  const out = patchMember(load(FILE), "manifest.json", (d) => {
    oldCrc = hex(crc32(d));
    const text = Buffer.from(d).toString("latin1"); // byte for byte
    assert.ok(text.includes(from), from);
    const n = new Uint8Array(Buffer.from(text.replace(from, to), "latin1"));
    newCrc = hex(crc32(n));
    return n;
  });
  return patchText(out, "metadata.json", `"${oldCrc}"`, `"${newCrc}"`);
}
const FORM = readFileSync(join(EXAMPLES, "columns_arrow.generic.json"), "utf8");

test("columns_arrow reads to its committed form", () => {
  assert.equal(neutralText(load(FILE)), FORM);
});

test("a validity bitmap's padding bits do not show", () => {
  // 11 = 0b1011 holds bits 8..11 of 12 values; 75 = 0b1001011 also sets bit 14, past the length
  const edited = edit('"data": [109, 11]', '"data": [109, 75]');
  assert.equal(neutralText(edited), FORM);
});

test("a validity bit cleared without changing null_count is refused", () => {
  const edited = edit('"data": [109, 11]', '"data": [109, 10]');
  assert.throws(() => neutralText(edited), (e) => e instanceof FormatError && /marks 5 values missing/.test(e.message));
});

test("a timestamp zone must be spelled as the IANA database spells it", () => {
  const edited = edit('"tz": "Europe/Paris"', '"tz": "europe/paris"');
  assert.throws(() => neutralText(edited), (e) => e instanceof FormatError && /unknown time zone/.test(e.message));
});
