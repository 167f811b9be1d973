"""The demo (`make demo`) and demo.ipynb run end to end, as a user would run them."""

from __future__ import annotations

import os
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
    assert "outputs identical: True" in proc.stdout
    assert "manifest.json" in proc.stdout and '"$type": "torch.ConfiguredModel"' in proc.stdout
    assert out.exists() and (tmp_path / "model.zarc").exists()


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
    assert "outputs identical; metrics identical" in outputs
    assert "<div class='zarchive'>" in outputs  # the archive rendered itself as HTML
