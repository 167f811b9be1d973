"""The class-free neutral form of an `arrow.array` node (spec/neutral.md section 5.1, spec/pandas.md 5.4).

The array is described as stored, buffer by buffer, with numpy alone: bitmaps (validity, `bool`
values) as the SHA of their first `length` bits, one byte each (padding bits do not show; no validity
shows when no value is missing), every other buffer as a numpy array description (the SHA of its
values). Children and the dictionary are arrays of their own. The values are checked as a reader must
before anything is described: bitmap counts, offsets, dictionary indices, UTF-8 of text. The plan (run
before the walk) has already checked the type grammar and every buffer's dtype and item count.
"""

from __future__ import annotations

import re
import zoneinfo
from typing import Any

import numpy as np

from ..errors import FormatError
from ..handlers.arrow_checks import check_indices, check_offsets, check_validity, present_bits
from ..nodes.arrow_types import BINARY_IDS, LIST_IDS, buffer_specs, check_type
from .encode import D, sha256_hex
from .walker import Walker, child

_TZ_OFFSET = re.compile(r"[+-][0-9]{2}:?[0-9]{2}")


def _check_zones(t: Any, path: str) -> None:
    """Every timestamp zone of a (grammar-checked) type names a zone: a fixed offset, or an IANA name
    the time zone database holds (spelled as it spells it)."""
    if isinstance(t, dict):
        tz = t.get("tz") if t.get("id") == "timestamp" else None
        if isinstance(tz, str) and not _TZ_OFFSET.fullmatch(tz):
            try:
                zoneinfo.ZoneInfo(tz)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
                raise FormatError(f"unknown time zone {tz[:40]!r}", path=path) from None
        for f in t.get("fields") or []:
            _check_zones(f.get("type") if isinstance(f, dict) else None, path)
        f = t.get("item")
        _check_zones(f.get("type") if isinstance(f, dict) else None, path)
        _check_zones(t.get("value"), path)


_TYPE_KEYS = {"time32": ("unit",), "time64": ("unit",), "duration": ("unit",), "timestamp": ("unit", "tz")}
_TYPE_KEYS |= {"decimal128": ("precision", "scale"), "dictionary": ("index", "value", "ordered")}


def type_form(t: dict[str, Any]) -> D:
    """A (grammar-checked) type with only the grammar's keys: others a writer added do not show."""
    tid = t["id"]
    out: D = {"id": tid}
    for key in _TYPE_KEYS.get(tid, ()):
        out[key] = type_form(t[key]) if key == "value" else t.get(key)
    if tid in LIST_IDS:
        out["item"] = _field_form(t["item"])
    elif tid == "struct":
        out["fields"] = [_field_form(f) for f in t["fields"]]
    return out


def _field_form(f: dict[str, Any]) -> D:
    return {"name": f["name"], "type": type_form(f["type"]), "nullable": f["nullable"]}


def _bits(w: Walker, node: Any, path: str, length: int) -> tuple[D, np.ndarray]:
    bitmap = np.ascontiguousarray(w.load(node, path), dtype=np.uint8)
    bits = present_bits(bitmap, length)
    return {"kind": "bits", "length": length, "sha256": sha256_hex(bits.view(np.uint8).tobytes()), "path": path}, bitmap


def arrow_array(w: Walker, node: D, path: str) -> D:
    try:
        tid = check_type(node.get("type"))
    except ValueError as e:
        raise FormatError(str(e), path=path) from None
    t: dict[str, Any] = node["type"]
    _check_zones(t, path)
    length, nulls = node.get("length"), node.get("null_count")
    if not (type(length) is int and type(nulls) is int and 0 <= nulls <= length):
        raise FormatError("an Arrow array needs int 'length' and 'null_count' (0 to length)", path=path)
    specs = buffer_specs(t, length)
    buffers = node.get("buffers")
    if not isinstance(buffers, list) or len(buffers) != len(specs):
        raise FormatError(f"an Arrow {tid} array needs {len(specs)} buffers", path=path)
    out: D = {"kind": "arrow.array", "type": type_form(t), "length": length, "null_count": nulls}
    descs: list[D | None] = []
    bitmap: np.ndarray | None = None
    loaded: list[Any] = []
    for spec, buf in zip(specs, buffers):
        bpath = child(path, spec.role)
        if buf is None:
            descs.append(None)
            loaded.append(None)
        elif spec.role == "validity" or tid == "bool":
            desc, raw = _bits(w, buf, bpath, length)
            if spec.role == "validity":
                bitmap = raw
            descs.append(None if spec.role == "validity" and nulls == 0 else desc)
            loaded.append(raw)
        else:
            descs.append(w.value(buf, bpath))
            loaded.append(w.load(buf, bpath))
    if specs:
        try:
            check_validity(bitmap, length, nulls, member=None)
        except FormatError as e:
            raise FormatError(e.message, path=path) from None
    out["buffers"] = descs
    children = node.get("children", [])
    out["children"] = [w.value(c, child(path, f"child{i}")) for i, c in enumerate(children)]
    dictionary = node.get("dictionary")
    out["dictionary"] = None if dictionary is None else w.value(dictionary, child(path, "dictionary"))
    _check_values(tid, t, loaded, bitmap, node, length, path)
    return out


def _check_values(
    tid: str, t: dict[str, Any], loaded: list[Any], bitmap: np.ndarray | None, node: D, length: int, path: str
) -> None:
    try:
        if tid in BINARY_IDS:
            offsets, data = loaded[1], loaded[2]
            check_offsets(offsets, len(data), member=None)
            if "utf8" in tid:
                raw = np.ascontiguousarray(data, dtype=np.uint8).tobytes()
                ends = offsets.tolist()
                for i in range(length):
                    raw[ends[i] : ends[i + 1]].decode("utf-8")
        elif tid in LIST_IDS:
            check_offsets(loaded[1], node["children"][0].get("length"), member=None)
        elif tid == "dictionary":
            check_indices(loaded[1], bitmap, int(node["dictionary"].get("length")), length, member=None)
    except UnicodeDecodeError:
        raise FormatError("a text value is not valid UTF-8", path=path) from None
    except FormatError as e:
        raise FormatError(e.message, path=path) from None
