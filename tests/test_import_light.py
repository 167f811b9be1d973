"""`import zarchive` and `zarchive --help` stay light: torch, pandas and muutils are imported only when
something needs them. Each check runs in a fresh interpreter, since this test process has long since
imported all of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent  # so the child imports this checkout's zarchive
MARK = "HEAVY-MODULES:"


def run_child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


def heavy_modules_reported(stderr: str) -> list[str]:
    lines = [line for line in stderr.splitlines() if line.startswith(MARK)]
    assert len(lines) == 1, f"the child did not report its modules; stderr:\n{stderr}"
    return json.loads(lines[0][len(MARK) :])


# Prints, as the interpreter exits (also after SystemExit), which of these modules were imported.
REPORT_AT_EXIT = f"""
import atexit, json, sys
def _report(names):
    print({MARK!r} + json.dumps(sorted(n for n in names if n in sys.modules)), file=sys.stderr)
"""


def test_import_zarchive_imports_no_torch_pandas_or_muutils() -> None:
    code = REPORT_AT_EXIT + "import zarchive\n_report(['torch', 'pandas', 'muutils', 'numpy', 'polars'])\n"
    p = run_child(code)
    assert p.returncode == 0, p.stderr
    assert heavy_modules_reported(p.stderr) == []


def test_cli_help_exits_0_without_importing_torch_or_pandas() -> None:
    code = REPORT_AT_EXIT + (
        "import runpy\n"
        "atexit.register(_report, ['torch', 'pandas'])\n"
        "sys.argv = ['zarchive', '--help']\n"
        "runpy.run_module('zarchive', run_name='__main__', alter_sys=True)\n"
    )
    p = run_child(code)
    assert p.returncode == 0, p.stderr
    assert "usage" in p.stdout.lower()
    assert heavy_modules_reported(p.stderr) == []


@pytest.mark.parametrize("command", ["ls", "show", "meta", "verify", "audit"])
def test_cli_browsing_commands_never_import_torch_or_pandas(command: str, tmp_path: Path) -> None:
    import pandas as pd
    import torch

    import zarchive

    path = tmp_path / "mixed.zarc"
    zarchive.save({"t": torch.arange(6.0).reshape(2, 3), "df": pd.DataFrame({"a": [1, 2]}), "n": [1, 2]}, path)
    code = REPORT_AT_EXIT + (
        "import runpy\n"
        "atexit.register(_report, ['torch', 'pandas'])\n"
        f"sys.argv = ['zarchive', {command!r}, {str(path)!r}]\n"
        "runpy.run_module('zarchive', run_name='__main__', alter_sys=True)\n"
    )
    p = run_child(code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip()
    assert heavy_modules_reported(p.stderr) == []
