"""The entry points of the whole-matrix test (tests/test_entry_matrix.py), run one per forked child of
tests/hostile/worker.py (op "cell"), under the address-space and time limits of the request.

An entry point is a library call (`read`, `open` and fetch every leaf, `audit`, `verify`, the weights
hash, ...) or a command line (`cli_ls` runs `zarchive ls PATH`): the command runs through
`zarchive.cli.main` in the child with its stdout and stderr sent to files, so exit status and output
are what a shell would see. Which entry points apply to which input kind is `ENTRIES`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

API = ("read", "open", "audit", "verify", "hash", "diff")
CLI = (
    "cli_ls",
    "cli_show",
    "cli_cat",
    "cli_hash",
    "cli_verify",
    "cli_audit",
    "cli_convert",
    "cli_extract",
    "cli_diff",
    "cli_view",
)
# Entry points that build no value but tensors (they describe manifest nodes): diff compares the file
# with itself, reading every tensor (no checksum shortcut); view --html writes the viewer's static
# page (every tensor's statistics), showing a value's read error in the page.
DIFF = ("diff", "cli_diff", "cli_view")
FILES = ("zarc", "pt", "safetensors", "npy", "npz", "zanj", "exports")
# extra entry points that apply only where a case names them (they need an input that exercises them)
EXTRA = ("read_dtype", "read_small_budget", "read_untrusted", "cli_convert_small")

ENTRIES: dict[str, tuple[str, ...]] = {
    kind: API + tuple(
        c for c in CLI
        if not (c == "cli_extract" and kind not in ("zarc", "zanj", "exports"))
        and not (c == "cli_convert" and kind in ("npy", "npz"))
    ) + (("onnx_session",) if kind == "exports" else ())
    for kind in (*FILES, "dcp", "hf")
}  # fmt: skip
for _kind in ("zarc", "exports", "dcp"):  # the class-free neutral form (spec/neutral.md) describes these
    ENTRIES[_kind] += ("cli_neutral",)
# `zarchive convert URL out.zarc` of a checkpoint on a store: the directory copied into fsspec's memory
# filesystem (of the child only) and converted from its memory:// URL
ENTRIES["dcp"] += ("cli_convert_remote",)
ENTRIES["store"] = ("store_versions", "store_load", "cli_store_ls", "cli_store_show")
SMALL_BUDGET = 100_000_000  # read_small_budget: max_read_bytes
SMALL_CONVERT = 100_000  # cli_convert_small: --max-bytes


def _walk(arc: Any, limit: int = 500) -> int:
    """Fetch every leaf of an opened archive (at most `limit` nodes visited); the leaves fetched."""
    todo, seen, leaves = [""], 0, 0
    while todo and seen < limit:
        path = todo.pop()
        seen += 1
        keys = arc.keys(path)
        if keys:
            todo += [f"{path}/{k}".strip("/") for k in keys]
        else:
            arc.get(path)
            leaves += 1
    return leaves


def _open(path: str) -> Any:
    import zarchive

    with zarchive.open(path) as arc:
        return _walk(arc)


def _hash(path: str) -> Any:
    import zarchive

    with zarchive.open(path) as arc:
        return arc.weights_hash()


def _diff(path: str) -> Any:
    from zarchive.inspection.diff import diff_archives

    d = diff_archives(path, path, checksums=False)
    return {"changed": d.changed(), "tensors": len(d.tensors), "values": len(d.values)}


def _audit(path: str) -> dict[str, Any]:
    """What audit() lists: the classes and callables, and the exports (its report's `.exports`)."""
    import zarchive

    report = zarchive.audit(path)
    exports = getattr(report, "exports", None)
    return {**report, **({"$exports": exports} if exports else {})}


def _verify(path: str) -> Any:
    import zarchive

    return [list(p) for p in zarchive.verify(path)]


def _onnx(path: str) -> Any:
    import numpy as np

    import zarchive

    with zarchive.open(path) as arc:
        session = arc.onnx_session()
        (out,) = session.run(None, {"input": np.zeros(4, dtype=np.float32)})
    return [float(x) for x in out]


def _store(path: str, what: str) -> Any:
    import zarchive

    store = zarchive.ModelStore(path)
    if what == "versions":
        return [v.version for v in store.versions()]
    store.load()
    return "loaded"


def _api(entry: str, path: str) -> Any:
    import torch

    import zarchive

    calls: dict[str, Callable[[], Any]] = {
        "read": lambda: type(zarchive.read(path)).__name__,
        "open": lambda: _open(path),
        "audit": lambda: _audit(path),
        "verify": lambda: _verify(path),
        "hash": lambda: _hash(path),
        "diff": lambda: _diff(path),
        "read_dtype": lambda: type(zarchive.read(path, dtype=torch.float64)).__name__,
        "read_small_budget": lambda: type(zarchive.read(path, max_read_bytes=SMALL_BUDGET)).__name__,
        "read_untrusted": lambda: type(zarchive.read(path, trusted=[])).__name__,
        "onnx_session": lambda: _onnx(path),
        "store_versions": lambda: _store(path, "versions"),
        "store_load": lambda: _store(path, "load"),
    }
    return calls[entry]()


def argv(entry: str, path: str, leaf: str, tmp: str) -> list[str]:
    """The command line of a CLI entry point (without the program name)."""
    out = os.path.join(tmp, "out")
    if entry == "cli_convert_remote":
        return ["convert", "-f", to_memory(path), out + ".zarc"]
    return {
        "cli_ls": ["ls", path],
        "cli_show": ["show", path],
        "cli_cat": ["cat", path, leaf],
        "cli_hash": ["hash", path],
        "cli_verify": ["verify", path],
        "cli_audit": ["audit", path],
        "cli_convert": ["convert", "-f", path, out + ".zarc"],
        "cli_convert_small": ["convert", "-f", "--max-bytes", str(SMALL_CONVERT), path, out + ".zarc"],
        "cli_extract": ["extract", "-f", path, out],
        "cli_diff": ["diff", "--no-checksums", path, path],
        "cli_view": ["view", "--html", out + ".html", path],
        "cli_store_ls": ["store", "ls", path],
        "cli_store_show": ["store", "show", path, "latest"],
        "cli_neutral": ["neutral", path],
    }[entry]


def to_memory(path: str) -> str:
    """A local checkpoint directory's regular files copied into fsspec's memory filesystem (of this
    process): the folder's memory:// URL, ending in the directory's own name."""
    import stat
    import uuid

    import fsspec

    mem = fsspec.filesystem("memory")
    root = f"/matrix-{uuid.uuid4().hex}/{os.path.basename(path.rstrip('/'))}"
    mem.mkdir(root)
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if stat.S_ISREG(os.lstat(full).st_mode):
            with open(full, "rb") as f:
                mem.pipe_file(f"{root}/{name}", f.read())
    return f"memory://{root}"


def _cli(args: list[str], tmp: str) -> dict[str, Any]:
    from zarchive.cli import main

    files = {k: os.path.join(tmp, k) for k in ("stdout", "stderr")}
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, name in ((1, "stdout"), (2, "stderr")):
        f = os.open(files[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    try:
        rc = main(args)
    except SystemExit as e:  # argparse
        rc = e.code if isinstance(e.code, int) else 2
    sys.stdout.flush()
    sys.stderr.flush()
    text = {k: Path(v).read_text(errors="replace")[-4000:] for k, v in files.items()}
    written = sum(p.stat().st_size for p in Path(tmp).rglob("*") if p.is_file() and p.name.startswith("out"))
    return {"ok": True, "rc": rc, "stdout": text["stdout"], "stderr": text["stderr"], "written": written}


# --- setups a case asks for (run in the child before the entry point) -----------------------------------
LOADER_CALLS = "ZARCHIVE_MATRIX_LOADER_CALLED"


def register_zanj_loader() -> None:
    """A ZANJ loader registered as training code would: it records that it ran (in the environment)."""
    from zarchive.compat.zanj.loading import LoaderHandler, register_loader_handler

    def load(value: Any, path: Any, zanj: Any) -> Any:
        os.environ[LOADER_CALLS] = "1"
        return dict(value)

    register_loader_handler(
        LoaderHandler(check=lambda v, p, z: False, load=load, uid="hostile.loader", source_pckg="hostile")
    )


SETUPS: dict[str, Callable[[], None]] = {"register_zanj_loader": register_zanj_loader}


def run_cell(req: dict[str, Any]) -> dict[str, Any]:
    """One cell: req has entry, path, leaf (for cat), tmp (a scratch directory), cwd and setup (optional)."""
    if req.get("setup"):
        SETUPS[req["setup"]]()
    os.makedirs(req["tmp"], exist_ok=True)
    os.chdir(req.get("cwd") or req["tmp"])
    entry, path = req["entry"], req["path"]
    if entry.startswith("cli_"):
        return _cli(argv(entry, path, req.get("leaf", ""), req["tmp"]), req["tmp"])
    value = _api(entry, path)
    return {"ok": True, "value": json.loads(json.dumps(value, default=str))[:50] if isinstance(value, list) else
            json.loads(json.dumps(value, default=str)), "loader_called": os.environ.get(LOADER_CALLS)}  # fmt: skip
