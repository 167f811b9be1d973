"""The "table" workload as a plain install reads it: in a child process where pyarrow cannot be imported.

`make bench` runs with the bench extra (pyarrow, polars, ...), and where pyarrow is installed zarchive
lets it make the Python strings of a text column (faster than numpy's split). A plain
`pip install` of zarchive has no pyarrow, and pandas 3 then holds text as Python strings, which is
the "table" workload itself. So run.py also times that workload's read+touch against pickle's in a
child that blocks the import of pyarrow, both tools alternating in the same child, medians of `reps`
rounds of 3 reads each, each after a read-through of the file.

Standalone: `python benchmarks/plain_install.py [--reps 5] [--rows 1000000]` prints the result.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
LIMIT = 1.0  # issue 27: read+touch <= 1.0x pickle


def measure(reps: int, rows: int) -> dict[str, Any] | None:
    """Run the child; its medians (seconds) and ratio, or None where it failed (the reason logged)."""
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", "--reps", str(reps), "--rows", str(rows)],
        capture_output=True,
        check=False,
        text=True,
        cwd=HERE,
        timeout=1800,
    )
    if proc.returncode != 0:
        print(f"plain_install: the child failed: {proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _child(reps: int, rows: int) -> None:
    sys.modules["pyarrow"] = None  # type: ignore[assignment]  # (import pyarrow now raises ImportError)
    import gc
    import statistics
    import tempfile
    import time

    import pandas as pd
    from measure import warm_file
    from workloads import table, touch

    import zarchive

    df = table(rows)
    assert df["name"].dtype.storage == "python"  # (what pandas 3 holds without pyarrow)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"zarchive": os.path.join(tmp, "t.zarc"), "pickle": os.path.join(tmp, "t.pkl")}
        zarchive.save(df, paths["zarchive"])
        df.to_pickle(paths["pickle"])
        del df
        read = {"zarchive": zarchive.read, "pickle": pd.read_pickle}
        times: dict[str, list[float]] = {t: [] for t in read}
        for _ in range(reps):
            for tool, fn in read.items():
                for _ in range(3):
                    warm_file(paths[tool])
                    gc.collect()
                    t0 = time.perf_counter()
                    touch(fn(paths[tool]))
                    times[tool].append(time.perf_counter() - t0)
    med = {t: statistics.median(v) for t, v in times.items()}
    print(json.dumps({"rows": rows, "reps": reps, **med, "ratio": med["zarchive"] / med["pickle"]}))


def render(res: dict[str, Any] | None) -> str:
    if not res:
        return ""
    verdict = "PASS" if res["ratio"] <= LIMIT else "FAIL"
    return "\n".join(
        [
            "",
            "## The table without pyarrow (a plain install)",
            "",
            (
                f'The "table" workload ({res["rows"]:,} rows) read and touched in a child process that cannot '
                "import pyarrow, as after a plain `pip install` (where zarchive has pyarrow, it makes the Python "
                f"strings of a text column with it), zarchive and pickle alternating, medians of {3 * res['reps']} "
                "reads each."
            ),
            "",
            "| workload | target | zarchive | pickle | ratio | limit | result |",
            "|---|---|---|---|---|---|---|",
            (
                f"| table, no pyarrow | read+touch <= 1.0x pickle (issue 27) | {res['zarchive']:.3f} "
                f"| {res['pickle']:.3f} | {res['ratio']:.2f}x | {LIMIT:g}x | {verdict} |"
            ),
            "",
        ]
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _child(args.reps, args.rows)
    else:
        print(render(measure(args.reps, args.rows)))


if __name__ == "__main__":
    main()
