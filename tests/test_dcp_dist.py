"""zarchive.dcp under the real engine: `torchrun` with gloo on CPU, a small transformer sharded with
FSDP2 and its AdamW state (tests/dcp_worker.py). Saved at 2 ranks (dcp.save, FileSystemWriter in the
same run, dcp.async_save on a process group of its own while training goes on), loaded at 1, 2, 3
and 4 ranks, every tensor compared bitwise; a rank killed while writing its shard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

import zarchive

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # DCP warns when no process group is set up

WORKER = Path(__file__).with_name("dcp_worker.py")
ROOT = WORKER.parent.parent


def torchrun(nproc: int, *args: str, check: bool = True, device: str = "cpu") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "ZARCHIVE_DCP_DEVICE": device}  # fmt: skip
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           str(WORKER), *args]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    if check and done.returncode != 0:
        pytest.fail(f"torchrun {args} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return done


def reports(out: Path, name: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob(f"{name}-rank*.json"))]


def same(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}/{i}")
    else:
        assert a == b, where


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dcp")
    torchrun(2, "save", str(out))
    assert len(reports(out, "save")) == 2
    return out


def test_saved_layout_and_view(saved: Path) -> None:
    """One shard per rank and the index; the directory opens as the whole state dict, equal to the
    one gathered in the saving run, and verifies."""
    names = sorted(os.listdir(saved / "zarc"))
    assert names[0] == "index.zarc" and len(names) == 3 and all(n.startswith("shard-") for n in names[1:])
    from tests.dcp_worker import RunConfig

    reference = zarchive.read(saved / "reference.zarc", trusted=[RunConfig])
    for name in ("zarc", "async"):  # async_save captured the state before the next training step changed it
        with zarchive.open(saved / name) as arc:
            assert arc.verify()
            assert set(arc.keys()) == {"model", "optim", "step", "config", "rng"}
            w = arc["model/layers.0.linear1.weight"]
            same(w, reference["model"]["layers.0.linear1.weight"])
            same(arc.load(), reference)
    assert zarchive.verify(saved / "zarc")


@pytest.mark.parametrize("nproc", [1, 2, 3, 4], ids=lambda n: f"load-at-{n}")
def test_load_at_other_world_sizes(saved: Path, nproc: int) -> None:
    """Saved at 2, loaded at 1, 2, 3 and 4: equal bitwise to FileSystemReader's load of the same
    run's FileSystemWriter checkpoint and to the state gathered when saving (the worker compares)."""
    torchrun(nproc, "load", str(saved))
    found = reports(saved, f"load{nproc}")
    assert len(found) == nproc
    assert all(r["problems"] == [] for r in found), found


needs_nccl = pytest.mark.skipif(
    not (torch.cuda.is_available() and dist.is_nccl_available()), reason="needs a CUDA device and NCCL"
)


@needs_nccl
def test_load_onto_gpus_over_nccl(saved: Path) -> None:
    """The checkpoint saved on CPU at 2 ranks, loaded into a model sharded over GPUs (one rank per
    GPU here) with NCCL: equal bitwise to FileSystemReader's load and to the saved state."""
    nproc = min(2, torch.cuda.device_count())
    torchrun(nproc, "load", str(saved), device="cuda")
    found = reports(saved, f"load{nproc}-cuda")
    assert len(found) == nproc and all(r["device"].startswith("cuda") for r in found), found
    assert all(r["problems"] == [] for r in found), found


@needs_nccl
def test_save_from_gpus_over_nccl_load_on_cpu(tmp_path: Path) -> None:
    """Saved from GPU shards over NCCL (sync and async), loaded on CPU at 2 ranks and back on the GPU."""
    nproc = min(2, torch.cuda.device_count())
    torchrun(nproc, "save", str(tmp_path), device="cuda")
    torchrun(2, "load", str(tmp_path))
    torchrun(nproc, "load", str(tmp_path), device="cuda")
    for name in ("load2", f"load{nproc}-cuda"):
        found = reports(tmp_path, name)
        assert found and all(r["problems"] == [] for r in found), (name, found)
    with zarchive.open(tmp_path / "zarc") as arc:  # one view of the GPU-written shards, read to the host
        assert arc["model/embed.weight"].device.type == "cpu" and arc.verify()


@pytest.mark.parametrize("victim", [0, 1], ids=["coordinator-killed", "rank1-killed"])
def test_rank_killed_mid_save_keeps_previous(tmp_path: Path, victim: int) -> None:
    """A rank SIGKILLed while writing its shard: the previous checkpoint is still the one read, and
    the next save cleans up what the killed one left."""
    done = torchrun(2, "kill", str(tmp_path), str(victim), check=False)
    assert done.returncode != 0
    target = tmp_path / "killed"
    left = sorted(os.listdir(target))
    assert len(left) > 3, left  # the killed save left files: a temporary shard (killed mid-write) or a shard
    from tests.dcp_worker import RunConfig

    v1 = zarchive.read(tmp_path / "v1.zarc", trusted=[RunConfig])
    assert zarchive.verify(target)
    with zarchive.open(target) as arc:
        same(arc.load(), v1)
        assert arc["step"] == 1 and "only-on-rank0" not in arc
    import torch.distributed.checkpoint as dcp

    from zarchive.dcp import ZArchiveReader, ZArchiveWriter

    state = {"step": 0, "rng": torch.zeros(5, dtype=torch.long)}
    dcp.load(state, storage_reader=ZArchiveReader(target), no_dist=True)
    assert state["step"] == 1 and torch.equal(state["rng"], v1["rng"])
    dcp.save({"step": 3}, storage_writer=ZArchiveWriter(target), no_dist=True)
    assert len(os.listdir(target)) == 2  # the new index and shard: old shards and the dead temp file went
