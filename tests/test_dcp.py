"""zarchive.dcp in one process: dcp.save/dcp.load through ZArchiveWriter/ZArchiveReader (no_dist),
non-tensor values without pickle, the view of a checkpoint directory, the command line on it, and
hostile or damaged checkpoints refused with ZArchiveErrors. The multi-rank runs are in
test_dcp_dist.py."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import forkrun
import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

import zarchive
from zarchive.dcp import ZArchiveReader, ZArchiveWriter
from zarchive.errors import (
    FormatError,
    IntegrityError,
    MemberNotFoundError,
    UntrustedTypeError,
    VersionError,
    ZArchiveError,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # DCP warns that no process group is set up


@dataclasses.dataclass
class TrainConfig:
    lr: float = 0.1
    name: str = "run"
    layers: tuple[int, ...] = (2, 3)


def state() -> dict[str, Any]:
    return {
        "model": {
            "w": torch.randn(4, 3, generator=torch.Generator().manual_seed(0)),
            "b": torch.tensor([1.5, float("nan")]),
        },
        "step": 5,
        "config": TrainConfig(),
        "rng": torch.get_rng_state(),
        "notes": ["a", {"k": None}],
    }


def blank() -> dict[str, Any]:
    return {
        "model": {"w": torch.zeros(4, 3), "b": torch.zeros(2)},
        "step": 0,
        "config": TrainConfig(lr=0.0),
        "rng": torch.zeros_like(torch.get_rng_state()),
        "notes": ["", {"k": 0}],  # DCP loads the keys the target has: the same structure
    }


def save(path: Path, value: dict[str, Any] | None = None) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state() if value is None else value, storage_writer=ZArchiveWriter(path), no_dist=True)
    return path


def load(path: Path, target: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    target = blank() if target is None else target
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(target, storage_reader=ZArchiveReader(path), no_dist=True, **kw)
    return target


def failure(info: pytest.ExceptionInfo[CheckpointException]) -> BaseException:
    """The exception DCP wrapped (its first rank's): read_metadata's error is replaced by an
    AssertionError carrying its message, read_data's is kept as it is."""
    return next(iter(info.value.failures.values()))[0]


def bits(t: Any) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def test_round_trip_bitwise_with_non_tensor_values(tmp_path: Path) -> None:
    out = load(save(tmp_path / "ck"))
    want = state()
    for key in ("w", "b"):
        assert bits(out["model"][key]) == bits(want["model"][key])  # NaN included
    assert out["step"] == 5 and out["config"] == TrainConfig() and out["notes"] == ["a", {"k": None}]
    assert isinstance(out["config"].layers, tuple)  # through the handler chain: types kept
    assert bits(out["rng"]) == bits(want["rng"])


def test_no_torch_save_or_load_of_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DCP's default planners pickle non-tensor values (torch.save on save, torch.load with
    weights_only=False on load); through ZArchiveWriter/Reader neither is ever called."""
    calls: list[str] = []

    def refuse(name: str) -> Callable[..., Any]:
        def spy(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise AssertionError(f"{name} called")

        return spy

    monkeypatch.setattr(torch, "save", refuse("torch.save"))
    monkeypatch.setattr(torch, "load", refuse("torch.load"))
    out = load(save(tmp_path / "ck"))
    assert out["config"] == TrainConfig() and calls == []
    for name in os.listdir(tmp_path / "ck"):  # every file is a zarchive archive: no pickle anywhere
        with zarchive.open(tmp_path / "ck" / name) as arc:
            assert arc.verify()


def test_planner_that_wants_bytes_is_refused(tmp_path: Path) -> None:
    class BytesPlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: Any) -> None:
            raise AssertionError("never handed bytes")

    with pytest.raises(CheckpointException) as info:
        load(save(tmp_path / "ck"), planner=BytesPlanner())
    assert isinstance(failure(info), ZArchiveError)


def test_view_of_the_directory(tmp_path: Path) -> None:
    path = save(tmp_path / "ck")
    with zarchive.open(path) as arc:
        assert sorted(arc.keys()) == ["config", "model", "notes", "rng", "step"]
        assert arc.keys("model") == ["w", "b"] and "model/w" in arc and "model/x" not in arc
        assert bits(arc["model/w"]) == bits(state()["model"]["w"])
        assert arc["config"] == TrainConfig() and arc["notes/1/k"] is None
        whole = arc.load()
        assert whole["step"] == 5 and whole["notes"] == ["a", {"k": None}]
        assert "tensor float32 [4, 3] in 1 chunk" in arc.summary("model/w")
        assert arc.verify() and arc.verify().members > 2
    assert zarchive.read(path)["config"] == TrainConfig()


def test_trusted_applies_to_values_and_the_index_is_plain_json(tmp_path: Path) -> None:
    path = save(tmp_path / "ck")
    with zarchive.open(path, trusted=[]) as arc:
        assert arc["step"] == 5
        with pytest.raises(UntrustedTypeError):
            arc["config"]
    with zarchive.open(path, trusted=[TrainConfig]) as arc:
        assert arc["config"] == TrainConfig()
    rewrite_index(path, lambda doc: doc.__setitem__("note", TrainConfig()))  # a class in the index
    with pytest.raises(UntrustedTypeError):
        zarchive.open(path)


def test_a_new_save_replaces_the_old_and_removes_its_shards(tmp_path: Path) -> None:
    path = save(tmp_path / "ck")
    first = sorted(os.listdir(path))
    save(path, {"step": 6})
    second = sorted(os.listdir(path))
    assert len(second) == 2 and not set(first) & set(second) - {"index.zarc"}
    assert load(path, {"step": 0})["step"] == 6


def test_filesystem_writer_reuses_its_names_and_ours_does_not(tmp_path: Path) -> None:
    """Why a killed save cannot hurt ours: DCP's FileSystemWriter writes every save's data to the same
    file names (over the previous save's, whose .metadata stays until the new one is written); every
    save of ours writes new shards and only then replaces the index."""
    names = []
    for step in (1, 2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save({"w": torch.full((4,), float(step))}, storage_writer=dcp.FileSystemWriter(tmp_path / "fs"),
                     no_dist=True)  # fmt: skip
        names.append(sorted(p.name for p in (tmp_path / "fs").glob("*.distcp")))
        save(tmp_path / "ours", {"w": torch.full((4,), float(step))})
        names.append(sorted(p.name for p in (tmp_path / "ours").glob("shard-*")))
    assert names[0] == names[2]  # FileSystemWriter: the same data file, rewritten
    assert not set(names[1]) & set(names[3])  # ours: new shards, the old ones removed after the commit


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return forkrun.cli(*args, timeout=120)  # a process of its own, forked from a server that imported torch


def test_command_line(tmp_path: Path) -> None:
    path = str(save(tmp_path / "ck", {**state(), "config": {"lr": 0.1}}))
    ls = cli("ls", path)
    assert ls.returncode == 0 and "index.zarc" in ls.stdout and "/model/w" in ls.stdout
    show = cli("show", path)
    assert (
        show.returncode == 0 and "w  tensor float32 [4, 3] in 1 chunk" in show.stdout and "step  int 5" in show.stdout
    )
    assert cli("verify", path).returncode == 0
    out = tmp_path / "one.zarc"
    conv = cli("convert", path, str(out))
    assert conv.returncode == 0, conv.stderr
    one = zarchive.read(out)
    assert bits(one["model"]["w"]) == bits(state()["model"]["w"]) and one["config"] == {"lr": 0.1}
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("ls", str(empty)).returncode == 2


# --- hostile and damaged checkpoints ---
def rewrite_index(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    doc = zarchive.read(path / "index.zarc")
    edit(doc)
    zarchive.save(doc, path / "index.zarc")


def tensor(doc: dict[str, Any], fqn: str) -> dict[str, Any]:
    return next(t for t in doc["tensors"] if t["fqn"] == fqn)


def _lying_offsets(doc: dict[str, Any]) -> None:
    tensor(doc, "model.w")["chunks"][0][2] = [1, 0]


def _chunk_in_unlisted_shard(doc: dict[str, Any]) -> None:
    tensor(doc, "model.w")["chunks"][0][0] = 7


def _key_twice(doc: dict[str, Any]) -> None:
    doc["tensors"].append(dict(tensor(doc, "model.w")))


def _same_path_twice(doc: dict[str, Any]) -> None:
    doc["tensors"].append({**tensor(doc, "model.w"), "fqn": "other"})


def _overlapping_chunks(doc: dict[str, Any]) -> None:
    t = tensor(doc, "model.w")
    shard, key = t["chunks"][0][:2]
    t["chunks"] = [[shard, key, [0, 0], [3, 3]], [shard, key, [2, 0], [1, 3]]]


def _gap(doc: dict[str, Any]) -> None:
    t = tensor(doc, "model.w")
    t["chunks"][0][3] = [2, 3]


def _shard_outside_directory(doc: dict[str, Any]) -> None:
    doc["shards"][0]["file"] = "../shard-0123456789abcdef-00000.zarc"


def _value_inside_tensor(doc: dict[str, Any]) -> None:
    doc["objects"][0]["path"] = ["model", "w", "x"]


def _unknown_dtype(doc: dict[str, Any]) -> None:
    tensor(doc, "model.w")["dtype"] = "object"


HOSTILE = {
    "lying chunk offsets": (_lying_offsets, "lies outside the tensor"),
    "chunk in a shard the index does not list": (_chunk_in_unlisted_shard, "does not list"),
    "key present twice": (_key_twice, "present twice"),
    "object path present twice": (_same_path_twice, "same object path"),
    "overlapping chunks": (_overlapping_chunks, "overlap"),
    "chunks leaving a gap": (_gap, "cover 6 of the tensor's 12"),
    "shard outside the directory": (_shard_outside_directory, "not a shard name"),
    "a value inside a tensor": (_value_inside_tensor, "would contain"),
    "unknown dtype": (_unknown_dtype, "unknown tensor dtype"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_index_refused(tmp_path: Path, case: str) -> None:
    edit, message = HOSTILE[case]
    path = save(tmp_path / "ck")
    rewrite_index(path, edit)
    with pytest.raises(FormatError, match=message):
        zarchive.open(path)
    with pytest.raises(FormatError, match=message):
        zarchive.verify(path)
    with pytest.raises(CheckpointException) as info:
        load(path)
    assert isinstance(failure(info), AssertionError) and message in str(failure(info))


def test_chunk_outside_its_shard(tmp_path: Path) -> None:
    """The index names a key the shard lacks, or one holding another tensor: refused when read."""
    path = save(tmp_path / "ck")
    rewrite_index(path, lambda doc: tensor(doc, "model.w")["chunks"][0].__setitem__(1, "model.nothing"))
    with zarchive.open(path) as arc:
        with pytest.raises(FormatError, match="which it lacks"):
            arc["model/w"]
        assert not arc.verify()
        assert bits(arc["model/b"]) == bits(state()["model"]["b"])  # the rest still reads
    with pytest.raises(CheckpointException) as info:
        load(path)
    assert isinstance(failure(info), FormatError)
    rewrite_index(path, lambda doc: tensor(doc, "model.w")["chunks"][0].__setitem__(1, "model.w@0,0"))

    def swap(doc: dict[str, Any]) -> None:  # (one stored chunk named twice is refused on open: test_dcp_gate)
        w, b = tensor(doc, "model.w")["chunks"][0], tensor(doc, "model.b")["chunks"][0]
        w[1], b[1] = b[1], w[1]

    rewrite_index(path, swap)
    with zarchive.open(path) as arc, pytest.raises(FormatError, match="is not a float32 tensor of shape"):
        arc["model/w"]


def test_missing_index(tmp_path: Path) -> None:
    path = save(tmp_path / "ck")
    (path / "index.zarc").unlink()
    with pytest.raises(FormatError, match="no index.zarc"):
        zarchive.open(path)
    with pytest.raises(FormatError):
        zarchive.verify(path)
    with pytest.raises(CheckpointException) as info:
        load(path)
    assert "no index.zarc" in str(failure(info))


def test_missing_shard(tmp_path: Path) -> None:
    path = save(tmp_path / "ck")
    next(path.glob("shard-*.zarc")).unlink()
    with pytest.raises(MemberNotFoundError, match="missing"):
        zarchive.open(path)
    with pytest.raises(CheckpointException) as info:
        load(path)
    assert "missing" in str(failure(info))


def test_damaged_shard(tmp_path: Path) -> None:
    """A flipped byte in one tensor's data: that tensor is refused (IntegrityError), and so is every
    tensor of its shard's member, which is under 1 MiB and so checked whole (format 1.6); verify
    reports it."""
    path = save(tmp_path / "ck")
    shard = next(path.glob("shard-*.zarc"))
    data = bytearray(shard.read_bytes())
    key = tensor(zarchive.read(path / "index.zarc"), "model.w")["chunks"][0][1]
    with zarchive.open(shard) as arc:
        w_bytes = bits(arc[f"tensors/{key}"])
    at = bytes(data).index(w_bytes)
    data[at + 5] ^= 0xFF
    shard.write_bytes(bytes(data))
    with zarchive.open(path) as arc:
        with pytest.raises(IntegrityError):
            arc["model/w"]
        with pytest.raises(IntegrityError):
            arc["model/b"]
    result = zarchive.verify(path)
    assert not result and any(shard.name in m for m in result.damaged_members)
    with pytest.raises(CheckpointException) as info:
        load(path)
    assert isinstance(failure(info), IntegrityError)


def test_shard_from_another_save_refused(tmp_path: Path) -> None:
    path = save(tmp_path / "ck")
    other = save(tmp_path / "other")
    mine, theirs = next(path.glob("shard-*.zarc")), next(other.glob("shard-*.zarc"))
    os.replace(theirs, mine)
    rewrite_index(path, lambda doc: doc["shards"][0].__setitem__("size", mine.stat().st_size))
    with zarchive.open(path) as arc, pytest.raises(FormatError, match="not a shard of the save"):
        arc["model/w"]


def test_newer_layout_and_budget(tmp_path: Path) -> None:
    path = save(tmp_path / "ck")
    with pytest.raises(ZArchiveError):  # the index is read under the same limits as any archive
        zarchive.open(path, max_nodes=20)
    rewrite_index(path, lambda doc: doc.__setitem__("layout_version", 2))
    with pytest.raises(VersionError):
        zarchive.open(path)


def test_weights_hash_of_a_sharded_checkpoint_is_that_of_one_archive(tmp_path: Path) -> None:
    """The weights hash (spec/weights-hash.md) does not depend on the layout: a DCP checkpoint's
    tensors, assembled from their chunks, hash as the same state dict saved in one archive."""
    path = save(tmp_path / "ck")
    zarchive.save(state()["model"], tmp_path / "one.zarc")
    with zarchive.open(path) as arc, zarchive.open(tmp_path / "one.zarc") as one:
        assert arc.weights_hash("model") == one.weights_hash()
        assert arc.weights_hash() != one.weights_hash()  # (the rng state is a tensor too)
    got = subprocess.run(
        [sys.executable, "-m", "zarchive", "hash", str(path), "model"], capture_output=True, text=True, check=False
    )
    assert got.returncode == 0 and one_hash(tmp_path / "one.zarc") in got.stdout, got.stderr


def one_hash(path: Path) -> str:
    with zarchive.open(path) as arc:
        return arc.weights_hash()
