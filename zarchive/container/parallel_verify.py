"""Checksum a whole archive's uncompressed members on several cores before a full read.

A full read touches every byte anyway; verifying member by member on one thread would make CRC-32 the
bottleneck (about 1-3 GB/s per core). zlib releases the GIL on large buffers, so big ranges are split
into chunks, the work is spread over a thread pool in a few batches of similar size, and chunk CRCs
are recombined with crc32_combine.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from ..errors import IntegrityError
from .archive_reader import ArchiveReader
from .crc import crc32, crc32_combine, crc_hex

CHUNK = 16 << 20
SERIAL_BELOW = 8 << 20  # less data than this is checked on the calling thread


def _ranges(reader: ArchiveReader) -> list[tuple[str, str, int, int, str]]:
    """(member, label, offset, size, expected crc hex) for every uncompressed checkable range."""
    out = []
    for name, entry in reader.metadata["members"].items():
        if entry.get("codec") != "none" or name not in reader.zip.members:
            continue
        entries = reader.checked_entries(name)
        if entries:
            for label, e in entries.items():
                out.append((name, label, e["offset"], e["size"], e["crc32"]))
        else:
            out.append((name, "", 0, entry["size"], crc_hex(reader.zip.members[name].crc)))
    return out


def _crc_batch(views: list[memoryview]) -> list[int]:
    return [crc32(v) for v in views]


def verify_uncompressed(reader: ArchiveReader, workers: int | None = None) -> None:
    """Check every uncompressed member/entry; mark them checked so later reads skip the work."""
    todo = [r for r in _ranges(reader) if (r[0], r[1]) not in reader._checked]
    if not todo:
        return
    chunks: list[tuple[int, memoryview]] = []  # (index into todo, bytes)
    for i, (name, _label, offset, size, _crc) in enumerate(todo):
        base = reader.zip.members[name].data_offset + offset
        for start in range(0, size, CHUNK):
            chunks.append((i, reader.source.view(base + start, min(CHUNK, size - start))))
    total = sum(v.nbytes for _, v in chunks)
    workers = workers or min(4, os.cpu_count() or 1)
    views = [v for _, v in chunks]
    if total < SERIAL_BELOW or workers == 1:
        crcs = _crc_batch(views)
    else:
        batches: list[list[memoryview]] = []
        target, current, filled = total / (workers * 4), [], 0
        for v in views:
            current.append(v)
            filled += v.nbytes
            if filled >= target:
                batches.append(current)
                current, filled = [], 0
        if current:
            batches.append(current)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zarchive-verify") as pool:
            crcs = [c for batch in pool.map(_crc_batch, batches) for c in batch]
    combined: dict[int, int] = {}
    for (i, view), c in zip(chunks, crcs):
        combined[i] = crc32_combine(combined[i], c, view.nbytes) if i in combined else c
    for i, (name, label, _o, _s, expected) in enumerate(todo):
        if crc_hex(combined.get(i, 0)) != expected:
            what = f"entry {label!r}" if label else "member bytes"
            raise IntegrityError(f"{what} do not match the recorded checksum (damaged file)", member=name)
        reader._checked.add((name, label))
