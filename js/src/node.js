// The Node layer: files as random-access byte sources. Only this module (and bin/) uses Node's APIs;
// the reader itself runs in browsers on a Uint8Array.

import { closeSync, constants, fstatSync, lstatSync, openSync, readSync } from "node:fs";
import { join } from "node:path";
import { ZarcError } from "./errors.js";

/**
 * A regular file opened as {size, read(offset, length), close()}. Opened without blocking (a FIFO
 * named like an archive never blocks the open) and refused unless it is a regular file.
 */
export function fileSource(path) {
  const fd = openSync(path, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
  const st = fstatSync(fd);
  if (!st.isFile()) {
    closeSync(fd);
    throw new ZarcError(`${path} is not a regular file`);
  }
  return {
    size: st.size,
    read(offset, length) {
      const out = new Uint8Array(length);
      let got = 0;
      while (got < length) {
        const n = readSync(fd, out, got, length - got, offset + got);
        if (n === 0) break;
        got += n;
      }
      return got === length ? out : out.subarray(0, got);
    },
    close() {
      closeSync(fd);
    },
  };
}

/**
 * A directory's files by name, for a sharded checkpoint: {get(name), size(name)}, each null where
 * the name is not a regular file of the directory (names with a path separator never are).
 */
export function directoryFiles(dir) {
  const path = (n) => {
    if (n.includes("/") || n.includes("\\") || n === "." || n === "..") return null;
    try {
      return lstatSync(join(dir, n)).isFile() ? join(dir, n) : null;
    } catch {
      return null;
    }
  };
  return {
    get: (n) => (path(n) ? fileSource(path(n)) : null),
    size: (n) => (path(n) ? lstatSync(path(n)).size : null),
  };
}
