"""Conversions between zarchive and its neighbours: ZANJ, safetensors and torch.save checkpoints.

Into a `.zarc`: a ZANJ file (read with zarchive's own ZANJ reader), a `.safetensors` file (the root is
a dict of tensor name -> tensor, names kept), or a `torch.save` file (`.pt`/`.pth`), read by
zarchive's restricted reader (tensors, parameters and plain containers; its pickle is parsed, never
unpickled), so a checkpoint that holds anything else is refused rather than executed.
Out of a `.zarc`: a plain `.safetensors` of every tensor and numeric array, named by object path.

Every function returns a ConvertReport whose notes say what was changed on the way (renamed, dropped
or copied tensors), so the command line can tell the user.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..container.safetensors_layout import MAX_HEADER_BYTES
from ..engine.objpath import escape
from ..errors import ArchiveNotFoundError, FormatError, SaveError, UnknownTypeError, ZArchiveError
from .convert_out import check_output_size, write_beside

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
_TENSOR_TAG = "torch.Tensor"
RESERVED_SAFETENSORS_KEY = "__metadata__"  # the header key of a .safetensors file's text metadata
_ARRAY_TAG = "numpy.ndarray"


def _walk_values(
    arc: Any, node: Any, path: list[str], out: list[tuple[list[str], dict[str, Any]]], notes: list[str], depth: int = 0
) -> None:
    """Collect (object path, node) of every tensor and array below `node`, without loading anything."""
    if depth > 200:
        return
    if isinstance(node, dict) and node.get("$type") in (_TENSOR_TAG, _ARRAY_TAG):
        out.append((path, node))
        return
    try:
        kids = arc.children(node)
    except UnknownTypeError:
        notes.append(f"skipped /{'/'.join(path)}: a {str(node.get('$type'))[:60]!r} value this zarchive cannot read")
        return
    for key, child in (kids or {}).items():
        _walk_values(arc, child, [*path, key], out, notes, depth + 1)


def _identity(node: dict[str, Any], path: list[str]) -> tuple[Any, ...]:
    """Nodes with equal identities are one tensor stored once (tied weights, shared arrays)."""
    ref = node.get("$ref")
    if ref is None:
        return ("inline", tuple(path))
    fields = (node.get("$type"), ref, node.get("key"), node.get("view"))  # from the file: any JSON, so as text
    return tuple(json.dumps(f, sort_keys=True) for f in fields)


def _names(paths: list[list[str]], notes: list[str]) -> list[str]:
    """Tensor names: object path components joined with '/'; escaped (~1 for a '/' inside a key)
    only where plain joining would give two tensors one name."""
    plain = ["/".join(p) if p else "tensor" for p in paths]
    if len(set(plain)) == len(plain):
        return plain
    notes.append("some keys contain '/', so names were escaped as object paths ('~1' for '/', '~0' for '~')")
    return ["/".join(escape(c) for c in p) if p else "tensor" for p in paths]


def zarc_to_safetensors(src: PathLike, dst: PathLike, *, max_bytes: int | None = None) -> ConvertReport:
    """Every tensor (and numeric numpy array) of an archive in one `.safetensors`, named by object path.

    safetensors cannot store two names for one memory: a tensor stored once under several paths (tied
    weights) is written once, under its first path, and the others are listed in the file's metadata
    under "zarchive.aliases"; different views of one storage are written as separate copies.
    """
    import numpy as np
    import torch
    from safetensors.torch import save_file

    from ..shortcuts import open as open_archive

    report = ConvertReport(os.fspath(src), os.fspath(dst), "zarc->safetensors")
    found: list[tuple[list[str], dict[str, Any]]] = []
    with open_archive(src) as arc:
        if getattr(arc, "format", "zarchive") != "zarchive":
            raise FormatError("converting to .safetensors needs a zarchive (.zarc); convert the ZANJ file first")
        _walk_values(arc, arc.manifest["root"], [], found, report.notes)
        names = _names([p for p, _ in found], report.notes)
        kept: dict[tuple[Any, ...], str] = {}
        aliases: dict[str, str] = {}
        tensors: dict[str, torch.Tensor] = {}
        for (path, node), name in zip(found, names):
            ident = _identity(node, path)
            if ident in kept:
                aliases[name] = kept[ident]
                continue
            value = arc.get("/".join(escape(c) for c in path))
            if isinstance(value, np.ndarray):
                if value.dtype.kind not in "biufc" or value.dtype.hasobject:
                    report.notes.append(f"skipped {name}: numpy dtype {value.dtype} has no safetensors equivalent")
                    continue
                value = torch.from_numpy(value.astype(value.dtype.newbyteorder("="), copy=False))
            t = value.detach().to("cpu")
            kept[ident] = name
            tensors[name] = t
    check_output_size(tensors, os.fspath(src), max_bytes, fmt="safetensors")
    _separate_shared(tensors, report.notes)
    unsupported = [n for n, t in tensors.items() if not _safetensors_dtype(t.dtype)]
    for n in unsupported:
        report.notes.append(f"skipped {n}: dtype {tensors.pop(n).dtype} has no safetensors equivalent")
    if aliases:
        report.notes.append(
            f"{len(aliases)} tensor(s) share storage with another (tied weights) and are written once; "
            "their names are listed in the file's metadata under 'zarchive.aliases'"
        )
    metadata = {"format": "pt", "converted_from": "zarchive"}
    if aliases:
        metadata["zarchive.aliases"] = json.dumps(aliases, ensure_ascii=True)
    _check_safetensors_names(tensors, metadata)

    def write(tmp: str) -> None:
        try:
            save_file(tensors, tmp, metadata=metadata)
        except Exception as e:  # noqa: BLE001  # safetensors' own error type lives in its Rust extension
            raise SaveError(f"safetensors cannot write this file: {type(e).__name__}: {str(e)[:300]}") from None

    write_beside(os.fspath(dst), write)()
    report.count = len(tensors)
    return report


_WRITABLE: dict[Any, bool] = {}  # torch dtype -> whether the installed safetensors writes it (bounded: dtypes)


def _safetensors_dtype(dtype: Any) -> bool:
    """Whether the installed safetensors' torch writer can store this dtype (versions differ: 0.4 has no
    complex64, none has complex128 or the sub-byte types): asked once per dtype, by writing one
    element to bytes with its public `save`."""
    known = _WRITABLE.get(dtype)
    if known is None:
        import torch
        from safetensors.torch import save

        try:
            save({"x": torch.zeros(1, dtype=dtype)})
            known = True
        except Exception:  # noqa: BLE001 - KeyError, TypeError, RuntimeError: whatever says "not this dtype"
            known = False
        _WRITABLE[dtype] = known
    return known


def _check_safetensors_names(tensors: dict[str, Any], metadata: dict[str, str]) -> None:
    """Refuse, before anything is written, tensor names a `.safetensors` file cannot hold: the header
    key `__metadata__` (reserved for the file's text metadata), names that are not valid UTF-8 text
    (lone surrogates from a key), and names so long that the header passes the 100 MB safetensors
    allows its readers."""
    for name in tensors:
        if name == RESERVED_SAFETENSORS_KEY:
            raise SaveError(
                f"a tensor would be named {name!r}, which the safetensors format reserves for the file's "
                "metadata: rename that key in the archive (or save the tensor under another key) and convert again",
                path=name,
            )
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise SaveError(
                f"the tensor name {name[:80]!r} is not valid UTF-8 text (it holds a lone surrogate), which a "
                ".safetensors header cannot hold: rename that key and convert again",
                path=name,
            ) from None
    # header size: what safetensors writes, with every offset at its longest
    header = {
        n: {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [1 << 63, 1 << 63]} for n, t in tensors.items()
    }
    size = len(json.dumps({"__metadata__": metadata, **header}, ensure_ascii=False).encode("utf-8"))
    if size > MAX_HEADER_BYTES:
        raise SaveError(
            f"the tensor names make a .safetensors header of about {size:,} bytes, over the {MAX_HEADER_BYTES:,} "
            "safetensors allows: shorten the keys and convert again"
        )


def _separate_shared(tensors: dict[str, Any], notes: list[str]) -> None:
    """Copy tensors whose memory overlaps another's, and make every tensor contiguous."""
    seen: dict[tuple[int, int], str] = {}
    copied = []
    for name, t in tensors.items():
        t = t.contiguous()
        if t.numel():
            key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
            if key in seen:
                t = t.clone()
                copied.append(name)
            else:
                seen[key] = name
        tensors[name] = t
    if copied:
        notes.append(f"{len(copied)} tensor(s) are views of another's storage and were written as copies")
