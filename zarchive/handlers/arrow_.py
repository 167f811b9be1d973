"""pyarrow arrays in Arrow's own buffer layout (format 1.5; the optional `arrow` extra): the `arrow.array`
node of nodes/arrow_array.py.

Saving takes each buffer of the array and of its children as it is in memory (sliced arrays are cut to
their window, offsets moved to start at 0) and stores it as a 1-D numpy array: inline when short, else
its own `.npy` member, compressed on its own when that pays. Reading checks every buffer with numpy
(handlers/arrow_checks.py) and hands the buffers to pyarrow (`Array.from_buffers`: no per-row work),
then has pyarrow validate the whole array (`validate(full=True)`: offsets, indices, UTF-8) before
anything sees it. pandas' ArrowDtype columns and polars columns are stored this way (pandas_arrays.py,
polars_.py). The types pyarrow has that Arrow's layout here does not cover (views, maps, unions,
fixed-size lists and binaries, extension types, 256-bit decimals) are refused with a SaveError.
"""

from __future__ import annotations

import re
import sys
import zoneinfo
from typing import Any

import numpy as np

from ..container import npy
from ..container.archive_reader import ArchiveReader
from ..container.archive_writer import CompressHint
from ..engine.context import LoadContext, Node, SaveContext
from ..errors import FormatError, UnknownTypeError
from ..nodes.arrow_array import ArrowArraySchema
from ..nodes.arrow_types import BINARY_IDS, FIXED_WIDTH, LIST_IDS, BufferSpec, bitmap_bytes, buffer_specs
from .arrow_checks import check_indices, check_offsets, check_validity
from .base import Handler


def pyarrow_module() -> Any:
    """pyarrow; an error naming the extra when it is not installed."""
    try:
        import pyarrow
    except ImportError:
        raise UnknownTypeError(
            "this file holds columns in Arrow's layout, read with pyarrow, which is not installed: "
            "pip install 'zarchive[arrow]'"
        ) from None
    return pyarrow


_FIXED_OFFSET = re.compile(r"[+-][0-9]{2}:[0-9]{2}")


# --- types ---
def _simple(pa: Any) -> dict[Any, str]:
    return {
        pa.null(): "null", pa.bool_(): "bool",
        pa.int8(): "int8", pa.int16(): "int16", pa.int32(): "int32", pa.int64(): "int64",
        pa.uint8(): "uint8", pa.uint16(): "uint16", pa.uint32(): "uint32", pa.uint64(): "uint64",
        pa.float16(): "float16", pa.float32(): "float32", pa.float64(): "float64",
        pa.string(): "utf8", pa.large_string(): "large_utf8", pa.binary(): "binary", pa.large_binary(): "large_binary",
        pa.date32(): "date32", pa.date64(): "date64",
    }  # fmt: skip


def type_json(t: Any) -> dict[str, Any]:
    """An Arrow type as JSON (nodes/arrow_types.py); ValueError for a type without a layout here."""
    pa = pyarrow_module()
    types = pa.types
    simple = _simple(pa).get(t)
    if simple is not None:
        return {"id": simple}
    if types.is_timestamp(t):
        return {"id": "timestamp", "unit": t.unit, "tz": t.tz}
    if types.is_time32(t) or types.is_time64(t) or types.is_duration(t):
        return {
            "id": "time32" if types.is_time32(t) else "time64" if types.is_time64(t) else "duration",
            "unit": t.unit,
        }
    if types.is_decimal128(t):
        return {"id": "decimal128", "precision": t.precision, "scale": t.scale}
    if types.is_list(t) or types.is_large_list(t):
        return {"id": "list" if types.is_list(t) else "large_list", "item": _field_json(t.value_field)}
    if types.is_struct(t):
        return {"id": "struct", "fields": [_field_json(t.field(i)) for i in range(t.num_fields)]}
    if types.is_dictionary(t):
        index = _simple(pa).get(t.index_type)
        return {"id": "dictionary", "index": index, "value": type_json(t.value_type), "ordered": bool(t.ordered)}
    raise ValueError(
        f"Arrow type {t} cannot be saved (views, maps, unions, fixed-size lists and binaries, "
        "extension types and 256-bit decimals are not supported)"
    )


def _field_json(f: Any) -> dict[str, Any]:
    return {"name": f.name, "type": type_json(f.type), "nullable": bool(f.nullable)}


def arrow_type(j: dict[str, Any]) -> Any:
    """The pyarrow type of (checked) type JSON `j`."""
    pa = pyarrow_module()
    tid = j["id"]
    by_id = {v: k for k, v in _simple(pa).items()}
    if tid in by_id:
        return by_id[tid]
    if tid == "timestamp":
        tz = j.get("tz")
        if tz is not None and not _FIXED_OFFSET.fullmatch(tz):
            try:
                zoneinfo.ZoneInfo(tz)  # the name was checked against TZ_TEXT: no path traversal
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown time zone {tz[:40]!r}") from None
        return pa.timestamp(j["unit"], tz)
    if tid in ("time32", "time64", "duration"):
        return getattr(pa, tid)(j["unit"])
    if tid == "decimal128":
        return pa.decimal128(j["precision"], j["scale"])
    if tid in LIST_IDS:
        f = j["item"]
        return (pa.list_ if tid == "list" else pa.large_list)(pa.field(f["name"], arrow_type(f["type"]), f["nullable"]))
    if tid == "struct":
        return pa.struct([pa.field(f["name"], arrow_type(f["type"]), f["nullable"]) for f in j["fields"]])
    if tid == "dictionary":
        return pa.dictionary(by_id[j["index"]], arrow_type(j["value"]), j["ordered"])
    raise ValueError(f"unknown Arrow type {tid[:30]!r}")


# --- saving ---
def _bits(buf: Any, offset: int, length: int) -> np.ndarray:
    """`length` bits of a bitmap buffer from bit `offset`, as bytes starting at bit 0."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    if offset % 8 == 0:
        return raw[offset // 8 : offset // 8 + bitmap_bytes(length)]
    bits = np.unpackbits(raw, count=offset + length, bitorder="little")[offset:]
    return np.packbits(bits, bitorder="little")


def _window(buf: Any, dtype: str, begin: int, end: int) -> np.ndarray:
    """Items [begin, end) of a buffer (pyarrow may give an empty array's buffer fewer bytes, or none)."""
    dt = np.dtype(dtype)
    raw = np.zeros(0, dtype=np.uint8) if buf is None else np.frombuffer(buf, dtype=np.uint8)
    if len(raw) < end * dt.itemsize:
        if end - begin <= 1 and not raw[: end * dt.itemsize].any():  # the one offset (0) of an empty array
            return np.zeros(end - begin, dtype=dt)
        raise ValueError(f"an Arrow buffer of {len(raw)} bytes is shorter than its array")
    return raw[: end * dt.itemsize].view(dt)[begin:end]


def save_buffer(arr: np.ndarray, ctx: SaveContext, role: str) -> Node:
    """A buffer as a 1-D numpy.ndarray node: inline when short, else an `.npy` member, compressed (when the
    save compresses) without a trial for bitmaps, offsets, indices, text and integers, which table columns
    make compressible, after a trial on a sample for floats (random-looking ones do not pay)."""
    if arr.size < ctx.settings.external_array_threshold:
        return ctx.save(np.ascontiguousarray(arr), role)
    a = np.ascontiguousarray(arr)
    hint: CompressHint = "try" if a.dtype.kind == "f" else "always"
    plan = ctx.add_member("npy", lambda: [(None, p) for p in npy.array_parts(a)], compress=hint, hint=[*ctx.path, role])
    return ctx.ref_node(plan, "numpy.ndarray", dtype=a.dtype.str, shape=[len(a)])


def save_array(arr: Any, ctx: SaveContext) -> Node:
    """The `arrow.array` node of a pyarrow Array (a ChunkedArray's chunks combined)."""
    pa = pyarrow_module()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    try:
        t = type_json(arr.type)
    except ValueError as e:
        raise ctx.error(str(e)) from None
    return _save(arr, t, ctx)


def _save(arr: Any, t: dict[str, Any], ctx: SaveContext) -> Node:
    n, off, tid = len(arr), arr.offset, t["id"]
    node: dict[str, Any] = {"$type": ArrowArraySchema.name, "type": t, "length": n, "null_count": arr.null_count}
    own = arr.buffers()
    specs = buffer_specs(t, n)
    buffers: list[Node] = []
    children: list[Node] = []
    if specs:
        valid = None if arr.null_count == 0 or own[0] is None else _bits(own[0], off, n)
        buffers.append(None if valid is None else save_buffer(valid, ctx, "validity"))
    if tid == "bool":
        buffers.append(save_buffer(_bits(own[1], off, n), ctx, "values"))
    elif tid in FIXED_WIDTH:
        buffers.append(save_buffer(_window(own[1], FIXED_WIDTH[tid], off, off + n), ctx, "values"))
    elif tid == "decimal128":
        buffers.append(save_buffer(_window(own[1], "<u8", 2 * off, 2 * (off + n)), ctx, "values"))
    elif tid in BINARY_IDS or tid in LIST_IDS:
        offsets = _window(own[1], BINARY_IDS.get(tid) or LIST_IDS[tid], off, off + n + 1)
        if n == 0 and len(offsets) == 0:
            offsets = np.zeros(1, dtype=offsets.dtype)
        begin, end = int(offsets[0]), int(offsets[-1])
        buffers.append(save_buffer(offsets - offsets.dtype.type(begin) if begin else offsets, ctx, "offsets"))
        if tid in BINARY_IDS:
            buffers.append(save_buffer(_window(own[2], "|u1", begin, end), ctx, "values"))
        else:
            ctx.path.append("child0")
            try:
                children.append(_save(arr.values.slice(begin, end - begin), t["item"]["type"], ctx))
            finally:
                ctx.path.pop()
    elif tid == "struct":
        for i, f in enumerate(t["fields"]):
            ctx.path.append(f"child{i}")
            try:
                children.append(_save(arr.field(i), f["type"], ctx))
            finally:
                ctx.path.pop()
    elif tid == "dictionary":
        indices = arr.indices
        width = FIXED_WIDTH[t["index"]]
        buffers.append(
            save_buffer(_window(indices.buffers()[1], width, indices.offset, indices.offset + n), ctx, "indices")
        )
        ctx.path.append("dictionary")
        try:
            node["dictionary"] = _save(arr.dictionary, t["value"], ctx)
        finally:
            ctx.path.pop()
    node["buffers"] = buffers
    if children:
        node["children"] = children
    return node


# --- reading ---
def _shared_member(node: dict[str, Any], ctx: LoadContext) -> np.ndarray | None:
    """A compressed buffer member as a read-only array over the bytes the reader decoded (no copy of
    its own: Arrow arrays are never written to); None for other members (read as any array)."""
    name = node.get("$ref")
    if not isinstance(name, str) or not isinstance(ctx.reader, ArchiveReader):
        return None
    entry = ctx.member_entry(name)
    if entry.get("codec") != "zstd":
        return None
    try:
        dtype = np.dtype(node["dtype"])
        (count,) = node["shape"]
    except (TypeError, ValueError, KeyError):
        return None  # the numpy handler says what is wrong
    if not count * dtype.itemsize <= entry["size"] <= count * dtype.itemsize + npy.MAX_HEADER_BYTES + 12:
        raise FormatError(f"member holds {entry['size']} bytes, {count} items of {dtype.str} need fewer", member=name)
    arr = npy.parse(ctx.member_bytes(name, shared=True), member=name)
    if arr.dtype != dtype or arr.shape != (count,):
        raise FormatError(
            f"the .npy header says {arr.dtype.str}{list(arr.shape)}, the manifest {dtype.str}", member=name
        )
    arr.flags.writeable = False
    return arr


def _load_buffer(node: Any, spec: BufferSpec, ctx: LoadContext) -> np.ndarray:
    ctx.path.append(spec.role)
    try:
        arr = _shared_member(node, ctx) if isinstance(node, dict) else None
    except FormatError as e:
        raise FormatError(e.message, member=e.member, path=ctx.path_str) from None
    finally:
        ctx.path.pop()
    if arr is None:
        arr = ctx.load(node, spec.role)
    if not isinstance(arr, np.ndarray) or arr.ndim != 1 or arr.dtype != np.dtype(spec.dtype):
        raise ctx.error(f"the {spec.role} buffer must be a 1-D {spec.dtype} array")
    if spec.count is not None and len(arr) != spec.count:
        raise ctx.error(f"the {spec.role} buffer holds {len(arr)} items, {spec.count} expected")
    return arr


def build_array(node: dict[str, Any], ctx: LoadContext) -> Any:
    """A pyarrow Array over the buffers of a planned `arrow.array` node, each buffer checked with numpy
    (not yet validated by pyarrow: `load_array` does that once for the whole tree)."""
    pa = pyarrow_module()
    t, n, nulls = node["type"], node["length"], node["null_count"]
    tid = t["id"]
    member = None
    specs = buffer_specs(t, n)
    raw = [None if b is None else _load_buffer(b, s, ctx) for b, s in zip(node["buffers"], specs)]
    if specs:
        check_validity(raw[0], n, nulls, member=member)
    try:
        pa_type = arrow_type(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
        raise ctx.error(f"pyarrow refused the type: {str(e)[:200]}") from None
    if tid == "null":
        return pa.nulls(n)
    children: list[Any] = []
    for i, child in enumerate(node.get("children", [])):
        ctx.path.append(f"child{i}")
        try:
            children.append(build_array(child, ctx))
        finally:
            ctx.path.pop()
    if tid in BINARY_IDS or tid in LIST_IDS:
        offsets, data = raw[1], raw[2] if tid in BINARY_IDS else None
        if offsets is None:
            raise ctx.error("the offsets buffer is missing")
        end = len(data) if data is not None else len(children[0])
        with_path(ctx, lambda: check_offsets(offsets, end, member=member))
    bufs = [None if b is None else pa.py_buffer(b) for b in raw]
    if tid == "dictionary":
        ctx.path.append("dictionary")
        try:
            dictionary = build_array(node["dictionary"], ctx)
        finally:
            ctx.path.pop()
        indices = raw[1]
        if indices is None:
            raise ctx.error("the indices buffer is missing")
        with_path(ctx, lambda: check_indices(indices, raw[0], len(dictionary), n, member=member))
        return pa.DictionaryArray.from_buffers(pa_type, n, bufs, dictionary, nulls)
    return pa.Array.from_buffers(pa_type, n, bufs, nulls, children=children or None)


def with_path(ctx: LoadContext, check: Any) -> Any:
    try:
        return check()
    except FormatError as e:
        raise FormatError(e.message, path=ctx.path_str, member=e.member) from None


def load_array(node: dict[str, Any], ctx: LoadContext) -> Any:
    """The validated pyarrow Array of an `arrow.array` node."""
    pa = pyarrow_module()
    arr = build_array(node, ctx)
    try:
        arr.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowException) as e:
        raise ctx.error(f"not a valid Arrow array: {str(e)[:300]}") from None
    return arr


class ArrowArrayHandler(ArrowArraySchema, Handler):
    """A pyarrow Array (ChunkedArrays are refused: they would read back as one Array)."""

    def accepts(self, cls: type) -> bool:
        pa = sys.modules.get("pyarrow")
        return pa is not None and isinstance(cls, type) and issubclass(cls, pa.Array)

    def save(self, arr: Any, ctx: SaveContext) -> Node:
        return save_array(arr, ctx)

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        return load_array(node, ctx)
