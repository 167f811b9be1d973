"""zarchive.dcp on an S3 server (moto, tests/s3_server.py) under the real engine: `torchrun` with gloo
on CPU, the small FSDP2 transformer of tests/dcp_worker.py (tests/dcp_remote_worker.py). Saved at 2
ranks with dcp.save and dcp.async_save straight to s3://, loaded at 1 rank (resharded),
every tensor compared bitwise; a rank SIGKILLed as it uploads its shard, and the coordinator as it
uploads the index: the previous checkpoint is the one read, no index names a missing shard, and the
next save removes what the killed one left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)
pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

import zarchive
from tests.test_dcp_dist import reports, same

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
WORKER = Path(__file__).with_name("dcp_remote_worker.py")
ROOT = WORKER.parent.parent


def torchrun(
    s3: dict[str, Any], nproc: int, *args: str, check: bool = True, tmpdir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`tmpdir`: the ranks' temporary folder (TMPDIR), where an upload writes its file first."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "ZARCHIVE_S3_OPTIONS": json.dumps(s3["options"]),
           **({"TMPDIR": str(tmpdir)} if tmpdir is not None else {})}  # fmt: skip
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           str(WORKER), *args]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    if check and done.returncode != 0:
        pytest.fail(f"torchrun {args} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return done


def files(s3: dict[str, Any], url: str) -> list[str]:
    return sorted(p.rsplit("/", 1)[1] for p in s3["fs"].ls(url.removeprefix("s3://"), refresh=True))


@pytest.fixture(scope="module")
def saved(s3: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("dcp-s3")
    url = f"s3://{s3['bucket']}/{uuid.uuid4().hex[:8]}"
    torchrun(s3, 2, "save", str(out), url)
    assert len(reports(out, "save")) == 2
    return out, url


def test_saved_to_s3_layout_and_view(s3: dict[str, Any], saved: tuple[Path, str]) -> None:
    """One shard per rank and the index on the store, nothing else; the remote folder opens as the
    whole state dict, equal bitwise to the one gathered when saving, and verifies."""
    out, url = saved
    from tests.dcp_worker import RunConfig

    reference = zarchive.read(out / "reference.zarc", trusted=[RunConfig])
    for name in ("sync", "async"):  # async_save captured the state before the next training step changed it
        names = files(s3, f"{url}/{name}")
        assert names[0] == "index.zarc" and len(names) == 3 and all(n.startswith("shard-") for n in names[1:])
        with zarchive.open(f"{url}/{name}/", storage_options=s3["options"], trusted=[RunConfig]) as arc:
            assert arc.verify()
            same(arc["model/layers.0.linear1.weight"], reference["model"]["layers.0.linear1.weight"])
            same(arc.load(), reference)


def test_load_from_s3_resharded_to_one_rank(s3: dict[str, Any], saved: tuple[Path, str]) -> None:
    """Saved at 2 ranks, loaded at 1 from the store with dcp.load (each FSDP2 parameter put together
    from both ranks' shards): equal bitwise to the saved state, for the sync and the async save (the
    worker compares; loading at other world sizes is the same code as on disk: test_dcp_dist.py)."""
    out, url = saved
    torchrun(s3, 1, "load", str(out), url)
    found = reports(out, "load1")
    assert len(found) == 1 and found[0]["problems"] == [], found


@pytest.mark.parametrize("victim", [0, 1], ids=["coordinator-killed-at-index", "rank1-killed-at-shard"])
def test_rank_killed_mid_save_to_s3_keeps_previous(s3: dict[str, Any], tmp_path: Path, victim: int) -> None:
    """A rank SIGKILLed as it uploads its file (the coordinator: the index, every new shard already
    uploaded; rank 1: its shard): the store still holds the previous checkpoint, whole, and the index
    names only shards that are there; the next save removes the killed save's shards."""
    url = f"s3://{s3['bucket']}/{uuid.uuid4().hex[:8]}"
    (tmp_path / "tmp").mkdir()
    done = torchrun(s3, 2, "kill", str(tmp_path), url, str(victim), check=False, tmpdir=tmp_path / "tmp")
    assert done.returncode != 0 and "exitcode  : -9" in done.stderr, done.stderr[-3000:]  # killed by its SIGKILL
    # a SIGKILL runs no cleanup: the killed upload's local file stays in its TMPDIR (here, the test's own)
    assert len(list((tmp_path / "tmp").glob("*.zarc-upload"))) == 1
    target = f"{url}/killed"
    left = files(s3, target)
    from tests.dcp_worker import RunConfig

    v1 = zarchive.read(tmp_path / "v1.zarc", trusted=[RunConfig])
    options = s3["options"]
    with zarchive.open(target, storage_options=options, trusted=[RunConfig]) as arc:
        assert len(arc.index.shards) == 2 and set(arc.index.shards) <= set(left)
        if victim == 0:  # both new shards were uploaded, named by no index: only the index was missing
            assert len(left) == 5, left
        assert arc.verify()
        same(arc.load(), v1)
        assert arc["step"] == 1 and "only-on-rank0" not in arc
    import torch.distributed.checkpoint as dcp

    from zarchive.dcp import ZArchiveReader, ZArchiveWriter

    state = {"step": 0, "rng": torch.zeros(5, dtype=torch.long)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(state, storage_reader=ZArchiveReader(target, storage_options=options), no_dist=True)
        assert state["step"] == 1 and torch.equal(state["rng"], v1["rng"])
        dcp.save({"step": 3}, storage_writer=ZArchiveWriter(target, storage_options=options), no_dist=True)
    assert len(files(s3, target)) == 2  # the new index and shard: the old and the orphaned shards went
