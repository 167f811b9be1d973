// The Node layer: files as random-access byte sources. Only this module (and bin/) uses Node's APIs;
// the reader itself runs in browsers on a Uint8Array.

import { closeSync, constants, fstatSync, openSync, readSync } from "node:fs";
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
