"""Run by tests/test_viewer_hostile.py in a child process: serve hostile inputs through the viewer
and fetch every page of each, under an address-space limit. Prints one JSON line per input:
{"input", "statuses": {url: status}, "errors": [messages of 500s]}, then {"peak_mb": ...}.

    python viewer_hostile_child.py MEM_MB PATH...
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile.models  # noqa: F401 - classes some corpus files name (imported, as training code would be)

from zarchive.viewer.diffpage import diff_body, diff_data
from zarchive.viewer.routes import Routes
from zarchive.viewer.server import ViewerServer
from zarchive.viewer.sources import Sources

PAGES = ("", "verify", "api/a/0/tree", "api/a/0/meta", "api/a/0/audit", "api/a/0/exports", "api/a/0/configs")
MAX_VALUES = 12  # value pages fetched per input


def _vm_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def main() -> None:
    mem_mb, paths = int(sys.argv[1]), sys.argv[2:]
    limit = _vm_kb("VmSize") * 1024 + (mem_mb << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    for path in paths:
        sources = Sources([path])
        server = ViewerServer(Routes(sources, diff=diff_data, diff_page=diff_body))
        # as server.start_in_thread(), but shutdown() returns at once instead of after up to 0.5 s
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        statuses: dict[str, int] = {}
        errors: list[str] = []
        try:
            urls = [f"a/0/{p}" if p == "verify" else p for p in PAGES]
            status, body = fetch(server.url + "api/a/0/tree")
            if status == 200:
                nodes = json.loads(body)["nodes"]
                leaves = [n["path"] for n in nodes if n["kind"] != "container"][:MAX_VALUES]
                urls += ["a/0/node?" + urllib.parse.urlencode({"path": p}) for p in leaves]
            for u in urls:
                status, body = fetch(server.url + u)
                statuses[u] = status
                if status >= 500:
                    errors.append(f"{u}: {status}: {body[-400:]}")
        finally:
            server.shutdown()
            server.server_close()
            sources.close()
        print(json.dumps({"input": path, "statuses": statuses, "errors": errors}), flush=True)
    print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)


if __name__ == "__main__":
    main()
