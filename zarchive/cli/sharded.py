"""`zarchive convert DIR out.zarc`: a sharded checkpoint directory (zarchive.dcp) into one archive."""

from __future__ import annotations

import os
from typing import Any

from ..formats.convert_in import ZARC_EXTS
from .common import EXIT_OK, CliError, check_file, import_modules


def cmd_convert_sharded(args: Any, compress: Any) -> int:
    check_file(args.src, remote_ok=False)  # refuses a directory that holds no checkpoint
    if os.path.splitext(args.dst)[1].lower() not in ZARC_EXTS:
        raise CliError(f"a sharded checkpoint converts to a .zarc file, not {args.dst}")
    if os.path.lexists(args.dst) and not args.force:
        raise CliError(f"{args.dst} already exists; pass --force to overwrite it")
    import_modules(args.imports)
    from ..dcp.consolidate import consolidate

    try:
        count = consolidate(args.src, args.dst, compress=compress, max_read_bytes=getattr(args, "max_bytes", None))
    except ValueError as e:
        raise CliError(str(e)) from None
    print(f"converted {args.src} -> {args.dst} (sharded checkpoint->zarc, {count} keys)")
    return EXIT_OK
