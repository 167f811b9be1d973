"""Sharded checkpoints: zarchive.dcp's ZArchiveWriter/Reader against DCP's FileSystemWriter/Reader.

    .venv/bin/python benchmarks/dcp_sharded.py                      # ~1 GB model at 2 and 4 ranks, 3 runs
    .venv/bin/python benchmarks/dcp_sharded.py --ranks 2 --layers 8 --reps 2   # smaller, quicker
    .venv/bin/python benchmarks/run.py --dcp 2,4                    # the same, from the main runner

A GPT-2-small-shaped float32 state dict with `--layers` blocks (30: 252M parameters, 1.0 GB), every
tensor a DTensor sharded on dim 0 across the ranks (torchrun, gloo, CPU), is saved with dcp.save
and loaded with dcp.load into DTensors of the same layout, through both storage layers in the same
run (their order alternating between runs). Both fsync what they write (FileSystemWriter's
sync_files=True, zarchive's durable=True); zarchive verifies every checksum it reads. A time is the
wall time on rank 0 from a barrier before the call to a barrier after it: the slowest rank's.
Scratch files go to benchmarks/_work/ and are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = ("zarchive", "dcp-filesystem")


def worker(workdir: str, reps: int, layers: int) -> None:
    import warnings

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from workloads import GPTShape, gpt2_shapes

    from zarchive.container import old_file
    from zarchive.dcp import ZArchiveReader, ZArchiveWriter

    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    gen = torch.Generator().manual_seed(rank)

    def sharded(fill: bool) -> dict[str, Any]:
        sd = {}
        for key, shape in gpt2_shapes(GPTShape(n_layer=layers)):
            per = -(-shape[0] // world)  # Shard(0) splits like torch.chunk
            rows = max(0, min(shape[0], (rank + 1) * per) - rank * per)
            local = torch.empty((rows, *shape[1:]))
            if fill:
                local.normal_(0, 0.02, generator=gen)
            else:
                local.zero_()
            full = torch.empty(shape, device="meta")
            sd[key] = DTensor.from_local(
                local, mesh, [Shard(0)], run_check=False, shape=full.shape, stride=full.stride()
            )
        return sd

    state = sharded(fill=True)
    nbytes = sum(t.to_local().nbytes for t in state.values())
    totals = torch.tensor([nbytes], dtype=torch.int64)
    dist.all_reduce(totals)
    target = sharded(fill=False)

    def timed(fn: Any) -> float:
        old_file.wait_released()  # untimed: files a save replaced are freed in the background
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        dist.barrier()
        return time.perf_counter() - t0

    paths = {"zarchive": os.path.join(workdir, "zarc"), "dcp-filesystem": os.path.join(workdir, "fs")}
    writers = {"zarchive": ZArchiveWriter, "dcp-filesystem": dcp.FileSystemWriter}
    readers = {"zarchive": ZArchiveReader, "dcp-filesystem": dcp.FileSystemReader}
    samples: dict[str, dict[str, list[float]]] = {t: {"save": [], "load": []} for t in TOOLS}
    for rep in range(reps):
        order = TOOLS if rep % 2 == 0 else TOOLS[::-1]
        for tool in order:
            samples[tool]["save"].append(
                timed(lambda tool=tool: dcp.save(state, storage_writer=writers[tool](paths[tool])))
            )
        for tool in order:
            for t in target.values():
                t.to_local().zero_()
            samples[tool]["load"].append(
                timed(lambda tool=tool: dcp.load(target, storage_reader=readers[tool](paths[tool])))
            )
            if rep == 0:  # what was loaded is what was saved
                bad = [k for k in state if not torch.equal(state[k].to_local(), target[k].to_local())]
                if bad:
                    raise SystemExit(f"{tool}: {len(bad)} tensors differ after loading, e.g. {bad[0]}")
    if rank == 0:
        sizes = {t: sum(os.path.getsize(os.path.join(paths[t], f)) for f in os.listdir(paths[t])) for t in TOOLS}
        with open(os.path.join(workdir, f"result-{world}.json"), "w") as f:
            json.dump({"ranks": world, "bytes": int(totals.item()), "file_bytes": sizes, "samples": samples}, f)
    dist.barrier()
    dist.destroy_process_group()


def run(ranks: list[int], reps: int, layers: int, workdir: str) -> list[dict[str, Any]]:
    results = []
    for n in ranks:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
               "PYTHONPATH": os.pathsep.join([HERE, os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
               os.path.abspath(__file__), "--worker", workdir, str(reps), str(layers)]  # fmt: skip
        print(f"[dcp] {n} ranks ...", file=sys.stderr, flush=True)
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(workdir, f"result-{n}.json")) as f:
            results.append(json.load(f))
        for sub in ("zarc", "fs"):
            shutil.rmtree(os.path.join(workdir, sub), ignore_errors=True)
    return results


def render(results: list[dict[str, Any]], reps: int, layers: int) -> str:
    lines = [
        (
            f"Sharded checkpoints (dcp.save / dcp.load), GPT-2-small shape with {layers} blocks, float32, "
            f"every tensor sharded on dim 0; medians of {reps} runs; load average {os.getloadavg()[0]:.1f} at the end"
        ),
        "",
        "| ranks | state dict | tool | save s | load s | save GB/s | load GB/s | fastest save s | fastest load s | files |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        gb = r["bytes"] / 1e9
        med = {t: {op: statistics.median(v) for op, v in r["samples"][t].items()} for t in TOOLS}
        for t in TOOLS:
            s, ld = med[t]["save"], med[t]["load"]
            fast = {op: min(v) for op, v in r["samples"][t].items()}
            lines.append(f"| {r['ranks']} | {gb:.2f} GB | {t} | {s:.2f} | {ld:.2f} | {gb / s:.2f} | {gb / ld:.2f} "
                         f"| {fast['save']:.2f} | {fast['load']:.2f} | {r['file_bytes'][t] / 1e9:.2f} GB |")  # fmt: skip
        z, d = med["zarchive"], med["dcp-filesystem"]
        zf, df = ({op: min(v) for op, v in r["samples"][t].items()} for t in TOOLS)
        lines.append(f"| {r['ranks']} | | zarchive / DCP | {z['save'] / d['save']:.2f}x | {z['load'] / d['load']:.2f}x "
                     f"| | | {zf['save'] / df['save']:.2f}x | {zf['load'] / df['load']:.2f}x | |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        worker(argv[1], int(argv[2]), int(argv[3]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="2,4", help="world sizes, comma-separated (default 2,4)")
    p.add_argument("--reps", type=int, default=3, help="timed runs of each save and load (default 3)")
    p.add_argument("--layers", type=int, default=30, help="transformer blocks (30: 1.0 GB; 12: 0.5 GB)")
    p.add_argument("--out", default=os.path.join(HERE, "results", "dcp.md"), help="where to write the report")
    args = p.parse_args(argv)
    workdir = os.path.join(HERE, "_work", f"dcp-{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    try:
        ranks = [int(n) for n in args.ranks.split(",")]
        text = render(run(ranks, args.reps, args.layers, workdir), args.reps, args.layers)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
