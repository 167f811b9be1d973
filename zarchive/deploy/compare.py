"""How an export's outputs are compared with the PyTorch model's on the example inputs.

An output passes when every element satisfies |got - want| <= ATOL + RTOL * |want| (numpy.allclose's
rule; NaN where the model gives NaN, and equal infinities, count as equal). What is recorded:
`max_abs_diff`, the largest |got - want|, and `max_rel_diff`, the largest |got - want| / (|want| +
ATOL) (the ATOL keeps outputs near zero from making it meaningless).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

RTOL = 1e-3
ATOL = 1e-5


class OutputError(ValueError):
    """The model's outputs are not a tensor or a (nested) tuple, list or dict of tensors."""


def flatten_outputs(value: Any) -> list[torch.Tensor]:
    """The tensors of a model's output in order (tuples and lists in order, dicts by key order)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in flatten_outputs(v)]
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [t for v in value for t in flatten_outputs(v)]
    raise OutputError(f"the model returned a {type(value).__name__}: exports need tensors (or tuples of them)")


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype.is_floating_point and t.dtype.itemsize < 4:  # bfloat16, float8: numpy has none
        t = t.float()
    return t.numpy()


@dataclass(frozen=True)
class Comparison:
    max_abs_diff: float
    max_rel_diff: float
    problem: str | None  # None: within tolerance

    def record(self) -> dict[str, float]:
        return {"max_abs_diff": self.max_abs_diff, "max_rel_diff": self.max_rel_diff, "rtol": RTOL, "atol": ATOL}


def compare(want: Sequence[np.ndarray], got: Sequence[Any]) -> Comparison:
    """Compare an export's outputs `got` with the model's `want` (see the module docstring)."""
    if len(got) != len(want):
        return Comparison(0.0, 0.0, f"it returns {len(got)} outputs, the model {len(want)}")
    max_abs = max_rel = 0.0
    problem = None
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        g = np.asarray(g)
        if g.shape != w.shape:
            return Comparison(0.0, 0.0, f"output {i} has shape {list(g.shape)}, the model's {list(w.shape)}")
        w64, g64 = w.astype(np.float64), g.astype(np.float64)
        same = (w64 == g64) | (np.isnan(w64) & np.isnan(g64))
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: caught below as not finite
            diff = np.where(same, 0.0, np.abs(g64 - w64))
        if diff.size == 0:
            continue
        if not np.all(np.isfinite(diff)):
            problem = problem or f"output {i} differs by NaN or infinity where the model's does not"
            continue
        a = float(diff.max())
        scale = np.where(np.isfinite(w64), np.abs(w64), np.inf)  # (where the model gives NaN or inf: equal)
        r = float((diff / (scale + ATOL)).max())
        max_abs, max_rel = max(max_abs, a), max(max_rel, r)
        if problem is None and np.any(diff > ATOL + RTOL * scale):
            problem = f"output {i} differs from the model's by up to {a:.3g} (relative {r:.3g})"
    return Comparison(max_abs, max_rel, problem)
