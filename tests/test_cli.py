"""The `zarchive` command line, run as real subprocesses (`python -m zarchive` and the installed
`zarchive` script) on real files.

Starting Python with torch costs seconds, so the module fixture prepares every input file, then runs
all command lines concurrently (each chain of dependent commands in order) and the tests check their
results: exit status, what was printed, what was written. No test may see a Python traceback.
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
    os.symlink(d / "outside", d / "trap" / "metrics")
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
    "help-convert": [[*PY, "convert", "--help"]],
    "ls": [[*PY, "ls", "run.zarc"]],
    "ls-json": [[*PY, "ls", "--json", "run.zarc"]],
    "show": [[*PY, "show", "run.zarc"]],
    "show-sub": [[*PY, "show", "run.zarc", "weights", "--depth", "1"]],
    "show-json": [[*PY, "show", "--json", "run.zarc"]],
    "meta": [[*PY, "meta", "run.zarc"]],
    "meta-json": [[*PY, "meta", "--json", "run.zarc"]],
    "cat-table": [[*PY, "cat", "run.zarc", "metrics", "--rows", "3"]],
    "cat-tensor": [[*PY, "cat", "run.zarc", "weights/w"]],
    "cat-values": [[*PY, "cat", "run.zarc", "notes"]],
    "cat-missing": [[*PY, "cat", "run.zarc", "weights/nope"]],
    "cat-class": [[*PY, "cat", "info.zarc", "info"], [*PY, "cat", "--import", "zc_cli_types", "info.zarc", "info"]],
    "verify": [[*PY, "verify", "run.zarc"], [*PY, "verify", "damaged.zarc"], [*PY, "verify", "notes.txt"],
               [*PY, "verify", "nothere.zarc"]],  # fmt: skip
    "extract": [[*PY, "extract", "run.zarc", "out/new"], [*PY, "extract", "run.zarc", "existing"],
                [*PY, "extract", "--force", "run.zarc", "existing"]],  # fmt: skip
    "extract-trap": [[*PY, "extract", "run.zarc", "trap"]],
    "extract-escape": [[*PY, "extract", "escape.zarc", "esc"]],
    "to-safetensors": [[*PY, "convert", "run.zarc", "run.safetensors"], [*PY, "convert", "run.zarc", "run.safetensors"]],
    "from-safetensors": [[*PY, "convert", "model.safetensors", "model.zarc", "--compress", "none"],
                         [*PY, "ls", "--json", "model.zarc"]],  # fmt: skip
    "from-torch": [[*PY, "convert", "sd.pt", "sd.zarc"], [*PY, "convert", "evil.pt", "evil.zarc"]],
    "from-zanj": [[*PY, "convert", "old.zanj", "old.zarc"], [*PY, "ls", "old.zanj"], [*PY, "cat", "old.zanj", "cfg"]],
    "bad-input": [[*PY, "convert", "sd.pt", "x.txt"], [*PY, "ls", "nothere.zarc"], [*PY, "show", "notes.txt"],
                  [*PY, "convert", "sd.pt", "x.zarc", "--compress", "zstd:99"]],  # fmt: skip
}


def _run_chain(argvs: list[list[str]], cwd: Path) -> list[Ran]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    env.pop("ZARCHIVE_DEBUG", None)
    out = []
    for argv in argvs:
        p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
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


# --- help ----------------------------------------------------------------------------------------
def test_help_lists_commands_with_examples(cli: Any) -> None:
    top = _one(cli, "help").out
    for command in ("ls", "show", "meta", "cat", "verify", "extract", "convert"):
        assert f"zarchive {command} " in top
    conv = _one(cli, "help-convert").out
    assert "examples:" in conv and "zarchive convert model.safetensors model.zarc" in conv and "--compress" in conv


def test_every_command_help_has_examples() -> None:
    from zarchive.cli import build_parser

    subs = next(a for a in build_parser()._actions if a.dest == "command")
    for name, parser in subs.choices.items():  # type: ignore[union-attr]
        assert "examples:" in parser.format_help() and f"zarchive {name}" in parser.format_help()


# --- ls / show / meta ----------------------------------------------------------------------------
def test_ls(cli: Any) -> None:
    out = _one(cli, "ls").out
    lines = {line.split()[0]: line for line in out.splitlines()[1:-1]}
    assert lines["manifest.json"].split()[1] == "none" and "(object tree)" in lines["manifest.json"]
    weights = next(v for k, v in lines.items() if k.startswith("weights.safetensors"))
    assert "2 tensors" in weights and "/weights/w" in weights
    assert "/notes" not in out  # inline values live in the manifest, not in a member
    assert out.splitlines()[-1].startswith(f"{len(lines)} members")


def test_ls_json(cli: Any) -> None:
    rows = {r["member"]: r for r in json.loads(_one(cli, "ls-json").out)}
    weights = next(r for m, r in rows.items() if m.startswith("weights.safetensors"))
    assert weights["tensors"] == 2 and sorted(weights["object_paths"]) == ["weights/b", "weights/tied", "weights/w"]
    words = next(r for m, r in rows.items() if m.startswith("words.jsonl"))
    assert words["codec"] == "zstd" and words["stored_size"] < words["size"]
    assert rows["metadata.json"]["codec"] == "none"


def test_show_tree_and_subtree(cli: Any) -> None:
    out = _one(cli, "show").out
    assert out.splitlines()[0].startswith("/  dict[6]")
    assert "metrics  DataFrame" in out and "step  Series[50] int64" in out
    assert "w  tensor float32 [8, 4]" in out and "(128 B)" in out
    assert "b  tensor bfloat16 [3]" in out and "(6 B)" in out
    assert "arr  ndarray <f8 [1000]" in out and "(7.8 KiB)" in out
    assert "notes  str 'hello world'" in out and "lr  float 0.001" in out
    sub = _one(cli, "show-sub").out.splitlines()
    assert sub[0].startswith("/weights  dict[3]") and len(sub) == 4


def test_show_json_is_the_manifest(cli: Any) -> None:
    d = cli[0]
    with zarchive.open(d / "run.zarc") as arc:
        assert json.loads(_one(cli, "show-json").out) == arc.manifest


def test_meta(cli: Any) -> None:
    out = _one(cli, "meta").out
    rows = dict(line.split(":", 1) for line in out.splitlines())
    assert rows["format"].strip() == f"zarchive {zarchive.FORMAT_VERSION}"
    assert rows["compression"].strip() == "zstd level 3"
    assert "torch " in rows["packages"] and "T" in rows["created"]
    assert rows["members"].strip().endswith("compressed)")
    with zarchive.open(cli[0] / "run.zarc") as arc:
        assert json.loads(_one(cli, "meta-json").out) == arc.meta


# --- cat -----------------------------------------------------------------------------------------
def test_cat_table_tensor_and_values(cli: Any) -> None:
    table = _one(cli, "cat-table").out.splitlines()
    assert table[0] == "DataFrame: 50 rows x 2 columns" and table[1].split() == ["step", "loss"]
    assert table[2].split() == ["0", "0", "1.0"] and table[-1].startswith("... 47 more rows")
    tensor = _one(cli, "cat-tensor").out
    assert tensor.startswith("tensor float32 shape [8, 4] on cpu")
    assert "min 0  max 31  mean 15.5" in tensor and "[[ 0.,  1.,  2.,  3.]," in tensor
    assert _one(cli, "cat-values").out == "hello world\n"


def test_cat_unknown_path_and_unknown_class(cli: Any) -> None:
    missing = _one(cli, "cat-missing", code=2)
    assert "no object at path /weights/nope" in missing.err and missing.out == ""
    unknown = _one(cli, "cat-class", 0, code=2)
    assert "zc_cli_types:RunInfo" in unknown.err and "--import" in unknown.err
    imported = _one(cli, "cat-class", 1).out.splitlines()
    assert imported == ["RunInfo (dataclass)", "  name: 'baseline'", "  seed: 7"]


# --- verify --------------------------------------------------------------------------------------
def test_verify_exit_codes(cli: Any) -> None:
    ok, damaged, not_archive, missing = (_one(cli, "verify", i, code=c) for i, c in enumerate((0, 1, 2, 2)))
    assert ok.out.startswith("OK run.zarc")
    assert damaged.out.startswith("DAMAGED arr.npy") and "1 problem(s)" in damaged.out
    assert "not a zip archive" in not_archive.err
    assert "nothere.zarc: no such file" in missing.err


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
    weights = load_file(out / "weights.safetensors")
    assert torch.equal(weights["b"], run["weights"]["b"])


def test_extract_refuses_to_overwrite_without_force(cli: Any) -> None:
    d = cli[0]
    refused = _one(cli, "extract", 1, code=2)
    assert "already exist" in refused.err and "--force" in refused.err
    _one(cli, "extract", 2)
    assert (d / "existing" / "manifest.json").read_text() != "keep me"
    assert (d / "existing" / "arr.npy").exists()


def test_extract_never_writes_outside_dir(cli: Any) -> None:
    d = cli[0]
    trap = _one(cli, "extract-trap", code=2)
    assert "outside" in trap.err and list((d / "outside").iterdir()) == []
    escape = _one(cli, "extract-escape", code=2)
    assert "'..'" in escape.err and not (d / "escaped.txt").exists()


# --- convert -------------------------------------------------------------------------------------
def test_convert_to_safetensors(cli: Any) -> None:
    d, _, run = cli
    first = _one(cli, "to-safetensors").out
    assert "zarc->safetensors" in first and "note: 1 tensor(s) share storage" in first
    tensors = load_file(d / "run.safetensors")
    assert torch.equal(tensors["weights/w"], run["weights"]["w"]) and "weights/tied" not in tensors
    assert torch.equal(tensors["arr"], torch.from_numpy(run["arr"]))
    again = _one(cli, "to-safetensors", 1, code=2)
    assert "already exists" in again.err and "--force" in again.err


def test_convert_into_zarc(cli: Any) -> None:
    d = cli[0]
    assert "(safetensors->zarc, 2 tensors)" in _one(cli, "from-safetensors").out
    rows = json.loads(_one(cli, "from-safetensors", 1).out)
    assert {r["codec"] for r in rows} == {"none"}
    assert sorted(zarchive.read(d / "model.zarc")) == ["enc.weight", "head/bias"]
    assert "(torch->zarc, 2 tensors)" in _one(cli, "from-torch").out
    assert sorted(zarchive.read(d / "sd.zarc")) == ["bias", "weight"]
    evil = _one(cli, "from-torch", 1, code=2)
    assert "weights_only" in evil.err and not (d / "executed").exists() and not (d / "evil.zarc").exists()


def test_zanj_files(cli: Any) -> None:
    d = cli[0]
    assert "zanj->zarc" in _one(cli, "from-zanj").out
    np.testing.assert_array_equal(zarchive.read(d / "old.zarc")["a"], np.arange(400))
    ls = _one(cli, "from-zanj", 1).out
    assert "a.npy" in ls and "deflate" in ls and "/a" in ls
    assert _one(cli, "from-zanj", 2).out.splitlines() == ["dict with 1 entries", "  'lr': 0.1"]


def test_bad_input_gives_one_line_and_exit_2(cli: Any) -> None:
    msgs = [_one(cli, "bad-input", i, code=2).err for i in range(4)]
    assert "cannot convert .pt to .txt" in msgs[0]
    assert "nothere.zarc: no such file" in msgs[1]
    assert "not a zip archive" in msgs[2]
    assert "zstd level must be in -7..22" in msgs[3]
    assert all(m.count("\n") == 1 and m.startswith("zarchive ") for m in msgs)
