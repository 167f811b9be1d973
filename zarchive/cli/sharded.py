"""`zarchive convert DIR out.zarc`: a sharded checkpoint (zarchive.dcp) into one archive; DIR a local
directory or a folder URL of an fsspec filesystem (`s3://bucket/ckpt`, `memory://ckpt`, with
--storage-option KEY=VALUE for its filesystem), read through the same gate and budget either way."""

from __future__ import annotations

import os
from typing import Any

from ..errors import ZArchiveError
from ..formats.convert_in import ZARC_EXTS
from .common import EXIT_OK, CliError, check_file, import_modules, parse_storage_options


def cmd_convert_sharded(args: Any, compress: Any) -> int:
    """DIR (args.src) a local directory or a URL (is_url), into the local .zarc file args.dst."""
    from ..container.remote import is_url

    remote = is_url(args.src)
    options = parse_storage_options(getattr(args, "storage_options", None))
    if not remote:
        check_file(args.src, remote_ok=False)  # refuses a directory that holds no checkpoint
    if is_url(args.dst):
        raise CliError(f"{args.dst}: convert writes a local file; copy it to the store afterwards")
    if os.path.splitext(args.dst)[1].lower() not in ZARC_EXTS:
        raise CliError(f"a sharded checkpoint converts to a .zarc file, not {args.dst}")
    if os.path.lexists(args.dst) and not args.force:
        raise CliError(f"{args.dst} already exists; pass --force to overwrite it")
    if os.path.isdir(args.dst):
        raise CliError(f"{args.dst} is a directory")
    import_modules(args.imports)
    from ..dcp.consolidate import consolidate

    try:
        count = consolidate(
            args.src,
            args.dst,
            compress=compress,
            max_read_bytes=getattr(args, "max_bytes", None),
            **({"storage_options": options} if remote else {}),
        )
    except ValueError as e:
        if isinstance(e, ZArchiveError):  # named and reported as every command's (exit 2)
            raise
        raise CliError(str(e)) from None
    print(f"converted {args.src} -> {args.dst} (sharded checkpoint->zarc, {count} keys)")
    return EXIT_OK


__all__ = ["cmd_convert_sharded"]
