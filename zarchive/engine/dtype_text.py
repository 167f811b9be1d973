"""Numpy dtype strings as a person reads them, for listings: '<i2' -> 'int16', '>f8' -> 'float64 big-endian'.

Only the text is parsed (listings do not import numpy). Byte order is shown only where it is not the
native one of this machine; a string this does not recognise is shown as it is.
"""

from __future__ import annotations

import re
import sys

_DTYPE = re.compile(r"^([<>|=]?)([biufcmMUSV])(\d+)(\[\w+\])?$")
_NATIVE = "<" if sys.byteorder == "little" else ">"
_BITS = {"i": "int", "u": "uint", "f": "float", "c": "complex"}


def numpy_dtype_name(text: object) -> str:
    """'<i2' -> 'int16', '|b1' -> 'bool', '<U5' -> 'U5', '|S3' -> 'S3', '<M8[ns]' ->
    'datetime64[ns]', '>f4' -> 'float32 big-endian'; anything else unchanged."""
    if not isinstance(text, str):
        return str(text)
    m = _DTYPE.match(text)
    if m is None:
        return text
    order, kind, size, unit = m.group(1), m.group(2), int(m.group(3)), m.group(4) or ""
    if kind in _BITS:
        name = f"{_BITS[kind]}{size * 8}"
    elif kind == "b" and size == 1:
        name = "bool"
    elif kind in "mM" and size == 8:
        name = ("timedelta64" if kind == "m" else "datetime64") + unit
    elif kind == "U":
        name = f"U{size}"  # numpy's own name, 'str160' (bits), says less than 'U5' (5 characters)
    elif kind == "S":
        name = f"S{size}"
    elif kind == "V":
        name = f"V{size}"
    else:
        return text
    multibyte = size > 1 and kind in "iufcmMU"
    if multibyte and order in "<>" and order != _NATIVE:
        name += " big-endian" if order == ">" else " little-endian"
    return name


__all__ = ["numpy_dtype_name"]
