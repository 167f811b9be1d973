"""`zarchive cat`: print one value of an archive, readably, loading only that value.

Tables print their head, arrays and tensors their dtype, shape, summary statistics and a few values,
strings and numbers as they are; containers are summarised from the manifest without loading them.
"""

from __future__ import annotations

import dataclasses
import reprlib
import sys
from typing import TYPE_CHECKING, Any

from ..engine.generic import GenericObject
from ..engine.objpath import join_path, split_path
from ..errors import MemberNotFoundError
from .common import EXIT_OK, CliError, children, describe, open_archive, show_path

if TYPE_CHECKING:
    import numpy as np

_CONTAINER_TAGS = frozenset({"dict", "tuple", "set"})
MAX_REPR = 2000
# ints longer than this print in hex: decimal conversion costs time quadratic in the length, and Python
# refuses it beyond sys.get_int_max_str_digits() digits (4,300 by default)
MAX_DECIMAL_BITS = 13_000  # about 3,900 decimal digits


def cmd_cat(args: Any) -> int:
    objpath = join_path(split_path(args.objpath))
    with open_archive(args.path, unresolved="generic") as arc:  # a class not importable here: its fields
        try:
            node = arc.node(objpath)
        except MemberNotFoundError as e:
            raise CliError(f"no object at path {show_path(objpath)}: {e}") from None
        if _is_container(arc, node):
            lines = _container_lines(arc, node, args.rows)
        else:
            value = arc.get(objpath)
            try:
                lines = render(value, args.rows)
            except ValueError as e:  # a long int deep in a value a library prints (a table's cell)
                if "integer string conversion" not in str(e):
                    raise
                lines = [_short(value, MAX_REPR)]
    print("\n".join(lines))
    return EXIT_OK


def _is_container(arc: Any, node: Any) -> bool:
    if isinstance(node, list):
        return True
    if not isinstance(node, dict):
        return False
    if getattr(arc, "format", "") == "zanj":
        from ..formats.zanj.nodes import node_kind

        return node_kind(node) in ("dict", "list")
    tag = node.get("$type")
    return tag is None or (isinstance(tag, str) and tag in _CONTAINER_TAGS and children(arc, node) is not None)


def _container_lines(arc: Any, node: Any, rows: int) -> list[str]:
    kids = children(arc, node) or {}
    lines = [f"{describe(arc, node)} with {len(kids)} entries"]
    for key, child in list(kids.items())[:rows]:
        lines.append(f"  {key}: {describe(arc, child)}")
    if len(kids) > rows:
        lines.append(f"  ... {len(kids) - rows} more (raise --rows to see them)")
    return lines


def render(value: Any, rows: int = 10) -> list[str]:
    """Readable lines for a loaded value."""
    import numpy as np  # (only for printing a value: listings and --help do not need it)

    pd = sys.modules.get("pandas")  # a table or a tensor exists only if its library was imported to read it
    torch = sys.modules.get("torch")

    if pd is not None and isinstance(value, pd.DataFrame):
        head = value.head(rows).to_string() if len(value.columns) else "(no columns)"
        lines = [f"DataFrame: {len(value)} rows x {len(value.columns)} columns", head]
        if len(value) > rows:
            lines.append(f"... {len(value) - rows} more rows (raise --rows to see them)")
        return lines
    if pd is not None and isinstance(value, pd.Series):
        lines = [f"Series {value.name!r}: {len(value)} values, dtype {value.dtype}", value.head(rows).to_string()]
        return lines
    if torch is not None and isinstance(value, torch.nn.Module):
        n = sum(p.numel() for p in value.parameters())
        cfg = getattr(value, "config", None)
        lines = [f"{type(value).__qualname__}: {n:,} parameters"]
        if cfg is not None:
            lines.append(f"config: {_short(cfg)}")
        return lines + str(value).splitlines()
    if torch is not None and isinstance(value, torch.Tensor):
        return _tensor_lines(value)
    if isinstance(value, np.ndarray):
        return [f"ndarray {value.dtype} shape {list(value.shape)}", *_stats_lines(value)]
    if isinstance(value, str):
        return [value]
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_DECIMAL_BITS:
        return [f"int of {value.bit_length():,} bits (too long to print in decimal; in hex:)", hex(value)]
    if isinstance(value, (bool, int, float, complex)) or value is None or isinstance(value, np.generic):
        return [str(value)]
    if isinstance(value, (bytes, bytearray)):
        return [
            f"{type(value).__name__}: {len(value)} bytes",
            value[:64].hex(" ") + (" ..." if len(value) > 64 else ""),
        ]
    if isinstance(value, GenericObject):
        lines = [f"{value.tag} ({value.kind}; its class is not imported here: --import MODULE builds it)"]
        return lines + [f"  {k}: {_short(v)}" for k, v in value.fields.items()]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        lines = [f"{type(value).__qualname__} (dataclass)"]
        lines += [f"  {f.name}: {_short(getattr(value, f.name, None))}" for f in dataclasses.fields(value)]
        return lines
    if isinstance(value, dict):
        lines = [f"{type(value).__name__} with {len(value)} entries"]
        lines += [f"  {k!r}: {_short(v)}" for k, v in list(value.items())[:rows]]
        return lines + ([f"  ... {len(value) - rows} more"] if len(value) > rows else [])
    if isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
        lines = [f"{type(value).__name__} of {len(items)} items"]
        lines += [f"  [{i}] {_short(v)}" for i, v in enumerate(items[:rows])]
        return lines + ([f"  ... {len(items) - rows} more"] if len(items) > rows else [])
    return [_short(value, MAX_REPR)]


def _short(value: Any, limit: int = 100) -> str:
    try:
        text = repr(value)
    except ValueError as e:  # an int too long for decimal somewhere in it
        if "integer string conversion" not in str(e):
            raise
        text = _LONG_INTS.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _LongIntRepr(reprlib.Repr):
    """A short repr that shows ints too long for decimal in hex (with their size)."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() <= MAX_DECIMAL_BITS:
            return super().repr_int(x, level)
        digits = hex(x)
        return f"{digits[:24]}...(int of {x.bit_length():,} bits)"


_LONG_INTS = _LongIntRepr()
_LONG_INTS.maxlevel, _LONG_INTS.maxother, _LONG_INTS.maxstring = 4, 200, 200


def _tensor_lines(t: Any) -> list[str]:
    import torch

    head = f"tensor {str(t.dtype).removeprefix('torch.')} shape {list(t.shape)} on {t.device}"
    if t.device.type == "meta":
        return [head]
    t = t.detach().cpu()
    if t.dtype.is_floating_point and t.dtype not in (torch.float16, torch.float32, torch.float64):
        t = _as_float(t)  # bfloat16 / float8: numpy has no such dtype
    try:
        arr = t.numpy()
    except (TypeError, RuntimeError):
        return [head, "(values not shown: numpy cannot represent this dtype)"]
    return [head, *_stats_lines(arr)]


def _as_float(t: Any) -> Any:
    """`t.float()` without expanding a view that repeats its storage's elements: the elements it
    reaches are converted, then viewed with its strides again."""
    from ..handlers.allocation import reach

    shape, stride = tuple(t.shape), t.stride()
    span = reach(shape, stride)
    if span >= t.numel():
        return t.float()
    return t.as_strided((span,), (1,), t.storage_offset()).float().as_strided(shape, stride, 0)


def _stats_lines(arr: np.ndarray) -> list[str]:
    """Statistics of a numeric array (zarchive.inspection.stats: a block at a time, so memory stays
    small however big it is; a broadcast array is summarised from its distinct values), then its
    values, abridged."""
    import numpy as np

    from ..inspection.stats import tensor_stats

    lines: list[str] = []
    if arr.size and arr.dtype.kind in "biuf":
        s = tensor_stats(arr, bins=0)
        if not s.computed:
            lines.append(f"(statistics not shown: {s.note})")
        elif s.true is not None:
            lines.append(f"true: {s.true} of {arr.size}")
        elif s.min is None:
            lines += [f"all {s.nan} values are NaN"] if s.nan == arr.size else []
        else:
            nan = f"  ({s.nan} NaN)" if s.nan else ""
            lines.append(f"min {s.min:.6g}  max {s.max:.6g}  mean {s.mean:.6g}  std {s.std:.6g}{nan}")
    with np.printoptions(threshold=20, edgeitems=3, precision=4, linewidth=100):
        lines += np.array2string(arr, separator=", ").splitlines()
    return lines
