"""The viewer's diff page at a tolerance (`zarchive view --rtol/--atol`, the same as `zarchive diff`'s)
and with tables whose row index changed: real requests to a real server (in a thread, and the
command in a child process), and the static page."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from viewer_helpers import get, serving

import zarchive

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def nudged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two checkpoints whose only difference is a weight moved by 1e-5 (a relative change of ~1e-5)."""
    d = tmp_path_factory.mktemp("viewer-diff")
    w = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))
    zarchive.save({"w": w, "config": {"lr": 0.1}}, d / "a.zarc")
    zarchive.save({"w": w + 1e-5, "config": {"lr": 0.1}}, d / "b.zarc")
    return d / "a.zarc", d / "b.zarc"


def _api_diff(url: str) -> dict[str, object]:
    status, body, _ = get(url + "api/diff")
    assert status == 200, body
    out: dict[str, object] = json.loads(body)
    return out


def test_default_tolerance_is_zero(nudged: tuple[Path, Path]) -> None:
    with serving(*nudged) as (server, _):
        d = _api_diff(server.url)
        assert d["changed"] is True and (d["rtol"], d["atol"]) == (0.0, 0.0)
        status, page, _ = get(server.url + "diff")
        assert status == 200 and re.search(r'id="diff-summary">changed: ', page), page[:2000]


@pytest.mark.parametrize(("rtol", "atol"), [(1e-3, 0.0), (0.0, 1e-4)], ids=["rtol", "atol"])
def test_within_the_tolerance_is_no_change(nudged: tuple[Path, Path], rtol: float, atol: float) -> None:
    with serving(*nudged, rtol=rtol, atol=atol) as (server, _):
        d = _api_diff(server.url)
        assert d["changed"] is False and (d["rtol"], d["atol"]) == (rtol, atol)
        (w,) = d["tensors"]  # type: ignore[misc]
        assert w["status"] == "changed" and w["changed"] is False
        status, page, _ = get(server.url + "diff")
        assert status == 200 and "changed (within tolerance)" in page
        assert f"no change beyond the tolerance (rtol={rtol:g}, atol={atol:g})" in page


def test_beyond_the_tolerance_is_a_change(nudged: tuple[Path, Path]) -> None:
    with serving(*nudged, rtol=1e-9) as (server, _):
        d = _api_diff(server.url)
        assert d["changed"] is True and d["tensors"][0]["changed"] is True  # type: ignore[index]


def test_a_moved_index_on_the_diff_page(tmp_path: Path) -> None:
    df = pd.DataFrame({"loss": np.linspace(1, 0, 6)}, index=pd.date_range("2024-01-01", periods=6, freq="h"))
    zarchive.save({"metrics": df}, tmp_path / "a.zarc")
    zarchive.save({"metrics": df.shift(freq="30min")}, tmp_path / "b.zarc")
    with serving(tmp_path / "a.zarc", tmp_path / "b.zarc", rtol=0.5) as (server, _):
        d = _api_diff(server.url)
        assert d["changed"] is True
        assert [(t["part"], t["status"]) for t in d["tables"]] == [  # type: ignore[attr-defined]
            ("index", "changed"), ("columns", "same"), ("dtypes", "same")]  # fmt: skip
        status, page, _ = get(server.url + "diff")
        assert status == 200 and 'id="diff-tables"' in page
        assert "row 0: 2024-01-01 00:00:00 -&gt; 2024-01-01 00:30:00" in page


def _view(*args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "zarchive", "view", "--no-browser", *map(str, args)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_cli_passes_the_tolerance_to_the_diff_page(nudged: tuple[Path, Path]) -> None:
    proc = _view("--rtol", "1e-3", "--atol", "0", *nudged)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/\S+/", line)
        assert url, line + (proc.stderr.read() if proc.stderr else "")
        d = _api_diff(url.group(0))
        assert d["changed"] is False and (d["rtol"], d["atol"]) == (1e-3, 0.0)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_cli_html_at_a_tolerance(nudged: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    cmd = [sys.executable, "-m", "zarchive", "view", "--atol", "1e-4", "--html", str(out), *map(str, nudged)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert "no change beyond the tolerance (rtol=0, atol=0.0001)" in page and "changed (within tolerance)" in page


@pytest.mark.parametrize("bad", ["-1", "nan", "inf", "x"])
def test_cli_refuses_a_bad_tolerance(nudged: tuple[Path, Path], bad: str) -> None:
    done = subprocess.run([sys.executable, "-m", "zarchive", "view", "--no-browser", f"--rtol={bad}", *map(str, nudged)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)  # fmt: skip
    assert done.returncode == 2 and "--rtol" in done.stderr, done.stderr
