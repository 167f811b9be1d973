// The zip container (spec README section 1 and section 7): the end records, ZIP64, the central
// directory, local headers and member names. Stored entries only; every size is checked against the
// file before anything is allocated.

import { NotAZipError, UnsafeArchiveError } from "./errors.js";

export const MAX_ENTRIES = 1_000_000;
const EOCD = 0x06054b50;
const Z64_EOCD = 0x06064b50;
const Z64_LOC = 0x07064b50;
const CDH = 0x02014b50;
const LFH = 0x04034b50;
const U32 = 0xffffffff;

const u16 = (b, o) => b[o] | (b[o + 1] << 8);
const u32 = (b, o) => (b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | (b[o + 3] << 24)) >>> 0;
const u64 = (b, o) => {
  const hi = u32(b, o + 4);
  if (hi >= 0x200000) throw new NotAZipError("a ZIP64 value is over 2^53: not an archive this reader can hold");
  return hi * 0x100000000 + u32(b, o);
};

const names = new TextDecoder("utf-8", { fatal: true });

/** What a non-zip file looks like, for a plain message (spec section 7). */
function notZip(buf) {
  if (buf.length === 0) return new NotAZipError("the file is empty: not a zip archive");
  const head = new TextDecoder("latin1").decode(buf.subarray(0, 200));
  if (head.startsWith("version https://git-lfs")) {
    return new NotAZipError("the file is a git-LFS pointer, not the archive: fetch it with `git lfs pull`");
  }
  if (/^\s*<(!doctype|html|\?xml|head|body)/i.test(head)) {
    return new NotAZipError("the file is an HTML page, not a zip archive (a download that returned an error page?)");
  }
  return null;
}

/** A random-access byte source over a Uint8Array: {size, read(offset, length)}. */
export function bytesSource(bytes) {
  return { size: bytes.length, read: (offset, length) => bytes.subarray(offset, offset + length) };
}

/** A byte source (a Uint8Array, or {size, read(offset, length)}) as {size, read}. */
export function asSource(x) {
  return x instanceof Uint8Array ? bytesSource(x) : x;
}

/** `length` bytes at `offset`, refused when they run past the file. */
function take(src, offset, length, what) {
  if (offset < 0 || offset + length > src.size) throw new NotAZipError(`${what} runs past the end of the file: truncated`);
  const out = src.read(offset, length);
  if (out.length !== length) throw new NotAZipError(`${what}: the file ended early (it shrank while open?)`);
  return out;
}

/**
 * The entries of a zarchive zip: [{name, offset (of its data), size, crc, localOffset}], in central
 * directory order. `source` is the file: a Uint8Array or {size, read(offset, length)}.
 */
export function readZip(source, { maxEntries = MAX_ENTRIES } = {}) {
  const src = asSource(source);
  const n = src.size;
  const plain = notZip(take(src, 0, Math.min(n, 200), "the start"));
  if (plain) throw plain;
  if (n < 22) throw new NotAZipError(`the file is truncated or not a zip archive (${n} bytes)`);
  const e = n - 22;
  const end = take(src, e, 22, "the end record");
  if (u32(end, 0) !== EOCD) {
    if (u32(take(src, 0, 4, "the start"), 0) !== LFH) throw new NotAZipError("not a zip archive (no zip signature at its start)");
    throw new NotAZipError(
      "no end-of-directory record at the end of the file: it is truncated, has a comment, or has bytes appended",
    );
  }
  if (u16(end, 20) !== 0) throw new NotAZipError("the archive has a comment, which zarchive never writes");
  let disk = u16(end, 4);
  let cdDisk = u16(end, 6);
  let onDisk = u16(end, 8);
  let count = u16(end, 10);
  let cdSize = u32(end, 12);
  let cdOffset = u32(end, 16);
  let cdEnd = e; // where the central directory must end
  const z64 = count === 0xffff || onDisk === 0xffff || cdSize === U32 || cdOffset === U32 || disk === 0xffff;
  if (z64) {
    const l = e - 20;
    const loc = l >= 0 ? take(src, l, 20, "the zip64 locator") : null;
    if (!loc || u32(loc, 0) !== Z64_LOC) throw new NotAZipError("ZIP64 values without a zip64 end locator");
    if (u32(loc, 4) !== 0 || u32(loc, 16) !== 1) throw new NotAZipError("a multi-disk archive (zip64 locator)");
    const r = u64(loc, 8);
    if (r + 56 > l) throw new NotAZipError("the zip64 end record is missing or truncated");
    const rec = take(src, r, 56, "the zip64 end record");
    if (u32(rec, 0) !== Z64_EOCD) throw new NotAZipError("the zip64 end record is missing or truncated");
    if (r + 12 + u64(rec, 4) !== l) throw new NotAZipError("the zip64 end record does not end where its locator starts");
    disk = u32(rec, 16);
    cdDisk = u32(rec, 20);
    onDisk = u64(rec, 24);
    count = u64(rec, 32);
    cdSize = u64(rec, 40);
    cdOffset = u64(rec, 48);
    cdEnd = r;
  }
  if (disk !== 0 || cdDisk !== 0 || onDisk !== count) throw new NotAZipError("a multi-disk archive: not supported");
  if (count > maxEntries) throw new UnsafeArchiveError(`the archive has ${count} entries, more than the limit of ${maxEntries}`);
  if (cdOffset + cdSize > cdEnd) throw new NotAZipError("the central directory runs past its end record: the file is truncated");
  if (cdOffset + cdSize !== cdEnd) {
    throw new NotAZipError("the central directory does not end where the end record starts (trailing bytes or a damaged file)");
  }
  if (count * 46 > cdSize) throw new NotAZipError(`the central directory is too small for ${count} entries: truncated`);

  const buf = take(src, cdOffset, cdSize, "the central directory");
  const entries = [];
  let p = 0;
  for (let k = 0; k < count; k++) {
    if (p + 46 > cdSize || u32(buf, p) !== CDH) throw new NotAZipError(`central directory entry ${k} is truncated or damaged`);
    const flags = u16(buf, p + 8);
    const method = u16(buf, p + 10);
    const crc = u32(buf, p + 16);
    let csize = u32(buf, p + 20);
    let usize = u32(buf, p + 24);
    const nlen = u16(buf, p + 28);
    const xlen = u16(buf, p + 30);
    const clen = u16(buf, p + 32);
    const diskStart = u16(buf, p + 34);
    let local = u32(buf, p + 42);
    const next = p + 46 + nlen + xlen + clen;
    if (next > cdSize) throw new NotAZipError(`central directory entry ${k} runs past the directory`);
    const rawName = buf.slice(p + 46, p + 46 + nlen);
    const name = checkName(rawName);
    const z = zip64Extra(buf.subarray(p + 46 + nlen, p + 46 + nlen + xlen), name);
    if (usize === U32) usize = z.next("uncompressed size");
    if (csize === U32) csize = z.next("compressed size");
    if (local === U32) local = z.next("local header offset");
    if (diskStart !== 0 && diskStart !== 0xffff) throw new NotAZipError("a multi-disk archive: not supported");
    checkFlags(flags, method, name);
    if (csize !== usize) throw new UnsafeArchiveError(`member '${name}': its compressed and uncompressed sizes differ`);
    entries.push({ name, rawName, flags, crc, size: usize, localOffset: local, offset: -1 });
    p = next;
  }
  if (p !== cdSize) throw new NotAZipError("the central directory holds more bytes than its entries (count lies?)");

  for (const en of entries) readLocal(src, en, cdOffset);
  checkOverlaps(entries, cdOffset);
  checkDuplicates(entries);
  return entries;
}

function zip64Extra(extra, name) {
  let vals = null;
  for (let q = 0; q + 4 <= extra.length; ) {
    const id = u16(extra, q);
    const len = u16(extra, q + 2);
    if (q + 4 + len > extra.length) throw new NotAZipError(`member '${name}': a malformed extra field`);
    if (id === 1) vals = extra.subarray(q + 4, q + 4 + len);
    q += 4 + len;
  }
  let at = 0;
  return {
    next(what) {
      if (!vals || at + 8 > vals.length) throw new NotAZipError(`member '${name}': its ${what} needs a ZIP64 extra field it lacks`);
      const v = u64(vals, at);
      at += 8;
      return v;
    },
  };
}

function checkFlags(flags, method, name) {
  if (flags & 1) throw new UnsafeArchiveError(`member '${name}' uses encryption, which zarchive never writes`);
  if (flags & 8) throw new UnsafeArchiveError(`member '${name}' uses data descriptors, which zarchive never writes`);
  if (flags & ~0x800) throw new UnsafeArchiveError(`member '${name}' has general-purpose flags 0x${flags.toString(16)} (only bit 11 is allowed)`);
  if (method !== 0) throw new UnsafeArchiveError(`member '${name}' uses compression method ${method}; zarchive stores every member (method 0)`);
}

function readLocal(src, en, cdOffset) {
  const p = en.localOffset;
  if (p + 30 > cdOffset) throw new UnsafeArchiveError(`member '${en.name}': no local header at offset ${p}`);
  const head = take(src, p, 30, `the local header of '${en.name}'`);
  if (u32(head, 0) !== LFH) throw new UnsafeArchiveError(`member '${en.name}': no local header at offset ${p}`);
  const flags = u16(head, 6);
  const method = u16(head, 8);
  const crc = u32(head, 14);
  let csize = u32(head, 18);
  let usize = u32(head, 22);
  const nlen = u16(head, 26);
  const xlen = u16(head, 28);
  const data = p + 30 + nlen + xlen;
  if (data > cdOffset) throw new UnsafeArchiveError(`member '${en.name}': its local header runs into the central directory`);
  const rest = take(src, p + 30, nlen + xlen, `the local header of '${en.name}'`);
  if (!sameBytes(rest.subarray(0, nlen), en.rawName)) throw new UnsafeArchiveError(`member '${en.name}': its local header names a different member`);
  const z = zip64Extra(rest.subarray(nlen), en.name);
  if (usize === U32) usize = z.next("uncompressed size");
  if (csize === U32) csize = z.next("compressed size");
  checkFlags(flags, method, en.name);
  if (flags !== en.flags || crc !== en.crc || csize !== en.size || usize !== en.size) {
    throw new UnsafeArchiveError(`member '${en.name}': its local header sizes or CRC disagree with the central directory`);
  }
  if (data + en.size > cdOffset) {
    throw new UnsafeArchiveError(`member '${en.name}': its ${en.size} bytes run into the central directory (or past the file)`);
  }
  en.offset = data;
}

function checkOverlaps(entries, cdOffset) {
  const sorted = [...entries].sort((a, b) => a.localOffset - b.localOffset);
  for (let k = 1; k < sorted.length; k++) {
    const prev = sorted[k - 1];
    if (prev.offset + prev.size > sorted[k].localOffset) {
      throw new UnsafeArchiveError(`member '${prev.name}' overlaps member '${sorted[k].name}'`);
    }
  }
  if (sorted.length && sorted[0].localOffset !== 0) {
    throw new NotAZipError("the file has bytes before its first member: not a zip archive zarchive wrote (a prepended script?)");
  }
  if (!sorted.length && cdOffset !== 0) throw new NotAZipError("not a zip archive: bytes before an empty directory");
}

function sameBytes(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** A member name checked against spec section 1; returns it as text. */
export function checkName(raw) {
  let name;
  try {
    name = names.decode(raw);
  } catch {
    throw new UnsafeArchiveError("a member name is not UTF-8");
  }
  const shown = JSON.stringify(name);
  if (raw.length > 4096) throw new UnsafeArchiveError(`member name ${shown.slice(0, 80)}... is longer than 4096 bytes`);
  if (/[\u0000-\u001f\u007f]/.test(name)) throw new UnsafeArchiveError(`member name ${shown} holds a control character`);
  if (name.includes("\\")) throw new UnsafeArchiveError(`member name ${shown} holds a backslash`);
  if (/^[A-Za-z]:/.test(name)) throw new UnsafeArchiveError(`member name ${shown} starts with a drive letter`);
  if (name.includes(":")) throw new UnsafeArchiveError(`member name ${shown} holds a colon`);
  if (name.startsWith("/")) throw new UnsafeArchiveError(`member name ${shown} is an absolute path`);
  for (const c of name.split("/")) {
    if (c === "") throw new UnsafeArchiveError(`member name ${shown} has an 'empty' path component`);
    if (c === ".") throw new UnsafeArchiveError(`member name ${shown} has a '.' path component`);
    if (c === "..") throw new UnsafeArchiveError(`member name ${shown} has a '..' path component`);
  }
  return name;
}

/**
 * The key names are compared under (spec section 1): NFC, then Unicode's default full lowercase
 * mapping. (Names equal only under full case folding, such as `ß` and `ss`, MAY be refused; this
 * reader does not refuse them.)
 */
export function foldName(name) {
  return name.normalize("NFC").toLowerCase();
}

function checkDuplicates(entries) {
  const seen = new Map();
  for (const en of entries) {
    const k = foldName(en.name);
    if (seen.has(k)) throw new UnsafeArchiveError(`duplicate member name '${en.name}' (same as '${seen.get(k)}' after NFC and lowercasing)`);
    seen.set(k, en.name);
  }
}
