"""Every code block in README.md and docs/*.md runs as written.

- ```python blocks each run on their own, in a fresh process (a fork of tests/forkrun.py's server) and a
  fresh temporary directory, except a block that says it continues the one before (the last line of
  text above it says "continues the example above"): it runs after that block, in the same process.
  A failure names the file and line.
- ```console blocks: each `$ command` runs with bash in that directory (which holds the demo's
  archive, outputs/run.zarc, and a copy of examples/), with a `zarchive` command on PATH. Its output
  is compared with the lines shown below it, in a normalised form: numbers as '#', runs of spaces as
  one, `<- notes` removed. The first line shown must be the first line printed; every other line shown
  must follow in order; a line ending in '...' (or holding only '...') stands for lines left out.
- ```bash blocks are the set-up commands: `make TARGET` must be a target (`make -n`), `pip install`
  must install from a checkout ('.') with extras that pyproject.toml defines (never from PyPI: the
  names zarchive and zarc there are other people's), anything else must parse (`bash -n`).
- ```yaml and ```toml blocks must parse; blocks with no language are text.
Links to files (`[x](path)`) must point at files that exist.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import forkrun
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
CONTINUES = re.compile(r"continues the example above", re.IGNORECASE)

_RUNNER = r"""
import json, sys, __main__
path, blocks = json.load(sys.stdin)
for line, source in blocks:
    exec(compile("\n" * line + source, path, "exec"), __main__.__dict__)
print("all blocks ran")
"""


def blocks(path: Path, lang: str) -> list[tuple[int, str]]:
    """(line of the block's first line of code, 0-based, code) for each block in `lang`."""
    return [(line, code) for line, code, _ in _blocks(path, lang)]


def _blocks(path: Path, lang: str) -> list[tuple[int, str, bool]]:
    """(first line of code, code, whether the text above it says it continues the block before)."""
    text = path.read_text()
    found = []
    for m in FENCE.finditer(text):
        if m.group(1) == lang:
            above = [x for x in text[: m.start()].splitlines() if x.strip()]
            continues = bool(above) and bool(CONTINUES.search(above[-1]))
            found.append((text.count("\n", 0, m.start(2)), m.group(2), continues))
    return found


def python_runs() -> list[tuple[Path, list[tuple[int, str]]]]:
    """Each run of python blocks: a block on its own, with the blocks that say they continue it."""
    runs: list[tuple[Path, list[tuple[int, str]]]] = []
    for doc in DOCS:
        for line, code, continues in _blocks(doc, "python"):
            if continues and runs and runs[-1][0] == doc:
                runs[-1][1].append((line, code))
            else:
                runs.append((doc, [(line, code)]))
    return runs


def _env(bin_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["COLUMNS"] = "200"
    return env


@pytest.fixture(scope="module")
def workdir_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's archive and the examples, as a reader who ran `make demo` has them."""
    base = tmp_path_factory.mktemp("docs-template")
    subprocess.run(
        [sys.executable, "-m", "zarchive.demo", "--out", "outputs/run.zarc"],
        cwd=base,
        env=_env(base),
        check=True,
        capture_output=True,
        timeout=300,
    )
    shutil.copytree(ROOT / "examples", base / "examples")
    bin_dir = base / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "zarchive"  # the installed command, for this checkout
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m zarchive "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return base


@pytest.fixture
def workdir(workdir_template: Path, tmp_path: Path) -> Path:
    work = tmp_path / "work"
    shutil.copytree(workdir_template, work, symlinks=True)
    return work


def test_a_continuing_block_follows_another() -> None:
    for doc in DOCS:
        found = _blocks(doc, "python")
        assert not (found and found[0][2]), f"{doc.name}: its first python block says it continues another"


@pytest.mark.parametrize(("doc", "code"), python_runs(), ids=[f"{d.name}:{c[0][0]}" for d, c in python_runs()])
def test_python_blocks_run(doc: Path, code: list[tuple[int, str]], workdir: Path) -> None:
    # a process of its own, as `python -c` would start, forked from tests/forkrun.py's server (which has
    # imported numpy, torch, pandas and zarchive, so each block does not pay 1.2 s for that again)
    proc = forkrun.run(
        ["-c", _RUNNER], input=json.dumps([str(doc.relative_to(ROOT)), code]), cwd=workdir,
        env=_env(workdir / ".bin"), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0 and "all blocks ran" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-6000:]


def _norm(line: str) -> str:
    line = re.sub(r"\s*<-.*$", "", line)
    line = re.sub(r"\d+(\.\d+)?", "#", line)
    return " ".join(line.split())


def _commands(block: str) -> list[tuple[str, list[str]]]:
    cmds: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            cmds.append((line[2:], []))
        elif cmds:
            cmds[-1][1].append(line)
    return cmds


def _check_output(cmd: str, shown: list[str], printed: str) -> None:
    got = [_norm(x) for x in printed.splitlines() if x.strip()]
    want = [x for x in shown if x.strip()]
    if not want:
        return
    assert got, f"$ {cmd}: printed nothing"
    assert _norm(want[0]) == got[0], f"$ {cmd}: first line {got[0]!r}, the docs show {_norm(want[0])!r}"
    at = 1
    for line in want[1:]:
        if line.strip().endswith("..."):
            continue
        target = _norm(line)
        while at < len(got) and got[at] != target:
            at += 1
        assert at < len(got), f"$ {cmd}: the docs show {target!r}, not printed (in order):\n" + "\n".join(got)
        at += 1


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_console_blocks_print_what_they_show(doc: Path, workdir: Path) -> None:
    found = blocks(doc, "console")
    if not found:
        pytest.skip("no console blocks")
    for line, block in found:
        for cmd, shown in _commands(block):
            missing = [
                tool for tool in ("unzip", "jq", "zstd") if re.search(rf"\b{tool}\b", cmd) and not shutil.which(tool)
            ]
            if missing:  # a machine without these tools: the command cannot be run as written here
                continue
            proc = subprocess.run(
                ["bash", "-o", "pipefail", "-c", cmd],
                cwd=workdir,
                env=_env(workdir / ".bin"),
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert proc.returncode == 0, f"{doc.name}:{line + 1}: $ {cmd}\n{proc.stdout}{proc.stderr}"
            _check_output(cmd, shown, proc.stdout)


def _extras() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_bash_blocks_are_real_targets_and_installs_from_a_checkout(doc: Path) -> None:
    for line, block in blocks(doc, "bash"):
        for cmd in block.splitlines():
            cmd = cmd.split("  #")[0].strip()
            if not cmd or cmd.startswith("#"):
                continue
            where = f"{doc.name}:{line + 1}: {cmd}"
            if cmd.startswith("make "):
                proc = subprocess.run(["make", "-n", *cmd.split()[1:]], cwd=ROOT, capture_output=True, check=False)
                assert proc.returncode == 0, where
            elif cmd.startswith("pip install"):
                specs = cmd.split()[2:]
                assert specs, where
                for spec in specs:
                    m = re.fullmatch(r"""["']?\.(?:\[([\w,-]+)\])?["']?""", spec)
                    assert m, f"{where}: install from a checkout ('.'), not from PyPI"
                    assert set((m.group(1) or "").split(",")) - {""} <= _extras(), where
            else:
                assert subprocess.run(["bash", "-n", "-c", cmd], check=False).returncode == 0, where


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_yaml_and_toml_blocks_parse(doc: Path) -> None:
    yaml = pytest.importorskip("yaml")
    for _, block in blocks(doc, "yaml"):
        yaml.safe_load(block)
    for _, block in blocks(doc, "toml"):
        tomllib.loads(block)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_links_point_at_files_that_exist(doc: Path) -> None:
    text = FENCE.sub("", doc.read_text())
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+://", target) or target.startswith("#"):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{doc.name}: a link to {target}, which does not exist"


def test_no_install_line_names_the_pypi_packages_that_are_not_this_one() -> None:
    for doc in DOCS:
        text = doc.read_text()
        assert not re.search(r"pip install\s+['\"]?zarc(hive)?\b(?!-ml)", text), doc.name
