#!/usr/bin/env node
// zarc-dcp DIRECTORY: reads a sharded checkpoint (spec/distributed.md) and prints its state dict as
// JSON: each tensor as {dtype, shape, sha256 of its values in C order, little-endian}, other values
// as plain JSON (or their neutral description).

import { readCheckpoint } from "../src/dcp.js";
import { ZarcError } from "../src/index.js";
import { sha256 } from "../src/sha256.js";
import { directoryFiles } from "../src/node.js";

function main(argv) {
  if (argv.length !== 1) {
    process.stderr.write("usage: zarc-dcp DIRECTORY\n");
    return 2;
  }
  const files = directoryFiles(argv[0]);
  try {
    const show = (v) =>
      v && v.bytes ? { dtype: v.dtype, shape: v.shape, sha256: sha256(v.bytes) }
      : Array.isArray(v) ? v.map(show)
      : v && typeof v === "object" && !("kind" in v) ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, show(x)]))
      : typeof v === "bigint" ? v.toString() : v;
    process.stdout.write(`${JSON.stringify(show(readCheckpoint(files)), null, 1)}\n`);
    return 0;
  } catch (e) {
    if (!(e instanceof ZarcError)) throw e;
    process.stderr.write(`zarc-dcp: error: ${e.name}: ${e.message}\n`);
    return 2;
  }
}

process.exitCode = main(process.argv.slice(2));
