"""Hugging Face sharded checkpoint folders (`save_pretrained(..., max_shard_size=...)`): the folder, or
its `model.safetensors.index.json`, opens as one lazy mapping of every tensor, and the command line
works on it. The folders are written the way save_pretrained writes them (safetensors shards with
`{"format": "pt"}` metadata, an index of `metadata` and `weight_map`); with transformers installed,
also by save_pretrained itself."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import forkrun
import pytest
import torch
from safetensors.torch import save_file

import zarchive

ROOT = Path(__file__).resolve().parent.parent
INDEX = "model.safetensors.index.json"


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    sd = {f"layers.{i}.weight": torch.randn(16, 8, generator=g) for i in range(5)}
    sd |= {f"layers.{i}.bias": torch.randn(16, generator=g).to(torch.bfloat16) for i in range(5)}
    sd["embed.weight"] = torch.randn(40, 8, generator=g)
    return sd


def write_sharded(folder: Path, sd: dict[str, torch.Tensor], shards: int = 3) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    names = list(sd)
    weight_map: dict[str, str] = {}
    for k in range(shards):
        shard = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: sd[n] for n in names[k::shards]}
        save_file(part, str(folder / shard), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(part, shard)
    total = sum(t.numel() * t.element_size() for t in sd.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / INDEX).write_text(json.dumps(index, indent=2))
    return weight_map


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return forkrun.cli(*args, timeout=300, cwd=ROOT)  # a process of its own, forked from a server that imported torch


def test_the_folder_and_its_index_open_as_one_lazy_mapping(tmp_path: Path) -> None:
    sd = _state()
    folder = tmp_path / "hf"
    write_sharded(folder, sd)
    for target in (folder, folder / INDEX, str(folder)):
        with zarchive.open(target) as arc:
            assert sorted(arc.keys()) == sorted(sd)
            assert arc.meta["shards"] == sorted({f"model-0000{k}-of-00003.safetensors" for k in (1, 2, 3)})
            got = arc["layers.3.bias"]
            assert got.dtype == torch.bfloat16 and torch.equal(got, sd["layers.3.bias"])
    back = zarchive.read(folder)
    assert set(back) == set(sd) and all(torch.equal(back[k], sd[k]) for k in sd)
    assert zarchive.verify(folder)


def test_the_weights_hash_is_the_state_dicts(tmp_path: Path) -> None:
    sd = _state()
    write_sharded(tmp_path / "hf", sd)
    zarchive.save(sd, tmp_path / "same.zarc")
    with zarchive.open(tmp_path / "hf") as a, zarchive.open(tmp_path / "same.zarc") as b:
        assert a.weights_hash() == b.weights_hash()


def test_the_command_line_works_on_the_folder(tmp_path: Path) -> None:
    sd = _state()
    folder = tmp_path / "hf"
    write_sharded(folder, sd)
    for args in (["ls", str(folder)], ["show", str(folder)], ["verify", str(folder)], ["hash", str(folder)]):
        done = _cli(*args)
        assert done.returncode == 0, (args, done.stderr)
    assert "layers.4.weight" in _cli("show", str(folder)).stdout
    out = tmp_path / "one.zarc"
    done = _cli("convert", str(folder), str(out))
    assert done.returncode == 0, done.stderr
    back = zarchive.read(out)
    assert set(back) == set(sd) and all(torch.equal(back[k], sd[k]) for k in sd)


def _edit_index(folder: Path, edit) -> None:  # type: ignore[no-untyped-def]
    index = json.loads((folder / INDEX).read_text())
    edit(index)
    (folder / INDEX).write_text(json.dumps(index))


@pytest.mark.parametrize(
    ("edit", "error", "says"),
    [
        (
            lambda i: i["weight_map"].update({"x": "../outside.safetensors"}),
            zarchive.UnsafeArchiveError,
            "not a file name",
        ),
        (lambda i: i["weight_map"].update({"x": "model-99.safetensors"}), zarchive.FormatError, "not in the folder"),
        (
            lambda i: i["weight_map"].update({"layers.0.weight": "model-00002-of-00003.safetensors"}),
            zarchive.FormatError,
            "index places",
        ),
        (lambda i: i["weight_map"].pop("embed.weight"), zarchive.FormatError, "which the index places nowhere"),
        (lambda i: i.pop("weight_map"), zarchive.FormatError, "needs a 'weight_map'"),
    ],
    ids=["traversal", "missing-shard", "wrong-shard", "unlisted-tensor", "no-weight-map"],
)
def test_an_index_that_disagrees_with_its_shards_is_refused(tmp_path: Path, edit, error, says) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "hf"
    write_sharded(folder, _state())
    (tmp_path / "outside.safetensors").write_bytes(b"")
    _edit_index(folder, edit)
    with pytest.raises(error, match=says):
        zarchive.open(folder)


def test_a_folder_that_is_neither_says_what_it_looked_for(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(zarchive.FormatError, match=r"no Hugging Face index .*no index.zarc"):
        zarchive.open(tmp_path / "empty")
    done = _cli("ls", str(tmp_path / "empty"))
    assert done.returncode == 2 and "Hugging Face index" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_two_indexes_in_one_folder_ask_which(tmp_path: Path) -> None:
    folder = tmp_path / "hf"
    write_sharded(folder, _state())
    (folder / "other.safetensors.index.json").write_text((folder / INDEX).read_text())
    with pytest.raises(zarchive.FormatError, match="2 sharded-checkpoint indexes"):
        zarchive.open(folder)
    with zarchive.open(folder / INDEX) as arc:
        assert "embed.weight" in arc


def test_save_pretrained_folders(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=16)
    model = transformers.GPT2LMHeadModel(config)
    model.save_pretrained(tmp_path / "gpt2", max_shard_size="40KB")
    assert (tmp_path / "gpt2" / INDEX).exists()
    sd = model.state_dict()
    with zarchive.open(tmp_path / "gpt2") as arc:
        for name in arc.keys():  # noqa: SIM118 - the keys, not membership
            assert torch.equal(arc[name], sd[name]), name
