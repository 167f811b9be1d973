"""zarchive: save ML work (models with their configs, arrays, tables, dataclasses) in one readable,
safe, lazily readable zip archive.

    import zarchive
    zarchive.save(obj, "run.zarc"); obj2 = zarchive.read("run.zarc")
    with zarchive.open("run.zarc") as arc: w = arc["model/state_dict/layer.weight"]
"""

from __future__ import annotations

from typing import Any

from .api import ZArchive
from .engine.generic import GenericObject
from .engine.lazy import LazyArchive
from .engine.protocol import FORMAT_VERSION
from .engine.registry import register_handler, unregister_handler
from .engine.typeref import register_class, unregister_class
from .engine.verify_result import VerifyResult
from .errors import (
    ArchiveNotFoundError,
    ConfigMismatchError,
    DeviceError,
    ExportWarning,
    FieldMismatchError,
    FormatError,
    IntegrityError,
    MemberNotFoundError,
    NotAZipError,
    RefusedPickleError,
    SaveError,
    UnknownTypeError,
    UnsafeArchiveError,
    UnsupportedDtypeError,
    UntrustedTypeError,
    VersionError,
    ZArchiveError,
)
from .handlers.base import Handler
from .options import ErrorMode
from .shortcuts import audit, read, save, save_async, verify
from .shortcuts import open as open  # zarchive.open, kept out of __all__ (see below)
from .store.model_store import ModelStore
from .store.record import VersionInfo

# `open` is not in __all__: `from zarchive import *` must not shadow the builtin open (zarchive.open stays)
__all__ = [
    "FORMAT_VERSION",
    "ArchiveNotFoundError",
    "ConfigMismatchError",
    "DeviceError",
    "ErrorMode",
    "ExportWarning",
    "FieldMismatchError",
    "FormatError",
    "GenericObject",
    "Handler",
    "IntegrityError",
    "LazyArchive",
    "MemberNotFoundError",
    "ModelStore",
    "NotAZipError",
    "RefusedPickleError",
    "SaveError",
    "UnknownTypeError",
    "UnsafeArchiveError",
    "UnsupportedDtypeError",
    "UntrustedTypeError",
    "VerifyResult",
    "VersionError",
    "VersionInfo",
    "ZArchive",
    "ZArchiveError",
    "audit",
    "load_checkpoint",
    "read",
    "register_class",
    "register_handler",
    "save",
    "save_async",
    "save_checkpoint",
    "save_checkpoint_async",
    "unregister_class",
    "unregister_handler",
    "verify",
]


def __getattr__(name: str) -> Any:
    # checkpoints need torch: imported on first use, so `import zarchive` does not import torch
    if name in ("save_checkpoint", "save_checkpoint_async", "load_checkpoint"):
        from . import checkpoint

        return getattr(checkpoint, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
