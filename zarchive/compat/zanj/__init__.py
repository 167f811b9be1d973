"""ZANJ's API over zarchive: code written for ZANJ runs after replacing `zanj` by
`zarchive.compat.zanj` in its imports.

    from zarchive.compat.zanj import ZANJ                       # was: from zanj import ZANJ
    from zarchive.compat.zanj.torchutil import ConfiguredModel  # was: from zanj.torchutil import ...

`ZANJ(...)` takes ZANJ's arguments in ZANJ's order with ZANJ's defaults (error_mode="except",
external thresholds of 256 counted with `>=`, compress=True) and behaves as ZANJ does where that is
visible to code: `save` appends ".zanj" to a path that lacks it and returns the path, `read` raises
FileNotFoundError for a missing path, a `ZANJ` is accepted wherever zarchive takes a `ZArchive`
(it is one). What it writes is a zarchive archive (under the name ZANJ would use); what it reads is
a zarchive archive or a file the real ZANJ wrote. The deliberate differences (README "Coming from
ZANJ"):

- `compress` takes ZANJ's bool or zip method (`zipfile.ZIP_STORED` stores, `ZIP_DEFLATED`,
  `ZIP_BZIP2`, `ZIP_LZMA` compress), and compression is zarchive's (zstd where it pays);
- `internal_array_mode` is checked and recorded, but every mode reads back the exact array
  (ZANJ's "list" mode gave back lists);
- `handlers_default` cannot replace zarchive's own handlers: ZANJ's and muutils' default handlers
  in it are zarchive's built-ins already; other serializer handlers in it are tried like
  `handlers_pre` (before the built-ins);
- there is no fallback that turns an unknown object into strings, and nothing is pickled: such an
  object raises `zarchive.SaveError` naming its object path.

muutils' `serializable_dataclass` registers each class with the loader API of an importable `zanj`
module. zarchive needs no such registration (a dataclass is found by the class tag the file
records), so nothing is lost when `zanj` is not installed, and nothing changes when it is.
"""

from __future__ import annotations

import os
import sys
import time
import zipfile
from collections.abc import Sequence
from typing import Any

from ...api import ZArchive
from ...engine.registry import register_handler, registered_handlers
from ...handlers.base import Handler
from ...options import ErrorMode
from .loading import LoaderHandler, loader_handlers, register_loader_handler
from .serializers import SerializerHandlerRegistry, ZanjCustomHandler, is_serializer_handler

SUFFIX = ".zanj"
ARRAY_MODES = ("list", "array_list", "array_list_meta", "array_hex_meta", "array_b64_meta", "external", "zero_dim")
ZIP_METHODS = {
    zipfile.ZIP_STORED: False,
    zipfile.ZIP_DEFLATED: True,
    zipfile.ZIP_BZIP2: True,
    zipfile.ZIP_LZMA: True,
}
# uids of the serializer handlers ZANJ and muutils have by default (muutils 0.8 to 0.9): zarchive's
# built-ins do their work
DEFAULT_HANDLER_UIDS = frozenset(
    {
        "numpy.ndarray:external",
        "torch.Tensor:external",
        "list:external",
        "tuple:external",
        "pandas.DataFrame:external",
        "polars.DataFrame:external",
        "base types",
        "dictionaries",
        "namedtuple -> dict",
        "(list, tuple) -> list",
        ".serialize override",
        "dataclass -> dict",
        "path -> str",
        "obj -> str(obj)",
        "numpy.ndarray",
        "torch.Tensor",
        "pandas.DataFrame",
        "set -> dict[_FORMAT_KEY: 'set', data: list(...)]",
        "Iterable -> list",
        "(set, list, tuple, Iterable) -> list",  # (muutils 0.8's one handler for the two above)
        "fallback",
    }
)
DEFAULT_SERIALIZER_HANDLERS_ZANJ: tuple[Any, ...] = ()  # ZANJ's default handlers: zarchive's built-ins

# "zanj.custom" nodes read in every ZArchive once this module is imported (zarchive.read included)
if not any(h.name == ZanjCustomHandler.name for h in registered_handlers()):
    register_handler(ZanjCustomHandler(), overwrite=True)


def zip_method_to_compress(compress: Any) -> Any:
    """ZANJ's `compress` (a bool or a zip method) as zarchive's (a bool, or a zarchive string)."""
    if isinstance(compress, (bool, str)):
        return compress
    if isinstance(compress, int):
        if compress in ZIP_METHODS:
            return ZIP_METHODS[compress]
        raise ValueError(
            f"compress={compress} is not a zip compression method: ZANJ takes a bool or zipfile.ZIP_STORED (0), "
            "ZIP_DEFLATED (8), ZIP_BZIP2 (12) or ZIP_LZMA (14); zarchive compresses with zstd where it pays "
            "(zarchive.ZArchive(compress=<zstd level>) chooses the level)"
        )
    raise TypeError(f"compress must be a bool or a zip method (int), not {type(compress).__name__}")


class ZANJ(ZArchive):
    """ZANJ's constructor and methods over zarchive (see the module docstring). zarchive's own
    keyword-only settings (durable, verify, mmap, max_nodes, ...) are accepted as well."""

    def __init__(
        self,
        error_mode: Any = ErrorMode.EXCEPT,
        internal_array_mode: str = "array_list_meta",
        external_array_threshold: int = 256,
        external_list_threshold: int = 256,
        compress: bool | int | str = True,
        custom_settings: dict[str, Any] | None = None,
        handlers_pre: Sequence[Any] = (),
        handlers_default: Sequence[Any] = DEFAULT_SERIALIZER_HANDLERS_ZANJ,
        **zarchive_settings: Any,
    ) -> None:
        mode = str(getattr(internal_array_mode, "value", internal_array_mode))  # muutils' ArrayMode members too
        if mode not in ARRAY_MODES:
            raise ValueError(
                f"internal_array_mode must be one of {', '.join(ARRAY_MODES)}, not {internal_array_mode!r}"
            )
        serializers: list[Any] = []
        handlers: list[Handler] = []
        for h in (*handlers_pre, *handlers_default):
            if isinstance(h, Handler):
                handlers.append(h)
            elif is_serializer_handler(h):
                if h in handlers_default and str(h.uid) in DEFAULT_HANDLER_UIDS:
                    continue  # ZANJ's own default: zarchive's built-in handlers do this
                serializers.append(h)
            else:
                raise TypeError(
                    f"handlers must be muutils SerializerHandlers or zarchive Handlers, not {type(h).__name__}"
                )
        super().__init__(
            compress=zip_method_to_compress(compress),
            external_array_threshold=external_array_threshold,
            external_list_threshold=external_list_threshold,
            handlers_pre=handlers,
            custom_settings=custom_settings,
            error_mode=error_mode,
            **zarchive_settings,
        )
        self.registry = SerializerHandlerRegistry([*handlers, *registered_handlers()], serializers, self)
        self.array_mode = mode
        self.handlers_pre = tuple(handlers_pre)
        self.compress: int = _as_zip_method(compress)
        self._externals: dict[str, Any] = {}  # ZANJ's, always empty here (see externals_info)

    # --- ZANJ's attributes ---
    @property
    def error_mode(self) -> ErrorMode:
        return self.settings.error_mode

    @property
    def external_array_threshold(self) -> int:
        return self.settings.external_array_threshold

    @property
    def external_list_threshold(self) -> int:
        return self.settings.external_list_threshold

    @property
    def custom_settings(self) -> dict[str, Any]:
        custom = self.settings.custom_settings
        return custom if isinstance(custom, dict) else {}

    def json_serialize(self, obj: Any, path: tuple[Any, ...] = ()) -> Any:
        """For serializer handlers that serialize parts of their object: the part as it is, which
        zarchive then saves through its handlers (arrays as members, objects by type)."""
        return obj

    def meta(self) -> dict[str, Any]:
        """This ZANJ's settings and handlers, the Python version and the time, under ZANJ's keys
        (zarchive records its own metadata in each archive: `zarchive meta PATH`)."""
        registry = self.registry
        serializers = registry.serializers if isinstance(registry, SerializerHandlerRegistry) else ()
        return {
            "zanj_cfg": {
                "error_mode": self.error_mode.value,
                "array_mode": self.array_mode,
                "external_array_threshold": self.external_array_threshold,
                "external_list_threshold": self.external_list_threshold,
                "compress": self.compress,
                "serialization_handlers": {str(a.serializer.uid): str(a.serializer.desc) for a in serializers},
                "load_handlers": {uid: h.serialize() for uid, h in loader_handlers().items()},
            },
            "sysinfo": {"python": {"version": sys.version}},
            "externals_info": self.externals_info(),
            "timestamp": time.time(),
        }

    def externals_info(self) -> dict[str, Any]:
        """Nothing: zarchive plans its members during a save and keeps none between saves."""
        return {}

    # --- saving and reading ---
    def save(self, obj: Any, file_path: str | os.PathLike[str] | Any, **kwargs: Any) -> str:  # type: ignore[override]
        """Write `obj` to `file_path`, with ".zanj" appended when the path does not end in it (as
        ZANJ does); return the path written. The file is a zarchive archive."""
        if not isinstance(file_path, (str, os.PathLike)):  # a URL object or a file object: as zarchive
            return super().save(obj, file_path, **kwargs)
        path = os.fspath(file_path)
        if not path.endswith(SUFFIX):
            path += SUFFIX
        return super().save(obj, path, **kwargs)

    def read(self, file_path: str | os.PathLike[str] | Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """The object saved at `file_path` (a zarchive archive, or a file the real ZANJ wrote).
        FileNotFoundError when there is no file there, as in ZANJ."""
        if isinstance(file_path, (str, os.PathLike)):
            path = os.fspath(file_path)
            if not os.path.exists(path):
                raise FileNotFoundError(f"file not found: {path}")
            if not os.path.isfile(path):
                raise FileNotFoundError(f"not a file: {path}")
        return super().read(file_path, **kwargs)


def _as_zip_method(compress: Any) -> int:
    """ZANJ's `compress` attribute: the zip method it stands for."""
    if isinstance(compress, bool):
        return zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    if isinstance(compress, int):
        return compress
    return zipfile.ZIP_STORED if str(compress).lower() == "none" else zipfile.ZIP_DEFLATED


__all__ = [
    "DEFAULT_SERIALIZER_HANDLERS_ZANJ",
    "SUFFIX",
    "ZANJ",
    "LoaderHandler",
    "register_loader_handler",
    "zip_method_to_compress",
]
