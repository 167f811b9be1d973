"""A fork server for tests that must kill, starve or limit a real process.

Starting Python and importing zarchive (hence torch) takes seconds; the kill test alone needs 30+
processes. So one server process imports zarchive once and forks a child per request: the child does
the work (saving, reading, extracting) under whatever limits the request asks for, and the server
kills it, times it out, and reports how it ended. One JSON request per line on stdin, one JSON reply
per line on stdout. Children never start from a process that has run torch ops (OpenMP and fork do
not mix), and never write to the protocol's stdout.

    w = Worker.get(); w.call(op="save", path="x.zarc", seed=1, kill_after=0.05)
"""

from __future__ import annotations

import gc
import json
import os
import resource
import signal
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def payload(seed: int, mb: int = 24) -> dict[str, Any]:
    """The object the kill and disk-full tests save: `mb` MiB in several members (3 random float32
    arrays stored plain, a compressible int32 array stored byte-grouped and a list stored as zstd), fixed
    by `seed`."""
    rng = np.random.default_rng(seed)
    n = (mb << 20) // 16
    return {
        "weights": {f"w{i}": rng.standard_normal(n, dtype=np.float32) for i in range(3)},
        "steps": np.arange(n, dtype=np.int32) * (seed + 1),
        "names": [f"item-{seed}-{i}" for i in range(2000)],
        "seed": seed,
    }


# --- server side ---------------------------------------------------------------------------------------
def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _child_save(req: dict[str, Any], cache: dict[tuple[int, int], Any]) -> dict[str, Any]:
    import zarchive

    if req.get("fsize") is not None:  # writes past this size fail with EFBIG instead of killing us
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (req["fsize"], req["fsize"]))
    zarchive.save(cache[(req["seed"], req["mb"])], req["path"], **req.get("settings", {}))
    return {"ok": True}


def _limit_memory(extra_mb: int) -> int:
    """Cap the address space at what the process has now plus `extra_mb`, and restart the peak-RSS
    count; return the RSS (KiB) that the peak is measured from."""
    limit = _status_kb("VmSize") * 1024 + (extra_mb << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kb("VmRSS")


def _child_read(req: dict[str, Any]) -> dict[str, Any]:
    import zarchive

    zarchive.read(req["path"], lazy=req.get("lazy", True))
    return {"ok": True, "problems": list(zarchive.verify(req["path"])) if req.get("verify", True) else None}


def _child_verify(req: dict[str, Any]) -> dict[str, Any]:
    import zarchive

    return {"ok": True, "problems": list(zarchive.verify(req["path"]))}


def _child_extract(req: dict[str, Any]) -> dict[str, Any]:
    from zarchive.cli import main

    return {"ok": True, "rc": main(["extract", req["path"], req["dest"]])}


def _child_neutral(req: dict[str, Any]) -> dict[str, Any]:
    from zarchive.neutral import canonical_json, neutral_form_of

    return {"ok": True, "chars": len(canonical_json(neutral_form_of(req["path"])))}


def _child_cell(req: dict[str, Any]) -> dict[str, Any]:
    from hostile.cells import run_cell  # one cell of tests/test_entry_matrix.py

    return run_cell(req)


def _run_child(req: dict[str, Any], cache: dict[tuple[int, int], Any]) -> dict[str, Any]:
    r, w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: do the work, report through the pipe, never return
        os.close(r)
        os.dup2(2, 1)  # stdout is the protocol channel
        op = req["op"]
        rss0 = _limit_memory(req["mem_mb"]) if req.get("mem_mb") else _status_kb("VmRSS")
        try:
            work = {"read": _child_read, "verify": _child_verify, "extract": _child_extract, "cell": _child_cell,
                    "neutral": _child_neutral}  # fmt: skip
            reply = _child_save(req, cache) if op == "save" else work[op](req)
        except BaseException as e:  # noqa: BLE001 - reported, not handled
            import zarchive

            reply = {
                "ok": False,
                "exc": type(e).__name__,
                "msg": str(e)[:1000],
                "zarchive_error": isinstance(e, zarchive.ZArchiveError),
                "errno": getattr(e, "errno", None),
            }
        reply["peak_mb"] = (_status_kb("VmHWM") - rss0) / 1024
        os.write(w, json.dumps(reply).encode()[:60000])
        os._exit(0)
    os.close(w)
    if req.get("kill_after") is not None:
        time.sleep(req["kill_after"])
        os.kill(pid, signal.SIGKILL)
    timeout = req.get("timeout", 60)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - start > timeout:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            return {"ok": False, "timeout": True, "elapsed": time.monotonic() - start}
        time.sleep(0.002)
    elapsed = time.monotonic() - start
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    try:
        reply = json.loads(b"".join(chunks)) if chunks else {"ok": False}
    except ValueError:  # killed halfway through writing its reply
        reply = {"ok": False}
    reply["signal"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    reply["elapsed"] = elapsed
    return reply


def serve() -> None:
    import pandas  # noqa: F401 - the handlers import these on first use; a child's limits measure reading
    import torch  # noqa: F401

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for `hostile`
    import hostile.models
    import zarchive
    from zarchive.engine.registry import default_handlers

    default_handlers()  # every handler module imported before the first fork
    # a model read once, so torch's meta-device machinery (imported by torch on first use, ~100 MB of
    # modules) is in the server before the first fork: children measure reading, not torch's imports
    import io

    buf = io.BytesIO()
    zarchive.save(hostile.models.WideNoMeta(hostile.models.WideConfig(4)), buf)
    zarchive.read(buf.getvalue())
    # what the children's work imports on first use (the matrix's cells, the command line and its
    # commands, the foreign formats, diff, the neutral form), imported once here: otherwise every child
    # imported it again, about 80 ms of a small cell's 110 ms
    import hostile.cells
    import zarchive.cli
    import zarchive.dcp.view
    import zarchive.formats.foreign
    import zarchive.formats.foreign.hf_folder
    import zarchive.inspection.diff
    import zarchive.neutral

    zarchive.cli.build_parser()  # imports every command's module
    gc.freeze()  # the server's objects out of the collector's reach: a child's collections copy none of their pages

    cache: dict[tuple[int, int], Any] = {}
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "prepare":
            key = (req["seed"], req["mb"])
            if key not in cache:
                cache[key] = payload(*key)
            reply: dict[str, Any] = {"ok": True}
        else:
            reply = _run_child(req, cache)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


# --- client side ---------------------------------------------------------------------------------------
class Worker:
    """The test side: one server process per test session, shared by every test module."""

    @staticmethod
    def get() -> Any:  # a line_server.LineServer
        from line_server import LineServer  # (tests/ is on the tests' path, not on this script's)

        return LineServer.shared(os.path.abspath(__file__))


if __name__ == "__main__":
    serve()
