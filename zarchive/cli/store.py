"""`zarchive store ls|show|diff`: a model store's versions, one version's record, and what changed
between two versions (zarchive.ModelStore). Reads metadata and manifests; builds no model."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import EXIT_OK, CliError, human_size

_EPILOG = """examples:
  zarchive store ls models/                    every version, oldest first: created, size, hash, tags, metrics
  zarchive store show models/ 1.2.0            one version's record (also: latest)
  zarchive store diff models/ 1.1.0 1.2.0      config fields, tensors and metrics that changed
  zarchive store ls --json s3://bucket/models  the same as JSON (URLs need fsspec)"""


def register(subs: argparse._SubParsersAction) -> None:
    """Add `store` and its subcommands to the `zarchive` parser."""
    p = subs.add_parser(
        "store",
        help="list, show and compare the versions of a model store (zarchive.ModelStore)",
        description="List, show and compare the versions of a model store (zarchive.ModelStore).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inner = p.add_subparsers(dest="store_command", metavar="SUBCOMMAND", required=True)
    ls = inner.add_parser("ls", help="every version, oldest first")
    ls.add_argument("root", help="the store's folder or URL")
    ls.add_argument("--json", action="store_true", help="print JSON: a list of version records")
    ls.set_defaults(func=cmd_ls)
    show = inner.add_parser("show", help="one version's record: metrics, tags, hash, torch version, exports")
    show.add_argument("root", help="the store's folder or URL")
    show.add_argument("version", help="a version such as 1.2.0, or 'latest'")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=cmd_show)
    diff = inner.add_parser("diff", help="config fields, tensors and metrics that changed between two versions")
    diff.add_argument("root", help="the store's folder or URL")
    diff.add_argument("v1", help="the older version (or any)")
    diff.add_argument("v2", help="the newer version (or any)")
    diff.add_argument("--json", action="store_true", help="print JSON")
    diff.set_defaults(func=cmd_diff)


def _store(root: str) -> Any:
    import os

    from ..container.remote import is_url
    from ..store.model_store import ModelStore

    if not is_url(root) and not os.path.isdir(root):
        raise CliError(f"{root}: no such store (not a folder)")
    return ModelStore(root)


def _version_error(e: ValueError) -> Exception:
    """A version argument that is not a semantic version: a user error; other errors pass on (a
    ZArchiveError is a ValueError too, and the command line reports it itself)."""
    from ..errors import ZArchiveError

    return e if isinstance(e, ZArchiveError) else CliError(str(e))


def cmd_ls(args: Any) -> int:
    store = _store(args.root)
    rows = store.versions()
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=2, ensure_ascii=False))
        return EXIT_OK
    if not rows:
        print(f"{args.root}: no versions")
        return EXIT_OK
    table = [("VERSION", "CREATED (UTC)", "SIZE", "WEIGHTS", "TAGS", "METRICS", "DESCRIPTION")]
    for r in rows:
        metrics = ", ".join(f"{k}={_short(v)}" for k, v in r.metrics.items())
        table.append(
            (
                r.version,
                r.created[:19].replace("T", " "),
                human_size(r.size),
                r.weights_hash[:12],
                ",".join(r.tags) or "-",
                metrics or "-",
                r.description or "-",
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    return EXIT_OK


def _short(value: Any) -> str:
    text = f"{value:.4g}" if isinstance(value, float) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def cmd_show(args: Any) -> int:
    store = _store(args.root)
    try:
        info = store.info(args.version)
    except ValueError as e:
        raise _version_error(e) from None
    record = info.to_dict()
    if args.json:
        print(json.dumps(record, indent=2, ensure_ascii=False))
        return EXIT_OK
    print(f"version:       {info.version}")
    print(f"file:          {store.path(info.version)}")
    print(f"created:       {info.created}")
    print(f"size:          {human_size(info.size)} ({info.size} bytes)")
    print(f"weights hash:  {info.weights_hash}")
    print(f"torch:         {info.torch_version}")
    print(f"tags:          {', '.join(info.tags) or '-'}")
    print(f"description:   {info.description or '-'}")
    print("metrics:" + ("" if info.metrics else "       -"))
    for k, v in info.metrics.items():
        print(f"  {k}: {json.dumps(v, ensure_ascii=False)}")
    print("exports:" + ("" if info.exports else "       -"))
    for name, ex in info.exports.items():
        size = ex.get("size")
        print(f"  {name}" + (f"  {human_size(size)}" if isinstance(size, int) else ""))
    return EXIT_OK


def cmd_diff(args: Any) -> int:
    store = _store(args.root)
    try:
        d = store.diff(args.v1, args.v2)
    except ValueError as e:
        raise _version_error(e) from None
    if args.json:
        print(json.dumps(d.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(d)
    return EXIT_OK


__all__ = ["cmd_diff", "cmd_ls", "cmd_show", "register"]
