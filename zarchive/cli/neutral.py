"""`zarchive neutral PATH`: the class-free neutral form of an archive (spec/neutral.md), as
canonical JSON, for comparing another implementation's reading with zarchive's."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import EXIT_OK

_EPILOG = """examples:
  zarchive neutral run.zarc                  the form as canonical JSON (sorted keys, ASCII, one-space indents)
  zarchive neutral run.zarc > run.generic.json
  diff <(zarchive neutral a.zarc) <(node js/bin/zarc-neutral.js a.zarc)
The form describes every value from the file alone: no class the file names is imported, resolved or
constructed. Its rules are in spec/neutral.md; equal files give byte-identical output."""


def register(subs: argparse._SubParsersAction) -> None:
    p = subs.add_parser(
        "neutral",
        help="print the class-free neutral form (spec/neutral.md) as canonical JSON",
        description="Print what the archive reads to, described from the file alone, as canonical JSON.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", help="the archive")
    p.set_defaults(func=cmd_neutral)


def cmd_neutral(args: Any) -> int:
    from ..neutral import canonical_json, neutral_form
    from .common import open_archive

    with open_archive(args.path, unresolved="generic") as arc:
        text = canonical_json(neutral_form(arc))
    sys.stdout.write(text)
    return EXIT_OK


__all__ = ["cmd_neutral", "register"]
