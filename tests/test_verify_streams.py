"""`verify` on .npz, .pt and .zanj files streams their CRCs: every member is decoded piece by piece
(zanj.zip_stream), holding one piece at a time, and what the compressed members declare must fit the
read's budget, as a read of them must. Damage is reported as the .zarc verify reports it
(VerifyResult; the CLI exits 1), a file declaring too much is refused (UnsafeArchiveError; exit 2).

Memory is measured in children forked by tests/hostile/worker.py under an address-space limit a
little above what the process has: the old verify inflated each member whole and ran out of it."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hostile.craft import ZEntry, build_zip
from hostile.worker import Worker
from zanj import ZANJ

import zarchive
from zarchive.container.source import BytesSource
from zarchive.errors import IntegrityError, UnsafeArchiveError
from zarchive.formats.zanj.container import ZanjZip
from zarchive.formats.zanj.zip_stream import member_crc, member_pieces

MiB = 1 << 20


# --- crafting ---------------------------------------------------------------------------------------
def deflated_zeros(head: bytes, n: int) -> tuple[bytes, int, int]:
    """A raw deflate stream of `head` then `n` zero bytes, built in time in proportion to its own
    size (one MiB of zeros deflated once, repeated), with the CRC and size of what it decodes to."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    parts = [c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)]
    block = c.compress(bytes(MiB)) + c.flush(zlib.Z_FULL_FLUSH)  # the same bytes after every full flush
    parts += [block] * (n // MiB)
    parts.append(c.compress(bytes(n % MiB)) + c.flush())
    crc, zero = zlib.crc32(head), bytes(MiB)
    for _ in range(n // MiB):
        crc = zlib.crc32(zero, crc)
    crc = zlib.crc32(bytes(n % MiB), crc)
    return b"".join(parts), crc, len(head) + n


def npy_head(descr: str, shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def npz_of_zeros(path: Path, n: int) -> Path:
    """An .npz of one deflated uint8 array of `n` zeros (a file of about n / 1000 bytes)."""
    body, crc, size = deflated_zeros(npy_head("|u1", (n,)), n)
    path.write_bytes(build_zip([ZEntry("a.npy", body, method=8, crc=crc, cd_usize=size)]))
    return path


def pt_of_zeros(path: Path, n: int) -> Path:
    """A torch.save zip of one uint8 tensor of `n` zeros whose storage member is deflated (torch
    writes them stored; a zip reader must take either)."""
    buf = io.BytesIO()
    torch.save(torch.zeros(70000, dtype=torch.uint8), buf)
    entries = []
    with zipfile.ZipFile(buf) as z:
        for info in z.infolist():
            data = z.read(info)
            if info.filename.endswith("data.pkl"):
                assert data.count(struct.pack("<i", 70000)) == 2  # the storage's size, the tensor's shape
                entries.append(ZEntry(info.filename, data.replace(struct.pack("<i", 70000), struct.pack("<i", n))))
            elif info.filename.endswith("data/0"):
                body, crc, size = deflated_zeros(b"", n)
                entries.append(ZEntry(info.filename, body, method=8, crc=crc, cd_usize=size))
            else:
                entries.append(ZEntry(info.filename, data))
    path.write_bytes(build_zip(entries))
    return path


def zanj_of_zeros(path: Path, n: int) -> Path:
    """A ZANJ file whose one array (uint8, `n` zeros) is a deflated .npy member."""
    body, crc, size = deflated_zeros(npy_head("|u1", (n,)), n)
    node = {"__muutils_format__": "numpy.ndarray:external", "dtype": "uint8", "shape": [n], "$ref": "a.npy"}
    entries = [
        ZEntry("__zanj__.json", json.dumps({"a": node}).encode()),
        ZEntry("__zanj_meta__.json", b"{}"),
        ZEntry("a.npy", body, method=8, crc=crc, cd_usize=size),
    ]
    path.write_bytes(build_zip(entries))
    return path


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def member_data_at(path: Path, name: str) -> int:
    """Where a zip member's stored bytes start in the file."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(name)
    raw = path.read_bytes()
    n, m = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
    return info.header_offset + 30 + n + m


def cli_in_child(argv: list[str], *, extra_mb: int = 300, timeout: int = 120) -> tuple[int, str]:
    """`zarchive ARGV` in a child process limited to what it has after importing plus `extra_mb`."""
    script = (
        "import resource, sys\n"
        "import numpy, zarchive.formats.foreign, zarchive.formats.zanj\n"
        "from zarchive.cli import main\n"
        "size = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmSize:')][0] * 1024\n"
        f"limit = size + ({extra_mb} << 20)\n"
        "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(zarchive.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    return proc.returncode, proc.stdout + proc.stderr


# --- decoding in pieces -----------------------------------------------------------------------------
METHODS = {
    "stored": zipfile.ZIP_STORED,
    "deflate": zipfile.ZIP_DEFLATED,
    "bzip2": zipfile.ZIP_BZIP2,
    "lzma": zipfile.ZIP_LZMA,
}


@pytest.mark.parametrize("method", METHODS.values(), ids=list(METHODS))
def test_every_method_decodes_in_pieces_to_what_zipfile_reads(method: int) -> None:
    rng = np.random.default_rng(0)
    contents = {
        "random": rng.integers(0, 256, 300_000, dtype=np.uint8).tobytes(),
        "runs": bytes(2_000_000) + b"x" * 70_001,
        "empty": b"",
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in contents.items():
            z.writestr(name, data)
    zz = ZanjZip(BytesSource(buf.getvalue()), max_member_bytes=1 << 30)
    for name, data in contents.items():
        info = zz.members[name]
        pieces = list(member_pieces(zz.source, info, member=name, piece=4096))
        assert all(len(p) <= 4096 for p in pieces)
        assert b"".join(bytes(p) for p in pieces) == data
        assert member_crc(zz.source, info, member=name) == info.CRC
        assert bytes(zz.read(name)) == data
    assert zz.verify_all() == []


def test_a_bzip2_member_that_inflates_past_its_declared_size_is_cut_there() -> None:
    """zipfile inflates a bzip2 member's input without an output limit (a KB of input makes 1 GB
    before it is cut to the declared size); the pieces stop at the declared size, and the CRC says
    the member is damaged."""
    body = bz2_compress_zeros(20 * MiB)
    zz = ZanjZip(
        BytesSource(build_zip([ZEntry("x.jsonl", body, method=12, crc=0, cd_usize=100)])), max_member_bytes=1 << 30
    )
    assert sum(len(p) for p in member_pieces(zz.source, zz.members["x.jsonl"], member="x.jsonl")) == 100
    with pytest.raises(IntegrityError, match="CRC"):
        zz.read("x.jsonl")
    assert [m for m, _ in zz.verify_all()] == ["x.jsonl"]


def bz2_compress_zeros(n: int) -> bytes:
    import bz2

    c = bz2.BZ2Compressor(9)
    out = b"".join(c.compress(bytes(MiB)) for _ in range(n // MiB))
    return out + c.flush()


def test_an_lzma_member_naming_a_4_gib_dictionary_decodes_with_one_of_its_size() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_LZMA) as z:
        z.writestr("a", b"abc" * 1000)
    raw = bytearray(buf.getvalue())
    n, m = struct.unpack("<HH", raw[26:30])
    at = 30 + n + m + 4  # after the local header: LZMA's version and properties size, then the properties
    raw[at + 1 : at + 5] = struct.pack("<I", 0xFFFFFFFF)  # the dictionary's size
    zz = ZanjZip(BytesSource(bytes(raw)), max_member_bytes=1 << 30)
    assert bytes(zz.read("a")) == b"abc" * 1000


def test_truncated_and_damaged_streams_are_problems_not_exceptions() -> None:
    body, crc, size = deflated_zeros(b"", 3 * MiB)
    data = build_zip(
        [
            ZEntry("short.bin", body[: len(body) // 2], method=8, crc=crc, cd_usize=size),
            ZEntry("garbage.bin", b"\xff" * 100, method=8, crc=0, cd_usize=1000),
            ZEntry("longer.bin", body, method=8, crc=crc, cd_usize=size + 10),
            ZEntry("ok.bin", body, method=8, crc=crc, cd_usize=size),
        ]
    )
    zz = ZanjZip(BytesSource(data), max_member_bytes=1 << 30)
    problems = dict(zz.verify_all())
    assert set(problems) == {"short.bin", "garbage.bin", "longer.bin"}
    assert "declares" in problems["longer.bin"]


def test_a_local_header_naming_another_member_is_refused() -> None:
    data = build_zip([ZEntry("a.npy", b"x"), ZEntry("b.npy", b"y", local_name=b"c.npy")])
    with pytest.raises(UnsafeArchiveError, match="local header names another member"):
        ZanjZip(BytesSource(data), max_member_bytes=1 << 30)


# --- damage is found and reported like a .zarc's ---------------------------------------------------------
def test_damage_in_an_npz_is_reported_stored_or_deflated(tmp_path: Path) -> None:
    for save in (np.savez, np.savez_compressed):
        path = tmp_path / f"{save.__name__}.npz"
        save(path, a=np.arange(100_000), b=np.ones(3))
        assert zarchive.verify(path), save
        flip(path, member_data_at(path, "a.npy") + 5000)  # (a stored .npz's data was never checked before)
        result = zarchive.verify(path)
        assert not result and result.damaged_members == ["a.npy"], (save, result)
        assert cli_in_child(["verify", str(path)])[0] == 1


def test_damage_in_a_pt_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "m.pt"
    torch.save({"w": torch.arange(100_000, dtype=torch.float32)}, path)
    assert zarchive.verify(path)
    name = next(n for n in zipfile.ZipFile(path).namelist() if n.endswith("/data/0"))
    flip(path, member_data_at(path, name) + 100)
    result = zarchive.verify(path)
    assert not result and result.damaged_members == [name]
    code, out = cli_in_child(["verify", str(path)])
    assert code == 1 and f"DAMAGED {name}" in out


def test_damage_in_a_real_zanj_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "old.zanj"
    ZANJ(external_array_threshold=10).save({"a": np.arange(50_000), "cfg": {"lr": 0.1}}, str(path))
    assert zarchive.verify(path)
    name = next(n for n in zipfile.ZipFile(path).namelist() if n.endswith(".npy"))
    flip(path, member_data_at(path, name) + 50)
    result = zarchive.verify(path)
    assert not result and result.damaged_members == [name]
    assert cli_in_child(["verify", str(path)])[0] == 1


# --- bounded memory, the read's budget ---------------------------------------------------------------
@pytest.mark.parametrize("make", [npz_of_zeros, pt_of_zeros, zanj_of_zeros], ids=["npz", "pt", "zanj"])
def test_verify_streams_a_member_larger_than_the_memory_it_may_use(tmp_path: Path, make: Any) -> None:
    """A 300 MiB member (a file of 300 KB; within the default budget) verified with 150 MiB to spare:
    the old verify held the member whole."""
    path = make(tmp_path / f"f.{make.__name__}", 300 * MiB)
    reply = Worker.get().call(op="verify", path=str(path), mem_mb=150, timeout=180)
    assert reply.get("ok"), reply
    assert reply["problems"] == [] and reply["peak_mb"] < 60, reply


def test_verify_streams_stored_members_of_a_pt_file(tmp_path: Path) -> None:
    path = tmp_path / "big.pt"
    torch.save({"w": torch.zeros(40 * MiB, dtype=torch.float32)}, path)  # 160 MiB, stored as torch writes it
    reply = Worker.get().call(op="verify", path=str(path), mem_mb=100, timeout=180)
    assert reply.get("ok") and reply["problems"] == [] and reply["peak_mb"] < 60, reply


@pytest.mark.parametrize("make", [npz_of_zeros, pt_of_zeros, zanj_of_zeros], ids=["npz", "pt", "zanj"])
def test_verify_refuses_what_the_read_refuses(tmp_path: Path, make: Any) -> None:
    """1.5 GB declared by a 1.5 MB file: over the default budget (1 GiB + 16 x the file), so `read`
    refuses it, and `verify` too, before decoding anything (the old verify inflated it whole)."""
    n = 1500 * 1000 * 1000
    path = make(tmp_path / f"f.{make.__name__}", n)
    for op in ("verify", "read"):
        reply = Worker.get().call(op=op, path=str(path), mem_mb=600, timeout=180, verify=False)
        assert reply.get("exc") == "UnsafeArchiveError" and reply["zarchive_error"], (op, reply)
        assert "max_read_bytes" in reply["msg"] and reply["peak_mb"] < 100, (op, reply)
    code, out = cli_in_child(["verify", str(path)])
    assert code == 2 and "max_read_bytes" in out and len(out.strip().splitlines()) == 1, out
    arc = zarchive.ZArchive(max_read_bytes=1_000_000).open(path)
    with arc, pytest.raises(UnsafeArchiveError, match="max_read_bytes=1,000,000"):
        arc.verify()


def test_verify_takes_the_budget_it_is_given(tmp_path: Path) -> None:
    path = npz_of_zeros(tmp_path / "a.npz", 20 * MiB)
    assert zarchive.verify(path)
    arc = zarchive.ZArchive(max_read_bytes=10 * MiB).open(path)
    with arc, pytest.raises(UnsafeArchiveError, match="checking the CRCs") as e:
        arc.verify()
    assert e.value.member == "a.npy"


# --- damaged files of every method: only ZArchiveErrors ----------------------------------------------
def _bases(tmp_path: Path) -> dict[str, bytes]:
    """Small real files: .npz (stored, deflated), a torch.save zip, a ZANJ file deflated as ZANJ
    writes it and rewritten stored, bzip2 and LZMA."""
    import pandas as pd

    out: dict[str, bytes] = {}
    for name, save in (("npz", np.savez), ("npz-deflate", np.savez_compressed)):
        buf = io.BytesIO()
        save(buf, a=np.arange(3000), b=np.ones((20, 5)))
        out[name] = buf.getvalue()
    buf = io.BytesIO()
    torch.save({"w": torch.arange(1000.0), "v": torch.ones(3, 3)}, buf)
    out["pt"] = buf.getvalue()
    path = tmp_path / "base.zanj"
    frame = pd.DataFrame({"x": range(300), "y": ["s"] * 300})
    ZANJ(external_array_threshold=10).save({"a": np.arange(500), "df": frame, "l": list(range(300))}, str(path))
    out["zanj"] = path.read_bytes()
    for name, method in [("stored", zipfile.ZIP_STORED), ("bzip2", zipfile.ZIP_BZIP2), ("lzma", zipfile.ZIP_LZMA)]:
        buf = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(out["zanj"])) as src, zipfile.ZipFile(buf, "w", method) as z:
            for n in src.namelist():
                z.writestr(n, src.read(n))
        out[f"zanj-{name}"] = buf.getvalue()
    return out


def test_damaged_files_of_every_method_raise_only_zarchive_errors(tmp_path: Path) -> None:
    """600 seeded mutations (bytes set, words set, spans cut) of small real files, verified and read
    with a 50 MB budget: each is intact, damaged, or refused with a ZArchiveError."""
    import random

    bases = _bases(tmp_path)
    for name, data in bases.items():
        with zarchive.ZArchive(max_read_bytes=50 << 20).open(data) as arc:
            assert arc.verify(), name
            arc.load()
    rng = random.Random(24)
    outcomes: dict[str, int] = {}
    for _ in range(600):
        name = rng.choice(sorted(bases))
        data = bytearray(bases[name])
        for _ in range(rng.randint(1, 4)):
            at, op = rng.randrange(len(data)), rng.random()
            if op < 0.6:
                data[at] = rng.randrange(256)
            elif op < 0.8:
                data[at : at + 4] = rng.randrange(1 << 32).to_bytes(4, "little")
            else:
                del data[at : at + rng.randint(1, 50)]
        for verb in ("verify", "read"):
            try:
                with zarchive.ZArchive(max_read_bytes=50 << 20).open(bytes(data)) as arc:
                    result = arc.verify() if verb == "verify" else arc.load()
                outcome = "damaged" if verb == "verify" and not result else "ok"
            except zarchive.ZArchiveError as e:
                outcome = type(e).__name__
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    # both outcomes are reached (about 130 damaged and 50 intact; the bases hold fresh random values and
    # timestamps, so the counts move a little from run to run)
    assert outcomes.get("damaged", 0) > 20 and outcomes.get("ok", 0) > 20, outcomes
