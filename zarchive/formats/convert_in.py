"""Conversions between zarchive and its neighbours: ZANJ, safetensors and torch.save checkpoints.

Into a `.zarc`: a ZANJ file (read with zarchive's own ZANJ reader), a `.safetensors` file (the root is
a dict of tensor name -> tensor, names kept), or a `torch.save` file (`.pt`/`.pth`), read by
zarchive's restricted reader (tensors, parameters and plain containers; its pickle is parsed, never
unpickled), so a checkpoint that holds anything else is refused rather than executed.
Out of a `.zarc`: a plain `.safetensors` of every tensor and numeric array, named by object path
(formats.archive_to_safetensors), and subtrees, `.pt` files and shards (formats.convert_out).

Every function returns a ConvertReport whose notes say what was changed on the way (renamed, dropped
or copied tensors), so the command line can tell the user.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import ArchiveNotFoundError, FormatError, ZArchiveError
from .archive_to_safetensors import archive_to_safetensors
from .convert_out import check_output_size

ZARC_EXTS = (".zarc",)
TORCH_EXTS = (".pt", ".pth")
PathLike = str | os.PathLike[str]


@dataclass
class ConvertReport:
    """What a conversion did: source and target, how many values moved, and anything worth saying."""

    src: str
    dst: str
    kind: str
    count: int = 0
    notes: list[str] = field(default_factory=list)


def _ext(path: PathLike) -> str:
    return os.path.splitext(os.fspath(path))[1].lower()


def conversion_kind(src: PathLike, dst: PathLike) -> str:
    """Which conversion the two file names ask for ('zanj->zarc', ...); a ValueError if none fits."""
    s, d = _ext(src), _ext(dst)
    if d in ZARC_EXTS and is_hf_folder(src):
        return "hf-sharded->zarc"
    if d in ZARC_EXTS:
        if s == ".zanj":
            return "zanj->zarc"
        if s == ".safetensors":
            return "safetensors->zarc"
        if s in TORCH_EXTS:
            return "torch->zarc"
        if s in ZARC_EXTS:
            return "zarc->zarc"
    if d == ".safetensors" and s in ZARC_EXTS:
        return "zarc->safetensors"
    if d in TORCH_EXTS and s in ZARC_EXTS:
        return "zarc->torch"
    raise ValueError(
        f"cannot convert {s or 'a file without extension'} to {d or 'a file without extension'}: supported are "
        ".zanj/.safetensors/.pt/.pth/.zarc and Hugging Face sharded folders -> .zarc, and .zarc -> .safetensors/.pt/.pth"
    )


def convert(
    src: PathLike,
    dst: PathLike,
    *,
    compress: Any = True,
    unknown: str = "error",
    max_bytes: int | None = None,
    select: str | None = None,
    arrays: bool | None = None,
    max_shard_size: int | str | None = None,
) -> ConvertReport:
    """Convert `src` to `dst`, the direction given by their extensions (see conversion_kind).

    max_bytes: the most bytes of tensors and arrays a conversion may write, checked before anything is
    copied or written (a view of one small storage, even with zero strides, counts as a .safetensors
    output writes it: whole; a .zarc or .pt stores the storage); None: 1 GiB + 16 x the source file's
    size, the default read budget.
    Out of a .zarc (to .safetensors or .pt/.pth), see zarchive.formats.convert_out: `select` takes the value
    at one object path with names relative to it (e.g. "model/state_dict": exactly its keys),
    `arrays` adds numeric numpy arrays (default: only without `select`), `max_shard_size` ("5GB")
    shards a .safetensors output with a Hugging Face index."""
    kind = conversion_kind(src, dst)
    if kind == "hf-sharded->zarc":
        return hf_sharded_to_zarc(src, dst, compress=compress, max_bytes=max_bytes)
    if not os.path.isfile(src):
        raise ArchiveNotFoundError(f"no file at {os.fspath(src)!r}")
    if os.path.abspath(src) == os.path.abspath(dst):
        raise ValueError("source and destination are the same file")
    exporting = select is not None or arrays is not None or max_shard_size is not None
    if kind == "zarc->torch" or (kind == "zarc->safetensors" and exporting):
        from .convert_out import export_tensors

        fmt = "torch" if kind == "zarc->torch" else "safetensors"
        count, notes = export_tensors(
            os.fspath(src),
            os.fspath(dst),
            fmt=fmt,
            select=select,
            arrays=arrays,
            max_shard_size=max_shard_size,
            max_bytes=max_bytes,
        )
        return ConvertReport(os.fspath(src), os.fspath(dst), kind, count=count, notes=notes)
    if exporting:
        raise ValueError("select, arrays and max_shard_size apply to conversions out of a .zarc")
    if kind == "zanj->zarc":
        if not _written_by_zanj(src):  # a .zanj that zarchive.compat.zanj wrote is a zarchive inside
            report = zarc_to_zarc(src, dst, compress=compress, max_bytes=max_bytes)
            report.notes.append(f"{os.fspath(src)} is a zarchive (written by zarchive.compat.zanj), not a ZANJ file")
            return report
        return zanj_to_zarc(src, dst, compress=compress, unknown=unknown, max_bytes=max_bytes)
    if kind == "safetensors->zarc":
        return safetensors_to_zarc(src, dst, compress=compress, max_bytes=max_bytes)
    if kind == "torch->zarc":
        return torch_to_zarc(src, dst, compress=compress, max_bytes=max_bytes)
    if kind == "zarc->zarc":
        return zarc_to_zarc(src, dst, compress=compress, max_bytes=max_bytes)
    return zarc_to_safetensors(src, dst, max_bytes=max_bytes)


def _source_record(fmt: str, src: PathLike, **extra: Any) -> dict[str, Any]:
    return {"converted_from": {"format": fmt, "file": os.path.basename(os.fspath(src)), **extra}}


# --- into .zarc ---
def _written_by_zanj(src: PathLike) -> bool:
    """Whether a file holds ZANJ's own layout (its main JSON member), by its content."""
    from ..container.source import open_local
    from .zanj.container import looks_like_zanj

    source = open_local(src)
    try:
        return looks_like_zanj(source)
    finally:
        source.close()


def _check_zarc_output(obj: Any, src: PathLike, max_bytes: int | None) -> None:
    """Refuse, before saving, a .zarc output holding more than `max_bytes` of tensors and arrays."""
    from .convert_out import collect_tensors

    found = collect_tensors(obj, arrays=True, notes=[])
    check_output_size({str(i): t for i, (_, t) in enumerate(found)}, os.fspath(src), max_bytes, fmt="zarc")


def zanj_to_zarc(
    src: PathLike, dst: PathLike, *, compress: Any = True, unknown: str = "error", max_bytes: int | None = None
) -> ConvertReport:
    """A ZANJ file's contents as a zarchive. unknown="dict" keeps dataclasses and models whose class is
    not imported here as plain dicts (otherwise that is an UnknownTypeError)."""
    from ..shortcuts import save
    from .zanj import open_zanj

    with open_zanj(src, unknown=unknown) as arc:
        obj = arc.load()
        stamp = arc.meta.get("timestamp")
    _check_zarc_output(obj, src, max_bytes)
    report = ConvertReport(os.fspath(src), os.fspath(dst), "zanj->zarc", count=1)
    extra = {"zanj_timestamp": stamp} if isinstance(stamp, (int, float)) else {}
    save(obj, dst, compress=compress, custom_settings=_source_record("zanj", src, **extra))
    report.notes.append("ZANJ stores tuples as lists; they are kept as lists")
    return report


def safetensors_to_zarc(
    src: PathLike, dst: PathLike, *, compress: Any = True, max_bytes: int | None = None
) -> ConvertReport:
    """The tensors of a `.safetensors` file as a dict name -> tensor (its text metadata is kept in the
    archive's metadata)."""
    from safetensors import safe_open

    from ..shortcuts import save

    tensors: dict[str, Any] = {}
    try:
        with safe_open(os.fspath(src), framework="pt") as f:
            meta = f.metadata() or {}
            for name in f.keys():  # noqa: SIM118  # safe_open objects are not iterable
                tensors[name] = f.get_tensor(name)
    except ZArchiveError:
        raise
    except Exception as e:  # noqa: BLE001  # safetensors' own error type lives in its Rust extension
        raise FormatError(f"not a readable .safetensors file: {type(e).__name__}: {str(e)[:300]}") from None
    _check_zarc_output(tensors, src, max_bytes)
    save(tensors, dst, compress=compress, custom_settings=_source_record("safetensors", src, metadata=dict(meta)))
    return ConvertReport(os.fspath(src), os.fspath(dst), "safetensors->zarc", count=len(tensors))


def is_hf_folder(src: PathLike) -> bool:
    """Whether `src` is a Hugging Face sharded checkpoint: a folder holding a `*.safetensors.index.json`
    (or that index file itself)."""
    from .foreign.hf_folder import find_index

    try:
        return find_index(os.fspath(src)) is not None
    except (FormatError, OSError):
        return os.path.isdir(src)  # a folder of several indexes: opening it says which to choose


def hf_sharded_to_zarc(
    src: PathLike, dst: PathLike, *, compress: Any = True, max_bytes: int | None = None
) -> ConvertReport:
    """The tensors of a Hugging Face sharded checkpoint (the folder or its index) as one dict name ->
    tensor, read by zarchive's lazy sharded reader under the default read budget."""
    from ..shortcuts import open as open_any
    from ..shortcuts import save

    with open_any(src) as arc:
        tensors = arc.load()
        meta = dict(arc.meta.get("metadata", {}))
    _check_zarc_output(tensors, src, max_bytes)
    record = _source_record("safetensors-sharded", src, metadata={k: str(v) for k, v in meta.items()})
    save(tensors, dst, compress=compress, custom_settings=record)
    return ConvertReport(os.fspath(src), os.fspath(dst), "hf-sharded->zarc", count=len(tensors))


def torch_to_zarc(src: PathLike, dst: PathLike, *, compress: Any = True, max_bytes: int | None = None) -> ConvertReport:
    """A torch.save file (state dict or a dict of them), read by zarchive's own restricted reader
    (zarchive.formats.foreign): its pickle is parsed, never unpickled, and nothing it names is imported."""
    from ..shortcuts import read, save

    obj = read(src)
    _check_zarc_output(obj, src, max_bytes)
    save(obj, dst, compress=compress, custom_settings=_source_record("torch.save", src))
    count = sum(1 for _ in _torch_tensors(obj))
    return ConvertReport(os.fspath(src), os.fspath(dst), "torch->zarc", count=count)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def _torch_tensors(obj: Any, depth: int = 0) -> Any:
    import torch

    if depth > 100:
        return
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _torch_tensors(v, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _torch_tensors(v, depth + 1)


def zarc_to_zarc(src: PathLike, dst: PathLike, *, compress: Any = True, max_bytes: int | None = None) -> ConvertReport:
    """Rewrite an archive (e.g. with other compression), through a full read and save."""
    from ..shortcuts import read, save

    obj = read(src)
    _check_zarc_output(obj, src, max_bytes)
    save(obj, dst, compress=compress)
    return ConvertReport(os.fspath(src), os.fspath(dst), "zarc->zarc", count=1)


# --- out of .zarc ---
def zarc_to_safetensors(src: PathLike, dst: PathLike, *, max_bytes: int | None = None) -> ConvertReport:
    """Every tensor (and numeric numpy array) of an archive in one `.safetensors`, named by object path.

    safetensors cannot store two names for one memory: a tensor stored once under several paths (tied
    weights) is written once, under its first path, and the others are listed in the file's metadata
    under "zarchive.aliases"; different views of one storage are written as separate copies.
    """
    count, notes = archive_to_safetensors(os.fspath(src), os.fspath(dst), max_bytes=max_bytes)
    return ConvertReport(os.fspath(src), os.fspath(dst), "zarc->safetensors", count=count, notes=notes)
