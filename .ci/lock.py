"""Rewrite requirements-ci.txt: the exact version of every package that .venv gets from the `test`,
`lint` and `bench` extras (zarchive's own dependencies included), as pip resolves them under the pins
already there. With those pins `make demo`, `make test`, `make lint` and `make bench` resolve in one
pass: pip never backtracks, and a new release elsewhere cannot change what the suite runs on.

    python .ci/lock.py                   # re-resolve what is not pinned yet (a new extra, say)
    python .ci/lock.py boto3 botocore    # move these packages too (their pins are dropped first)

`make lock` runs it with .venv's pip (--dry-run --report needs pip 23 or newer). Lines with an
environment marker (`; ...`) are written by hand and kept as they are: the torch pins (its CPU build
on Linux) and anything else that differs between platforms."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements-ci.txt"
EXTRAS = "test,hf,lint,bench,docs"
HEADER = """\
# Exact versions for .venv (make demo, make test, make lint, make bench): everything the test, lint,
# bench and docs extras install, zarchive's own dependencies included, so that pip resolves them in one pass
# (no backtracking) and the suite runs on the same versions everywhere. pyproject.toml keeps the true
# ranges for users. make test-floors uses these pins too, except where requirements-floors.txt pins.
# Written by `make lock` (.ci/lock.py) on Linux x86_64, CPython 3.11; a package not named here is
# resolved freely. To move a package: make lock UPGRADE="name ...".
# Lines with a marker are kept by hand. torch: the CPU build on Linux. `==2.13.0+cpu` is a constraint
# that PyPI's CUDA build (torch 2.13.0 and about 1.3 GB of nvidia-* libraries) does not satisfy, so pip
# never considers it; this project's machines have the wheel on local disk, elsewhere pass PyTorch's CPU
# index: make test TORCH_INDEX=https://download.pytorch.org/whl/cpu. PyPI's torch for macOS and Windows
# is a CPU build already.
"""


def name_of(line: str) -> str:
    """'Foo_Bar==1.0 ; marker' -> 'foo-bar' (the normalized project name)."""
    for sep in "=<>!~;[ ":
        line = line.split(sep)[0]
    return line.strip().lower().replace("_", "-").replace(".", "-")


def main(upgrade: list[str]) -> None:
    lines = [ln.strip() for ln in LOCK.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    by_hand = [ln for ln in lines if ";" in ln]
    hand_names = {name_of(ln) for ln in by_hand}
    drop = {name_of(n) for n in upgrade}
    kept = [ln for ln in lines if name_of(ln) not in drop or ln in by_hand]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(kept) + "\n")
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", "-"]
    cmd += ["-c", f.name, "-e", f".[{EXTRAS}]"]
    out = subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    Path(f.name).unlink()
    pins = {}
    for item in json.loads(out)["install"]:
        meta = item["metadata"]
        if name_of(meta["name"]) != "zarchive-ml" and name_of(meta["name"]) not in hand_names:
            pins[name_of(meta["name"])] = f"{meta['name']}=={meta['version']}"
    pip_version = subprocess.run(
        [sys.executable, "-c", "import pip; print(pip.__version__)"], check=True, stdout=subprocess.PIPE, text=True
    ).stdout.strip()
    pins["pip"] = f"pip=={pip_version}"  # `make` upgrades .venv's pip to this one before installing
    body = by_hand + [pins[k] for k in sorted(pins)]
    LOCK.write_text(HEADER + "\n".join(body) + "\n")
    print(f"{LOCK.name}: {len(by_hand)} lines by hand, {len(pins)} pins")


if __name__ == "__main__":
    main(sys.argv[1:])
