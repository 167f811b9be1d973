"""`zarchive verify`, `extract` and `convert`: commands that check or produce files."""

from __future__ import annotations

import os
from typing import Any

from ..container import byte_groups, codecs
from ..container.budget import default_read_budget
from ..container.names import collision_key, name_problem
from ..errors import IntegrityError, ZArchiveError
from ..options import parse_compress
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    CliError,
    check_file,
    import_modules,
    open_archive,
    show_path,
    walk_refs,
)


# --- verify ---
def cmd_verify(args: Any) -> int:
    """0: intact; 1: damaged; 2: not readable as an archive at all."""
    from ..api import ZArchive

    check_file(args.path)
    try:
        arc = ZArchive(verify=False).open(args.path)
    except IntegrityError as e:  # the manifest or metadata itself is damaged
        print(f"DAMAGED {args.path}: {e}")
        return EXIT_FAILED
    except ZArchiveError as e:
        said = str(e).replace(f"{str(args.path)!r}: ", "", 1)  # the file is named once, first
        raise CliError(f"{args.path}: cannot read it as an archive: {said}") from None
    with arc:
        result = arc.verify()
        problems = list(result)
        root = arc.node("")
        members = arc.members
        for ref, path, _ in walk_refs(arc, root):
            if ref not in members:
                problems.append((ref, f"the object tree refers to it at {show_path(path)}, the archive lacks it"))
    if not problems:
        print(f"OK {args.path}: {result.members} members intact")  # zip members, as `ls` and `unzip -l` count
        return EXIT_OK
    for member, problem in problems:
        print(f"DAMAGED {member}: {problem}")
    print(f"{args.path}: {len(problems)} problem(s) in {len({m for m, _ in problems})} member(s)")
    return EXIT_FAILED


# --- extract ---
def _refuse_foreign(path: str) -> None:
    """A CliError saying what to do when `path`, which is not a zarchive, is a file zarchive reads
    (torch.save, safetensors, numpy): extract unpacks archives' members, such files have none."""
    from ..formats.foreign import ForeignArchive

    try:
        arc = open_archive(path)
    except ZArchiveError:
        return  # (the archive reader's error, raised by the caller, says what is wrong)
    with arc:
        if not isinstance(arc, ForeignArchive):
            return
        kind = arc.manifest.get("format", arc.format)
    raise CliError(
        f"{path} is a {kind} file, not a zarchive: extract unpacks an archive's members. "
        f"`zarchive show {path}` lists what it holds; `zarchive convert {path} out.zarc` makes an archive of it "
        "(its tensors in .safetensors members), which extract then unpacks"
    )


def _member_source(path: str) -> tuple[list[tuple[str, str, int]], Any, Any]:
    """[(member, file name to write, bytes it holds)], a function giving a member's plain bytes (not
    kept after it is returned), and a closer."""
    from ..container.archive_reader import ArchiveReader
    from ..container.archive_writer import MANIFEST_NAME
    from ..container.source import open_local
    from ..formats.zanj.container import ZanjZip, looks_like_zanj

    check_file(path, remote_ok=False)
    source = open_local(path)  # read, not mapped: a file truncated meanwhile cannot crash the command
    try:
        if looks_like_zanj(source):
            zz = ZanjZip(source, max_member_bytes=4 << 30)
            return [(n, n, info.file_size) for n, info in zz.members.items()], lambda n: zz.read(n), zz.close
        reader = ArchiveReader(source)
    except ZArchiveError:
        source.close()
        _refuse_foreign(path)
        raise
    except BaseException:
        source.close()
        raise
    plan = []
    for name, info in reader.zip.members.items():
        entry = reader.metadata["members"].get(name)
        codec = entry.get("codec") if entry is not None else None
        size = entry["size"] if entry is not None else info.size
        suffix = {"zstd": codecs.ZSTD_SUFFIX, byte_groups.CODEC: byte_groups.SUFFIX}.get(str(codec), "")
        plan.append((name, name[: -len(suffix)] if suffix and name.endswith(suffix) else name, size))

    listed = {n for n in reader.metadata["members"] if n != MANIFEST_NAME}

    def data(name: str) -> Any:  # listed members decompressed and checked; the two JSON members checked
        if name not in listed:
            return reader.zip.read_checked(name)
        out = reader.member_bytes(name)
        reader.forget(name)  # written next, then dropped: extracting holds one member at a time
        return out

    return plan, data, reader.close


def _target(root: str, name: str) -> str:
    """Where a member goes: inside `root`, or a refusal (names were checked when the zip was read;
    this checks again against the real, symlink-resolved destination)."""
    problem = name_problem(name)
    if problem:
        raise CliError(f"refusing member {name!r}: {problem}")
    dest = os.path.join(root, *name.split("/"))
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(dest)]) != real_root:
        raise CliError(f"refusing member {name!r}: it would be written outside {root}")
    return dest


def cmd_extract(args: Any) -> int:
    plan, data, close = _member_source(args.path)
    try:
        os.makedirs(args.dir, exist_ok=True)
    except OSError as e:
        close()
        raise CliError(f"cannot create {args.dir}: {e.strerror}") from None
    try:
        total = sum(size for _, _, size in plan)
        limit = args.max_bytes if args.max_bytes is not None else default_read_budget(os.path.getsize(args.path))
        if total > limit:
            default = "" if args.max_bytes is not None else " (the default: 1 GiB + 16 x the archive's size)"
            raise CliError(
                f"extracting {args.path} writes {total:,} bytes, over --max-bytes={limit:,}{default}: "
                "pass a bigger --max-bytes if you trust the file"
            )
        seen: dict[str, str] = {}
        targets = []
        for member, out_name, _ in plan:
            key = collision_key(out_name)
            if key in seen:
                raise CliError(f"members {seen[key]!r} and {member!r} would both be written to {out_name!r}")
            seen[key] = member
            targets.append((member, out_name, _target(args.dir, out_name)))
        existing = [t for _, _, t in targets if os.path.lexists(t)]
        if existing and not args.force:
            more = f" (and {len(existing) - 3} more)" if len(existing) > 3 else ""
            raise CliError(f"{', '.join(existing[:3])}{more} already exist(s); pass --force to overwrite")
        for member, out_name, dest in targets:
            _write(dest, data(member), force=args.force)
            if args.verbose:
                print(f"{member} -> {dest}" if member != out_name else dest)
    finally:
        close()
    print(f"extracted {len(targets)} files to {args.dir}")
    return EXIT_OK


def _write(dest: str, data: Any, *, force: bool) -> None:
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if os.path.lexists(dest):
        if os.path.isdir(dest) and not os.path.islink(dest):
            raise CliError(f"{dest} is a directory; cannot write a member there")
        if force:
            os.unlink(dest)  # also drops a symlink rather than writing through it
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(dest, flags, 0o666)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


# --- convert ---
def parse_compress_option(text: str | None) -> Any:
    """--compress values: none, zstd, zstd:LEVEL or a LEVEL number."""
    if text is None:
        return True
    value: Any = text
    if text.lstrip("-").isdigit():
        value = int(text)
    elif text.lower() in ("true", "yes", "on"):
        value = True
    elif text.lower() in ("false", "no", "off"):
        value = False
    try:
        parse_compress(value)
    except (ValueError, TypeError) as e:
        raise CliError(f"--compress: {e}") from None
    return value


def cmd_convert(args: Any) -> int:
    from ..container.remote import is_url
    from ..formats.convert_in import conversion_kind, convert, is_hf_folder

    # a sharded checkpoint (zarchive.dcp): a local directory, or a folder URL (the only remote source)
    if is_url(args.src) or (os.path.isdir(args.src) and not is_hf_folder(args.src)):
        from .sharded import cmd_convert_sharded

        return cmd_convert_sharded(args, parse_compress_option(args.compress))
    if getattr(args, "storage_options", None):
        raise CliError("--storage-option applies to a URL source (a sharded checkpoint on a store) only")
    try:
        kind = conversion_kind(args.src, args.dst)
    except ValueError as e:
        raise CliError(str(e)) from None
    check_file(args.src, remote_ok=False)
    if args.compress is not None and not kind.endswith("->zarc"):
        raise CliError("--compress applies to .zarc outputs only")
    compress = parse_compress_option(args.compress)
    if os.path.lexists(args.dst) and not args.force:
        raise CliError(f"{args.dst} already exists; pass --force to overwrite it")
    if os.path.isdir(args.dst):
        raise CliError(f"{args.dst} is a directory")
    import_modules(args.imports)
    try:
        report = convert(
            args.src,
            args.dst,
            compress=compress,
            unknown="dict" if args.plain else "error",
            max_bytes=args.max_bytes,
            **{k: v for k in ("select", "arrays", "max_shard_size") if (v := getattr(args, k, None)) is not None},
        )
    except ValueError as e:
        if isinstance(e, ZArchiveError):
            raise
        raise CliError(str(e)) from None
    what = {"zarc->safetensors": "tensors", "safetensors->zarc": "tensors", "torch->zarc": "tensors",
            "zarc->torch": "tensors", "hf-sharded->zarc": "tensors"}.get(kind)  # fmt: skip
    count = f", {report.count} {what}" if what else ""
    print(f"converted {args.src} -> {args.dst} ({kind}{count})")
    for note in report.notes:
        print(f"note: {note}")
    return EXIT_OK
