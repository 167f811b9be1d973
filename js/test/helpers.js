// Test helpers: the repository's folders, and a zip patcher that rewrites one member in place
// (same length) with its CRC fixed in both headers, so a test can make one checksum lie at a time.

import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { crc32 } from "../src/crc32.js";
import { readZip } from "../src/zip.js";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const EXAMPLES = join(ROOT, "spec", "examples");
export const CORPUS = join(ROOT, "tests", "hostile", "corpus");

export const load = (path) => new Uint8Array(readFileSync(path));

/** A copy of `bytes` with member `name`'s bytes replaced by `edit(copy of them)` (same length), CRCs fixed unless `keepCrc`. */
export function patchMember(bytes, name, edit, { keepCrc = false } = {}) {
  const out = bytes.slice();
  const entry = readZip(out).find((e) => e.name === name);
  if (!entry) throw new Error(`no member ${name}`);
  const data = edit(out.slice(entry.offset, entry.offset + entry.size));
  if (data.length !== entry.size) throw new Error("patchMember keeps the member's length");
  out.set(data, entry.offset);
  if (!keepCrc) {
    const dv = new DataView(out.buffer);
    const crc = crc32(data);
    dv.setUint32(entry.localOffset + 14, crc, true);
    for (let p = 0; p + 4 <= out.length; p++) {
      // the central header: signature, then its local header offset at +42
      if (dv.getUint32(p, true) === 0x02014b50 && dv.getUint32(p + 42, true) === entry.localOffset) dv.setUint32(p + 16, crc, true);
    }
  }
  return out;
}

/** Replaces the first occurrence of `from` by `to` (same length) in a member's text. */
export function patchText(bytes, name, from, to) {
  return patchMember(bytes, name, (data) => {
    const text = new TextDecoder().decode(data);
    if (!text.includes(from) || from.length !== to.length) throw new Error(`cannot patch ${from} in ${name}`);
    return new TextEncoder().encode(text.replace(from, to));
  });
}

/** `bytes` (an archive) with its manifest replaced by `text`, padded with spaces to the old length, every CRC fixed. */
export function withManifest(bytes, text) {
  let oldCrc;
  let newCrc;
  const hex = (c) => c.toString(16).padStart(8, "0");
  const out = patchMember(bytes, "manifest.json", (d) => {
    if (text.length > d.length) throw new Error("the new manifest is longer than the old");
    oldCrc = hex(crc32(d));
    const n = new TextEncoder().encode(text.padEnd(d.length - 1, " ") + "\n");
    newCrc = hex(crc32(n));
    return n;
  });
  return patchText(out, "metadata.json", `"${oldCrc}"`, `"${newCrc}"`);
}
