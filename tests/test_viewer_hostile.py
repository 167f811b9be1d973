"""Hostile inputs through the viewer's HTTP endpoints: every file of the hostile corpus
(tests/hostile/corpus/) and every crafted input of the other kinds (tests/hostile/foreign_craft.py),
served by a real viewer in a child process under an address-space limit; every page of each is
fetched. No crash, no 5xx answer (a ZArchiveError is an error page: 4xx), and the child stays within
its memory limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hostile.foreign_craft import CASES
from hostile.make_corpus import CORPUS_DIR

HERE = Path(__file__).resolve().parent
MEM_MB = 3072  # over what the child has after importing zarchive and torch


def serve_all(paths: list[str], timeout: int = 500) -> list[dict]:  # type: ignore[type-arg]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])}
    done = subprocess.run([sys.executable, str(HERE / "viewer_hostile_child.py"), str(MEM_MB), *paths],
                          capture_output=True, text=True, timeout=timeout, env=env, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines and "peak_mb" in lines[-1], done.stdout[-2000:]
    return lines


def check(lines: list[dict], expected: int) -> None:  # type: ignore[type-arg]
    results = lines[:-1]
    assert len(results) == expected
    for r in results:
        assert not r["errors"], (r["input"], r["errors"])
        assert r["statuses"], r["input"]
        assert all(s in (200, 400, 404, 422) for s in r["statuses"].values()), (r["input"], r["statuses"])
    assert lines[-1]["peak_mb"] < MEM_MB + 1500


CORPUS = sorted(str(Path(CORPUS_DIR, n)) for n in os.listdir(CORPUS_DIR) if n.endswith(".zarc"))


@pytest.mark.slow
def test_the_corpus_through_the_viewer() -> None:
    """Every corpus file through every page (7 s; 2 minutes while each server took 0.5 s to stop: make
    test-slow and CI's floors run)."""
    lines = serve_all(CORPUS)
    check(lines, len(CORPUS))
    refused = sum(1 for r in lines[:-1] if any(s == 422 for s in r["statuses"].values()))
    assert refused >= 100  # the corpus' errors come back as error pages


def test_a_sixth_of_the_corpus_through_the_viewer() -> None:
    """Every sixth corpus file (in name order) through every page, for make test."""
    lines = serve_all(CORPUS[::6])
    check(lines, len(CORPUS[::6]))
    assert sum(1 for r in lines[:-1] if any(s == 422 for s in r["statuses"].values())) >= 15


def test_crafted_inputs_of_every_kind_through_the_viewer(tmp_path: Path) -> None:
    cases = [c for c in CASES if c.setup is None]
    paths = [str(c.build(tmp_path / c.kind / c.name)) for c in cases]
    check(serve_all(paths), len(paths))


@pytest.mark.parametrize("name", ["bomb_npy_declared_huge", "bomb_declared_over_limit"])
def test_a_bomb_is_an_error_page_naming_the_budget(name: str) -> None:
    lines = serve_all([str(Path(CORPUS_DIR, name + ".zarc"))], timeout=200)
    assert 422 in lines[0]["statuses"].values(), lines[0]
