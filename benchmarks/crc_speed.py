"""CRC-32 throughput, zlib's against ISA-L's (isal), and what it costs a lazy read of one 9 MB tensor.

    .venv/bin/python benchmarks/crc_speed.py [--reps 25]

1. crc32 of a 64 MiB buffer with zlib.crc32 and isal.isal_zlib.crc32, in this process (medians).
2. The "big" state dict saved once as a zarchive and a safetensors file; then, each in a fresh process,
   `zarchive.open(p)[key]` (checksum verified) with isal, the same with isal hidden (as on a platform
   without its wheel, i.e. the default install before isal became a dependency), and safetensors'
   `safe_open(p).get_tensor(key)`, for key h.0.mlp.c_fc.weight (768x3072 float32, 9.4 MB): median ms
   of --reps fetches, each touching every page of the tensor.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

KEY = "h.0.mlp.c_fc.weight"

CHILD = """
import statistics, sys, time
mode, path, key, reps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if mode == "zarchive-zlib":
    sys.modules["isal"] = None  # as without an isal wheel: zarchive falls back to zlib's CRC-32
import torch
from workloads import touch
if mode.startswith("zarchive"):
    import zarchive
    from zarchive.container.crc import CRC32_BACKEND as backend
    def fetch():
        with zarchive.open(path) as arc:
            return touch(arc[key])
else:
    from safetensors import safe_open
    backend = "-"
    def fetch():
        with safe_open(path, framework="pt") as f:
            return touch(f.get_tensor(key))
fetch()
samples = []
for _ in range(reps):
    t0 = time.perf_counter()
    fetch()
    samples.append(time.perf_counter() - t0)
print(backend, statistics.median(samples) * 1e3)
"""


def throughput(reps: int) -> dict[str, float]:
    data = os.urandom(64 << 20)
    impls = {"zlib": zlib.crc32}
    try:
        from isal.isal_zlib import crc32 as isal_crc32

        impls["isal"] = isal_crc32
    except ImportError:
        pass
    samples: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(reps):  # alternating, so that both see the same load
        for name, fn in impls.items():
            t0 = time.perf_counter()
            fn(data)
            samples[name].append(time.perf_counter() - t0)
    return {name: len(data) / statistics.median(xs) / 1e9 for name, xs in samples.items()}


def lazy_reads(reps: int, workdir: str) -> dict[str, tuple[str, float]]:
    import torch
    from safetensors.torch import save_file
    from workloads import workloads

    import zarchive

    sd = workloads(False)["big"].build()
    assert sd[KEY].shape == (768, 3072) and sd[KEY].dtype == torch.float32
    zpath, spath = os.path.join(workdir, "big.zarc"), os.path.join(workdir, "big.safetensors")
    zarchive.save(sd, zpath)
    save_file(sd, spath)
    del sd
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, HERE])}
    out = {}
    for mode, path in (("zarchive-isal", zpath), ("zarchive-zlib", zpath), ("safetensors", spath)):
        res = subprocess.run(
            [sys.executable, "-c", CHILD, mode, path, KEY, str(reps)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        backend, ms = res.stdout.split()
        out[mode] = (backend, float(ms))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=25)
    args = p.parse_args()
    speeds = throughput(max(5, args.reps // 3))
    print("## CRC-32\n")
    print("| implementation | GB/s (64 MiB buffer, median) |\n|---|---|")
    for name, gbs in speeds.items():
        print(f"| {name} | {gbs:.2f} |")
    if "isal" in speeds:
        print(f"\nisal / zlib: {speeds['isal'] / speeds['zlib']:.2f}x")
    workdir = tempfile.mkdtemp(prefix="crc-speed-", dir=HERE)
    try:
        reads = lazy_reads(args.reps, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    st_ms = reads["safetensors"][1]
    print(f"\n## One 9.4 MB tensor, lazily ({KEY}, median of {args.reps} fetches, fresh process each)\n")
    print("| reader | CRC-32 | ms | vs safetensors |\n|---|---|---|---|")
    for mode, (backend, ms) in reads.items():
        print(f"| {mode} | {backend} | {ms:.2f} | {ms / st_ms:.2f}x |")
    print(f"\nload average: {[round(x, 2) for x in os.getloadavg()]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
