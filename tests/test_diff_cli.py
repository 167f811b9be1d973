"""`zarchive diff` in processes of its own (`python -m zarchive`, forked by tests/forkrun.py): the table,
--json, --only-changed, the tolerance, exit statuses (0 unchanged, 1 changed, 2 unreadable); and a
property test of diff_archives."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import forkrun
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.inspection.diff import diff_archives

ROOT = Path(__file__).resolve().parent.parent


def zarchive_cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return forkrun.run(
        ["-m", "zarchive", *map(str, args)], timeout=120, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("diffcli")
    torch.manual_seed(0)
    w = torch.randn(8, 4)
    zarchive.save({"w": w, "b": torch.zeros(4), "config": {"lr": 0.1, "name": "a"}}, d / "a.zarc")
    zarchive.save({"w": w, "b": torch.zeros(4), "config": {"lr": 0.1, "name": "a"}}, d / "same.zarc")
    zarchive.save({"w": w + 1e-5, "b": torch.zeros(4), "config": {"lr": 0.1, "name": "a"}}, d / "nudged.zarc")
    zarchive.save({"w": w, "b": torch.zeros(5), "config": {"lr": 0.2, "name": "a"}}, d / "other.zarc")
    torch.save({"w": w, "b": torch.zeros(4)}, d / "weights.pt")
    zarchive.save({"w": w, "b": torch.zeros(4)}, d / "weights.zarc")
    (d / "junk.zarc").write_bytes(b"not an archive at all")
    return d


def test_unchanged_exits_0(files: Path) -> None:
    done = zarchive_cli("diff", "a.zarc", "same.zarc", cwd=files)
    assert done.returncode == 0, done.stderr
    assert "no changes" in done.stdout and "w" in done.stdout


def test_pt_and_zarc_exit_0(files: Path) -> None:
    done = zarchive_cli("diff", "weights.pt", "weights.zarc", cwd=files)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "torch.save" in done.stdout  # the metadata side by side


def test_changed_exits_1_with_the_table(files: Path) -> None:
    done = zarchive_cli("diff", "a.zarc", "other.zarc", cwd=files)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.split()[:2] == ["b", "reshaped"] for line in lines), done.stdout
    assert any("config/lr" in line and "0.1" in line and "0.2" in line for line in lines), done.stdout


def test_tolerance_decides_the_exit_status(files: Path) -> None:
    assert zarchive_cli("diff", "a.zarc", "nudged.zarc", cwd=files).returncode == 1
    assert zarchive_cli("diff", "--atol", "1e-4", "a.zarc", "nudged.zarc", cwd=files).returncode == 0
    assert zarchive_cli("diff", "--rtol", "1e-3", "a.zarc", "nudged.zarc", cwd=files).returncode == 0
    assert zarchive_cli("diff", "--rtol", "1e-9", "a.zarc", "nudged.zarc", cwd=files).returncode == 1


def test_json_parses(files: Path) -> None:
    done = zarchive_cli("diff", "--json", "a.zarc", "other.zarc", cwd=files)
    assert done.returncode == 1, done.stderr
    out = json.loads(done.stdout)
    assert out["changed"] is True and out["counts"]["reshaped"] == 1
    by_path = {t["path"]: t for t in out["tensors"]}
    assert by_path["b"]["shape_a"] == [4] and by_path["b"]["shape_b"] == [5]
    assert by_path["w"]["status"] == "same"
    only = json.loads(zarchive_cli("diff", "--json", "--only-changed", "a.zarc", "other.zarc", cwd=files).stdout)
    assert [t["path"] for t in only["tensors"]] == ["b"]
    assert [v["path"] for v in only["values"]] == ["config/lr"]


def test_only_changed_table(files: Path) -> None:
    done = zarchive_cli("diff", "--only-changed", "a.zarc", "other.zarc", cwd=files)
    assert done.returncode == 1
    assert "config/name" not in done.stdout and "config/lr" in done.stdout


@pytest.mark.parametrize(
    ("args", "named"),
    [(["a.zarc", "missing.zarc"], "missing.zarc"), (["junk.zarc", "a.zarc"], "junk.zarc"),
     (["--rtol", "-1", "a.zarc", "a.zarc"], "--rtol")],
    ids=["missing", "not-an-archive", "bad-tolerance"],
)  # fmt: skip
def test_errors_exit_2(files: Path, args: list[str], named: str) -> None:
    done = zarchive_cli("diff", *args, cwd=files)
    assert done.returncode == 2, done.stdout + done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr


def test_help_lists_diff(files: Path) -> None:
    done = zarchive_cli("--help", cwd=files)
    assert "diff" in done.stdout
    done = zarchive_cli("diff", "--help", cwd=files)
    assert "exit status" in done.stdout


# --- the property: an archive equals itself; a perturbation is found ---------------------------------------
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool]
shapes = st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple)


@st.composite
def state_dicts(draw: st.DrawFn) -> dict[str, torch.Tensor]:
    n = draw(st.integers(1, 4))
    out = {}
    for i in range(n):
        shape = draw(shapes)
        dtype = draw(st.sampled_from(DTYPES))
        seed = draw(st.integers(0, 2**16))
        g = torch.Generator().manual_seed(seed)
        t = torch.randn(shape, generator=g) * 10
        if draw(st.booleans()) and t.numel():
            t.view(-1)[0] = float("nan")
        out[f"layer{i}.weight"] = t.to(dtype)
    return out


@settings(max_examples=25, deadline=None)
@given(sd=state_dicts(), data=st.data())
def test_property_self_same_and_perturbation_found(tmp_path_factory: pytest.TempPathFactory,
                                                   sd: dict[str, torch.Tensor], data: st.DataObject) -> None:  # fmt: skip
    d = tmp_path_factory.mktemp("prop")
    zarchive.save(sd, d / "a.zarc")
    for checksums in (True, False):
        same = diff_archives(d / "a.zarc", d / "a.zarc", checksums=checksums)
        assert {t.status for t in same.tensors} == {"same"} and not same.changed()
    nonempty = [k for k, v in sd.items() if v.numel()]
    if not nonempty:
        return
    key = data.draw(st.sampled_from(nonempty))
    index = data.draw(st.integers(0, sd[key].numel() - 1))
    changed = dict(sd)
    t = sd[key].clone()
    flat = t.view(-1)
    flat[index] = (~flat[index]) if t.dtype == torch.bool else (0 if bool(flat[index] != 0) else 1)
    changed[key] = t
    zarchive.save(changed, d / "b.zarc")
    diff = diff_archives(d / "a.zarc", d / "b.zarc")
    by_path = {c.path: c for c in diff.tensors}
    assert by_path[key].status == "changed" and by_path[key].differing == 1, by_path[key]
    assert diff.changed()
    assert [p for p, c in by_path.items() if c.status != "same"] == [key]


def test_numpy_npz_against_zarc(tmp_path: Path) -> None:
    arrays = {"x": np.arange(12.0).reshape(3, 4), "y": np.arange(5, dtype=np.int32)}
    np.savez(tmp_path / "a.npz", **arrays)
    zarchive.save(arrays, tmp_path / "a.zarc")
    d = diff_archives(tmp_path / "a.npz", tmp_path / "a.zarc")
    assert sorted(t.path for t in d.tensors) == ["x", "y"] and not d.changed(), d.render()


def test_zanj_against_zarc(tmp_path: Path) -> None:
    zanj = pytest.importorskip("zanj")
    value = {"x": np.arange(300.0), "t": torch.arange(300.0), "cfg": {"lr": 0.1}}
    zanj.ZANJ().save(value, str(tmp_path / "a.zanj"))
    zarchive.save(value, tmp_path / "a.zarc")
    d = diff_archives(tmp_path / "a.zanj", tmp_path / "a.zarc")
    assert sorted(t.path for t in d.tensors) == ["t", "x"] and not d.changed(), d.render()
    zarchive.save({**value, "x": np.arange(300.0) + 1}, tmp_path / "b.zarc")
    changed = diff_archives(tmp_path / "a.zanj", tmp_path / "b.zarc").changed_tensors()
    assert [t.path for t in changed] == ["x"]
