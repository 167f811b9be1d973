"""The `zarchive` command: look inside archives, check them, unpack them, convert to and from them.

    zarchive ls run.zarc                 members, their codecs and sizes, and what each holds
    zarchive show run.zarc model         the object tree (or the part under one object path)
    zarchive meta run.zarc               versions, compression, creation time, totals
    zarchive cat run.zarc metrics        one value: a table's head, an array's statistics, a string
    zarchive audit run.zarc              every class reading it would construct, and where
    zarchive verify run.zarc             check every checksum (exit 0 intact, 1 damaged, 2 unreadable)
    zarchive extract run.zarc out/       unpack members as plain files
    zarchive convert old.zanj new.zarc   from ZANJ / safetensors / torch.save, or to safetensors
    zarchive neutral run.zarc            what it reads to, class-free, as canonical JSON (spec/neutral.md)
    zarchive diff a.zarc b.zarc          what changed between two checkpoints (exit 0 same, 1 changed)
    zarchive view run.zarc               a read-only viewer in the browser (view a b: what changed)

ZANJ files can be browsed the same way. User errors print one line and exit non-zero; set
ZARCHIVE_DEBUG=1 to see a traceback for unexpected failures.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from ..errors import UnknownTypeError, ZArchiveError
from .common import EXIT_BAD_INPUT, EXIT_FAILED, CliError

EXIT_UNEXPECTED = 3

_EXAMPLES = {
    "ls": """examples:
  zarchive ls run.zarc            members with codec, stored/original size and the object paths they hold
  zarchive ls -l run.zarc         every object path, one per line
  zarchive ls --json run.zarc     the same as JSON, for scripts""",
    "show": """examples:
  zarchive show run.zarc                  the whole object tree
  zarchive show run.zarc model/config     only the part under one object path
  zarchive show --depth 1 run.zarc        the top level only
  zarchive show --json run.zarc           the raw manifest (or, with an object path, that node)""",
    "meta": """examples:
  zarchive meta run.zarc          versions, compression, creation time, member count and totals
  zarchive meta --json run.zarc   the raw metadata""",
    "cat": """examples:
  zarchive cat run.zarc metrics                        the head of a table
  zarchive cat run.zarc model/state_dict/fc.weight     dtype, shape, statistics and a few values
  zarchive cat run.zarc notes                          a string, as it is
  zarchive cat --import mypkg.models run.zarc model    import the module defining a class first""",
    "audit": """examples:
  zarchive audit run.zarc          each class the file names (module:QualName) and its object paths
  zarchive audit --json run.zarc   the same as JSON
Nothing is imported or constructed: pass the classes you accept to zarchive.read(..., trusted=[...]).""",
    "verify": """examples:
  zarchive verify run.zarc && echo intact
exit status: 0 intact, 1 damaged (each damaged member is printed), 2 not readable as an archive""",
    "extract": """examples:
  zarchive extract run.zarc out/            write every member under out/ (created if needed)
  zarchive extract --force run.zarc out/    overwrite files that already exist
Compressed members (NAME.zst) are written decompressed, as NAME; nothing is written outside DIR.""",
    "convert": """examples:
  zarchive convert old.zanj run.zarc                   a ZANJ file
  zarchive convert --plain old.zanj run.zarc           ... keeping classes not importable here as dicts
  zarchive convert model.safetensors model.zarc        tensors keep their names
  zarchive convert ckpt.pt ckpt.zarc --compress none   torch.save files, read without unpickling (tensors and containers only)
  zarchive convert run.zarc weights.safetensors        every tensor, named by object path
  zarchive convert run.zarc model.safetensors --select model/state_dict    exactly the state dict's keys
  zarchive convert run.zarc model.pt --select model/state_dict             a torch.save state dict
  zarchive convert run.zarc model.safetensors --max-shard-size 5GB         shards + model.safetensors.index.json
  zarchive convert ckpt_dir/ ckpt.zarc                 a sharded checkpoint (zarchive.dcp) into one archive
  zarchive convert s3://bucket/ckpt ckpt.zarc --storage-option endpoint_url=http://127.0.0.1:9000
                                                       ... one on a store (any fsspec URL; AWS_* variables work too)
The direction comes from the file extensions.""",
}


def _sub(subs: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    return subs.add_parser(
        name, help=help_text, description=help_text, epilog=_EXAMPLES[name],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    from . import browse, cat, diff, files, neutral, store, view, weights

    parser = argparse.ArgumentParser(
        prog="zarchive",
        description="Look inside, check, unpack and convert zarchive (.zarc) files; ZANJ files can be read too.",
        epilog="examples:\n"
        + "\n".join("  " + line.strip() for line in __doc__.splitlines()[2:11])
        + "\n\n'zarchive COMMAND --help' shows each command's options and examples.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = _sub(subs, "ls", "list members: codec, stored and original size, and which object paths each holds")
    p.add_argument("path", help="the archive")
    p.add_argument("-l", "--long", action="store_true", help="list every object path of a member")
    p.add_argument("-b", "--bytes", action="store_true", help="sizes in bytes rather than KiB/MiB")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=browse.cmd_ls)

    p = _sub(subs, "show", "print the object tree with types, shapes, dtypes and sizes")
    p.add_argument("path", help="the archive")
    p.add_argument("objpath", nargs="?", default="", help="only the part below this object path (a/b/0)")
    p.add_argument("--depth", type=_nonneg, default=None, help="show at most N levels")
    p.add_argument("--max-items", type=_positive, default=100, help="children shown per node (default 100)")
    p.add_argument("--json", action="store_true", help="print the raw manifest (or the node at OBJPATH)")
    p.set_defaults(func=browse.cmd_show)

    p = _sub(subs, "meta", "print the metadata: versions, compression, creation time, members, totals")
    p.add_argument("path", help="the archive")
    p.add_argument("--json", action="store_true", help="print the raw metadata")
    p.set_defaults(func=browse.cmd_meta)

    p = _sub(subs, "cat", "print one value, loading only that value")
    p.add_argument("path", help="the archive")
    p.add_argument("objpath", help="object path of the value (a/b/0)")
    p.add_argument("--rows", type=_positive, default=10, help="rows/items shown (default 10)")
    p.add_argument("--import", dest="imports", action="append", metavar="MODULE",
                   help="import MODULE first (to read classes it defines); repeatable")  # fmt: skip
    p.set_defaults(func=cat.cmd_cat)

    p = _sub(subs, "audit", "list every class that reading the archive would construct or call")
    p.add_argument("path", help="the archive")
    p.add_argument("objpath", nargs="?", default="", help="only the part below this object path")
    p.add_argument("--json", action="store_true", help="print JSON: {tag: [object paths]}")
    p.set_defaults(func=browse.cmd_audit)

    p = _sub(subs, "verify", "check every member against its checksums")
    p.add_argument("path", help="the archive")
    p.set_defaults(func=files.cmd_verify)

    p = _sub(subs, "extract", "unpack every member as a plain file")
    p.add_argument("path", help="the archive")
    p.add_argument("dir", help="destination directory (created if needed)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite existing files")
    p.add_argument("-v", "--verbose", action="store_true", help="print each file written")
    p.add_argument("--max-bytes", type=_positive, default=None, metavar="N",
                   help="refuse to write more than N bytes in all (default: 1 GiB + 16 x the archive's size)")  # fmt: skip
    p.set_defaults(func=files.cmd_extract)

    p = _sub(subs, "convert", "convert between .zarc and .zanj/.safetensors/.pt/.pth")
    p.add_argument("src", help="the file to convert (or a sharded checkpoint's directory or folder URL)")
    p.add_argument("dst", help="the file to write")
    p.add_argument("--compress", default=None, metavar="HOW",
                   help="for .zarc outputs: none, zstd (default), zstd:LEVEL or a LEVEL number")  # fmt: skip
    p.add_argument("--plain", action="store_true",
                   help="ZANJ input: read dataclasses/models whose class is not importable as plain dicts")  # fmt: skip
    p.add_argument("--import", dest="imports", action="append", metavar="MODULE",
                   help="import MODULE first (to read classes it defines); repeatable")  # fmt: skip
    p.add_argument("--select", metavar="OBJPATH",
                   help="out of a .zarc: only the value at OBJPATH, names relative to it (e.g. model/state_dict)")  # fmt: skip
    p.add_argument("--arrays", action=argparse.BooleanOptionalAction, default=None,
                   help="out of a .zarc: include numeric numpy arrays (default: only without --select)")  # fmt: skip
    p.add_argument("--max-shard-size", metavar="SIZE",
                   help="to .safetensors: shards of at most SIZE (e.g. 5GB) plus a Hugging Face index.json")  # fmt: skip
    p.add_argument("-f", "--force", action="store_true", help="overwrite DST if it exists")
    p.add_argument("--max-bytes", type=_positive, default=None, metavar="N",
                   help="refuse to write more than N bytes of tensors (default: 1 GiB + 16 x SRC's size)")  # fmt: skip
    p.add_argument("--storage-option", dest="storage_options", action="append", metavar="KEY=VALUE",
                   help="for a folder URL (s3://, gs://, memory://...): an option of its fsspec filesystem, "
                   "VALUE as JSON where it is (endpoint_url=http://..., anon=true); repeatable")  # fmt: skip
    p.set_defaults(func=files.cmd_convert)
    store.register(subs)
    weights.register(subs)
    neutral.register(subs)
    diff.register(subs)
    view.register(subs)
    return parser


def _nonneg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _positive(text: str) -> int:
    value = _nonneg(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _version() -> str:
    from ..saving.metadata import library_version

    return library_version()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    if getattr(args, "imports", None) and args.command == "cat":
        from .common import import_modules

        try:
            import_modules(args.imports)
        except CliError as e:
            return _fail(args.command, str(e), e.code)
    try:
        return args.func(args)
    except CliError as e:
        return _fail(args.command, str(e), e.code)
    except ZArchiveError as e:
        hint = ""
        if isinstance(e, UnknownTypeError) and args.command in ("cat", "convert"):
            hint = "; --import MODULE imports the module that defines it"
        path = getattr(args, "path", None) or getattr(args, "src", None)
        where = f"{path}: " if isinstance(path, str) and path not in str(e) else ""  # name the file
        return _fail(args.command, where + str(e) + hint, EXIT_BAD_INPUT)
    except BrokenPipeError:  # `zarchive show big.zarc | head`: not an error
        _silence_stdout()
        return 0
    except OSError as e:
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        target = getattr(args, "dst", None)
        name = os.path.basename(str(e.filename or ""))
        if isinstance(e, PermissionError) and target and name.startswith(".") and name.endswith("tmp"):
            # the hidden temporary file a save writes first: name what the user asked for instead
            where = f"{target}: the directory {os.path.dirname(os.path.abspath(str(e.filename)))!r} is not writable: "
        return _fail(args.command, f"{where}{e.strerror or e}", EXIT_FAILED)
    except KeyboardInterrupt:
        return 130
    except MemoryError:  # the file asks for more memory than there is: it cannot be used here
        return _fail(args.command, "not enough memory to read it", EXIT_BAD_INPUT)
    except Exception as e:  # noqa: BLE001  # a bug, not the user's fault: say so briefly
        if os.environ.get("ZARCHIVE_DEBUG"):
            traceback.print_exc()
        return _fail(args.command, f"unexpected {type(e).__name__}: {e} (set ZARCHIVE_DEBUG=1 for a traceback)",
                     EXIT_UNEXPECTED)  # fmt: skip


def _fail(command: str, message: str, code: int) -> int:
    print(f"zarchive {command}: error: {message}", file=sys.stderr)
    return code


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


__all__ = ["build_parser", "main"]
