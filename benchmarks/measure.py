"""Timing, memory and machine helpers: clocks, page-cache control, probes in fresh processes, raw I/O.

Memory is measured in a fresh subprocess per (workload, tool) so one tool's allocations cannot hide
another's: the probe records its RSS after importing everything, resets the peak (clear_refs), reads
and touches every byte, and reports the peak and the anonymous part (RssAnon: memory the read copied,
as opposed to file pages it mapped, which the kernel can drop and share).
"""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
DROP_CACHES = "/proc/sys/vm/drop_caches"


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """Seconds `fn(*args)` took the caller, and its result. Work it left running in the background
    (zarchive freeing a file it saved over) finishes before this returns, untimed, so that it cannot
    slow whatever is timed next."""
    gc.collect()
    t0 = time.perf_counter()
    out = fn(*args)
    secs = time.perf_counter() - t0
    settle()
    return secs, out


def settle() -> None:
    mod = sys.modules.get("zarchive.container.old_file")
    if mod is not None:
        mod.wait_released()


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def can_drop_caches() -> bool:
    return os.access(DROP_CACHES, os.W_OK)


def drop_caches() -> None:
    os.sync()
    with open(DROP_CACHES, "w") as f:
        f.write("3\n")


_WARM_BUF = bytearray(8 << 20)


def warm_file(path: str) -> None:
    """Read a file once so its pages are in the page cache right before a timed warm read.

    Some VMs page out memory that has not been touched for a few seconds (DAMON `pageout` schemes,
    see /sys/kernel/mm/damon): without this, a file written earlier in the round may already be
    partly evicted, and "warm" reads would hit the disk at random."""
    view = memoryview(_WARM_BUF)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(view):
            pass


def damon_pageout() -> str | None:
    """A description of an active DAMON pageout scheme on this machine, if there is one."""
    base = "/sys/kernel/mm/damon/admin/kdamonds"
    try:
        for kd in os.listdir(base):
            if not kd.isdigit():
                continue
            with open(f"{base}/{kd}/state") as f:
                if f.read().strip() != "on":
                    continue
            for root, _dirs, files in os.walk(f"{base}/{kd}/contexts"):
                if "action" in files:
                    with open(os.path.join(root, "action")) as f:
                        if f.read().strip() == "pageout":
                            return "DAMON pages out memory left untouched for a few seconds"
    except OSError:
        return None
    return None


def prefault(nbytes: int) -> None:
    """Touch `nbytes` of fresh memory once, so that the first timed run does not pay for the VM's
    first-touch of never-used pages (several seconds per GB on some hosts)."""
    import numpy as np

    block = np.ones(nbytes, dtype=np.uint8)
    del block


# --- /proc/self/status ------------------------------------------------------------------------------

STATUS_KEYS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")


def proc_status() -> dict[str, int]:
    """Memory counters of this process in bytes."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in STATUS_KEYS:
                out[key] = int(rest.split()[0]) * 1024
    return out


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False when the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# --- probes -----------------------------------------------------------------------------------------


def run_probe(args: list[str], timeout: float) -> tuple[list[dict[str, Any]], str | None]:
    """Run `probe.py args` in a fresh interpreter; its JSON lines, and an error text if it failed."""
    cmd = [sys.executable, os.path.join(HERE, "probe.py"), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=HERE, check=False)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return _json_lines(out), f"timed out after {timeout:.0f} s"
    lines = _json_lines(proc.stdout)
    if proc.returncode != 0:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        return lines, tail[0][:300]
    return lines, None


def _json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


# --- the machine ------------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def total_ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def filesystem(path: str) -> str:
    """The filesystem type holding `path`, from /proc/mounts (longest matching mount point)."""
    best, kind = "", "?"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mnt = parts[1]
                if os.path.abspath(path).startswith(mnt) and len(mnt) > len(best):
                    best, kind = mnt, f"{parts[2]} on {parts[0]}"
    except OSError:
        pass
    return kind


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("zarchive", "torch", "numpy", "pandas", "safetensors", "zstandard", "zanj"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def machine(workdir: str) -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "ram_gb": round(total_ram() / 2**30, 1),
        "kernel": platform.release(),
        "fs": filesystem(workdir),
        "reclaim": damon_pageout(),
        "versions": versions(),
    }


# --- raw I/O reference ------------------------------------------------------------------------------


def raw_io(workdir: str, nbytes: int, reps: int) -> dict[str, float]:
    """Seconds to write `nbytes` with plain write() (with and without fsync) and to read them back."""
    buf = os.urandom(1 << 20) * (nbytes >> 20)
    path = os.path.join(workdir, "raw.bin")
    w_plain: list[float] = []
    w_sync: list[float] = []
    r: list[float] = []
    target = bytearray(len(buf))
    for rep in range(reps + 1):
        for sync in (False, True):
            if os.path.exists(path):
                os.unlink(path)
            t0 = time.perf_counter()
            with open(path, "wb") as f:
                f.write(buf)
                f.flush()
                if sync:
                    os.fsync(f.fileno())
            dt = time.perf_counter() - t0
            if rep:
                (w_sync if sync else w_plain).append(dt)
        t0 = time.perf_counter()
        with open(path, "rb", buffering=0) as f:
            f.readinto(target)
        if rep:
            r.append(time.perf_counter() - t0)
    os.unlink(path)
    return {
        "bytes": len(buf),
        "write": statistics.median(w_plain),
        "write_fsync": statistics.median(w_sync),
        "read": statistics.median(r),
    }
