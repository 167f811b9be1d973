// JSON text as Python's json module writes it, where the spec names that text: a float's repr
// (dict keys named by their JSON text, spec 3.1), compact JSON of a node, and the neutral form's
// canonical text (sorted keys, one-space indents, ASCII with \uXXXX escapes).

/** Python's repr of a finite double: shortest round-trip digits, fixed for 1e-4 <= |x| < 1e16. */
export function pyFloatRepr(x) {
  if (Number.isNaN(x)) return "nan";
  if (x === Infinity) return "inf";
  if (x === -Infinity) return "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  const [mant, expText] = Math.abs(x).toExponential().split("e");
  const digits = mant.replace(".", "");
  const exp = Number(expText); // value = 0.digits * 10^(exp+1)
  const decpt = exp + 1;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return `${sign}0.${"0".repeat(-decpt)}${digits}`;
    if (decpt >= digits.length) return `${sign}${digits}${"0".repeat(decpt - digits.length)}.0`;
    return `${sign}${digits.slice(0, decpt)}.${digits.slice(decpt)}`;
  }
  const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  const e = exp < 0 ? `-${String(-exp).padStart(2, "0")}` : `+${String(exp).padStart(2, "0")}`;
  return `${sign}${m}e${e}`;
}

function quote(s, ascii) {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x22) out += '\\"';
    else if (c === 0x5c) out += "\\\\";
    else if (c === 0x0a) out += "\\n";
    else if (c === 0x0d) out += "\\r";
    else if (c === 0x09) out += "\\t";
    else if (c === 0x08) out += "\\b";
    else if (c === 0x0c) out += "\\f";
    else if (c < 0x20 || (ascii && c > 0x7e && c !== 0x7f)) out += `\\u${c.toString(16).padStart(4, "0")}`;
    else out += s[i];
  }
  return out + '"';
}

/** Compact JSON of a parsed value (Maps, arrays, BigInt ints, Number floats), as Python writes it. */
export function dumpsCompact(v) {
  if (v === null) return "null";
  if (v === true) return "true";
  if (v === false) return "false";
  if (typeof v === "bigint") return v.toString();
  if (typeof v === "number") return pyFloatRepr(v);
  if (typeof v === "string") return quote(v, false);
  if (Array.isArray(v)) return `[${v.map(dumpsCompact).join(",")}]`;
  if (v instanceof Map) return `{${[...v].map(([k, x]) => `${quote(k, false)}:${dumpsCompact(x)}`).join(",")}}`;
  throw new TypeError(`cannot write ${typeof v}`);
}

/**
 * The canonical text of a neutral form: sorted keys, one-space indents, ASCII only, a final newline
 * (Python's `json.dumps(form, sort_keys=True, ensure_ascii=True, indent=1)`). Numbers in a form are
 * ints (Number or BigInt); strings are everything else.
 */
export function canonicalJson(form) {
  const enc = (v, depth) => {
    if (v === null || v === undefined) return "null";
    if (v === true) return "true";
    if (v === false) return "false";
    if (typeof v === "bigint") return v.toString();
    if (typeof v === "number") {
      if (!Number.isInteger(v)) throw new TypeError(`a neutral form holds no floats (${v})`);
      return Object.is(v, -0) ? "0" : String(v);
    }
    if (typeof v === "string") return quote(v, true);
    const pad = "\n" + " ".repeat(depth + 1);
    const end = "\n" + " ".repeat(depth);
    if (Array.isArray(v)) {
      if (!v.length) return "[]";
      return "[" + v.map((x) => pad + enc(x, depth + 1)).join(",") + end + "]";
    }
    const keys = Object.keys(v).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    if (!keys.length) return "{}";
    return "{" + keys.map((k) => pad + quote(k, true) + ": " + enc(v[k], depth + 1)).join(",") + end + "}";
  };
  return enc(form, 0) + "\n";
}
