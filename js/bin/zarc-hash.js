#!/usr/bin/env node
// zarc-hash FILE [OBJPATH]: prints the weights hash (spec/weights-hash.md) of the value at OBJPATH,
// as `zarchive hash FILE [OBJPATH]` does.

import { readFileSync, statSync } from "node:fs";
import { openArchive, weightsHash, ZarcError } from "../src/index.js";

function main(argv) {
  if (argv.length < 1 || argv.length > 2) {
    process.stderr.write("usage: zarc-hash FILE [OBJPATH]\n");
    return 2;
  }
  try {
    if (!statSync(argv[0]).isFile()) throw new ZarcError(`${argv[0]} is not a regular file`);
    const arc = openArchive(new Uint8Array(readFileSync(argv[0])));
    process.stdout.write(`${weightsHash(arc, argv[1] ?? "")}\n`);
    return 0;
  } catch (e) {
    if (!(e instanceof ZarcError) && !(e && e.code)) throw e;
    process.stderr.write(`zarc-hash: ${e.name}: ${e.message}\n`);
    return 1;
  }
}

process.exitCode = main(process.argv.slice(2));
