"""Phase two of a save: write a planned save (ZArchive.plan_save) to a local path atomically, to an
fsspec URL, or into a binary file object. Shared by ZArchive.save and the background writer of
ZArchive.save_async, so both write through exactly the same code."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..container.archive_writer import MemberPlan, atomic_write, write_archive
from ..container.remote import is_file_object, is_url, save_to
from ..errors import SaveError
from .check import CheckedManifest, check_read_budget
from .progress import for_save as progress_for_save

__all__ = ["PlannedSave", "check_target", "write_planned"]


@dataclass
class PlannedSave:
    """A save after its first phase: the manifest (encoded and checked), members and metadata."""

    manifest: CheckedManifest
    members: list[MemberPlan]
    metadata: dict[str, Any]


def check_target(file_path: Any, storage_options: Mapping[str, Any] | None, obj: Any = None) -> None:
    """Refuse, before any work, a target that no save could write to (`obj`: what is being saved, to
    recognise the two arguments given the other way round)."""
    if is_url(file_path) or is_file_object(file_path):
        return
    if not isinstance(file_path, (str, os.PathLike)):
        if isinstance(obj, (str, os.PathLike)):
            raise SaveError(
                f"the arguments look swapped: got {os.fspath(obj)!r} as the object and a {type(file_path).__name__} "
                "as the path; save(obj, file_path) takes the object first (save_checkpoint(path, model, ...) is "
                "the one that takes the path first)"
            )
        raise SaveError(
            f"file_path must be a path, an fsspec URL or a writable binary file object, not a {type(file_path).__name__}"
        )
    if not os.fspath(file_path):
        raise ValueError("file_path is empty")
    if storage_options:
        raise TypeError("storage_options apply to URLs only")


def write_planned(
    planned: PlannedSave,
    file_path: Any,
    *,
    level: int | None,
    durable: bool,
    progress: bool | None,
    storage_options: Mapping[str, Any] | None = None,
) -> str:
    """Write `planned` to `file_path` (a local path atomically: see atomic_write); return the path."""
    manifest, members = planned.manifest, planned.members
    bar = progress_for_save(progress, members, file_path)
    on_member = bar.advance if bar is not None else None

    def check_size(read_cost: int, file_size: int) -> None:
        check_read_budget(read_cost + manifest.inline_bytes, file_size)

    def write(f: Any) -> None:
        write_archive(f, manifest.data, members, planned.metadata, level, on_member=on_member, check_size=check_size)

    try:
        if is_url(file_path) or is_file_object(file_path):
            return save_to(file_path, write, storage_options=storage_options, durable=durable)
        path = os.fspath(file_path)
        try:
            atomic_write(path, write, durable=durable)
        except PermissionError as e:
            raise _not_writable(path, e) from None
    finally:
        if bar is not None:
            bar.close()
    return path


def _not_writable(path: str, e: PermissionError) -> PermissionError:
    """A save refused by the file system is reported for the target, not for the hidden temporary
    file beside it that the save was creating."""
    directory = os.path.dirname(os.path.abspath(path))
    existing = directory
    while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)  # the folders to create start below this one
    reason = e.strerror or str(e)
    if existing != directory:
        why = f"cannot save {path!r}: cannot create its directory in {existing!r}, which is not writable ({reason})"
    elif not os.access(directory, os.W_OK) or os.path.basename(str(e.filename or "")).startswith("."):
        why = f"cannot save {path!r}: the directory {directory!r} is not writable ({reason})"
    else:
        why = f"cannot save {path!r}: {reason}"
    return PermissionError(e.errno, why)  # the message names the path: no `filename` to repeat it
