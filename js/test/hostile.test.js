// The hostile corpus (tests/hostile/corpus, INDEX.json says what each file is): every case zarchive
// refuses is refused here too, with one of this reader's errors (never a crash, a hang or an
// allocation the file's declared sizes ask for); the valid cases read.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { neutralForm, openArchive, ZarcError } from "../src/index.js";
import { CORPUS, load } from "./helpers.js";

const INDEX = JSON.parse(readFileSync(join(CORPUS, "INDEX.json"), "utf8"));

// Refusals that need the writer's classes or a model build: a class-free reader reads these files
// generically (spec/reading.md section 2), as `zarchive neutral` does.
const NEEDS_CLASSES = new Set(["UnknownTypeError", "ConfigMismatchError"]);
const CLASS_CASES = new Set(["model_real_build_asks_terabytes.zarc"]);
// Only `verify` checks per-entry checksums (spec section 6): a full read of this one succeeds.
const VERIFY_ONLY = new Set(["bounded_entries_overlap.zarc"]);

function read(bytes) {
  const arc = openArchive(bytes);
  return neutralForm(arc) && arc;
}

for (const [file, { error }] of Object.entries(INDEX)) {
  const classFree =
    (/^(class|model)_/.test(file) && error && error.split("|").every((e) => NEEDS_CLASSES.has(e))) || CLASS_CASES.has(file);
  test(`hostile ${file}`, () => {
    const bytes = load(join(CORPUS, file));
    if (error === null || classFree) {
      const arc = read(bytes);
      if (VERIFY_ONLY.has(file)) assert.throws(() => arc.verify(), ZarcError);
      else arc.verify();
    } else {
      assert.throws(
        () => read(bytes).verify(),
        (e) => e instanceof ZarcError,
        `${file} must be refused (zarchive: ${error})`,
      );
    }
  });
}
