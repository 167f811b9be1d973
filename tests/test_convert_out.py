"""Ways out of a .zarc (zarchive.formats.convert_out): a torch.save state dict, one subtree with its prefix
stripped (--select), and sharded safetensors with a Hugging Face index (--max-shard-size). Files are
checked with the real readers (torch.load(weights_only=True), safetensors, load_state_dict); the
command line runs in real subprocesses."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import forkrun
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import zarchive
from zarchive.errors import MemberNotFoundError
from zarchive.formats.convert_in import conversion_kind, convert
from zarchive.formats.convert_out import parse_size, shard
from zarchive.torchutil import ConfiguredModel, set_config_class


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 3))


@pytest.fixture
def run_file(tmp_path: Path) -> tuple[Path, torch.nn.Module]:
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 6)).sum().backward()
    opt.step()
    run = {"model": {"state_dict": model.state_dict()}, "optimizer": opt.state_dict(),
           "losses": np.array([0.5, 0.25]), "step": 10}  # fmt: skip
    path = tmp_path / "run.zarc"
    zarchive.save(run, path)
    return path, model


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return forkrun.cli("convert", *args, timeout=120)  # a process of its own, forked from a server that imported torch


def test_conversion_kinds() -> None:
    assert conversion_kind("a.zarc", "b.pt") == "zarc->torch"
    assert conversion_kind("a.zarc", "b.PTH") == "zarc->torch"
    assert conversion_kind("a.zarc", "b.safetensors") == "zarc->safetensors"


def test_select_gives_exactly_the_state_dict_keys(run_file: tuple[Path, torch.nn.Module], tmp_path: Path) -> None:
    path, model = run_file
    want = model.state_dict()
    out = cli(str(path), str(tmp_path / "model.safetensors"), "--select", "model/state_dict")
    assert out.returncode == 0 and "4 tensors" not in out.stdout and "6 tensors" in out.stdout, out.stderr
    got = load_file(tmp_path / "model.safetensors")
    assert list(got) == sorted(want)  # (safetensors lists keys sorted)
    fresh = make_model()
    for p in fresh.parameters():
        torch.nn.init.zeros_(p)
    fresh.load_state_dict(got)  # strict: every key, nothing else
    assert all(torch.equal(fresh.state_dict()[k], want[k]) for k in want)


def test_to_torch_save_loads_with_weights_only(run_file: tuple[Path, torch.nn.Module], tmp_path: Path) -> None:
    path, model = run_file
    out = cli(str(path), str(tmp_path / "model.pt"), "--select", "/model/state_dict/")
    assert out.returncode == 0, out.stderr
    got = torch.load(tmp_path / "model.pt", weights_only=True)
    want = model.state_dict()
    assert list(got) == list(want) and all(type(t) is torch.Tensor for t in got.values())
    assert all(torch.equal(got[k], want[k]) for k in want)
    make_model().load_state_dict(got)
    # and zarchive reads its own output back, by its bytes
    assert list(zarchive.read(tmp_path / "model.pt")) == list(want)


def test_everything_without_select_keeps_the_old_names(run_file: tuple[Path, torch.nn.Module], tmp_path: Path) -> None:
    """Without --select, a .pt holds every tensor and numeric array, named by object path (as the
    safetensors output always did); --no-arrays leaves the arrays out."""
    path, _ = run_file
    report = convert(path, tmp_path / "all.pt")
    got = torch.load(tmp_path / "all.pt", weights_only=True)
    assert "model/state_dict/0.weight" in got and "optimizer/state/0/momentum_buffer" in got
    assert torch.equal(got["losses"], torch.tensor([0.5, 0.25], dtype=torch.float64)) and report.count == len(got)
    convert(path, tmp_path / "noarr.pt", arrays=False)
    assert "losses" not in torch.load(tmp_path / "noarr.pt", weights_only=True)
    convert(path, tmp_path / "sel.safetensors", select="model", arrays=True)
    assert min(load_file(tmp_path / "sel.safetensors")) == "state_dict/0.bias"


def test_tied_weights_stay_tied_in_pt_and_are_copies_in_safetensors(tmp_path: Path) -> None:
    shared = torch.randn(5, 4)
    sd = {"embed.weight": shared, "head.weight": shared, "view": shared[1:3]}
    path = tmp_path / "tied.zarc"
    zarchive.save({"sd": sd}, path)
    convert(path, tmp_path / "tied.pt", select="sd")
    got = torch.load(tmp_path / "tied.pt", weights_only=True)
    assert got["embed.weight"].data_ptr() == got["head.weight"].data_ptr()  # torch.save keeps sharing
    assert torch.equal(got["view"], shared[1:3])
    report = convert(path, tmp_path / "tied.safetensors", select="sd")
    st = load_file(tmp_path / "tied.safetensors")
    assert sorted(st) == sorted(sd) and all(torch.equal(st[k], sd[k]) for k in sd)
    assert any("copies" in n for n in report.notes)


@dataclasses.dataclass
class Cfg:
    width: int = 4


@set_config_class(Cfg)
class Net(ConfiguredModel[Cfg]):
    def __init__(self, config: Cfg) -> None:
        super().__init__(config)
        self.fc = torch.nn.Linear(config.width, 2)


def test_select_a_configured_model_gives_its_state_dict(tmp_path: Path) -> None:
    net = Net(Cfg())
    path = tmp_path / "net.zarc"
    zarchive.save({"model": net, "note": "x"}, path)
    convert(path, tmp_path / "net.pt", select="model")
    got = torch.load(tmp_path / "net.pt", weights_only=True)
    assert list(got) == list(net.state_dict())
    with pytest.raises(MemberNotFoundError, match="no value at --select"):
        convert(path, tmp_path / "x.pt", select="model/nope")


def test_sharded_safetensors_with_index(tmp_path: Path) -> None:
    tensors = {f"layers.{i}.weight": torch.full((64, 64), float(i)) for i in range(10)}  # 16 KiB each
    path = tmp_path / "big.zarc"
    zarchive.save({"sd": tensors}, path)
    dst = tmp_path / "out" / "model.safetensors"
    out = cli(str(path), str(dst), "--select", "sd", "--max-shard-size", "40KB")
    assert out.returncode == 0 and "5 shards" in out.stdout, out.stdout + out.stderr
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == 10 * 64 * 64 * 4
    files = sorted(set(index["weight_map"].values()))
    assert files == [f"model-{i:05d}-of-00005.safetensors" for i in range(1, 6)]
    assert not dst.exists()
    got: dict[str, Any] = {}
    for name in files:
        part = load_file(tmp_path / "out" / name)
        assert sum(t.numel() * 4 for t in part.values()) <= 40_000
        got.update(part)
    assert sorted(got) == sorted(tensors) and all(torch.equal(got[k], tensors[k]) for k in tensors)
    assert all(index["weight_map"][k] in files for k in tensors)
    # under the limit: one file, and the stale index of the sharded run is removed
    out = cli(str(path), str(dst), "--select", "sd", "--max-shard-size", "5GB", "-f")
    assert out.returncode == 0 and dst.exists() and not (tmp_path / "out" / "model.safetensors.index.json").exists()


def test_sizes_and_packing() -> None:
    assert parse_size("5GB") == 5 * 10**9 and parse_size("100MB") == 10**8 and parse_size("2GiB") == 2 * 2**30
    assert parse_size("1.5KB") == 1500 and parse_size(123) == 123 and parse_size("64") == 64
    for bad in ("", "5 parsecs", "-1GB", "0"):
        with pytest.raises(ValueError):
            parse_size(bad)
    ts = {"a": torch.zeros(10), "b": torch.zeros(100), "c": torch.zeros(5), "d": torch.zeros(5)}
    assert [list(s) for s in shard(ts, 80)] == [["a"], ["b"], ["c", "d"]]


def test_options_are_refused_where_they_do_not_apply(run_file: tuple[Path, torch.nn.Module], tmp_path: Path) -> None:
    path, _ = run_file
    out = cli(str(path), str(tmp_path / "m.pt"), "--max-shard-size", "1MB")
    assert out.returncode != 0 and "safetensors outputs only" in out.stderr
    out = cli(str(path), str(tmp_path / "m.pt"), "--max-shard-size", "lots")
    assert out.returncode != 0 and "not a size" in out.stderr
    with pytest.raises(ValueError, match="out of a .zarc"):
        convert(path, tmp_path / "again.zarc", select="model")
