// Tensor tables (spec README 5.4, formats 1.1 and 1.2): each row reads as a torch.Tensor node.

/** [[name, node]] of a dict node's `tensors` (one TABLE or an array of them); `fail(msg)` makes the error. */
export function tensorRows(tensors, fail) {
  const tables = Array.isArray(tensors) ? tensors : [tensors];
  if (Array.isArray(tensors) && tensors.length === 0) throw fail("'tensors' must not be an empty list");
  const out = [];
  const seen = new Set();
  for (const t of tables) {
    if (!(t instanceof Map) || !Array.isArray(t.get("rows")) || typeof t.get("$ref") !== "string") {
      throw fail("a tensor table must be an object with '$ref', 'device' and 'rows'");
    }
    for (const row of t.get("rows")) {
      const ok = Array.isArray(row) && (row.length === 3 || row.length === 4) && typeof row[0] === "string" &&
        typeof row[1] === "string" && Array.isArray(row[2]) && (row.length === 3 || typeof row[3] === "string");
      if (!ok) throw fail(`a malformed tensor table row ${JSON.stringify(String(row)).slice(0, 60)}`);
      if (seen.has(row[0])) throw fail(`tensor table name '${row[0]}' is repeated`);
      seen.add(row[0]);
      const node = new Map([
        ["$type", "torch.Tensor"], ["$ref", t.get("$ref")], ["key", row.length === 4 ? row[3] : row[0]],
        ["dtype", row[1]], ["shape", row[2]], ["device", t.has("device") ? t.get("device") : null],
      ]);
      out.push([row[0], node]);
    }
  }
  return out;
}
