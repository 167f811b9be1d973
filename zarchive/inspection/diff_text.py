"""An ArchiveDiff as text for a terminal: a table of tensors (path, status, shapes, dtypes, relative
change, max |a-b|), then the values that are not tensors, then the tables' row indexes, column
labels and dtypes, then the metadata that differs.

It knows the diff by its records (diff_records) and the shape of the diff (DiffLike), so the diff
module imports this one and not the other way round."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from .diff_records import MetaEntry, TableChange, TensorChange, ValueChange

MAX_VALUE_TEXT = 80  # characters of a value shown; longer ones end in "..."


class DiffLike(Protocol):
    """What rendering needs of a diff (zarchive.inspection.diff.ArchiveDiff)."""

    @property
    def a(self) -> str: ...
    @property
    def b(self) -> str: ...
    @property
    def rtol(self) -> float: ...
    @property
    def atol(self) -> float: ...
    @property
    def tensors(self) -> tuple[TensorChange, ...]: ...
    @property
    def values(self) -> tuple[ValueChange, ...]: ...
    @property
    def tables(self) -> tuple[TableChange, ...]: ...
    @property
    def metadata(self) -> tuple[MetaEntry, ...]: ...
    def counts(self) -> dict[str, int]: ...
    def changed(self, rtol: float | None = None, atol: float | None = None) -> bool: ...


def render(diff: DiffLike, *, only_changed: bool = False) -> str:
    rows: list[tuple[str, ...]]
    lines = [f"--- a: {diff.a}", f"+++ b: {diff.b}"]
    tolerance = f" (rtol={diff.rtol:g}, atol={diff.atol:g})" if diff.rtol or diff.atol else ""
    counts = diff.counts()
    summary = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    lines.append("")
    lines.append(f"tensors: {summary or 'none'}{tolerance}")
    shown = [t for t in diff.tensors if not only_changed or t.changed(diff.rtol, diff.atol)]
    if shown:
        rows = [("PATH", "STATUS", "SHAPE", "DTYPE", "REL. CHANGE", "MAX |A-B|")]
        rows += [_tensor_row(t, diff.rtol, diff.atol) for t in shown]
        lines += _table(rows)
    values = [v for v in diff.values if not only_changed or v.changed()]
    changed_values = sum(1 for v in diff.values if v.changed())
    lines.append("")
    lines.append(f"values: {changed_values} changed of {len(diff.values)}")
    if values:
        rows = [("PATH", "STATUS", "A", "B")]
        rows += [(v.path or "(root)", v.status, _text(v.a, v.status == "added"), _text(v.b, v.status == "removed"))
                 for v in values]  # fmt: skip
        lines += _table(rows)
    lines += _tables(diff.tables, only_changed)
    differing = [m for m in diff.metadata if not m.same]
    lines.append("")
    lines.append(f"metadata: {len(differing)} of {len(diff.metadata)} fields differ")
    if differing:
        rows = [("FIELD", "A", "B")]
        rows += [(m.key, _text(m.a, m.a is None), _text(m.b, m.b is None)) for m in differing]
        lines += _table(rows)
    lines.append("")
    lines.append(
        "changed" + tolerance if diff.changed() else "no changes" + (" beyond the tolerance" if tolerance else "")
    )
    return "\n".join(lines)


def _tables(tables: Sequence[TableChange], only_changed: bool) -> list[str]:
    """The tables' parts: "tables: 1 changed of 3" and a row per part (path, part, status, a, b, what
    differs); nothing where the archives hold no table on both sides."""
    if not tables:
        return []
    changed = sum(1 for t in tables if t.changed())
    lines = ["", f"tables: {changed} changed of {len(tables)} (row index, column labels, dtypes)"]
    shown = [t for t in tables if not only_changed or t.changed()]
    if shown:
        rows = [("PATH", "PART", "STATUS", "A", "B", "DIFFERENCE")]
        rows += [(t.path or "(root)", t.part, t.status, _text(t.a, False), _text(t.b, False), t.detail)
                 for t in shown]  # fmt: skip
        lines += _table(rows)
    return lines


def _tensor_row(t: TensorChange, rtol: float, atol: float) -> tuple[str, ...]:
    status = t.status
    if status == "changed" and not t.changed(rtol, atol):
        status = "changed (within tolerance)"
    if t.nonfinite_mismatch:
        status += f" ({t.nonfinite_mismatch} NaN/inf differ)"
    return (t.path or "(root)", status, _pair(_shape(t.shape_a), _shape(t.shape_b)), _pair(t.dtype_a, t.dtype_b),
            _number(t.relative_change), _number(t.max_abs_diff))  # fmt: skip


def _shape(shape: tuple[int, ...] | None) -> str | None:
    return None if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _pair(a: str | None, b: str | None) -> str:
    if a == b:
        return a or ""
    return f"{a or '-'} -> {b or '-'}"


def _number(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


def _text(value: Any, absent: bool) -> str:
    if absent:
        return "-"
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = text.replace("\n", "\\n")
    return text if len(text) <= MAX_VALUE_TEXT else text[: MAX_VALUE_TEXT - 3] + "..."


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]


__all__ = ["DiffLike", "render"]
