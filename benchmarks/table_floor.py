"""Where the pandas table's read goes: zarchive's read+touch against pickle's and against the bare zstd
decompression of the same members (not a unit test).

    .venv/bin/python benchmarks/table_floor.py [rows] [repeats] [python|pyarrow]

Saves workloads.table(rows, text=...) (default: the text in Arrow buffers, the "table-arrow" workload) with the default settings and with pickle, then times, interleaved in one
process (medians of `repeats` rounds, warm page cache):
- pickle: `pd.read_pickle` plus touching every value (workloads.touch, as run.py's read+touch);
- zarchive: `zarchive.read` (verify on) plus the same touch;
- bare zstd: only decompressing the archive's compressed members (whole, largest first, on two
  threads, as zarchive's decode-ahead does), with no checks, no objects and no touch.
The last is what any reader of this file pays before its first column exists, so its ratio to pickle
bounds what read-side work can reach while the members are compressed as they are.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pandas as pd
import zstandard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workloads import table, touch

import zarchive


def bare_zstd(path: str, pool: ThreadPoolExecutor) -> int:
    with zipfile.ZipFile(path) as z:
        infos = sorted((i for i in z.infolist() if i.filename.endswith(".zst")), key=lambda i: -i.file_size)
        frames = [z.read(i.filename) for i in infos]
    return sum(pool.map(lambda f: len(zstandard.ZstdDecompressor().decompress(f)), frames))


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    df = table(rows, text=sys.argv[3] if len(sys.argv) > 3 else "pyarrow")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        pkl, zarc = os.path.join(tmp, "t.pkl"), os.path.join(tmp, "t.zarc")
        df.to_pickle(pkl)
        zarchive.save(df, zarc)
        pd.testing.assert_frame_equal(zarchive.read(zarc), df, check_exact=True)
        steps: dict[str, Callable[[], Any]] = {
            "pickle read+touch": lambda: touch(pd.read_pickle(pkl)),
            "zarchive read+touch": lambda: touch(zarchive.read(zarc)),
            "bare zstd, 2 threads": lambda: bare_zstd(zarc, pool),
        }
        times: dict[str, list[float]] = {name: [] for name in steps}
        for _ in range(repeats):
            for name, step in steps.items():
                t = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - t)
        sizes = os.path.getsize(pkl), os.path.getsize(zarc)
    med = {name: statistics.median(t) for name, t in times.items()}
    base = med["pickle read+touch"]
    print(f"table {rows:,} rows; pickle {sizes[0] / 1e6:.1f} MB, zarchive {sizes[1] / 1e6:.1f} MB; median of {repeats}")
    for name, t in med.items():
        print(f"  {name:22s} {t * 1e3:7.1f} ms  {t / base:5.2f}x pickle")


if __name__ == "__main__":
    main()
