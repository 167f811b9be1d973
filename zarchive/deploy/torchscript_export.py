"""The model as a TorchScript file (what `torch.jit.save` writes): `torch.jit.script`, or where the
model cannot be compiled, `torch.jit.trace` on the example inputs, with a warning recorded saying
why and what tracing loses (Python control flow is fixed to the path the example took)."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from . import first_line

MAX_NOTES = 10


@dataclass
class TorchScriptExport:
    data: bytes
    exporter: str
    inputs: list[str]
    warnings: list[str] = field(default_factory=list)


def export_torchscript(model: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> TorchScriptExport:
    """Compile (or trace) `model`, already in eval mode; raises what torch.jit raises."""
    notes: list[str] = []
    module: Any
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = torch.jit.script(model)
        exporter = "torch.jit.script"
    except Exception as e:  # noqa: BLE001 - anything TorchScript cannot compile: trace instead
        notes.append(
            f"torch.jit.script failed ({first_line(e)}); traced with torch.jit.trace on the example inputs "
            "instead: Python control flow that depends on the inputs is fixed to the path the example took"
        )
        exporter = "torch.jit.trace"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = torch.jit.trace(model, args, check_trace=False)
        notes += tracer_notes(caught)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (torch 2.9+ points to torch.export)
        torch.jit.save(module, buf)
    schema = module.forward.schema
    inputs = [a.name for a in schema.arguments[1:]]  # (the first is self)
    return TorchScriptExport(buf.getvalue(), exporter, inputs, notes)


def tracer_notes(caught: list[warnings.WarningMessage]) -> list[str]:
    """What tracing warned about (e.g. a branch on a tensor's value, fixed to the example's path),
    once each, at most MAX_NOTES."""
    seen: list[str] = []
    for w in caught:
        if issubclass(w.category, torch.jit.TracerWarning):
            lines = str(w.message).strip().splitlines()
            text = lines[0][:300] if lines else ""
            if text not in seen:
                seen.append(text)
    return [f"traced: {t}" for t in seen[:MAX_NOTES]]


def run_torchscript(data: bytes, args: tuple[torch.Tensor, ...]) -> Any:
    """The outputs of the TorchScript file `data` (loaded back from its bytes) on `args`."""
    from .runtime import load_torchscript

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = load_torchscript(data)
    with torch.no_grad():
        return module(*args)
