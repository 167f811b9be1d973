"""`python -c CODE ARGS...` (or `-m MODULE`) in a fork of one server that has already imported numpy,
torch, pandas and zarchive: what `subprocess.run([sys.executable, "-c", CODE, ...])` does, without
each child paying the 1.2 s of starting Python and importing torch again.

The child is a fresh process in every way a test can see: its own working directory, environment,
sys.argv, sys.path (as `python -c` builds it: '', then PYTHONPATH, then the interpreter's own), an
empty __main__, stdin/stdout/stderr of its own, the exit status (a negative signal number if a signal
killed it), and an interpreter exit (non-daemon threads joined, atexit functions run). What it cannot
give: a module the server imported is imported already (so use it only where PYTHONPATH names this
checkout first, and never to test what importing does), and environment variables read at import
time by those modules keep the server's values. The server runs no torch operation (OpenMP and fork
do not mix). tests/hostile/worker.py is the same idea for calls into the hostile-input cells.

    done = forkrun.run(["-c", "import sys; print(sys.argv)", "x"], env=env, cwd=tmp, timeout=60)
"""

from __future__ import annotations

import atexit
import builtins
import gc
import json
import os
import runpy
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from collections.abc import Mapping, Sequence
from typing import Any

from line_server import LineServer  # (tests/, on the path of the tests and of this script)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- server side ---------------------------------------------------------------------------------------
def _exit_status(code: object) -> int:
    """The status `sys.exit(code)` gives a process."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(req: dict[str, Any], base_path: list[str]) -> None:
    """In the forked child: become `python ARGS` as the request describes, run, and exit."""
    for fd, name, flags in ((0, "stdin", os.O_RDONLY), (1, "stdout", os.O_WRONLY), (2, "stderr", os.O_WRONLY)):
        f = os.open(req[name], flags)
        os.dup2(f, fd)
        os.close(f)
    sys.stdin = sys.__stdin__ = open(0, closefd=False)  # noqa: SIM115 - the process's own streams
    sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(2, "w", 1, closefd=False, errors="backslashreplace")  # noqa: SIM115
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    extra = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = ["", *extra, *base_path]
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    args = req["args"]
    status = 0
    try:
        if args[0] == "-c":
            sys.argv = ["-c", *args[2:]]
            exec(compile(args[1], "<string>", "exec"), main.__dict__)  # noqa: S102 - the test's own code
        elif args[0] == "-m":
            sys.argv = [args[1], *args[2:]]  # runpy puts the module's file in argv[0]
            sys.modules.pop("__main__")
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            raise ValueError(f"forkrun runs -c CODE or -m MODULE, not {args[0]!r}")
    except SystemExit as e:
        status = _exit_status(e.code)
    except BaseException:  # noqa: BLE001 - reported as the interpreter would
        traceback.print_exc()
        status = 1
    # the interpreter's exit, in its order: threading's exit hooks (concurrent.futures stops its workers)
    # and the joins of non-daemon threads, then the atexit functions
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed stream, as at a real exit
            pass
    os._exit(status)


def serve() -> None:
    import numpy  # noqa: F401 - imported once here, for every child
    import pandas  # noqa: F401
    import torch  # noqa: F401

    import zarchive  # noqa: F401

    here = os.path.dirname(os.path.abspath(__file__))
    own = {here, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)}
    base_path = [p for p in sys.path if p not in own]  # the interpreter's own entries
    gc.freeze()  # the server's objects out of the collector's reach: children copy none of their pages
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                _child(req, base_path)  # exits
            finally:
                os._exit(70)  # never back into the server's loop
        reply: dict[str, Any] = {}
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                reply["returncode"] = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                break
            if time.monotonic() - start > req["timeout"]:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                reply["timeout"] = True
                break
            time.sleep(0.002)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


# --- client side ---------------------------------------------------------------------------------------
def _server() -> LineServer:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [ROOT, os.environ.get("PYTHONPATH")] if p)}
    return LineServer.shared(os.path.abspath(__file__), env)


def run(
    args: Sequence[str],
    *,
    input: str | None = None,  # subprocess.run's name
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """subprocess.run([sys.executable, *args], input=input, env=env, cwd=cwd, timeout=timeout,
    capture_output=True, text=True), args being ["-c", CODE, ...] or ["-m", MODULE, ...]."""
    env = dict(os.environ if env is None else env)
    first = env.get("PYTHONPATH", "").split(os.pathsep)[0]
    assert first and os.path.samefile(first, ROOT), "forkrun's children have this checkout's zarchive imported"
    with tempfile.TemporaryDirectory(prefix="forkrun-") as tmp:
        files = {name: os.path.join(tmp, name) for name in ("stdin", "stdout", "stderr")}
        for name, text in files.items():
            with open(text, "w") as f:
                f.write((input or "") if name == "stdin" else "")
        reply = _server().call(**files, args=list(args), env=env, cwd=os.fspath(cwd or os.getcwd()), timeout=timeout)
        with open(files["stdout"], errors="replace") as out, open(files["stderr"], errors="replace") as err:
            stdout, stderr = out.read(), err.read()
    if reply.get("timeout"):
        raise subprocess.TimeoutExpired([sys.executable, *args], timeout, stdout, stderr)
    return subprocess.CompletedProcess([sys.executable, *args], reply["returncode"], stdout, stderr)


def cli(
    *args: str | os.PathLike[str],
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """`python -m zarchive ARGS` (this checkout's) in a forked child: its exit status, stdout and stderr."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [ROOT, env.get("PYTHONPATH")] if p)
    return run(["-m", "zarchive", *map(os.fspath, args)], env=env, cwd=cwd, timeout=timeout)


if __name__ == "__main__":
    serve()
