"""Measurements that need a fresh process; run by run.py, one JSON object per output line.

probe.py rss  WORKLOAD 'TOOL|..' 'PATH|..' [--quick]   memory of reading each PATH with its TOOL
probe.py zanj WORKLOAD PATH [--quick]        one zanj save and one read (zanj is slow: run.py
                                             time-limits this process)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def rss(args: argparse.Namespace) -> None:
    """Import everything once, then fork a fresh child per tool: each child starts with no data, reads
    and touches one file, and reports how its memory grew (imports cost nothing per tool this way)."""
    import numpy  # noqa: F401 - everything imported before any baseline
    import pandas  # noqa: F401
    import safetensors.torch  # noqa: F401
    import torch  # noqa: F401
    from tools import by_name
    from workloads import workloads

    import zarchive  # noqa: F401

    w = workloads(args.quick)[args.workload]
    if w.kind == "model":
        import configured_model  # noqa: F401 - zarchive resolves only imported classes
    pairs = list(zip(args.tools.split("|"), args.paths.split("|")))
    if any(name == "zanj" for name, _ in pairs):
        import zanj  # noqa: F401
    for name, path in pairs:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _measure_child(by_name(w, name), path)
            except BaseException as e:  # noqa: BLE001 - reported, then the child exits
                emit(tool=name, error=f"{type(e).__name__}: {e}"[:300])
                code = 1
            finally:
                sys.stdout.flush()
                os._exit(code)
        os.waitpid(pid, 0)


def _measure_child(tool: Any, path: str) -> None:
    from measure import proc_status, reset_peak
    from workloads import touch

    before = proc_status()
    peak_reset = reset_peak()
    t0 = time.perf_counter()
    obj = tool.read(path)
    t1 = time.perf_counter()
    touch(obj)
    t2 = time.perf_counter()
    after = proc_status()
    emit(tool=tool.name, before=before, after=after, peak_reset=peak_reset, read_s=t1 - t0, touch_s=t2 - t1)
    del obj


def zanj_run(args: argparse.Namespace) -> None:
    from measure import prefault
    from tools import zanj_read, zanj_save
    from workloads import nbytes, touch, workloads

    w = workloads(args.quick)[args.workload]
    obj = w.build()
    prefault(2 * nbytes(obj))
    t0 = time.perf_counter()
    try:
        zanj_save(obj, args.path)  # fsyncs, like every tool's save
    except Exception as e:  # noqa: BLE001 - report why zanj cannot do it
        emit(phase="save", error=_short(e))
        return
    emit(phase="save", seconds=time.perf_counter() - t0, size=os.path.getsize(args.path))
    del obj
    t0 = time.perf_counter()
    try:
        back = zanj_read(args.path)
        t1 = time.perf_counter()
        touch(back)
    except Exception as e:  # noqa: BLE001
        emit(phase="read", error=_short(e))
        return
    emit(phase="read", seconds=t1 - t0, touched_seconds=time.perf_counter() - t0)


def _short(e: BaseException) -> str:
    """The innermost cause of an error, on one line (zanj's messages repeat the whole object)."""
    while e.__cause__ is not None:
        e = e.__cause__
    text = " ".join(str(e).split())
    for line in str(e).splitlines():
        if line.startswith("from: "):
            text = line[6:]
    return f"{type(e).__name__}: {text[:160]}"


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rss")
    r.add_argument("workload")
    r.add_argument("tools", help="tool names separated by |")
    r.add_argument("paths", help="the file each tool reads, separated by |")
    r.add_argument("--quick", action="store_true")
    z = sub.add_parser("zanj")
    z.add_argument("workload")
    z.add_argument("path")
    z.add_argument("--quick", action="store_true")
    args = p.parse_args()
    (rss if args.cmd == "rss" else zanj_run)(args)


if __name__ == "__main__":
    main()
