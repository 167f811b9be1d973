"""Hostile-corpus cases about member contents: .npy, .safetensors, .jsonl, shapes and zip bombs.

Each case is packed with true sizes and checksums, so the reader gets past the integrity layer and has
to catch the lie in the member format itself (or in what the manifest declares about it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hostile.craft import Parts, pack
from hostile.formats import npy_bytes, safetensors_bytes, zstd_frame

CaseTuple = tuple[str, Callable[[], bytes], str | None, str]

GiB = 1 << 30
# a pickle that would set an environment variable if anything ever unpickled it
PICKLE_PAYLOAD = b"cbuiltins\nexec\n(Vimport os; os.environ['ZARCHIVE_HOSTILE_PWNED'] = '1'\ntR."


def member_cases(base: Callable[[], Parts], with_root: Callable[..., bytes]) -> list[CaseTuple]:
    cases: list[CaseTuple] = []

    def case(name: str, error: str | None, match: str, build: Callable[[], bytes]) -> None:
        cases.append((name, build, error, match))

    def arr_member(member: bytes, dtype: str = "<f8", shape: list[int] | None = None) -> Callable[[], bytes]:
        def build() -> bytes:
            p = base()
            p.members["arr.npy"] = member
            node = p.manifest["root"]["arr"]
            node["dtype"] = dtype
            node["shape"] = shape if shape is not None else [40]
            return pack(p)

        return build

    data = np.arange(40, dtype="<f8").tobytes()
    # --- .npy -----------------------------------------------------------------------------------------
    case(
        "npy_pickled_object",
        "UnsafeArchiveError",
        "not allowed",
        arr_member(npy_bytes("|O", (len(PICKLE_PAYLOAD),), PICKLE_PAYLOAD), "|u1", [len(PICKLE_PAYLOAD)]),
    )
    case("npy_structured", "UnsafeArchiveError", "structured", arr_member(npy_bytes([("a", "<f8")], (40,), data)))
    case("npy_void", "UnsafeArchiveError", "not allowed", arr_member(npy_bytes("|V8", (40,), data)))
    case("npy_subarray", "UnsafeArchiveError", "not allowed", arr_member(npy_bytes("(2,)<f4", (40,), data)))
    big_text = "{'descr': '<f8', 'fortran_order': False, 'shape': (40,), }".ljust(10_241)  # + newline: 10,242
    case(
        "npy_header_over_10k",
        "UnsafeArchiveError",
        "header of 10242 bytes",
        arr_member(npy_bytes(None, (), data, header_text=big_text, pad_to=1)),
    )
    case(
        "npy_header_100k",
        "FormatError",
        "plus a header",
        arr_member(npy_bytes(None, (), data, header_text=big_text + " " * 20_000)),
    )
    case(
        "npy_shape_disagrees",
        "FormatError",
        r"header says <f8\[4, 10\], the manifest <f8\[40\]",
        arr_member(npy_bytes("<f8", (4, 10), data)),
    )
    case("npy_dtype_disagrees", "FormatError", "header says <i8", arr_member(npy_bytes("<i8", (40,), data)))
    case(
        "npy_data_short",
        "FormatError",
        "declares 320 data bytes",
        arr_member(npy_bytes("<f8", (40,), data[:240]), "<f8", [30]),
    )
    case(
        "npy_header_nesting",
        "FormatError",
        "unreadable .npy header",
        arr_member(
            npy_bytes(
                None,
                (),
                data,
                header_text="{'descr': '<f8', 'fortran_order': False, 'shape': " + "(" * 3000 + ")" * 3000 + "}",
            )
        ),
    )
    case(
        "npy_header_code",
        "FormatError",
        "unreadable .npy header",
        arr_member(
            npy_bytes(
                None,
                (),
                data,
                header_text="{'descr': __import__('os').system('true'), 'fortran_order': False, 'shape': (40,)}",
            )
        ),
    )
    case(
        "npy_fortran_not_bool",
        "FormatError",
        "fortran_order must be a bool",
        arr_member(npy_bytes(None, (), data, header_text="{'descr': '<f8', 'fortran_order': 'yes', 'shape': (40,), }")),
    )
    case("npy_bad_magic", "FormatError", "bad magic", arr_member(b"\x93NUMPZ" + npy_bytes("<f8", (40,), data)[6:]))
    case("npy_zero_itemsize", "FormatError", "", arr_member(npy_bytes("|S0", (40,), b""), "|S0", [40]))

    # --- shapes -----------------------------------------------------------------------------------------
    case(
        "shape_product_overflows",
        "UnsafeArchiveError",
        "more elements",
        arr_member(npy_bytes("<f8", (40,), data), "<f8", [2**40, 2**40, 2**40]),
    )
    case(
        "shape_terabytes",
        "FormatError",
        "needs 8796093022208",
        arr_member(npy_bytes("<f8", (40,), data), "<f8", [2**40]),
    )
    case("shape_negative", "FormatError", "bad dimension -1", arr_member(npy_bytes("<f8", (40,), data), "<f8", [-1]))
    case("shape_float", "FormatError", "bad dimension 40.0", arr_member(npy_bytes("<f8", (40,), data), "<f8", [40.0]))
    case(
        "inline_base64_terabytes",
        "UnsafeArchiveError",
        "over max_read_bytes",
        lambda: with_root({"$type": "numpy.ndarray", "dtype": "<f8", "shape": [2**40], "base64": ""}),
    )
    case(
        "inline_data_terabytes",
        "UnsafeArchiveError",
        "over max_read_bytes",
        lambda: with_root({"$type": "numpy.ndarray", "dtype": "<f8", "shape": [2**40], "data": []}),
    )

    def tensor(edit: Callable[[dict[str, Any]], None]) -> Callable[[], bytes]:
        def build() -> bytes:
            p = base()
            edit(p.manifest["root"]["t"])
            return pack(p)

        return build

    case(
        "tensor_shape_terabytes",
        "FormatError",
        "the member stores 't' as F32",
        tensor(lambda n: n.update(shape=[2**40])),
    )
    case(
        "tensor_dtype_disagrees",
        "FormatError",
        "the member stores 't' as F32",
        tensor(lambda n: n.update(dtype="int32")),
    )
    case("tensor_key_missing", "FormatError", "tensor 'u' is not in the member", tensor(lambda n: n.update(key="u")))
    case("tensor_unknown_dtype", "FormatError", "unknown torch dtype", tensor(lambda n: n.update(dtype="pickle")))
    case(
        "tensor_view_outside_storage",
        "FormatError",
        "bad tensor view|outside",
        tensor(lambda n: n.update(view={"storage_offset": 10**6, "stride": [1, 1]})),
    )

    # --- .safetensors -----------------------------------------------------------------------------------
    values = np.arange(16, dtype="<f4").tobytes()

    def st_member(member_and_entries: tuple[bytes, dict[str, tuple[int, int]]]) -> Callable[[], bytes]:
        def build() -> bytes:
            p = base()
            p.members["tensors.safetensors"], p.entries["tensors.safetensors"] = member_and_entries
            return pack(p)

        return build

    def header(**fields: Any) -> dict[str, Any]:
        h = {"t": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}
        h["t"].update(fields)
        return h

    case(
        "st_header_shape_disagrees",
        "FormatError",
        r"stores 't' as F32\[2, 8\]",
        st_member(safetensors_bytes([("t", "F32", [2, 8], values)])),
    )
    case(
        "st_header_dtype_disagrees",
        "FormatError",
        r"stores 't' as I32",
        st_member(safetensors_bytes([("t", "I32", [4, 4], values)])),
    )
    case(
        "st_offsets_disagree_shape",
        "FormatError",
        "offsets of 't' disagree",
        st_member(safetensors_bytes([("t", "F32", [4, 4], values)], header=header(shape=[4, 5]))),
    )
    case(
        "st_gap",
        "FormatError",
        "gaps or overlaps",
        st_member(safetensors_bytes([("t", "F32", [4, 4], values + bytes(8))], header=header(data_offsets=[8, 72]))),
    )
    case(
        "st_overlap",
        "FormatError",
        "gaps or overlaps",
        st_member(
            safetensors_bytes(
                [("t", "F32", [4, 4], values)],
                header={**header(), "u": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}},
            )
        ),
    )
    case(
        "st_short",
        "FormatError",
        "does not fill the member",
        st_member(safetensors_bytes([("t", "F32", [4, 4], values + bytes(64))], header=header())),
    )
    case(
        "st_header_length_huge",
        "UnsafeArchiveError",
        "header length",
        st_member(safetensors_bytes([("t", "F32", [4, 4], values)], length=2**63)),
    )
    case(
        "st_header_not_json",
        "FormatError",
        "invalid JSON",
        st_member(safetensors_bytes([("t", "F32", [4, 4], values)], header=b"{not json")),
    )
    case(
        "st_header_duplicate_key",
        "FormatError",
        "duplicate key 't'",
        st_member(
            safetensors_bytes(
                [("t", "F32", [4, 4], values)],
                header=b'{"t":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]},'
                b'"t":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]}}',
            )
        ),
    )
    case(
        "st_unknown_dtype",
        "FormatError",
        "unknown safetensors dtype",
        st_member(safetensors_bytes([("t", "F32", [4, 4], values)], header=header(dtype="PICKLE"))),
    )

    # --- .jsonl lists -----------------------------------------------------------------------------------
    def lst(member: bytes, **node: Any) -> Callable[[], bytes]:
        def build() -> bytes:
            p = base()
            p.members["lst.jsonl.zst"] = member
            p.manifest["root"]["lst"].update(nbytes=len(member), **node)
            return pack(p)

        return build

    jsonl = "".join(f"{i}\n" for i in range(40)).encode()
    case("jsonl_fewer_lines", "FormatError", "the manifest declares 40", lst(jsonl[: jsonl.rindex(b"39")]))
    case("jsonl_no_final_newline", "FormatError", "must end with a newline", lst(jsonl[:-1]))
    case("jsonl_plain_holds_nodes", "FormatError", "'plain' list holds nodes", lst(b'{"$type": "evil"}\n', length=1))
    case("jsonl_nan", "FormatError", "NaN", lst(b"NaN\n", length=1))
    case("jsonl_nbytes_lies", "UnsafeArchiveError", "the manifest needs 5", lambda: _lst_nbytes(base, 5))

    # --- zip bombs (stored as hand-made RLE zstd frames) ------------------------------------------------
    def bomb_list(frame: bytes, declared: int) -> Callable[[], bytes]:
        def build() -> bytes:
            p = base()
            p.members["lst.jsonl.zst"] = b"\n" * declared  # the metadata's story
            p.manifest["root"]["lst"].update(nbytes=declared, length=declared)
            return pack(p, stored={"lst.jsonl.zst": frame})

        return build

    case(
        "bomb_frame_says_small",
        "UnsafeArchiveError|IntegrityError",
        "more than the 2000 bytes|damaged",
        bomb_list(zstd_frame(rle=(10, GiB), content_size=2000), 2000),
    )
    case(
        "bomb_frame_size_absent",
        "UnsafeArchiveError",
        "more than the 2000 bytes",
        bomb_list(zstd_frame(rle=(10, GiB), content_size=None), 2000),
    )
    case(
        "bomb_frame_says_huge",
        "UnsafeArchiveError",
        "more than the 2000 bytes",
        bomb_list(zstd_frame(rle=(10, GiB), content_size=2**62), 2000),
    )
    case(
        "bomb_window_too_large",
        "IntegrityError",
        "too much memory",
        bomb_list(zstd_frame(b"\n" * 2000, content_size=None, window_log=31), 2000),
    )

    def declared_huge(member: str, size: int, frame: bytes) -> Callable[[], bytes]:
        def build() -> bytes:
            p = base()

            def meta(m: dict[str, Any]) -> None:
                m["members"][member]["size"] = size

            return pack(p, stored={member: frame}, meta_edit=meta)

        return build

    def npy_zst_parts(p: Parts) -> Parts:
        p.members["arr.npy.zst"] = p.members.pop("arr.npy")
        p.manifest["root"]["arr"]["$ref"] = "arr.npy.zst"
        return p

    def npy_bomb() -> bytes:
        p = npy_zst_parts(base())
        head = npy_bytes("<f8", (2 * GiB // 8,), b"")

        def meta(m: dict[str, Any]) -> None:
            m["members"]["arr.npy.zst"]["size"] = len(head) + 2 * GiB

        return pack(p, stored={"arr.npy.zst": zstd_frame(head, rle=(0, 2 * GiB))}, meta_edit=meta)

    # 2 GiB declared by a tiny file: refused by the read's byte budget before anything is decompressed
    case("bomb_npy_declared_huge", "UnsafeArchiveError", "allocates 2,147,48.* over max_read_bytes", npy_bomb)

    def st_bomb() -> bytes:
        p = base()
        st = p.members.pop("tensors.safetensors")
        p.entries.pop("tensors.safetensors")  # a compressed member has no per-entry checksums
        p.members["tensors.safetensors.zst"] = st
        p.manifest["root"]["t"]["$ref"] = "tensors.safetensors.zst"

        def meta(m: dict[str, Any]) -> None:
            m["members"]["tensors.safetensors.zst"]["size"] = len(st) + GiB

        return pack(p, stored={"tensors.safetensors.zst": zstd_frame(st, rle=(0, GiB))}, meta_edit=meta)

    case("bomb_safetensors_declared_huge", "FormatError", "does not fill the member", st_bomb)
    case("bomb_declared_over_limit", "UnsafeArchiveError", "over max_read_bytes|over the limit", _over_limit(base))
    case(
        "bomb_declared_large_frame_small",
        "IntegrityError|UnsafeArchiveError",
        "decompressed to 1024 bytes, the metadata declares|more than this process can allocate|over max_read_bytes",
        _declared_large(base),
    )
    return cases


def _lst_nbytes(base: Callable[[], Parts], nbytes: int) -> bytes:
    p = base()
    p.manifest["root"]["lst"]["nbytes"] = nbytes
    return pack(p)


def _declared_large(base: Callable[[], Parts]) -> Callable[[], bytes]:
    """A bytes node and its metadata agree on 3 GiB (under the 4 GiB default limit); the frame holds 1 KiB."""

    def build() -> bytes:
        p = base()
        p.members["blob.bin.zst"] = p.members.pop("blob.bin")
        p.manifest["root"]["blob"].update({"$ref": "blob.bin.zst", "nbytes": 3 * GiB})

        def meta(m: dict[str, Any]) -> None:
            m["members"]["blob.bin.zst"]["size"] = 3 * GiB

        return pack(p, stored={"blob.bin.zst": zstd_frame(rle=(0, 1024), content_size=None)}, meta_edit=meta)

    return build


def _over_limit(base: Callable[[], Parts]) -> Callable[[], bytes]:
    def build() -> bytes:
        p = base()
        p.members["blob.bin.zst"] = p.members.pop("blob.bin")
        node = p.manifest["root"]["blob"]
        node.update({"$ref": "blob.bin.zst", "nbytes": 8 * GiB})

        def meta(m: dict[str, Any]) -> None:
            m["members"]["blob.bin.zst"]["size"] = 8 * GiB

        return pack(p, stored={"blob.bin.zst": zstd_frame(rle=(0, 1024), content_size=8 * GiB)}, meta_edit=meta)

    return build
