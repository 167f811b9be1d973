"""The test side of a server process that answers each request, one JSON line on its stdin, with one
JSON line on its stdout; one process per script for the whole test session, started again if it
died. tests/forkrun.py and tests/hostile/worker.py are such servers."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any, ClassVar


class LineServer:
    _running: ClassVar[dict[str, LineServer]] = {}

    def __init__(self, script: str, env: Mapping[str, str] | None = None) -> None:
        self.name = os.path.basename(script)
        self.proc = subprocess.Popen(
            [sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        atexit.register(self.close)

    @classmethod
    def shared(cls, script: str, env: Mapping[str, str] | None = None) -> LineServer:
        """The session's server running `script` (`env`: its environment when it has to be started)."""
        server = cls._running.get(script)
        if server is None or server.proc.poll() is not None:
            server = cls._running[script] = LineServer(script, env)
        return server

    def call(self, **req: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} server died (exit code {self.proc.poll()})")
        return json.loads(line)  # type: ignore[no-any-return]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
