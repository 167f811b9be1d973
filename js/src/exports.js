// The manifest's `exports` section (spec README 3.2, format 1.3), checked when an archive is opened.
// Its members are never read: they are not part of the object tree.

import { FormatError, MemberNotFoundError, UnsafeArchiveError, VersionError } from "./errors.js";

const MEMBERS = { onnx: "exports/model.onnx", torchscript: "exports/model.torchscript.pt" };
const isMap = (v) => v instanceof Map;
const isNum = (v) => (typeof v === "number" && v >= 0) || (typeof v === "bigint" && v >= 0n);
const strings = (v) => Array.isArray(v) && v.every((s) => typeof s === "string");

/** Checks `manifest.exports` of an opened archive; refuses it as spec 3.2 says. */
export function checkExports(arc) {
  if (!arc.manifest.has("exports")) return;
  const [major, minor] = arc.version;
  if (major === 1 && minor < 3) throw new FormatError(`manifest.json: 'exports' is format 1.3; the file says ${major}.${minor}`);
  const ex = arc.manifest.get("exports");
  if (!isMap(ex) || ex.get("$type") !== "exports") throw new FormatError("manifest.json: 'exports' must be a node of type 'exports'");
  for (const [name, e] of ex) {
    if (name === "$type") continue;
    if (!Object.hasOwn(MEMBERS, name)) {
      if (minor > 5) throw new VersionError(`manifest.json: export '${name}' is newer than this reader: upgrade zarchive (or this reader)`);
      throw new FormatError(`manifest.json: unknown export '${name}'`);
    }
    const where = `manifest.json, export '${name}'`;
    if (!isMap(e)) throw new FormatError(`${where}: an export entry must be an object`);
    const member = e.get("member");
    if (member !== MEMBERS[name]) throw new FormatError(`${where}: 'member' must be the member '${MEMBERS[name]}'`);
    const m = arc.members.get(member);
    if (!m) throw new MemberNotFoundError(`${where}: the archive does not have member '${member}'`);
    if (m.codec !== "none") throw new FormatError(`${where}: its member must be the member '${member}' stored uncompressed`);
    const size = e.get("size");
    if (typeof size !== "bigint" || size < 0n) throw new FormatError(`${where}: bad 'size'`);
    if (Number(size) !== m.size) throw new UnsafeArchiveError(`${where}: the metadata declares ${m.size} bytes, the manifest needs ${size}`);
    for (const k of ["exporter", "torch"]) if (typeof e.get(k) !== "string") throw new FormatError(`${where}: '${k}' must be a string`);
    const opset = e.get("opset");
    if (name === "onnx" ? !(typeof opset === "bigint" && opset > 0n) : opset !== null) throw new FormatError(`${where}: bad 'opset'`);
    for (const k of ["inputs", "outputs", "warnings"]) if (!strings(e.get(k))) throw new FormatError(`${where}: '${k}' must be a list of strings`);
    const axes = e.get("dynamic_axes");
    const okAxes = axes === null || (isMap(axes) && [...axes.values()].every((a) => isMap(a) && [...a].every(([k, v]) => /^[0-9]+$/.test(k) && typeof v === "string")));
    if (!okAxes) throw new FormatError(`${where}: bad 'dynamic_axes'`);
    for (const k of ["max_abs_diff", "max_rel_diff", "rtol", "atol"]) if (!isNum(e.get(k))) throw new FormatError(`${where}: '${k}' must be a non-negative number`);
  }
}
