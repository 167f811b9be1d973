#!/usr/bin/env node
// zarc-neutral FILE: prints the class-free neutral form of a zarchive file, or of a sharded checkpoint
// directory (spec/neutral.md), the same text `zarchive neutral FILE` prints. A refused file prints nothing on stdout, one line
// `zarc-neutral: error: ...` on stderr, and exits 2 (as `zarchive neutral`, spec/neutral.md 1.2).

import { statSync } from "node:fs";
import { checkpointForm } from "../src/dcp.js";
import { canonicalJson, neutralText, ZarcError } from "../src/index.js";
import { directoryFiles, fileSource } from "../src/node.js";

function main(argv) {
  if (argv.length !== 1 || argv[0].startsWith("-")) {
    process.stderr.write("usage: zarc-neutral FILE\n");
    return 2;
  }
  const file = argv[0];
  try {
    if (statSync(file).isDirectory()) {
      process.stdout.write(canonicalJson(checkpointForm(directoryFiles(file))));
      return 0;
    }
    const src = fileSource(file);
    try {
      process.stdout.write(neutralText(src, { name: file }));
    } finally {
      src.close();
    }
    return 0;
  } catch (e) {
    if (e instanceof ZarcError) {
      process.stderr.write(`zarc-neutral: error: ${e.name}: ${e.message}\n`);
      return 2;
    }
    if (e && e.code && /^E[A-Z]+$/.test(e.code)) {
      process.stderr.write(`zarc-neutral: error: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
}

process.exitCode = main(process.argv.slice(2));
