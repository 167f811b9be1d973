"""The `zarchive` command line on real files.

Every command runs at least once as a real subprocess (`python -m zarchive` and the installed
`zarchive` script), error paths included. Starting Python with torch costs seconds of CPU, so those
processes run concurrently from a module fixture and the tests check their results; option variants
are then checked in-process through `zarchive.cli.main(argv)`, the function the script calls.
No command may show a Python traceback.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file
from zanj import ZANJ

import zarchive
from zarchive.container import npy

PY = [sys.executable, "-m", "zarchive"]
SCRIPT = str(Path(sys.executable).with_name("zarchive"))


@dataclass
class Ran:
    argv: list[str]
    code: int
    out: str
    err: str


def _inputs(d: Path) -> dict[str, Any]:
    """Every file the commands below read."""
    w = torch.arange(32, dtype=torch.float32).reshape(8, 4)
    run = {
        "metrics": pd.DataFrame({"step": np.arange(50), "loss": np.linspace(1.0, 0.1, 50)}),
        "weights": {"w": w, "tied": w, "b": torch.ones(3, dtype=torch.bfloat16)},
        "arr": np.arange(1000.0),
        "notes": "hello world",
        "lr": 0.001,
        "words": [f"w{i}" for i in range(400)],
        "deep": {"x": np.arange(300.0)},  # a member in a folder: deep/x.npy
    }
    zarchive.save(run, d / "run.zarc")
    raw = bytearray((d / "run.zarc").read_bytes())
    with zipfile.ZipFile(d / "run.zarc") as z:
        name = next(n for n in z.namelist() if n.startswith("arr.npy"))
        info = z.getinfo(name)
        raw[info.header_offset + 30 + len(info.filename) + len(info.extra) + info.file_size // 2] ^= 0xFF
    (d / "damaged.zarc").write_bytes(bytes(raw))
    (d / "notes.txt").write_text("just text\n")
    save_file({"enc.weight": torch.randn(4, 2), "head/bias": torch.zeros(2)}, d / "model.safetensors")
    torch.save(torch.nn.Linear(3, 2).state_dict(), d / "sd.pt")
    torch.save({"w": torch.ones(2), "evil": _Payload(str(d / "executed"))}, d / "evil.pt")
    ZANJ().save({"a": np.arange(400), "cfg": {"lr": 0.1}}, str(d / "old.zanj"))
    with zipfile.ZipFile(d / "escape.zarc", "w") as z:  # stored members, one named to escape
        z.writestr("manifest.json", "{}")
        z.writestr("metadata.json", "{}")
        z.writestr("../escaped.txt", "gotcha")
    (d / "existing").mkdir()
    (d / "existing" / "manifest.json").write_text("keep me")
    (d / "outside").mkdir()
    (d / "trap").mkdir()
    os.symlink(d / "outside", d / "trap" / "deep")
    (d / "zc_cli_types.py").write_text(
        "import dataclasses\n\n@dataclasses.dataclass\nclass RunInfo:\n    name: str\n    seed: int\n"
    )
    spec = importlib.util.spec_from_file_location("zc_cli_types", d / "zc_cli_types.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["zc_cli_types"] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        zarchive.save({"info": module.RunInfo("baseline", 7)}, d / "info.zarc")
    finally:
        del sys.modules["zc_cli_types"]
    return run


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (open, (self.marker, "w"))


# name -> a chain of command lines run in order (chains run concurrently with each other)
CHAINS: dict[str, list[list[str]]] = {
    "help": [[SCRIPT, "--help"]],
    "ls": [[*PY, "ls", "run.zarc"]],
    "show": [[*PY, "show", "run.zarc"]],
    "meta": [[*PY, "meta", "run.zarc"]],
    "cat": [[*PY, "cat", "run.zarc", "metrics", "--rows", "3"]],
    "cat-missing": [[*PY, "cat", "run.zarc", "weights/nope"]],
    "verify": [[*PY, "verify", "damaged.zarc"]],
    "extract": [[*PY, "extract", "run.zarc", "out/new"]],
    "to-safetensors": [[*PY, "convert", "run.zarc", "run.safetensors"]],
    "from-evil-torch": [[*PY, "convert", "evil.pt", "evil.zarc"]],
}


def _run_chain(argvs: list[list[str]], cwd: Path) -> list[Ran]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    env.pop("ZARCHIVE_DEBUG", None)
    out = []
    for argv in argvs:
        p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, env=env, check=False)
        out.append(Ran(argv, p.returncode, p.stdout, p.stderr))
    return out


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[Ran]], dict[str, Any]]:
    d = tmp_path_factory.mktemp("cli")
    run = _inputs(d)
    with ThreadPoolExecutor(max_workers=max(2, min(6, os.cpu_count() or 2))) as pool:
        futures = {name: pool.submit(_run_chain, argvs, d) for name, argvs in CHAINS.items()}
        results = {name: f.result() for name, f in futures.items()}
    return d, results, run


def _one(cli: Any, name: str, i: int = 0, code: int = 0) -> Ran:
    r = cli[1][name][i]
    assert "Traceback" not in r.err and "Traceback" not in r.out, r.err
    assert r.code == code, f"{r.argv}: exit {r.code}\n{r.out}\n{r.err}"
    return r


def _main(
    cli: Any, argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, code: int = 0
) -> tuple[str, str]:
    """The script's own entry point, in this process, in the fixture's directory."""
    from zarchive.cli import main

    monkeypatch.chdir(cli[0])
    capsys.readouterr()
    got = main(argv)
    out, err = capsys.readouterr()
    assert got == code, f"{argv}: exit {got}\n{out}\n{err}"
    return out, err


# --- help ----------------------------------------------------------------------------------------
def test_help_lists_commands_with_examples(cli: Any) -> None:
    top = _one(cli, "help").out
    for command in ("ls", "show", "meta", "cat", "verify", "extract", "convert"):
        assert f"zarchive {command} " in top


def test_every_command_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    from zarchive.cli import main

    for command in ("ls", "show", "meta", "cat", "verify", "extract", "convert"):
        with pytest.raises(SystemExit) as done:
            main([command, "--help"])
        assert done.value.code == 0
        out = capsys.readouterr().out
        assert "examples:" in out and f"zarchive {command} " in out


# --- ls / show / meta ----------------------------------------------------------------------------
def test_ls(cli: Any) -> None:
    out = _one(cli, "ls").out
    lines = {line.split()[0]: line for line in out.splitlines()[1:-1]}
    assert lines["manifest.json"].split()[1] == "none" and "(object tree)" in lines["manifest.json"]
    weights = next(v for k, v in lines.items() if k.startswith("weights.safetensors"))
    assert "2 tensors" in weights and "/weights/w" in weights
    assert "/notes" not in out  # inline values live in the manifest, not in a member
    assert out.splitlines()[-1].startswith(f"{len(lines)} members")


def test_ls_json(cli: Any, capsys: Any, monkeypatch: Any) -> None:
    rows = {r["member"]: r for r in json.loads(_main(cli, ["ls", "--json", "run.zarc"], capsys, monkeypatch)[0])}
    weights = next(r for m, r in rows.items() if m.startswith("weights.safetensors"))
    assert weights["tensors"] == 2 and sorted(weights["object_paths"]) == ["weights/b", "weights/tied", "weights/w"]
    words = next(r for m, r in rows.items() if m.startswith("words.jsonl"))
    assert words["codec"] == "zstd" and words["stored_size"] < words["size"]
    assert rows["metadata.json"]["codec"] == "none"


def test_show_tree(cli: Any) -> None:
    out = _one(cli, "show").out
    assert out.splitlines()[0].startswith("/  dict[7]")
    assert "metrics  DataFrame" in out and "step  Series[50] int64" in out
    assert "w  tensor float32 [8, 4]" in out and "(128 B)" in out
    assert "b  tensor bfloat16 [3]" in out and "(6 B)" in out
    assert "arr  ndarray float64 [1000]" in out and "(7.8 KiB)" in out
    assert "notes  str 'hello world'" in out and "lr  float 0.001" in out


def test_show_options(cli: Any, capsys: Any, monkeypatch: Any) -> None:
    sub = _main(cli, ["show", "run.zarc", "weights", "--depth", "1"], capsys, monkeypatch)[0].splitlines()
    assert sub[0].startswith("/weights  dict[3]") and len(sub) == 4
    top = _main(cli, ["show", "--depth", "0", "run.zarc"], capsys, monkeypatch)[0].splitlines()
    assert top[1].endswith("... 7 children (raise --depth to see them)")
    few = _main(cli, ["show", "--max-items", "2", "run.zarc"], capsys, monkeypatch)[0]
    assert "... 5 more (raise --max-items to see them)" in few
    with zarchive.open(cli[0] / "run.zarc") as arc:
        manifest, node = arc.manifest, arc.node("weights/w")
    assert json.loads(_main(cli, ["show", "--json", "run.zarc"], capsys, monkeypatch)[0]) == manifest
    assert json.loads(_main(cli, ["show", "--json", "run.zarc", "weights/w"], capsys, monkeypatch)[0]) == node
    _, err = _main(cli, ["show", "run.zarc", "nope/deeper"], capsys, monkeypatch, code=2)
    assert "no object at path /nope/deeper" in err


def test_meta(cli: Any, capsys: Any, monkeypatch: Any) -> None:
    out = _one(cli, "meta").out
    rows = dict(line.split(":", 1) for line in out.splitlines())
    assert rows["format"].strip() == f"zarchive {zarchive.FORMAT_VERSION}"
    assert rows["compression"].strip() == "zstd level 3"
    assert "torch " in rows["packages"] and "T" in rows["created"]
    assert rows["members"].strip().endswith("compressed)")
    with zarchive.open(cli[0] / "run.zarc") as arc:
        assert json.loads(_main(cli, ["meta", "--json", "run.zarc"], capsys, monkeypatch)[0]) == arc.meta


# --- cat -----------------------------------------------------------------------------------------
def test_cat_table(cli: Any) -> None:
    table = _one(cli, "cat").out.splitlines()
    assert table[0] == "DataFrame: 50 rows x 2 columns" and table[1].split() == ["step", "loss"]
    assert table[2].split()[:2] == ["0", "0"] and float(table[2].split()[2]) == 1.0
    assert table[-1].startswith("... 47 more rows")


def test_cat_values(cli: Any, capsys: Any, monkeypatch: Any) -> None:
    tensor = _main(cli, ["cat", "run.zarc", "weights/w"], capsys, monkeypatch)[0]
    assert tensor.startswith("tensor float32 shape [8, 4] on cpu")
    assert "min 0  max 31  mean 15.5" in tensor and "[[ 0.,  1.,  2.,  3.]," in tensor
    assert "tensor bfloat16 shape [3]" in _main(cli, ["cat", "run.zarc", "weights/b"], capsys, monkeypatch)[0]
    assert _main(cli, ["cat", "run.zarc", "notes"], capsys, monkeypatch)[0] == "hello world\n"
    assert _main(cli, ["cat", "run.zarc", "lr"], capsys, monkeypatch)[0] == "0.001\n"
    words = _main(cli, ["cat", "run.zarc", "words", "--rows", "2"], capsys, monkeypatch)[0].splitlines()
    assert words == ["list of 400 items", "  [0] 'w0'", "  [1] 'w1'", "  ... 398 more"]
    top = _main(cli, ["cat", "run.zarc", "weights"], capsys, monkeypatch)[0].splitlines()
    assert top[0] == "dict[3] with 3 entries" and top[1].startswith("  w: tensor float32 [8, 4]")


def test_cat_errors_and_import(cli: Any, capsys: Any, monkeypatch: Any) -> None:
    missing = _one(cli, "cat-missing", code=2)
    assert "no object at path /weights/nope" in missing.err and missing.out == ""
    out, _ = _main(cli, ["cat", "info.zarc", "info"], capsys, monkeypatch)  # without the class: its fields
    assert out.splitlines()[0].startswith("zc_cli_types:RunInfo (dataclass; its class is not imported here")
    assert out.splitlines()[1:] == ["  name: 'baseline'", "  seed: 7"]
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        out, _ = _main(cli, ["cat", "--import", "zc_cli_types", "info.zarc", "info"], capsys, monkeypatch)
    finally:
        sys.modules.pop("zc_cli_types", None)
    assert out.splitlines() == ["RunInfo (dataclass)", "  name: 'baseline'", "  seed: 7"]
    _, err = _main(cli, ["cat", "--import", "no_such_module_zc", "info.zarc", "info"], capsys, monkeypatch, code=2)
    assert "ModuleNotFoundError" in err


# --- verify --------------------------------------------------------------------------------------
def test_verify_exit_codes(cli: Any, capsys: Any, monkeypatch: Any) -> None:
    damaged = _one(cli, "verify", code=1)
    assert damaged.out.startswith("DAMAGED arr.npy") and "1 problem(s)" in damaged.out
    assert "not a zip archive" in _main(cli, ["verify", "notes.txt"], capsys, monkeypatch, code=2)[1]
    assert _main(cli, ["verify", "run.zarc"], capsys, monkeypatch)[0].startswith("OK run.zarc")
    assert "nothere.zarc: no such file" in _main(cli, ["verify", "nothere.zarc"], capsys, monkeypatch, code=2)[1]
    assert _main(cli, ["verify", "old.zanj"], capsys, monkeypatch)[0].startswith("OK old.zanj")


# --- extract -------------------------------------------------------------------------------------
def test_extract_restores_plain_files(cli: Any) -> None:
    d, _, run = cli
    _one(cli, "extract")
    out = d / "out" / "new"
    names = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert "manifest.json" in names and "metadata.json" in names
    assert not any(n.endswith(".zst") for n in names)
    arr = npy.parse(memoryview((out / "arr.npy").read_bytes()), member="arr.npy")
    np.testing.assert_array_equal(arr, run["arr"])
    assert (out / "words.jsonl").read_text().splitlines()[399] == '"w399"'
    assert (out / "deep" / "x.npy").is_file()
    assert torch.equal(load_file(out / "weights.safetensors")["b"], run["weights"]["b"])


def test_extract_refuses_to_overwrite_without_force(cli: Any, capsys: Any, monkeypatch: Any) -> None:
    d = cli[0]
    _, err = _main(cli, ["extract", "run.zarc", "existing"], capsys, monkeypatch, code=2)
    assert "already exist" in err and "--force" in err
    assert (d / "existing" / "manifest.json").read_text() == "keep me" and not (d / "existing" / "arr.npy").exists()
    _main(cli, ["extract", "--force", "run.zarc", "existing"], capsys, monkeypatch)
    assert (d / "existing" / "manifest.json").read_text() != "keep me" and (d / "existing" / "arr.npy").exists()


def test_extract_never_writes_outside_dir(cli: Any, capsys: Any, monkeypatch: Any) -> None:
    d = cli[0]
    _, err = _main(cli, ["extract", "escape.zarc", "esc"], capsys, monkeypatch, code=2)
    assert "'..'" in err and not (d / "escaped.txt").exists()
    _, err = _main(cli, ["extract", "run.zarc", "trap"], capsys, monkeypatch, code=2)
    assert "outside" in err and list((d / "outside").iterdir()) == []


# --- convert -------------------------------------------------------------------------------------
def test_convert_to_safetensors(cli: Any, capsys: Any, monkeypatch: Any) -> None:
    d, _, run = cli
    first = _one(cli, "to-safetensors").out
    assert "zarc->safetensors" in first and "note: 1 tensor(s) share storage" in first
    tensors = load_file(d / "run.safetensors")
    assert torch.equal(tensors["weights/w"], run["weights"]["w"]) and "weights/tied" not in tensors
    assert torch.equal(tensors["arr"], torch.from_numpy(run["arr"]))
    _, err = _main(cli, ["convert", "run.zarc", "run.safetensors"], capsys, monkeypatch, code=2)
    assert "already exists" in err and "--force" in err
    _main(cli, ["convert", "--force", "run.zarc", "run.safetensors"], capsys, monkeypatch)


def test_convert_into_zarc(cli: Any, capsys: Any, monkeypatch: Any) -> None:
    d = cli[0]
    out = _main(cli, ["convert", "model.safetensors", "model.zarc", "--compress", "none"], capsys, monkeypatch)[0]
    assert "(safetensors->zarc, 2 tensors)" in out
    with zarchive.open(d / "model.zarc") as arc:
        assert {e["codec"] for e in arc.members.values()} == {"none"}
    assert sorted(zarchive.read(d / "model.zarc")) == ["enc.weight", "head/bias"]
    assert "(torch->zarc, 2 tensors)" in _main(cli, ["convert", "sd.pt", "sd.zarc"], capsys, monkeypatch)[0]
    assert sorted(zarchive.read(d / "sd.zarc")) == ["bias", "weight"]
    evil = _one(cli, "from-evil-torch", code=2)
    assert "weights_only" in evil.err and not (d / "executed").exists() and not (d / "evil.zarc").exists()


def test_zanj_files(cli: Any, capsys: Any, monkeypatch: Any) -> None:
    d = cli[0]
    ls = _main(cli, ["ls", "old.zanj"], capsys, monkeypatch)[0]
    assert "a.npy" in ls and "deflate" in ls and "/a" in ls
    assert "zanj->zarc" in _main(cli, ["convert", "old.zanj", "old.zarc"], capsys, monkeypatch)[0]
    np.testing.assert_array_equal(zarchive.read(d / "old.zarc")["a"], np.arange(400))
    out = _main(cli, ["cat", "old.zanj", "cfg"], capsys, monkeypatch)[0]
    assert out.splitlines() == ["dict[1] with 1 entries", "  lr: float 0.1"]
    assert "a  ndarray int64 [400] -> a.npy" in _main(cli, ["show", "old.zanj"], capsys, monkeypatch)[0]
    assert "format:     ZANJ" in _main(cli, ["meta", "old.zanj"], capsys, monkeypatch)[0]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["convert", "sd.pt", "x.txt"], "cannot convert .pt to .txt"),
        (["convert", "sd.pt", "x.zarc", "--compress", "zstd:99"], "zstd level must be in -7..22"),
        (["convert", "model.safetensors", "y.safetensors"], "cannot convert"),
        (["ls", "nothere.zarc"], "nothere.zarc: no such file"),
        (["show", "notes.txt"], "not a zip archive"),
        (["meta", "out"], "is a directory"),
        (["cat", "damaged.zarc", "arr"], "damaged"),
    ],
    ids=["bad-direction", "bad-level", "same-format", "missing-file", "not-an-archive", "a-directory", "damaged-value"],
)
def test_bad_input_gives_one_line_and_exit_2(
    cli: Any, capsys: Any, monkeypatch: Any, argv: list[str], message: str
) -> None:
    _, err = _main(cli, argv, capsys, monkeypatch, code=2)
    assert message in err and err.count("\n") == 1 and err.startswith(f"zarchive {argv[0]}: error:")


class _Point:
    def __init__(self, x: int) -> None:
        self.x = x


class _PointHandler(zarchive.Handler):
    name = "zc-test.point"

    def accepts(self, cls: type) -> bool:
        return cls is _Point

    def save(self, obj: Any, ctx: Any) -> Any:
        return {"$type": self.name, "x": obj.x}

    def load(self, node: dict[str, Any], ctx: Any) -> Any:
        return _Point(node["x"])


def test_types_this_reader_does_not_know(cli: Any, capsys: Any, monkeypatch: Any) -> None:
    zarchive.ZArchive(handlers_pre=[_PointHandler()]).save({"p": _Point(3), "n": 1}, cli[0] / "custom.zarc")
    out, _ = _main(cli, ["show", "custom.zarc"], capsys, monkeypatch)
    assert "p  zc-test.point (a type this zarchive does not know)" in out and "n  int 1" in out
    _, err = _main(cli, ["cat", "custom.zarc", "p"], capsys, monkeypatch, code=2)
    assert "zc-test.point" in err and "at object path '/p'" in err
    assert "(object tree)" in _main(cli, ["ls", "custom.zarc"], capsys, monkeypatch)[0]


def test_remote_archives(cli: Any, capsys: Any, monkeypatch: Any) -> None:
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    fs.pipe("/zc-cli/run.zarc", (cli[0] / "run.zarc").read_bytes())
    try:
        out, _ = _main(cli, ["ls", "memory://zc-cli/run.zarc"], capsys, monkeypatch)
        assert "weights.safetensors" in out
        assert _main(cli, ["verify", "memory://zc-cli/run.zarc"], capsys, monkeypatch)[0].startswith("OK ")
        _, err = _main(cli, ["extract", "memory://zc-cli/run.zarc", "x"], capsys, monkeypatch, code=2)
        assert "local files only" in err
    finally:
        fs.rm("/zc-cli", recursive=True)


@pytest.mark.parametrize("key", [[None, 1, True], {"a": 1}, 7])
def test_ls_of_a_tensor_node_whose_key_is_not_a_string(key: Any, tmp_path: Path, capsys: Any) -> None:
    """Found by the fuzzer: `ls` counted a member's tensors by their keys, which a hostile manifest
    may make any JSON value (unhashable ones crashed it with exit 3)."""
    from rewrite import rewrite

    from zarchive.cli import main

    zarchive.save({"t": torch.zeros(3)}, tmp_path / "a.zarc", compress=False)

    def edit(m: dict[str, Any]) -> None:
        m["root"]["t"]["key"] = key

    rewrite(tmp_path / "a.zarc", tmp_path / "b.zarc", edit)
    assert main(["ls", str(tmp_path / "b.zarc")]) == 0
    assert "tensors.safetensors" in capsys.readouterr().out


@pytest.mark.parametrize("field", ["compression", "environment", "settings"])
def test_meta_of_metadata_whose_objects_are_other_json(field: str, tmp_path: Path) -> None:
    """Found by the fuzzer: `meta` read the metadata's objects as dicts, which a hostile file may make
    lists (exit 3)."""
    from rewrite import rewrite

    from zarchive.cli import main

    zarchive.save({"a": 1}, tmp_path / "a.zarc", compress=False)

    def edit(meta: dict[str, Any]) -> None:
        meta[field] = [None, None]

    rewrite(tmp_path / "a.zarc", tmp_path / "b.zarc", meta_edit=edit)
    assert main(["meta", str(tmp_path / "b.zarc")]) == 0  # the archive reads: meta shows what it can


def test_cat_of_a_node_whose_type_is_not_a_string(tmp_path: Path) -> None:
    """Found by the fuzzer: `cat` looked a node's "$type" up in a set, which a hostile manifest may make
    a dict (unhashable: exit 3)."""
    from rewrite import rewrite

    from zarchive.cli import main

    zarchive.save({"model": {"w": torch.zeros(2)}}, tmp_path / "a.zarc", compress=False)

    def edit(m: dict[str, Any]) -> None:
        m["root"]["model"]["w"]["$type"] = {"not": "a tag"}

    rewrite(tmp_path / "a.zarc", tmp_path / "b.zarc", edit)
    assert main(["cat", str(tmp_path / "b.zarc"), "model/w"]) == 2
