"""Reading the "big" state dict (GPT-2 small shapes, float32, 497 MB) onto a CUDA device, against
torch.load(map_location="cuda") of a torch.save file and safetensors' load_file(device="cuda"), in the
same run; and loading into a model's GPU parameters that already exist (`load_into`, against
safetensors' load_file + copy_). Medians of --reps runs each, the page cache warm (every file is read
once first), the times include torch.cuda.synchronize().

    python benchmarks/gpu_read.py [--reps 5] [--out results/gpu.md]

Needs a CUDA device; prints a markdown table (and writes it to --out).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zarchive
from benchmarks.workloads import GPTShape, gpt2_state_dict


def median_seconds(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        result = fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        del result
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from safetensors.torch import load_file, save_file

    sd = gpt2_state_dict(GPTShape())
    size = sum(t.numel() * t.element_size() for t in sd.values())
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        zarchive.save(sd, work / "plain.zarc")
        zarchive.save(sd, work / "packed.zarc", compress_weights=True)
        torch.save(sd, work / "big.pt")
        save_file(sd, str(work / "big.safetensors"))
        target = {k: torch.empty_like(v, device="cuda") for k, v in sd.items()}

        def load_into() -> None:
            with zarchive.open(work / "plain.zarc") as arc:
                for key, out in target.items():
                    arc.load_into(key, out)

        def safetensors_copy() -> None:
            loaded = load_file(str(work / "big.safetensors"))
            for key, out in target.items():
                out.copy_(loaded[key])

        cases: list[tuple[str, Callable[[], Any]]] = [
            ("torch.load(map_location='cuda')", lambda: torch.load(work / "big.pt", map_location="cuda")),
            ("safetensors load_file(device='cuda')", lambda: load_file(str(work / "big.safetensors"), device="cuda")),
            ("zarchive.read(map_location='cuda')", lambda: zarchive.read(work / "plain.zarc", map_location="cuda")),
            (
                "zarchive.read(map_location='cuda'), compress_weights",
                lambda: zarchive.read(work / "packed.zarc", map_location="cuda"),
            ),
            ("safetensors load_file + copy_ into existing GPU tensors", safetensors_copy),
            ("zarchive load_into existing GPU tensors", load_into),
        ]
        for name, fn in cases:
            fn()  # warm: page cache, CUDA context, allocator
            rows.append((name, median_seconds(fn, args.reps)))
        back = zarchive.read(work / "packed.zarc", map_location="cuda")
        assert all(torch.equal(back[k].cpu(), v) for k, v in sd.items())
        load_into()
        assert all(torch.equal(target[k].cpu(), v) for k, v in sd.items())
    base = rows[0][1]
    lines = [
        (
            f"GPU reads of 'big' ({size / 1e6:.0f} MB), {torch.cuda.get_device_name()}, "
            f"torch {torch.__version__}, median of {args.reps}"
        ),
        "",
        "| read | seconds | GB/s | vs torch.load |",
        "|---|---|---|---|",
    ]
    lines += [f"| {name} | {s:.3f} | {size / s / 1e9:.2f} | {s / base:.2f}x |" for name, s in rows]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
