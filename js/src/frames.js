// pandas (spec/pandas.md) and polars (spec/polars.md) nodes in the class-free neutral form. Text
// columns are decoded from their parts whatever the layout (`strings` inline or `.jsonl`, `utf8`,
// `dict`, polars' inline `strings`), so a column reads the same in every layout; numeric parts are
// array descriptions of their own.

import { FormatError } from "./errors.js";
import { arrowArray } from "./arrow.js";
import { child, zoneFields } from "./describe.js";

const NAN = "7ff8000000000000";
const MISSING = {
  "na_value NA": { kind: "pandas.NA" },
  "na_value nan": { kind: "float", bits: NAN },
  "missing None": { kind: "null" },
  "missing NaN": { kind: "float", bits: NAN },
};
const utf8 = new TextDecoder("utf-8", { fatal: true });
const isMap = (v) => v instanceof Map;

/** A plain JSON field (shape, dtypes, a polars dtype object) as it stands in the file. */
export function plain(v) {
  if (isMap(v)) return Object.fromEntries([...v].map(([k, x]) => [k, plain(x)]));
  if (Array.isArray(v)) return v.map(plain);
  if (typeof v === "number") return v; // (no floats in these fields)
  return v === undefined ? null : v;
}

function int(w, node, key, path) {
  const v = node.get(key);
  if (typeof v !== "bigint") throw w.fail(path, `a '${node.get("$type")}' node needs an int '${key}'`);
  return Number(v);
}

function get(node, key) {
  return node.has(key) ? plain(node.get(key)) : null;
}

// --- pandas ---
function frame(w, node, path) {
  const keys = node.get("column_keys");
  const data = node.get("data");
  if (!(Array.isArray(keys) && keys.every((k) => typeof k === "string") && Array.isArray(data))) throw w.fail(path, "a DataFrame needs 'column_keys' and 'data' lists");
  if (keys.length !== data.length) throw w.fail(path, "a DataFrame has one column key per column");
  const out = { kind: "pandas.DataFrame", shape: get(node, "shape"), column_keys: keys, dtypes: get(node, "dtypes") };
  out.columns = w.value(node.get("columns"), child(path, "(columns)"));
  out.index = w.value(node.get("index"), child(path, "(index)"));
  flags(w, node, path, out);
  out.data = keys.map((k, i) => values(w, data[i], child(path, k)));
  return out;
}

function series(w, node, path) {
  const out = { kind: "pandas.Series", dtype: get(node, "dtype"), length: int(w, node, "length", path) };
  out.name = w.value(node.get("name"), child(path, "(name)"));
  out.index = w.value(node.get("index"), child(path, "(index)"));
  flags(w, node, path, out);
  out.values = values(w, node.get("values"), path);
  return out;
}

function flags(w, node, path, out) {
  out.attrs = node.has("attrs") ? w.value(node.get("attrs"), child(path, "(attrs)")) : null;
  out.allows_duplicate_labels = node.get("allows_duplicate_labels") !== false;
}

function values(w, node, path) {
  const tag = isMap(node) ? node.get("$type") : null;
  if (tag !== "numpy.ndarray" && tag !== "pandas.array") throw w.fail(path, "a values node must be a numpy.ndarray or pandas.array node");
  return w.value(node, path);
}

function index(w, node, path) {
  const kind = node.get("kind");
  const out = { kind: "pandas.Index", index_kind: kind };
  if (kind === "range") {
    for (const k of ["start", "stop", "step"]) out[k] = String(int(w, node, k, path));
    out.name = w.value(node.get("name") ?? null, child(path, "name"));
    return out;
  }
  if (kind === "multi") {
    const [names, levels, codes] = ["names", "levels", "codes"].map((k) => node.get(k));
    if (!(Array.isArray(names) && Array.isArray(levels) && Array.isArray(codes))) throw w.fail(path, "a MultiIndex needs 'names', 'levels' and 'codes' lists");
    out.length = int(w, node, "length", path);
    out.names = names.map((v, i) => w.value(v, child(path, `name ${i}`)));
    out.levels = levels.map((v, i) => w.value(v, child(path, `level ${i}`)));
    out.codes = codes.map((v, i) => w.value(v, child(path, `codes ${i}`)));
    return out;
  }
  if (kind !== "values") throw w.fail(path, `unknown pandas.Index kind ${JSON.stringify(String(kind))}`);
  Object.assign(out, { class: get(node, "class"), dtype: get(node, "dtype"), length: int(w, node, "length", path) });
  out.name = w.value(node.has("name") ? node.get("name") : null, child(path, "name"));
  out.freq = get(node, "freq");
  out.values = values(w, node.get("values"), path);
  return out;
}

function array(w, node, path) {
  const layout = node.get("layout");
  const length = int(w, node, "length", path);
  const out = { kind: "pandas.array", dtype: get(node, "dtype"), length };
  if (layout === "strings" || layout === "utf8" || layout === "dict") {
    out.layout = "text";
    out.storage = get(node, "storage");
    const missing = missingValue(w, node, path);
    out.items = pandasText(w, node, path, length).map((t) => (t === null ? { ...missing } : { kind: "str", value: t }));
  } else if (layout === "items") {
    out.layout = "items";
    const items = w.sequence(node.get("items"), path);
    if (items.length !== length) throw w.fail(path, `an 'items' array holds ${items.length} items, not its length ${length}`);
    out.items = items.map((v, i) => w.value(v, child(path, i)));
  } else if (layout === "categorical") {
    out.layout = "categorical";
    out.ordered = node.get("ordered") === true;
    out.categories = w.value(node.get("categories"), child(path, "categories"));
    out.codes = w.value(node.get("codes"), path);
  } else if (layout === "masked") {
    out.layout = "masked";
    out.data = w.value(node.get("data"), path);
    out.mask = node.has("mask") ? w.value(node.get("mask"), child(path, "mask")) : null;
  } else if (layout === "datetime") {
    out.layout = "datetime";
    out.unit = get(node, "unit");
    Object.assign(out, zoneFields(w, node, path));
    out.data = w.value(node.get("data"), path);
  } else if (layout === "period") {
    Object.assign(out, { layout: "period", freq: get(node, "freq") });
    out.data = w.value(node.get("data"), path);
  } else if (layout === "numpy") {
    out.layout = "numpy";
    out.data = w.value(node.get("data"), path);
  } else if (layout === "arrow") {
    out.layout = "arrow";
    out.array = arrowOf(w, node, path, length);
  } else throw w.fail(path, `unknown pandas.array layout ${JSON.stringify(String(layout))}`);
  for (const part of ["data", "codes"]) {
    const d = out[part];
    if (d && typeof d === "object" && JSON.stringify(d.shape) !== JSON.stringify([length])) throw w.fail(path, `a pandas.array's ${part} does not hold its length ${length}`);
  }
  return out;
}

function missingValue(w, node, path) {
  for (const key of ["missing", "na_value"]) {
    if (node.has(key)) {
      const found = MISSING[`${key} ${node.get(key)}`];
      if (!found) throw w.fail(path, `unknown ${key} ${JSON.stringify(String(node.get(key)))}`);
      return found;
    }
  }
  throw w.fail(path, "a text array needs 'na_value' or 'missing'");
}

/** The rows of a pandas text column, null where missing, in any of the three layouts. */
function pandasText(w, node, path, length) {
  const layout = node.get("layout");
  if (layout === "utf8") return utf8Rows(w, node, path, length, flagsOf(w, node.get("valid"), child(path, "valid"), length, true));
  if (layout === "dict") {
    const count = int(w, node, "count", path);
    if (count < 0) throw w.fail(path, "a dict column's count must not be negative");
    const words = utf8Rows(w, node, path, count, new Array(count).fill(true));
    if (!node.has("codes")) throw w.fail(path, "a dict column needs its codes");
    const { values: codes } = w.arrayNumbers(node.get("codes"), child(path, "codes"), length, ["i"], "a dict column's codes");
    return codes.map((c) => {
      if (!(c >= -1 && c < count)) throw w.fail(path, `a dict column's codes must lie in -1..${count - 1} (one is ${c})`);
      return c < 0 ? null : words[c];
    });
  }
  const count = int(w, node, "count", path);
  const masked = flagsOf(w, node.get("mask"), child(path, "mask"), length, false);
  const present = node.has("$ref") ? w.jsonl(node.get("$ref"), node.get("nbytes"), count, path) : node.get("values");
  if (!(Array.isArray(present) && present.length === count && present.every((s) => typeof s === "string"))) throw w.fail(path, `a 'strings' array needs ${count} strings`);
  if (count + masked.filter(Boolean).length !== length) throw w.fail(path, "a 'strings' array's count and mask do not add up to its length");
  let k = 0;
  return masked.map((m) => (m ? null : present[k++]));
}

function flagsOf(w, node, path, length, dflt) {
  if (node === undefined || node === null) return new Array(length).fill(dflt);
  return w.arrayNumbers(node, path, length, ["b"], "'valid' and 'mask'").values;
}

/** Rows in Arrow's string layout (pandas.md 5.2): offsets and one UTF-8 data member. */
function utf8Rows(w, node, path, n, present) {
  if (!node.has("offsets")) throw w.fail(path, "a text column in the utf8 layout needs its offsets");
  const { values: ends } = w.arrayNumbers(node.get("offsets"), child(path, "offsets"), n + 1, ["i"], `text offsets for ${n} values`);
  const data = w.memberBytes(node.get("$ref"), node.get("nbytes"), path);
  if (ends[0] !== 0 || ends[n] !== data.length || ends.some((e, i) => i > 0 && e < ends[i - 1])) {
    throw w.fail(path, `text offsets must run from 0 to the data member's size ${data.length} and never decrease`);
  }
  const out = [];
  for (let i = 0; i < n; i++) {
    const [a, b] = [ends[i], ends[i + 1]];
    if (!present[i]) {
      if (b !== a) throw w.fail(path, `missing value ${i} holds bytes`);
      out.push(null);
      continue;
    }
    try {
      out.push(utf8.decode(data.subarray(a, b)));
    } catch {
      throw w.fail(path, `text value ${i} is not valid UTF-8`);
    }
  }
  return out;
}

function scalar(w, node, path) {
  const kind = node.get("kind");
  if (kind === "NaT" || kind === "NA") return { kind: `pandas.${kind}` };
  if (kind === "Timestamp" || kind === "Timedelta") {
    const v = node.get("value");
    if (typeof v !== "string" || !/^-?[0-9]{1,20}$/.test(v)) throw w.fail(path, "a pandas scalar's value must be decimal text");
    const out = { kind: `pandas.${kind}`, unit: get(node, "unit"), value: BigInt(v).toString() };
    if (kind === "Timestamp") Object.assign(out, zoneFields(w, node, path));
    return out;
  }
  if (kind === "Period") return { kind: "pandas.Period", freq: get(node, "freq"), ordinal: String(int(w, node, "ordinal", path)) };
  throw w.fail(path, `unknown pandas.scalar kind ${JSON.stringify(String(kind))}`);
}

// --- polars ---
function polarsFrame(w, node, path) {
  const keys = node.get("column_keys");
  const data = node.get("data");
  if (!(Array.isArray(keys) && Array.isArray(data) && keys.length === data.length)) throw w.fail(path, "a polars DataFrame needs 'column_keys' and 'data' of one item per column");
  const out = { kind: "polars.DataFrame", shape: get(node, "shape"), column_keys: plain(keys), dtypes: get(node, "dtypes") };
  out.data = keys.map((k, i) => w.value(data[i], child(path, String(k))));
  return out;
}

function polarsSeries(w, node, path) {
  const dtype = node.get("dtype");
  const kind = isMap(dtype) ? dtype.get("kind") : null;
  const length = int(w, node, "length", path);
  const out = { kind: "polars.Series", name: get(node, "name"), dtype: plain(dtype), length };
  out.valid = node.has("valid") ? w.value(node.get("valid"), child(path, "valid")) : null;
  if (node.get("layout") === "arrow") {
    out.array = arrowOf(w, node, path, length);
    return out;
  }
  if (kind === "Null") return out;
  if (kind === "List") {
    out.offsets = w.value(node.get("offsets"), child(path, "offsets"));
    out.values = w.value(node.get("values"), child(path, "values"));
  } else if (kind === "Struct") {
    const fields = node.get("fields");
    if (!Array.isArray(fields)) throw w.fail(path, "a Struct column needs its 'fields' list");
    out.fields = fields.map((f, i) => w.value(f, child(path, String(isMap(f) && f.has("name") ? plain(f.get("name")) : i))));
  } else if (node.has("data")) {
    out.data = w.value(node.get("data"), child(path, "data"));
  } else if (kind === "String" || kind === "Categorical" || kind === "Enum") {
    const present = flagsOf(w, node.get("valid"), child(path, "valid"), length, true);
    let texts;
    if (node.get("layout") === "utf8") texts = utf8Rows(w, node, path, length, present);
    else {
      const strings = node.get("strings");
      if (!(Array.isArray(strings) && strings.length === length && strings.every((s) => typeof s === "string"))) throw w.fail(path, `a text column needs ${length} inline strings or the utf8 layout`);
      texts = strings.map((s, i) => (present[i] ? s : null));
    }
    out.items = texts.map((t) => (t === null ? { kind: "null" } : { kind: "str", value: t }));
  } else throw w.fail(path, `a polars ${String(kind).slice(0, 30)} column needs its 'data'`);
  return out;
}

/** The `arrow.array` node of a column in the `arrow` layout (pandas.md 5, polars.md), of `length` values. */
function arrowOf(w, node, path, length) {
  const array = node.get("array");
  if (!(isMap(array) && array.get("$type") === "arrow.array" && array.get("length") === BigInt(length))) {
    throw w.fail(path, `the 'arrow' layout needs an arrow.array node of ${length} values`);
  }
  return w.value(array, child(path, "array"));
}

export const TABLE_TYPES = {
  "pandas.DataFrame": frame,
  "pandas.Series": series,
  "pandas.Index": index,
  "pandas.array": array,
  "pandas.scalar": scalar,
  "polars.DataFrame": polarsFrame,
  "polars.Series": polarsSeries,
  "arrow.array": arrowArray,
};
