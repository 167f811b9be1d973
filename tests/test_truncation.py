"""Another process truncates an archive that is being read.

Linux takes every page past a file's new end out of every mapping of it (copied-on-write pages of a
private mapping included), and touching one raises SIGBUS. So each scenario runs in a child
process: it reads values, has a grandchild truncate the file (os.truncate: another process), then
touches the values and fetches more. By default (values are copies: `mmap=False` is the default) the child must survive with the
values intact, and every fetch after the truncation must raise a ZArchiveError; with mmap=True a
fetch after the truncation still raises a ZArchiveError, but values read before it are views of the
file, and touching them kills the process (the documented cost of zero-copy).
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from pathlib import Path

import forkrun
import numpy as np
import pytest
import torch

import zarchive
from zarchive.errors import IntegrityError

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

CHILD = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import torch
    import zarchive
    from zarchive.errors import IntegrityError, ZArchiveError

    path, scenario, verify, mmap = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
    # "default": the settings a user gets without asking (module functions, ZArchive())
    za = zarchive.ZArchive(verify=verify) if mmap == "default" else zarchive.ZArchive(verify=verify, mmap=mmap == "1")
    expected = np.load(path + ".expected.npy")

    def truncate_elsewhere(size):
        pid = os.fork()
        if pid == 0:
            os.truncate(path, size)
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        assert os.path.getsize(path) == size

    def as_np(v):
        return v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v)

    if scenario == "lazy":
        arc = za.open(path)
        got = [arc["t0"], arc["a0"]]
        truncate_elsewhere(4096)
        for key in ("t1", "a1"):
            try:
                arc[key]
            except ZArchiveError as e:
                print("fetch refused:", "IntegrityError" if isinstance(e, IntegrityError) else repr(e), flush=True)
            else:
                raise SystemExit("a fetch after the truncation returned a value")
        arc.close()
    elif scenario == "numpy":
        arc = za.open(path, tensors="numpy")
        got = [arc["t0"], arc["a0"]]
        truncate_elsewhere(4096)
        arc.close()
    elif scenario == "full":
        value = zarchive.read(path, verify=verify) if mmap == "default" else za.read(path)
        got = [value["t0"], value["a0"]]
        truncate_elsewhere(0)
    elif scenario == "model":
        import models_a

        model = models_a.Model.read(path, za=za)
        got = [model.layers[0].weight.detach(), model.layers[1].weight.detach()]
        truncate_elsewhere(0)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    total = sum(float(as_np(v).astype(np.float64).sum()) for v in got)
    assert abs(total - float(expected)) < 1e-3 * max(1.0, abs(float(expected))), (total, float(expected))
    print("intact", flush=True)
    """
)


def _archive(tmp_path: Path, scenario: str) -> Path:
    path = tmp_path / "v.zarc"
    if scenario == "model":
        import models_a

        model = models_a.Model(models_a.Config(d_in=512, d_hidden=1024))
        with torch.no_grad():
            for p in model.parameters():
                p.normal_()
        zarchive.save(model, path)
        total = float(model.layers[0].weight.detach().double().sum() + model.layers[1].weight.detach().double().sum())
    else:
        rng = np.random.default_rng(0)
        obj = {
            "t0": torch.from_numpy(rng.standard_normal((512, 512), dtype=np.float32)),
            "a0": rng.standard_normal((256, 512)),
            "t1": torch.from_numpy(rng.standard_normal((512, 512), dtype=np.float32)),
            "a1": rng.standard_normal((256, 512)),
        }
        zarchive.save(obj, path, compress=False)
        total = float(obj["t0"].double().sum() + obj["a0"].sum())
    np.save(str(path) + ".expected.npy", np.float64(total))
    return path


def _run(path: Path, scenario: str, verify: bool, mmap: bool | None) -> subprocess.CompletedProcess[str]:
    """mmap=None: the default settings. The child is a fork of tests/forkrun.py's server (a process of
    its own, as `python -c` would start, without importing torch again)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    args = ["-c", CHILD, str(path), scenario, str(int(verify)), "default" if mmap is None else str(int(mmap))]
    return forkrun.run(args, timeout=120, env=env, cwd=ROOT)


@pytest.mark.parametrize("mmap", [None, False], ids=["default", "mmap-off"])
@pytest.mark.parametrize("verify", [True, False], ids=["verified", "verify-off"])
@pytest.mark.parametrize("scenario", ["lazy", "numpy", "full", "model"])
def test_values_survive_truncation_by_another_process(
    tmp_path: Path, scenario: str, verify: bool, mmap: bool | None
) -> None:
    """The default settings (and mmap=False) give values that another process cannot take away."""
    path = _archive(tmp_path, scenario)
    got = _run(path, scenario, verify, mmap=mmap)
    assert got.returncode == 0, (got.returncode, got.stdout, got.stderr[-3000:])
    assert got.stdout.splitlines()[-1] == "intact"
    if scenario == "lazy":  # both fetches after the truncation were refused with a ZArchiveError
        assert got.stdout.count("fetch refused: IntegrityError") == 2, got.stdout


@pytest.mark.skipif(not hasattr(signal, "SIGBUS"), reason="SIGBUS is a POSIX signal")
@pytest.mark.parametrize("verify", [True, False], ids=["verified", "verify-off"])
def test_mmap_mode_refuses_fetches_after_truncation_but_mapped_values_die(tmp_path: Path, verify: bool) -> None:
    """mmap=True: fetches after the truncation raise (the size is checked first), never return bytes
    past the file's end; the values read before it were views of the file and cannot survive."""
    path = _archive(tmp_path, "lazy")
    got = _run(path, "lazy", verify, mmap=True)
    assert got.stdout.count("fetch refused: IntegrityError") == 2, (got.stdout, got.stderr[-3000:])
    assert got.returncode == -signal.SIGBUS, (got.returncode, got.stdout, got.stderr[-3000:])


def _sample_archive(tmp_path: Path) -> Path:
    path = tmp_path / "s.zarc"
    zarchive.save({"w": np.arange(300_000, dtype=np.float32), "b": np.ones(1000)}, path, compress=False)
    return path


@pytest.mark.parametrize("mmap", [False, True], ids=["copy", "mmap"])
def test_verify_of_a_truncated_local_file_raises_an_integrity_error(tmp_path: Path, mmap: bool) -> None:
    path = _sample_archive(tmp_path)
    with zarchive.ZArchive(verify=False, mmap=mmap).open(path) as arc:
        assert arc.verify() == []
        os.truncate(path, 4096)
        with pytest.raises(IntegrityError, match="truncated"):
            arc.verify()


def test_full_read_of_a_file_truncated_after_opening_raises(tmp_path: Path) -> None:
    path = _sample_archive(tmp_path)
    for verify in (True, False):
        with zarchive.ZArchive(verify=verify).open(path) as arc:
            os.truncate(path, os.path.getsize(path) // 2)
            with pytest.raises(IntegrityError, match="truncated"):
                arc.load()
        path = _sample_archive(tmp_path)


def test_verify_of_a_shrinking_file_object_raises_an_integrity_error(tmp_path: Path) -> None:
    """An open file object (FileSource: what fsspec files are read through) that shrinks while open."""
    path = _sample_archive(tmp_path)
    with open(path, "rb") as f, zarchive.open(f, verify=False) as arc:
        os.truncate(path, 4096)
        with pytest.raises(IntegrityError, match="short read"):
            arc.verify()


def test_verify_of_a_shrinking_fsspec_file_raises_an_integrity_error(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    url = "memory://trunc/s.zarc"
    data = _sample_archive(tmp_path).read_bytes()
    fs = fsspec.filesystem("memory")
    with fs.open(url, "wb") as f:
        f.write(data)
    try:
        with zarchive.open(url, verify=False) as arc:
            fs.store["/trunc/s.zarc"].truncate(4096)  # the very file object the reader holds
            with pytest.raises(IntegrityError, match="short read"):
                arc.verify()
    finally:
        fs.rm(url)
