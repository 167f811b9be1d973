"""Hostile-corpus cases about columns in Arrow's buffer layout (format 1.5, the `arrow.array` node,
spec/pandas.md 5.4): offsets out of order or out of range, a validity bitmap that disagrees with
`null_count` or is too short, dictionary indices outside the dictionary, struct children of another
length, text that is not UTF-8, types outside the grammar (unknown ids, a zone that is a path, nesting
past the depth gate), buffers of the wrong dtype or count, and fields the node does not have.

Every buffer is inline, packed with true sizes and checksums, so the reader gets past the integrity
layer and has to catch the lie in the array itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hostile.craft import Parts, pack

CaseTuple = tuple[str, Callable[[], bytes], str | None, str]

TEXT = list("aéb".encode()) + list("日x".encode())  # "a", "éb", missing, "日x": offsets 0 1 4 4 8


def buf(dtype: str, data: list[int]) -> dict[str, Any]:
    return {"$type": "numpy.ndarray", "dtype": dtype, "shape": [len(data)], "data": data}


def strings(**edit: Any) -> dict[str, Any]:
    node: dict[str, Any] = {
        "$type": "arrow.array",
        "type": {"id": "utf8"},
        "length": 4,
        "null_count": 1,
        "buffers": [buf("|u1", [0b1011]), buf("<i4", [0, 1, 4, 4, 8]), buf("|u1", TEXT)],
    }
    node.update(edit)
    return node


def ints(t: dict[str, Any] | None = None, **edit: Any) -> dict[str, Any]:
    node: dict[str, Any] = {
        "$type": "arrow.array",
        "type": t or {"id": "int64"},
        "length": 3,
        "null_count": 1,
        "buffers": [buf("|u1", [0b101]), buf("<i8", [1, 0, 3])],
    }
    node.update(edit)
    return node


def field(name: str, t: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "type": t, "nullable": True}


def struct(child_length: int) -> dict[str, Any]:
    return {
        "$type": "arrow.array",
        "type": {"id": "struct", "fields": [field("a", {"id": "int64"})]},
        "length": 3,
        "null_count": 0,
        "buffers": [None],
        "children": [ints(length=child_length)],
    }


def dictionary(indices: list[int]) -> dict[str, Any]:
    return {
        "$type": "arrow.array",
        "type": {"id": "dictionary", "index": "int32", "value": {"id": "utf8"}, "ordered": False},
        "length": 3,
        "null_count": 0,
        "buffers": [None, buf("<i4", indices)],
        "dictionary": strings(null_count=0, buffers=[None, buf("<i4", [0, 1, 4, 4, 8]), buf("|u1", TEXT)]),
    }


def deep_type(levels: int) -> dict[str, Any]:
    t: dict[str, Any] = {"id": "int64"}
    for _ in range(levels):
        t = {"id": "large_list", "item": field("item", t)}
    return t


def archive(node: dict[str, Any], *, compact: bool = False) -> Callable[[], bytes]:
    manifest = {"format": "zarchive", "format_version": "1.5", "root": node}
    raw = json.dumps(manifest).encode() if compact else None  # deep nesting, without its indentation
    return lambda: pack(Parts(manifest, {}), manifest_bytes=raw)


def arrow_cases() -> list[CaseTuple]:
    return [
        ("arrow_strings_valid", archive(strings()), None, ""),
        ("arrow_dictionary_valid", archive(dictionary([0, 1, 3])), None, ""),
        ("arrow_offsets_decrease", archive(strings(buffers=[None, buf("<i4", [0, 4, 1, 4, 8]), buf("|u1", TEXT)],
                                                   null_count=0)), "FormatError", "decrease"),
        ("arrow_offsets_past_end", archive(strings(buffers=[None, buf("<i4", [0, 1, 4, 4, 99]), buf("|u1", TEXT)],
                                                   null_count=0)), "FormatError", "offsets end at 99"),
        ("arrow_offsets_not_from_zero", archive(strings(buffers=[None, buf("<i4", [2, 2, 4, 4, 8]), buf("|u1", TEXT)],
                                                        null_count=0)), "FormatError", "start at 0"),
        ("arrow_offsets_count", archive(strings(buffers=[None, buf("<i4", [0, 1, 8]), buf("|u1", TEXT)],
                                                null_count=0)), "FormatError", "holds 3 items, 5 expected"),
        ("arrow_null_count_lies", archive(ints(null_count=0)), "FormatError", "marks 1 values missing"),
        ("arrow_bitmap_short", archive(ints(buffers=[buf("|u1", []), buf("<i8", [1, 0, 3])])), "FormatError",
         "holds 0 items, 1 expected"),
        ("arrow_validity_missing", archive(ints(buffers=[None, buf("<i8", [1, 0, 3])])), "FormatError",
         "is missing"),
        ("arrow_buffer_dtype", archive(ints(buffers=[buf("|u1", [0b101]), buf("<f8", [1, 0, 3])])),
         "FormatError", "dtype <i8"),
        ("arrow_buffer_count", archive(ints(buffers=[buf("|u1", [0b101])])), "FormatError", "needs 2 buffers"),
        ("arrow_values_short", archive(ints(buffers=[buf("|u1", [0b101]), buf("<i8", [1, 0])])), "FormatError",
         "holds 2 items, 3 expected"),
        ("arrow_struct_child_length", archive(struct(2)), "FormatError", "must hold 3 values"),
        ("arrow_dictionary_index_out", archive(dictionary([0, 9, 1])), "FormatError", "outside the dictionary"),
        ("arrow_dictionary_index_negative", archive(dictionary([0, -1, 1])), "FormatError",
         "outside the dictionary"),
        ("arrow_not_utf8", archive(strings(buffers=[buf("|u1", [0b1011]), buf("<i4", [0, 1, 4, 4, 8]),
                                                    buf("|u1", [0x61, 0xFF, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67])])),
         "FormatError", "UTF-8|utf8|Invalid"),
        ("arrow_type_unknown", archive(ints({"id": "pickle"})), "FormatError", "unknown Arrow type"),
        ("arrow_tz_path", archive(ints({"id": "timestamp", "unit": "us", "tz": "../../etc/passwd"})),
         "FormatError", "tz"),
        ("arrow_tz_unknown", archive(ints({"id": "timestamp", "unit": "us", "tz": "Mars/Olympus"})),
         "FormatError", "unknown time zone"),
        ("arrow_type_deep", archive(ints(deep_type(210)), compact=True), "FormatError|UnsafeArchiveError", "nested|deep"),
        ("arrow_unexpected_field", archive(ints(extra=buf("|u1", [1]))), "FormatError", "unexpected field"),
    ]  # fmt: skip
