"""Byte-level builders for hostile zarchive files (test code only).

Everything here is written from the format's description, not with zarchive's writer, so a corpus file
stays byte-identical whatever the library does, and every field can be made to lie:

- `build_zip`: a zip from `ZEntry`s whose names, sizes, CRCs, flags and offsets can all be overridden,
  plus extra central-directory records pointing anywhere;
- `pack` / `unpack`: a whole archive from a manifest and member contents, with the metadata table
  (sizes, CRCs, per-entry checksums) computed so that damage planted in a deeper layer gets past the
  integrity checks;
- `zip_fields`: every header field of a zip, for structure-aware fuzzing;
- `many_members`: an archive of hundreds of thousands of empty members, built fast.

Member formats (zstd frames, .npy, .safetensors) are built in `formats`.
"""

from __future__ import annotations

import copy
import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hostile.formats import decode_bgzstd, zstd_frame

LOCAL_SIG, CENTRAL_SIG, EOCD_SIG = 0x04034B50, 0x02014B50, 0x06054B50
ZIP64_EOCD_SIG, ZIP64_LOCATOR_SIG = 0x06064B50, 0x07064B50
MANIFEST, METADATA = "manifest.json", "metadata.json"

BASE_META: dict[str, Any] = {
    "format": "zarchive",
    "format_version": "1.0",
    "library_version": "0.0.0+hostile-corpus",
    "created_utc": "2000-01-01T00:00:00+00:00",
    "environment": {"python": "3", "implementation": "cpython", "byteorder": "little", "packages": {}},
    "compression": {"codec": "zstd", "level": 3},
    "settings": {"external_array_threshold": 256, "external_list_threshold": 256, "custom": None},
}


def crc_hex(data: bytes) -> str:
    return f"{zlib.crc32(data) & 0xFFFFFFFF:08x}"


# --- zip at byte level -----------------------------------------------------------------------------
@dataclass
class ZEntry:
    """One zip entry; every `None` override means "the true value"."""

    name: bytes | str
    data: bytes
    crc: int | None = None  # both headers
    size: int | None = None  # both headers, compressed and uncompressed
    local_name: bytes | None = None
    local_crc: int | None = None
    local_size: int | None = None
    cd_usize: int | None = None  # central directory uncompressed size only
    flags: int | None = None  # None: the UTF-8 flag where the name needs it
    method: int = 0
    cd_extra: bytes = b""
    align: int = 64

    @property
    def raw_name(self) -> bytes:
        return self.name.encode("utf-8") if isinstance(self.name, str) else self.name

    @property
    def flag_bits(self) -> int:
        if self.flags is not None:
            return self.flags
        return 0x0800 if any(b >= 0x80 for b in self.raw_name) else 0


@dataclass
class CDRecord:
    """A central-directory record as `build_zip` wrote it (for extra records and lies)."""

    name: bytes
    offset: int
    size: int
    crc: int
    flags: int = 0
    method: int = 0
    usize: int | None = None
    extra: bytes = b""


def _local(e: ZEntry, extra: bytes) -> bytes:
    size = len(e.data) if e.size is None else e.size
    lsize = size if e.local_size is None else e.local_size
    crc = zlib.crc32(e.data) if e.crc is None else e.crc
    lcrc = crc if e.local_crc is None else e.local_crc
    name = e.raw_name if e.local_name is None else e.local_name
    return (
        struct.pack(
            "<IHHHHHIIIHH", LOCAL_SIG, 20, e.flag_bits, e.method, 0, 0x21, lcrc, lsize, lsize, len(name), len(extra)
        )
        + name
        + extra
    )


def central(r: CDRecord) -> bytes:
    usize = r.size if r.usize is None else r.usize
    return (
        struct.pack(
            "<IHHHHHHIIIHHHHHII",
            CENTRAL_SIG,
            0x314,
            20,
            r.flags,
            r.method,
            0,
            0x21,
            r.crc,
            r.size,
            usize,
            len(r.name),
            len(r.extra),
            0,
            0,
            0,
            0o100644 << 16,
            r.offset,
        )
        + r.name
        + r.extra
    )


def eocd(count: int, cd_size: int, cd_offset: int, *, disk: int = 0, comment: bytes = b"") -> bytes:
    return struct.pack("<IHHHHIIH", EOCD_SIG, disk, disk, count, count, cd_size, cd_offset, len(comment)) + comment


def build_zip(
    entries: list[ZEntry],
    *,
    cd_order: list[int] | None = None,
    extra_cd: list[CDRecord] = (),
    tamper_cd: Callable[[list[CDRecord]], list[CDRecord]] | None = None,
    prefix: bytes = b"",
    suffix: bytes = b"",
    count: int | None = None,
) -> bytes:
    """A zip of `entries` (data aligned like zarchive's); the central directory lists `cd_order`
    (default: all, in order), then `extra_cd`; `tamper_cd` may rewrite the records before writing."""
    out = bytearray(prefix)
    records: list[CDRecord] = []
    for e in entries:
        base = len(out) + 30 + len(e.raw_name if e.local_name is None else e.local_name)
        pad = (-(base + 4)) % e.align if e.align > 1 else -4
        extra = struct.pack("<HH", 0xD935, pad) + bytes(pad) if pad >= 0 else b""
        offset = len(out)
        out += _local(e, extra) + e.data
        size = len(e.data) if e.size is None else e.size
        crc = zlib.crc32(e.data) if e.crc is None else e.crc
        records.append(CDRecord(e.raw_name, offset, size, crc, e.flag_bits, e.method, e.cd_usize, e.cd_extra))
    chosen = [records[i] for i in (cd_order if cd_order is not None else range(len(records)))]
    chosen += list(extra_cd)
    if tamper_cd is not None:
        chosen = tamper_cd(chosen)
    cd = b"".join(central(r) for r in chosen)
    cd_offset = len(out)
    out += cd + eocd(len(chosen) if count is None else count, len(cd), cd_offset) + suffix
    return bytes(out)


# --- whole archives --------------------------------------------------------------------------------
@dataclass
class Parts:
    """An archive taken apart: edit any of it, then `pack` it with every checksum made true again."""

    manifest: Any
    members: dict[str, bytes]  # decoded contents; names ending in .zst are stored as zstd frames
    entries: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(BASE_META))

    def copy(self) -> Parts:
        return copy.deepcopy(self)


def dumps(value: Any) -> bytes:
    return (json.dumps(value, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def metadata_table(parts: Parts, manifest_bytes: bytes, stored: dict[str, bytes]) -> dict[str, Any]:
    table: dict[str, Any] = {
        MANIFEST: {
            "codec": "none",
            "size": len(manifest_bytes),
            "stored_size": len(manifest_bytes),
            "crc32": crc_hex(manifest_bytes),
        }
    }
    for name, content in parts.members.items():
        raw = stored[name]
        if name.endswith(".zst"):
            table[name] = {
                "codec": "zstd",
                "size": len(content),
                "stored_size": len(raw),
                "crc32": crc_hex(raw),
                "content_crc32": crc_hex(content),
            }
            continue
        info: dict[str, Any] = {"codec": "none", "size": len(content), "stored_size": len(raw), "crc32": crc_hex(raw)}
        ents = parts.entries.get(name)
        if ents:
            info["entries"] = {
                label: {"offset": o, "size": s, "crc32": crc_hex(content[o : o + s])} for label, (o, s) in ents.items()
            }
        table[name] = info
    return table


def pack(
    parts: Parts,
    *,
    manifest_bytes: bytes | None = None,
    stored: dict[str, bytes] | None = None,
    meta_edit: Callable[[dict[str, Any]], None] | None = None,
    meta_bytes: bytes | None = None,
    omit: tuple[str, ...] = (),
    names: dict[str, bytes] | None = None,
) -> bytes:
    """The archive's bytes. Checksums and sizes are computed from what is written, then `meta_edit`
    may plant lies in the metadata. `stored` gives a member's stored bytes verbatim (e.g. a bomb frame);
    `names` gives a member's raw zip name (e.g. one that is not valid UTF-8)."""
    mbytes = dumps(parts.manifest) if manifest_bytes is None else manifest_bytes
    raw: dict[str, bytes] = {}
    for name, content in parts.members.items():
        if stored and name in stored:
            raw[name] = stored[name]
        else:
            raw[name] = zstd_frame(content) if name.endswith(".zst") else content
    meta = copy.deepcopy(parts.meta)
    meta["members"] = metadata_table(parts, mbytes, raw)
    if meta_edit is not None:
        meta_edit(meta)
    meta_raw = dumps(meta) if meta_bytes is None else meta_bytes
    names = names or {}
    entries = [ZEntry(MANIFEST, mbytes, align=1)]
    entries += [ZEntry(names.get(n, n), raw[n]) for n in parts.members]
    entries.append(ZEntry(METADATA, meta_raw, align=1))
    entries = [e for e in entries if e.name not in omit]
    order = [0, len(entries) - 1, *range(1, len(entries) - 1)] if len(entries) > 1 else [0]
    return build_zip(entries, cd_order=order)


def unpack(data: bytes) -> Parts:
    """Take apart a valid archive (read with the standard library, not zarchive)."""
    import io
    import zipfile

    import zstandard

    with zipfile.ZipFile(io.BytesIO(data)) as z:
        meta = json.loads(z.read(METADATA))
        manifest = json.loads(z.read(MANIFEST))
        members: dict[str, bytes] = {}
        entries: dict[str, dict[str, tuple[int, int]]] = {}
        for name in z.namelist():
            if name in (MANIFEST, METADATA):
                continue
            raw = z.read(name)
            info = meta["members"][name]
            if info["codec"] == "zstd":
                raw = zstandard.ZstdDecompressor().stream_reader(raw).read()
            elif info["codec"] == "bgzstd":  # (repacked as a plain member under the same name)
                raw = decode_bgzstd(raw, info["chunks"])
                if name.endswith(".safetensors.bgz"):  # plain safetensors members carry entry checksums
                    n = struct.unpack("<Q", raw[:8])[0]
                    head = json.loads(raw[8 : 8 + n])
                    entries[name] = {"$header": (0, 8 + n)} | {
                        k: (8 + n + v["data_offsets"][0], v["data_offsets"][1] - v["data_offsets"][0])
                        for k, v in head.items()
                        if k != "__metadata__"
                    }
            members[name] = raw
            if info.get("entries"):
                ents = info["entries"]  # format 1.0: {label: {offset, size, crc32}}; 1.1: rows
                pairs = (
                    ents.items() if isinstance(ents, dict) else ((r[0], {"offset": r[1], "size": r[2]}) for r in ents)
                )
                entries[name] = {k: (e["offset"], e["size"]) for k, e in pairs}
    meta.pop("members")
    return Parts(manifest, members, entries, meta)


# --- zip header fields, for structure-aware fuzzing -----------------------------------------------
_LOCAL_FIELDS = [
    (4, 2, "version"),
    (6, 2, "flags"),
    (8, 2, "method"),
    (10, 2, "time"),
    (12, 2, "date"),
    (14, 4, "crc"),
    (18, 4, "csize"),
    (22, 4, "usize"),
    (26, 2, "name_len"),
    (28, 2, "extra_len"),
]
_CENTRAL_FIELDS = [
    (4, 2, "made_by"),
    (6, 2, "version"),
    (8, 2, "flags"),
    (10, 2, "method"),
    (12, 2, "time"),
    (14, 2, "date"),
    (16, 4, "crc"),
    (20, 4, "csize"),
    (24, 4, "usize"),
    (28, 2, "name_len"),
    (30, 2, "extra_len"),
    (32, 2, "comment_len"),
    (34, 2, "disk"),
    (36, 2, "internal"),
    (38, 4, "external"),
    (42, 4, "offset"),
]
_EOCD_FIELDS = [
    (4, 2, "disk"),
    (6, 2, "cd_disk"),
    (8, 2, "n_disk"),
    (10, 2, "n_total"),
    (12, 4, "cd_size"),
    (16, 4, "cd_offset"),
    (20, 2, "comment_len"),
]


def zip_fields(data: bytes) -> list[tuple[int, int, str]]:
    """(file offset, width, label) of every header field of a well-formed, non-zip64 archive."""
    eocd_at = data.rfind(struct.pack("<I", EOCD_SIG))
    _, _, _, _, n, _, cd_offset, _ = struct.unpack_from("<IHHHHIIH", data, eocd_at)
    fields = [(eocd_at + o, w, f"eocd.{lbl}") for o, w, lbl in _EOCD_FIELDS]
    p = cd_offset
    for i in range(n):
        fields += [(p + o, w, f"cd[{i}].{lbl}") for o, w, lbl in _CENTRAL_FIELDS]
        nl, ml, kl = struct.unpack_from("<HHH", data, p + 28)
        local = struct.unpack_from("<I", data, p + 42)[0]
        fields += [(local + o, w, f"local[{i}].{lbl}") for o, w, lbl in _LOCAL_FIELDS]
        p += 46 + nl + ml + kl
    return fields


def many_members(n: int, *, listed: bool) -> bytes:
    """A zarchive with `n` empty members (plus manifest and metadata); `listed`: whether the metadata
    lists them (then the archive is valid, if absurd)."""
    names = [f"m/{i:07d}.bin".encode() for i in range(n)]
    crc0 = zlib.crc32(b"")
    manifest = dumps({"format": "zarchive", "format_version": "1.0", "root": None})
    table: dict[str, Any] = {
        MANIFEST: {"codec": "none", "size": len(manifest), "stored_size": len(manifest), "crc32": crc_hex(manifest)}
    }
    if listed:
        empty = {"codec": "none", "size": 0, "stored_size": 0, "crc32": f"{crc0:08x}"}
        table.update((name.decode(), empty) for name in names)
    meta = json.dumps({**BASE_META, "members": table}).encode()
    out = bytearray()
    records = []
    for name, data in [(MANIFEST.encode(), manifest), (METADATA.encode(), meta)]:
        entry = ZEntry(name, data, align=1)
        records.append(CDRecord(name, len(out), len(data), zlib.crc32(data)))
        out += _local(entry, b"") + data
    head = struct.pack("<IHHHHHIIIHH", LOCAL_SIG, 20, 0, 0, 0, 0x21, crc0, 0, 0, len(names[0]), 0)
    cd_head = central(CDRecord(names[0], 0, 0, crc0))[:42]  # all but the offset and the name
    base, step = len(out), len(head) + len(names[0])
    out += b"".join(head + name for name in names)
    cd = b"".join(central(r) for r in records) + b"".join(
        cd_head + struct.pack("<I", base + i * step) + name for i, name in enumerate(names)
    )
    n_total = len(records) + n
    cd_offset = len(out)
    out += cd
    if n_total >= 0xFFFF:
        z64_at = len(out)
        out += struct.pack("<IQHHIIQQQQ", ZIP64_EOCD_SIG, 44, 45, 45, 0, 0, n_total, n_total, len(cd), cd_offset)
        out += struct.pack("<IIQI", ZIP64_LOCATOR_SIG, 0, z64_at, 1)
        out += struct.pack("<IHHHHIIH", EOCD_SIG, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    else:
        out += eocd(n_total, len(cd), cd_offset)
    return bytes(out)
