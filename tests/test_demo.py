"""The demo (`make demo`) and demo.ipynb run end to end, as a user would run them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_demo_module_runs_and_checks_its_outputs(tmp_path: Path) -> None:
    out = tmp_path / "run.zarc"
    proc = subprocess.run(
        [sys.executable, "-m", "zarchive.demo", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out_text = proc.stdout
    assert "outputs identical: True" in out_text and "embeddings identical: True" in out_text
    assert "model  ConfiguredModel zarchive.demo:TinyMLP" in out_text  # the `zarchive show` tree
    assert "embeddings  ndarray float32 [600, 32] -> embeddings.npy" in out_text
    assert re.search(r"^predictions/label/codes\.npy\.zst +zstd ", out_text, re.MULTILINE)  # the listing
    next_lines = out_text[out_text.index("\nnext") :]
    bin_dir = os.path.dirname(sys.executable)
    assert "zarchive command is in" in next_lines and os.path.join(bin_dir, "zarchive") in next_lines
    assert f"unzip -l {out}" in next_lines
    assert out.exists() and (tmp_path / "model.zarc").exists()


def test_the_commands_the_demo_suggests_run(tmp_path: Path) -> None:
    out = tmp_path / "run.zarc"
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    run = [sys.executable, "-m", "zarchive.demo", "--out", str(out)]
    text = subprocess.run(run, capture_output=True, text=True, timeout=300, check=True, cwd=tmp_path).stdout
    suggested = [line.split("  # ")[0].strip() for line in text[text.index("\nnext") :].splitlines()[2:-1]]
    assert len(suggested) == 6
    zarchive_cmd = os.path.join(os.path.dirname(sys.executable), "zarchive")
    for cmd in suggested:
        if not os.path.exists(zarchive_cmd) and zarchive_cmd in cmd:  # run from a checkout, not installed
            cmd = cmd.replace(zarchive_cmd, f"{sys.executable} -m zarchive")
        if cmd.startswith("unzip") and not shutil.which("unzip") or "jq" in cmd and not shutil.which("jq"):
            continue
        proc = subprocess.run(
            cmd, shell=True, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env, check=False
        )
        assert proc.returncode == 0 and proc.stdout.strip(), (cmd, proc.stdout, proc.stderr)


def test_notebook_executes(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "demo.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    env_path = os.path.dirname(sys.executable)
    os.environ["PATH"] = env_path + os.pathsep + os.environ.get("PATH", "")  # the kernel runs this venv's python
    client.execute()
    outputs = "".join(
        str(o.get("text", "")) + str(o.get("data", {}).get("text/html", ""))
        for cell in nb.cells
        if cell.cell_type == "code"
        for o in cell.get("outputs", [])
    )
    assert "outputs identical; metrics, predictions and embeddings identical" in outputs
    assert "VerifyResult(OK: 9 members intact)" in outputs
    assert "<div class='zarchive'>" in outputs  # the archive rendered itself as HTML
