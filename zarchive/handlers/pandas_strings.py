"""Text columns of "pandas.array" nodes: StringDtype arrays (python or pyarrow storage) and object
columns of str whose missing items are all None or all NaN, in the "strings", "utf8" (format 1.3)
and "dict" (format 1.4) layouts, and read back as the dtype they were saved with. The encodings
themselves (`.jsonl` text, Arrow's string layout, dictionaries) are pandas_text.py's and, for
pyarrow storage, pandas_arrow.py's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .._compat import pandas as pandas_compat
from ..container.utf8_column import MAX_ROW_WIDTH, Gaps, decode_utf8, dict_rows
from ..engine.context import LoadContext, Node, SaveContext
from ..nodes.columns import STR_OBJECT_BYTES
from .allocation import affordable, allocating
from .base import expect
from .pandas_arrow import (
    arrow_buffers,
    arrow_column,
    arrow_dict_objects,
    arrow_dict_strings,
    arrow_dictionary,
    arrow_objects,
    arrow_strings,
)
from .pandas_parts import mask_part
from .pandas_text import (
    SHARED_VALUES_MAX,
    DictParts,
    decode_strings,
    dict_parts,
    dictionary_codes,
    encode_strings,
    save_dict,
    save_utf8,
    save_utf8_buffers,
    utf8_data,
    utf8_head,
)

_CANONICAL_NAN = np.float64("nan").view(np.uint64)


# --- saving ---
def save_string_array(arr: Any, head: dict[str, Any], ctx: SaveContext) -> Node:
    """A StringDtype array: pyarrow storage from Arrow's own buffers (or a dictionary Arrow makes of
    values that repeat) when long, otherwise from its Python strings (save_strings)."""
    dtype = arr.dtype
    extra = {"storage": dtype.storage, "na_value": "NA" if dtype.na_value is pd.NA else "nan"}
    column = arrow_column(arr) if len(arr) > ctx.settings.external_list_threshold else None
    if column is not None:  # pyarrow storage
        fields = {k: v for k, v in head.items() if k != "$type"} | extra
        coded = arrow_dictionary(column)
        if coded is not None:  # values that repeat: a dictionary made by Arrow
            return save_dict(head["$type"], fields, *coded, ctx)
        return save_utf8_buffers(head["$type"], fields, *arrow_buffers(column), ctx)  # its own buffers
    mask = np.asarray(arr.isna(), dtype=bool)
    values = pandas_compat.string_object_values(arr)  # python storage: the object array itself
    if values is None:
        values = arr.to_numpy(dtype=object, na_value=None)
    return save_strings(head, extra, values, mask, ctx)


def object_text(values: np.ndarray, items: list[Any]) -> tuple[str, np.ndarray] | None:
    """For an object column (`values`, and the same as a list, `items`) of str whose missing items are
    all None or all NaN: how they are written ("None" or "NaN") and where they are (a boolean mask);
    None for any other object column (its items are then saved one by one)."""
    kinds = set(map(type, items))
    if str in kinds and kinds <= {str, type(None), float}:  # text with None or NaN for missing
        mask = np.asarray(pd.isna(values), dtype=bool)
        missing = _uniform_missing(values[mask].tolist())
        if missing is not None and (float not in kinds or set(map(type, values[~mask].tolist())) == {str}):
            return missing, mask
    return None


def save_strings(
    head: dict[str, Any], extra: dict[str, Any], values: np.ndarray, mask: np.ndarray, ctx: SaveContext
) -> Node:
    """A text column of a "pandas.array" node (`head`, with `extra` fields): `values` is an object array
    of str wherever `mask` is not set. Long columns that repeat values take the "dict" layout, other
    long ones "utf8", short ones (or text UTF-8 cannot carry) "strings"."""
    name = head["$type"]
    missing = int(np.count_nonzero(mask))
    has_missing = missing > 0
    base = {**{k: v for k, v in head.items() if k != "$type"}, **extra}
    inline = len(values) - missing <= ctx.settings.external_list_threshold
    if not inline:  # repeated values: a dictionary (format 1.4), made by pandas' hash table
        coded = dictionary_codes(values, missing)
        if coded is not None:
            try:
                return save_dict(name, base, *coded, ctx)
            except UnicodeEncodeError:
                pass
    present = (values[~mask] if has_missing else values).tolist()
    if not inline:
        try:  # Arrow's layout (format 1.3); a lone surrogate needs the escaped .jsonl below
            return save_utf8(name, base, present, ~mask if has_missing else None, ctx, narrow=True)
        except UnicodeEncodeError:
            pass
    fields = {**base, "layout": "strings", "count": len(present)}
    if has_missing:
        fields["mask"] = ctx.save(mask, "mask")
    if inline and _utf8_ok(present):
        return {"$type": name, **fields, "values": present}
    data = encode_strings(present)
    plan = ctx.add_member("jsonl", lambda: [(None, memoryview(data))], compress="always")
    return ctx.ref_node(plan, name, **fields, nbytes=len(data))


# --- loading ---
def load_strings(node: dict[str, Any], length: int, ctx: LoadContext) -> Any:
    """The column of a "strings", "utf8" or "dict" node, as the StringDtype it was saved with (python
    storage where pyarrow is missing) or an object array."""
    dtype, na = _string_dtype(node, ctx)
    if node["layout"] == "dict":
        parts = dict_parts(node, ctx, length)
        if dtype is not None and dtype.storage == "pyarrow":
            arrow = _arrow_dict(node, parts, length, dtype, ctx)
            if arrow is not None:
                return arrow
            dtype = pd.StringDtype("python", na_value=na)
        out = _dict_values(parts, na, node["$ref"], ctx)
    else:
        if node["layout"] == "utf8":
            offsets, valid = utf8_head(node, ctx, length)
            # without pyarrow the rows are split from the text with a separator after each string: its
            # buffer is laid out from the offsets while the data member is still being decompressed
            gaps = Gaps(offsets) if length and not _has_pyarrow() else None
            data = utf8_data(node, ctx)
            adopted = None if dtype is None else arrow_strings(offsets, data, valid, dtype, member=node["$ref"])
            if adopted is not None:  # pyarrow storage: pandas takes the column's own buffers
                return adopted
            mask = None if valid is None else ~valid
            made = arrow_objects(offsets, data, valid, member=node["$ref"])  # (None where missing)
            if made is not None:
                out = made
                if mask is not None:
                    out[mask] = na
            else:
                present = decode_utf8(offsets, data, length, member=node["$ref"], gaps=gaps)  # missing: "", masked
                out = _place(present, mask, length, na)
        else:
            mask, present = _strings_present(node, length, ctx)
            out = _place(present, mask, length, na)
    if dtype is None:
        return pd.arrays.NumpyExtensionArray(out)
    if dtype.storage == "python":  # every item is a str the reader made, or the missing value
        return pandas_compat.string_array_unchecked(out, dtype)
    return pd.array(out, dtype=dtype)


def _arrow_dict(node: dict[str, Any], parts: DictParts, length: int, dtype: pd.StringDtype, ctx: LoadContext) -> Any:
    """A "dict" column for pyarrow storage, decoded by Arrow; None where the decoded text (every
    row's own copy of its value) would not fit the read's budget: the rows then share one Python
    string per value, in python storage (a recoverable mismatch), as a dictionary costs nothing
    per row there. A few long values repeated over many rows must not cost rows x length."""
    offsets, data, codes = parts
    decoded = int(np.diff(offsets)[codes[codes >= 0]].sum()) + 8 * length
    budget = getattr(ctx.archive, "budget", None)
    if budget is not None and decoded + ctx.plan.nbytes + budget.json_bytes > budget.limit:
        ctx.mismatch(
            f"strings saved with pyarrow storage are loaded with python storage: as Arrow text they "
            f"would take {decoded:,} bytes, over the read's budget (max_read_bytes)"
        )
        return None
    return arrow_dict_strings(offsets, data, codes, dtype, member=node["$ref"])


def _strings_present(node: dict[str, Any], length: int, ctx: LoadContext) -> tuple[Any, list[str]]:
    count = expect(node, "count", int, ctx)
    mask = mask_part(node, ctx, length)
    missing = 0 if mask is None else int(np.count_nonzero(mask))
    if count != length - missing:
        raise ctx.error(f"{count} strings do not fill {length} rows with {missing} missing")
    if "$ref" in node:
        member = node["$ref"]
        data = ctx.member_bytes(member, expected_size=expect(node, "nbytes", int, ctx))
        present = decode_strings(data, count, member=member)
    else:
        present = expect(node, "values", list, ctx)
        if len(present) != count or not all(type(v) is str for v in present):
            raise ctx.error(f"'values' must be {count} strings")
    return mask, present


def _dict_values(parts: DictParts, na: Any, member: str, ctx: LoadContext) -> np.ndarray:
    """The object array of a "dict" text column (its checked parts), `na` where the code is -1.

    A dictionary of more than SHARED_VALUES_MAX short values is read with every row its own str,
    made in row order (by pyarrow where it is installed, else utf8_column.dict_rows), where the
    read's budget has room: rows that share one str per value send whatever reads them next (a
    comparison, `str.len`) to the values in the codes' order, scattered over more memory than the
    cache holds (2.3x the time of `str.len` on 1M rows of 100,000 values, 2026-11-28). Otherwise each
    distinct string is made once and every row refers to its value (pandas' `take` copies the
    references in a typed loop, about twice numpy's speed on object arrays)."""
    offsets, data, codes = parts
    count = len(offsets) - 1
    width = int(np.diff(offsets).max(initial=0)) + 1  # the longest value, and a separator
    cost = len(codes) * (4 * width + STR_OBJECT_BYTES)
    if count > SHARED_VALUES_MAX and width <= MAX_ROW_WIDTH and affordable(ctx, cost):
        out = _own_rows(offsets, data, codes, member)
        if out is not None:
            allocating(ctx, len(codes) * (width + STR_OBJECT_BYTES), "the strings of a text column", member=member)
            if len(codes) and int(codes.min()) < 0:
                out[codes < 0] = na
            return out
    distinct = np.empty(count, dtype=object)
    distinct[:] = decode_utf8(offsets, data, count, member=member)
    out = pd.api.extensions.take(distinct, codes, allow_fill=True, fill_value=np.nan if na is None else na)
    if na is None and len(codes):  # take fills with NaN when asked for None
        out[codes < 0] = None
    return out


def _own_rows(offsets: np.ndarray, data: memoryview, codes: np.ndarray, member: str) -> np.ndarray | None:
    """The rows of a "dict" column, each its own str (None where the code is -1, for the caller to
    replace); None when neither pyarrow nor dict_rows can make them."""
    out = arrow_dict_objects(offsets, data, codes, member=member)
    if out is not None:
        return out
    rows = dict_rows(offsets, data, codes, member=member)
    return None if rows is None else np.fromiter(rows, dtype=object, count=len(rows))


def _place(present: list[str], mask: np.ndarray | None, length: int, na: Any) -> np.ndarray:
    """An object array of `length` items: `present` in order where `mask` is false (everywhere when
    None or when `present` has an item per row), `na` where it is true."""
    if mask is None or len(present) == length:
        out = np.fromiter(present, dtype=object, count=len(present))
        if mask is not None:
            out[mask] = na
        return out
    out = np.empty(length, dtype=object)
    out[~mask] = np.array(present, dtype=object) if present else []
    out[mask] = na
    return out


def _string_dtype(node: dict[str, Any], ctx: LoadContext) -> tuple[Any, Any]:
    """(StringDtype, or None for an object column; the missing value) of a text node."""
    dtype_name = node.get("dtype")
    if dtype_name == "object":
        missing = node.get("missing", "None")
        if missing not in ("None", "NaN"):
            raise ctx.error(f"bad missing-value marker {str(missing)[:20]!r}")
        na: Any = None if missing == "None" else np.nan
        dtype: Any = None
    else:
        storage, na_text = node.get("storage"), node.get("na_value")
        if storage not in ("python", "pyarrow") or na_text not in ("nan", "NA"):
            raise ctx.error("bad string storage or na_value")
        na = pd.NA if na_text == "NA" else np.nan
        if storage == "pyarrow" and not _has_pyarrow():
            ctx.mismatch("strings saved with pyarrow storage are loaded with python storage (pyarrow is missing)")
            storage = "python"
        dtype = pd.StringDtype(storage, na_value=na)
    return dtype, na


def _uniform_missing(items: list[Any]) -> str | None:
    """How an object column's missing items are all written: "None", "NaN" (the canonical NaN), or
    None when they differ (then the items are saved one by one, so each comes back as it was)."""
    if all(x is None for x in items):
        return "None"
    if all(type(x) is float for x in items) and bool(
        (np.array(items, dtype=np.float64).view(np.uint64) == _CANONICAL_NAN).all()
    ):
        return "NaN"
    return None


def _utf8_ok(values: list[str]) -> bool:
    try:
        "".join(values).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True
