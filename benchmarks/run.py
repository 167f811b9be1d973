"""zarchive benchmark suite: `make bench`, or `python benchmarks/run.py [--quick] [--only big,table]`.

Measures zarchive against safetensors, torch.save, np.savez, pickle and zanj on the same data in the
same run, and prints one markdown report (also written to benchmarks/results/latest.md). See
benchmarks/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import json
import os
import pstats
import shutil
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import async_stall
import plain_install
import workload_bench
from compressed import render_samples, run_samples
from measure import (
    can_drop_caches,
    machine,
    raw_io,
    timed,
)
from report import render
from tools import tools_for
from workload_bench import WorkloadBench, file_name, log
from workloads import Workload, touch, workloads


def profile(spec: str, quick: bool, workdir: str) -> None:
    """--profile WORKLOAD:TOOL:OP (OP: save, read or lazy): cProfile of one warm run, to stderr."""
    wname, tname, op = spec.split(":")
    w = workloads(quick)[wname]
    by = {t.name: t for t in tools_for(w)}
    t = by[tname]
    writer = by[t.writer]
    obj = w.build()
    path = os.path.join(workdir, file_name(writer))
    assert writer.save is not None
    writer.save(obj, path)

    def once() -> Any:
        if op == "save":
            assert t.save is not None
            return t.save(obj, path)
        if op == "read":
            assert t.read is not None
            return touch(t.read(path))
        assert t.lazy is not None and w.lazy_key is not None
        return touch(t.lazy(path, w.lazy_key))

    once()
    prof = cProfile.Profile()
    secs, _ = timed(lambda: prof.runcall(once))
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf).strip_dirs()
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(25)
    print(f"# profile of {spec}: {secs:.3f} s under the profiler\n{buf.getvalue()}")


# --- main -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 runs and smaller workloads (about a minute or two)")
    p.add_argument("--reps", type=int, help="timed runs per measurement (default 5; 3 with --quick)")
    p.add_argument(
        "--only",
        help="comma-separated workloads (big, big-bf16, many-small, table, table-arrow, polars-logs, configured-model)",
    )
    p.add_argument("--cold", action="store_true", help="drop the page cache before every read (needs root)")
    p.add_argument("--profile", metavar="W:TOOL:OP", help="cProfile one operation, e.g. big:zarchive:read")
    p.add_argument("--out", default=os.path.join(HERE, "results", "latest.md"), help="where to write the report")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder benchmarks/_work")
    p.add_argument("--verbose", action="store_true", help="log every measurement to stderr")
    p.add_argument("--from-json", metavar="PATH", help="only re-render the report from a saved results .json")
    p.add_argument("--dcp", metavar="RANKS", help="instead: sharded checkpoints at these world sizes (dcp_sharded.py)")
    args = p.parse_args(argv)
    if args.dcp:
        from dcp_sharded import main as dcp_main

        return dcp_main(["--ranks", args.dcp, *(["--reps", str(args.reps)] if args.reps else [])])
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        print(
            render(saved["machine"], saved["raw_io"], saved["workloads"], saved["settings"])
            + render_samples(saved.get("samples"))
            + plain_install.render(saved.get("plain_install"))
        )
        return 0
    workload_bench.VERBOSE = args.verbose
    reps = args.reps or (3 if args.quick else 5)
    if args.cold and not can_drop_caches():
        p.error("--cold needs write access to /proc/sys/vm/drop_caches (run as root)")
    workdir = os.path.join(HERE, "_work", f"run-{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    try:
        if args.profile:
            profile(args.profile, args.quick, workdir)
            return 0
        all_w = workloads(args.quick)
        names = args.only.split(",") if args.only else list(all_w)
        unknown = [n for n in names if n not in all_w]
        if unknown:
            p.error(f"unknown workloads {unknown}; choose from {list(all_w)}")
        started = time.perf_counter()
        load_before = os.getloadavg()
        info = machine(workdir)
        ref_bytes = _reference_bytes(all_w)
        log(f"raw I/O reference: {ref_bytes / 1e6:.0f} MB")
        raw = raw_io(workdir, ref_bytes, reps=3)
        results = [
            WorkloadBench(all_w[n], reps=reps, cold=args.cold, workdir=workdir, quick=args.quick).run() for n in names
        ]
        settings = {
            "reps": reps,
            "quick": args.quick,
            "cold": args.cold,
            "cold_possible": can_drop_caches(),
            "elapsed_s": time.perf_counter() - started,
            "load": [round(x, 2) for x in (*load_before, *os.getloadavg())],
            "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        }
        text = render(info, raw, results, settings)
        stall = async_stall.measure(all_w["big"], reps, workdir) if "big" in names else None
        text += "\n" + async_stall.render(stall) if stall else ""
        log("compressed weights: the codec table")
        samples = run_samples(reps=reps, mib=8 if args.quick else 32)  # benchmarks/compressed.py
        text += render_samples(samples)
        plain = None
        if "table" in names:
            log("the table without pyarrow (a plain install), in a child process")
            plain = plain_install.measure(reps, 100_000 if args.quick else 1_000_000)
            text += plain_install.render(plain)
        print(text)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump(
                {
                    "machine": info,
                    "raw_io": raw,
                    "settings": settings,
                    "workloads": results,
                    "async_stall": stall,
                    "samples": samples,
                    "plain_install": plain,
                },
                f,
                indent=1,
            )
        log(f"done in {settings['elapsed_s']:.0f} s; report written to {args.out}")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
            try:
                os.rmdir(os.path.join(HERE, "_work"))
            except OSError:
                pass


def _reference_bytes(all_w: dict[str, Workload]) -> int:
    from workloads import GPTShape, gpt2_shapes

    shape = all_w["configured-model"].shape or GPTShape()
    return sum(4 * int(_prod(s)) for _, s in gpt2_shapes(shape)) // (1 << 20) * (1 << 20)


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


if __name__ == "__main__":
    sys.exit(main())
