// ZIP64 (spec section 1): an archive whose every size and offset is in ZIP64 extra fields, with a
// zip64 end record and locator, reads like the plain one; inconsistent ZIP64 records are refused.

import assert from "node:assert/strict";
import { test } from "node:test";
import { crc32 } from "../src/crc32.js";
import { NotAZipError, neutralText, openArchive } from "../src/index.js";

const enc = new TextEncoder();

/** A zip of `members` ([name, bytes]) written the way zarchive writes a large archive: all ZIP64. */
function zip64(members) {
  const parts = [];
  const central = [];
  let at = 0;
  for (const [name, data] of members) {
    const n = enc.encode(name);
    const crc = crc32(data);
    const local = new DataView(new ArrayBuffer(30 + n.length + 20));
    local.setUint32(0, 0x04034b50, true);
    local.setUint16(4, 45, true);
    local.setUint32(14, crc, true);
    local.setUint32(18, 0xffffffff, true);
    local.setUint32(22, 0xffffffff, true);
    local.setUint16(26, n.length, true);
    local.setUint16(28, 20, true);
    new Uint8Array(local.buffer).set(n, 30);
    local.setUint16(30 + n.length, 1, true);
    local.setUint16(32 + n.length, 16, true);
    local.setBigUint64(34 + n.length, BigInt(data.length), true);
    local.setBigUint64(42 + n.length, BigInt(data.length), true);
    const cd = new DataView(new ArrayBuffer(46 + n.length + 28));
    cd.setUint32(0, 0x02014b50, true);
    cd.setUint16(4, (3 << 8) | 45, true);
    cd.setUint16(6, 45, true);
    cd.setUint32(16, crc, true);
    cd.setUint32(20, 0xffffffff, true);
    cd.setUint32(24, 0xffffffff, true);
    cd.setUint16(28, n.length, true);
    cd.setUint16(30, 28, true);
    cd.setUint32(38, 0o100644 << 16, true);
    cd.setUint32(42, 0xffffffff, true);
    new Uint8Array(cd.buffer).set(n, 46);
    cd.setUint16(46 + n.length, 1, true);
    cd.setUint16(48 + n.length, 24, true);
    cd.setBigUint64(50 + n.length, BigInt(data.length), true);
    cd.setBigUint64(58 + n.length, BigInt(data.length), true);
    cd.setBigUint64(66 + n.length, BigInt(at), true);
    parts.push(new Uint8Array(local.buffer), data);
    central.push(new Uint8Array(cd.buffer));
    at += local.byteLength + data.length;
  }
  const cdSize = central.reduce((a, c) => a + c.length, 0);
  const rec = new DataView(new ArrayBuffer(56 + 20 + 22));
  rec.setUint32(0, 0x06064b50, true);
  rec.setBigUint64(4, 44n, true);
  rec.setUint16(12, 45, true);
  rec.setUint16(14, 45, true);
  rec.setBigUint64(24, BigInt(members.length), true);
  rec.setBigUint64(32, BigInt(members.length), true);
  rec.setBigUint64(40, BigInt(cdSize), true);
  rec.setBigUint64(48, BigInt(at), true);
  rec.setUint32(56, 0x07064b50, true);
  rec.setBigUint64(64, BigInt(at + cdSize), true);
  rec.setUint32(72, 1, true);
  rec.setUint32(76, 0x06054b50, true);
  rec.setUint16(84, 0xffff, true);
  rec.setUint16(86, 0xffff, true);
  rec.setUint32(88, 0xffffffff, true);
  rec.setUint32(92, 0xffffffff, true);
  const all = [...parts, ...central, new Uint8Array(rec.buffer)];
  const out = new Uint8Array(all.reduce((a, p) => a + p.length, 0));
  let p = 0;
  for (const x of all) out.set(x, p), (p += x.length);
  return out;
}

function archive() {
  const manifest = enc.encode('{\n  "format": "zarchive",\n  "format_version": "1.0",\n  "root": {"$type": "bytes", "$ref": "b.bin", "nbytes": 5000}\n}\n');
  const blob = new Uint8Array(5000).map((_, i) => i % 251);
  const hex = (b) => crc32(b).toString(16).padStart(8, "0");
  const metadata = enc.encode(JSON.stringify({
    format: "zarchive", format_version: "1.0", library_version: "test", created_utc: "2000-01-01T00:00:00+00:00",
    members: {
      "manifest.json": { codec: "none", size: manifest.length, stored_size: manifest.length, crc32: hex(manifest) },
      "b.bin": { codec: "none", size: 5000, stored_size: 5000, crc32: hex(blob) },
    },
  }, null, 2) + "\n");
  return zip64([["manifest.json", manifest], ["metadata.json", metadata], ["b.bin", blob]]);
}

test("a ZIP64 archive reads", () => {
  const bytes = archive();
  openArchive(bytes).verify();
  assert.match(neutralText(bytes), /"length": 5000/);
});

test("a zip64 end record that does not end at its locator is refused", () => {
  const bytes = archive();
  const dv = new DataView(bytes.buffer);
  dv.setBigUint64(bytes.length - 22 - 20 - 56 + 4, 45n, true); // the record's own size field
  assert.throws(() => openArchive(bytes), NotAZipError);
});

test("a zip64 locator naming another disk is refused", () => {
  const bytes = archive();
  new DataView(bytes.buffer).setUint32(bytes.length - 22 - 20 + 16, 2, true);
  assert.throws(() => openArchive(bytes), /multi-disk/);
});
