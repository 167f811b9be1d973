"""zarchive.inspection.diff: what changed between two archives, on real files written fresh."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

import zarchive
from zarchive.inspection.diff import ArchiveDiff, TensorChange, diff_archives
from zarchive.inspection.tensor_compare import block_indices, distance


@dataclasses.dataclass
class Optim:
    lr: float = 0.1
    betas: tuple[float, float] = (0.9, 0.99)


@dataclasses.dataclass
class RunConfig:
    name: str = "run"
    layers: int = 2
    optim: Optim = dataclasses.field(default_factory=Optim)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


def _state(m: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def _by_path(d: ArchiveDiff) -> dict[str, TensorChange]:
    return {t.path: t for t in d.tensors}


@pytest.fixture
def two_checkpoints(tmp_path: Path) -> tuple[Path, Path, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """A small model before and after one SGD step, with its config and a metrics table."""
    m = _model()
    before = _state(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m(torch.randn(8, 6)).pow(2).sum().backward()
    opt.step()
    after = _state(m)
    metrics = pd.DataFrame({"step": [0, 1], "loss": [1.5, 1.25]})
    a, b = tmp_path / "step0.zarc", tmp_path / "step1.zarc"
    zarchive.save({"model": before, "config": RunConfig(), "metrics": metrics.iloc[:1], "step": 0}, a)
    zarchive.save({"model": after, "config": RunConfig(optim=Optim(lr=0.05)), "metrics": metrics, "step": 1}, b)
    return a, b, before, after


def test_training_step_changes_every_layer(two_checkpoints: Any) -> None:
    a, b, before, after = two_checkpoints
    d = diff_archives(a, b)
    tensors = _by_path(d)
    assert set(tensors) == {f"model/{k}" for k in before} | {"metrics/step", "metrics/loss"}
    assert tensors["metrics/loss"].status == "reshaped"  # one row more
    for name, t in before.items():
        change = tensors[f"model/{name}"]
        assert change.status == "changed", change
        diff = (after[name].double() - t.double()).flatten()
        assert change.max_abs_diff == pytest.approx(float(diff.abs().max()))
        assert change.relative_change == pytest.approx(float(diff.norm() / t.double().norm()))
        assert change.differing == int((after[name] != t).sum())
        assert change.compared == "values"
    values = {v.path: v for v in d.values}
    assert values["config/optim/lr"].status == "changed"
    assert (values["config/optim/lr"].a, values["config/optim/lr"].b) == (0.1, 0.05)
    assert values["config/optim/betas"].status == "same" and values["config/optim/betas"].a == [0.9, 0.99]
    assert values["config/name"].status == "same"
    assert values["step"].status == "changed"
    assert d.changed()
    within = {t.path for t in d.tensors} - {t.path for t in d.changed_tensors(rtol=10.0)}
    assert within == {f"model/{k}" for k in before}  # the weights are within it ...
    assert d.changed(rtol=10.0)  # ... but a changed config counts whatever the tolerance


def test_tolerance_applies_to_tensors_only(tmp_path: Path) -> None:
    x = torch.linspace(1, 2, 100)
    a, b = tmp_path / "a.zarc", tmp_path / "b.zarc"
    zarchive.save({"w": x}, a)
    zarchive.save({"w": x + 1e-4}, b)
    d = diff_archives(a, b)
    (t,) = d.tensors
    assert t.status == "changed" and t.max_abs_diff == pytest.approx(1e-4, rel=1e-2)
    assert d.changed()
    assert not d.changed(atol=1e-3)
    assert not d.changed(rtol=1e-3)
    assert d.changed(atol=1e-6, rtol=1e-6)
    assert not diff_archives(a, b, atol=1e-3).changed()


def test_added_removed_reshaped_dtype(tmp_path: Path) -> None:
    a, b = tmp_path / "a.zarc", tmp_path / "b.zarc"
    zarchive.save({"keep": torch.ones(3), "gone": torch.ones(2), "grow": torch.ones(2, 3), "cast": torch.ones(4)}, a)
    zarchive.save(
        {"keep": torch.ones(3), "new": torch.ones(5), "grow": torch.ones(3, 3), "cast": torch.ones(4).half()}, b
    )
    t = _by_path(diff_archives(a, b))
    assert t["keep"].status == "same"
    assert t["gone"].status == "removed" and t["gone"].shape_a == (2,) and t["gone"].shape_b is None
    assert t["new"].status == "added" and t["new"].shape_b == (5,) and t["new"].dtype_b == "float32"
    assert t["grow"].status == "reshaped" and (t["grow"].shape_a, t["grow"].shape_b) == ((2, 3), (3, 3))
    assert t["cast"].status == "dtype" and (t["cast"].dtype_a, t["cast"].dtype_b) == ("float32", "float16")
    assert t["cast"].max_abs_diff == 0.0  # the values are compared where the shapes agree


def test_same_archive_is_same_without_reading(tmp_path: Path) -> None:
    path = tmp_path / "a.zarc"
    zarchive.save({"w": torch.randn(10, 10), "cfg": RunConfig()}, path)
    d = diff_archives(path, path)
    assert not d.changed()
    assert {t.compared for t in d.tensors} == {"checksum"}
    d = diff_archives(path, path, checksums=False)
    assert {t.compared for t in d.tensors} == {"values"} and not d.changed()


def test_nan_counts(tmp_path: Path) -> None:
    a, b = tmp_path / "a.zarc", tmp_path / "b.zarc"
    x = torch.tensor([1.0, float("nan"), 3.0, float("inf"), 5.0])
    y = torch.tensor([1.0, float("nan"), 3.0, float("inf"), float("nan")])
    zarchive.save({"same_nan": x, "new_nan": x}, a)
    zarchive.save({"same_nan": x.clone(), "new_nan": y}, b)
    t = _by_path(diff_archives(a, b, checksums=False))
    assert t["same_nan"].status == "same" and t["same_nan"].nan_a == 1
    n = t["new_nan"]
    assert n.status == "changed" and n.differing == 1 and n.nonfinite_mismatch == 1
    assert n.max_abs_diff == 0.0  # over the positions finite on both sides
    assert n.changed(rtol=1e9, atol=1e9)  # a NaN that appeared counts whatever the tolerance


def test_relative_change_of_zero_tensor(tmp_path: Path) -> None:
    a, b = tmp_path / "a.zarc", tmp_path / "b.zarc"
    zarchive.save({"z": torch.zeros(4), "zz": torch.zeros(4)}, a)
    zarchive.save({"z": torch.ones(4), "zz": torch.zeros(4)}, b)
    t = _by_path(diff_archives(a, b, checksums=False))
    assert t["z"].relative_change == 1.0 and t["z"].norm_a == 0.0
    assert t["zz"].relative_change == 0.0 and t["zz"].status == "same"


def test_numpy_arrays_and_tables(tmp_path: Path) -> None:
    a, b = tmp_path / "a.zarc", tmp_path / "b.zarc"
    df = pd.DataFrame({"x": [1.0, 2.0, 3.0], "label": ["a", "b", "c"], "n": [1, 2, 3]})
    df2 = df.assign(x=[1.0, 2.5, 3.0], label=["a", "b", "d"])
    zarchive.save({"arr": np.arange(1000.0), "table": df, "words": np.array(["a", "b"]), "s": pd.Series([1, 2])}, a)
    zarchive.save({"arr": np.arange(1000.0) * 2, "table": df2, "words": np.array(["a", "c"]), "s": pd.Series([1])}, b)
    d = diff_archives(a, b)
    t = _by_path(d)
    assert t["arr"].status == "changed" and t["arr"].max_abs_diff == 999.0
    assert t["arr"].relative_change == pytest.approx(1.0)
    assert t["words"].status == "changed" and t["words"].max_abs_diff is None  # strings: equality only
    # a table's numeric columns are compared as arrays, its other columns as values
    assert t["table/x"].status == "changed" and t["table/x"].max_abs_diff == 0.5 and t["table/x"].differing == 1
    assert t["table/n"].status == "same" and t["table/n"].dtype_a == "int64"
    assert t["s"].status == "reshaped" and (t["s"].shape_a, t["s"].shape_b) == ((2,), (1,))
    values = {v.path: v for v in d.values}
    assert values["table/label"].status == "changed"
    assert not diff_archives(a, a, checksums=False).changed()


def test_to_json_keys_are_stable(two_checkpoints: Any) -> None:
    a, b, _, _ = two_checkpoints
    out = json.loads(json.dumps(diff_archives(a, b).to_json(), allow_nan=False))
    assert list(out) == [
        "version", "a", "b", "rtol", "atol", "changed", "counts", "tensors", "values", "metadata", "tables",
    ]  # fmt: skip
    assert out["version"] == 1 and out["changed"] is True
    assert list(out["tensors"][0]) == [
        "path", "status", "shape_a", "shape_b", "dtype_a", "dtype_b", "relative_change", "max_abs_diff",
        "differing", "nonfinite_mismatch", "norm_a", "norm_b", "nan_a", "nan_b", "compared", "changed",
    ]  # fmt: skip
    assert list(out["values"][0]) == ["path", "status", "a", "b"]
    assert list(out["metadata"][0]) == ["key", "a", "b", "same"]
    assert list(out["tables"][0]) == ["path", "part", "status", "a", "b", "detail"]  # the metrics table
    keys = {m["key"] for m in out["metadata"]}
    assert {"format", "format_version", "compression.codec", "environment.python"} <= keys


def test_text_rendering(two_checkpoints: Any) -> None:
    a, b, _, _ = two_checkpoints
    text = diff_archives(a, b).render()
    assert "model/0.weight" in text and "changed" in text and "config/optim/lr" in text
    short = diff_archives(a, b).render(only_changed=True)
    assert "config/name" not in short and "config/name" in text


def test_pt_and_zarc_of_one_state_dict_are_same(tmp_path: Path) -> None:
    sd = _model().state_dict()
    torch.save(sd, tmp_path / "m.pt")
    zarchive.save(sd, tmp_path / "m.zarc")
    d = diff_archives(tmp_path / "m.pt", tmp_path / "m.zarc")
    assert [t.status for t in d.tensors] == ["same"] * len(sd)
    assert not d.changed()
    formats = {m.key: (m.a, m.b) for m in d.metadata}["format"]
    assert formats == ("torch.save", "zarchive")


def test_safetensors_and_hf_folder(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    sd = {k: v.contiguous() for k, v in _model().state_dict().items()}
    save_file(sd, str(tmp_path / "model.safetensors"))
    folder = tmp_path / "hf"
    folder.mkdir()
    names = sorted(sd)
    shards = {"model-00001-of-00002.safetensors": names[:2], "model-00002-of-00002.safetensors": names[2:]}
    for shard, keys in shards.items():
        save_file({k: sd[k] for k in keys}, str(folder / shard))
    index = {"metadata": {}, "weight_map": {k: s for s, keys in shards.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    d = diff_archives(tmp_path / "model.safetensors", folder)
    assert sorted(t.path for t in d.tensors) == names
    assert not d.changed(), d.render()


def test_opened_archives_are_left_open(tmp_path: Path) -> None:
    zarchive.save({"w": torch.ones(2)}, tmp_path / "a.zarc")
    with zarchive.open(tmp_path / "a.zarc") as arc:
        assert not diff_archives(arc, arc).changed()
        assert not arc.closed


def test_bad_tolerance_and_missing_file(tmp_path: Path) -> None:
    zarchive.save({"w": torch.ones(2)}, tmp_path / "a.zarc")
    with pytest.raises(ValueError, match="rtol"):
        diff_archives(tmp_path / "a.zarc", tmp_path / "a.zarc", rtol=-1)
    with pytest.raises(zarchive.ZArchiveError):
        diff_archives(tmp_path / "a.zarc", tmp_path / "missing.zarc")


def test_memory_stays_within_pieces(tmp_path: Path) -> None:
    """Two checkpoints of 4 x 32 MiB tensors: the comparison allocates pieces (numpy's allocations, which
    tracemalloc sees), never a whole tensor's float64 copy (256 MiB each)."""
    import tracemalloc

    torch.manual_seed(0)
    big = {f"layer{i}": torch.randn(1 << 23) for i in range(4)}
    zarchive.save(big, tmp_path / "a.zarc")
    zarchive.save({k: v + 1e-3 for k, v in big.items()}, tmp_path / "b.zarc")
    del big
    tracemalloc.start()
    try:
        d = diff_archives(tmp_path / "a.zarc", tmp_path / "b.zarc")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [t.status for t in d.tensors] == ["changed"] * 4
    assert all(t.max_abs_diff == pytest.approx(1e-3, rel=1e-2) for t in d.tensors)
    assert peak < 96 << 20, f"peak {peak / 2**20:.0f} MiB"


def test_expanded_view_is_refused_over_budget(tmp_path: Path) -> None:
    """A tiny file naming a huge stride-0 view: compared only within the read budget."""
    big = torch.zeros(1).expand(1 << 26)  # 256 MiB of values from 4 bytes
    zarchive.save({"w": big}, tmp_path / "a.zarc")
    zarchive.save({"w": big}, tmp_path / "b.zarc")
    with pytest.raises(zarchive.ZArchiveError):
        diff_archives(tmp_path / "a.zarc", tmp_path / "b.zarc", checksums=False, max_read_bytes=1 << 20)


@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 0, 2), (4, 7), (3, 5, 6)], ids=str)
def test_block_indices_cover_in_order(shape: tuple[int, ...]) -> None:
    x = np.arange(math.prod(shape)).reshape(shape)
    seen = np.concatenate([np.asarray(x[i]).reshape(-1) for i in block_indices(shape, limit=4)] or [np.array([])])
    assert seen.tolist() == x.reshape(-1).tolist()
    assert all(np.asarray(x[i]).size <= max(4, shape[-1] if shape else 1) for i in block_indices(shape, limit=4))


def test_distance_piecewise_equals_whole() -> None:
    torch.manual_seed(1)
    a, b = torch.randn(37, 11), torch.randn(37, 11)
    whole, pieces = distance(a, b), distance(a, b, limit=5)
    assert whole.differing == pieces.differing == a.numel()
    assert pieces.norm_diff == pytest.approx(whole.norm_diff)
    assert pieces.max_abs_diff == whole.max_abs_diff
    bf = distance(a.bfloat16(), a.bfloat16())
    assert bf.differing == 0 and bf.norm_diff == 0.0


def test_dcp_directory_against_zarc(tmp_path: Path) -> None:
    import warnings

    import torch.distributed.checkpoint as dcp

    from zarchive.dcp import ZArchiveWriter

    state = {"model": {"w": torch.randn(4, 3), "b": torch.randn(3)}, "step": 3}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, storage_writer=ZArchiveWriter(tmp_path / "ck"), no_dist=True)
    zarchive.save(state, tmp_path / "ck.zarc")
    d = diff_archives(tmp_path / "ck", tmp_path / "ck.zarc")
    assert sorted(t.path for t in d.tensors) == ["model/b", "model/w"]
    assert not d.changed(), d.render()
    zarchive.save({**state, "model": {**state["model"], "w": state["model"]["w"] * 2}}, tmp_path / "other.zarc")
    assert [t.path for t in diff_archives(tmp_path / "ck", tmp_path / "other.zarc").changed_tensors()] == ["model/w"]


def test_model_store_versions(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from models_a import Config, Model

    store = zarchive.ModelStore(tmp_path / "store")
    torch.manual_seed(0)
    store.save(Model(Config()), "1.0.0")
    store.save(Model(Config(lr=0.01)), "1.1.0")
    d = diff_archives(store.path("1.0.0"), store.path("1.1.0"))
    values = {v.path: v for v in d.values if v.changed()}
    assert (values["config/lr"].a, values["config/lr"].b) == (1e-3, 0.01), d.render()
    assert all(t.status == "changed" for t in d.tensors) and d.tensors  # another initialisation
    assert {t.path.split("/")[0] for t in d.tensors} == {"state_dict"}


def test_dtypes_without_numbers_compare_by_bytes(tmp_path: Path) -> None:
    """bits, sub-byte integer shells and packed float4 have no arithmetic: equal or changed by their bytes."""
    names = ["bits8", "bits16", "int4", "uint2", "float4_e2m1fn_x2", "float8_e4m3fn", "complex32", "uint16"]
    carriers = {1: torch.uint8, 2: torch.int16, 4: torch.int32}

    def tensors(start: int) -> dict[str, torch.Tensor]:
        out = {}
        for name in names:
            dt = getattr(torch, name)
            out[name] = torch.arange(start, start + 4, dtype=carriers[torch.empty(0, dtype=dt).element_size()]).view(dt)
        return out

    zarchive.save(tensors(0), tmp_path / "a.zarc")
    zarchive.save({**tensors(0), "bits8": tensors(1)["bits8"], "int4": tensors(1)["int4"]}, tmp_path / "b.zarc")
    assert not diff_archives(tmp_path / "a.zarc", tmp_path / "a.zarc", checksums=False).changed()
    t = _by_path(diff_archives(tmp_path / "a.zarc", tmp_path / "b.zarc", checksums=False))
    assert {p for p, c in t.items() if c.status != "same"} == {"bits8", "int4"}
    assert t["bits8"].max_abs_diff is None and t["float8_e4m3fn"].max_abs_diff == 0.0
