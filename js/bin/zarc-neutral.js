#!/usr/bin/env node
// zarc-neutral FILE: prints the class-free neutral form of a zarchive file (spec/neutral.md), the
// same text `zarchive neutral FILE` prints. Exit status 1 with a message on stderr when the file is
// refused.

import { readFileSync, statSync } from "node:fs";
import { neutralText, ZarcError } from "../src/index.js";

const MAX_FILE = 2 ** 31; // the whole file is read into memory

function main(argv) {
  if (argv.length !== 1 || argv[0].startsWith("-")) {
    process.stderr.write("usage: zarc-neutral FILE\n");
    return 2;
  }
  const file = argv[0];
  try {
    const st = statSync(file);
    if (!st.isFile()) throw new ZarcError(`${file} is not a regular file`);
    if (st.size > MAX_FILE) throw new ZarcError(`${file} is ${st.size} bytes, more than this reader reads into memory`);
    const bytes = new Uint8Array(readFileSync(file));
    process.stdout.write(neutralText(bytes, { name: file }));
    return 0;
  } catch (e) {
    if (e instanceof ZarcError) {
      process.stderr.write(`zarc-neutral: ${e.name}: ${e.message}\n`);
      return 1;
    }
    if (e && e.code && /^E[A-Z]+$/.test(e.code)) {
      process.stderr.write(`zarc-neutral: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
}

process.exitCode = main(process.argv.slice(2));
