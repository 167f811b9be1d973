"""`zarchive hash PATH [OBJPATH]`: the weights hash of an archive (or of the value at an object
path; of a model, its state dict's), computed from the stored tensors without building anything."""

from __future__ import annotations

import argparse
from typing import Any

from .common import EXIT_OK, open_archive

_EPILOG = """examples:
  zarchive hash model.zarc                  the hex SHA-256 of every tensor (a model: its state dict)
  zarchive hash run.zarc model              only the tensors under one object path
  [ "$(zarchive hash a.zarc)" = "$(zarchive hash b.zarc)" ] && echo same weights
The hash covers names, dtypes, shapes and bytes (spec/weights-hash.md): equal weights give equal
hashes whatever the file's layout or compression."""


def register(subs: argparse._SubParsersAction) -> None:
    p = subs.add_parser(
        "hash",
        help="print the weights hash (SHA-256 over tensor names, dtypes, shapes and bytes)",
        description="Print the weights hash: SHA-256 over the names, dtypes, shapes and bytes of every tensor.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", help="the archive")
    p.add_argument("objpath", nargs="?", default="", help="only the tensors below this object path (a/b/0)")
    p.set_defaults(func=cmd_hash)


def cmd_hash(args: Any) -> int:
    with open_archive(args.path) as arc:
        print(arc.weights_hash(args.objpath))
    return EXIT_OK


__all__ = ["cmd_hash", "register"]
