"""A whole archive out into one `.safetensors` (`zarchive convert x.zarc y.safetensors`, without
`select`): every tensor and numeric numpy array, named by object path, found by walking the
manifest (values of types this reader cannot read are skipped with a note, not loaded).

safetensors cannot store two names for one memory: a tensor stored once under several paths (tied
weights) is written once, under its first path, and the others are listed in the file's metadata
under "zarchive.aliases"; different views of one storage are written as separate copies. Names the
format cannot hold (`__metadata__`, lone surrogates, a header past its 100 MB) are refused before
anything is written. With `select`, arrays or shards, zarchive.formats.convert_out writes the file.
"""

from __future__ import annotations

import json
from typing import Any

from ..container.safetensors_layout import MAX_HEADER_BYTES
from ..engine.objpath import escape
from ..errors import FormatError, SaveError, UnknownTypeError
from .convert_out import check_output_size, safetensors_writes, tensor_names, write_beside

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


def archive_to_safetensors(src: str, dst: str, *, max_bytes: int | None = None) -> tuple[int, list[str]]:
    """Write every tensor (and numeric numpy array) of the archive `src` to `dst`, tied weights once
    (see the module docstring); (how many tensors were written, notes on what changed on the way).
    `max_bytes`: the most the output may hold, checked before anything is written."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    from ..shortcuts import open as open_archive

    notes: list[str] = []
    found: list[tuple[list[str], dict[str, Any]]] = []
    with open_archive(src) as arc:
        if getattr(arc, "format", "zarchive") != "zarchive":
            raise FormatError("converting to .safetensors needs a zarchive (.zarc); convert the ZANJ file first")
        _walk_values(arc, arc.manifest["root"], [], found, notes)
        names = tensor_names([p for p, _ in found], notes)
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
                    notes.append(f"skipped {name}: numpy dtype {value.dtype} has no safetensors equivalent")
                    continue
                value = torch.from_numpy(value.astype(value.dtype.newbyteorder("="), copy=False))
            t = value.detach().to("cpu")
            kept[ident] = name
            tensors[name] = t
    check_output_size(tensors, src, max_bytes, fmt="safetensors")
    separate_shared(tensors, notes)
    unsupported = [n for n, t in tensors.items() if not safetensors_writes(t.dtype)]
    for n in unsupported:
        notes.append(f"skipped {n}: dtype {tensors.pop(n).dtype} has no safetensors equivalent")
    if aliases:
        notes.append(
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

    write_beside(dst, write)()
    return len(tensors), notes


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


def separate_shared(tensors: dict[str, Any], notes: list[str]) -> None:
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
