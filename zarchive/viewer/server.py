"""The viewer's HTTP server: the standard library's ThreadingHTTPServer, bound to the loopback address
only, answering GET (and HEAD) through `Routes`, with headers that keep pages from loading anything
from elsewhere (Content-Security-Policy) and from leaking the token (Referrer-Policy)."""

from __future__ import annotations

import http.server
import threading
from typing import Any

from .routes import Routes

LOOPBACK = "127.0.0.1"
CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
       "form-action 'none'; frame-ancestors 'none'; base-uri 'none'")  # fmt: skip


SHUTDOWN_POLL = 0.05  # seconds between looks for shutdown() while serving in a thread


class ViewerServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, routes: Routes, port: int = 0) -> None:
        self.routes = routes
        super().__init__((LOOPBACK, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/{self.routes.token}/"

    def start_in_thread(self) -> threading.Thread:
        """Serve in a daemon thread (for tests and notebooks); `shutdown()` stops it within SHUTDOWN_POLL
        seconds (serve_forever's own default, 0.5 s, made every shutdown wait about that long)."""
        thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL}, name="zarchive-view", daemon=True
        )
        thread.start()
        return thread


class _Handler(http.server.BaseHTTPRequestHandler):
    server: ViewerServer
    server_version = "zarchive-view"
    sys_version = ""

    def do_GET(self) -> None:  # (the name http.server calls)
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        status, ctype, data = self.server.routes.handle(self.path)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # (http.server's signature)
        pass  # quiet: the terminal shows the URL and nothing else


__all__ = ["LOOPBACK", "ViewerServer"]
