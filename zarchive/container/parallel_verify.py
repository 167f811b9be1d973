"""Checksum a whole archive's uncompressed members on several cores before a full read.

A full read touches every byte anyway; verifying member by member on one thread would make CRC-32 the
bottleneck (about 1.5-3 GB/s per core). zlib releases the GIL on large buffers, so the ranges are split
into chunks, checksummed on a thread pool, and recombined with crc32_combine.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from ..errors import IntegrityError
from .archive_reader import ArchiveReader
from .crc import crc32, crc32_combine, crc_hex

CHUNK = 16 << 20


def _ranges(reader: ArchiveReader) -> list[tuple[str, str, int, int, str]]:
    """(member, label, offset, size, expected crc hex) for every uncompressed checkable range."""
    out = []
    for name, entry in reader.metadata["members"].items():
        if entry.get("codec") != "none" or name not in reader.zip.members:
            continue
        entries = entry.get("entries")
        if entries:
            for label, e in entries.items():
                out.append((name, label, e["offset"], e["size"], e["crc32"]))
        else:
            out.append((name, "", 0, entry["size"], crc_hex(reader.zip.members[name].crc)))
    return out


def verify_uncompressed(reader: ArchiveReader, workers: int | None = None) -> None:
    """Check every uncompressed member/entry; mark them checked so later reads skip the work."""
    todo = [r for r in _ranges(reader) if (r[0], r[1]) not in reader._checked]
    if not todo:
        return
    workers = workers or min(4, os.cpu_count() or 1)
    jobs: list[tuple[int, int]] = []  # (index into todo, chunk length)
    views = []
    for i, (name, _label, offset, size, _crc) in enumerate(todo):
        info = reader.zip.members[name]
        base = info.data_offset + offset
        for start in range(0, max(size, 1), CHUNK):
            n = min(CHUNK, size - start)
            views.append(reader.source.view(base + start, n))
            jobs.append((i, n))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zarchive-verify") as pool:
        crcs = list(pool.map(crc32, views))
    combined = [0] * len(todo)
    for (i, n), c in zip(jobs, crcs):
        combined[i] = crc32_combine(combined[i], c, n) if n else combined[i]
    for (name, label, _o, _s, expected), got in zip(todo, combined):
        if crc_hex(got) != expected:
            what = f"entry {label!r}" if label else "member bytes"
            raise IntegrityError(f"{what} do not match the recorded checksum (damaged file)", member=name)
        reader._checked.add((name, label))
