// Every frozen example of spec/examples/ read, its checksums verified, and its class-free neutral
// form equal to the committed `<name>.generic.json` (as `zarchive neutral` prints it).

import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { neutralText, openArchive } from "../src/index.js";
import { EXAMPLES, load } from "./helpers.js";

const archives = readdirSync(EXAMPLES).filter((f) => f.endsWith(".zarc")).sort();

test("there are golden examples to read", () => {
  assert.ok(archives.length >= 39, `${archives.length} examples`);
});

for (const file of archives) {
  test(`reads and verifies ${file}`, () => {
    const bytes = load(join(EXAMPLES, file));
    const arc = openArchive(bytes);
    arc.verify();
    const expected = join(EXAMPLES, `${file.split(".")[0]}.generic.json`);
    assert.ok(existsSync(expected), `${expected} exists`);
    assert.equal(neutralText(bytes), readFileSync(expected, "utf8"));
  });
}
