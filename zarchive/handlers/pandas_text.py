"""String columns: in Arrow's string layout ("utf8", format 1.3: offsets plus one UTF-8 buffer), as a
dictionary of distinct values in that layout plus integer codes ("dict", format 1.4: for columns that
repeat values), and as `.jsonl` text (the "strings" layout of format 1.0, still read), all written and
read at C speed.

The "utf8" helpers at the end know nothing of pandas: the polars handler stores its text the same way.

A string member holds the column's non-missing values, one JSON string per line, in row order (where
values are missing is a separate boolean mask, like the nullable numeric columns). Any JSON reader
can read the member, and a person can `grep` it after `unzip` + `zstd -d`.

Most real strings need no JSON escape (no '"', '\\' or control character). For those the member is
made by one `join` and read back by one `split`, with no per-string Python work. The writer takes
that path only when byte counts prove no string needs an escape; the reader takes it only when the
same counts prove the text is exactly what a JSON parser would accept (so a hand-made or damaged
member cannot be read differently by the two paths). Everything else goes through the strict JSON
encoder and parser of `container/jsontext.py`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..container.jsontext import decode_jsonl
from ..container.utf8_column import MAX_ROW_WIDTH, check_offsets, encode_utf8
from ..engine.context import LoadContext, Node, SaveContext
from ..errors import FormatError

_encode_str = json.encoder.encode_basestring  # type: ignore[attr-defined]  # C, keeps non-ASCII
_encode_ascii = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]  # C, escapes all


def _control_bytes(data: bytes | memoryview) -> int:
    """How many bytes below 0x20 (newlines included) the buffer holds."""
    if len(data) == 0:
        return 0
    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) < 0x20))


def encode_strings(values: Sequence[str]) -> bytes:
    """The `.jsonl` bytes of a list of str (one JSON string per line)."""
    n = len(values)
    if n == 0:
        return b""
    try:
        data = ('"' + '"\n"'.join(values) + '"\n').encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: only escaped JSON can carry them
        return ("\n".join(map(_encode_ascii, values)) + "\n").encode("ascii")
    if b"\\" not in data and data.count(b'"') == 2 * n and _control_bytes(data) == n:
        return data
    return ("\n".join(map(_encode_str, values)) + "\n").encode("utf-8")


def decode_strings(data: memoryview | bytes, count: int, *, member: str) -> list[str]:
    """The `count` strings of a string member; a FormatError for anything else."""
    if count == 0:
        if len(data):
            raise FormatError("a string member declared empty holds bytes", member=member)
        return []
    try:
        text = str(data, "utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"not valid UTF-8: {e}", member=member) from None
    raw = np.frombuffer(data, dtype=np.uint8)
    if (
        text.startswith('"')
        and text.endswith('"\n')
        and not (raw == 0x5C).any()  # no backslash: no escapes
        and np.count_nonzero(raw == 0x22) == 2 * count
        and np.count_nonzero(raw < 0x20) == count
    ):
        values = text[1:-2].split('"\n"')
        # count pieces need count - 1 separators '"\n"': with the final '"\n' that is every quote and
        # every control byte there is, so no piece holds a quote, a newline or a control character
        if len(values) == count:
            return values
    values = decode_jsonl(data, count, member=member)
    if not all(type(v) is str for v in values):
        raise FormatError("a string member holds a value that is not a string", member=member)
    return values


# --- the "utf8" layout (format 1.3): Arrow's string layout, see container/utf8_column.py ---


def save_utf8(
    type_name: str,
    fields: dict[str, Any],
    present: Sequence[str],
    valid: np.ndarray | None,
    ctx: SaveContext,
    *,
    narrow: bool = False,
) -> Node:
    """A node of `fields` plus a text column in the "utf8" layout: `offsets` (int64, one more than the
    rows; with `narrow`, int32 where the data is under 2 GiB), `valid` (bool, true where a value is
    present; left out when every row is) and the data member (`$ref`, `nbytes`). `present`: the
    strings of the valid rows. UnicodeEncodeError for a string that UTF-8 cannot hold.

    (int32 offsets, as Arrow's `string` type has, are read by every reader of the layout: 1M rows
    of short text decompress in 1.7 ms instead of 6.1 ms, for 2.8 MB stored instead of 1.1 MB.)"""
    offsets, data = encode_utf8(present, valid)
    if narrow and len(data) <= np.iinfo(np.int32).max:
        offsets = offsets.astype(np.int32)
    return save_utf8_buffers(type_name, fields, offsets, data, valid, ctx)


def save_utf8_buffers(
    type_name: str, fields: dict[str, Any], offsets: np.ndarray, data: bytes, valid: np.ndarray | None, ctx: SaveContext
) -> Node:
    """As save_utf8, from the column's buffers (int64 offsets from 0 and the data)."""
    node = {**fields, "layout": "utf8"}
    if valid is not None:
        node["valid"] = ctx.save(valid, "valid")
    node["offsets"] = ctx.save(offsets, "offsets")
    plan = ctx.add_member("utf8", lambda: [(None, memoryview(data))], compress="try")
    return ctx.ref_node(plan, type_name, **node, nbytes=len(data))


def utf8_parts(node: dict[str, Any], ctx: LoadContext, length: int) -> tuple[np.ndarray, memoryview, np.ndarray | None]:
    """The offsets, the data and the validity (None: all valid) of a "utf8" node, the validity checked
    against the offsets (a missing value holds no bytes); the offsets are checked when decoded."""
    off, valid = utf8_head(node, ctx, length)
    return off, utf8_data(node, ctx), valid


def utf8_head(node: dict[str, Any], ctx: LoadContext, length: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The checked offsets (int64: from 0 to the node's `nbytes`, never decreasing) and the validity
    (None: all valid) of a "utf8" node, before its data is read (utf8_data): a full read decompresses
    the data member on another core meanwhile, and the reader can lay out what the offsets decide."""
    valid = None
    if "valid" in node:
        ctx.path.append("valid")
        try:
            valid = ctx.load(node["valid"])
            if not isinstance(valid, np.ndarray) or valid.dtype != np.bool_ or valid.shape != (length,):
                raise ctx.error(f"'valid' must be a bool array of {length} values")
        finally:
            ctx.path.pop()
    off = _offsets_of(node, ctx, length, "utf8")
    if valid is not None and length and bool((off[1:] != off[:-1])[~valid].any()):
        raise ctx.error("a missing value holds bytes (its offsets must be equal)", member=node.get("$ref"))
    return off, valid


def utf8_data(node: dict[str, Any], ctx: LoadContext) -> memoryview:
    """The data member of a "utf8" node (or of a "dict" node's dictionary) whose offsets were checked
    against its `nbytes` (utf8_head): `nbytes` bytes."""
    data = ctx.member_bytes(node.get("$ref"), expected_size=node["nbytes"], shared=True)
    if len(data) != node["nbytes"]:  # (member_bytes gives the size it was asked for: checked again, cheaply)
        raise ctx.error(f"the data member holds {len(data)} bytes, not {node['nbytes']}", member=node.get("$ref"))
    return data


# --- the "dict" layout (format 1.4): the distinct values in the "utf8" layout plus integer codes ---

CODE_DTYPES = (np.dtype("int8"), np.dtype("int16"), np.dtype("int32"), np.dtype("int64"))
_SAMPLE_ROWS = 16384
SHARED_VALUES_MAX = 32768  # distinct values whose str objects (2 MiB) a core's cache holds: rows share them


def dictionary_codes(values: np.ndarray, missing: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(codes, distinct values) of an object array of str with `missing` missing items (None, NaN or
    pd.NA): codes of the smallest of CODE_DTYPES, -1 where missing, the values in order of first
    appearance; None when a dictionary does not pay: more distinct values than half the present ones,
    or more than SHARED_VALUES_MAX short ones (under MAX_ROW_WIDTH bytes). A reader gives each row of
    those its own str anyway (pandas_strings._dict_values), so the dictionary saves only some of the
    file (3.6 MB against 4.3 MB for 200,000 distinct names over 1M rows) and factorizing that many
    values costs more than the rest of the save (120 ms of 300, 2026-11-28).

    Large columns are tried on a random sample first (fixed seed: the same column is written the same
    way): the pairs of sampled rows holding equal values estimate the chance that two rows are
    equal, whose inverse is at most the number of distinct values; when even that estimate is over
    half the rows, the whole column is not factorized."""
    n = len(values)
    present = n - missing
    if present < 2:
        return None
    rows = sample_rows(n)
    hint = None
    if rows is not None:
        sample = values[rows]
        sample_codes, _ = pd.factorize(sample)
        if not sample_repeats(sample_codes, present):
            return None
        hint = size_hint(sample_codes, present)
        if hint is not None and hint > SHARED_VALUES_MAX * 3 // 2 and _short(sample[sample_codes >= 0]):
            return None
    codes, distinct = pd.factorize(values, size_hint=hint)
    if 2 * len(distinct) > present or int(np.count_nonzero(codes < 0)) != missing:
        return None
    if len(distinct) > SHARED_VALUES_MAX and _short(distinct):
        return None
    if not _codes_give_back(values, codes, distinct):
        return None
    return smallest_codes(codes, len(distinct)), distinct


def _short(values: np.ndarray) -> bool:
    """Whether every one of `values` (str) takes fewer than MAX_ROW_WIDTH bytes in UTF-8."""
    return all(len(v.encode("utf-8", "surrogatepass")) < MAX_ROW_WIDTH for v in values.tolist())


def sample_rows(n: int) -> np.ndarray | None:
    """The rows of a column of `n` to try a dictionary on first (fixed seed: the same column is written
    the same way); None when the column is small enough to factorize whole."""
    size = max(_SAMPLE_ROWS, math.isqrt(256 * n))  # about 100 equal pairs or more at the threshold
    return np.unique(np.random.default_rng(0).integers(0, n, size)) if n > 4 * size else None


def sample_repeats(sample_codes: np.ndarray, present: int) -> bool:
    """Whether the sample's codes (-1: missing) promise at most `present // 2` distinct values: the
    pairs of sampled rows holding equal values estimate the chance that two rows are equal, whose
    inverse is at most the number of distinct values."""
    counts = np.bincount(sample_codes[sample_codes >= 0])
    seen = int(counts.sum())
    pairs = int((counts * (counts - 1)).sum()) // 2
    return not (pairs == 0 or seen * (seen - 1) // 2 > pairs * (present // 2))


def size_hint(sample_codes: np.ndarray, present: int) -> int | None:
    """A size for the hash table that factorizes the whole column, from its sample's codes: half as
    much again as the distinct values the sample's equal pairs promise (never more than the present
    values). A table sized once skips the rehashing of one that grows: a fifth of the time of
    factorizing 1M strings with 200,000 distinct values (2026-11-28)."""
    counts = np.bincount(sample_codes[sample_codes >= 0])
    seen = int(counts.sum())
    pairs = int((counts * (counts - 1)).sum()) // 2
    return None if pairs == 0 else min(present, (3 * seen * (seen - 1)) // (4 * pairs))


def smallest_codes(codes: np.ndarray, count: int) -> np.ndarray:
    """`codes` as the smallest of CODE_DTYPES that holds 0..count-1 (and -1)."""
    return codes.astype(next(d for d in CODE_DTYPES if count - 1 <= np.iinfo(d).max))


def _codes_give_back(values: np.ndarray, codes: np.ndarray, distinct: np.ndarray) -> bool:
    """Whether the distinct values at `codes` are the column's values, string for string. pandas 3.0.0's
    factorize compares strings only up to their first NUL character ('a' and 'a\\x00b' get one code);
    the column then keeps the utf8 layout rather than lose a value. Without a NUL anywhere there is
    nothing to confuse (one search of the joined text); otherwise one comparison per row."""
    present = codes >= 0
    texts = values[present].tolist() if len(codes) and not present.all() else values.tolist()
    if "\0" not in "".join(texts):  # (a tenth of the comparison's time: most text holds no NUL)
        return True
    return bool((distinct[codes[present]] == values[present]).all())


def save_dict(
    type_name: str, fields: dict[str, Any], codes: np.ndarray, distinct: np.ndarray, ctx: SaveContext
) -> Node:
    """A node of `fields` plus a text column in the "dict" layout: `count` distinct values in the
    "utf8" layout (`offsets`, the data member: `$ref`, `nbytes`) and `codes` (-1: missing).
    UnicodeEncodeError for a string that UTF-8 cannot hold."""
    offsets, data = encode_utf8(distinct.tolist())
    node = {**fields, "layout": "dict", "count": len(distinct)}
    node["codes"] = ctx.save(codes, "codes")
    node["offsets"] = ctx.save(offsets, "offsets")
    plan = ctx.add_member("utf8", lambda: [(None, memoryview(data))], compress="try")
    return ctx.ref_node(plan, type_name, **node, nbytes=len(data))


DictParts = tuple[np.ndarray, memoryview, np.ndarray]  # a "dict" column's offsets, data and codes


def dict_parts(node: dict[str, Any], ctx: LoadContext, length: int) -> DictParts:
    """The dictionary's offsets (checked) and data, and the codes of a "dict" node: a signed integer
    array of `length` items, each -1 or the index of a dictionary value."""
    count = node.get("count")
    if type(count) is not int or count < 0:
        raise ctx.error("a 'dict' node needs 'count', the number of its dictionary values")
    ctx.path.append("codes")
    try:
        codes = ctx.load(node.get("codes"))
        if not isinstance(codes, np.ndarray) or codes.dtype.kind != "i" or codes.shape != (length,):
            raise ctx.error(f"'codes' must be a 1-D signed integer array of {length} values")
        if length and (int(codes.min()) < -1 or int(codes.max()) >= count):
            raise ctx.error(f"codes must lie in -1..{count - 1} (the dictionary holds {count} values)")
    finally:
        ctx.path.pop()
    off = _offsets_of(node, ctx, count, "dict")
    return off, utf8_data(node, ctx), codes


def _offsets_of(node: dict[str, Any], ctx: LoadContext, count: int, layout: str) -> np.ndarray:
    """The offsets of `count` strings, checked against the size of the data member they index
    (`nbytes`), of a "utf8" node or of a "dict" node's dictionary."""
    ctx.path.append("offsets")
    try:
        offsets = ctx.load(node.get("offsets"))
        if not isinstance(offsets, np.ndarray):
            raise ctx.error("'offsets' must be an integer array")
    finally:
        ctx.path.pop()
    member = node.get("$ref")
    nbytes = node.get("nbytes")
    if type(nbytes) is not int or nbytes < 0:
        raise ctx.error(f"a {layout!r} node needs 'nbytes', the size of its data member")
    return check_offsets(offsets, nbytes, count, member=member)
