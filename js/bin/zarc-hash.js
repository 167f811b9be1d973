#!/usr/bin/env node
// zarc-hash FILE [OBJPATH]: prints the weights hash (spec/weights-hash.md) of the value at OBJPATH,
// as `zarchive hash FILE [OBJPATH]` does.

import { openArchive, weightsHash, ZarcError } from "../src/index.js";
import { fileSource } from "../src/node.js";

function main(argv) {
  if (argv.length < 1 || argv.length > 2) {
    process.stderr.write("usage: zarc-hash FILE [OBJPATH]\n");
    return 2;
  }
  try {
    const src = fileSource(argv[0]);
    try {
      process.stdout.write(`${weightsHash(openArchive(src), argv[1] ?? "")}\n`);
    } finally {
      src.close();
    }
    return 0;
  } catch (e) {
    if (!(e instanceof ZarcError) && !(e && e.code)) throw e;
    process.stderr.write(`zarc-hash: error: ${e.name}: ${e.message}\n`);
    return 2;
  }
}

process.exitCode = main(process.argv.slice(2));
