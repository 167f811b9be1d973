"""One workload measured against its peers in one process: saves, reads, one-tensor fetches, fresh
opens and the memory of fresh processes (`WorkloadBench`), for benchmarks/run.py."""

from __future__ import annotations

import gc
import os
import shutil
import sys
import time
from typing import Any

from measure import drop_caches, prefault, run_probe, timed, warm_file
from report import FRESH_SAMPLES, METRICS
from tools import ZARCHIVE, Tool, tools_for, unsupported
from workloads import Workload, nbytes, touch

SLOW_S = 20.0  # a tool whose warm-up run takes longer than this is measured once, not N times
PROBE_TIMEOUT = 120.0  # per tool, for the memory probes
VERBOSE = False


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def short_error(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:200]}"


def file_name(tool: Tool) -> str:
    return "".join(c if c.isalnum() else "_" for c in tool.name) + tool.ext


# A one-tensor fetch takes a millisecond or two, so single samples swing with whatever the machine did
# just before: each round takes several (each after its own warm-up read of the file).
LAZY_SAMPLES = 5


def _lazy_and_touch(t: Tool, path: str, key: str) -> int:
    assert t.lazy is not None
    return touch(t.lazy(path, key))


# "fresh open + tensor": zarchive against safe_open, each sample as a fresh process would open
FRESH_TOOLS = (ZARCHIVE, f"{ZARCHIVE} mmap", "safetensors")


def _fresh_state() -> None:
    """Forget what an earlier open in this process left behind (zarchive remembers the last parsed
    safetensors headers by their bytes): the next open is a fresh one, as the first in a process."""
    from zarchive.container.safetensors_layout import forget_parsed_headers

    forget_parsed_headers()


class WorkloadBench:
    """Runs every tool of one workload: timed loops in this process, then probes in fresh ones."""

    def __init__(self, w: Workload, *, reps: int, cold: bool, workdir: str, quick: bool) -> None:
        self.w, self.reps, self.cold, self.quick = w, reps, cold, quick
        self.dir = os.path.join(workdir, w.name)
        os.makedirs(self.dir, exist_ok=True)
        self.tools = tools_for(w)
        self.cells: dict[str, dict[str, dict[str, Any]]] = {
            t.name: {m: {"samples": [], "error": None} for m in METRICS} for t in self.tools
        }
        self.broken: dict[str, str] = {}  # tool -> why it cannot take part at all
        self.slow: set[str] = set()
        self.paths = {t.name: os.path.join(self.dir, file_name(t)) for t in self.tools}

    def path(self, t: Tool) -> str:
        return self.paths[t.writer]

    def fail(self, t: Tool, metric: str, err: str) -> None:
        self.cells[t.name][metric]["error"] = err

    def usable(self, t: Tool, metric: str) -> bool:
        return t.name not in self.broken and t.writer not in self.broken and not self.cells[t.name][metric]["error"]

    def run(self) -> dict[str, Any]:
        w = self.w
        out: dict[str, Any] = {"name": w.name, "description": w.description, "error": None, "tools": {}}
        log(f"{w.name}: building the data")
        try:
            obj = w.build()
        except Exception as e:  # noqa: BLE001 - a workload zarchive cannot make yet is reported, not fatal
            out["error"] = short_error(e)
            log(f"{w.name}: n/a ({out['error']})")
            return out
        out["nbytes"] = nbytes(obj)
        prefault(2 * out["nbytes"])
        for t in self.tools:
            why = unsupported(t, w, obj)
            if why:
                self.broken[t.name] = f"n/a: {why}"
        inproc = [t for t in self.tools if not t.out_of_process]
        for rep in range(1 + self.reps):  # round 0 warms up (and is the only run of slow tools)
            log(f"{w.name}: round {rep}/{self.reps}")
            k = rep % len(inproc)
            order = inproc[k:] + inproc[:k]  # alternate, and rotate who goes first
            self._saves(order, obj, rep)
            self._reads(order, rep)
            self._lazies(order, rep)
            self._fresh(order, rep)
        for t in self.tools:
            if t.save is not None and t.name not in self.broken and os.path.exists(self.paths[t.name]):
                self.cells[t.name]["size"]["samples"].append(os.path.getsize(self.paths[t.name]))
        del obj
        gc.collect()
        for t in self.tools:
            if t.out_of_process:
                self._zanj(t)
        self._memory_probes()
        for t in self.tools:
            out["tools"][t.name] = {
                "note": t.note + (" (1 run: slow)" if t.name in self.slow else ""),
                "is_zarchive": t.is_zarchive,
                "does": self._does(t),
                "broken": self.broken.get(t.name) or self.broken.get(t.writer),
                "metrics": self.cells[t.name],
            }
        shutil.rmtree(self.dir, ignore_errors=True)
        return out

    def _does(self, t: Tool) -> list[str]:
        """The metrics this tool takes part in (the others are shown as a dash)."""
        out = ["save", "size"] if t.save is not None else []
        out += ["read", "touch", "peak", "anon"] if t.read is not None else []
        out += ["lazy"] if t.lazy is not None and self.w.lazy_key is not None else []
        out += ["fresh"] if t.name in FRESH_TOOLS and t.lazy is not None and self.w.fresh_key is not None else []
        return out

    def _keep(self, t: Tool, rep: int, metric: str, value: float) -> None:
        if VERBOSE:
            log(f"{self.w.name}: {t.name} {metric} {value:.4f} s")
        if rep > 0 or t.name in self.slow:
            self.cells[t.name][metric]["samples"].append(value)

    def _skip(self, t: Tool, rep: int) -> bool:
        return rep > 0 and t.name in self.slow

    def _saves(self, order: list[Tool], obj: Any, rep: int) -> None:
        for t in order:
            if t.save is None or t.name in self.broken or self._skip(t, rep):
                continue
            try:
                secs, _ = timed(t.save, obj, self.paths[t.name])
            except Exception as e:  # noqa: BLE001
                self.broken[t.name] = f"fails: {short_error(e)}"
                log(f"{self.w.name}: {t.name} cannot save: {self.broken[t.name]}")
                continue
            if rep == 0 and secs > SLOW_S:
                self.slow.add(t.name)
            self._keep(t, rep, "save", secs)

    def _reads(self, order: list[Tool], rep: int) -> None:
        for t in order:
            if t.read is None or not self.usable(t, "read") or self._skip(t, rep):
                continue
            read, p = t.read, self.path(t)
            drop_caches() if self.cold else warm_file(p)
            gc.collect()
            try:
                t0 = time.perf_counter()
                got = read(p)
                t1 = time.perf_counter()
                touch(got)
                t2 = time.perf_counter()
            except Exception as e:  # noqa: BLE001
                self.fail(t, "read", f"fails: {short_error(e)}")
                self.fail(t, "touch", "fails (see read)")
                continue
            del got
            if rep == 0 and t2 - t0 > SLOW_S:
                self.slow.add(t.name)
            self._keep(t, rep, "read", t1 - t0)
            self._keep(t, rep, "touch", t2 - t0)

    def _lazies(self, order: list[Tool], rep: int) -> None:
        key = self.w.lazy_key
        for t in order:
            if key is None or t.lazy is None or not self.usable(t, "lazy") or self._skip(t, rep):
                continue
            self._fetches(t, rep, "lazy", key, LAZY_SAMPLES, fresh=False)

    def _fresh(self, order: list[Tool], rep: int) -> None:
        """A new open, one tensor (Workload.fresh_key) fetched and touched: FRESH_SAMPLES times a round, each after a
        read-through of the file (warm page cache) and from a fresh state (_fresh_state)."""
        key = self.w.fresh_key
        for t in order:
            if key is None or t.name not in FRESH_TOOLS or t.lazy is None or not self.usable(t, "fresh"):
                continue
            self._fetches(t, rep, "fresh", key, FRESH_SAMPLES, fresh=True)

    def _fetches(self, t: Tool, rep: int, metric: str, key: str, samples: int, *, fresh: bool) -> None:
        """`samples` timed fetches of `key` with a touch, each after a read-through of the file (or with
        the page cache dropped) and, for fresh opens, from a fresh state (_fresh_state)."""
        p = self.path(t)
        for _ in range(samples):
            drop_caches() if self.cold else warm_file(p)
            if fresh:
                _fresh_state()
            try:
                secs, _ = timed(_lazy_and_touch, t, p, key)
            except Exception as e:  # noqa: BLE001
                self.fail(t, metric, f"fails: {short_error(e)}")
                break
            self._keep(t, rep, metric, secs)

    def _zanj(self, t: Tool) -> None:
        if t.name in self.broken:
            return
        log(f"{self.w.name}: {t.name} (one run, at most {self.w.zanj_timeout:.0f} s)")
        args = ["zanj", self.w.name, self.paths[t.name]] + (["--quick"] if self.quick else [])
        lines, err = run_probe(args, timeout=self.w.zanj_timeout)
        phases = {ln.get("phase"): ln for ln in lines}
        save, read = phases.get("save", {}), phases.get("read", {})
        if "seconds" in save:
            self.cells[t.name]["save"]["samples"].append(save["seconds"])
            self.cells[t.name]["size"]["samples"].append(save["size"])
        if "seconds" in read:
            self.cells[t.name]["read"]["samples"].append(read["seconds"])
            self.cells[t.name]["touch"]["samples"].append(read["touched_seconds"])
        if "error" in save:
            self.broken[t.name] = f"fails: {save['error']}"
        elif "seconds" not in save:
            self.broken[t.name] = f"save {err or 'gave no result'}"
        elif "seconds" not in read:
            why = read.get("error") or err or "gave no result"
            self.fail(t, "read", f"read {why}")
            self.fail(t, "touch", f"read {why}")

    def _memory_probes(self) -> None:
        todo = [t for t in self.tools if t.read is not None and self.usable(t, "read") and os.path.exists(self.path(t))]
        if not todo:
            return
        log(f"{self.w.name}: memory of fresh processes reading with {len(todo)} tools")
        args = ["rss", self.w.name, "|".join(t.name for t in todo), "|".join(self.path(t) for t in todo)]
        lines, err = run_probe(args + (["--quick"] if self.quick else []), timeout=PROBE_TIMEOUT * len(todo))
        got = {ln.get("tool"): ln for ln in lines}
        for t in todo:
            r = got.get(t.name)
            if r is None or "error" in r:
                self.fail(t, "peak", f"memory probe failed: {(r or {}).get('error') or err or 'no result'}")
                self.fail(t, "anon", "fails (see peak)")
                continue
            before, after = r["before"], r["after"]
            self.cells[t.name]["peak"]["samples"].append(after["VmHWM"] - before["VmRSS"])
            self.cells[t.name]["anon"]["samples"].append(after["RssAnon"] - before["RssAnon"])


# --- profiling one operation ------------------------------------------------------------------------
