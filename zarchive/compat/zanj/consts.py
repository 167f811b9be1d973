"""ZANJ's `zanj.consts`, for code that imports its names from there: the key under which a
serialized object names its format (`_FORMAT_KEY`), the key of a reference (`_REF_KEY`), the JSON type
aliases, and the two helpers ZANJ's models use to keep text readable in JSON."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from muutils.json_serialize.util import JSONdict, JSONitem, MonoTuple

_FORMAT_KEY = "__muutils_format__"
_REF_KEY = "$ref"


def string_as_lines(s: str | None) -> list[str]:
    """A long string as its lines (no line ends kept), as ZANJ stores docstrings; [] for None."""
    return [] if s is None else s.splitlines(keepends=False)


def safe_getsource(func: Callable[..., Any]) -> list[str]:
    """The source of `func` as lines, or the reason it cannot be had (as lines), never an exception."""
    try:
        return string_as_lines(inspect.getsource(func))
    except Exception as e:  # noqa: BLE001 - as ZANJ: source is informational, never an error
        return [f"(source not available: {e})"]


__all__ = ["_FORMAT_KEY", "_REF_KEY", "JSONdict", "JSONitem", "MonoTuple", "safe_getsource", "string_as_lines"]
