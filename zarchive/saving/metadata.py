"""The metadata member's contents: format version, library and environment versions, settings.

Deliberately small: versions of the packages that decide how data round-trips, not a `pip freeze`,
and never source code. Timestamps live here and only here, so manifests and members stay reproducible.
"""

from __future__ import annotations

import datetime as dt
import functools
import platform
import sys
from importlib import metadata as importlib_metadata
from typing import Any

from ..container.jsontext import dumps_compact
from ..engine.protocol import FORMAT_NAME, FORMAT_VERSION
from ..errors import SaveError
from ..options import Settings

_PACKAGES = ("numpy", "torch", "pandas", "muutils", "zstandard", "safetensors")


@functools.cache
def _version(dist: str) -> str | None:
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return None


def library_version() -> str:
    return _version("zarchive-ml") or "0+unknown"  # the distribution's name (the import name is zarchive)


@functools.lru_cache(maxsize=1)
def _platform() -> str:
    return platform.platform()


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": _platform(),
        "byteorder": sys.byteorder,
        "packages": {p: _version(p) for p in _PACKAGES},
    }


def build_metadata(settings: Settings) -> dict[str, Any]:
    custom = settings.custom_settings
    if custom is not None:
        try:
            dumps_compact(custom)
        except (TypeError, ValueError) as e:
            raise SaveError(f"custom_settings must be plain JSON: {e}") from None
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "library_version": library_version(),
        "created_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "environment": environment(),
        "compression": settings.compression_record(),
        "settings": {
            "external_array_threshold": settings.external_array_threshold,
            "external_list_threshold": settings.external_list_threshold,
            "compress_weights": settings.compress_weights,
            "custom": custom,
        },
    }
