"""zarchive.ModelStore: versions saved, listed, loaded and compared; never overwritten by accident;
safe for concurrent savers; damaged versions refused with errors that name them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import forkrun
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.store.files import StoreFiles, VersionExists
from zarchive.store.semver import Version
from zarchive.weights_hash import state_dict_hash

sys.path.insert(0, str(Path(__file__).parent))
from models_a import Config, Model

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


def _model(seed: int = 0, **cfg: Any) -> Model:
    torch.manual_seed(seed)
    return Model(Config(**cfg))


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# --- semantic versions ---
def test_semver_order_is_the_specs() -> None:
    ordered = [
        "0.9.0",
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.2.0",
        "1.10.0",
        "2.0.0",
    ]
    shuffled = ordered[::2] + ordered[1::2]
    assert [str(v) for v in sorted(Version.parse(s) for s in shuffled)] == ordered
    assert Version.parse("1.0.0+b.1").precedence() == Version.parse("1.0.0+b.2").precedence()
    assert Version.parse("1.0.0+b.1") != Version.parse("1.0.0+b.2")


@pytest.mark.parametrize("bad", ["1", "1.0", "01.0.0", "1.0.0-", "1.0.0-01", "v1.0.0", "1.0.0 ", "1.0.0+", "a.b.c", ""])
def test_semver_refuses(bad: str) -> None:
    with pytest.raises(ValueError, match="not a semantic version"):
        Version.parse(bad)


@given(
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.lists(st.from_regex(r"\A(0|[1-9][0-9]{0,3}|[a-z-][a-z0-9-]{0,5})\Z"), max_size=3),
)
def test_semver_round_trips(major: int, minor: int, patch: int, pre: list[str]) -> None:
    text = f"{major}.{minor}.{patch}" + ("-" + ".".join(pre) if pre else "")
    v = Version.parse(text)
    assert str(v) == text and Version.parse(str(v)) == v
    if pre:
        assert v < Version(major, minor, patch)


# --- save, list, load, diff ---
def test_round_trip(tmp_path: Path) -> None:
    store = zarchive.ModelStore(tmp_path / "new" / "models")  # created when missing
    m1, m2 = _model(0), _model(1, d_hidden=16)
    info = store.save(m1, "1.0.0", metrics={"acc": np.float32(0.5), "loss": torch.tensor(0.25)}, tags=["prod"])
    assert isinstance(info, zarchive.VersionInfo)
    assert info.metrics == {"acc": 0.5, "loss": 0.25} and info.tags == ("prod",) and info.description == ""
    assert info.torch_version == torch.__version__ and type(info.torch_version) is str
    assert info.weights_hash == state_dict_hash(m1.state_dict())
    assert info.size == os.path.getsize(store.path("1.0.0")) and info.exports == {}
    store.save(m2, "1.1.0-rc.1", description="wider")
    store.save(m2, "0.9.0")
    assert [v.version for v in store.versions()] == ["0.9.0", "1.0.0", "1.1.0-rc.1"]
    assert store.latest().version == "1.1.0-rc.1" and store.info("1.0.0") == info
    loaded = store.load("1.0.0")
    assert type(loaded) is Model and loaded.config == m1.config and _same_weights(loaded, m1)
    assert _same_weights(store.load(), m2)  # latest
    assert loaded.training == m1.training
    # a version file is an ordinary model archive
    assert _same_weights(Model.read(store.path("1.0.0")), m1)
    with zarchive.open(store.path("1.0.0")) as arc:
        assert arc.weights_hash() == info.weights_hash


def test_diff(tmp_path: Path) -> None:
    store = zarchive.ModelStore(tmp_path)
    m1 = _model(0)
    m2 = _model(0)
    with torch.no_grad():
        m2.out.bias.add_(1.0)
    m3 = _model(0, n_layers=3, act="gelu")
    store.save(m1, "1.0.0", metrics={"acc": 0.9, "f1": 0.5})
    store.save(m2, "1.0.1", metrics={"acc": 0.92, "f1": 0.5, "new": 1})
    store.save(m3, "2.0.0")
    d = store.diff("1.0.0", "1.0.1")
    assert d.tensors_changed == ("out.bias",) and not d.tensors_added and not d.tensors_removed
    assert d.config == {} and d.model_class is None
    assert d.metrics == {"acc": {"old": 0.9, "new": 0.92}, "new": {"new": 1}}
    d2 = store.diff("1.0.0", "2.0.0")
    assert d2.config == {"n_layers": {"old": 2, "new": 3}, "act": {"old": "relu", "new": "gelu"}}
    assert d2.tensors_added == ("layers.2.bias", "layers.2.weight")
    # the same seed builds layers 0 and 1 alike; the new layer 2 drew the numbers `out` had before
    assert d2.tensors_changed == ("out.bias", "out.weight")
    same = store.diff("1.0.0", "1.0.0")
    assert not same and same.same_weights
    assert json.loads(json.dumps(d2.to_dict()))["tensors"]["added"] == ["layers.2.bias", "layers.2.weight"]
    assert "out.bias" in str(d) and "acc: 0.9 -> 0.92" in str(d)


def test_never_overwritten_unless_asked(tmp_path: Path) -> None:
    store = zarchive.ModelStore(tmp_path)
    first = store.save(_model(0), "1.0.0")
    with pytest.raises(VersionExists, match=r"1\.0\.0 is already in the store.*overwrite=True"):
        store.save(_model(1), "1.0.0")
    assert store.info("1.0.0").weights_hash == first.weights_hash
    assert isinstance(VersionExists("x"), zarchive.SaveError)
    second = store.save(_model(1), "1.0.0", overwrite=True)
    assert second.weights_hash != first.weights_hash == first.weights_hash
    assert store.info("1.0.0").weights_hash == second.weights_hash
    assert sorted(os.listdir(tmp_path)) == ["1.0.0.zarc"]  # no temporary files left behind


def test_commit_is_exclusive_even_after_the_check(tmp_path: Path) -> None:
    """Another saver commits between this saver's check and its commit: the link refuses, and the
    other saver's file is left as it was."""
    files = StoreFiles(tmp_path)
    zarchive.ModelStore(tmp_path).save(_model(0), "0.1.0")
    winner = tmp_path / "0.1.0.zarc"
    before = winner.read_bytes()

    def write(path: str) -> None:
        zarchive.save(_model(5), path)

    with pytest.raises(VersionExists):
        files.commit("0.1.0.zarc", write, overwrite=False)
    assert winner.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["0.1.0.zarc"]


def test_arguments_checked(tmp_path: Path) -> None:
    store = zarchive.ModelStore(tmp_path)
    m = _model(0)
    with pytest.raises(ValueError, match="not a semantic version"):
        store.save(m, "1.0")
    with pytest.raises(TypeError, match="ConfiguredModel"):
        store.save(torch.nn.Linear(2, 2), "1.0.0")
    with pytest.raises(ValueError, match="'loss' is nan"):
        store.save(m, "1.0.0", metrics={"loss": float("nan")})
    with pytest.raises(TypeError, match="not one string"):
        store.save(m, "1.0.0", tags="prod")
    with pytest.raises(TypeError, match="metric 'w' is a"):
        store.save(m, "1.0.0", metrics={"w": torch.ones(3)})
    assert os.listdir(tmp_path) == []
    with pytest.raises(zarchive.MemberNotFoundError, match="no versions yet"):
        store.latest()
    store.save(m, "1.0.0")
    with pytest.raises(zarchive.MemberNotFoundError, match=r"no version 2\.0\.0 .*versions: 1\.0\.0"):
        store.load("2.0.0")


def test_listing_ignores_partial_and_foreign_files(tmp_path: Path) -> None:
    store = zarchive.ModelStore(tmp_path)
    store.save(_model(0), "1.0.0")
    (tmp_path / ".1.1.0.zarc.0123.partial").write_bytes(b"PK\x03\x04 half a file")  # a save in progress
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "best.zarc").write_bytes(b"not a version")
    (tmp_path / "sub").mkdir()
    assert store.version_names() == ["1.0.0"]
    assert [v.version for v in store.versions()] == ["1.0.0"]


def test_listing_during_a_save_does_not_show_it(tmp_path: Path) -> None:
    """Inside the save, with the whole file written but not yet committed, the version is not there."""
    store = zarchive.ModelStore(tmp_path)
    seen: list[list[str]] = []

    def write(path: str) -> None:
        zarchive.save(_model(0), path)
        seen.append(store.version_names())

    StoreFiles(tmp_path).commit("2.0.0.zarc", write, overwrite=False)
    assert seen == [[]]
    assert store.version_names() == ["2.0.0"]


_metric = st.one_of(st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5))


@settings(max_examples=15, deadline=None)
@given(
    metrics=st.dictionaries(st.text(max_size=8), _metric | st.lists(_metric, max_size=3), max_size=4),
    description=st.text(max_size=30),
    tags=st.lists(st.text(max_size=6), max_size=3),
)
def test_record_round_trips(
    tmp_path_factory: pytest.TempPathFactory, metrics: dict[str, Any], description: str, tags: list[str]
) -> None:
    store = zarchive.ModelStore(tmp_path_factory.mktemp("s"))
    saved = store.save(_model(0), "0.1.0", metrics=metrics, description=description, tags=tags)
    assert saved == store.info("0.1.0") == store.versions()[0]
    assert (saved.metrics, saved.description, saved.tags) == (metrics, description, tuple(tags))


def test_listing_reads_no_tensors_and_needs_no_torch(tmp_path: Path) -> None:
    store = zarchive.ModelStore(tmp_path)
    store.save(_model(0), "1.0.0", metrics={"acc": 0.5})
    code = (
        "import sys, zarchive; s = zarchive.ModelStore(sys.argv[1]); rows = s.versions(); s.info('1.0.0');"
        "print(rows[0].version, rows[0].metrics['acc'], 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert out.stdout.split() == ["1.0.0", "0.5", "False"]


# --- concurrency: real processes ---
def _savers(tmp_path: Path, jobs: list[tuple[str, int]]) -> list[str]:
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs, readies = [], []
    for i, (version, seed) in enumerate(jobs):
        ready = tmp_path / f"ready{i}"
        readies.append(ready)
        cmd = [sys.executable, str(TESTS / "store_worker.py"), str(tmp_path / "store"), version, str(seed)]
        procs.append(subprocess.Popen([*cmd, str(ready), str(go)], stdout=subprocess.PIPE, text=True, env=env))
    deadline = time.monotonic() + 90
    while not all(r.exists() for r in readies):
        assert time.monotonic() < deadline, "the savers did not start"
        assert all(p.poll() is None for p in procs), "a saver died before starting"
        time.sleep(0.01)
    go.touch()
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        outs.append(out.strip())
    return outs


def test_concurrent_savers(tmp_path: Path) -> None:
    """Three processes save at once: one 1.0.0, two 1.1.0. The different versions both land; of the
    two savers of one version exactly one wins, and the other is told, not overwritten."""
    outs = _savers(tmp_path, [("1.0.0", 1), ("1.1.0", 2), ("1.1.0", 3)])
    store = zarchive.ModelStore(tmp_path / "store")
    rows = store.versions()
    assert [r.version for r in rows] == ["1.0.0", "1.1.0"]
    assert outs[0] == f"saved {rows[0].weights_hash}" and rows[0].metrics == {"seed": 1}
    assert sorted(o.split()[0] for o in outs[1:]) == ["exists", "saved"]
    winner = 2 if outs[1].startswith("saved") else 3
    assert outs[winner - 1] == f"saved {rows[1].weights_hash}" and rows[1].metrics == {"seed": winner}
    for r in rows:
        assert store.load(r.version).config.d_hidden == 64  # whole, loadable, and its hash checked
    assert sorted(os.listdir(tmp_path / "store")) == ["1.0.0.zarc", "1.1.0.zarc"]  # no temporary files left


# --- damaged versions ---
def test_truncated_version_refused_naming_it(tmp_path: Path) -> None:
    store = zarchive.ModelStore(tmp_path)
    store.save(_model(0), "1.0.0")
    store.save(_model(1), "1.1.0")
    path = Path(store.path("1.1.0"))
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    for call in (store.versions, lambda: store.load("1.1.0"), lambda: store.info("1.1.0")):
        with pytest.raises(zarchive.FormatError, match=r"version 1\.1\.0 \(.*1\.1\.0\.zarc\)"):
            call()
    assert _same_weights(store.load("1.0.0"), _model(0))  # the others are fine


def test_changed_weights_refused_by_the_hash(tmp_path: Path) -> None:
    """A file whose checksums are intact but whose weights are not what was saved (rewritten with
    another model and the old record): the weights hash refuses it."""
    store = zarchive.ModelStore(tmp_path)
    store.save(_model(0), "1.0.0")
    path = store.path("1.0.0")
    with zarchive.open(path) as arc:
        custom = arc.meta["settings"]["custom"]
    zarchive.save(_model(1), path, custom_settings=custom)
    with pytest.raises(zarchive.IntegrityError, match=r"version 1\.0\.0 .*weights hash of the file"):
        store.load("1.0.0")
    assert _same_weights(store.load("1.0.0", verify_hash=False), _model(1))


def test_damaged_member_refused_naming_the_version(tmp_path: Path) -> None:
    store = zarchive.ModelStore(tmp_path, compress=False)
    model = _model(0)
    store.save(model, "1.0.0")
    path = Path(store.path("1.0.0"))
    raw = bytearray(path.read_bytes())
    needle = model.out.weight.detach().numpy().tobytes()[:16]
    at = bytes(raw).find(needle)
    assert at > 0
    raw[at] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(zarchive.IntegrityError, match=r"version 1\.0\.0"):
        store.load("1.0.0")
    with pytest.raises(zarchive.IntegrityError, match=r"version 1\.0\.0"):
        store.load("1.0.0", verify_hash=False)  # the member checksums catch it too


def test_foreign_and_renamed_files_refused(tmp_path: Path) -> None:
    store = zarchive.ModelStore(tmp_path)
    store.save(_model(0), "1.0.0")
    zarchive.save(_model(0), tmp_path / "2.0.0.zarc")  # a plain archive dropped in
    with pytest.raises(zarchive.FormatError, match=r"version 2\.0\.0 .*not saved by a ModelStore"):
        store.info("2.0.0")
    os.remove(tmp_path / "2.0.0.zarc")
    shutil.copy(store.path("1.0.0"), tmp_path / "1.0.1.zarc")
    with pytest.raises(zarchive.FormatError, match=r"records version '1\.0\.0'"):
        store.info("1.0.1")


# --- URLs ---
def test_fsspec_memory_store() -> None:
    root = "memory://zarchive-test-store/models"
    store = zarchive.ModelStore(root)
    try:
        store.save(_model(0), "1.0.0", metrics={"acc": 1})
        store.save(_model(1), "1.2.0")
        with pytest.raises(VersionExists):
            store.save(_model(2), "1.2.0")
        assert [v.version for v in store.versions()] == ["1.0.0", "1.2.0"]
        assert _same_weights(store.load("1.2.0"), _model(1))
        assert store.diff("1.0.0", "1.2.0").metrics == {"acc": {"old": 1}}
        assert store.path("1.0.0") == root + "/1.0.0.zarc"
    finally:
        import fsspec

        fsspec.filesystem("memory").rm("/zarchive-test-store", recursive=True)


# --- the command line ---
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return forkrun.cli(  # a process of its own, forked from a server that imported torch
        *args,
        cwd=TESTS,  # so that models_a is importable as the file's class
        env={"PYTHONPATH": f"{ROOT}{os.pathsep}{TESTS}", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


def test_cli(tmp_path: Path) -> None:
    store = zarchive.ModelStore(tmp_path)
    m2 = _model(0)
    with torch.no_grad():
        m2.out.bias.add_(1.0)
    first = store.save(_model(0), "1.0.0", metrics={"acc": 0.9}, description="first one", tags=("prod", "cpu"))
    store.save(m2, "1.1.0", metrics={"acc": 0.95})
    ls = _cli("store", "ls", str(tmp_path))
    assert ls.returncode == 0, ls.stderr
    lines = ls.stdout.splitlines()
    assert lines[0].split()[0] == "VERSION" and lines[1].startswith("1.0.0") and lines[2].startswith("1.1.0")
    assert first.weights_hash[:12] in lines[1] and "prod,cpu" in lines[1] and "acc=0.9" in lines[1]
    assert "first one" in lines[1]
    as_json = json.loads(_cli("store", "ls", "--json", str(tmp_path)).stdout)
    assert as_json[0] == first.to_dict()
    show = _cli("store", "show", str(tmp_path), "latest")
    assert show.returncode == 0 and "version:       1.1.0" in show.stdout and "acc: 0.95" in show.stdout
    diff = _cli("store", "diff", str(tmp_path), "1.0.0", "1.1.0")
    assert diff.returncode == 0 and "~ out.bias" in diff.stdout and "acc: 0.9 -> 0.95" in diff.stdout
    diff_json = json.loads(_cli("store", "diff", "--json", str(tmp_path), "1.0.0", "1.1.0").stdout)
    assert diff_json["tensors"]["changed"] == ["out.bias"]
    bad = _cli("store", "show", str(tmp_path), "1.0")
    assert bad.returncode == 2 and "not a semantic version" in bad.stderr and "Traceback" not in bad.stderr
    missing = _cli("store", "show", str(tmp_path), "9.9.9")
    assert missing.returncode == 2 and "no version 9.9.9" in missing.stderr
    nostore = _cli("store", "ls", str(tmp_path / "nope"))
    assert nostore.returncode == 2 and "no such store" in nostore.stderr
    path = Path(store.path("1.1.0"))
    path.write_bytes(path.read_bytes()[:100])
    damaged = _cli("store", "ls", str(tmp_path))
    assert damaged.returncode == 2 and "version 1.1.0" in damaged.stderr and "Traceback" not in damaged.stderr


def test_versions_with_exports_list_them_and_load(tmp_path: Path) -> None:
    """store.save(..., export=...) goes through the archive's exports (issue 16 item 1): the listing
    shows each export and its size, and the version still loads and checks its hash."""
    pytest.importorskip("onnxruntime")
    store = zarchive.ModelStore(tmp_path / "s")
    model = _model(seed=3)
    x = torch.randn(2, model.config.d_in)
    store.save(model, "1.0.0", export=("onnx", "torchscript"), example_inputs=(x,))
    info = store.info("1.0.0")
    assert set(info.exports) == {"onnx", "torchscript"}
    assert all(e["size"] > 0 for e in info.exports.values())
    assert store.versions()[0].exports == info.exports
    loaded = store.load("1.0.0")
    assert _same_weights(loaded, model)
    with zarchive.open(tmp_path / "s" / "1.0.0.zarc") as arc:
        (got,) = arc.onnx_session(providers=["CPUExecutionProvider"]).run(None, {"input": x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(got, model.eval()(x).numpy(), rtol=1e-4, atol=1e-5)
