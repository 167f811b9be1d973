"""Hostile and broken files: every one raises a ZArchiveError subclass that names the problem, never
another exception type, never hangs, never takes unbounded memory, never imports or executes anything
named by the file, and never writes outside an extraction directory.

The files live in tests/hostile/corpus/, made by tests/hostile/make_corpus.py (run it after changing a
case); each case there states the exception class and a message pattern. Cases that need time, memory
limits or a process of their own run in children forked by tests/hostile/worker.py.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hostile.models  # noqa: F401 - classes some corpus files name (imported, as training code would be)
import numpy as np
import pytest
import torch
from hostile.craft import many_members
from hostile.filling import fill_declared
from hostile.make_corpus import CASES, CORPUS_DIR, Case, expected_valid, write_corpus
from hostile.worker import Worker

import zarchive

HOSTILE_DIR = os.path.dirname(CORPUS_DIR)
ERROR_CASES = [c for c in CASES if c.error is not None]
BY_NAME = {c.name: c for c in CASES}


def corpus_file(name: str) -> str:
    return os.path.join(CORPUS_DIR, name + ".zarc")


def check_error(case: Case, error: BaseException) -> None:
    assert isinstance(error, zarchive.ZArchiveError), f"{type(error).__name__}: {error}"
    assert type(error).__name__ in case.error.split("|"), f"{type(error).__name__}: {error}"
    assert re.search(case.match, str(error)), f"message {str(error)!r} does not match {case.match!r}"


def browse(path: str) -> None:
    """Everything a user might do with an open archive besides loading it: only ZArchiveErrors."""
    try:
        with zarchive.open(path) as arc:
            repr(arc)
            arc._repr_html_()
            todo = [""]
            for _ in range(200):
                if not todo:
                    break
                p = todo.pop()
                arc.summary(p)
                fill_declared(arc, p)
                todo += [f"{p}/{k}".strip("/") for k in arc.keys(p)[:20]]
    except zarchive.ZArchiveError:
        pass
    try:
        zarchive.verify(path)
    except zarchive.ZArchiveError:
        pass


# --- the corpus -------------------------------------------------------------------------------------------
def test_corpus_is_what_make_corpus_writes(tmp_path: Path) -> None:
    """The committed files are exactly what the script makes (run make_corpus.py after editing a case)."""
    names = write_corpus(str(tmp_path))
    assert sorted(names) == sorted(n for n in os.listdir(CORPUS_DIR) if n.endswith(".zarc"))
    for name in names:
        assert (tmp_path / name).read_bytes() == Path(CORPUS_DIR, name).read_bytes(), f"{name} is stale"
    assert (tmp_path / "INDEX.json").read_text() == Path(CORPUS_DIR, "INDEX.json").read_text()
    assert sum((tmp_path / n).stat().st_size for n in names) < 2_000_000
    assert len(ERROR_CASES) >= 100


def test_valid_control_file_loads() -> None:
    """The file every case damages loads, so each case fails for its own reason."""
    for lazy in (True, False):
        got = zarchive.read(corpus_file("valid"), lazy=lazy)
        want = expected_valid()
        assert set(got) == set(want)
        assert np.array_equal(got["arr"], want["arr"]) and got["arr"].dtype == want["arr"].dtype
        assert torch.equal(got["t"], torch.from_numpy(want["t"]))
        assert got["lst"] == want["lst"] and got["blob"] == want["blob"] and got["name"] == "ok"
    assert zarchive.verify(corpus_file("valid")) == []


VALID_CASES = [c for c in CASES if c.error is None]


@pytest.mark.parametrize("case", VALID_CASES, ids=lambda c: c.name)
def test_corpus_file_marked_valid_reads_and_verifies(case: Case) -> None:
    """The corpus's control files (INDEX.json: no error) read, eagerly and lazily, and verify intact:
    other readers are tested against the same expectations."""
    for lazy in (True, False):
        zarchive.read(corpus_file(case.name), lazy=lazy)
    assert zarchive.verify(corpus_file(case.name)) == []


READ_ERRORS = [c for c in ERROR_CASES if c.when == "read"]
ENTRY_ERRORS = [c for c in ERROR_CASES if c.when == "partial"]


@pytest.mark.parametrize("case", READ_ERRORS, ids=lambda c: c.name)
def test_hostile_file_raises_its_error(case: Case) -> None:
    for lazy in (True, False):
        with pytest.raises(Exception) as info:
            zarchive.read(corpus_file(case.name), lazy=lazy)
        check_error(case, info.value)
    with pytest.raises(Exception) as info:  # from bytes in memory too
        zarchive.read(Path(corpus_file(case.name)).read_bytes())
    check_error(case, info.value)
    browse(corpus_file(case.name))


@pytest.mark.parametrize("case", ENTRY_ERRORS, ids=lambda c: c.name)
def test_damaged_checksum_entry_fails_partial_reads_and_verify(case: Case) -> None:
    """A lying or malformed entry checksum: fetching that entry alone raises and verify() reports it;
    a full read, which checks the whole member against its own checksum, returns the intact data."""
    path = corpus_file(case.name)
    for lazy in (True, False):
        with zarchive.open(path, lazy=lazy) as arc, pytest.raises(Exception) as info:
            arc["t"]
        check_error(case, info.value)
    t = torch.from_numpy(expected_valid()["t"])
    with zarchive.open(path) as arc, pytest.raises(Exception) as info:  # read straight into memory of ours
        arc.load_into("t", torch.empty_like(t))
    check_error(case, info.value)
    problems = zarchive.verify(path)
    assert any(member == "tensors.safetensors" for member, _ in problems), problems
    got = zarchive.read(path)
    assert torch.equal(got["t"], torch.from_numpy(expected_valid()["t"]))
    browse(path)


MEMBER_LEVEL = [c for c in ERROR_CASES if c.name.startswith(("npy_", "st_", "jsonl_", "tensor_", "ref_", "bomb_"))]


@pytest.mark.parametrize("case", MEMBER_LEVEL, ids=lambda c: c.name)
def test_member_errors_say_where(case: Case) -> None:
    """Errors about a member's contents name the member, or the object path that refers to it."""
    with pytest.raises(zarchive.ZArchiveError) as info:
        zarchive.read(corpus_file(case.name))
    assert info.value.member is not None or info.value.path is not None


def test_nothing_named_by_a_file_is_imported_or_executed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Class names are never imported, pickles never loaded, even with the named module on sys.path."""
    monkeypatch.syspath_prepend(HOSTILE_DIR)
    monkeypatch.delenv("ZARCHIVE_TRAP_IMPORTED", raising=False)
    monkeypatch.delenv("ZARCHIVE_HOSTILE_PWNED", raising=False)
    for name in (
        "class_not_imported",
        "class_is_a_function",
        "class_is_popen",
        "class_dunder_walk",
        "npy_pickled_object",
        "npy_header_code",
        "unknown_handler",
    ):
        with pytest.raises(zarchive.ZArchiveError):
            zarchive.read(corpus_file(name))
        browse(corpus_file(name))
    assert "zarchive_hostile_trap" not in sys.modules
    assert "ZARCHIVE_TRAP_IMPORTED" not in os.environ and "ZARCHIVE_HOSTILE_PWNED" not in os.environ


def test_the_trap_module_would_be_noticed() -> None:
    """Control for the test above: importing the trap module does leave its mark."""
    code = "import os, zarchive_hostile_trap; print(os.environ['ZARCHIVE_TRAP_IMPORTED'])"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=HOSTILE_DIR, capture_output=True, text=True, timeout=60, check=False
    )
    assert out.stdout.strip() == "1", out.stderr


# --- limits: time and memory, in forked children ----------------------------------------------------------
@pytest.fixture(scope="module")
def worker() -> Worker:
    return Worker.get()


BOUNDED = [
    c
    for c in ERROR_CASES
    if c.name.startswith(("bomb_", "ref_", "manifest_nested", "npy_header", "st_header", "model_"))
]


@pytest.mark.parametrize("case", BOUNDED, ids=lambda c: c.name)
def test_bounded_time_and_memory(worker: Worker, case: Case) -> None:
    """Bombs and nesting fail fast, under a 1 GiB address-space limit, using little memory; so does
    verify(), which streams compressed members through the CRC instead of holding them."""
    reply = worker.call(op="read", path=corpus_file(case.name), mem_mb=1024, timeout=60)
    assert not reply.get("timeout"), reply
    assert reply.get("zarchive_error") and reply["exc"] in case.error.split("|"), reply
    assert reply["elapsed"] < 20 and reply["peak_mb"] < 100, reply
    reply = worker.call(op="verify", path=corpus_file(case.name), mem_mb=1024, timeout=60)
    assert reply.get("zarchive_error") or reply["ok"], reply  # a list of problems, or a ZArchiveError
    assert reply["elapsed"] < 20 and reply["peak_mb"] < 100, reply


@pytest.fixture(scope="module")
def numerous(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("numerous")
    out = {}
    for listed in (True, False):
        path = d / f"listed-{listed}.zarc"
        path.write_bytes(many_members(200_000, listed=listed))
        out[str(listed)] = str(path)
    return out


@pytest.mark.parametrize("listed", [True, False], ids=["listed-succeeds", "unlisted-fails"])
def test_hundreds_of_thousands_of_members(worker: Worker, numerous: dict[str, str], listed: bool) -> None:
    """200,000 tiny members: read (listed in the metadata) or refused (not listed), in bounded time and
    memory (about 0.5-1 KB per member: the archive itself is 190 bytes per member)."""
    reply = worker.call(op="read", path=numerous[str(listed)], mem_mb=2048, timeout=120, verify=False)
    assert not reply.get("timeout"), reply
    if listed:
        assert reply["ok"], reply
    else:
        assert reply["exc"] == "UnsafeArchiveError" and "not listed" in reply["msg"], reply
    assert reply["peak_mb"] < 600, reply
    print(f"200k members, listed={listed}: {reply['elapsed']:.1f}s, peak {reply['peak_mb']:.0f} MB")


# --- extraction stays inside its directory ------------------------------------------------------------------
def test_extract_never_writes_outside(worker: Worker, tmp_path: Path) -> None:
    """`zarchive extract` (the CLI, in a child process) refuses every traversal name; nothing appears
    outside the destination, and the valid file extracts inside it."""
    root = tmp_path / "a" / "b"
    root.mkdir(parents=True)
    names = [c.name for c in ERROR_CASES if c.name.startswith(("name_", "duplicate_"))]
    for name in names:
        dest = root / "out" / name
        reply = worker.call(op="extract", path=corpus_file(name), dest=str(dest), timeout=60)
        assert reply["ok"] and reply["rc"] not in (0, None), reply
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == [], written
    reply = worker.call(op="extract", path=corpus_file("valid"), dest=str(root / "ok"), timeout=60)
    assert reply.get("rc") == 0, reply
    assert sorted(p.name for p in (root / "ok").iterdir()) == [
        "arr.npy",
        "blob.bin",
        "lst.jsonl",
        "manifest.json",
        "metadata.json",
        "tensors.safetensors",
    ]
    assert all(p.is_relative_to(root / "ok") for p in tmp_path.rglob("*") if p.is_file())


# --- damage anywhere in real archives -----------------------------------------------------------------------
def _rich_object() -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    return {
        "model": {"w": torch.randn(64, 32, generator=g), "b": torch.zeros(32, dtype=torch.bfloat16)},
        "arr": np.arange(2000, dtype=np.int64).reshape(40, 50),
        "noise": np.random.default_rng(0).standard_normal(1000).astype(np.float32),
        "words": [f"w{i}" for i in range(400)],
        "mixed": [1, 2.5, None, "x", {"k": (1, 2)}] * 60,
        "blob": bytes(range(256)) * 20,
        "small": {1: "a", (2, 3): {4.5, 6}},
        "nan": float("nan"),
    }


@pytest.fixture(scope="module")
def real_archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[bytes, Any]]:
    d = tmp_path_factory.mktemp("real")
    out = {}
    for label, settings in {"zstd": {}, "plain": {"compress": False}}.items():
        path = d / f"{label}.zarc"
        zarchive.save(_rich_object(), path, **settings)
        out[label] = (path.read_bytes(), zarchive.read(path))
    return out


def read_damaged(data: bytes, original: Any, same: Callable[[Any, Any], None]) -> str:
    """Read damaged bytes: a ZArchiveError, or exactly the original value (damage to bytes nothing
    reads, such as zip timestamps or padding). Also verify() and lazy browsing. Returns the outcome."""
    try:
        loaded = zarchive.read(data)
    except zarchive.ZArchiveError:
        outcome = "error"
    else:
        same(original, loaded)
        outcome = "same"
    return outcome


@pytest.mark.parametrize("label", ["zstd", "plain"])
def test_truncated_at_many_points(
    real_archives: dict[str, tuple[bytes, Any]], label: str, same: Any, tmp_path: Path
) -> None:
    data, original = real_archives[label]
    rng = random.Random(1)
    cuts = sorted({*range(200), *range(len(data) - 300, len(data)), *rng.sample(range(len(data)), 300)})
    outcomes = [read_damaged(data[:cut], original, same) for cut in cuts]
    assert outcomes.count("error") == len(cuts)  # a zip read from its end cannot survive losing bytes
    path = tmp_path / "cut.zarc"
    for cut in cuts[::25]:  # the same through a mapped file, plus verify() and browsing
        path.write_bytes(data[:cut])
        with pytest.raises(zarchive.ZArchiveError):
            zarchive.read(path)
        browse(str(path))


@pytest.mark.parametrize("label", ["zstd", "plain"])
def test_flipped_bytes_anywhere(real_archives: dict[str, tuple[bytes, Any]], label: str, same: Any) -> None:
    """500 single-byte flips spread over the whole file (all over the headers, JSON and data)."""
    data, original = real_archives[label]
    rng = random.Random(2)
    positions = sorted(rng.sample(range(len(data)), 400) + list(range(len(data) - 100, len(data))))
    outcomes = []
    for pos in positions:
        damaged = bytearray(data)
        damaged[pos] ^= rng.choice([0x01, 0x80, 0xFF, rng.randrange(1, 256)])
        outcomes.append(read_damaged(bytes(damaged), original, same))
    assert outcomes.count("error") > len(positions) * 0.7, outcomes.count("error")


@pytest.mark.parametrize("label", ["zstd", "plain"])
def test_flips_are_caught_by_verify(real_archives: dict[str, tuple[bytes, Any]], label: str, tmp_path: Path) -> None:
    """A flip inside a member's data is reported by verify() (or the archive does not open at all)."""
    data, _ = real_archives[label]
    path = tmp_path / "x.zarc"
    path.write_bytes(data)
    with zarchive.open(path) as arc:
        spans = [(arc._reader.zip.members[n].data_offset, arc._reader.zip.members[n].size) for n in arc.members]
    rng = random.Random(3)
    for offset, size in spans:
        if size == 0:
            continue
        damaged = bytearray(data)
        damaged[offset + rng.randrange(size)] ^= 0x10
        path.write_bytes(bytes(damaged))
        try:
            problems = zarchive.verify(path)
        except zarchive.ZArchiveError:
            continue
        assert len(problems) > 0, f"a flip in the member at {offset} went unnoticed"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_audit_and_trusted_reads_raise_only_zarchive_errors(case: Case) -> None:
    """audit() lists or refuses, and a read with trusted=() refuses every class the file names
    before building anything: neither lets another exception out, on any corpus file."""
    path = corpus_file(case.name)
    try:
        found = zarchive.audit(path)
        assert isinstance(found, dict) and all(isinstance(v, list) for v in found.values())
    except zarchive.ZArchiveError:
        pass
    try:
        zarchive.read(path, trusted=())
    except zarchive.UntrustedTypeError as e:
        assert e.path is not None and ":" in e.message  # names where, and which class
    except zarchive.ZArchiveError:
        pass
