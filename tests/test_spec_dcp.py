"""The frozen sharded-checkpoint example (spec/examples/dcp_sharded/, written by
spec/examples/make_dcp_example.py at 2 ranks): every release opens it, reads every value as
expected.json says, verifies it, and loads it through DCP in one process. Never regenerate it."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

import zarchive
from zarchive.dcp.index import parse

EXAMPLE = Path(__file__).resolve().parent.parent / "spec" / "examples" / "dcp_sharded"


def matches(value: Any, expected: Any, where: str) -> None:
    if isinstance(expected, dict) and set(expected) == {"dtype", "shape", "values"}:
        assert str(value.dtype).removeprefix("torch.") == expected["dtype"], where
        assert list(value.shape) == expected["shape"], where
        assert value.float().reshape(-1).tolist() == expected["values"], where
    elif isinstance(expected, dict):
        assert isinstance(value, dict) and set(value) == set(expected), where
        for k in expected:
            matches(value[k], expected[k], f"{where}/{k}")
    elif isinstance(expected, list):
        assert isinstance(value, list) and len(value) == len(expected), where
        for i, (v, e) in enumerate(zip(value, expected, strict=True)):
            matches(v, e, f"{where}/{i}")
    else:
        assert value == expected and type(value) is type(expected), where


def test_frozen_example_reads_as_expected() -> None:
    pytest.importorskip("torch")
    expected = json.loads((EXAMPLE / "expected.json").read_text())
    index = parse(zarchive.read(EXAMPLE / "index.zarc"))
    assert len(index.shards) == 2 and {s["rank"] for s in index.shards.values()} == {0, 1}
    weight = index.entries["model.layer.weight"]
    assert [c.offsets for c in weight.chunks] == [(0, 0), (3, 0)]  # split between the two ranks
    with zarchive.open(EXAMPLE) as arc:
        assert arc.verify()
        matches(arc.load(), expected, "")
        matches(arc["model/layer.weight"], expected["model"]["layer.weight"], "one tensor")


def test_frozen_example_loads_through_dcp() -> None:
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    from zarchive.dcp import ZArchiveReader

    target = {
        "model": {"layer.weight": torch.zeros(5, 3), "layer.bias": torch.zeros(6, dtype=torch.bfloat16)},
        "optim": {"state": {"layer.weight": {"step": torch.tensor(0.0), "exp_avg": torch.zeros(5, 3)}},
                  "param_groups": [{"lr": 0.0, "betas": [0.0, 0.0], "params": ["", ""]}]},
        "step": 0,
        "note": "",
    }  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(target, storage_reader=ZArchiveReader(EXAMPLE), no_dist=True)
    matches(target, json.loads((EXAMPLE / "expected.json").read_text()), "")
