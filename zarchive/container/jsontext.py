"""Strict JSON in and out: RFC 8259 only (no NaN/Infinity tokens), no duplicate keys, bounded depth.

Also the `.jsonl` member format: one compact JSON value per line, UTF-8, newline-terminated. A compact
JSON value never contains a raw newline, so a whole member is parsed in one C-speed call.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from .._compat import cpython as cpython_compat
from ..errors import FormatError, SaveError, UnsafeArchiveError

_encode_str = json.encoder.encode_basestring  # type: ignore[attr-defined]  # C implementation
_encode_ascii = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]  # C, \u escapes


INLINE_WIDTH = 160
_Inline = Callable[[Any], str]
_InlineAll = Callable[[list[Any]], list[str]]


# The public way to write one-line JSON; the C encoder made once (zarchive/_compat/cpython.py) writes
# the same text without building an encoder per call, which is most of the cost of the many one-line
# encodes below (a 5,000-row tensor table).
_py_inline: _Inline = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(", ", ": ")).encode


def _py_inline_all(values: list[Any]) -> list[str]:
    return [_py_inline(v) for v in values]


def _no_reset() -> None:
    pass


def _encoders() -> tuple[_Inline, _InlineAll, Callable[[], None]]:
    """(encode one value, encode each value of a list, reset after a failed encode)."""
    c = cpython_compat.json_c_encoder()
    if c is None:
        return _py_inline, _py_inline_all, _no_reset
    return c.one, c.many, c.reset


def _key(k: Any, inline: _Inline) -> str:
    """An object key as the C encoder writes it: a str, or an int/float/bool/None made into one."""
    if isinstance(k, str):
        return inline(k)
    return inline({k: 0})[1:-4]  # '{"5": 0}' -> '"5"', never a bare 5


def _pretty(value: Any, indent: str, out: list[str], inline: _Inline, inline_all: _InlineAll) -> None:
    """Containers whose one-line form fits INLINE_WIDTH stay on one line; others are expanded.

    Every subtree is encoded by the C encoder, so this stays fast on manifests of thousands of
    tensors (the stdlib's indent= mode runs the pure-Python encoder instead)."""
    if not isinstance(value, (dict, list)) or not value or len(value) * 2 <= INLINE_WIDTH:
        text = inline(value)  # (a container of more than INLINE_WIDTH/2 items cannot fit one line)
        if len(text) <= INLINE_WIDTH or not isinstance(value, (dict, list)) or not value:
            out.append(text)
            return
    inner = indent + "  "
    if isinstance(value, dict):
        out.append("{")
        for i, (k, v) in enumerate(value.items()):
            out.append(("," if i else "") + "\n" + inner + _key(k, inline) + ": ")
            _pretty(v, inner, out, inline, inline_all)
        out.append("\n" + indent + "}")
    else:
        sep = "\n" + inner
        if all(not isinstance(v, (dict, list)) or len(v) * 2 <= INLINE_WIDTH for v in value):
            texts = inline_all(value)  # items that may fit a line (a table's rows): encoded in one pass
            if max(map(len, texts)) <= INLINE_WIDTH:
                out.append("[" + sep + ("," + sep).join(texts) + "\n" + indent + "]")
                return
        out.append("[")
        for i, v in enumerate(value):  # some item needs expanding: each goes its own way (encoded once)
            out.append(("," if i else "") + sep)
            _pretty(v, inner, out, inline, inline_all)
        out.append("\n" + indent + "]")


def dumps_pretty(value: Any) -> bytes:
    """Indented UTF-8 JSON for members people read by hand (manifest, metadata)."""
    out: list[str] = []
    inline, inline_all, reset = _encoders()
    try:
        _pretty(value, "", out, inline, inline_all)
    except (TypeError, ValueError) as e:  # a handler put NaN, an object... in its node
        reset()
        raise SaveError(f"the manifest would not be JSON: {e}") from None
    text = "".join(out) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates in a str: only \u escapes can carry them
        return (json.dumps(value, ensure_ascii=True, allow_nan=False, indent=2) + "\n").encode("ascii")


def dumps_compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-standard JSON token {token!r} (NaN/Infinity are not JSON)")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"number {text[:40]!r} overflows a double")
    return value


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"duplicate key {k[:80]!r} in a JSON object")
            seen.add(k)
    return out


# built once: json.loads with options builds a decoder and its C scanner on every call (shared
# decoders are what json.loads itself uses; the scanner keeps no state between calls that matters)
_STRICT = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=_finite_float, object_pairs_hook=_no_duplicate_keys
)
_STRICT_DUPLICATES_KEPT = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


MAX_JSON_DEPTH = 1000  # arrays and objects inside each other (the manifest's own limit is far lower)
# Up to this recursion limit (Python's default is 1,000) the C parser's own recursion check is the
# depth bound, and a safe one; a program that raised the limit further gets the explicit check below,
# so no JSON nests deep enough to exhaust the C stack whatever the interpreter allows.
_C_PARSER_SAFE_RECURSION = 2000
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in JSON text (strings skipped), in linear time at C speed."""
    import numpy as np

    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text)).encode("ascii")
    depth = deepest = 0
    for start in range(0, len(brackets), 1 << 20):
        chunk = np.frombuffer(brackets, dtype=np.uint8, count=min(1 << 20, len(brackets) - start), offset=start)
        steps = np.where((chunk == ord("[")) | (chunk == ord("{")), 1, -1).astype(np.int64)
        levels = np.cumsum(steps) + depth
        deepest = max(deepest, int(levels.max()))
        depth = int(levels[-1])
    return deepest


def check_depth(text: str, *, member: str) -> None:
    """Refuse JSON nested more than MAX_JSON_DEPTH levels where the C parser's recursion check would
    not (see _C_PARSER_SAFE_RECURSION); costs nothing at the default recursion limit."""
    if (
        sys.getrecursionlimit() > _C_PARSER_SAFE_RECURSION
        and text.count("[") + text.count("{") > MAX_JSON_DEPTH
        and json_depth(text) > MAX_JSON_DEPTH
    ):
        raise FormatError(f"JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)", member=member)


def loads_strict(data: bytes | bytearray | memoryview | str, *, member: str, pairs: bool = True) -> Any:
    """Parse strict JSON; every problem becomes a FormatError naming the member (and running out of
    memory on it an UnsafeArchiveError)."""
    try:
        return _loads_strict(data, member=member, pairs=pairs)
    except MemoryError:
        raise UnsafeArchiveError("not enough memory to parse this JSON", member=member) from None


def _loads_strict(data: bytes | bytearray | memoryview | str, *, member: str, pairs: bool) -> Any:
    if isinstance(data, str):
        text = data
    else:
        try:
            text = str(data, "utf-8")  # (straight from the buffer: no copy into bytes first)
        except UnicodeDecodeError as e:
            raise FormatError(f"not valid UTF-8 JSON: {e}", member=member) from None
    if text.startswith("\ufeff"):  # (json.loads refuses this itself; a decoder's decode() does not)
        raise FormatError("invalid JSON: Unexpected UTF-8 BOM", member=member)
    check_depth(text, member=member)
    try:
        return (_STRICT if pairs else _STRICT_DUPLICATES_KEPT).decode(text)
    except RecursionError:
        raise FormatError("JSON nested too deeply", member=member) from None
    except ValueError as e:  # JSONDecodeError, int digit limits, our hooks
        raise FormatError(f"invalid JSON: {str(e)[:200]}", member=member) from None


def encode_jsonl(values: Iterable[Any]) -> bytes:
    """One compact JSON value per line."""
    values = list(values)
    try:
        return "".join(dumps_compact(v) + "\n" for v in values).encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: escape them (the reader decodes UTF-8 strictly)
        return "".join(json.dumps(v, allow_nan=False, separators=(",", ":")) + "\n" for v in values).encode("ascii")


def encode_jsonl_strings(values: Sequence[str | None]) -> bytes:
    """Fast path for a column of strings (None -> null)."""
    if not values:
        return b""
    if any(v is None for v in values):
        lines = ["null" if v is None else _encode_str(v) for v in values]
    else:
        lines = list(map(_encode_str, cast("Sequence[str]", values)))  # no None in it (checked above)
    try:
        return ("\n".join(lines) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: escape them (the reader decodes UTF-8 strictly)
        return ("\n".join("null" if v is None else _encode_ascii(v) for v in values) + "\n").encode("ascii")


def decode_jsonl(data: bytes | bytearray | memoryview, expected: int, *, member: str) -> list[Any]:
    """Parse a .jsonl member that must hold exactly `expected` values."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"not valid UTF-8: {e}", member=member) from None
    except MemoryError:
        raise UnsafeArchiveError("not enough memory to decode this member", member=member) from None
    if text and not text.endswith("\n"):
        raise FormatError("a .jsonl member must end with a newline", member=member)
    body = text[:-1].replace("\n", ",") if text else ""
    values = loads_strict("[" + body + "]", member=member)
    if len(values) != expected or text.count("\n") != expected:
        raise FormatError(
            f"holds {len(values)} values on {text.count(chr(10))} lines, the manifest declares {expected}",
            member=member,
        )
    return values
