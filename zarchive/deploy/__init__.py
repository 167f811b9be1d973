"""Exports of a model inside its archive (format 1.3): ONNX and TorchScript, made and checked at
save time (`build`), opened on request (`runtime`). Imported only when a save asks for exports or a
program asks for one, so `import zarchive` imports neither torch nor onnx."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..nodes.exports import EXPORT_MEMBERS, EXPORT_NAMES

ExportErrors = Literal["raise", "warn"]
DynamicAxes = Mapping[str, Mapping[int, str]]  # what a save takes: {input or output name: {axis: dimension name}}
Axes = dict[str, dict[int, str]]  # the same, checked


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_line(e: BaseException) -> str:
    """An exporter's exception in one line (they raise pages of graph dumps), with the first line of
    its cause (torch.onnx wraps the reason torch.export gave)."""
    lines = [line for line in _ANSI.sub("", str(e)).strip().splitlines() if line.strip()]
    text = f"{type(e).__name__}: {lines[0][:300] if lines else ''}"
    cause = e.__cause__
    return text if cause is None or cause is e else f"{text} <- {first_line(cause)}"


def check_arguments(export: Sequence[str] | str, example_inputs: Any, export_errors: str) -> tuple[str, ...]:
    """The export names asked for, after checking the arguments (no torch needed)."""
    names = (export,) if isinstance(export, str) else tuple(export)
    for name in names:
        if name not in EXPORT_MEMBERS:
            raise ValueError(f"unknown export {name!r}: choose from {', '.join(map(repr, EXPORT_NAMES))}")
    if len(set(names)) != len(names):
        raise ValueError(f"export= names an export twice: {list(names)}")
    if export_errors not in ("raise", "warn"):
        raise ValueError(f"export_errors must be 'raise' or 'warn', not {export_errors!r}")
    if names and example_inputs is None:
        raise ValueError("export= needs example_inputs=(x,): each export is run on them and checked against the model")
    return names


def check_dynamic_axes(dynamic_axes: Any) -> Axes | None:
    """`dynamic_axes` as given to a save, checked for its form (no model needed): None, or a mapping of
    names to mappings of non-negative int axes to non-empty dimension names."""
    if dynamic_axes is None:
        return None
    if not isinstance(dynamic_axes, Mapping):
        raise TypeError(
            f"dynamic_axes must map input/output names to {{axis: name}}, not a {type(dynamic_axes).__name__}"
        )
    out: Axes = {}
    for name, axes in dynamic_axes.items():
        if not isinstance(name, str) or not isinstance(axes, Mapping):
            raise TypeError(f"dynamic_axes[{name!r}] must be a mapping of axis (int) to dimension name (str)")
        checked: dict[int, str] = {}
        for axis, dim in axes.items():
            if isinstance(axis, bool) or not isinstance(axis, int) or axis < 0:
                raise ValueError(f"dynamic_axes[{name!r}]: axis {axis!r} is not a non-negative int")
            if not isinstance(dim, str) or not dim.isidentifier():
                raise ValueError(f"dynamic_axes[{name!r}][{axis}]: the dimension name {dim!r} is not an identifier")
            checked[axis] = dim
        out[name] = checked
    return out
