"""The weights hash and the model store, on the GPT-2-small-shaped ConfiguredModel of the
configured-model workload (medians of N runs, warm page cache).

    .venv/bin/python benchmarks/store_hash.py            # GPT-2 small (124M parameters, 497 MB)
    .venv/bin/python benchmarks/store_hash.py --quick    # 4 blocks instead of 12
    .venv/bin/python benchmarks/store_hash.py --reps 5

Measured, for the same weights:
- `arc.weights_hash()` of the saved model (every tensor fetched alone from the mapped file, hashed);
- `state_dict_hash(model.state_dict())`: the same hash of the tensors in memory;
- the peers' usual way of fingerprinting weights: SHA-256 of a `.safetensors` file and of a
  `torch.save` file (`hashlib.file_digest`), which depends on the file's layout;
- `ModelStore.save` against a plain `ZArchive().save` of the model (what the store adds: the hash,
  the record, the exclusive commit), and `ModelStore.load` with and without checking the hash.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import torch
from safetensors.torch import save_file
from workloads import GPTShape, build_configured_model

import zarchive
from zarchive.weights_hash import state_dict_hash


def _median(fn: Callable[[], Any], reps: int, before: Callable[[], Any] | None = None) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(reps):
        if before is not None:
            before()
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def _file_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="4 blocks instead of 12")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    model = build_configured_model(GPTShape(n_layer=4 if args.quick else 12))
    sd = model.state_dict()
    mb = sum(t.numel() * t.element_size() for t in sd.values()) / 1e6
    work = tempfile.mkdtemp(prefix="zarchive-bench-store-", dir=HERE if os.access(HERE, os.W_OK) else None)
    rows: list[tuple[str, float, str]] = []
    try:
        zpath, spath, tpath = (os.path.join(work, n) for n in ("m.zarc", "m.safetensors", "m.pt"))
        zarchive.save(model, zpath)
        save_file({k: v.contiguous() for k, v in sd.items()}, spath)
        torch.save(sd, tpath)
        for p in (zpath, spath, tpath):
            _file_sha256(p)  # warm the page cache

        def from_archive() -> str:
            with zarchive.open(zpath) as arc:
                return arc.weights_hash()

        t, h_arc = _median(from_archive, args.reps)
        rows.append(("zarchive arc.weights_hash()", t, h_arc[:16]))
        t, h_mem = _median(lambda: state_dict_hash(sd), args.reps)
        rows.append(("state_dict_hash (in memory)", t, h_mem[:16]))
        assert h_arc == h_mem
        t, h = _median(lambda: _file_sha256(spath), args.reps)
        rows.append(("sha256 of the .safetensors file", t, h[:16]))
        t, h = _median(lambda: _file_sha256(tpath), args.reps)
        rows.append(("sha256 of the torch.save file", t, h[:16]))

        root = os.path.join(work, "store")

        def clear() -> None:
            shutil.rmtree(root, ignore_errors=True)

        t, _ = _median(lambda: zarchive.ModelStore(root).save(model, "1.0.0"), args.reps, before=clear)
        rows.append(("ModelStore.save", t, ""))
        t, _ = _median(lambda: zarchive.save(model, zpath), args.reps)
        rows.append(("ZArchive().save (the same model)", t, ""))
        store = zarchive.ModelStore(root)
        t, _ = _median(lambda: store.load("1.0.0"), args.reps)
        rows.append(("ModelStore.load (hash checked)", t, ""))
        t, _ = _median(lambda: store.load("1.0.0", verify_hash=False), args.reps)
        rows.append(("ModelStore.load(verify_hash=False)", t, ""))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"weights: {mb:.0f} MB float32, torch {torch.__version__}, {os.cpu_count()} CPUs, medians of {args.reps}")
    print("| operation | s | MB/s | digest |")
    print("|---|---|---|---|")
    for name, secs, digest in rows:
        print(f"| {name} | {secs:.3f} | {mb / secs:,.0f} | {digest} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
