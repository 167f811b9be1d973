"""Which axes of an ONNX export stay free (`dynamic_axes=` of a save), and the second inputs the
export is checked on: the example inputs with every free axis at another size.

`dynamic_axes` maps an input or output name of the export to `{axis: dimension name}`; the names are
the export's own: "input" (or "input_0", "input_1", ... for several positional inputs) and "output"
(or "output_0", ...). Axes with the same dimension name are one dimension and must have one size in
the example inputs. Without it, the first axis of every input and output is free ("batch").
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import SaveError
from . import Axes


def resolve(
    given: Axes | None, args: tuple[torch.Tensor, ...], inputs: list[str], outputs: list[str], out_ndims: list[int]
) -> Axes:
    """The free axes of every input and output, checked against the example inputs and outputs."""
    if given is None:
        axes = {name: {0: "batch"} for name, a in zip(inputs, args, strict=True) if a.ndim >= 1}
        axes.update({name: {0: "batch"} for name, n in zip(outputs, out_ndims, strict=True) if n >= 1})
        return axes
    ndims = {**dict(zip(inputs, (a.ndim for a in args), strict=True)), **dict(zip(outputs, out_ndims, strict=True))}
    sizes: dict[str, tuple[str, int]] = {}
    for name, axes_of in given.items():
        if name not in ndims:
            raise SaveError(
                f"dynamic_axes names {name!r}, which is not an input or output of the export: they are "
                f"{', '.join(map(repr, [*inputs, *outputs]))}"
            )
        for axis, dim in axes_of.items():
            if axis >= ndims[name]:
                raise SaveError(f"dynamic_axes[{name!r}] names axis {axis}, but it has {ndims[name]} dimensions")
            if name in inputs:
                size = int(args[inputs.index(name)].shape[axis])
                seen = sizes.setdefault(dim, (name, size))
                if seen[1] != size:
                    raise SaveError(
                        f"dynamic_axes: {dim!r} is axis {axis} of {name!r} ({size}) and of {seen[0]!r} ({seen[1]}): "
                        "one dimension must have one size in the example inputs"
                    )
    return {name: dict(a) for name, a in given.items() if a}


def dims_for_dynamo(axes: Axes, inputs: list[str], args: tuple[torch.Tensor, ...]) -> tuple[Any, ...]:
    """`dynamic_shapes` for torch.onnx.export(dynamo=True): one torch.export.Dim per dimension name,
    shared by every axis that has it."""
    dims: dict[str, Any] = {}
    shapes: list[Any] = []
    for name, a in zip(inputs, args, strict=True):
        of = axes.get(name, {})
        shapes.append({axis: dims.setdefault(dim, torch.export.Dim(dim)) for axis, dim in of.items()} or None)
    return tuple(shapes)


def second_inputs(
    axes: Axes, inputs: list[str], args: tuple[torch.Tensor, ...]
) -> tuple[tuple[torch.Tensor, ...], dict[str, int]] | None:
    """The example inputs with each free dimension at another size (one fewer where it is 3 or more,
    else one more), made from the example's own values (so token ids stay valid ids): the inputs an
    export is checked on a second time. None when no input has a free axis."""
    new_size: dict[str, int] = {}
    for name, a in zip(inputs, args, strict=True):
        for axis, dim in axes.get(name, {}).items():
            n = int(a.shape[axis])
            new_size.setdefault(dim, n - 1 if n >= 3 else n + 1)
    if not new_size:
        return None
    out = []
    for name, a in zip(inputs, args, strict=True):
        t = a
        for axis, dim in axes.get(name, {}).items():
            want = new_size[dim]
            have = int(t.shape[axis])
            if want < have:
                t = t.narrow(axis, 0, want)
            else:
                t = torch.cat([t, t.narrow(axis, 0, want - have)], dim=axis) if have else t
        out.append(t.contiguous())
    return tuple(out), new_size
