"""Hostile sharded checkpoint directories (zarchive.dcp) through every entry point: each refused with
a ZArchiveError, or read, in time linear in the directory and within the read's budget.

- an index of thousands of chunks is checked in linear time (it took minutes: every chunk was compared
  with every other), by `zarchive.open`, `verify`, `zarchive ls` and `dcp.load`;
- one stored chunk used for several regions (by its key in the index, or by two keys of a shard that
  name the same stored bytes) is refused: a few KB would assemble a tensor of any size;
- the tensors a read assembles are charged to one budget (max_read_bytes) before they are allocated;
- a FIFO named like a shard or the index is refused at once, never opened.

Each hostile directory is crafted here (a few KB) and read in a child process under an address-space
limit and a time limit, generously set: the assertions are on how the read ended.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.checkpoint")

from rewrite import rewrite

import zarchive
from zarchive.dcp.index import LAYOUT, shard_name
from zarchive.errors import FormatError, UnsafeArchiveError

SAVE_ID = "0123456789abcdef"
SHARD = shard_name(SAVE_ID, 0)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # DCP warns that no process group is set up


def write_checkpoint(path: Path, tensors: list[dict[str, Any]], stored: dict[str, Any], **save: Any) -> Path:
    """A checkpoint directory: one shard holding `stored` under "tensors", and an index of `tensors`."""
    path.mkdir(exist_ok=True)
    zarchive.save({"save_id": SAVE_ID, "rank": 0, "tensors": stored, "objects": {}}, path / SHARD, **save)
    index = {
        "layout": LAYOUT, "layout_version": 1, "save_id": SAVE_ID,
        "shards": [{"file": SHARD, "rank": 0, "size": (path / SHARD).stat().st_size}],
        "tensors": tensors, "objects": [],
    }  # fmt: skip
    zarchive.save(index, path / "index.zarc")
    return path


def tensor_entry(fqn: str, shape: list[int], chunks: list[list[Any]]) -> dict[str, Any]:
    return {"fqn": fqn, "path": [fqn], "dtype": "float32", "shape": shape, "chunks": chunks}


CHILD = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import zarchive

def run(op, path, settings):
    if op == "open":
        with zarchive.ZArchive(**settings).open(path) as arc:
            return {"keys": arc.keys(), "limit": arc.budget.limit}
    if op == "read":
        value = zarchive.ZArchive(**settings).read(path)
        return {"sums": {k: float(v.double().sum()) for k, v in value.items()}}
    if op == "chunks":  # what ZArchiveReader.read_data reads for chunks it wants in part
        with zarchive.ZArchive(**settings).open(path) as arc:
            wanted = [(e, c) for e in arc.index.entries.values() for c in e.chunks]
            return {"sums": {k: float(v.double().sum()) for (_, k), v in arc.read_chunks(wanted).items()}}
    if op == "verify":
        return {"ok": bool(zarchive.verify(path))}
    if op == "ls":
        from zarchive.cli import main
        return {"rc": main(["ls", path])}
    if op == "load":
        import torch, torch.distributed.checkpoint as dcp
        from zarchive.dcp import ZArchiveReader
        target = {k: torch.full(v, -1.0) for k, v in settings.pop("target").items()}
        try:
            dcp.load(target, storage_reader=ZArchiveReader(path, **settings), no_dist=True)
        except dcp.api.CheckpointException as e:  # DCP wraps the error: report the one it holds
            raise next(iter(e.failures.values()))[0] from None
        return {"sums": {k: float(v.double().sum()) for k, v in target.items()}}

out = []
for op, settings in json.loads(sys.argv[2]):
    start = time.monotonic()
    try:
        reply = {"ok": True, **run(op, sys.argv[1], settings)}
    except BaseException as e:
        reply = {"ok": False, "exc": type(e).__name__, "msg": str(e)[:500],
                 "zarchive_error": isinstance(e, zarchive.ZArchiveError)}
    reply["op"], reply["seconds"] = op, time.monotonic() - start
    with open("/proc/self/status") as f:  # (this process's own peak: ru_maxrss keeps its parent's across exec)
        reply["peak_mb"] = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
    out.append(reply)
print(json.dumps(out))
"""


def in_child(path: Path, ops: list[tuple[str, dict[str, Any]]], *, timeout: float = 120) -> list[dict[str, Any]]:
    """Run `ops` on the directory in a child process limited to 4 GiB of address space; each reply
    says how the op ended, how long it took and the child's peak RSS so far. A time-out fails."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), json.dumps(ops)],
        capture_output=True, text=True, timeout=timeout, preexec_fn=limit, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_index_of_many_chunks_is_checked_in_linear_time(tmp_path: Path) -> None:
    """8,000 chunks of one row: every chunk was compared with every other (47-68 s per open); now
    the tiling check is linear, and so is finding each chunk in its shard."""
    n = 8000
    chunks = [[0, f"k{i}", [0, i], [1, 1]] for i in range(n)]
    stored = {f"k{i}": torch.tensor([[float(i)]]) for i in range(n)}
    path = write_checkpoint(tmp_path / "ck", [tensor_entry("w", [1, n], chunks)], stored)
    assert (path / "index.zarc").stat().st_size < 40_000
    ops: list[tuple[str, dict[str, Any]]] = [("open", {}), ("verify", {}), ("ls", {}), ("read", {})]
    ops.append(("load", {"target": {"w": [1, n]}}))
    replies = in_child(path, ops, timeout=240)  # (the old check: minutes for each)
    assert all(r["ok"] for r in replies), replies
    total = float(sum(range(n)))
    assert replies[3]["sums"] == {"w": total} and replies[4]["sums"] == {"w": total}
    assert replies[1]["ok"] and replies[2]["rc"] == 0
    assert max(r["seconds"] for r in replies) < 30, replies  # (about 1-5 s each; 47-68 s each before)


def test_one_stored_chunk_named_many_times_is_refused(tmp_path: Path) -> None:
    """A 20 KB directory naming one stored chunk (128 MiB of zeros, compressed) 16 times assembled a
    2 GiB tensor (or raised torch's RuntimeError): refused when the index is read."""
    width, uses = 1 << 25, 16
    chunks = [[0, "k", [i, 0], [1, width]] for i in range(uses)]
    path = write_checkpoint(
        tmp_path / "ck", [tensor_entry("w", [uses, width], chunks)], {"k": torch.zeros(1, width)},
        compress_weights=True,
    )  # fmt: skip
    assert sum(f.stat().st_size for f in path.iterdir()) < 40_000
    replies = in_child(path, [("open", {}), ("read", {}), ("verify", {}), ("load", {"target": {"w": [1, 1]}})])
    for r in replies:  # (DCP reports an error reading the index as an AssertionError with its message)
        assert not r["ok"] and r["exc"] == ("AssertionError" if r["op"] == "load" else "FormatError"), r
        assert "tensors/0/chunks/1" in r["msg"], r
        assert r["peak_mb"] < 1000, r


def test_two_keys_of_a_shard_naming_the_same_bytes_are_refused(tmp_path: Path) -> None:
    """Distinct keys in the index, but the shard's two nodes name one stored entry: refused when the
    shard is opened (the other tensors' chunks are not in it)."""
    stored = {"k0": torch.arange(4.0).reshape(1, 4), "k1": torch.ones(1, 4)}
    chunks = [[0, "k0", [0, 0], [1, 4]], [0, "k1", [1, 0], [1, 4]]]
    path = write_checkpoint(tmp_path / "ck", [tensor_entry("w", [2, 4], chunks)], stored, compress=False)

    def alias(manifest: dict[str, Any]) -> None:
        nodes = manifest["root"]["tensors"]
        nodes["k1"]["key"] = nodes["k0"]["key"]

    rewrite(path / SHARD, tmp_path / "aliased.zarc", alias)
    os.replace(tmp_path / "aliased.zarc", path / SHARD)
    index = zarchive.read(path / "index.zarc")
    index["shards"][0]["size"] = (path / SHARD).stat().st_size
    zarchive.save(index, path / "index.zarc")
    with zarchive.open(path) as arc:
        with pytest.raises(FormatError, match="in the same bytes"):
            arc["w"]
        problems = arc.verify()
        assert not problems and any("in the same bytes" in p for _, p in problems)


def test_assembled_tensors_are_charged_to_the_budget_first(tmp_path: Path) -> None:
    """A 256 MiB tensor stored compressed in a few KB: read with max_read_bytes=50 MB, it is refused
    before anything is allocated, through zarchive.read, zarchive.open and dcp.load."""
    width = 1 << 26
    chunks = [[0, "k", [0, 0], [1, width]]]
    path = write_checkpoint(
        tmp_path / "ck", [tensor_entry("w", [1, width], chunks)], {"k": torch.zeros(1, width)},
        compress_weights=True,
    )  # fmt: skip
    limit = {"max_read_bytes": 50_000_000}
    replies = in_child(path, [("open", limit), ("read", limit), ("chunks", limit)])
    assert replies[0]["ok"] and replies[0]["limit"] == 50_000_000
    for r in replies[1:]:
        assert not r["ok"] and r["exc"] == "UnsafeArchiveError" and "max_read_bytes=50,000,000" in r["msg"], r
        assert r["peak_mb"] < 200, r  # (256 MiB never allocated)
    # dcp.load into a tensor of the caller's (its 256 MiB, and torch: ~530 MB): the stored chunk is not decoded
    load = in_child(path, [("load", {**limit, "target": {"w": [1, width]}})])[0]
    assert not load["ok"] and load["exc"] == "UnsafeArchiveError" and load["peak_mb"] < 700, load
    ok = in_child(path, [("read", {}), ("load", {"target": {"w": [1, width]}})])
    assert all(r["ok"] and r["sums"] == {"w": 0.0} for r in ok), ok


def test_one_budget_for_the_directory(tmp_path: Path) -> None:
    """The budget of the view is the read's: its JSON parsed (the index, each shard opened) charged
    to it, and each shard opened with what it has left."""
    path = write_checkpoint(
        tmp_path / "ck", [tensor_entry("w", [2, 3], [[0, "k", [0, 0], [2, 3]]])], {"k": torch.ones(2, 3)}
    )
    with zarchive.ZArchive(max_read_bytes=10_000_000).open(path) as arc:
        assert arc.budget.limit == 10_000_000
        opened = arc.budget.json_bytes
        assert opened > 0  # the index
        assert arc["w"].sum() == 6
        assert arc.budget.json_bytes > opened  # the shard's manifest and metadata
        assert arc.shard(SHARD).budget.limit <= 10_000_000 - opened
        assert arc.verify() and arc.audit() == {}
        parsed = arc.budget.json_bytes
    with zarchive.ZArchive(max_read_bytes=parsed + 47).open(path) as arc:  # (w: 24 bytes, and its chunk's)
        with pytest.raises(UnsafeArchiveError, match="over max_read_bytes="):
            arc["w"]
        assert arc.verify()
    with pytest.raises(UnsafeArchiveError, match="max_read_bytes=100 "):
        zarchive.ZArchive(max_read_bytes=100).open(path)
    # `zarchive convert DIR out.zarc --max-bytes N` reads the directory under that budget
    from zarchive.cli import main

    out = tmp_path / "one.zarc"
    assert main(["convert", str(path), str(out), "--max-bytes", str(parsed + 47)]) == 2 and not out.exists()
    assert main(["convert", str(path), str(out)]) == 0 and zarchive.read(out)["w"].sum() == 6


@pytest.mark.parametrize("name", [SHARD, "index.zarc"])
def test_a_fifo_in_place_of_a_file_is_refused_at_once(tmp_path: Path, name: str) -> None:
    path = write_checkpoint(
        tmp_path / "ck", [tensor_entry("w", [2, 3], [[0, "k", [0, 0], [2, 3]]])], {"k": torch.ones(2, 3)}
    )
    (path / name).unlink()
    os.mkfifo(path / name)
    replies = in_child(path, [("open", {}), ("verify", {}), ("ls", {}), ("load", {"target": {"w": [2, 3]}})])
    for r in replies[:2] + replies[3:]:
        assert not r["ok"] and "not a regular file" in r["msg"], r
        assert r["zarchive_error"] or r["op"] == "load" and r["exc"] == "AssertionError", r
    assert replies[2]["rc"] == 2
