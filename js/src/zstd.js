// zstd frames (spec README 4.5 and 4.6): the frame header and block structure are walked here,
// before fzstd decodes anything, so that a frame's own size fields cannot make this reader allocate
// more than the size the metadata declares.

import { decompress } from "fzstd";
import { IntegrityError, UnsafeArchiveError } from "./errors.js";

const MAX_WINDOW = 2 ** 27; // libzstd's default limit (windowLogMax 27): 128 MiB

/**
 * The structure of the zstd frame at `data[0..]`: {contentSize (or null), end (its length in bytes),
 * window, rawSize (bytes decoded by raw and RLE blocks), compressedBlocks}.
 */
export function walkFrame(data, what) {
  if (data.length < 6) throw new IntegrityError(`${what} is not a zstd frame (too short)`);
  const magic = data[0] | (data[1] << 8) | (data[2] << 16) | (data[3] << 24);
  if (magic >>> 0 !== 0xfd2fb528) throw new IntegrityError(`${what} is not a zstd frame (bad magic)`);
  const fhd = data[4];
  if (fhd & 0x08) throw new IntegrityError(`${what}: the zstd frame header sets a reserved bit`);
  const single = (fhd >> 5) & 1;
  const checksum = (fhd >> 2) & 1;
  const dictFlag = fhd & 3;
  const fcsFlag = fhd >> 6;
  let p = 5;
  let window = null;
  if (!single) {
    const wd = data[p++];
    const base = 2 ** (10 + (wd >> 3));
    window = base + (base / 8) * (wd & 7);
  }
  const dictBytes = [0, 1, 2, 4][dictFlag];
  let dictId = 0;
  for (let k = 0; k < dictBytes; k++) dictId += data[p + k] * 2 ** (8 * k);
  p += dictBytes;
  if (dictId !== 0) throw new IntegrityError(`${what}: the zstd frame needs a dictionary, which zarchive never uses`);
  const fcsBytes = fcsFlag === 0 ? (single ? 1 : 0) : 1 << fcsFlag;
  let contentSize = null;
  if (fcsBytes) {
    if (p + fcsBytes > data.length) throw new IntegrityError(`${what}: the zstd frame header is truncated`);
    contentSize = 0;
    for (let k = 0; k < fcsBytes; k++) contentSize += data[p + k] * 2 ** (8 * k);
    if (fcsBytes === 2) contentSize += 256;
    p += fcsBytes;
  }
  if (single) window = contentSize;
  let rawSize = 0;
  let compressedBlocks = 0;
  for (;;) {
    if (p + 3 > data.length) throw new IntegrityError(`${what}: the zstd frame is truncated`);
    const h = data[p] | (data[p + 1] << 8) | (data[p + 2] << 16);
    const last = h & 1;
    const type = (h >> 1) & 3;
    const size = h >>> 3;
    p += 3;
    if (type === 3) throw new IntegrityError(`${what}: the zstd frame has a reserved block type`);
    if (type === 0) rawSize += size;
    if (type === 1) rawSize += size;
    if (type === 2) compressedBlocks++;
    p += type === 1 ? 1 : size;
    if (p > data.length) throw new IntegrityError(`${what}: the zstd frame is truncated`);
    if (last) break;
  }
  if (checksum) p += 4;
  if (p > data.length) throw new IntegrityError(`${what}: the zstd frame is truncated`);
  return { contentSize, end: p, window, rawSize, compressedBlocks };
}

/**
 * Decodes the first zstd frame of `data` to exactly `size` bytes. `what` names the member in
 * errors. Later frames are ignored (spec 4.5: empty frames may follow the first).
 */
export function decodeFrame(data, size, what) {
  const f = walkFrame(data, what);
  if (f.contentSize === null) {
    throw new UnsafeArchiveError(`${what}: the zstd frame does not declare its size; it could decode to more than the ${size} bytes the metadata declares`);
  }
  if (f.contentSize > size) {
    throw new UnsafeArchiveError(`${what}: the zstd frame declares ${f.contentSize} bytes, more than the ${size} bytes the metadata declares (a decompression bomb?)`);
  }
  if (f.contentSize !== size) {
    throw new IntegrityError(`${what}: the zstd frame declares ${f.contentSize} bytes, the metadata ${size}: the member is damaged`);
  }
  if (f.window !== null && f.window > Math.max(MAX_WINDOW, size)) {
    throw new IntegrityError(`${what}: the zstd frame asks for a window of ${f.window} bytes, too much memory`);
  }
  if (f.compressedBlocks === 0 && f.rawSize !== size) {
    throw new IntegrityError(`${what}: the zstd data decoded to ${f.rawSize} bytes, the metadata declares ${size}: the member is damaged`);
  }
  if (f.rawSize > size) {
    throw new UnsafeArchiveError(`${what}: the zstd data decodes to more than the ${size} bytes the metadata declares`);
  }
  const out = new Uint8Array(size);
  if (size === 0 && f.compressedBlocks === 0) return out;
  try {
    decompress(data.subarray(0, f.end), out);
  } catch (e) {
    throw new IntegrityError(`${what}: the zstd data is damaged (${e.message})`);
  }
  return out;
}
