"""Hostile-corpus cases for foreign files (torch.save zips, .safetensors, .npy, .npz), which
`zarchive.read` recognises by their bytes whatever their name (the corpus names them `.zarc`).

torch.save files are crafted here opcode by opcode (never by pickle or torch), so the corpus stays
byte-identical everywhere: pickles that call `posix.system`, build whole modules, use INST, nest 100,000
levels, multiply shared references into 2**60 values, declare strings of exabytes, point tensors
outside their storage. Names starting with `bomb_` also run under the time and memory limits of
tests/test_hostile.py.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable

from hostile.craft import ZEntry, build_zip
from hostile.formats import npy_bytes

CaseTuple = tuple[str, Callable[[], bytes], str | None, str]
ARCHIVE = "archive"


# --- pickle opcodes, by hand ---
def uni(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def glob(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def small(n: int) -> bytes:
    return b"K" + bytes([n]) if n < 256 else b"J" + struct.pack("<i", n)


def ints(values: tuple[int, ...]) -> bytes:
    return b"(" + b"".join(small(v) for v in values) + b"t"


def tensor(key: str, numel: int, size: tuple[int, ...], stride: tuple[int, ...], *, hooks: bytes = b"") -> bytes:
    """A _rebuild_tensor_v2 call over FloatStorage `key` of `numel` elements."""
    storage = b"(" + uni("storage") + glob("torch", "FloatStorage") + uni(key) + uni("cpu") + small(numel) + b"t"
    hooks = hooks or glob("collections", "OrderedDict") + b")R"
    args = b"(" + storage + b"Q" + small(0) + ints(size) + ints(stride) + b"\x89" + hooks + b"t"
    return glob("torch._utils", "_rebuild_tensor_v2") + args + b"R"


def state_dict(*items: tuple[str, bytes]) -> bytes:
    return b"\x80\x02}(" + b"".join(uni(k) + v for k, v in items) + b"u."


def torch_zip(pkl: bytes, storages: dict[str, bytes], *, byteorder: bytes = b"little") -> bytes:
    entries = [ZEntry(f"{ARCHIVE}/data.pkl", pkl), ZEntry(f"{ARCHIVE}/byteorder", byteorder)]
    entries += [ZEntry(f"{ARCHIVE}/data/{k}", v) for k, v in storages.items()]
    entries.append(ZEntry(f"{ARCHIVE}/version", b"3\n"))
    return build_zip(entries)


FOUR_FLOATS = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)


def _pt(pkl: bytes) -> Callable[[], bytes]:
    return lambda: torch_zip(pkl, {"0": FOUR_FLOATS})


def _nested_lists(levels: int) -> bytes:
    return b"\x80\x02" + b"]" * levels + b"a" * (levels - 1) + b"."


def _laughs(levels: int) -> bytes:
    out = bytearray(b"\x80\x02]r" + struct.pack("<I", 0))
    for i in range(1, levels):  # level i: a list of two references to level i - 1 (popped off the stack)
        get = b"j" + struct.pack("<I", i - 1)
        out += b"0](" + get + get + b"er" + struct.pack("<I", i)
    return bytes(out) + b"."


def _safetensors(header: dict[str, object], data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def foreign_cases() -> list[CaseTuple]:
    cases: list[CaseTuple] = []

    def case(name: str, error: str, match: str, build: Callable[[], bytes]) -> None:
        cases.append((name, build, error, match))

    # code the pickle asks to run: refused by name, never looked up
    case("foreign_pt_reduce_os_system", "RefusedPickleError", "posix.system",
         _pt(b"\x80\x02" + glob("posix", "system") + uni("touch /tmp/zarchive-pwned") + b"\x85R."))  # fmt: skip
    case("foreign_pt_builtins_eval", "RefusedPickleError", "__builtin__.eval",
         _pt(b"\x80\x02" + glob("__builtin__", "eval") + uni("1+1") + b"\x85R."))  # fmt: skip
    case("foreign_pt_whole_module", "RefusedPickleError", "torch.nn.modules.linear.Linear",
         _pt(b"\x80\x02" + glob("torch.nn.modules.linear", "Linear") + b")\x81."))  # fmt: skip
    case("foreign_pt_inst_opcode", "RefusedPickleError", "INST",
         _pt(b"\x80\x02(" + b"iposix\nsystem\n."))  # fmt: skip
    case("foreign_pt_backward_hooks", "RefusedPickleError", "backward hooks",
         _pt(state_dict(("w", tensor("0", 4, (4,), (1,), hooks=b"}" + small(1) + small(2) + b"s")))))  # fmt: skip
    case("foreign_pt_build_on_list", "RefusedPickleError", "BUILD", _pt(b"\x80\x02]}b."))
    case("foreign_raw_pickle", "RefusedPickleError", "never unpickles",
         lambda: b"\x80\x04" + glob("posix", "system") + uni("true") + b"\x85R.")  # fmt: skip
    case("foreign_legacy_torch", "RefusedPickleError", "legacy format",
         lambda: b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.\x80\x02M\xe9\x03.")  # fmt: skip

    # tensors that do not fit their storage
    case("foreign_pt_storage_missing", "FormatError", "does not have",
         _pt(state_dict(("w", tensor("7", 4, (4,), (1,))))))  # fmt: skip
    case("foreign_pt_storage_size_lies", "FormatError", "should hold",
         _pt(state_dict(("w", tensor("0", 1000, (4,), (1,))))))  # fmt: skip
    case("foreign_pt_tensor_outside_storage", "FormatError", "reads bytes up to",
         _pt(state_dict(("w", tensor("0", 4, (100,), (1,))))))  # fmt: skip
    case("foreign_pt_stride_outside_storage", "FormatError", "reads bytes up to",
         _pt(state_dict(("w", tensor("0", 4, (2, 2), (1, 60000))))))  # fmt: skip
    case("foreign_pt_storage_key_traversal", "FormatError", "short name",
         _pt(state_dict(("w", tensor("../../x", 4, (4,), (1,))))))  # fmt: skip
    case("foreign_pt_big_endian", "UnsafeArchiveError", "byte order",
         lambda: torch_zip(state_dict(("w", tensor("0", 4, (4,), (1,)))), {"0": FOUR_FLOATS}, byteorder=b"big"))  # fmt: skip

    # malformed pickles
    case("foreign_pt_no_stop", "FormatError", "without a STOP", _pt(b"\x80\x02}"))
    case("foreign_pt_stack_underflow", "FormatError", "empty stack", _pt(b"\x80\x02R."))
    case("foreign_pt_cycle", "FormatError", "contain themselves", _pt(b"\x80\x02]q\x00h\x00a."))
    case("foreign_pt_memo_never_stored", "FormatError", "never stored",
         _pt(b"\x80\x02]r\xff\xff\xff\xffj\xfe\xff\xff\xff."))  # fmt: skip

    # work and memory bounds (bomb_: also run with time and memory limits)
    case("bomb_pickle_nested_100k", "UnsafeArchiveError", "nested more than 200", _pt(_nested_lists(100_000)))
    case("bomb_pickle_billion_laughs", "UnsafeArchiveError", "shared references", _pt(_laughs(60)))
    case("bomb_pickle_declared_huge_string", "FormatError", "past its end",
         _pt(b"\x80\x04\x8d" + struct.pack("<Q", 1 << 62) + b"x."))  # fmt: skip
    case("bomb_pickle_huge_int", "UnsafeArchiveError", "pickled int of",
         _pt(b"\x80\x02\x8b" + struct.pack("<i", 8000) + bytes(8000) + b"."))  # fmt: skip
    case("bomb_pickle_huge_shape", "FormatError", "reads bytes up to|at most",
         _pt(state_dict(("w", tensor("0", 4, (1 << 20, 1 << 20), (1, 1))))))  # fmt: skip

    def huge_pickle_member() -> bytes:  # data.pkl deflated, declaring 300 MiB: refused before inflating
        deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
        body = deflate.compress(b"\x80\x02}.") + deflate.flush()
        entries = [ZEntry(f"{ARCHIVE}/data.pkl", body, method=8, cd_usize=300 << 20)]
        return build_zip([*entries, ZEntry(f"{ARCHIVE}/data/0", FOUR_FLOATS)])

    case("bomb_pickle_member_declared_huge", "UnsafeArchiveError", "over the limit", huge_pickle_member)

    # .safetensors, .npy and .npz files
    case("foreign_st_gap", "FormatError", "gaps or overlaps",
         lambda: _safetensors({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8)))  # fmt: skip
    case("foreign_st_shape_lies", "FormatError", "disagree",
         lambda: _safetensors({"a": {"dtype": "F32", "shape": [1000000, 1000000], "data_offsets": [0, 4]}}, bytes(4)))  # fmt: skip
    case("foreign_npy_object_dtype", "UnsafeArchiveError", "not allowed", lambda: npy_bytes("|O", (2,), bytes(16)))
    case("foreign_npy_size_lies", "FormatError", "declares", lambda: npy_bytes("<f8", (1000,), bytes(8)))

    def npz_declared_huge() -> bytes:  # a deflated .npy declaring 2 GiB of data, holding its header only
        head = npy_bytes("<f8", (1 << 28,), b"")
        deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
        body = deflate.compress(head) + deflate.flush()
        return build_zip([ZEntry("x.npy", body, method=8, cd_usize=len(head) + (8 << 28))])

    case("bomb_npz_declared_huge", "UnsafeArchiveError", "max_read_bytes", npz_declared_huge)
    case("foreign_npz_bad_member", "FormatError", "bad magic",
         lambda: build_zip([ZEntry("a.npy", npy_bytes("<f8", (1,), bytes(8))), ZEntry("b.npy", b"not an npy file")]))  # fmt: skip
    return cases
