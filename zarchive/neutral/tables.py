"""The class-free neutral form of pandas and polars nodes (spec/neutral.md sections 5 and 6).

Text columns are decoded from their parts here, whatever the layout (`strings` inline or `.jsonl`,
`utf8`, `dict`; polars' inline `strings` or `utf8`), into one list of values, so a column reads the
same in every layout; numeric parts are array descriptions of their own.
"""

from __future__ import annotations

import itertools
from typing import Any

from ..container.jsontext import decode_jsonl
from ..errors import FormatError
from .arrow import arrow_array
from .encode import CANONICAL_NAN, D
from .fields import zone_fields
from .walker import NodeDescriber, Walker, child

_TEXT_LAYOUTS = frozenset({"strings", "utf8", "dict"})
_MISSING = {
    ("na_value", "NA"): {"kind": "pandas.NA"},
    ("na_value", "nan"): {"kind": "float", "bits": CANONICAL_NAN},
    ("missing", "None"): {"kind": "null"},
    ("missing", "NaN"): {"kind": "float", "bits": CANONICAL_NAN},
}


def _int(node: D, key: str, path: str) -> int:
    value = node.get(key)
    if type(value) is not int:
        raise FormatError(f"a {str(node.get('$type'))[:40]!r} node needs an int {key!r}", path=path)
    return value


# --- pandas (pandas.md) ---
def frame(w: Walker, node: D, path: str) -> D:
    keys = node.get("column_keys")
    data = node.get("data")
    if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys) and isinstance(data, list)):
        raise FormatError("a DataFrame needs 'column_keys' and 'data' lists", path=path)
    if len(keys) != len(data):
        raise FormatError("a DataFrame has one column key per column", path=path)
    out: D = {"kind": "pandas.DataFrame", "shape": node.get("shape"), "column_keys": keys, "dtypes": node.get("dtypes")}
    out["columns"] = w.value(node.get("columns"), child(path, "(columns)"))
    out["index"] = w.value(node.get("index"), child(path, "(index)"))
    _flags(w, node, path, out)
    out["data"] = [values(w, v, child(path, k)) for k, v in zip(keys, data)]
    return out


def series(w: Walker, node: D, path: str) -> D:
    out: D = {"kind": "pandas.Series", "dtype": node.get("dtype"), "length": _int(node, "length", path)}
    out["name"] = w.value(node.get("name"), child(path, "(name)"))
    out["index"] = w.value(node.get("index"), child(path, "(index)"))
    _flags(w, node, path, out)
    out["values"] = values(w, node.get("values"), path)
    return out


def _flags(w: Walker, node: D, path: str, out: D) -> None:
    out["attrs"] = w.value(node["attrs"], child(path, "(attrs)")) if "attrs" in node else None
    out["allows_duplicate_labels"] = node.get("allows_duplicate_labels") is not False


def values(w: Walker, node: Any, path: str) -> D:
    """A values node (pandas.md section 1): a numpy array or a pandas.array node."""
    tag = node.get("$type") if isinstance(node, dict) else None
    if tag not in ("numpy.ndarray", "pandas.array"):
        raise FormatError("a values node must be a numpy.ndarray or pandas.array node", path=path)
    return w.value(node, path)


def index(w: Walker, node: D, path: str) -> D:
    kind = node.get("kind")
    out: D = {"kind": "pandas.Index", "index_kind": kind}
    if kind == "range":
        for key in ("start", "stop", "step"):
            out[key] = str(_int(node, key, path))
        out["name"] = w.value(node.get("name"), child(path, "name"))
        return out
    if kind == "multi":
        names, levels, codes = (node.get(k) for k in ("names", "levels", "codes"))
        if not (isinstance(names, list) and isinstance(levels, list) and isinstance(codes, list)):
            raise FormatError("a MultiIndex needs 'names', 'levels' and 'codes' lists", path=path)
        out["length"] = _int(node, "length", path)
        out["names"] = [w.value(v, child(path, f"name {i}")) for i, v in enumerate(names)]
        out["levels"] = [w.value(v, child(path, f"level {i}")) for i, v in enumerate(levels)]
        out["codes"] = [w.value(v, child(path, f"codes {i}")) for i, v in enumerate(codes)]
        return out
    if kind != "values":
        raise FormatError(f"unknown pandas.Index kind {str(kind)[:20]!r}", path=path)
    out.update({"class": node.get("class"), "dtype": node.get("dtype"), "length": _int(node, "length", path)})
    out["name"] = w.value(node.get("name"), child(path, "name"))
    out["freq"] = node.get("freq")
    out["values"] = values(w, node.get("values"), path)
    return out


def array(w: Walker, node: D, path: str) -> D:
    layout = node.get("layout")
    length = _int(node, "length", path)
    out: D = {"kind": "pandas.array", "dtype": node.get("dtype"), "length": length}
    if layout in _TEXT_LAYOUTS:
        out["layout"] = "text"
        out["storage"] = node.get("storage")
        missing = _missing_value(node, path)
        texts = pandas_text(w, node, path, length)
        out["items"] = [missing if t is None else {"kind": "str", "value": t} for t in texts]
    elif layout == "items":
        out["layout"] = "items"
        items = w.sequence(node.get("items"), path)
        if len(items) != length:
            raise FormatError(f"an 'items' array holds {len(items)} items, not its length {length}", path=path)
        out["items"] = [w.value(v, child(path, i)) for i, v in enumerate(items)]
    elif layout == "categorical":
        out["layout"] = "categorical"
        out["ordered"] = node.get("ordered") is True
        out["categories"] = w.value(node.get("categories"), child(path, "categories"))
        out["codes"] = w.value(node.get("codes"), path)
    elif layout == "masked":
        out["layout"] = "masked"
        out["data"] = w.value(node.get("data"), path)
        out["mask"] = w.value(node["mask"], child(path, "mask")) if "mask" in node else None
    elif layout == "datetime":
        out["layout"] = "datetime"
        out["unit"] = node.get("unit")
        out.update(zone_fields(node, path))
        out["data"] = w.value(node.get("data"), path)
    elif layout == "period":
        out.update({"layout": "period", "freq": node.get("freq")})
        out["data"] = w.value(node.get("data"), path)
    elif layout == "numpy":
        out["layout"] = "numpy"
        out["data"] = w.value(node.get("data"), path)
    elif layout == "arrow":
        out["layout"] = "arrow"
        out["array"] = _arrow_of(w, node, path, length)
    else:
        raise FormatError(f"unknown pandas.array layout {str(layout)[:20]!r}", path=path)
    for part in ("data", "codes"):
        if isinstance(out.get(part), dict) and out[part].get("shape") != [length]:
            raise FormatError(f"a pandas.array's {part} does not hold its length {length}", path=path)
    return out


def _missing_value(node: D, path: str) -> D:
    for key in ("missing", "na_value"):
        if key in node:
            found = _MISSING.get((key, node[key]))
            if found is None:
                raise FormatError(f"unknown {key} {str(node[key])[:20]!r}", path=path)
            return found
    raise FormatError("a text array needs 'na_value' or 'missing'", path=path)


def pandas_text(w: Walker, node: D, path: str, length: int) -> list[str | None]:
    """The rows of a pandas text column, None where missing, in any of the three layouts."""
    layout = node.get("layout")
    if layout == "utf8":
        valid = _flags_of(w, node.get("valid"), child(path, "valid"), length, True)
        return utf8_rows(w, node, path, length, valid)
    if layout == "dict":
        count = _int(node, "count", path)
        words = utf8_rows(w, node, path, count, [True] * count)
        codes = w.load(node.get("codes"), child(path, "codes"))
        if codes.ndim != 1 or codes.dtype.kind != "i" or codes.shape[0] != length:
            raise FormatError(f"a dict column's codes must be {length} signed integers", path=path)
        out: list[str | None] = []
        for c in codes.tolist():
            if not -1 <= c < count:
                raise FormatError(f"a dict column's code {c} is outside -1..{count - 1}", path=path)
            out.append(None if c < 0 else words[c])
        return out
    count = _int(node, "count", path)
    masked = _flags_of(w, node.get("mask"), child(path, "mask"), length, False)
    present: Any = node.get("values")
    if "$ref" in node:
        data = w.member_bytes(node["$ref"], node.get("nbytes"), path)
        present = decode_jsonl(data, count, member=str(node["$ref"]))
    if not (isinstance(present, list) and len(present) == count and all(isinstance(s, str) for s in present)):
        raise FormatError(f"a 'strings' array needs {count} strings", path=path)
    if count + sum(masked) != length:
        raise FormatError("a 'strings' array's count and mask do not add up to its length", path=path)
    it = iter(present)
    return [None if m else next(it) for m in masked]


def _flags_of(w: Walker, node: Any, path: str, length: int, default: bool) -> list[bool]:
    if node is None:
        return [default] * length
    flags = w.load(node, path)
    if flags.ndim != 1 or flags.dtype.kind != "b" or flags.shape[0] != length:
        raise FormatError(f"expected {length} booleans", path=path)
    return [bool(x) for x in flags.tolist()]


def utf8_rows(w: Walker, node: D, path: str, n: int, present: list[bool]) -> list[str | None]:
    """Rows in Arrow's string layout (pandas.md 5.2): offsets and one UTF-8 data member."""
    offsets = w.load(node.get("offsets"), child(path, "offsets"))
    if offsets.ndim != 1 or offsets.dtype.kind != "i" or offsets.shape[0] != n + 1:
        raise FormatError(f"text offsets must be {n + 1} integers", path=path)
    data = w.member_bytes(node.get("$ref"), node.get("nbytes"), path)
    ends = offsets.tolist()
    if ends[0] != 0 or ends[-1] != len(data) or any(b < a for a, b in itertools.pairwise(ends)):
        raise FormatError("text offsets must rise from 0 to the data member's size", path=path)
    out: list[str | None] = []
    for i in range(n):
        a, b = ends[i], ends[i + 1]
        if not present[i]:
            if b != a:
                raise FormatError(f"missing row {i} has bytes", path=path)
            out.append(None)
            continue
        try:
            out.append(data[a:b].decode("utf-8"))
        except UnicodeDecodeError:
            raise FormatError(f"text row {i} is not valid UTF-8", path=path) from None
    return out


def scalar(w: Walker, node: D, path: str) -> D:
    kind = node.get("kind")
    if kind in ("NaT", "NA"):
        return {"kind": f"pandas.{kind}"}
    if kind in ("Timestamp", "Timedelta"):
        out: D = {"kind": f"pandas.{kind}", "unit": node.get("unit"), "value": _decimal(node.get("value"), path)}
        if kind == "Timestamp":
            out.update(zone_fields(node, path))
        return out
    if kind == "Period":
        return {"kind": "pandas.Period", "freq": node.get("freq"), "ordinal": str(_int(node, "ordinal", path))}
    raise FormatError(f"unknown pandas.scalar kind {str(kind)[:20]!r}", path=path)


def _decimal(text: Any, path: str) -> str:
    if not (isinstance(text, str) and text.lstrip("-").isdigit() and text.isascii() and len(text) <= 21):
        raise FormatError("a pandas scalar's value must be decimal text", path=path)
    return str(int(text))


# --- polars (polars.md) ---
def polars_frame(w: Walker, node: D, path: str) -> D:
    keys, data = node.get("column_keys"), node.get("data")
    if not (isinstance(keys, list) and isinstance(data, list) and len(keys) == len(data)):
        raise FormatError("a polars DataFrame needs 'column_keys' and 'data' of one item per column", path=path)
    out: D = {"kind": "polars.DataFrame", "shape": node.get("shape"), "column_keys": keys, "dtypes": node.get("dtypes")}
    out["data"] = [w.value(v, child(path, str(k))) for k, v in zip(keys, data)]
    return out


def polars_series(w: Walker, node: D, path: str) -> D:
    dtype = node.get("dtype")
    kind = dtype.get("kind") if isinstance(dtype, dict) else None
    length = _int(node, "length", path)
    out: D = {"kind": "polars.Series", "name": node.get("name"), "dtype": dtype, "length": length}
    out["valid"] = w.value(node["valid"], child(path, "valid")) if "valid" in node else None
    if node.get("layout") == "arrow":
        out["array"] = _arrow_of(w, node, path, length)
        return out
    if kind == "Null":
        return out
    if kind == "List":
        out["offsets"] = w.value(node.get("offsets"), child(path, "offsets"))
        out["values"] = w.value(node.get("values"), child(path, "values"))
    elif kind == "Struct":
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise FormatError("a Struct column needs its 'fields' list", path=path)
        out["fields"] = [
            w.value(f, child(path, str(f.get("name") if isinstance(f, dict) else i))) for i, f in enumerate(fields)
        ]
    elif "data" in node:
        out["data"] = w.value(node["data"], child(path, "data"))
    elif kind in ("String", "Categorical", "Enum"):
        present = _flags_of(w, node.get("valid"), child(path, "valid"), length, True)
        if node.get("layout") == "utf8":
            texts = utf8_rows(w, node, path, length, present)
        else:
            strings = node.get("strings")
            if not (isinstance(strings, list) and len(strings) == length and all(isinstance(s, str) for s in strings)):
                raise FormatError(f"a text column needs {length} inline strings or the utf8 layout", path=path)
            texts = [s if ok else None for s, ok in zip(strings, present)]
        out["items"] = [{"kind": "null"} if t is None else {"kind": "str", "value": t} for t in texts]
    else:
        raise FormatError(f"a polars {str(kind)[:30]} column needs its 'data'", path=path)
    return out


def _arrow_of(w: Walker, node: D, path: str, length: int) -> D:
    array = node.get("array")
    if not (isinstance(array, dict) and array.get("$type") == "arrow.array" and array.get("length") == length):
        raise FormatError(f"the 'arrow' layout needs an arrow.array node of {length} values", path=path)
    return w.value(array, child(path, "array"))


TABLE_TYPES: dict[str, NodeDescriber] = {
    "pandas.DataFrame": frame,
    "pandas.Series": series,
    "pandas.Index": index,
    "pandas.array": array,
    "pandas.scalar": scalar,
    "polars.DataFrame": polars_frame,
    "polars.Series": polars_series,
    "arrow.array": arrow_array,
}

__all__ = ["TABLE_TYPES", "pandas_text", "utf8_rows"]
