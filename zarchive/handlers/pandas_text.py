"""String columns as `.jsonl` text, written and read at C speed.

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
from collections.abc import Sequence

import numpy as np

from ..container.jsontext import decode_jsonl
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
