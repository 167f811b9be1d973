"""Quick timing of zarchive against DataFrame.to_pickle on the benchmark's table (not a unit test).

    .venv/bin/python benchmarks/pandas_timing.py [rows] [repeats]

Prints medians of `repeats` runs: save (including fsync of the file and its folder, as zarchive's save
does), full read, and file size, for zarchive with default settings and for pickle.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workloads import table

import zarchive


def fsync_path(path: str) -> None:
    for p, flags in ((path, os.O_RDONLY), (os.path.dirname(os.path.abspath(path)), os.O_RDONLY)):
        fd = os.open(p, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    df = table(rows)
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        pkl, zarc = os.path.join(tmp, "t.pkl"), os.path.join(tmp, "t.zarc")

        def save_pickle(obj: pd.DataFrame, path: str) -> None:
            obj.to_pickle(path)
            fsync_path(path)

        tools = {
            "pickle": (save_pickle, pd.read_pickle, pkl),
            "zarchive": (zarchive.save, zarchive.read, zarc),
        }
        for _ in range(repeats):
            for name, (save, read, path) in tools.items():
                r = results.setdefault(name, {"save": [], "read": [], "size": []})
                r["save"].append(timed(save, df, path)[0])
                t, back = timed(read, path)
                r["read"].append(t)
                r["size"].append(os.path.getsize(path))
                pd.testing.assert_frame_equal(back, df, check_exact=True)
                del back
    print(f"DataFrame {rows:,} x {df.shape[1]} ({', '.join(str(t) for t in df.dtypes)}), median of {repeats}")
    med = {n: {k: statistics.median(v) for k, v in r.items()} for n, r in results.items()}
    for name, m in med.items():
        print(
            f"  {name:9s} save {m['save'] * 1e3:7.1f} ms   read {m['read'] * 1e3:7.1f} ms   size {m['size'] / 1e6:7.2f} MB"
        )
    z, p = med["zarchive"], med["pickle"]
    print(
        f"  ratios: save {z['save'] / p['save']:.2f}x (target <= 2), read {z['read'] / p['read']:.2f}x "
        f"(target <= 3), size {z['size'] / p['size']:.2f}x (target <= 0.6)"
    )


if __name__ == "__main__":
    main()
