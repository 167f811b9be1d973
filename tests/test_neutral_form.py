"""The class-free neutral form (spec/neutral.md): `zarchive neutral` on every frozen example prints
exactly its committed `<name>.generic.json`, without the examples' classes; archives written fresh
give the same form every time, whatever their compression; the command runs as a real subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import forkrun
import golden_models as gm
import hostile.models  # noqa: F401 - classes some corpus files name (as training code would have)
import numpy as np
import pandas as pd
import pytest
import torch
from hostile.make_corpus import CASES, CORPUS_DIR
from hostile.worker import Worker
from json_walk import parts as json_parts

import zarchive
from zarchive.neutral import canonical_json, neutral_form_of

EXAMPLES = Path(__file__).resolve().parents[1] / "spec" / "examples"
sys.path.insert(0, str(EXAMPLES))
import make_generic

ARCHIVES = sorted([*EXAMPLES.glob("*.zarc"), EXAMPLES / "dcp_sharded"])  # (a checkpoint directory too)


def _form_file(archive: Path) -> Path:
    return EXAMPLES / (archive.name.removesuffix(".zarc").removesuffix(".uncompressed") + ".generic.json")


def test_every_example_has_a_generic_file() -> None:
    present = {p.name for p in EXAMPLES.glob("*.generic.json")}
    wanted = {make_generic.form_path(a).name for a in make_generic.examples()}
    assert present == wanted, f"missing: {sorted(wanted - present)}; stray: {sorted(present - wanted)}"


@pytest.mark.parametrize("archive", ARCHIVES, ids=[p.name for p in ARCHIVES])
def test_example_reads_to_its_generic_form(archive: Path) -> None:
    committed = _form_file(archive).read_text(encoding="ascii")
    derived = canonical_json(neutral_form_of(archive))
    if derived != committed:  # as data first, for a readable difference
        assert json.loads(derived) == json.loads(committed), f"{archive.name} reads differently than described"
    assert derived == committed, f"{_form_file(archive).name} is not in canonical form"


def test_generic_form_needs_no_class(tmp_path: Path) -> None:
    """The examples' classes live in tests/golden_models.py; a fresh interpreter that never imports
    them prints the same form (the command resolves nothing)."""
    archive = EXAMPLES / "configured_model_extras.zarc"
    code = "import sys, zarchive.cli as c; sys.exit(c.main(['neutral', sys.argv[1]]))"
    done = subprocess.run(
        [sys.executable, "-c", code, str(archive)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == _form_file(archive).read_text(encoding="ascii")


@pytest.mark.parametrize("archive", make_generic.examples(), ids=lambda p: p.name)
def test_generic_form_is_plain_and_ascii(archive: Path) -> None:
    """Canonical text: ASCII, sorted keys, no floats anywhere (every float is bits), a path on every
    description made from a node."""
    text = make_generic.form_path(archive).read_text(encoding="ascii")
    doc = json.loads(text)
    assert doc["format"] == "zarchive-generic-1"
    for x in json_parts(doc):
        assert not isinstance(x, float), f"{archive.name}: a JSON float in the form"
        if isinstance(x, dict):
            assert list(x) == sorted(x)
    assert text.isascii() and text.endswith("\n")


# --- hostile files: refused with a ZArchiveError, in bounded time and memory, never a crash ---


@pytest.fixture(scope="module")
def worker() -> Any:
    return Worker.get()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_hostile_corpus_through_the_neutral_form(worker: Any, case: Any) -> None:
    """Each corpus file, in a child under a 2 GiB address-space limit and a minute: the form of a
    valid file, or a ZArchiveError (a file damaged where a read would fail; class mismatches that only
    building the object finds are no error here: the form builds nothing)."""
    path = str(Path(CORPUS_DIR) / f"{case.name}.zarc")
    reply = worker.call(op="neutral", path=path, mem_mb=2048, timeout=60)
    assert not reply.get("timeout") and reply.get("signal") is None, reply
    assert reply.get("ok") or reply.get("zarchive_error"), reply
    if case.error is None:  # a file the corpus calls valid: described wherever a read reads it
        read = worker.call(op="read", path=path, mem_mb=2048, timeout=60, verify=False)
        assert reply.get("ok") == read.get("ok"), (reply, read)


# --- archives written fresh: the form is deterministic, the same compressed or not, and true ---
def _state_dict() -> Any:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
    t = torch.arange(8.0)
    views = {"t": t, "half": t[:2], "ints": t.view(torch.int32)}
    return {"sd": net.state_dict(), "tied": {"a": net[0].weight.data, "b": net[0].weight.data}, "view": views}


def _model() -> Any:
    torch.manual_seed(1)
    model = gm.TiedNet(gm.NetConfig(d_in=3, d_hidden=4, n_classes=2))
    model.drop.eval()
    return {"tied": model, "tiny": gm.TinyNet(gm.NetConfig()), "level": gm.Level.LOW, "rw": gm.Perm.R | gm.Perm.W}


def _pandas() -> Any:
    n = 300
    frame = pd.DataFrame({
        "i": np.arange(n), "f": np.linspace(0, 1, n, dtype=np.float32),
        "s": pd.array([f"v{i % 7}" if i % 11 else None for i in range(n)], dtype="string"),
        "u": pd.array([f"w{i}" for i in range(n)], dtype="str"),
        "m": pd.array([i if i % 3 else None for i in range(n)], dtype="Int16"),
        "c": pd.Categorical([("a", "b", "c")[i % 3] for i in range(n)]),
        "t": pd.date_range("2024-01-01", periods=n, freq="h", tz="Europe/Paris"),
        "p": pd.period_range("2020Q1", periods=n, freq="Q"),
    })  # fmt: skip
    frame.index = pd.MultiIndex.from_arrays([np.arange(n) % 2, np.arange(n)], names=["half", "row"])
    return {"frame": frame, "series": pd.Series([1.5, None, 3.0], name=("x", 1), dtype="Float64")}


def _polars() -> Any:
    pl = pytest.importorskip("polars")
    return pl.DataFrame({
        "i": list(range(300)), "s": [f"s{i % 5}" if i % 4 else None for i in range(300)],
        "l": [[i, i + 1] for i in range(300)], "st": [{"a": i, "b": str(i)} for i in range(300)],
    })  # fmt: skip


def _compressed() -> Any:
    torch.manual_seed(2)
    return {
        "w": torch.randn(512, 64).to(torch.bfloat16),
        "f": torch.randn(256, 256),
        "a": np.random.default_rng(0).standard_normal(4096).astype(np.float32),
    }


def _save(value: Any, path: Path, **kw: Any) -> Path:
    return Path(zarchive.save(value, path, durable=False, **kw))


FRESH = {"state_dict": _state_dict, "model": _model, "pandas": _pandas, "polars": _polars}


@pytest.mark.parametrize("kind", sorted(FRESH))
def test_fresh_archive_form_is_deterministic(tmp_path: Path, kind: str) -> None:
    value = FRESH[kind]()
    packed = _save(value, tmp_path / "a.zarc")
    loose = _save(value, tmp_path / "b.zarc", compress=False)
    text = canonical_json(neutral_form_of(packed))
    assert text == canonical_json(neutral_form_of(packed)) == canonical_json(neutral_form_of(loose))
    json.loads(text)


def test_fresh_tensors_are_described_truly(tmp_path: Path) -> None:
    import hashlib

    value = _state_dict()
    entries = dict(neutral_form_of(_save(value, tmp_path / "a.zarc"))["value"]["entries"])
    views = dict(entries["view"]["entries"])
    t = value["view"]["t"]
    assert views["t"]["sha256"] == hashlib.sha256(t.numpy().tobytes()).hexdigest()
    assert views["half"]["storage"] == {"first": "view/t", "offset": 0, "stride": [1]}
    assert views["ints"]["dtype"] == "int32" and views["ints"]["storage"]["first"] == "view/t"
    tied = dict(entries["tied"]["entries"])
    # the same view of the state dict's first weight: one tensor object, first met in the state dict
    assert tied["a"]["same_as"] == tied["b"]["same_as"] == "sd/0.weight" and "storage" not in tied["b"]


def test_fresh_checkpoint_and_compressed_weights(tmp_path: Path) -> None:
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 16)).sum().backward()
    optimizer.step()
    forms = []
    for compress_weights in (False, True):
        path = tmp_path / f"ckpt{compress_weights}.zarc"
        zarchive.save_checkpoint(path, model, optimizer, epoch=1, compress_weights=compress_weights)
        forms.append(neutral_form_of(path))
    assert _without_rng(forms[0]) == _without_rng(forms[1])  # bgzstd members read to the same values
    value = _compressed()
    a, b = _save(value, tmp_path / "w.zarc", compress_weights=True), _save(value, tmp_path / "x.zarc", compress=False)
    with zarchive.open(a) as arc:
        assert "bgzstd" in {m["codec"] for m in arc.members.values()}
    assert canonical_json(neutral_form_of(a)) == canonical_json(neutral_form_of(b))


def _without_rng(form: dict[str, Any]) -> Any:
    return [e for e in form["value"]["entries"] if e[0] != "rng"]


def test_fresh_dcp_directory(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    from zarchive.dcp import ZArchiveWriter

    state = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "step": 4, "groups": [{"lr": 0.5}]}
    dcp.save(state, storage_writer=ZArchiveWriter(tmp_path / "ckpt"), no_dist=True)
    form = neutral_form_of(tmp_path / "ckpt")
    assert form == neutral_form_of(tmp_path / "ckpt")
    entries = dict(form["value"]["entries"])
    w = dict(entries["model"]["entries"])["w"]
    assert w["shape"] == [2, 3] and w["path"] == "model/w"
    assert entries["step"] == {"kind": "int", "value": "4", "path": "step"}
    assert entries["groups"]["items"][0]["entries"][0][1]["path"] == "groups/0/lr"


def test_the_command_prints_the_form_and_fails_cleanly(tmp_path: Path) -> None:
    path = _save(_model(), tmp_path / "m.zarc")
    done = forkrun.cli("neutral", path)  # a process of its own, forked from a server that imported torch
    assert done.returncode == 0 and done.stdout == canonical_json(neutral_form_of(path)), done.stderr
    damaged = tmp_path / "bad.zarc"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    done = forkrun.cli("neutral", damaged)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert "bad.zarc" in done.stderr


def test_a_member_named_by_many_nodes_is_decoded_and_hashed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan charges a member once however many nodes name it; the form's work is the same (else
    a small file naming one compressed member from thousands of nodes would take hours)."""
    from hostile.craft import pack, unpack

    from zarchive.neutral.describe import Describer

    src = _save({"b": b"ab" * 5000, "a": np.zeros(8000, dtype=np.int8)}, tmp_path / "s.zarc")
    parts = unpack(src.read_bytes())
    b, a = parts.manifest["root"]["b"], parts.manifest["root"]["a"]
    assert b["$ref"].endswith(".zst") and a["$ref"].endswith(".zst")
    parts.manifest["root"] = {"b": [b] * 500, "a": [a] * 500}
    many = tmp_path / "many.zarc"
    many.write_bytes(pack(parts))
    loads: list[str] = []
    real = Describer.load
    monkeypatch.setattr(Describer, "load", lambda self, node, path: loads.append(path) or real(self, node, path))
    entries = dict(neutral_form_of(many)["value"]["entries"])
    assert len(loads) == 2  # one member read, one array loaded
    assert len({json.dumps(d["sha256"]) for d in entries["b"]["items"]}) == 1
    assert entries["a"]["items"][499]["same_as"] == "a/0"
