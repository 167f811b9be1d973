"""The records a diff is made of (zarchive.inspection.diff): one per tensor path (TensorChange), per
other value (ValueChange), per table's row index or column labels (TableChange) and per metadata
field (MetaEntry), each with a stable `to_json()`. Shared by the diff itself and its text form
(diff_text), which import this module and not each other."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

TENSOR_STATUSES = ("added", "removed", "reshaped", "dtype", "changed", "same")
VALUE_STATUSES = ("added", "removed", "changed", "same")
TABLE_PARTS = ("index", "columns", "dtypes")
TABLE_STATUSES = ("changed", "same")


@dataclass(frozen=True)
class TensorChange:
    """One tensor (or numpy array) path. shape/dtype of a side are None where it lacks the tensor.
    The numbers are None where values were not compared (added, removed, reshaped, equal stored
    bytes, or values compared by equality only: strings, datetimes)."""

    path: str
    status: str  # one of TENSOR_STATUSES
    shape_a: tuple[int, ...] | None
    shape_b: tuple[int, ...] | None
    dtype_a: str | None
    dtype_b: str | None
    relative_change: float | None = None  # ||a-b|| / ||a|| (||a|| == 0: 0.0 if ||b|| == 0 else 1.0)
    max_abs_diff: float | None = None  # max |a-b| over positions finite on both sides
    differing: int | None = None  # elements not equal (NaN == NaN)
    nonfinite_mismatch: int | None = None  # of those, where a side is NaN or infinite: always a change
    norm_a: float | None = None
    norm_b: float | None = None
    nan_a: int | None = None
    nan_b: int | None = None
    compared: str = "values"  # "values" (read and compared), "checksum" (equal stored bytes), "none"

    def changed(self, rtol: float = 0.0, atol: float = 0.0) -> bool:
        """Whether this tensor changed beyond the tolerance. Added, removed, reshaped and dtype
        changes always count, as do NaN/infinity mismatches; otherwise values count as changed when
        max |a-b| > atol and ||a-b||/||a|| > rtol (within either tolerance is unchanged; both 0:
        any differing element counts)."""
        if self.status in ("added", "removed", "reshaped", "dtype"):
            return True
        if self.status == "same":
            return False
        if self.nonfinite_mismatch or self.max_abs_diff is None or self.relative_change is None:
            return True
        return self.max_abs_diff > atol and self.relative_change > rtol

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "status": self.status,
            "shape_a": list(self.shape_a) if self.shape_a is not None else None,
            "shape_b": list(self.shape_b) if self.shape_b is not None else None,
            "dtype_a": self.dtype_a,
            "dtype_b": self.dtype_b,
            "relative_change": _finite(self.relative_change),
            "max_abs_diff": _finite(self.max_abs_diff),
            "differing": self.differing,
            "nonfinite_mismatch": self.nonfinite_mismatch,
            "norm_a": _finite(self.norm_a),
            "norm_b": _finite(self.norm_b),
            "nan_a": self.nan_a,
            "nan_b": self.nan_b,
            "compared": self.compared,
        }


@dataclass(frozen=True)
class ValueChange:
    """A value that is not a tensor. a, b: plain JSON values as they are, a list of plain values as
    a list, any other value as its one-line description (e.g. "DataFrame 2 rows x 2 columns ...");
    None on the side that lacks it."""

    path: str
    status: str  # one of VALUE_STATUSES
    a: Any
    b: Any

    def changed(self) -> bool:
        return self.status != "same"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, "a": _json_safe(self.a), "b": _json_safe(self.b)}


@dataclass(frozen=True)
class TableChange:
    """One part of a table present on both sides (a pandas DataFrame or Series, a polars DataFrame):
    its row index ("index": labels compared exactly, in order, with their dtype and names), its column
    labels ("columns": names and order) or its columns' dtypes ("dtypes"). a, b: each side's one-line
    description ("RangeIndex(0, 5, 1)", "DatetimeIndex[3] datetime64[us]", a list of column names);
    detail: what differs, in words ("row 0: 0 -> 10", "length 5 -> 6", "same columns, another
    order"), "" when the part is the same. The columns' values are compared as tensors and values."""

    path: str
    part: str  # one of TABLE_PARTS
    status: str  # one of TABLE_STATUSES
    a: Any
    b: Any
    detail: str = ""

    def changed(self) -> bool:
        return self.status != "same"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "part": self.part,
            "status": self.status,
            "a": _json_safe(self.a),
            "b": _json_safe(self.b),
            "detail": self.detail,
        }


@dataclass(frozen=True)
class MetaEntry:
    """One metadata field side by side ("format", "format_version", "environment.python", ...)."""

    key: str
    a: Any
    b: Any

    @property
    def same(self) -> bool:
        return self.a == self.b

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "a": _json_safe(self.a), "b": _json_safe(self.b), "same": self.same}


def _finite(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


def _json_safe(x: Any) -> Any:
    """Plain JSON values as they are (a non-finite float as its text: JSON has none)."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    return x


__all__ = [
    "TABLE_PARTS", "TABLE_STATUSES", "TENSOR_STATUSES", "VALUE_STATUSES",
    "MetaEntry", "TableChange", "TensorChange", "ValueChange",
]  # fmt: skip
