"""`zarchive.convert`: converting files to and from .zarc (see zarchive.formats.convert_in and
convert_out, where it is implemented)."""

from __future__ import annotations

from .formats.convert_in import (
    ConvertReport,
    conversion_kind,
    convert,
    hf_sharded_to_zarc,
    safetensors_to_zarc,
    torch_to_zarc,
    zanj_to_zarc,
    zarc_to_safetensors,
    zarc_to_zarc,
)

__all__ = [
    "ConvertReport",
    "conversion_kind",
    "convert",
    "hf_sharded_to_zarc",
    "safetensors_to_zarc",
    "torch_to_zarc",
    "zanj_to_zarc",
    "zarc_to_safetensors",
    "zarc_to_zarc",
]
