"""Tables for the viewer: column names and dtypes, null counts, a page of rows as text, and a numeric
column's values (sampled) for a line plot. pandas, polars and pyarrow tables (and Series) alike; the
libraries are looked up in sys.modules (a table exists only if its library was imported to read it).
"""

from __future__ import annotations

import math
import sys
from typing import Any

ROWS_PER_PAGE = 50
PLOT_POINTS = 400  # a line plot shows at most this many points (every k-th row)
CELL_CHARS = 200  # a cell's text is cut here


def is_table(value: Any) -> bool:
    return _library(value) is not None


def _library(value: Any) -> str | None:
    pd, pl, pa = (sys.modules.get(m) for m in ("pandas", "polars", "pyarrow"))
    if pd is not None and isinstance(value, (pd.DataFrame, pd.Series)):
        return "pandas"
    if pl is not None and isinstance(value, (pl.DataFrame, pl.Series)):
        return "polars"
    if pa is not None and isinstance(value, (pa.Table, pa.RecordBatch)):
        return "pyarrow"
    return None


def _frame(value: Any, library: str) -> Any:
    """A Series as a one-column frame."""
    if library == "pandas":
        import pandas as pd

        if isinstance(value, pd.Series):
            return value.to_frame(name=value.name if value.name is not None else "values")
    if library == "polars":
        import polars as pl

        if isinstance(value, pl.Series):
            return value.to_frame()
    return value


def _cell(x: Any) -> str:
    try:
        text = str(x)
    except ValueError:  # an int too long for decimal
        text = f"<{type(x).__name__}>"
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 3] + "..."


def summary(value: Any) -> dict[str, Any]:
    """{library, type, rows, columns: [{name, dtype, nulls, numeric}]}."""
    library = _library(value)
    if library is None:
        raise TypeError(f"not a table: {type(value).__name__}")
    frame = _frame(value, library)
    columns: list[dict[str, Any]] = []
    if library == "pandas":
        for i, name in enumerate(frame.columns):
            col = frame.iloc[:, i]
            columns.append({"name": _cell(name), "dtype": str(col.dtype), "nulls": int(col.isna().sum()),
                            "numeric": _pandas_numeric(col)})  # fmt: skip
        rows = len(frame)
    elif library == "polars":
        for name, dtype in frame.schema.items():
            col = frame.get_column(name)
            columns.append({"name": _cell(name), "dtype": str(dtype), "nulls": int(col.null_count()),
                            "numeric": bool(dtype.is_numeric())})  # fmt: skip
        rows = frame.height
    else:
        import pyarrow as pa

        for field, col in zip(frame.schema, frame.columns):
            t = field.type
            numeric = pa.types.is_integer(t) or pa.types.is_floating(t)
            columns.append(
                {"name": _cell(field.name), "dtype": str(t), "nulls": int(col.null_count), "numeric": numeric}
            )
        rows = frame.num_rows
    return {"library": library, "type": type(value).__name__, "rows": int(rows), "columns": columns}


def _pandas_numeric(col: Any) -> bool:
    import pandas as pd

    return bool(pd.api.types.is_numeric_dtype(col.dtype) and not pd.api.types.is_bool_dtype(col.dtype))


def rows(value: Any, page: int, per_page: int = ROWS_PER_PAGE) -> dict[str, Any]:
    """{page, pages, start, index: [labels], rows: [[cell text]]} for one page of rows."""
    library = _library(value)
    if library is None:
        raise TypeError(f"not a table: {type(value).__name__}")
    frame = _frame(value, library)
    total = len(frame) if library == "pandas" else (frame.height if library == "polars" else frame.num_rows)
    pages = max(1, math.ceil(total / per_page))
    page = min(max(0, page), pages - 1)
    start = page * per_page
    stop = min(total, start + per_page)
    if library == "pandas":
        part = frame.iloc[start:stop]
        index = [_cell(x) for x in part.index]
        body = [[_cell(x) for x in row] for row in part.itertuples(index=False, name=None)]
    elif library == "polars":
        part = frame.slice(start, stop - start)
        index = [str(i) for i in range(start, stop)]
        body = [[_cell(x) for x in row] for row in part.iter_rows()]
    else:
        part = frame.slice(start, stop - start).to_pylist()
        index = [str(i) for i in range(start, stop)]
        body = [[_cell(x) for x in row.values()] for row in part]
    return {"page": page, "pages": pages, "start": start, "total": int(total), "index": index, "rows": body}


def numeric_series(value: Any, max_points: int = PLOT_POINTS) -> dict[str, list[float | None]]:
    """Each numeric column's values, every k-th row so at most `max_points` remain (None for NaN)."""
    library = _library(value)
    if library is None:
        return {}
    info = summary(value)
    frame = _frame(value, library)
    total = info["rows"]
    step = max(1, math.ceil(total / max_points))
    out: dict[str, list[float | None]] = {}
    for i, col in enumerate(info["columns"]):
        if not col["numeric"]:
            continue
        if library == "pandas":
            raw = frame.iloc[::step, i].to_numpy(dtype="float64", na_value=float("nan"))
        elif library == "polars":
            raw = frame.to_series(i).gather_every(step).cast(float).to_numpy()
        else:
            raw = frame.column(i).to_numpy(zero_copy_only=False)[::step].astype("float64")
        out[col["name"]] = [float(x) if math.isfinite(x) else None for x in raw]
    return out


__all__ = ["ROWS_PER_PAGE", "is_table", "numeric_series", "rows", "summary"]
