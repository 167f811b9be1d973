// A strict JSON parser (RFC 8259) for the archive's JSON members (spec README sections 2, 3, 4.3):
// integers stay exact (BigInt), floats are Numbers, objects are Maps in document order, and
// NaN/Infinity tokens, duplicate keys, a BOM, invalid UTF-8 and excessive nesting are refused.

import { FormatError } from "./errors.js";

export const MAX_JSON_DEPTH = 1000; // levels of arrays and objects (reading.md section 3)
export const MAX_INT_DIGITS = 4300; // Python's default digit limit (reading.md section 3)

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Bytes decoded as strict UTF-8; `what` names them in the error. */
export function decodeUtf8(bytes, what) {
  try {
    return utf8.decode(bytes);
  } catch {
    throw new FormatError(`${what} is not valid UTF-8`);
  }
}

/** Parses JSON bytes; a BOM or bad UTF-8 is refused. */
export function parseJsonBytes(bytes, what) {
  if (bytes.length >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) {
    throw new FormatError(`${what} starts with a UTF-8 BOM, which strict JSON does not allow`);
  }
  return parseJson(decodeUtf8(bytes, what), what);
}

/** Parses one JSON text (a string); throws FormatError naming `what`. */
export function parseJson(text, what) {
  const p = new Parser(text, what);
  p.ws();
  const v = p.value(0);
  p.ws();
  if (p.i !== text.length) p.fail("unexpected text after the value");
  return v;
}

/** An upper estimate of what parsing `bytes` builds (reading.md section 3). */
export function parseCost(bytes) {
  let cost = 4 * bytes.length;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i];
    if (b === 0x5b) cost += 80;
    else if (b === 0x7b) cost += 200;
    else if (b === 0x2c || b === 0x0a || b === 0x22) cost += 32;
  }
  return cost;
}

class Parser {
  constructor(text, what) {
    this.s = text;
    this.i = 0;
    this.what = what;
  }

  fail(msg) {
    throw new FormatError(`${this.what} is not strict JSON: ${msg} at character ${this.i}`);
  }

  ws() {
    const s = this.s;
    let i = this.i;
    for (;;) {
      const c = s.charCodeAt(i);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) i++;
      else break;
    }
    this.i = i;
  }

  value(depth) {
    const c = this.s[this.i];
    if (c === "{") return this.object(depth + 1);
    if (c === "[") return this.array(depth + 1);
    if (c === '"') return this.string();
    if (c === "t") return this.word("true", true);
    if (c === "f") return this.word("false", false);
    if (c === "n") return this.word("null", null);
    if (c === "N") this.fail("NaN is not JSON");
    if (c === "I") this.fail("Infinity is not JSON");
    if (c === "-" && this.s[this.i + 1] === "I") this.fail("-Infinity is not JSON");
    if (c === "-" || (c >= "0" && c <= "9")) return this.number();
    if (c === undefined) this.fail("unexpected end");
    return this.fail(`unexpected ${JSON.stringify(c)}`);
  }

  word(w, v) {
    if (this.s.startsWith(w, this.i)) {
      this.i += w.length;
      return v;
    }
    return this.fail("unknown word");
  }

  number() {
    const re = /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;
    re.lastIndex = this.i;
    const m = re.exec(this.s);
    if (!m) this.fail("bad number");
    this.i = re.lastIndex;
    const t = m[0];
    if (m[2] === undefined && m[3] === undefined) {
      if (m[1].length > MAX_INT_DIGITS) this.fail(`an integer of ${m[1].length} digits is over the limit of ${MAX_INT_DIGITS}`);
      return BigInt(t);
    }
    const f = Number(t);
    if (!Number.isFinite(f)) this.fail(`the number ${t.slice(0, 40)} overflows a double`);
    return f;
  }

  string() {
    const s = this.s;
    let i = this.i + 1;
    let out = "";
    let start = i;
    for (;;) {
      const c = s.charCodeAt(i);
      if (Number.isNaN(c)) {
        this.i = i;
        this.fail("unterminated string");
      }
      if (c === 0x22) break;
      if (c < 0x20) {
        this.i = i;
        this.fail("control character in a string");
      }
      if (c === 0x5c) {
        out += s.slice(start, i);
        const e = s[i + 1];
        const simple = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" }[e];
        if (simple !== undefined) {
          out += simple;
          i += 2;
        } else if (e === "u") {
          const h = s.slice(i + 2, i + 6);
          if (!/^[0-9a-fA-F]{4}$/.test(h)) {
            this.i = i;
            this.fail("bad \\u escape");
          }
          out += String.fromCharCode(parseInt(h, 16));
          i += 6;
        } else {
          this.i = i;
          this.fail("bad escape");
        }
        start = i;
        continue;
      }
      i++;
    }
    out += s.slice(start, i);
    this.i = i + 1;
    return out;
  }

  array(depth) {
    if (depth > MAX_JSON_DEPTH) this.fail(`nested too deeply (more than ${MAX_JSON_DEPTH} levels)`);
    this.i++;
    const out = [];
    this.ws();
    if (this.s[this.i] === "]") {
      this.i++;
      return out;
    }
    for (;;) {
      this.ws();
      out.push(this.value(depth));
      this.ws();
      const c = this.s[this.i++];
      if (c === "]") return out;
      if (c !== ",") {
        this.i--;
        this.fail("expected , or ]");
      }
    }
  }

  object(depth) {
    if (depth > MAX_JSON_DEPTH) this.fail(`nested too deeply (more than ${MAX_JSON_DEPTH} levels)`);
    this.i++;
    const out = new Map();
    this.ws();
    if (this.s[this.i] === "}") {
      this.i++;
      return out;
    }
    for (;;) {
      this.ws();
      if (this.s[this.i] !== '"') this.fail("expected a key");
      const k = this.string();
      if (out.has(k)) this.fail(`duplicate key '${k}'`);
      this.ws();
      if (this.s[this.i++] !== ":") {
        this.i--;
        this.fail("expected :");
      }
      this.ws();
      out.set(k, this.value(depth));
      this.ws();
      const c = this.s[this.i++];
      if (c === "}") return out;
      if (c !== ",") {
        this.i--;
        this.fail("expected , or }");
      }
    }
  }
}
