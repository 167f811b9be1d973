"""Saves are atomic: a save that fails, runs out of disk or is SIGKILLed leaves the previous file at its
path byte-identical, and never a half-written file under the target name.

A save writes `.<name>.<random>.zarc-tmp` beside the target, fsyncs it and renames it over the target.
Temporary files are removed when a save fails; after SIGKILL one may remain (nothing can remove it),
but the target is always intact. The writer also refuses to produce names or sizes its reader rejects.
"""

from __future__ import annotations

import errno
import os
import random
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hostile.worker import Worker, payload

import zarchive
from zarchive.container import old_file
from zarchive.container.archive_writer import MemberPlan, choose_codecs
from zarchive.container.names import collision_key, name_problem
from zarchive.handlers.base import Handler

TMP_NAME = re.compile(r"^\.(?P<target>.+)\.[^./]+\.zarc-tmp$")  # the documented temp-name pattern
KILL_RUNS = 30
MB = 24
NPY_MAXDIMS = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32  # the most dims an array can have


def leftovers(directory: Path, target: str) -> list[str]:
    """Files in `directory` other than `target`: must all be temp files of `target` (or none)."""
    others = sorted(p.name for p in directory.iterdir() if p.name != target)
    for name in others:
        m = TMP_NAME.match(name)
        assert m and m.group("target") == target[:100], f"unexpected file {name!r} beside the archive"
    return others


def same_as(loaded: dict[str, Any], expected: dict[str, Any]) -> bool:
    return (
        loaded["seed"] == expected["seed"]
        and loaded["names"] == expected["names"]
        and np.array_equal(loaded["steps"], expected["steps"])
        and all(np.array_equal(loaded["weights"][k], v) for k, v in expected["weights"].items())
    )


# --- failures inside the saving process ---------------------------------------------------------------
class Boom:
    """An object whose handler fails."""


class BoomHandler(Handler):
    name = "test.boom"

    def __init__(self, where: str) -> None:
        self.where = where
        self.seen_tmp: list[str] = []

    def accepts(self, cls: type) -> bool:
        return cls is Boom

    def save(self, obj: Any, ctx: Any) -> Any:
        if self.where == "save":
            raise RuntimeError("boom in save")
        handler = self

        def parts() -> Iterator[tuple[str | None, memoryview]]:
            yield None, memoryview(bytes(4 << 20))  # 4 MiB already in the temp file...
            handler.seen_tmp = [p.name for p in Path(handler.directory).iterdir()]
            if handler.where == "interrupt":
                raise KeyboardInterrupt
            raise RuntimeError("boom while writing")  # ...then the member's data source fails

        plan = ctx.add_member("bin", parts, compress="never")
        return ctx.ref_node(plan, "bytes", nbytes=8 << 20)

    def load(self, node: dict[str, Any], ctx: Any) -> Any:
        raise AssertionError("never loaded")


@pytest.mark.parametrize(
    "where, obj_factory, error",
    [
        pytest.param("none", lambda: {"a": {"b": [1, 2, {"c": object()}]}}, zarchive.SaveError, id="no-handler-deep"),
        pytest.param("save", lambda: {"deep": [{"x": Boom()}]}, zarchive.SaveError, id="handler-save-raises"),
        pytest.param(
            "write", lambda: {"big": np.ones(10_000), "x": Boom()}, zarchive.SaveError, id="member-data-raises"
        ),
        pytest.param("interrupt", lambda: {"x": Boom()}, KeyboardInterrupt, id="interrupted-mid-write"),
    ],
)
def test_failed_save_leaves_previous_file(tmp_path: Path, where: str, obj_factory: Any, error: type) -> None:
    target = tmp_path / "run.zarc"
    zarchive.save({"previous": np.arange(1000)}, target)
    before = target.read_bytes()
    handler = BoomHandler(where)
    handler.directory = str(tmp_path)  # type: ignore[attr-defined]
    with pytest.raises(error) as info:
        zarchive.ZArchive(handlers_pre=[handler]).save(obj_factory(), target)
    if where == "none":
        assert "a/b/2/c" in str(info.value)
    if where in ("write", "interrupt"):  # the data went to a temp file named as documented
        tmp = [n for n in handler.seen_tmp if n != "run.zarc"]
        assert len(tmp) == 1 and TMP_NAME.match(tmp[0]), handler.seen_tmp
    assert target.read_bytes() == before
    assert leftovers(tmp_path, "run.zarc") == []
    assert zarchive.verify(target) == []


@pytest.fixture(scope="module")
def worker() -> Worker:
    w = Worker.get()
    for seed in (0, 1):
        assert w.call(op="prepare", seed=seed, mb=MB)["ok"]
    return w


@pytest.fixture(scope="module")
def archives(worker: Worker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The old (seed 0) and new (seed 1) archives, and how long a full save of the new one takes."""
    d = tmp_path_factory.mktemp("archives")
    out: dict[str, Any] = {}
    for seed in (0, 1):
        reply = worker.call(op="save", path=str(d / f"s{seed}.zarc"), seed=seed, mb=MB)
        assert reply["ok"], reply
        out[seed] = (d / f"s{seed}.zarc").read_bytes()
        out[f"t{seed}"] = reply["elapsed"]
    assert len(out[1]) > 18 << 20 and len(zarchive.open(out[1]).members) >= 5  # (the floats: 18 MiB)
    return out


@pytest.mark.parametrize("fraction", [0.0001, 0.3, 0.9, 0.999], ids=lambda f: f"limit-{f:.2%}-of-archive")
def test_disk_full_leaves_previous_file(
    tmp_path: Path, worker: Worker, archives: dict[str, Any], fraction: float
) -> None:
    """RLIMIT_FSIZE makes writes past the limit fail with EFBIG, as a full disk fails them with ENOSPC."""
    target = tmp_path / "run.zarc"
    target.write_bytes(archives[0])
    limit = int(len(archives[1]) * fraction)
    reply = worker.call(op="save", path=str(target), seed=1, mb=MB, fsize=limit)
    assert not reply["ok"] and reply["exc"] == "OSError" and reply["errno"] == errno.EFBIG, reply
    assert target.read_bytes() == archives[0]
    assert leftovers(tmp_path, "run.zarc") == []


def test_sigkill_at_random_moments(tmp_path: Path, worker: Worker, archives: dict[str, Any]) -> None:
    """30 saves killed with SIGKILL at delays spread from the start to past completion: the path
    always holds the old archive or the new one, complete and verified; never anything else."""
    target = tmp_path / "run.zarc"
    rng = random.Random(20240611)
    full = max(archives["t1"], 0.05)
    delays = [full * 1.4 * i / (KILL_RUNS - 1) * rng.uniform(0.9, 1.1) for i in range(KILL_RUNS)]
    delays[-3:] = [full * 3] * 3  # and a few certainly after completion
    expected_new = payload(1, MB)
    outcomes: list[str] = []
    tmp_left = 0
    for delay in delays:
        target.write_bytes(archives[0])
        reply = worker.call(op="save", path=str(target), seed=1, mb=MB, kill_after=delay)
        data = target.read_bytes()
        if data == archives[0]:
            outcomes.append("old")
        else:
            assert zarchive.verify(target) == [], f"killed after {delay:.3f}s: a damaged archive"
            assert same_as(zarchive.read(target), expected_new), f"killed after {delay:.3f}s: not the new object"
            outcomes.append("new")
        assert reply["signal"] in (9, None), reply
        for name in leftovers(tmp_path, "run.zarc"):  # a temp file may survive SIGKILL; clean it ourselves
            (tmp_path / name).unlink()
            tmp_left += 1
    print(
        f"kill test: {outcomes.count('old')} old, {outcomes.count('new')} new, {tmp_left} temp files left, "
        f"full save {full:.3f}s"
    )
    assert len(outcomes) >= 30
    assert "old" in outcomes and "new" in outcomes, outcomes
    assert tmp_left >= 1  # some kills landed while the temp file was being written
    assert sum(1 for d in delays if d < full) >= 10  # most kills landed mid-save


# --- permissions ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)], ids=oct)
def test_new_file_respects_umask(tmp_path: Path, umask: int, expected: int) -> None:
    old = os.umask(umask)
    try:
        zarchive.save({"x": 1}, tmp_path / "new.zarc")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.zarc").stat().st_mode) == expected


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o600, 0o755], ids=oct)
def test_existing_file_keeps_its_mode(tmp_path: Path, mode: int) -> None:
    target = tmp_path / "run.zarc"
    zarchive.save({"x": 1}, target)
    target.chmod(mode)
    old = os.umask(0o077)
    try:
        zarchive.save({"x": 2}, target)
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert zarchive.read(target) == {"x": 2}


def test_longest_file_name(tmp_path: Path) -> None:
    """A 255-byte file name (the usual limit) still gets a temporary file beside it."""
    target = tmp_path / ("x" * 250 + ".zarc")
    zarchive.save({"x": 1}, target)
    zarchive.save({"x": 2}, target)
    assert zarchive.read(target) == {"x": 2} and leftovers(tmp_path, target.name) == []


# --- readers of the old file -----------------------------------------------------------------------------
def test_save_over_an_open_mapped_archive(tmp_path: Path) -> None:
    target = tmp_path / "run.zarc"
    old = np.arange(1_000_000, dtype=np.float64)
    zarchive.save({"w": old, "l": list(range(1000))}, target, compress=False)
    with zarchive.open(target) as arc:
        first = arc["w"]
        zarchive.save({"w": -old, "l": []}, target, compress=False)
        assert np.array_equal(first, old)
        assert np.array_equal(arc["w"], old) and arc["l"] == list(range(1000))
        assert arc.verify() == []
    assert np.array_equal(first, old)
    assert np.array_equal(zarchive.read(target)["w"], -old)


def _deleted_files_held() -> list[str]:
    """Files this process holds open whose name is gone (what a pending free looks like)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.endswith(" (deleted)") and ".zarc" in link:
            out.append(link)
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_replaced_big_file_is_freed_in_the_background(tmp_path: Path) -> None:
    """Saving over a big archive returns before its old blocks are freed, and they are freed after."""
    target = tmp_path / "big.zarc"
    old = np.arange((old_file.MIN_SIZE // 8) + 1000, dtype=np.float64)
    zarchive.save({"w": old}, target, compress=False)
    assert target.stat().st_size >= old_file.MIN_SIZE
    old_inode = target.stat().st_ino
    zarchive.save({"w": -old}, target, compress=False)
    assert target.stat().st_ino != old_inode
    assert np.array_equal(zarchive.read(target)["w"], -old)
    assert old_file.wait_released(timeout=60)
    assert _deleted_files_held() == []
    assert leftovers(tmp_path, target.name) == []


def test_small_symlinked_and_linked_files_are_not_held(tmp_path: Path) -> None:
    """Only a big, singly linked regular file is worth holding; a symlink's target is not being freed."""
    small = tmp_path / "small.zarc"
    zarchive.save({"x": 1}, small)
    assert old_file.hold(str(small)) is None
    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * old_file.MIN_SIZE)
    fd = old_file.hold(str(big))
    assert fd is not None
    old_file.release_now(fd)
    link = tmp_path / "link.zarc"
    link.symlink_to(big)
    assert old_file.hold(str(link)) is None
    hard = tmp_path / "hard.bin"
    os.link(big, hard)
    assert old_file.hold(str(big)) is None
    assert old_file.hold(str(tmp_path / "missing")) is None


# --- the writer never produces what its reader rejects ------------------------------------------------
HOSTILE_KEYS = [
    "..",
    ".",
    "",
    "a/b",
    "a\\b",
    "C:",
    "c:\\x",
    "x\x00y",
    "con",
    "NUL.txt",
    "name.",
    " ",
    "W",
    "w",
    "\u00e9",
    "e\u0301",
    "\u202eevil",
    "$ref",
    "~1",
    "k" * 5000,
]


def test_writer_names_from_hostile_keys(tmp_path: Path) -> None:
    """Keys that would make bad member names become safe, distinct ones, and read back exactly."""
    obj = {k: np.full(300, i, dtype=np.int64) for i, k in enumerate(HOSTILE_KEYS)}
    deep: Any = np.arange(300.0)
    for i in range(40):  # an object path far longer than a member name may be
        deep = {"k" * 250 + str(i): deep}
    obj["deep"] = deep
    zarchive.save(obj, tmp_path / "names.zarc")
    with zarchive.open(tmp_path / "names.zarc") as arc:
        names = list(arc.members)
        loaded = arc.load()
    assert all(name_problem(n) is None for n in names)
    assert len({collision_key(n) for n in names}) == len(names)
    for i, k in enumerate(HOSTILE_KEYS):
        assert np.array_equal(loaded[k], np.full(300, i)), k
    inner = loaded["deep"]
    for i in reversed(range(40)):
        inner = inner["k" * 250 + str(i)]
    assert np.array_equal(inner, np.arange(300.0))


@pytest.mark.parametrize("name", ["../evil", "/abs", "a\\b", "C:/x", "a//b", "x\x00y", "a:b"])
def test_writer_refuses_bad_member_names(name: str) -> None:
    plan = MemberPlan(base_name=name, parts=lambda: [(None, memoryview(b"x"))], compress="never")
    with pytest.raises(zarchive.UnsafeArchiveError):
        choose_codecs([plan], None)


def test_writer_refuses_non_json_manifest_values(tmp_path: Path) -> None:
    """NaN is not JSON (the reader rejects the token): the metadata's custom settings may not hold it."""
    with pytest.raises(zarchive.SaveError):
        zarchive.save({"x": 1}, tmp_path / "x.zarc", custom_settings={"lr": float("nan")})
    assert not (tmp_path / "x.zarc").exists() and list(tmp_path.iterdir()) == []


class Raw:
    """Saved by RawNodeHandler as whatever node it carries."""

    def __init__(self, node: Any) -> None:
        self.node = node


class RawNodeHandler(Handler):
    name = "test.raw"

    def accepts(self, cls: type) -> bool:
        return cls is Raw

    def save(self, obj: Raw, ctx: Any) -> Any:
        return {"$type": self.name, **obj.node}

    def load(self, node: dict[str, Any], ctx: Any) -> Any:
        return {k: v for k, v in node.items() if k != "$type"}


@pytest.mark.parametrize(
    "node",
    [
        pytest.param({"v": float("nan")}, id="nan"),
        pytest.param({"v": [1, float("inf")] + ["x" * 50] * 5}, id="inf-in-a-long-list"),
        pytest.param({"v": object()}, id="object"),
        pytest.param({"v": {(1, 2): "x" * 200}}, id="tuple-key"),
    ],
)
def test_writer_refuses_nodes_that_are_not_json(tmp_path: Path, node: dict[str, Any]) -> None:
    """A handler's node that JSON cannot carry (the reader would reject NaN tokens) is a SaveError,
    and nothing is written."""
    with pytest.raises(zarchive.SaveError, match="not be JSON"):
        zarchive.ZArchive(handlers_pre=[RawNodeHandler()]).save({"a": Raw(node)}, tmp_path / "x.zarc")
    assert list(tmp_path.iterdir()) == []


def test_a_refused_node_does_not_spoil_later_saves(tmp_path: Path) -> None:
    """The encoder remembers the containers it is inside (to catch cycles); a save refused midway must
    not leave them behind, or saving the same lists again would report a cycle that is not there."""
    inner = [[1, 2], [object()]]
    za = zarchive.ZArchive(handlers_pre=[RawNodeHandler()])
    with pytest.raises(zarchive.SaveError, match="not JSON serializable"):
        za.save({"a": Raw({"v": inner})}, tmp_path / "x.zarc")
    inner.pop()
    za.save({"a": Raw({"v": inner})}, tmp_path / "x.zarc")
    assert za.read(tmp_path / "x.zarc")["a"] == {"v": [[1, 2]]}


def test_writer_writes_non_string_keys_as_json_does(tmp_path: Path) -> None:
    """Keys JSON turns into strings (ints, floats, bools, None) come out quoted, in short and long nodes."""
    node = {"short": {1: 2}, "long": {5: "x" * 200, 2.5: "y", True: "z", None: "n"}}
    arc = zarchive.ZArchive(handlers_pre=[RawNodeHandler()])
    arc.save({"a": Raw(node)}, tmp_path / "x.zarc")
    assert arc.read(tmp_path / "x.zarc")["a"] == {
        "short": {"1": 2},
        "long": {"5": "x" * 200, "2.5": "y", "true": "z", "null": "n"},
    }


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(np.zeros((1,) * NPY_MAXDIMS, dtype="<U100"), id="npy-header-max-dims"),
        pytest.param(np.empty((0,) + (10**4,) * 4, dtype="<c16"), id="npy-huge-shape-zero-size"),
    ],
)
def test_writer_sizes_stay_within_reader_limits(tmp_path: Path, value: np.ndarray) -> None:
    zarchive.save({"a": value}, tmp_path / "x.zarc", external_array_threshold=0)
    back = zarchive.read(tmp_path / "x.zarc")["a"]
    assert back.shape == value.shape and back.dtype == value.dtype
