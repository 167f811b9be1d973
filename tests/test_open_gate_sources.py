"""The open gate on every way a local file gets opened: the byte sources (`open_local`,
`LocalFileSource`, `MappedSource`), `zarchive.open` / `read` / `verify` / `audit`, foreign and ZANJ
files, `convert`, a `file://` URL, the command line and the model store.

A FIFO named like an archive must be refused at once (NotARegularFileError, a FormatError), never
block the reader waiting for a writer. Each check runs in a child process with a time limit, one
operation after another, each reporting as it ends: a regression fails (naming the operation that
hung) rather than hanging the test run.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import zarchive
from zarchive.container.open_gate import NotARegularFileError
from zarchive.container.source import open_local

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 120


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _child(code: str, cwd: Path) -> list[dict[str, str]]:
    """Run `code` (which calls report(name, fn) per operation) in a child process; the reports."""
    prelude = textwrap.dedent(
        """
        import json, sys, traceback
        def report(name, fn):
            try:
                fn()
                out = {"op": name, "error": None}
            except BaseException as e:
                out = {"op": name, "error": type(e).__name__, "message": str(e),
                       "classes": [c.__name__ for c in type(e).__mro__]}
            print(json.dumps(out), flush=True)
        print(json.dumps({"op": "start", "error": None}), flush=True)
        """
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", prelude + textwrap.dedent(code)],
            check=False,
            capture_output=True,
            text=True,
            cwd=cwd,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            timeout=LIMIT_S,
            preexec_fn=_limits,
        )
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        last = stdout.strip().splitlines()[-1:] or ["(nothing)"]
        pytest.fail(f"the child hung (killed after {LIMIT_S} s); the last operation that ended: {last[0]}")
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()][1:]


def _refused(reports: list[dict[str, str]]) -> None:
    assert reports
    for r in reports:
        assert r["error"] == "NotARegularFileError", r
        assert "FormatError" in r["classes"], r
        assert "FIFO" in r["message"], r


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "x.zarc"
    os.mkfifo(path)
    return path


def test_sources_refuse_a_fifo_without_blocking(tmp_path: Path, fifo: Path) -> None:
    reports = _child(
        f"""
        from zarchive.container.source import LocalFileSource, MappedSource, open_local
        path = {str(fifo)!r}
        report("open_local", lambda: open_local(path))
        report("open_local mmap", lambda: open_local(path, mmap=True))
        report("LocalFileSource", lambda: LocalFileSource(path))
        report("MappedSource", lambda: MappedSource(path))
        """,
        tmp_path,
    )
    _refused(reports)
    assert [r["op"] for r in reports] == ["open_local", "open_local mmap", "LocalFileSource", "MappedSource"]


@pytest.mark.parametrize("name", ["x.zarc", "x.pt", "x.safetensors", "x.npz", "x.zanj"])
def test_reads_refuse_a_fifo_without_blocking(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    os.mkfifo(path)
    reports = _child(
        f"""
        import zarchive
        from zarchive.formats.convert_in import convert
        from zarchive.formats.zanj import open_zanj
        path = {str(path)!r}
        report("open", lambda: zarchive.open(path))
        report("open mmap", lambda: zarchive.ZArchive(mmap=True).open(path))
        report("read", lambda: zarchive.read(path))
        report("read eager", lambda: zarchive.read(path, lazy=False))
        report("verify", lambda: zarchive.verify(path))
        report("audit", lambda: zarchive.audit(path))
        report("open file:// URL", lambda: zarchive.open("file://" + path))
        report("open_zanj", lambda: open_zanj(path))
        report("convert", lambda: convert(path, {str(tmp_path / "out.zarc")!r}))
        """,
        tmp_path,
    )
    assert len(reports) == 9
    _refused(reports[:-1])
    assert reports[-1]["error"] is not None, reports[-1]  # convert: refused before opening (not a file)
    assert not (tmp_path / "out.zarc").exists()


@pytest.mark.parametrize("command", ["verify", "ls", "hash", "audit", "show"])
def test_cli_refuses_a_fifo_without_blocking(tmp_path: Path, fifo: Path, command: str) -> None:
    try:
        out = subprocess.run(
            [sys.executable, "-m", "zarchive", command, str(fifo)],
            check=False,
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            timeout=LIMIT_S,
            preexec_fn=_limits,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"zarchive {command} on a FIFO hung")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert str(fifo) in out.stderr and "FIFO" in out.stderr


def test_model_store_skips_a_fifo_named_as_a_version(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    os.mkfifo(store / "1.0.0.zarc")
    os.mkfifo(store / "2.0.0.zarc")
    reports = _child(
        f"""
        import zarchive
        store = zarchive.ModelStore({str(store)!r})
        def versions():
            assert store.versions() == [], store.versions()
            assert store.version_names() == []
        report("versions", versions)
        report("info", lambda: store.info("1.0.0"))
        report("latest", lambda: store.latest())
        report("load", lambda: store.load("1.0.0"))
        """,
        tmp_path,
    )
    assert reports[0] == {"op": "versions", "error": None}
    for r in reports[1:]:  # no such version: the FIFO is not one
        assert r["error"] == "MemberNotFoundError", r
    try:
        out = subprocess.run(
            [sys.executable, "-m", "zarchive", "store", "ls", str(store)],
            check=False,
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            timeout=LIMIT_S,
            preexec_fn=_limits,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("zarchive store ls hung on a FIFO in the store")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr


def test_a_directory_is_still_refused_as_before(tmp_path: Path) -> None:
    folder = tmp_path / "d.zarc"
    folder.mkdir()
    with pytest.raises(IsADirectoryError):
        open_local(folder)
    with pytest.raises(zarchive.FormatError):
        zarchive.open(folder)
    with pytest.raises(NotARegularFileError):
        open_local(folder, mmap=True)


def test_a_regular_file_still_opens(tmp_path: Path) -> None:
    zarchive.save({"a": [1, 2, 3]}, tmp_path / "ok.zarc")
    for mmap in (False, True):
        source = open_local(tmp_path / "ok.zarc", mmap=mmap)
        try:
            assert source.size == (tmp_path / "ok.zarc").stat().st_size
        finally:
            source.close()
    assert zarchive.read(tmp_path / "ok.zarc", lazy=False) == {"a": [1, 2, 3]}


def test_model_store_lists_its_real_versions_beside_a_fifo(tmp_path: Path) -> None:
    store = tmp_path / "store"
    reports = _child(
        f"""
        import os, sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        import torch, zarchive
        from models_a import Config, Model
        torch.manual_seed(0)
        store = zarchive.ModelStore({str(store)!r})
        store.save(Model(Config()), "1.0.0")
        os.mkfifo({str(store / "2.0.0.zarc")!r})
        def listed():
            assert [v.version for v in store.versions()] == ["1.0.0"], store.versions()
            assert store.latest().version == "1.0.0"
            assert isinstance(store.load(), Model)
        report("listed", listed)
        report("the fifo", lambda: store.info("2.0.0"))
        """,
        tmp_path,
    )
    assert reports[0] == {"op": "listed", "error": None}, reports
    assert reports[1]["error"] == "MemberNotFoundError", reports
