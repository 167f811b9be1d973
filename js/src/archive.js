// An opened archive (spec README sections 1, 2, 6, 7): the zip's entries, the metadata checked
// against them, the manifest, and each member's decoded bytes with every checksum verified.

import { checkChunks, decodeChunk } from "./bgzstd.js";
import { crc32, crcHex } from "./crc32.js";
import { FormatError, IntegrityError, MemberNotFoundError, UnsafeArchiveError, VersionError } from "./errors.js";
import { parseCost, parseJsonBytes } from "./json.js";
import { asSource, readZip } from "./zip.js";
import { decodeFrame } from "./zstd.js";
import { checkExports } from "./exports.js";

export const READER_MAJOR = 1;
export const READER_MINOR = 6;
export const MAX_JSON_MEMBER = 512 * 2 ** 20;
export const MAX_DECOMPRESSED = 4 * 2 ** 30;
const RESERVED = new Set(["manifest.json", "metadata.json"]);

/** One memory budget per open file (reading.md section 3). */
export class Budget {
  constructor(limit) {
    this.limit = limit;
    this.used = 0;
  }
  charge(n, what) {
    if (this.used + n > this.limit) {
      throw new UnsafeArchiveError(`${what} allocates ${n.toLocaleString("en")} bytes, over max_read_bytes (${this.limit.toLocaleString("en")}, ${this.used.toLocaleString("en")} already used)`);
    }
    this.used += n;
  }
}

const isCount = (v) => typeof v === "bigint" && v >= 0n && v <= BigInt(Number.MAX_SAFE_INTEGER);

export class Archive {
  /**
   * @param {Uint8Array | {size: number, read(offset: number, length: number): Uint8Array}} bytes the file
   * @param {{maxReadBytes?: number, maxDecompressed?: number, name?: string}} opts
   */
  constructor(bytes, opts = {}) {
    this.src = asSource(bytes);
    this.inMemory = bytes instanceof Uint8Array; // else members read are charged to the budget
    this.name = opts.name ?? "archive";
    this.budget = new Budget(opts.maxReadBytes ?? 2 ** 30 + 16 * this.src.size);
    this.maxDecompressed = opts.maxDecompressed ?? MAX_DECOMPRESSED;
    this.cache = new Map();
    const entries = readZip(this.src);
    this.entries = new Map(entries.map((e) => [e.name, e]));
    for (const n of RESERVED) {
      if (!this.entries.has(n)) throw new FormatError(`the archive has no '${n}': not a zarchive file`);
    }
    this.metadata = this.json(this.entries.get("metadata.json"), "metadata.json");
    this.members = this.checkMetadata(this.metadata);
    this.manifest = this.json(this.entries.get("manifest.json"), "manifest.json");
    if (!(this.manifest instanceof Map) || !this.manifest.has("root")) throw new FormatError("manifest.json has no 'root'");
    checkExports(this);
  }

  /** A reserved JSON member, its zip CRC checked, parsed strictly. */
  json(entry, what) {
    if (entry.size > MAX_JSON_MEMBER) throw new UnsafeArchiveError(`${what} is ${entry.size} bytes, over the limit of ${MAX_JSON_MEMBER} for a JSON member`);
    const raw = this.read(entry);
    if (crc32(raw) !== entry.crc) throw new IntegrityError(`${what}: its bytes do not match the zip's CRC: the file is damaged`);
    this.budget.charge(parseCost(raw), `parsing this JSON (${what})`);
    return parseJsonBytes(raw, what);
  }

  /** The metadata's `members` table checked against the zip (spec sections 2 and 7). */
  checkMetadata(meta) {
    if (!(meta instanceof Map)) throw new FormatError("metadata.json is not a JSON object");
    if (meta.get("format") !== "zarchive") throw new FormatError("metadata.json does not describe a zarchive (its 'format' is not \"zarchive\")");
    const v = meta.get("format_version");
    const m = typeof v === "string" ? /^([0-9]{1,6})\.([0-9]{1,6})$/.exec(v) : null;
    if (!m) throw new FormatError(`metadata.json: bad format_version ${JSON.stringify(String(v))}`);
    this.version = [Number(m[1]), Number(m[2])];
    if (this.version[0] > READER_MAJOR) throw new VersionError(`the file is format version ${v}, newer than this reader (${READER_MAJOR}.${READER_MINOR}): upgrade the reader`);
    const table = meta.get("members");
    if (!(table instanceof Map)) throw new FormatError("metadata.json has no 'members' table");
    if (table.has("metadata.json")) throw new FormatError("metadata.json lists itself");
    const members = new Map();
    for (const [name, info] of table) {
      const entry = this.entries.get(name);
      if (!entry) throw new FormatError(`metadata.json lists member '${name}', which the archive does not have`);
      members.set(name, this.checkMember(name, info, entry));
    }
    for (const name of this.entries.keys()) {
      if (name !== "metadata.json" && !members.has(name)) throw new UnsafeArchiveError(`member '${name}' is not listed in the metadata`);
    }
    return members;
  }

  checkMember(name, info, entry) {
    if (!(info instanceof Map)) throw new FormatError(`metadata.json: the entry of member '${name}' is not an object`);
    const codec = info.get("codec");
    if (!["none", "zstd", "bgzstd"].includes(codec)) {
      if (typeof codec === "string" && /^[a-z0-9_]+$/.test(codec) && this.version[1] > READER_MINOR) {
        throw new VersionError(`member '${name}' uses codec '${codec}', newer than this reader: upgrade it`);
      }
      throw new FormatError(`member '${name}': unknown codec ${JSON.stringify(String(codec))}`);
    }
    if (RESERVED.has(name) && codec !== "none") throw new FormatError(`member '${name}' must not be compressed`);
    if (codec === "zstd" && !name.endsWith(".zst")) throw new FormatError(`member '${name}' is zstd-compressed, so its name must end in .zst`);
    if (codec === "bgzstd" && !name.endsWith(".bgz")) throw new FormatError(`member '${name}' is bgzstd-compressed, so its name must end in .bgz`);
    for (const k of ["size", "stored_size"]) {
      if (!isCount(info.get(k))) throw new FormatError(`metadata.json: bad '${k}' for member '${name}'`);
    }
    const size = Number(info.get("size"));
    const stored = Number(info.get("stored_size"));
    const crc = info.get("crc32");
    if (typeof crc !== "string" || !/^[0-9a-f]{8}$/.test(crc)) throw new FormatError(`metadata.json: bad 'crc32' for member '${name}'`);
    if (stored !== entry.size) throw new IntegrityError(`member '${name}': the metadata says ${stored} stored bytes, the zip holds ${entry.size}`);
    if (codec === "none" && size !== stored) throw new IntegrityError(`member '${name}': size and stored_size differ for an uncompressed member`);
    if (crc !== crcHex(entry.crc)) throw new IntegrityError(`member '${name}': the metadata and the zip header disagree on the CRC`);
    const out = { name, codec, size, stored, crc: entry.crc, entry };
    if (codec === "zstd") {
      const c = info.get("content_crc32");
      if (typeof c !== "string" || !/^[0-9a-f]{8}$/.test(c)) throw new FormatError(`metadata.json: bad 'content_crc32' for member '${name}'`);
      out.contentCrc = c;
    }
    if (codec === "bgzstd") out.chunks = checkChunks(info.get("chunks"), name, size, stored);
    if (codec === "none" && info.has("entries")) out.entries = checkEntries(info.get("entries"), name, size);
    return out;
  }

  /** The stored bytes of a member. */
  stored(name) {
    return this.read(this.entries.get(name));
  }

  read(e) {
    const out = this.src.read(e.offset, e.size);
    if (out.length !== e.size) throw new IntegrityError(`member '${e.name}': the file ended early (it shrank while open?)`);
    return out;
  }

  /** A member named by a `$ref`, looked up (not decoded); `path` names the node in errors. */
  ref(name, path) {
    if (typeof name !== "string") throw new FormatError(`at ${path || "(root)"}: '$ref' must be a member name`);
    if (RESERVED.has(name)) throw new MemberNotFoundError(`at ${path || "(root)"}: '$ref' names '${name}', not a data member`);
    const m = this.members.get(name);
    if (!m) throw new MemberNotFoundError(`at ${path || "(root)"}: the archive does not have member '${name}'`);
    return m;
  }

  /** Charges a member's decoded size once, before it is decoded (reading.md section 3). */
  plan(name, path) {
    const m = this.ref(name, path);
    if ((m.codec !== "none" || !this.inMemory) && !m.planned) {
      if (m.size > this.maxDecompressed) throw new UnsafeArchiveError(`member '${name}' decodes to ${m.size} bytes, over the limit of ${this.maxDecompressed}`);
      this.budget.charge(m.size, `member '${name}' (at ${path || "(root)"})`);
      m.planned = true;
    }
    return m;
  }

  /** The decoded bytes of a member, every checksum verified. */
  member(name, path = "") {
    const m = this.plan(name, path);
    if (this.cache.has(name)) return this.cache.get(name);
    const stored = this.stored(name);
    if (crc32(stored) !== m.crc) throw new IntegrityError(`member '${name}': its bytes do not match their CRC-32: the file is damaged`);
    let out = stored;
    if (m.codec === "zstd") {
      out = decodeFrame(stored, m.size, `member '${name}'`);
      if (crcHex(crc32(out)) !== m.contentCrc) throw new IntegrityError(`member '${name}': the decompressed bytes do not match content_crc32`);
    } else if (m.codec === "bgzstd") {
      out = new Uint8Array(m.size);
      for (const c of m.chunks) decodeChunk(stored, c, out, name);
    }
    this.cache.set(name, out);
    return out;
  }

  /**
   * Checks every member (zarchive verify): stored CRCs, decoded CRCs, chunks, and the per-entry
   * checksums, which a full read does not need (the member's CRC proves its bytes, spec 6).
   */
  verify() {
    for (const [name, m] of this.members) {
      if (RESERVED.has(name)) continue;
      const out = this.member(name);
      if (!m.entries) continue;
      checkOverlaps(m.entries, name);
      for (const [label] of m.entries) this.checkEntry(name, label, out);
    }
  }

  /**
   * Checks one entry's checksum (spec 6), once: what a lazy read of a tensor checks (its entry and
   * its member's `$header`). Members without entries, or without this label, pass.
   */
  checkEntry(name, label, bytes = null) {
    const m = this.members.get(name);
    const row = m?.entries?.find((r) => r[0] === label);
    if (!row || (m.checked ??= new Set()).has(label)) return;
    const [, off, size, crc] = row;
    const data = bytes ?? this.member(name);
    if (crcHex(crc32(data.subarray(off, off + size))) !== crc) {
      throw new IntegrityError(`member '${name}': the bytes of entry '${label}' do not match their checksum`);
    }
    m.checked.add(label);
  }
}

function checkEntries(raw, name, size) {
  let rows;
  if (Array.isArray(raw)) rows = raw;
  else if (raw instanceof Map) {
    rows = [...raw].map(([label, v]) => (v instanceof Map ? [label, v.get("offset"), v.get("size"), v.get("crc32")] : [label, v]));
  } else throw new FormatError(`member '${name}': 'entries' must be an array of rows or an object`);
  const seen = new Set();
  const out = [];
  for (const row of rows) {
    const label = Array.isArray(row) ? row[0] : undefined;
    const ok = Array.isArray(row) && row.length === 4 && typeof label === "string" && isCount(row[1]) && isCount(row[2]) &&
      typeof row[3] === "string" && /^[0-9a-f]{8}$/.test(row[3]);
    if (!ok || Number(row[1]) + Number(row[2]) > size) throw new FormatError(`member '${name}': bad checksum entry ${JSON.stringify(String(label))}`.replace(/"/g, "'"));
    if (seen.has(label)) throw new FormatError(`member '${name}': checksum entry '${label}' is listed twice`);
    seen.add(label);
    out.push([label, Number(row[1]), Number(row[2]), row[3]]);
  }
  return out;
}

/** Entries of one member that overlap are refused by verify, so it reads each byte once (reading.md 3). */
function checkOverlaps(rows, name) {
  const sorted = [...rows].sort((a, b) => a[1] - b[1]);
  for (let k = 1; k < sorted.length; k++) {
    if (sorted[k - 1][1] + sorted[k - 1][2] > sorted[k][1]) throw new FormatError(`member '${name}': checksum entries '${sorted[k - 1][0]}' and '${sorted[k][0]}' overlap`);
  }
}
