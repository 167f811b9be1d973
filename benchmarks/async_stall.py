"""Training stall of `ZArchive.save_async` against a synchronous save of the "big" workload.

    .venv/bin/python benchmarks/async_stall.py [--quick] [--reps 7]

The stall is the time save_async takes to return its future (the walk of the state dict and the copy
of its tensors into the staging buffer); training goes on while the archive is written. Each round
runs a durable `ZArchive().save` and a `ZArchive().save_async` (its future waited for, untimed), in
alternating order; the first save_async of the process (which allocates the staging buffer) is
reported apart. run.py appends this section to the report when "big" is among its workloads.
Target (issue 17): the stall at most 10% of the synchronous save.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np
from measure import prefault, settle
from workloads import Workload, nbytes, workloads

import zarchive

TARGET = 0.10


def measure(w: Workload, reps: int, workdir: str) -> dict[str, Any]:
    obj = w.build()
    size = nbytes(obj)
    prefault(2 * size)
    za = zarchive.ZArchive()
    sync_path, async_path = os.path.join(workdir, "sync.zarc"), os.path.join(workdir, "async.zarc")

    def sync_save() -> float:
        gc.collect()
        t0 = time.perf_counter()
        za.save(obj, sync_path)
        secs = time.perf_counter() - t0
        settle()
        return secs

    def async_save() -> tuple[float, float]:
        gc.collect()
        t0 = time.perf_counter()
        fut = za.save_async(obj, async_path)
        stall = time.perf_counter() - t0
        fut.result()
        total = time.perf_counter() - t0
        settle()
        return stall, total

    src, dst = np.ones(size, dtype=np.uint8), np.zeros(size, dtype=np.uint8)

    def memcpy() -> float:  # the machine's copy speed right now: what a capture cannot beat
        t0 = time.perf_counter()
        np.copyto(dst, src)
        return time.perf_counter() - t0

    load_before = os.getloadavg()
    first_stall, first_total = async_save()  # allocates the staging buffer
    sync_save()  # warm-up
    sync, stall, total, copy = [], [], [], []
    for rep in range(reps):
        if rep % 2:
            sync.append(sync_save())
            s, t = async_save()
        else:
            s, t = async_save()
            sync.append(sync_save())
        stall.append(s)
        total.append(t)
        copy.append(memcpy())
    runs = (("sync", sync), ("stall", stall), ("total", total), ("memcpy", copy))
    med = {name: statistics.median(xs) for name, xs in runs}
    return {
        "load": [round(x, 2) for x in (*load_before, *os.getloadavg())],
        "workload": w.name,
        "description": w.description,
        "nbytes": size,
        "reps": reps,
        "first_stall_s": first_stall,
        "first_total_s": first_total,
        "samples": dict(runs),
        "median": med,
        "ratio": med["stall"] / med["sync"],
    }


def render(r: dict[str, Any]) -> str:
    m = r["median"]
    verdict = "PASS" if r["ratio"] <= TARGET else "FAIL"
    return "\n".join([
        "## Saves that do not stop training",
        "",
        f"{r['workload']} ({r['nbytes'] / 1e6:.0f} MB), medians of {r['reps']} runs after a warm-up:",
        "",
        "| | s |",
        "|---|---|",
        f"| `ZArchive().save` (durable) | {m['sync']:.3f} |",
        f"| `ZArchive().save_async`: stall (until the future is returned) | {m['stall']:.3f} |",
        f"| `ZArchive().save_async`: until the file is written | {m['total']:.3f} |",
        f"| first save_async of the process (allocates the staging buffer): stall | {r['first_stall_s']:.3f} |",
        f"| reference: one numpy copy of as many bytes (memcpy) | {m['memcpy']:.3f} |",
        "",
        f"- load average (1, 5, 15 min) before: {r['load'][:3]}, after: {r['load'][3:]}",
        f"- stall / synchronous save: {r['ratio']:.3f} (target <= {TARGET:.2f}): {verdict}",
        "- samples (s): " + "; ".join(f"{k} {', '.join(f'{x:.3f}' for x in v)}" for k, v in r["samples"].items()),
        "",
    ])  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the smaller 'big' of run.py --quick")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    workdir = tempfile.mkdtemp(prefix="async-stall-", dir=HERE)
    try:
        print(render(measure(workloads(args.quick)["big"], args.reps, workdir)))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
