"""Hostile-corpus cases about work bounds: inputs that cost far more to read than their size says
unless each parser refuses them early (many dimensions, deep nesting of every node type, long ints,
overlapping checksum entries). tests/test_bounded.py checks the work they cost at two sizes.

Kept in a module of their own (registered in make_corpus.py after the other cases).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from hostile.craft import Parts, pack
from hostile.formats import npy_bytes, safetensors_bytes, zstd_frame

CaseTuple = tuple[str, Callable[[], bytes], str | None, str, str]  # (name, build, error, match, when)


# one level of each node type that nests, as JSON text before and after the level below (built as
# text: the json encoders recurse, and cannot write what they are meant to refuse)
NESTING: dict[str, tuple[str, str]] = {
    "tuple": ('{"$type":"tuple","items":[', "]}"),
    "list": ("[", "]"),
    "dict": ('{"a":', "}"),
    "dict_items_value": ('{"$type":"dict","items":[[1,', "]]}"),
    "dict_items_key": ('{"$type":"dict","items":[[{"$type":"tuple","items":[', "]},1]]}"),
    "set": ('{"$type":"set","frozen":true,"items":[{"$type":"tuple","items":[', "]}]}"),
}


def nested_text(kind: str, levels: int, leaf: str = "1") -> str:
    before, after = NESTING[kind]
    return before * levels + leaf + after * levels


def manifest_around(root_text: str) -> bytes:
    return ('{"format":"zarchive","format_version":"1.0","root":' + root_text + "}").encode()


def jsonl_of_nodes(line_text: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A list node whose one item, in a .jsonl member, is the JSON `line_text`."""
    body = (line_text + "\n").encode()
    root = {"$type": "list", "$ref": "l.jsonl", "length": 1, "nbytes": len(body), "items": "nodes"}
    return root, {"l.jsonl": body}


def many_dims_header(dims: int) -> bytes:
    """A safetensors header whose tensor has `dims` dimensions of size 1 (offsets true for that)."""
    return json.dumps({"t": {"dtype": "F32", "shape": [1] * dims, "data_offsets": [0, 4]}}).encode()


def bounded_cases(base: Callable[[], Parts], with_root: Callable[..., bytes]) -> list[CaseTuple]:
    cases: list[CaseTuple] = []

    def case(name: str, error: str | None, match: str, build: Callable[[], bytes], when: str = "read") -> None:
        cases.append((name, build, error, match, when))

    def st_many_dims() -> bytes:
        p = base()
        st, entries = safetensors_bytes([("t", "F32", [1], bytes(4))], header=many_dims_header(20_000))
        p.members["tensors.safetensors"], p.entries["tensors.safetensors"] = st, entries
        return pack(p)

    case("bounded_st_header_20k_dims", "FormatError", "20000 dimensions", st_many_dims)

    def npy_many_dims() -> bytes:
        p = base()
        p.members["arr.npy"] = npy_bytes("<f8", (1,) * 3000, np.arange(1, dtype="<f8").tobytes())
        return pack(p)

    case("bounded_npy_header_3000_dims", "FormatError", "at most 64", npy_many_dims)
    case(
        "bounded_manifest_shape_3000_dims",
        "FormatError",
        "at most 64",
        lambda: with_root({"$type": "numpy.ndarray", "dtype": "<f8", "shape": [1] * 3000, "data": "AAAAAAAAAAA="}),
    )
    # 300 levels: JSON the parser takes, refused by the planner's depth count; 600 tuples: the issue's
    for kind, levels in [*((k, 300) for k in NESTING), ("tuple", 600)]:
        case(
            f"bounded_nested_{kind}_{levels}",
            "FormatError",
            "nested",
            lambda k=kind, n=levels: with_root(None, manifest_bytes=manifest_around(nested_text(k, n))),
        )
    case(
        "bounded_jsonl_nested_tuples",
        "FormatError",
        "nested more than",
        lambda: with_root(*jsonl_of_nodes(nested_text("tuple", 300))),
    )
    case(
        "bounded_jsonl_int_over_digit_limit",
        "FormatError",
        "limit",
        lambda: with_root(*jsonl_of_nodes("7" * 5000)),
    )

    def overlapping_entries() -> bytes:
        # 2,000 checksum entries each covering the whole member: verify() would check 2,000 x its size
        p = base()
        size = len(p.members["tensors.safetensors"])
        p.entries["tensors.safetensors"].update({f"o{i}": (0, size) for i in range(2000)})
        return pack(p)

    # a full read checks whole members (and finds tensors by the header); a fetch of one tensor finds
    # it by its entry and refuses a member whose entries overlap, as verify() does
    case("bounded_entries_overlap", "FormatError", "checksum entries overlap", overlapping_entries, when="partial")

    def jsonl_of_brackets(n: int) -> Callable[[], bytes]:
        # n bytes of `[` in a .jsonl member: a 1 KB zstd frame of RLE blocks that decodes to JSON
        # whose parse would build ~84 bytes of list objects per byte; charged (and refused) before
        # any parsing, which would also refuse it, but only after work and memory
        def build() -> bytes:
            body = b"[" * n
            root = {"$type": "list", "$ref": "l.jsonl.zst", "length": 1, "nbytes": n, "items": "plain"}
            frame = zstd_frame(rle=(ord("["), n))
            return with_root(root, {"l.jsonl.zst": body}, stored={"l.jsonl.zst": frame})

        return build

    case("bounded_jsonl_objects_past_budget", "UnsafeArchiveError", "parsing this JSON", jsonl_of_brackets(14_000_000))

    def twenty_nodes_one_member() -> bytes:
        # twenty nodes naming one 16 MiB compressed member: decoded once and shared (twenty copies
        # would not fit the corpus test's address-space limit)
        n = 16 << 20
        node = {"$type": "bytes", "$ref": "z.bin.zst", "nbytes": n}
        return with_root(
            {f"b{i}": dict(node) for i in range(20)},
            {"z.bin.zst": bytes(n)},
            stored={"z.bin.zst": zstd_frame(rle=(0, n))},
        )

    case("bounded_twenty_nodes_one_member", None, "", twenty_nodes_one_member)
    return cases
