"""A fresh open plus one fetch, in a small process of its own (not a unit test).

    .venv/bin/python benchmarks/fresh_open.py [workload ...] [--rounds N]

For each workload (default: big, big-bf16, many-small) saves the data once with zarchive's defaults
and with safetensors, then times, in rounds that alternate the tools, 9 samples each of: a new
`zarchive.open(path)[key]` (copies; and `mmap=True`) or `safe_open(path).get_tensor(key)`, plus
touching every byte of the tensor, each after a read-through of the file and with zarchive's memory
of parsed headers emptied, as run.py's "fresh open + tensor" row does. run.py takes the same samples
inside its long-lived process, which has read every other tool's files first; this one does nothing
else, and is quicker to run while working on the open and fetch path. It also prints whether
safe_open's tensor lies in a mapping of its file (it does, with safetensors 0.8 and torch: the
same contract as zarchive's mmap=True, not its default copy).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from measure import timed, warm_file
from safetensors import safe_open
from safetensors.torch import save_file
from workloads import touch, workloads

import zarchive
from zarchive.container.safetensors_layout import forget_parsed_headers

SAMPLES = 9  # a round, per tool (as run.py's FRESH_SAMPLES)


def measure(name: str, tmp: str, rounds: int) -> str:
    """One workload's line: the median of each tool and its ratio to safe_open's."""
    w = workloads()[name]
    key = w.fresh_key
    assert key is not None, f"{name} has no fresh-open tensor"
    obj = w.build()
    zp, sp = os.path.join(tmp, f"{name}.zarc"), os.path.join(tmp, f"{name}.safetensors")
    zarchive.save(obj, zp)
    save_file(obj, sp)
    del obj

    def fetch(za: zarchive.ZArchive) -> Callable[[], Any]:
        def one() -> Any:
            with za.open(zp) as arc:
                return touch(arc[key])

        return one

    def safetensors_one() -> Any:
        with safe_open(sp, framework="pt") as f:
            return touch(f.get_tensor(key))

    if sys.platform.startswith("linux"):
        print(f"{name}: safe_open's tensor is a mapping of the file: {safe_open_maps(sp, key)}", flush=True)
    tools = {
        "zarchive": (fetch(zarchive.ZArchive()), zp),
        "zarchive mmap": (fetch(zarchive.ZArchive(mmap=True)), zp),
        "safe_open": (safetensors_one, sp),
    }
    times: dict[str, list[float]] = {t: [] for t in tools}
    for _ in range(rounds):
        for tool, (fn, path) in tools.items():
            for _ in range(SAMPLES):
                warm_file(path)
                forget_parsed_headers()
                secs, _ = timed(fn)
                times[tool].append(secs)
    ms = {t: statistics.median(v) * 1e3 for t, v in times.items()}
    cells = ", ".join(f"{t} {v:.2f} ms ({v / ms['safe_open']:.2f}x)" for t, v in ms.items())
    return f"{name} ({key}): {cells}"


def safe_open_maps(path: str, key: str) -> bool:
    """Whether `safe_open(path).get_tensor(key)` gives a tensor over a mapping of the file (as
    zarchive's mmap=True does) rather than a copy: its memory lies in a mapping of `path` that
    /proc/self/maps lists (Linux)."""
    with safe_open(path, framework="pt") as f:
        t = f.get_tensor(key)
    where = t.data_ptr()
    real = os.path.realpath(path)
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, *rest = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= where < hi:
                return len(rest) == 5 and os.path.realpath(rest[4].strip()) == real
    return False


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("names", nargs="*", default=["big", "big-bf16", "many-small"])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.names:
            print(measure(name, tmp, args.rounds), flush=True)


if __name__ == "__main__":
    main()
