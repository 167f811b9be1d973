"""`zarchive diff A B`: what changed between two archives or checkpoints (zarchive.inspection.diff),
as a table or as JSON, with an exit status for scripts and CI: 0 nothing changed beyond the
tolerance, 1 something did, 2 an input could not be read (as `zarchive verify`)."""

from __future__ import annotations

import argparse
import json
import math
from contextlib import ExitStack
from typing import Any

from .common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, CliError, check_file

_EPILOG = """examples:
  zarchive diff step1000.zarc step2000.zarc          tensors, config values and metadata that changed
  zarchive diff --only-changed a.zarc b.zarc         leave out what is the same
  zarchive diff --rtol 1e-3 model.pt model.zarc      tensors count as changed only beyond ||a-b||/||a|| > 1e-3
  zarchive diff --json a.safetensors hf_folder/      the same as JSON (keys: zarchive.inspection.diff)
A and B are anything zarchive opens: .zarc, .pt/.pth, .safetensors, .npz, .zanj, Hugging Face
folders, DCP directories, a model store's version files. Tensors count as changed when
max |a-b| > ATOL and ||a-b||/||a|| > RTOL (both 0 by default: any difference); added, removed,
reshaped and retyped tensors, NaNs that differ, changed non-tensor values and a table's changed
row index, column labels (or their order) or dtypes always count; metadata (creation time,
versions) never does.
exit status: 0 nothing changed beyond the tolerance, 1 something changed, 2 an input is unreadable"""


def register(subs: argparse._SubParsersAction) -> None:
    """Add `diff` to the `zarchive` parser."""
    p = subs.add_parser(
        "diff",
        help="what changed between two archives or checkpoints: tensors, config values, metadata",
        description="Compare two archives or checkpoints: tensors added, removed, reshaped or changed "
        "(relative change, max abs difference), other values, tables' row indexes and column labels, "
        "and metadata side by side.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("a", help="the first archive (the reference: relative change is ||a-b||/||a||)")
    p.add_argument("b", help="the second archive")
    add_tolerance(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--only-changed", action="store_true", help="list only what changed (beyond the tolerance)")
    p.add_argument("--no-checksums", dest="checksums", action="store_false",
                   help="read and compare every tensor, also those whose stored bytes have equal CRC-32s")  # fmt: skip
    p.set_defaults(func=cmd_diff)


def add_tolerance(p: argparse.ArgumentParser, what: str = "") -> None:
    """--rtol and --atol, as `zarchive diff` takes them (`zarchive view` takes the same)."""
    p.add_argument("--rtol", type=_tolerance, default=0.0, metavar="R",
                   help=f"relative tolerance: ||a-b||/||a|| up to R is unchanged (default 0){what}")  # fmt: skip
    p.add_argument("--atol", type=_tolerance, default=0.0, metavar="A",
                   help=f"absolute tolerance: max |a-b| up to A is unchanged (default 0){what}")  # fmt: skip


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError("must be a finite number >= 0")
    return value


def _open(path: str) -> Any:
    """One input, opened lazily with its tensors mapped; an error names the file and exits 2."""
    from ..errors import ZArchiveError
    from ..shortcuts import open as open_any

    check_file(path)
    try:
        return open_any(path, mmap=True)
    except ZArchiveError as e:
        raise CliError(str(e) if path in str(e) else f"{path}: {e}", EXIT_BAD_INPUT) from None
    except OSError as e:
        raise CliError(f"{path}: {e.strerror or e}", EXIT_BAD_INPUT) from None


def cmd_diff(args: Any) -> int:
    from ..errors import ZArchiveError
    from ..inspection.diff import diff_archives

    with ExitStack() as stack:
        arcs = [stack.enter_context(_open(path)) for path in (args.a, args.b)]
        try:
            d = diff_archives(
                arcs[0], arcs[1], rtol=args.rtol, atol=args.atol, checksums=args.checksums, labels=(args.a, args.b)
            )
        except ZArchiveError as e:
            raise CliError(f"{args.a} vs {args.b}: {e}", EXIT_BAD_INPUT) from None
        except OSError as e:  # an unreadable input is exit 2 here, never 1 ("changed")
            raise CliError(f"{args.a} vs {args.b}: {e.strerror or e}", EXIT_BAD_INPUT) from None
    if args.json:
        out = d.to_json()
        if args.only_changed:
            out["tensors"] = [t for t in out["tensors"] if t["changed"]]
            out["values"] = [v.to_json() for v in d.values if v.changed()]
            out["metadata"] = [m.to_json() for m in d.metadata if not m.same]
            out["tables"] = [t.to_json() for t in d.tables if t.changed()]
        print(json.dumps(out, indent=2, ensure_ascii=False, allow_nan=False))
    else:
        print(d.render(only_changed=args.only_changed))
    return EXIT_FAILED if d.changed() else EXIT_OK


__all__ = ["add_tolerance", "cmd_diff", "register"]
