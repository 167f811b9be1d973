"""Text columns in Arrow's string layout: one UTF-8 data buffer plus `n + 1` offsets.

String `i` is `data[offsets[i]:offsets[i + 1]]`. A missing value is an empty string (its two offsets are
equal) marked in a separate validity array; this module sees only the strings. Offsets are int64
(int32 is read too); they start at 0, never decrease and end at `len(data)`, and every offset falls
on the first byte of a UTF-8 character, so each string is valid UTF-8 on its own.

Writing is one `join` plus one `encode` for the whole column, the lengths counted by numpy. Reading
makes Python strings (what pandas' python storage holds) without a parse per row: the reader copies
the data once with a separator byte after each string (a byte the data does not contain), decodes
the whole buffer once and splits it once, all in C. Data that holds every candidate separator is
sliced string by string instead (slower, same result). Where the separators go depends on the offsets
alone: a reader that has them before the data (a full read decompresses the data member on another
core meanwhile) lays the buffer out first (`Gaps`) and hands it to `decode_utf8`.

A dictionary column (codes into distinct values in this layout) can be read with every row its own
string, made in row order (`dict_rows`): values up to MAX_ROW_WIDTH bytes are copied into a table of
one fixed-width row per value, the rows gathered by their codes in one `take`, the padding dropped
and the text split once.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from ..errors import FormatError

OFFSET_DTYPES = (np.dtype("<i8"), np.dtype("<i4"))
_SEPARATORS = [bytes([b]) for b in (0x00, *range(0x01, 0x20), 0x7F)]
MAX_ROW_WIDTH = 64  # bytes: dict_rows copies values up to one less than this (plus a separator) per row


def _byte_lengths(values: Sequence[str], text: str, data: bytes) -> np.ndarray:
    """The UTF-8 byte length of each of `values`, whose concatenation is `text` (encoded: `data`)."""
    chars = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    if len(data) == len(text):  # ASCII: one byte per character
        return chars
    raw = np.frombuffer(data, dtype=np.uint8)
    starts = np.flatnonzero((raw & 0xC0) != 0x80)  # the byte where each character begins
    char_ends = np.cumsum(chars)
    byte_ends = np.append(starts, len(data))[char_ends]
    return np.diff(byte_ends, prepend=0)


def encode_utf8(values: Sequence[str], present: np.ndarray | None = None) -> tuple[np.ndarray, bytes]:
    """(int64 offsets of len(present) + 1, data) of a column; `values` are the strings of the rows where
    `present` is true (every row when None), the other rows are empty. UnicodeEncodeError for a
    string that UTF-8 cannot hold (a lone surrogate)."""
    text = "".join(values)
    data = text.encode("utf-8")
    lengths = _byte_lengths(values, text, data)
    n = len(values) if present is None else len(present)
    offsets = np.zeros(n + 1, dtype=np.int64)
    if present is None:
        np.cumsum(lengths, out=offsets[1:])
    else:
        every = np.zeros(n, dtype=np.int64)
        every[present] = lengths
        np.cumsum(every, out=offsets[1:])
    return offsets, data


def check_offsets(offsets: np.ndarray, nbytes: int, length: int, *, member: str | None) -> np.ndarray:
    """`offsets` as int64 after checking them against a data buffer of `nbytes`; a FormatError if not."""
    if offsets.ndim != 1 or offsets.dtype.newbyteorder("<") not in OFFSET_DTYPES:
        raise FormatError(f"string offsets must be a 1-D int64 or int32 array, not {offsets.dtype}", member=member)
    if len(offsets) != length + 1:
        raise FormatError(f"{len(offsets)} string offsets for {length} strings (expected {length + 1})", member=member)
    off = offsets.astype(np.int64, copy=False)
    if off[0] != 0 or off[-1] != nbytes:
        raise FormatError(
            f"string offsets run from {int(off[0])} to {int(off[-1])}, the data holds {nbytes} bytes", member=member
        )
    if length and bool((off[1:] < off[:-1]).any()):
        at = int(np.argmax(off[1:] < off[:-1]))
        raise FormatError(f"string offsets decrease at string {at}", member=member)
    return off


def check_char_boundaries(raw: np.ndarray, off: np.ndarray, member: str | None) -> None:
    """A FormatError unless every string of checked offsets `off` starts on the first byte of a UTF-8
    character of `raw` (its data): with the whole data valid UTF-8, every string then is."""
    if len(off) < 2 or not len(raw) or int(raw.max()) < 0x80:  # ASCII: every byte starts a character
        return
    inside = off[:-1][off[:-1] < len(raw)]
    starts = np.take(raw, inside) & 0xC0
    if len(inside) and bool((starts == 0x80).any()):
        at = int(np.argmax(starts == 0x80))
        raise FormatError(f"string {at} starts inside a UTF-8 character", member=member)


class Gaps:
    """The buffer of a column's text with a separator after each string, laid out from its offsets
    (checked: check_offsets) before the data is at hand: where the separators go (`where`), which
    bytes take the data (`keep`), and the buffer, a NUL at each separator and its pages touched, so
    that once the data is there one copy fills it. For one `decode_utf8` or `separated` call given the
    same offsets array (`off`, kept: a layout serves only the offsets it was made from); they fill the
    buffer."""

    __slots__ = ("buffer", "keep", "nbytes", "off", "where")

    def __init__(self, off: np.ndarray) -> None:
        self.off = off
        n = len(off) - 1
        self.nbytes = int(off[-1])
        self.where = off[1:] + np.arange(n)  # string i ends at off[i + 1], moved right by the i separators before it
        self.keep = np.ones(self.nbytes + n, dtype=bool)
        self.keep[self.where] = False
        self.buffer = np.empty(self.nbytes + n, dtype=np.uint8)
        self.buffer[self.where] = 0  # (a NUL every few bytes: every page is written now, not during the copy)


def separated(
    offsets: np.ndarray, data: memoryview | bytes, length: int, *, member: str | None, gaps: Gaps | None = None
) -> tuple[str, str] | None:
    """The column's text with a separator character after each string, and that separator (splitting
    the text on it gives the strings plus one empty piece at the end); None when every candidate byte
    occurs in the data. A FormatError for offsets of another count, out of order or out of range, or
    bytes that are not UTF-8. `gaps`: the buffer laid out from these offsets (checked) beforehand,
    used where it was made from this very `offsets` array and fits the data, else made afresh."""
    n = length
    if gaps is None or gaps.off is not offsets or gaps.nbytes != len(data) or len(gaps.where) != n:
        gaps = Gaps(check_offsets(offsets, len(data), n, member=member))
    raw = np.frombuffer(data, dtype=np.uint8)
    # a separator right after a string that ends inside a character makes the buffer invalid UTF-8
    sep = next((s for s in _SEPARATORS if not (raw == s[0]).any()), None)
    if sep is None:
        return None
    joined = gaps.buffer
    joined[gaps.keep] = raw
    if sep[0]:  # (the buffer holds a NUL at each separator already)
        joined[gaps.where] = sep[0]
    return _decode(joined.data, member), sep.decode("ascii")


def _decode(data: memoryview | bytes, member: str | None) -> str:
    try:
        return str(data, "utf-8")  # type: ignore[call-overload]
    except UnicodeDecodeError as e:
        raise FormatError(f"string data is not valid UTF-8: {e.reason} at byte {e.start}", member=member) from None


def decode_utf8(
    offsets: np.ndarray, data: memoryview | bytes, length: int, *, member: str | None, gaps: Gaps | None = None
) -> list[str]:
    """The `length` strings of a column; a FormatError for offsets of another count, out of order or
    out of range, or bytes that are not UTF-8. `gaps`: the buffer laid out from these offsets
    (checked) while the data was being read (Gaps)."""
    if length == 0:
        check_offsets(offsets, len(data), 0, member=member)
        return []
    joined = separated(offsets, data, length, member=member, gaps=gaps)
    if joined is None:
        return sliced(offsets, data, length, member=member)
    text, sep = joined
    values = text.split(sep)
    values.pop()  # the empty piece after the last separator
    return values


def sliced(offsets: np.ndarray, data: memoryview | bytes, length: int, *, member: str | None) -> list[str]:
    """The strings, sliced one by one from the decoded text (for data that holds every separator)."""
    off = check_offsets(offsets, len(data), length, member=member)
    raw = np.frombuffer(data, dtype=np.uint8)
    check_char_boundaries(raw, off, member)
    return _sliced(raw, off, data, member)


def _sliced(raw: np.ndarray, off: np.ndarray, data: memoryview | bytes, member: str | None) -> list[str]:
    text = _decode(data, member)
    if len(text) != len(raw):  # offsets count bytes; slices count characters
        continuation = np.concatenate(([0], np.cumsum((raw & 0xC0) == 0x80)))
        off = off - continuation[off]
    return [text[a:b] for a, b in itertools.pairwise(off.tolist())]


def dict_rows(
    offsets: np.ndarray, data: memoryview | bytes, codes: np.ndarray, *, member: str | None
) -> list[str] | None:
    """The text of every row of a dictionary column, each row its own str, made in row order: row `i` is
    value `codes[i]` of the dictionary (the strings that checked `offsets` cut from `data`), "" where
    the code is -1. None when a value is MAX_ROW_WIDTH bytes or longer, or the data holds a NUL byte
    or every separator: the caller then shares one str per value. A FormatError for data that is not
    UTF-8 or a value that starts inside a character (every value is checked, used or not).

    Why not share one str per value: whatever reads the rows next (a comparison, `str.len`) then
    visits the values in the codes' order, scattered over memory; on 1M rows of 200,000 values that
    took 2-5x as long as strings laid out in row order (cache misses; worse while another process
    uses the shared cache), more than making the strings costs."""
    raw = np.frombuffer(data, dtype=np.uint8)
    lengths = np.diff(offsets)
    width = int(lengths.max(initial=0)) + 1  # the longest value and its separator
    if width > MAX_ROW_WIDTH:
        return None
    held = np.bincount(raw, minlength=256)
    sep = next((s for s in _SEPARATORS[1:] if not held[s[0]]), None)
    if held[0] or sep is None:
        return None
    _decode(data, member)  # valid UTF-8 as a whole, and every value starts a character: each is valid
    check_char_boundaries(raw, offsets, member)
    count = len(lengths)
    table = np.zeros((count + 1, width), dtype=np.uint8)  # the last row: "" for code -1
    table[:count][np.arange(width) < lengths[:, None]] = raw
    table[np.arange(count + 1), np.append(lengths, 0)] = sep[0]
    rows = np.take(table, codes, axis=0).tobytes()  # (-1 takes the last row)
    text = _decode(rows.replace(b"\0", b""), member)
    del rows
    values = text.split(sep.decode("ascii"))
    values.pop()  # the empty piece after the last separator
    return values
