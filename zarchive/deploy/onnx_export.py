"""The model as one self-contained ONNX file (weights inside, no side `.data` file), and what it holds.

Exporter: `torch.onnx.export(dynamo=True)` (torch.export, then onnxscript), with the free axes the
save asks for (deploy.dynamic_axes; by default the first axis of every input and output, "batch");
where that fails, the TorchScript-based exporter (`dynamo=False`) with the same dynamic axes, and a
warning recorded saying why.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from . import first_line
from .dynamic_axes import Axes, dims_for_dynamo
from .extras import require
from .onnx_check import external_references, parse_model
from .torchscript_export import tracer_notes

MAX_ONNX_BYTES = (2 << 30) - 1  # protobuf's limit on one message: bigger models need external data


@dataclass
class OnnxExport:
    data: bytes
    exporter: str
    opset: int
    inputs: list[str]
    outputs: list[str]
    dynamic_axes: dict[str, dict[str, str]]
    warnings: list[str] = field(default_factory=list)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporters' own deprecation notices and progress lines are not the user's business here."""
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        yield


def _dynamo(
    model: torch.nn.Module, args: tuple[Any, ...], inputs: list[str], outputs: list[str], path: str, axes: Axes
) -> None:
    shapes = dims_for_dynamo(axes, inputs, args)
    with _quiet():
        program = torch.onnx.export(
            model,
            args,
            dynamo=True,
            input_names=inputs,
            output_names=outputs,
            dynamic_shapes=shapes,
            external_data=False,
            verbose=False,
        )
        if program is None:  # (torch returns the program when no file is given)
            raise RuntimeError("the exporter returned no program")
        program.save(path, external_data=False)


def _torchscript_based(
    model: torch.nn.Module, args: tuple[Any, ...], inputs: list[str], outputs: list[str], path: str, axes: Axes
) -> list[str]:
    with _quiet(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.onnx.export(model, args, path, dynamo=False, input_names=inputs, output_names=outputs, dynamic_axes=axes)  # type: ignore[arg-type]
    return tracer_notes(caught)


def export_onnx(
    model: torch.nn.Module, args: tuple[torch.Tensor, ...], inputs: list[str], outputs: list[str], axes: Axes
) -> OnnxExport:
    """Export `model` (already in eval mode) on `args`, `axes` left free; raises what the exporters raise."""
    require("onnx", "exporting to ONNX")
    require("onnxscript", "exporting to ONNX")
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="zarchive-onnx-") as tmp:
        path = os.path.join(tmp, "model.onnx")
        exporter = "torch.onnx.export(dynamo=True)"
        try:
            _dynamo(model, args, inputs, outputs, path, axes)
        except Exception as e:  # noqa: BLE001 - any failure of the new exporter: the old one may still work
            why = first_line(e)
            exporter = "torch.onnx.export(dynamo=False)"
            for name in os.listdir(tmp):
                os.unlink(os.path.join(tmp, name))
            try:
                traced = _torchscript_based(model, args, inputs, outputs, path, axes)
            except Exception as e2:
                raise ValueError(f"{first_line(e2)} (and the dynamo exporter: {why})") from e2
            notes.append(f"the dynamo exporter failed ({why}); exported with the TorchScript-based one")
            notes += traced
        extra = sorted(set(os.listdir(tmp)) - {"model.onnx"})
        if extra:
            raise ValueError(f"the exporter wrote its weights beside the model ({', '.join(extra)}), not inside it")
        with open(path, "rb") as f:
            data = f.read()
    if len(data) > MAX_ONNX_BYTES:
        raise ValueError(f"the ONNX file would be {len(data):,} bytes: one ONNX file holds at most 2 GiB")
    proto = parse_model(data)
    outside = external_references(proto)  # what a read refuses (deploy.onnx_check), refused at save already
    if outside:
        raise ValueError(
            f"the exported graph refers to files outside it ({outside[0][:300]}): it would not open on its own"
        )
    return OnnxExport(
        data=data,
        exporter=exporter,
        opset=_opset(proto),
        inputs=[i.name for i in proto.graph.input],
        outputs=[o.name for o in proto.graph.output],
        dynamic_axes=_dynamic_axes([*proto.graph.input, *proto.graph.output]),
        warnings=notes,
    )


def _opset(proto: Any) -> int:
    for op in proto.opset_import:
        if op.domain in ("", "ai.onnx"):
            return int(op.version)
    raise ValueError("the exported graph names no standard ONNX opset")


def _dynamic_axes(values: Sequence[Any]) -> dict[str, dict[str, str]]:
    """{input or output name: {axis: dimension name}} for the axes the graph leaves free."""
    out: dict[str, dict[str, str]] = {}
    for v in values:
        dims = v.type.tensor_type.shape.dim
        free = {str(i): d.dim_param for i, d in enumerate(dims) if d.dim_param}
        if free:
            out[v.name] = free
    return out


def run_onnx(data: bytes, inputs: list[str], args: tuple[torch.Tensor, ...]) -> list[Any]:
    """The outputs of the ONNX file `data` run by onnxruntime (CPU) on `args` (numpy arrays)."""
    from .compare import to_numpy
    from .runtime import onnx_session

    session = onnx_session(data, providers=["CPUExecutionProvider"])
    wanted = [i.name for i in session.get_inputs()]
    feed = {name: to_numpy(a) for name, a in zip(inputs, args, strict=True) if name in wanted}
    missing = [name for name in wanted if name not in feed]
    if missing:
        raise ValueError(f"the exported graph wants inputs {missing} that the example inputs do not give")
    return list(session.run(None, feed))
