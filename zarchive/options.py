"""Frozen settings for saving and reading, validated once when a ZArchive is made."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

DEFAULT_ZSTD_LEVEL = 3


class ErrorMode(str, enum.Enum):
    """What to do with a recoverable mismatch (e.g. a dataclass field the class no longer has)."""

    EXCEPT = "except"
    WARN = "warn"
    LOG = "log"  # a warning on the "zarchive" logger (ZANJ's and muutils' "log")
    IGNORE = "ignore"

    @classmethod
    def parse(cls, value: Any) -> ErrorMode:
        if isinstance(value, cls):
            return value
        text = getattr(value, "value", value)  # muutils' ErrorMode has the same values
        try:
            return cls(str(text).lower())
        except ValueError:
            raise ValueError(f"error_mode must be one of 'except', 'warn', 'log', 'ignore', not {value!r}") from None


CompressArg = bool | int | str | None


def parse_compress(value: CompressArg) -> int | None:
    """The zstd level to use, or None for no compression.

    False/None/"none"/0 -> off; True/"zstd" -> level 3; an int -> that zstd level (-7..22).
    """
    if value is None or value is False:
        return None
    if value is True:
        return DEFAULT_ZSTD_LEVEL
    if isinstance(value, str):
        v = value.lower()
        if v == "none":
            return None
        if v == "zstd":
            return DEFAULT_ZSTD_LEVEL
        if v.startswith("zstd:") and v[5:].lstrip("-").isdigit():
            return parse_compress(int(v[5:]))
        raise ValueError(f"compress must be False, True, 'none', 'zstd' or a zstd level, not {value!r}")
    if isinstance(value, int):
        if value == 0:
            return None
        if not -7 <= value <= 22:
            raise ValueError(f"zstd level must be in -7..22, not {value}")
        return value
    raise TypeError(f"compress must be a bool, an int level or a string, not {type(value).__name__}")


@dataclass(frozen=True)
class Settings:
    """Everything that changes how objects are written or read."""

    compress_level: int | None = DEFAULT_ZSTD_LEVEL
    external_array_threshold: int = 256
    external_list_threshold: int = 256
    error_mode: ErrorMode = ErrorMode.WARN
    custom_settings: dict[str, Any] | None = field(default=None, hash=False)
    durable: bool = True
    verify: bool = True
    compress_weights: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.compress_weights, bool):
            raise TypeError(f"compress_weights must be True or False, not {self.compress_weights!r}")
        for name in ("external_array_threshold", "external_list_threshold"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name} must be a non-negative int, not {v!r}")

    def compression_record(self) -> dict[str, Any]:
        """How the metadata describes the compression choice."""
        weights = (
            "float/complex arrays and tensors byte-grouped and zstd-compressed in chunks (codec bgzstd) where a "
            "sample of them shrinks to 95% or less, else uncompressed"
            if self.compress_weights
            else "float/complex arrays and tensors never (they stay mappable)"
        )
        if self.compress_level is None:
            return {"codec": "none"} if not self.compress_weights else {"codec": "none", "policy": weights}
        return {
            "codec": "zstd",
            "level": self.compress_level,
            "policy": f".jsonl members always; {weights}; "
            ".npy members of 2- to 8-byte integers and datetimes byte-grouped by their item size (codec bgzstd) "
            "where a sample of them shrinks to 95% or less; "
            "other .npy, .safetensors and .bin members where zstd shrinks a 1 MiB sample of their data "
            "to 85% or less; manifest.json and metadata.json never",
        }
