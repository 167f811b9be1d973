"""Hypothesis strategies and JSON-tree helpers for tests/test_fuzz.py.

The values lean towards what zarchive's handlers read: manifest keys they look up, member names that
exist, handler names, dtype and class strings, shapes, and numbers at the edges of int64 and beyond.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from hypothesis import strategies as st

from hostile.craft import Parts

KEYS = [
    "$type",
    "$ref",
    "dtype",
    "shape",
    "key",
    "length",
    "nbytes",
    "items",
    "data",
    "base64",
    "view",
    "class",
    "name",
    "value",
    "hex",
    "kind",
    "iso",
    "tz",
    "tz_offset_seconds",
    "bits",
    "real",
    "imag",
    "frozen",
    "default_factory",
    "order",
    "device",
    "parameter",
    "requires_grad",
    "storage_offset",
    "stride",
    "attrs",
    "fields",
    "config",
    "state_dict",
    "columns",
    "index",
    "bytearray",
    "fold",
    "module",
]
WORDS = [
    "manifest.json",
    "metadata.json",
    "../x",
    "/etc/passwd",
    "<f8",
    "|O",
    "float32",
    "object",
    "cpu",
    "meta",
    "nan",
    "inf",
    "plain",
    "nodes",
    "OrderedDict",
    "defaultdict",
    "os:system",
    "builtins:eval",
]
FIELD_WORDS = [
    "<f8",
    "<i4",
    "|b1",
    "<M8[s]",
    "|S0",
    "float32",
    "bfloat16",
    "int8",
    "object",
    "Decimal",
    "UUID",
    "timedelta",
    "date",
    "time",
    "datetime",
    "F",
    "C",
    "America",
    "UTC",
    "Etc/GMT+5",
    "zarchive.options:Settings",
    "zarchive.options:ErrorMode",
    "collections:OrderedDict",
]
NPY_DESCRS = [
    "<f8",
    "<f4",
    "|u1",
    "<i8",
    "|b1",
    "<c16",
    "|O",
    "|V8",
    "<U3",
    "|S0",
    "<M8[s]",
    "(2,)<f4",
    ">f8",
    "<f2",
    "<m8[ns]",
    "|S5",
]

byte_ops = st.lists(
    st.one_of(
        st.tuples(st.just("flip"), st.floats(0, 1), st.integers(1, 255)),
        st.tuples(st.just("truncate"), st.floats(0, 1), st.just(0)),
        st.tuples(st.just("insert"), st.floats(0, 1), st.binary(min_size=1, max_size=64)),
        st.tuples(st.just("delete"), st.floats(0, 1), st.integers(1, 64)),
        st.tuples(st.just("tail"), st.integers(1, 400), st.integers(1, 255)),  # the zip directory end
    ),
    min_size=1,
    max_size=4,
)


def json_values(members: list[str], handlers: list[str]) -> st.SearchStrategy[Any]:
    """JSON values, including nodes with a registered "$type" and fields handlers read."""
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.sampled_from([0, 1, -1, 2**31, 2**62, 2**64]),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=12),
        st.sampled_from(members + handlers + WORDS),
    )
    return st.recursive(
        leaves,
        lambda kids: st.one_of(
            st.lists(kids, max_size=4),
            st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6)), kids, max_size=5),
            st.fixed_dictionaries({"$type": st.sampled_from(handlers)}, optional={k: kids for k in KEYS[1:20]}),
        ),
        max_leaves=12,
    )


def field_values(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """What a handler node's field may hold: any JSON, small shapes and strides, or a telling word."""
    return st.one_of(values, st.lists(st.integers(-1, 40), max_size=4), st.sampled_from(FIELD_WORDS))


def npy_descrs() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(NPY_DESCRS),
        st.text(max_size=8),
        st.lists(st.tuples(st.text(max_size=3), st.sampled_from(["<f8", "|O"])), max_size=2),
    )


def slots(tree: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) in a JSON tree, iteratively (the tree's depth is the fuzzer's choice)."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        keys = list(node) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else []
        for k in keys:
            out.append((node, k))
            todo.append(node[k])
    return out


def fit_sizes(parts: Parts, name: str) -> None:
    """Make the manifest's sizes and the per-entry checksum ranges follow a member that changed (so the
    damage reaches the format parsers instead of stopping at the metadata checks)."""
    content = parts.members[name]
    for container, key in slots(parts.manifest):
        node = container[key]
        if isinstance(node, dict) and node.get("$ref") == name and "nbytes" in node:
            node["nbytes"] = len(content)
    if name not in parts.entries:
        return
    entries = {}
    try:
        n = struct.unpack_from("<Q", content, 0)[0]
        entries["$header"] = (0, min(8 + n, len(content)))
        header = json.loads(content[8 : 8 + n])
        for k, info in header.items():
            if k != "__metadata__":
                begin, end = info["data_offsets"]
                if type(begin) is int and type(end) is int and 0 <= begin <= end and 8 + n + end <= len(content):
                    entries[k] = (8 + n + begin, end - begin)
    except (struct.error, ValueError, TypeError, KeyError, AttributeError):
        pass
    parts.entries[name] = entries
