"""The restricted pickle reader's allocation and depth gates (foreign.pickle_gate, foreign.value_graph)
on hostile torch.save files crafted here, opcode by opcode, a few hundred bytes each: every one is read
in a child process under an address-space and a time limit, through `zarchive.open`, `zarchive.audit`
and the command line, and refused with a ZArchiveError (never a crash, never an unbounded wait), or
read within the budget; real torch.save files still read bitwise."""

from __future__ import annotations

import io
import json
import resource
import struct
import subprocess
import sys
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch

import zarchive
from zarchive.container.depth import MAX_DEPTH
from zarchive.errors import FormatError, UnsafeArchiveError
from zarchive.formats.foreign.pickle_gate import str_size
from zarchive.formats.foreign.restricted_pickle import read_pickle
from zarchive.formats.foreign.torch_pickle import TorchRules
from zarchive.formats.foreign.value_graph import VISITS_FLOOR, walk_bounded

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 3 << 30  # the child's address space: far below what the old reader took on these files


# --- crafting, by hand (never pickle or torch) ---
def pt(pkl: bytes, storages: dict[str, bytes] | None = None) -> bytes:
    """A torch.save zip around `pkl` (data.pkl deflated, as a small hostile file would be)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo("archive/data.pkl"), pkl, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
        z.writestr("archive/byteorder", b"little")
        for key, data in (storages or {}).items():
            z.writestr(f"archive/data/{key}", data)
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


def uni(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def glob(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def put(i: int) -> bytes:
    return b"r" + struct.pack("<I", i)


def get(i: int) -> bytes:
    return b"j" + struct.pack("<I", i)


def long1(n: int) -> bytes:
    raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw if len(raw) < 256 else b"\x8b" + struct.pack("<i", len(raw)) + raw


def doubling(levels: int, kind: str = "list") -> bytes:
    """Opcodes leaving one value on the stack: level i holds level i - 1 twice (by memo), so the values
    counted along every path double with each level (memo entries 0 .. levels - 1)."""
    out = bytearray(b"]" + put(0))
    for i in range(1, levels):
        out += b"0"  # (pop the level before: it stays in the memo)
        if kind == "tuple":
            out += get(i - 1) + get(i - 1) + b"\x86" + put(i)
        elif kind == "dict":
            out += b"}(" + uni("a") + get(i - 1) + uni("b") + get(i - 1) + b"u" + put(i)
        else:
            out += b"](" + get(i - 1) + get(i - 1) + b"e" + put(i)
    return bytes(out)


def metadata_doubling(levels: int) -> bytes:
    """A state dict (an OrderedDict) whose `_metadata`, set by BUILD, holds a doubling graph."""
    graph = doubling(levels)
    return (
        b"\x80\x02" + glob("collections", "OrderedDict") + b")R}" + uni("_metadata") + b"}" + uni("m") + graph + b"ssb."
    )


DEEP = 1_000_000
HOSTILE = {
    # a dict keyed by a tuple nested a million levels deep (TUPLE1): hashing it recursed in C (SIGSEGV)
    "deep_tuple1_key": b"\x80\x02})" + b"\x85" * DEEP + b"Ns.",
    # the same by MARK / TUPLE
    "deep_mark_tuple_key": b"\x80\x02}" + b"(" * DEEP + b")" + b"t" * DEEP + b"Ns.",
    # a set of frozensets of tuples ... nested a million levels
    "deep_frozensets": b"\x80\x04" + b"(" * DEEP + b")" + b"\x91" * DEEP + b".",
    # lists made deep only after each is inside its parent (by memo): the depth as built goes stale,
    # the exact walk of the finished graph refuses it
    "deep_after_the_fact": b"\x80\x02"
    + b"".join(b"]" + put(i) + b"0" for i in range(100_000))
    + b"".join(get(i) + get(i + 1) + b"a0" for i in range(99_999))
    + get(0)
    + b".",
    # finding 2: a state dict's _metadata, a doubling graph of 40 levels (2**41 values along its paths)
    "metadata_doubling_40": metadata_doubling(40),
    # finding 4: inside the old 5,000,000-value cap, 22 levels of shared tuples took 72 s and 747 MB
    "tuples_doubling_22": b"\x80\x02" + doubling(22, "tuple") + b".",
    "dicts_doubling_21": b"\x80\x02" + doubling(21, "dict") + b".",
    # finding 5: torch.Size((2**70,))
    "size_2_70": b"\x80\x02" + glob("torch", "Size") + long1(2**70) + b"\x85\x85R.",
}
EXPECTED = {
    "deep_tuple1_key": (UnsafeArchiveError, f"nested more than {MAX_DEPTH}"),
    "deep_mark_tuple_key": (UnsafeArchiveError, f"nested more than {MAX_DEPTH}"),
    "deep_frozensets": (UnsafeArchiveError, f"nested more than {MAX_DEPTH}"),
    "deep_after_the_fact": (UnsafeArchiveError, f"nested more than {MAX_DEPTH}"),
    "metadata_doubling_40": (UnsafeArchiveError, "counted along every path"),
    "tuples_doubling_22": (UnsafeArchiveError, "counted along every path"),
    "dicts_doubling_21": (UnsafeArchiveError, "counted along every path"),
    "size_2_70": (FormatError, "torch.Size has an impossible dimension of 71 bits"),
}


# --- a child process under limits ---
_CHILD = r"""
import json, sys, time
import zarchive

def status_kb(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))

op, path, budget, warm = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
za = zarchive.ZArchive(max_read_bytes=budget)
with za.open(warm) as arc:  # (a small file first: the modules a read imports are not measured)
    arc.load()
zarchive.audit(warm)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # (restarts the peak: what the read adds is measured, not the imports)
rss0 = status_kb("VmRSS")
start = time.monotonic()
try:
    if op == "open":
        with za.open(path) as arc:
            repr(arc)
            value = arc.load()
            repr(value)
    elif op == "audit":
        zarchive.audit(path)
    out = {"ok": True}
except BaseException as e:
    out = {"ok": False, "exc": type(e).__name__, "msg": str(e)[:400], "zerr": isinstance(e, zarchive.ZArchiveError)}
out["seconds"] = time.monotonic() - start
out["peak_mb"] = (status_kb("VmHWM") - rss0) / 1024
print(json.dumps(out))
"""


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def in_child(op: str, path: Path, *, budget: int | None = None, timeout: float = 120) -> dict[str, Any]:
    """Run `op` on `path` in a fresh interpreter under the address-space limit; its outcome."""
    warm = path.parent / "warm-up.pt"
    warm.write_bytes(pt(b"\x80\x02}" + uni("a") + b"(K\x01t" + b"s."))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, op, str(path), json.dumps(budget), str(warm)],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_limits,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, f"the child died (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_pickles_are_refused_in_a_child(name: str, tmp_path: Path) -> None:
    data = pt(HOSTILE[name])
    assert len(data) < (500_000 if name == "deep_after_the_fact" else 3000)  # (memo indexes deflate poorly)
    path = tmp_path / f"{name}.pt"
    path.write_bytes(data)
    error, match = EXPECTED[name]
    for op in ("open", "audit"):
        reply = in_child(op, path)
        assert not reply["ok"] and reply["zerr"], reply
        assert reply["exc"] == error.__name__ and match in reply["msg"], reply
        assert "archive/data.pkl" in reply["msg"], reply
        assert reply["seconds"] < 30, reply  # (refused in about a second; the machine is noisy)


@pytest.mark.parametrize("name", ["deep_tuple1_key", "metadata_doubling_40", "size_2_70"])
def test_the_command_line_exits_2_with_one_line(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.pt"
    path.write_bytes(pt(HOSTILE[name]))
    for cmd in ("audit", "ls"):
        done = subprocess.run(
            [sys.executable, "-m", "zarchive", cmd, str(path)],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=_limits,
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 2, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and EXPECTED[name][1] in lines[0], done.stderr


# --- depth, in process (nothing here gets deep enough to crash) ---
def read(data: bytes, **kw: Any) -> Any:
    return read_pickle(data, TorchRules("data.pkl"), member="data.pkl", **kw).value


def test_nesting_up_to_max_depth_reads_and_one_more_is_refused() -> None:
    for n, build in (
        (MAX_DEPTH, lambda n: b"\x80\x02)" + b"\x85" * (n - 1) + b"."),
        (MAX_DEPTH, lambda n: b"\x80\x02" + b"(" * (n - 1) + b")" + b"t" * (n - 1) + b"."),
        (MAX_DEPTH, lambda n: b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b"."),
        (MAX_DEPTH, lambda n: b"\x80\x04" + b"(" * (n - 1) + b")" + b"\x91" * (n - 1) + b"."),
    ):
        value = read(build(n))
        depth = 0
        while isinstance(value, (tuple, list, frozenset, set)):
            value, depth = next(iter(value), None), depth + 1
        assert depth == n
        with pytest.raises(UnsafeArchiveError, match=f"nested more than {MAX_DEPTH}"):
            read(build(n + 1))


def test_a_dict_key_is_never_hashed_deeper_than_the_limit() -> None:
    """The key tuple is one level too deep: refused before the dict is asked to hash it."""
    key = b")" + b"\x85" * MAX_DEPTH  # MAX_DEPTH + 1 levels
    with pytest.raises(UnsafeArchiveError, match="nested more than"):
        read(b"\x80\x02}" + key + b"Ns.")
    ok = b")" + b"\x85" * (MAX_DEPTH - 2)  # MAX_DEPTH - 1 levels: the dict holding it is MAX_DEPTH deep
    assert len(read(b"\x80\x02}" + ok + b"Ns.")) == 1


def test_metadata_is_counted_and_its_depth_too() -> None:
    """`_metadata` (set by BUILD) is part of the graph: counted along every path, as deep as it nests."""
    value = read(metadata_doubling(10))
    assert isinstance(value, OrderedDict) and "m" in value._metadata  # type: ignore[attr-defined]
    visits = walk_bounded(value, member="m")
    assert visits == 1 + 1 + 1 + (2**10 - 1)  # the state dict, _metadata's dict, its key, the graph
    with pytest.raises(UnsafeArchiveError, match="counted along every path"):
        read(metadata_doubling(20), max_visits=100_000)
    chain = b")" + b"\x85" * (MAX_DEPTH - 2)  # MAX_DEPTH - 1 levels: the state dict is MAX_DEPTH deep
    deep_meta = b"\x80\x02" + glob("collections", "OrderedDict") + b")R}" + uni("_metadata") + chain + b"sb"
    assert len(read(deep_meta + b".")) == 0
    with pytest.raises(UnsafeArchiveError, match="nested more than"):
        read(deep_meta + b"\x85.")  # a tuple holding the state dict: one level too many


def test_the_visit_cap_grows_with_the_pickle() -> None:
    small = b"\x80\x02" + doubling(16) + b"."  # 2**16 - 1 values along its paths, from ~200 bytes
    assert 2**16 - 1 < VISITS_FLOOR
    read(small)
    with pytest.raises(UnsafeArchiveError, match="counted along every path"):
        read(b"\x80\x02" + doubling(17) + b".")  # 2**17 - 1 > 100,000
    padded = b"\x80\x02" + uni("x" * 60_000) + b"0" + doubling(17) + b"."  # a bigger pickle may hold more
    assert len(read(padded)) == 2


# --- memory ---
@pytest.mark.parametrize(
    "text", ["", "a", "abc" * 40, "é" * 50, "ÿ" * 70, "Ā" * 30, "Ā" * 300, "€" * 100, "😀" * 20, "😀" * 400, "a" * 70_000,
             "a" * 69_999 + "😀", "é" * 40_000],
)  # fmt: skip
def test_strings_are_charged_at_least_their_size_in_memory(text: str) -> None:
    raw = text.encode()
    assert str_size(raw, 0, len(raw)) >= sys.getsizeof(text)
    if len(raw) > 64 and text.isascii():
        assert str_size(raw, 0, len(raw)) == sys.getsizeof(text)


def _string_pkl(text_bytes: bytes) -> bytes:
    return b"\x80\x04\x8d" + struct.pack("<Q", len(text_bytes)) + text_bytes + b"."


def test_a_wide_string_is_charged_four_bytes_a_character() -> None:
    """60 MB of UTF-8 that decode to a 4-byte-wide str of 60 M characters (240 MB): refused at 200 MB."""
    body = "😀".encode() + b"a" * (60_000_000 - 4)
    with pytest.raises(UnsafeArchiveError, match="max_read_bytes"):
        read(_string_pkl(body), max_bytes=200_000_000)
    assert len(read(_string_pkl(body[:400_000]), max_bytes=2_000_000)) == 400_000 - 3


def test_the_inflated_pickle_and_its_string_fit_the_budget(tmp_path: Path) -> None:
    """A 100 KB file whose data.pkl inflates to 100 MB, one string: the inflated pickle (charged by the
    size the zip declares, before inflating) and the string both count against max_read_bytes."""
    path = tmp_path / "string.pt"
    path.write_bytes(pt(_string_pkl(b"a" * 100_000_000)))
    assert path.stat().st_size < 200_000
    refused = in_child("open", path, budget=150_000_000)
    assert refused["exc"] == "UnsafeArchiveError" and "max_read_bytes" in refused["msg"], refused
    assert refused["peak_mb"] < 150, refused
    read_ok = in_child("open", path, budget=260_000_000)
    assert read_ok["ok"], read_ok
    assert read_ok["peak_mb"] < 260, read_ok


def test_the_declared_size_of_data_pkl_is_checked_before_inflating(tmp_path: Path) -> None:
    import zlib

    from hostile.craft import ZEntry, build_zip

    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = deflate.compress(b"\x80\x02}.") + deflate.flush()
    path = tmp_path / "declared.pt"
    path.write_bytes(build_zip([ZEntry("archive/data.pkl", body, method=8, cd_usize=200 << 20)]))
    with pytest.raises(UnsafeArchiveError, match="reading the pickle"):
        zarchive.ZArchive(max_read_bytes=100 << 20).open(path)


def test_copies_a_call_makes_are_charged() -> None:
    """bytes built again and again from one shared 1 MB string (`_codecs.encode`, by memo): each copy is
    charged, so 300 of them are refused at 100 MB."""
    encode = glob("_codecs", "encode") + put(1)
    text = uni("x" * 1_000_000) + put(0)
    calls = b"".join(get(1) + b"(" + get(0) + uni("latin1") + b"tR" + b"a" for _ in range(300))
    pkl = b"\x80\x02]" + encode + b"0" + text + b"0" + calls + b"."
    with pytest.raises(UnsafeArchiveError, match="max_read_bytes"):
        read(pkl, max_bytes=100_000_000)
    assert len(read(pkl, max_bytes=1_000_000_000)) == 300


def test_a_set_copied_from_a_shared_list_is_charged() -> None:
    items = b"](" + b"".join(b"J" + struct.pack("<i", i) for i in range(10_000)) + b"e" + put(0)
    calls = b"".join(glob("builtins", "set") + get(0) + b"\x85R" + b"a" for _ in range(200))
    pkl = b"\x80\x02]" + items + b"0" + calls + b"."
    with pytest.raises(UnsafeArchiveError, match="max_read_bytes"):
        read(pkl, max_bytes=100_000_000)


# --- absurd sizes ---
def _tensor(size: bytes, stride: bytes = b"(K\x01t", offset: bytes = b"K\x00", numel: bytes = b"K\x04") -> bytes:
    storage = b"(" + uni("storage") + glob("torch", "FloatStorage") + uni("0") + uni("cpu") + numel + b"t"
    args = b"(" + storage + b"Q" + offset + size + stride + b"\x89" + glob("collections", "OrderedDict") + b")Rt"
    return b"\x80\x02" + glob("torch._utils", "_rebuild_tensor_v2") + args + b"R."


@pytest.mark.parametrize(
    "pkl,match",
    [
        (b"\x80\x02" + glob("torch", "Size") + long1(2**70) + b"\x85\x85R.", "torch.Size has an impossible dimension"),
        (b"\x80\x02" + glob("torch", "Size") + b"(" + long1(2**49) + b"K\x01t\x85R.", "torch.Size has an impossible"),
        (b"\x80\x02" + glob("torch", "Size") + b"(" + long1(2**32000 - 1) + b"t\x85R.", "of 32000 bits"),
        (_tensor(b"(K\x00" + long1(2**70) + b"t", b"(K\x01K\x01t"), "tensor's size has an impossible dimension"),
        (_tensor(b"(K\x04t", b"(" + long1(2**70) + b"t"), "tensor's stride has an impossible dimension"),
        (_tensor(b"(K\x00t", offset=long1(2**70)), "storage offset must be an int in"),
        (_tensor(b"(K\x04t", numel=long1(2**70)), "element count must be an int in"),
        (b"\x80\x02" + glob("builtins", "complex") + long1(2**4000) + b"\x85R.", "bad arguments to builtins.complex"),
    ],
    ids=["size_2_70", "size_2_49", "size_huge_int", "tensor_size", "tensor_stride", "offset", "numel", "complex"],
)
def test_absurd_sizes_are_refused_naming_the_member(pkl: bytes, match: str) -> None:
    with pytest.raises(FormatError, match=match) as info:
        read(pkl)
    assert info.value.member == "data.pkl"


def test_a_size_at_the_limit_reads_and_prints(tmp_path: Path) -> None:
    path = tmp_path / "size.pt"
    path.write_bytes(pt(b"\x80\x02" + glob("torch", "Size") + b"(" + long1(2**48) + b"K\x03t\x85R."))
    value = zarchive.read(path)
    assert value == torch.Size([2**48, 3]) and repr(value) == "torch.Size([281474976710656, 3])"


# --- real files ---
def test_a_real_state_dict_of_5000_tensors_reads_bitwise(tmp_path: Path) -> None:
    torch.manual_seed(0)
    sd = OrderedDict((f"layer.{i}.weight", torch.randn(3, 4)) for i in range(5000))
    sd["tied"] = sd["layer.7.weight"]
    sd["view"] = sd["layer.9.weight"][1:, ::2]
    path = tmp_path / "many.pt"
    torch.save(sd, path)
    got = zarchive.read(path)
    assert list(got) == list(sd)
    for key, want in sd.items():
        assert got[key].shape == want.shape and got[key].stride() == want.stride()
        assert got[key].contiguous().view(torch.uint8).tolist() == want.contiguous().view(torch.uint8).tolist()
    assert got["tied"].data_ptr() == got["layer.7.weight"].data_ptr()


def test_a_real_model_with_metadata_reads(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=64)
    sd = model.state_dict()
    path = tmp_path / "transformer.pt"
    torch.save(sd, path)
    got = zarchive.read(path)
    want = torch.load(path, weights_only=True)
    assert list(got) == list(want) and got._metadata == want._metadata  # type: ignore[attr-defined]
    assert all(torch.equal(got[k], want[k]) for k in want)
