"""Reading torch.save and safetensors files with zarchive, against torch.load and safetensors, in one run.

    .venv/bin/python benchmarks/foreign_files.py [--layers 12] [--reps 5]

The file is the GPT-2-small-shaped float32 state dict of workloads.py ("big": 124M parameters, 497 MB),
written once by torch.save and once by safetensors. Timed (median of --reps, warm page cache):
- all:  zarchive.read(file) | torch.load(weights_only=True) | torch.load(mmap=True) | load_file;
- one:  open and read one 768x3072 weight: zarchive.open(file)[key] | torch.load(mmap=True)[key] |
        safe_open(file).get_tensor(key).
Every value read is touched (summed), so lazily mapped tools pay for their page faults.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workloads import GPTShape, gpt2_state_dict

import zarchive

KEY = "h.3.mlp.c_fc.weight"


def touch(value: Any) -> float:
    if isinstance(value, torch.Tensor):
        return float(value.float().sum())
    return sum(touch(v) for v in value.values())


def median_seconds(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        touch(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def one_pt_zarchive(path: str) -> Any:
    with zarchive.open(path) as arc:
        return arc[KEY]


def one_st(path: str) -> Any:
    with safe_open(path, framework="pt") as f:
        return f.get_tensor(KEY)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    sd = gpt2_state_dict(GPTShape(n_layer=args.layers))
    size = sum(t.numel() * t.element_size() for t in sd.values())
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(__file__))) as d:
        pt, st = os.path.join(d, "model.pt"), os.path.join(d, "model.safetensors")
        torch.save(sd, pt)
        save_file(sd, st)
        del sd
        rows = [
            ("all", ".pt", "zarchive.read", lambda: zarchive.read(pt)),
            ("all", ".pt", "torch.load(weights_only=True)", lambda: torch.load(pt, weights_only=True)),
            ("all", ".pt", "torch.load(mmap=True)", lambda: torch.load(pt, weights_only=True, mmap=True)),
            ("all", ".safetensors", "zarchive.read", lambda: zarchive.read(st)),
            ("all", ".safetensors", "safetensors load_file", lambda: load_file(st)),
            ("one", ".pt", "zarchive.open(p)[key]", lambda: one_pt_zarchive(pt)),
            ("one", ".pt", "torch.load(mmap=True)[key]", lambda: torch.load(pt, weights_only=True, mmap=True)[KEY]),
            ("one", ".safetensors", "zarchive.open(p)[key]", lambda: one_pt_zarchive(st)),
            ("one", ".safetensors", "safe_open(p).get_tensor(key)", lambda: one_st(st)),
        ]
        for _, _, _, fn in rows:  # warm the page cache and every import
            touch(fn())
        print(f"state dict of {size / 1e6:.0f} MB, median of {args.reps} (warm page cache)\n")
        print("| read | file | tool | median ms |\n|---|---|---|---|")
        for what, kind, tool, fn in rows:
            print(f"| {what} | {kind} | {tool} | {median_seconds(fn, args.reps) * 1000:.1f} |")


if __name__ == "__main__":
    main()
