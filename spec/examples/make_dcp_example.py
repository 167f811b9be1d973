"""Writes the frozen sharded-checkpoint example `dcp_sharded/` (spec/distributed.md) and its
`expected.json`, the values it reads to (tensors as dtype, shape and row-major values).

    torchrun --nproc-per-node=2 spec/examples/make_dcp_example.py OUT_DIR

Run once, on 2026-11-24 with torch 2.13 and zarchive's format 1.2: the example is frozen, never
written again (every save draws a new save id, so a new run gives other bytes); tests/test_spec_dcp.py
reads it with every release. A reader MUST ignore `expected.json`, which is not part of the checkpoint.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from zarchive.dcp import ZArchiveWriter


def describe(value: object) -> object:
    if isinstance(value, DTensor):
        value = value.full_tensor()
    if isinstance(value, torch.Tensor):
        return {"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                "values": value.float().reshape(-1).tolist()}  # fmt: skip
    if isinstance(value, dict):
        return {k: describe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [describe(v) for v in value]
    return value


def main() -> None:
    warnings.filterwarnings("ignore")
    out = sys.argv[1]
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2,))
    state = {
        "model": {
            "layer.weight": distribute_tensor(torch.arange(15, dtype=torch.float32).reshape(5, 3) / 4, mesh, [Shard(0)]),
            "layer.bias": distribute_tensor(torch.arange(6).to(torch.bfloat16) / 2, mesh, [Shard(0)]),
        },
        "optim": {
            "state": {"layer.weight": {"step": torch.tensor(3.0),
                                       "exp_avg": distribute_tensor(torch.full((5, 3), 0.5), mesh, [Shard(0)])}},
            "param_groups": [{"lr": 0.01, "betas": [0.9, 0.999], "params": ["layer.weight", "layer.bias"]}],
        },
        "step": 3,
        "note": "frozen example of spec/distributed.md",
    }  # fmt: skip
    dcp.save(state, storage_writer=ZArchiveWriter(out))
    expected = describe(state)
    if dist.get_rank() == 0:
        with open(os.path.join(out, "expected.json"), "w") as f:
            json.dump(expected, f, indent=1)
            f.write("\n")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
