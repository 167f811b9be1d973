"""Rewrite a real archive with an edited manifest or metadata, every checksum redone: the way to make
files that a writer of another (e.g. newer) format version would make."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zarchive
from zarchive.container.archive_writer import MemberPlan, choose_codecs, write_archive


def rewrite(
    src: Path,
    dst: Path,
    manifest_edit: Callable[[dict[str, Any]], None] | None = None,
    meta_edit: Callable[[dict[str, Any]], None] | None = None,
) -> Path:
    """`src` (saved with compress=False) written again to `dst` after the edits."""
    with zarchive.open(src) as arc, zipfile.ZipFile(src) as zf:
        manifest = json.loads(json.dumps(arc.manifest))
        meta = {k: v for k, v in arc.meta.items() if k != "members"}
        plans = []
        for name in arc.members:
            if name == "manifest.json":
                continue
            data = zf.read(name)
            labels = sorted(arc.entries(name).items(), key=lambda kv: kv[1]["offset"])
            parts = (
                [(label, memoryview(data)[e["offset"] : e["offset"] + e["size"]]) for label, e in labels]
                if labels
                else [(None, memoryview(data))]
            )
            plans.append(MemberPlan(base_name=name, parts=lambda parts=parts: parts, compress="never"))
    if manifest_edit is not None:
        manifest_edit(manifest)
    if meta_edit is not None:
        meta_edit(meta)
    choose_codecs(plans, None)
    with open(dst, "wb") as f:
        write_archive(f, manifest, plans, meta, None)
    return dst
