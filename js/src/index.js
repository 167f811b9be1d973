// The reader's public interface: open an archive from its bytes, verify it, describe it.

import { Archive } from "./archive.js";
import { Describer, FORM_NAME } from "./describe.js";
import { TABLE_TYPES } from "./frames.js";
import { canonicalJson } from "./pyjson.js";

export { Archive } from "./archive.js";
export * from "./errors.js";
export { canonicalJson } from "./pyjson.js";
export { weightsHash } from "./weights.js";

/** Opens an archive from its bytes (a Uint8Array of the whole file). */
export function openArchive(bytes, opts = {}) {
  return new Archive(bytes, opts);
}

/** The class-free neutral form of an opened archive: {format, value}. */
export function neutralForm(archive) {
  return { format: FORM_NAME, value: new Describer(archive, TABLE_TYPES).run() };
}

/** The neutral form's canonical text, as `zarchive neutral FILE` prints it. */
export function neutralText(bytes, opts = {}) {
  return canonicalJson(neutralForm(openArchive(bytes, opts)));
}
