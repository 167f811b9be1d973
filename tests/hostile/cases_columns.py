"""Hostile-corpus cases about text columns in Arrow's string layout (format 1.3, the "utf8" layout of a
`pandas.array`): offsets out of order or out of range, lying lengths, bytes that are not UTF-8; and
about text columns with a dictionary (format 1.4, the "dict" layout): codes out of range, of a float
dtype, more codes than rows, a dictionary with duplicates (allowed: it reads).

Packed with true sizes and checksums, so the reader gets past the integrity layer and has to catch the
lie in the column itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hostile.craft import Parts, pack

CaseTuple = tuple[str, Callable[[], bytes], str | None, str]

DATA = "aéb日x".encode()  # "a", "éb", missing, "日x": offsets 0 1 4 4 8
OFFSETS = [0, 1, 4, 4, 8]
VALID = [True, True, False, True]


def column(**edit: Any) -> dict[str, Any]:
    node: dict[str, Any] = {
        "$type": "pandas.array",
        "$ref": "col.utf8",
        "dtype": "string",
        "length": 4,
        "storage": "python",
        "na_value": "NA",
        "layout": "utf8",
        "valid": {"$type": "numpy.ndarray", "dtype": "|b1", "shape": [4], "data": VALID},
        "offsets": {"$type": "numpy.ndarray", "dtype": "<i8", "shape": [5], "data": OFFSETS},
        "nbytes": len(DATA),
    }
    node.update(edit)
    return node


def offsets(values: list[int], dtype: str = "<i8") -> dict[str, Any]:
    return {"$type": "numpy.ndarray", "dtype": dtype, "shape": [len(values)], "data": values}


def archive(node: dict[str, Any], data: bytes = DATA) -> Callable[[], bytes]:
    return lambda: pack(Parts({"format": "zarchive", "format_version": "1.3", "root": node}, {"col.utf8": data}))


def column_cases() -> list[CaseTuple]:
    return [
        ("utf8_column_valid", archive(column()), None, ""),
        ("utf8_offsets_decrease", archive(column(offsets=offsets([0, 4, 1, 4, 8]))), "FormatError", "decrease"),
        ("utf8_offsets_past_end", archive(column(offsets=offsets([0, 1, 4, 4, 9]))), "FormatError", "run from"),
        ("utf8_offsets_negative", archive(column(offsets=offsets([-1, 1, 4, 4, 8]))), "FormatError", "run from"),
        ("utf8_offsets_short_of_end", archive(column(offsets=offsets([0, 1, 4, 4, 7]))), "FormatError", "run from"),
        ("utf8_offsets_count", archive(column(offsets=offsets([0, 1, 4, 8]))), "FormatError", "offsets for 4"),
        ("utf8_offsets_float", archive(column(offsets=offsets([0, 1, 4, 4, 8], "<f8"))), "FormatError", "int64"),
        ("utf8_length_lies", archive(column(length=5)), "FormatError", "offsets for 5|5 values"),
        ("utf8_nbytes_lies", archive(column(nbytes=7)), "UnsafeArchiveError|FormatError", "7"),
        ("utf8_bad_bytes", archive(column(), b"a\xffb\xe6\x97\xa5x" + b"!"), "FormatError", "UTF-8"),
        ("utf8_offset_inside_character", archive(column(offsets=offsets([0, 2, 4, 4, 8]))), "FormatError", "UTF-8"),
        (
            "utf8_missing_value_with_bytes",
            archive(column(offsets=offsets([0, 1, 3, 4, 8]))),
            "FormatError",
            "missing value holds bytes|UTF-8",
        ),
        (
            "utf8_valid_wrong_length",
            archive(column(valid={"$type": "numpy.ndarray", "dtype": "|b1", "shape": [3], "data": VALID[:3]})),
            "FormatError",
            "'valid'",
        ),
        ("utf8_no_offsets", archive({k: v for k, v in column().items() if k != "offsets"}), "FormatError", "offsets"),
    ]


DICT_DATA = "aéb".encode()  # the dictionary "a", "éb": offsets 0 1 4


def dict_column(**edit: Any) -> dict[str, Any]:
    node: dict[str, Any] = {
        "$type": "pandas.array",
        "$ref": "col.utf8",
        "dtype": "string",
        "length": 5,
        "storage": "python",
        "na_value": "NA",
        "layout": "dict",
        "count": 2,
        "codes": offsets([0, 1, -1, 0, 1], "|i1"),
        "offsets": offsets([0, 1, 4]),
        "nbytes": len(DICT_DATA),
    }
    node.update(edit)
    return node


def dict_archive(node: dict[str, Any], data: bytes = DICT_DATA) -> Callable[[], bytes]:
    return lambda: pack(Parts({"format": "zarchive", "format_version": "1.4", "root": node}, {"col.utf8": data}))


def dict_cases() -> list[CaseTuple]:
    lie = "codes must lie"
    return [
        ("dict_column_valid", dict_archive(dict_column()), None, ""),
        ("dict_duplicate_values", dict_archive(dict_column(offsets=offsets([0, 1, 2]), nbytes=2), b"aa"), None, ""),
        ("dict_codes_out_of_range", dict_archive(dict_column(codes=offsets([0, 2, -1, 0, 1], "|i1"))), "FormatError", lie),
        ("dict_codes_below_minus_one", dict_archive(dict_column(codes=offsets([0, -2, 0, 0, 1], "|i1"))), "FormatError", lie),
        ("dict_codes_huge", dict_archive(dict_column(codes=offsets([0, 2**62, 0, 0, 1], "<i8"))), "FormatError", lie),
        ("dict_codes_float", dict_archive(dict_column(codes=offsets([0.0, 1.0, 0.0, 0.0, 1.0], "<f8"))), "FormatError", "signed integer"),
        ("dict_codes_unsigned", dict_archive(dict_column(codes=offsets([0, 1, 0, 0, 1], "|u1"))), "FormatError", "signed integer"),
        ("dict_more_codes_than_rows", dict_archive(dict_column(codes=offsets([0, 1, -1, 0, 1, 0], "|i1"))), "FormatError", "5 values"),
        ("dict_count_lies", dict_archive(dict_column(count=3)), "FormatError", "offsets for 3"),
        ("dict_count_negative", dict_archive(dict_column(count=-1)), "FormatError", "count"),
        ("dict_no_codes", dict_archive({k: v for k, v in dict_column().items() if k != "codes"}), "FormatError", "codes"),
        ("dict_bad_bytes", dict_archive(dict_column(), b"a\xff\xffb"), "FormatError", "UTF-8"),
    ]  # fmt: skip
