"""Ways out of a `.zarc` into the files other tools load: a torch.save state dict (`.pt`/`.pth`) and
`.safetensors`, optionally one subtree only (`select`) and, for safetensors, sharded the way Hugging
Face checkpoints are (`model-00001-of-00003.safetensors` ... plus `model.safetensors.index.json`).

`select="model/state_dict"` takes the value at that object path and names each tensor by its path
below it, so the output holds exactly the state dict's keys and goes straight into
`load_state_dict`. A ConfiguredModel (or any torch module) met on the way contributes its
`state_dict()`. With a selection, numpy arrays are left out unless `arrays=True` (a state dict holds
tensors only); without one, every tensor and numeric array is written, as zarchive always did.

The subtree is read once, so tensors that shared memory still do: a `.pt` keeps them shared (torch.save
stores a storage once; tied weights stay tied), while safetensors, which cannot store one memory under
two names, gets a copy of each (every name stays, so a strict load_state_dict finds all its keys).
The `.pt` holds plain tensors only (parameters are detached), so torch.load(weights_only=True) loads it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from ..engine.objpath import escape, join_path, split_path
from ..errors import MemberNotFoundError, SaveError, UnsafeArchiveError

MAX_WALK_DEPTH = 200
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "k": 10**3, "m": 10**6,
          "g": 10**9, "t": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip
INDEX_SUFFIX = ".index.json"


def parse_size(text: str | int) -> int:
    """'5GB' -> 5_000_000_000 (as Hugging Face counts: KB, MB, GB decimal; KiB, MiB, GiB binary)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = _SIZE.match(str(text))
        if m is None or m.group(2).lower() not in _UNITS:
            raise ValueError(f"not a size: {text!r} (write e.g. 5GB, 500MB, 2GiB or a number of bytes)")
        value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"a shard size must be positive, not {text!r}")
    return value


# --- what to write ---
def collect_tensors(value: Any, *, arrays: bool, notes: list[str]) -> list[tuple[list[str], Any]]:
    """(object path below `value`, tensor) for every tensor (and numeric numpy array, if `arrays`)
    in a loaded value, in order; modules contribute their state_dict()."""
    import numpy as np
    import torch

    out: list[tuple[list[str], Any]] = []

    def walk(v: Any, path: list[str], depth: int) -> None:
        if depth > MAX_WALK_DEPTH:
            return
        if isinstance(v, torch.Tensor):
            out.append((path, v))
        elif isinstance(v, np.ndarray):
            if not arrays:
                return
            if v.dtype.kind in "biufc" and not v.dtype.hasobject:
                out.append((path, _array_tensor(v)))
            else:
                notes.append(f"skipped /{join_path(path)}: numpy dtype {v.dtype} has no tensor equivalent")
        elif isinstance(v, torch.nn.Module):
            for k, t in v.state_dict().items():
                out.append(([*path, k], t))
        elif isinstance(v, Mapping):
            for k, child in v.items():
                walk(child, [*path, str(k)], depth + 1)
        elif isinstance(v, (list, tuple)):
            for i, child in enumerate(v):
                walk(child, [*path, str(i)], depth + 1)
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            for f in dataclasses.fields(v):
                walk(getattr(v, f.name), [*path, f.name], depth + 1)
        elif hasattr(v, "fields") and type(v).__name__ == "GenericObject":
            walk(v.fields, path, depth)

    walk(value, [], 0)
    return out


def _array_tensor(v: Any) -> Any:
    """A numeric numpy array as a tensor over the same memory where torch can view it (a broadcast
    array stays one: nothing is materialised before the output's size is checked)."""
    import numpy as np
    import torch

    if v.dtype.isnative and v.itemsize and all(s >= 0 and s % v.itemsize == 0 for s in v.strides):
        try:
            return torch.from_numpy(v)
        except (TypeError, ValueError, RuntimeError):  # a dtype or layout torch does not view
            pass
    return torch.from_numpy(np.ascontiguousarray(v).astype(v.dtype.newbyteorder("="), copy=False))


def output_bytes(tensors: Any, *, fmt: str) -> int:
    """Bytes of tensor data an output of these tensors holds, counted without copying any: "torch"
    (torch.save) writes each storage once, whole; "safetensors" every tensor's values (a view that
    repeats a small storage, with zero strides, expanded); "zarc" each tensor's values, except a
    view that repeats its storage, which is stored as that storage (once)."""
    if fmt == "safetensors":
        return sum(t.numel() * t.element_size() for t in tensors)
    storages: dict[tuple[int, int], int] = {}
    total = 0
    for t in tensors:
        nbytes = t.untyped_storage().nbytes()
        if fmt == "torch" or t.numel() * t.element_size() > nbytes:
            storages[(t.untyped_storage().data_ptr(), nbytes)] = nbytes
        else:
            total += t.numel() * t.element_size()
    return total + sum(storages.values())


def tensor_names(paths: list[list[str]], notes: list[str]) -> list[str]:
    """Names: path components joined with '/'; escaped as object paths only where plain joining
    would give two tensors one name."""
    plain = ["/".join(p) if p else "tensor" for p in paths]
    if len(set(plain)) == len(plain):
        return plain
    notes.append("some keys contain '/', so names were escaped as object paths ('~1' for '/', '~0' for '~')")
    return ["/".join(escape(c) for c in p) if p else "tensor" for p in paths]


def load_selected(src: str, select: str | None) -> Any:
    """The value at object path `select` (everything when None), read once; classes not importable
    here are read generically (their tensors are what is wanted)."""
    from ..shortcuts import open as open_archive

    with open_archive(src, unresolved="generic") as arc:
        path = join_path(split_path(select or ""))
        if select and path not in arc:
            raise MemberNotFoundError(
                f"no value at --select {select!r}; the root holds: {', '.join(arc.keys()[:20]) or '(no keys)'}",
                path=path,
            )
        return arc.get(path)


def check_output_size(tensors: dict[str, Any], src: str, max_bytes: int | None, *, fmt: str) -> None:
    """Refuse, before anything is copied, an output larger than `max_bytes` (see output_bytes for
    what each format writes), named by the source file `src`."""
    from ..container.budget import default_read_budget

    total = output_bytes(tensors.values(), fmt=fmt)
    limit = max_bytes if max_bytes is not None else default_read_budget(os.path.getsize(src))
    if total > limit:
        default = "" if max_bytes is not None else " (the default: 1 GiB + 16 x the source's size)"
        raise UnsafeArchiveError(
            f"the output would hold {total:,} bytes of tensors, over max_bytes={limit:,}{default}: pass a bigger "
            "max_bytes (--max-bytes) if you trust the file"
        )


# --- writing ---
def write_beside(path: str, write: Callable[[str], None]) -> Callable[[], None]:
    """Write `path` through a temporary file beside it; returns the function that moves it into place
    (so several files can be written first and moved together)."""
    from ..container.archive_writer import check_target

    check_target(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        write(tmp)
    except BaseException:
        os.unlink(tmp)
        raise
    return lambda: os.replace(tmp, path)


def save_torch(tensors: dict[str, Any], dst: str) -> None:
    """A torch.save file of a flat dict name -> plain tensor (loadable with weights_only=True)."""
    import torch

    plain = {k: t.detach() if type(t) is not torch.Tensor else t for k, t in tensors.items()}
    plain = {k: t.as_subclass(torch.Tensor) if type(t) is not torch.Tensor else t for k, t in plain.items()}
    write_beside(dst, lambda tmp: torch.save(plain, tmp))()


def _unshare(tensors: dict[str, Any], notes: list[str]) -> None:
    """Contiguous tensors that share no memory (safetensors refuses shared memory): later names of
    one memory get a copy."""
    seen: set[tuple[int, int]] = set()
    copied = 0
    for name, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        if t.numel():
            key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
            if key in seen:
                t, copied = t.clone(), copied + 1
            seen.add((t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()))
        tensors[name] = t
    if copied:
        notes.append(
            f"{copied} tensor(s) shared memory with another (tied weights or views) and were written as copies"
        )


_WRITABLE: dict[Any, bool] = {}  # torch dtype -> whether the installed safetensors writes it (bounded: dtypes)


def safetensors_writes(dtype: Any) -> bool:
    """Whether the installed safetensors stores this dtype (asked once per dtype with one element)."""
    known = _WRITABLE.get(dtype)
    if known is None:
        import torch
        from safetensors.torch import save

        try:
            save({"x": torch.zeros(1, dtype=dtype)})
            known = True
        except Exception:  # noqa: BLE001 - whatever says "not this dtype"
            known = False
        _WRITABLE[dtype] = known
    return known


def shard(tensors: dict[str, Any], max_bytes: int) -> list[dict[str, Any]]:
    """Tensors in order, packed into shards of at most `max_bytes` of data each (a tensor larger
    than that gets a shard of its own)."""
    shards: list[dict[str, Any]] = [{}]
    size = 0
    for name, t in tensors.items():
        n = t.numel() * t.element_size()
        if shards[-1] and size + n > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += n
    return shards


def save_safetensors(
    tensors: dict[str, Any], dst: str, *, metadata: dict[str, str], max_shard_size: int | None, notes: list[str]
) -> list[str]:
    """One .safetensors file, or shards plus a Hugging Face index when the data passes
    `max_shard_size`; returns the files written (every file is complete before any is moved in)."""
    from safetensors.torch import save_file

    for name in [n for n, t in tensors.items() if not safetensors_writes(t.dtype)]:
        notes.append(f"skipped {name}: dtype {tensors.pop(name).dtype} has no safetensors equivalent")
    _unshare(tensors, notes)
    groups = shard(tensors, max_shard_size) if max_shard_size else [tensors]

    def writer(part: dict[str, Any]) -> Callable[[str], None]:
        def write(tmp: str) -> None:
            try:
                save_file(part, tmp, metadata=metadata)
            except Exception as e:  # noqa: BLE001  # safetensors' own error type lives in its Rust extension
                raise SaveError(f"safetensors cannot write this file: {type(e).__name__}: {str(e)[:300]}") from None

        return write

    stale_index = dst + INDEX_SUFFIX
    if len(groups) == 1:
        write_beside(dst, writer(groups[0]))()
        if os.path.isfile(stale_index):  # an earlier sharded output here would be loaded instead
            os.remove(stale_index)
            notes.append(f"removed {stale_index}, left by an earlier sharded conversion")
        return [dst]
    stem = dst.removesuffix(".safetensors")
    names = [f"{stem}-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    moves = [write_beside(name, writer(part)) for name, part in zip(names, groups)]
    index = {
        "metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
        "weight_map": {k: os.path.basename(name) for name, part in zip(names, groups) for k in part},
    }
    text = json.dumps(index, indent=2, ensure_ascii=False) + "\n"
    index_path = dst + INDEX_SUFFIX
    moves.append(write_beside(index_path, lambda tmp: _write_text(tmp, text)))
    for move in moves:
        move()
    if os.path.isfile(dst):  # an earlier single-file output here would be loaded instead of the shards
        os.remove(dst)
        notes.append(f"removed {dst}, an earlier single-file output (the shards and their index replace it)")
    notes.append(f"{len(groups)} shards of at most {max_shard_size:,} bytes each, listed in {index_path}")
    return [*names, index_path]


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


# --- the conversion ---
def export_tensors(
    src: str,
    dst: str,
    *,
    fmt: str,
    select: str | None = None,
    arrays: bool | None = None,
    max_shard_size: int | str | None = None,
    max_bytes: int | None = None,
) -> tuple[int, list[str]]:
    """Write the tensors of `src` (below `select`) to `dst` as fmt "torch" or "safetensors";
    (how many tensors, notes). `arrays`: include numeric numpy arrays (default: only without a
    selection). `max_bytes`: the most the output may hold, checked before anything is written
    (None: the default read budget of `src`, 1 GiB + 16 x its size)."""
    notes: list[str] = []
    limit = parse_size(max_shard_size) if max_shard_size is not None else None
    if limit is not None and fmt != "safetensors":
        raise ValueError("--max-shard-size applies to .safetensors outputs only")
    value = load_selected(src, select)
    found = collect_tensors(value, arrays=select is None if arrays is None else arrays, notes=notes)
    names = tensor_names([p for p, _ in found], notes)
    tensors = dict(zip(names, (t for _, t in found)))
    check_output_size(tensors, src, max_bytes, fmt=fmt)
    if fmt == "torch":
        save_torch(tensors, dst)
    else:
        metadata = {"format": "pt", "converted_from": "zarchive"}
        if select:
            metadata["zarchive.select"] = join_path(split_path(select))
        for name in tensors:
            if name == "__metadata__":
                raise SaveError("a tensor would be named '__metadata__', which safetensors reserves", path=name)
        save_safetensors(tensors, dst, metadata=metadata, max_shard_size=limit, notes=notes)
    if not tensors:
        notes.append("no tensors found" + (f" below {select!r}" if select else ""))
    return len(tensors), notes
