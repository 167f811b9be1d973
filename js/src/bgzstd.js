// The `bgzstd` codec (spec README 4.6): byte-grouped chunks, each plane raw or one zstd frame,
// with a chunk index in the metadata that is checked whole before a byte is decoded.

import { crc32, crcHex } from "./crc32.js";
import { FormatError, IntegrityError, UnsafeArchiveError } from "./errors.js";
import { decompress } from "fzstd";
import { walkFrame } from "./zstd.js";

export const MAX_CHUNK = 256 * 2 ** 20;

const isInt = (v) => typeof v === "bigint" && v >= 0n && v <= BigInt(Number.MAX_SAFE_INTEGER);

/** The chunk rows of a member's metadata, checked (spec 4.6); returns [{label, offset, size, width, stored, planes, crc}]. */
export function checkChunks(rows, name, size, storedSize) {
  if (!Array.isArray(rows)) throw new FormatError(`member '${name}' (bgzstd) needs its 'chunks' index, an array of rows`);
  const out = [];
  let at = 0;
  let storedAt = 0;
  for (const [k, row] of rows.entries()) {
    const shape = Array.isArray(row) && row.length === 7 && typeof row[0] === "string" && isInt(row[1]) && isInt(row[2]) &&
      typeof row[3] === "bigint" && isInt(row[4]) && Array.isArray(row[5]) && typeof row[6] === "string" && /^[0-9a-f]{8}$/.test(row[6]);
    if (!shape) {
      throw new FormatError(`member '${name}': chunk row ${k} is not a [label, offset, size, width, stored_offset, planes, crc32] row`);
    }
    const [label, offset, csize, width, stored, planes, crc] = row;
    const c = { label, offset: Number(offset), size: Number(csize), width: Number(width), stored: Number(stored), crc };
    const where = `member '${name}', chunk ${k} ('${label}')`;
    if (width < 1n || width > 16n) throw new FormatError(`${where} has width ${width}; widths are 1 to 16`);
    if (c.size <= 0 || c.size % c.width) throw new FormatError(`${where}: its size ${c.size} is not a positive multiple of its width ${c.width}`);
    if (c.size > MAX_CHUNK) throw new UnsafeArchiveError(`${where} decodes to ${c.size} bytes, over the ${MAX_CHUNK} bytes a reader accepts for one chunk`);
    if (c.offset < at) throw new FormatError(`${where} overlaps the one before`);
    if (c.offset > at) throw new FormatError(`${where} leaves a gap before it (decoded bytes ${at} to ${c.offset})`);
    if (c.stored < storedAt) throw new FormatError(`${where}: stored at ${c.stored}, it overlaps the chunk before`);
    if (c.stored > storedAt) throw new FormatError(`${where}: stored at ${c.stored}, it leaves a gap in the stored bytes`);
    if (planes.length !== c.width) throw new FormatError(`${where}: ${planes.length} planes for width ${c.width}`);
    const plane = c.size / c.width;
    c.planes = planes.map((v) => {
      if (!isInt(v) || v < 1n || Number(v) > plane) throw new FormatError(`${where}: planes must be 1 to ${plane} bytes, one is ${v}`);
      return Number(v);
    });
    at += c.size;
    storedAt += c.planes.reduce((a, b) => a + b, 0);
    out.push(c);
  }
  if (at !== size) throw new FormatError(`member '${name}': the chunks decode to ${at} bytes, the metadata declares ${size}`);
  if (storedAt !== storedSize) throw new FormatError(`member '${name}': the chunks are stored in ${storedAt} bytes, the member has ${storedSize}`);
  return out;
}

/** Decodes one chunk from the member's stored bytes into `out` at its offset, after checking its CRC. */
export function decodeChunk(stored, c, out, name) {
  const where = `member '${name}', chunk '${c.label}' (bytes ${c.offset} to ${c.offset + c.size})`;
  const total = c.planes.reduce((a, b) => a + b, 0);
  const bytes = stored.subarray(c.stored, c.stored + total);
  if (crcHex(crc32(bytes)) !== c.crc) throw new IntegrityError(`${where}: its stored bytes do not match its checksum: the member is damaged`);
  const n = c.size / c.width;
  let p = 0;
  for (let k = 0; k < c.width; k++) {
    const ps = c.planes[k];
    let plane = bytes.subarray(p, p + ps);
    p += ps;
    if (ps !== n) plane = decodePlane(plane, n, `${where}, plane ${k}`);
    const dst = out.subarray(c.offset, c.offset + c.size);
    if (c.width === 1) dst.set(plane);
    else for (let i = 0; i < n; i++) dst[i * c.width + k] = plane[i];
  }
}

function decodePlane(data, n, where) {
  const f = walkFrame(data, where);
  if (f.contentSize === null) throw new UnsafeArchiveError(`${where}: the zstd frame does not declare its size`);
  if (f.contentSize > n) throw new UnsafeArchiveError(`${where}: the frame declares ${f.contentSize} bytes, its chunk gives the plane ${n}: a decompression bomb`);
  if (f.contentSize !== n) throw new IntegrityError(`${where}: the frame declares ${f.contentSize} bytes, its chunk ${n}`);
  if (f.end !== data.length) throw new IntegrityError(`${where}: bytes follow the plane's zstd frame`);
  if (f.compressedBlocks === 0 && f.rawSize !== n) throw new IntegrityError(`${where}: the plane decoded to ${f.rawSize} bytes, its chunk gives it ${n}`);
  const out = new Uint8Array(n);
  try {
    decompress(data, out);
  } catch (e) {
    throw new IntegrityError(`${where}: the zstd data is damaged (${e.message})`);
  }
  return out;
}
