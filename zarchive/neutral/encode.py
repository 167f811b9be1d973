"""The leaves of the class-free neutral form (spec/neutral.md): numbers as exact text, floats as
IEEE-754 bits, byte strings and array values by SHA-256, and the canonical JSON text of a form."""

from __future__ import annotations

import hashlib
import json
import math
import struct
from typing import Any

from ..errors import FormatError

FORM_NAME = "zarchive-generic-1"
CANONICAL_NAN = "7ff8000000000000"
_SPECIAL_BITS = {"nan": CANONICAL_NAN, "inf": "7ff0000000000000", "-inf": "fff0000000000000"}

D = dict[str, Any]


def float_bits(x: float) -> str:
    """A double's 64 bits as 16 lowercase hex digits (NaN payloads, -0.0 and infinities exact)."""
    return f"{struct.unpack('<Q', struct.pack('<d', x))[0]:016x}"


def sha256_hex(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def number_desc(x: Any, where: str) -> D:
    """A JSON number, an `int` node or a `float` node as `{"kind": "int"|"float", ...}` (no path)."""
    if type(x) is int:
        return {"kind": "int", "value": str(x)}
    if type(x) is float:
        return {"kind": "float", "bits": float_bits(x)}
    if isinstance(x, dict) and x.get("$type") == "int" and isinstance(x.get("hex"), str):
        return {"kind": "int", "value": str(int_from_hex(x["hex"], where))}
    if isinstance(x, dict) and x.get("$type") == "float":
        return {"kind": "float", "bits": special_float_bits(x, where)}
    raise FormatError(f"expected a number at {where or '(root)'}")


def int_from_hex(text: str, where: str) -> int:
    body = text.removeprefix("-")
    if not body.startswith("0x") or len(body) <= 2 or len(text) > 1 << 20:
        raise FormatError(f"malformed 'int' node hex {text[:40]!r}", path=where)
    try:
        value = int(body[2:], 16)  # noqa: FURB166 (base 0 would also take 0o and 0b)
    except ValueError:
        raise FormatError(f"malformed 'int' node hex {text[:40]!r}", path=where) from None
    return -value if text.startswith("-") else value


def special_float_bits(node: dict[str, Any], where: str) -> str:
    """The bits of a `float` node: `bits` where a NaN records them, else those of nan/inf/-inf."""
    value = node.get("value")
    if value not in _SPECIAL_BITS:
        raise FormatError(f"a 'float' node's value must be nan, inf or -inf, not {str(value)[:20]!r}", path=where)
    bits = node.get("bits")
    if value == "nan" and isinstance(bits, str):
        if len(bits) != 16 or any(c not in "0123456789abcdef" for c in bits):
            raise FormatError("a 'float' node's bits must be 16 lowercase hex digits", path=where)
        raw = struct.unpack("<d", struct.pack("<Q", int(bits, 16)))[0]
        if not math.isnan(raw):
            raise FormatError("a 'float' node's bits are not a NaN", path=where)
        return bits
    return _SPECIAL_BITS[value]


def canonical_json(form: Any) -> str:
    """The form's canonical text: sorted keys, one-space indents, ASCII only (every other character
    as a lowercase `\\uXXXX` escape of its UTF-16 code units), ending with a newline."""
    return json.dumps(form, sort_keys=True, ensure_ascii=True, indent=1, separators=(",", ": ")) + "\n"


__all__ = [
    "CANONICAL_NAN",
    "FORM_NAME",
    "canonical_json",
    "float_bits",
    "int_from_hex",
    "number_desc",
    "sha256_hex",
    "special_float_bits",
]
