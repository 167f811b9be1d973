"""`zarchive view`: a local, read-only web viewer of one archive (or two, with what changed between
them), or with --html one self-contained page."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import ZArchiveError
from .common import EXIT_OK, CliError, check_file
from .diff import add_tolerance

_EPILOG = """examples:
  zarchive view run.zarc                    open the viewer in the browser (Ctrl-C stops it)
  zarchive view --no-browser ckpt.pt        print the URL instead
  zarchive view a.zarc b.zarc               two checkpoints, and what changed between them
  zarchive view --rtol 1e-3 a.zarc b.zarc   ... tensors within ||a-b||/||a|| <= 1e-3 count as unchanged
  zarchive view models/@1.2.0               a model store's version (models/ alone: the latest)
  zarchive view --html report.html run.zarc one self-contained page, for a report or a pull request
The viewer listens on 127.0.0.1 only; its URL carries a random token every request must present."""


def register(subs: argparse._SubParsersAction) -> None:
    p = subs.add_parser(
        "view", help="a local web viewer: tree, tensors' statistics, tables, configs, metadata (or --html)",
        description="Start a local, read-only web viewer of an archive or checkpoint (or two, compared).",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("path", help="the archive, checkpoint file or folder, or STORE_FOLDER[@VERSION]")
    p.add_argument("path2", nargs="?", default=None, help="a second one, to compare with the first")
    p.add_argument("--html", metavar="OUT", default=None, help="write one self-contained page to OUT and exit")
    p.add_argument("--no-browser", action="store_true", help="print the URL; do not open a browser")
    p.add_argument("--port", type=int, default=0, help="the port to listen on (default: any free one)")
    p.add_argument("--no-verify", action="store_true", help="--html: do not check checksums")
    add_tolerance(p, "; the diff of two files, as zarchive diff takes it")
    p.add_argument("--max-read-bytes", type=int, default=None, metavar="N",
                   help="each read's budget (default: 1 GiB + 16 x the file's size)")  # fmt: skip
    p.set_defaults(func=cmd_view)


def _check(path: str) -> None:
    from ..viewer.sources import resolve_input

    try:
        target, _ = resolve_input(path)
    except ValueError as e:  # STORE@abc: not a version (a ZArchiveError passes on, as every command's)
        if isinstance(e, ZArchiveError):
            raise
        raise CliError(f"{path}: {e}") from None
    try:
        check_file(target, remote_ok=False)
    except CliError:
        if target != path:
            raise
        raise CliError(f"{path}: no such file or folder") from None


def _diff_hooks(rtol: float, atol: float) -> tuple[Any, Any]:
    try:
        from ..viewer.diffpage import diff_body, with_tolerance
    except ImportError:  # the diff engine is not in this build
        return None, None
    return with_tolerance(rtol, atol), diff_body


def cmd_view(args: Any) -> int:
    from ..viewer import static
    from ..viewer.routes import Routes
    from ..viewer.sources import Sources

    paths = [p for p in (args.path, args.path2) if p is not None]
    for p in paths:
        _check(p)
    sources = Sources(paths, **({"max_read_bytes": args.max_read_bytes} if args.max_read_bytes else {}))
    try:
        for s in sources.items:
            s.open()  # errors now, as one line, rather than in the browser
        diff, diff_page = _diff_hooks(args.rtol, args.atol)
        if args.html:
            text = static.render(sources, verify=not args.no_verify, diff=diff, diff_page=diff_page)
            static.write(args.html, text)
            print(f"wrote {args.html}")
            return EXIT_OK
        return _serve(Routes(sources, diff=diff, diff_page=diff_page), args)
    finally:
        sources.close()


def _serve(routes: Any, args: Any) -> int:
    import webbrowser

    from ..viewer.server import ViewerServer

    try:
        server = ViewerServer(routes, args.port)
    except OSError as e:
        raise CliError(f"cannot listen on 127.0.0.1:{args.port}: {e.strerror or e}") from None
    print(f"zarchive view: serving {', '.join(routes.labels)} at {server.url}  (Ctrl-C stops it)", flush=True)
    if not args.no_browser:
        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("zarchive view: stopped", file=sys.stderr)
    finally:
        server.server_close()
    return EXIT_OK


__all__ = ["cmd_view", "register"]
