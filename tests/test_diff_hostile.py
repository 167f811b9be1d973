"""The hostile corpus through `diff` (issue 28): each file compared with the valid one and with itself,
every tensor read (no checksum shortcut), in a child forked by tests/hostile/worker.py under an
address-space and a time limit: a ZArchiveError (the command line: exit 2 and one line naming the
file) or a diff computed within the limits; never a crash, a hang or another exception."""

from __future__ import annotations

import os
from pathlib import Path

import hostile.models  # noqa: F401 - classes some corpus files name (imported, as training code would be)
import pytest
from hostile.make_corpus import CASES, CORPUS_DIR, Case
from hostile.worker import Worker

MEM_MB = 1024  # over what the child starts with
SECONDS = 60


def corpus_file(name: str) -> str:
    return os.path.join(CORPUS_DIR, name + ".zarc")


@pytest.fixture(scope="module")
def worker() -> Worker:
    return Worker.get()


def _checked(reply: dict[str, object], case: Case) -> dict[str, object]:
    assert not reply.get("timeout"), f"{case.name}: took more than {SECONDS} s: {reply}"
    assert reply.get("signal") is None, f"{case.name}: killed by signal {reply.get('signal')}: {reply}"
    return reply


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_corpus_through_diff(worker: Worker, tmp_path: Path, case: Case) -> None:
    path = corpus_file(case.name)
    reply = _checked(worker.call(op="cell", entry="diff", path=path, leaf="", tmp=str(tmp_path), mem_mb=MEM_MB,
                                 timeout=SECONDS), case)  # fmt: skip
    if reply["ok"]:
        assert reply["value"]["changed"] is False, f"{case.name}: a file differs from itself: {reply}"
    else:
        assert reply.get("zarchive_error"), f"{case.name}: not a ZArchiveError: {reply.get('exc')}: {reply.get('msg')}"
        assert case.error is not None, f"the valid file is refused: {reply}"
    reply = _checked(worker.call(op="cell", entry="cli_diff", path=path, leaf="", tmp=str(tmp_path), mem_mb=MEM_MB,
                                 timeout=SECONDS), case)  # fmt: skip
    assert reply.get("ok"), f"{case.name}: the command raised {reply.get('exc')}: {reply.get('msg')}"
    lines = [line for line in str(reply["stderr"]).splitlines() if line.strip()]
    if reply["rc"] != 0:
        assert reply["rc"] == 2, f"{case.name}: exit {reply['rc']}: {reply['stderr']}"
        assert len(lines) == 1 and os.path.basename(path) in lines[0], reply["stderr"]
