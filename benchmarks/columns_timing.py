"""Tables as columns: the benchmark's table (workloads.table) in zarchive against pickle, and the same
table as a polars DataFrame in zarchive against polars' own IPC and Parquet files (not a unit test).

    .venv/bin/python benchmarks/columns_timing.py [rows] [repeats] [distinct]

With `distinct` the `name` column has a different value in every row (workloads.table(distinct_names=True)).

Prints medians of `repeats` rounds: durable save (fsync of the file and its folder, as zarchive's save
does), full read (warm cache: the file is read through just before), and file size; then zarchive's
ratios to pickle for the targets of issue 15 (read at most 1.0x pickle's, size at most 0.5x).
Every round checks that each read gives back exactly the table saved.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workloads import table

import zarchive


def fsync_path(path: str) -> None:
    for p in (path, os.path.dirname(os.path.abspath(path))):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def durable(save: Callable[[Any, str], Any]) -> Callable[[Any, str], None]:
    def run(obj: Any, path: str) -> None:
        save(obj, path)
        fsync_path(path)

    return run


def warm(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass


def as_polars(df: pd.DataFrame) -> Any:
    import polars as pl

    return pl.DataFrame(
        [
            pl.Series("id", df["id"].to_numpy()),
            pl.Series("score", df["score"].to_numpy()),
            pl.Series("name", df["name"].to_numpy(dtype=object).tolist(), dtype=pl.String),
            pl.Series("city", df["city"].astype(str).tolist(), dtype=pl.Enum(df["city"].cat.categories.tolist())),
            pl.Series("when", df["when"].to_numpy()),
            pl.Series("flag", df["flag"].to_numpy()),
        ]
    )


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    df = table(rows, distinct_names=len(sys.argv) > 3 and sys.argv[3] == "distinct")
    tools: dict[str, tuple[Any, Callable[[Any, str], None], Callable[[str], Any], Callable[[Any, Any], None]]] = {}

    def same_pandas(a: Any, b: Any) -> None:
        pd.testing.assert_frame_equal(a, b, check_exact=True)

    tools["pickle"] = (df, durable(lambda o, p: o.to_pickle(p)), pd.read_pickle, same_pandas)
    tools["zarchive"] = (df, zarchive.save, zarchive.read, same_pandas)
    tools["zarchive compress=off"] = (df, lambda o, p: zarchive.save(o, p, compress=False), zarchive.read, same_pandas)
    try:
        import polars as pl
        from polars.testing import assert_frame_equal

        pdf = as_polars(df)

        def same_polars(a: Any, b: Any) -> None:
            assert a.schema == b.schema
            assert_frame_equal(a, b, check_exact=True)

        tools["polars: zarchive"] = (pdf, zarchive.save, zarchive.read, same_polars)
        tools["polars: ipc zstd"] = (
            pdf, durable(lambda o, p: o.write_ipc(p, compression="zstd")), pl.read_ipc, same_polars,
        )  # fmt: skip
        tools["polars: parquet"] = (pdf, durable(lambda o, p: o.write_parquet(p)), pl.read_parquet, same_polars)
    except ImportError:
        print("polars is not installed: its rows are left out")
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            for i, (name, (obj, save, read, same)) in enumerate(tools.items()):
                path = os.path.join(tmp, f"t{i}")
                r = results.setdefault(name, {"save": [], "read": [], "size": []})
                t = time.perf_counter()
                save(obj, path)
                r["save"].append(time.perf_counter() - t)
                warm(path)
                t = time.perf_counter()
                back = read(path)
                r["read"].append(time.perf_counter() - t)
                r["size"].append(os.path.getsize(path))
                same(back, obj)
                del back
    print(f"DataFrame {rows:,} x {df.shape[1]} ({', '.join(str(t) for t in df.dtypes)}), median of {repeats}")
    med = {n: {k: statistics.median(v) for k, v in r.items()} for n, r in results.items()}
    p = med["pickle"]
    for name, m in med.items():
        print(
            f"  {name:22s} save {m['save'] * 1e3:7.1f} ms   read {m['read'] * 1e3:7.1f} ms ({m['read'] / p['read']:.2f}x)"
            f"   size {m['size'] / 1e6:7.2f} MB ({m['size'] / p['size']:.2f}x)"
        )
    z = med["zarchive"]
    read_ok, size_ok = z["read"] <= p["read"], z["size"] <= 0.5 * p["size"]
    print(
        f"  targets: read {z['read'] / p['read']:.2f}x pickle (<= 1.0: {'PASS' if read_ok else 'FAIL'}), "
        f"size {z['size'] / p['size']:.2f}x pickle (<= 0.5: {'PASS' if size_ok else 'FAIL'})"
    )
    print(f"  samples (read s): { {n: [round(x, 4) for x in r['read']] for n, r in results.items()} }")


if __name__ == "__main__":
    main()
