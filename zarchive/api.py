"""ZArchive: the settings and handler chain of a save or read, and the module-level shortcuts."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .container.archive_reader import DEFAULT_MAX_DECOMPRESSED, ArchiveReader
from .container.archive_writer import atomic_write, choose_codecs, write_archive
from .container.source import ByteSource, BytesSource, MappedSource
from .context import SaveContext
from .errors import FormatError, MemberNotFoundError
from .handlers.base import Handler
from .lazy import LazyArchive
from .metadata import build_metadata
from .options import CompressArg, ErrorMode, Settings, parse_compress
from .protocol import FORMAT_NAME, FORMAT_VERSION
from .registry import HandlerRegistry

PathLike = str | os.PathLike[str]


class ZArchive:
    """Saves objects to `.zarc` archives and reads them back.

    compress: False/"none", True/"zstd" (level 3, the default) or a zstd level. Tables, lists and
        JSON-like members are compressed; arrays and tensors only where a sample shows it pays, so
        float weights stay uncompressed and can be mapped from the file.
    external_array_threshold: arrays and tensors with more elements than this go to their own
        members; smaller numpy arrays are written inline in the manifest.
    external_list_threshold: lists longer than this go to a `.jsonl` member.
    handlers_pre: handlers tried before the built-in ones (and before registered ones).
    custom_settings: any JSON, recorded in the metadata.
    error_mode: "except", "warn" (default) or "ignore", for recoverable mismatches such as a
        dataclass field that the class no longer has.
    durable: fsync the archive and its directory before save() returns.
    verify: check checksums of every member read (switch off only for trusted files).
    """

    def __init__(
        self,
        compress: CompressArg = True,
        external_array_threshold: int = 256,
        external_list_threshold: int = 256,
        handlers_pre: Sequence[Handler] = (),
        custom_settings: dict[str, Any] | None = None,
        error_mode: Any = ErrorMode.WARN,
        *,
        durable: bool = True,
        verify: bool = True,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    ) -> None:
        self.settings = Settings(
            compress_level=parse_compress(compress),
            external_array_threshold=external_array_threshold,
            external_list_threshold=external_list_threshold,
            error_mode=ErrorMode.parse(error_mode),
            custom_settings=custom_settings,
            durable=durable,
            verify=verify,
        )
        self.max_decompressed = max_decompressed
        self.registry = HandlerRegistry.build(handlers_pre)

    def __repr__(self) -> str:
        s = self.settings
        return (
            f"ZArchive(compress={s.compress_level!r}, external_array_threshold={s.external_array_threshold}, "
            f"external_list_threshold={s.external_list_threshold}, error_mode={s.error_mode.value!r})"
        )

    # --- saving ---
    def save(self, obj: Any, file_path: PathLike) -> str:
        """Write `obj` to exactly `file_path` (parent folders created), atomically; return the path."""
        path = os.fspath(file_path)
        if not path:
            raise ValueError("file_path is empty")
        manifest, members, metadata = self._plan(obj)
        level = self.settings.compress_level
        atomic_write(
            path, lambda f: write_archive(f, manifest, members, metadata, level), durable=self.settings.durable
        )
        return path

    def _plan(self, obj: Any) -> tuple[dict[str, Any], list[Any], dict[str, Any]]:
        ctx = SaveContext(self.registry, self.settings)
        root = ctx.save(obj)
        ctx.finalize()
        choose_codecs(ctx.members, self.settings.compress_level)
        manifest = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "root": root}
        return manifest, ctx.members, build_metadata(self.settings)

    # --- reading ---
    def open(self, file_path: PathLike | bytes, *, lazy: bool = True) -> LazyArchive:
        """Open an archive without loading it: only the zip directory, manifest and metadata are read."""
        source: ByteSource
        if isinstance(file_path, (bytes, bytearray)):
            source = BytesSource(file_path)
        else:
            path = os.fspath(file_path)
            try:
                source = MappedSource(path) if lazy else BytesSource(_read_all(path))
            except FileNotFoundError:
                raise MemberNotFoundError(f"no archive at {path!r}") from None
            except IsADirectoryError:
                raise FormatError(f"{path!r} is a directory, not an archive") from None
        try:
            reader = ArchiveReader(source, verify=self.settings.verify, max_decompressed=self.max_decompressed)
        except BaseException:
            source.close()
            raise
        return LazyArchive(reader, self.registry, self.settings)

    def read(
        self, file_path: PathLike | bytes, *, map_location: Any = None, dtype: Any = None, lazy: bool = True
    ) -> Any:
        """Load a whole archive; the type of the result comes from the manifest.

        map_location: None (CPU), "saved", a device, a dict {saved: new}, or "meta".
        dtype: cast floating-point tensors to this dtype.
        lazy: True maps uncompressed data from the file (pages are read when first touched);
            False reads the file into memory first.
        """
        with self.open(file_path, lazy=lazy) as arc:
            return arc.load(map_location=map_location, dtype=dtype)


def _read_all(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def save(obj: Any, file_path: PathLike, **settings: Any) -> str:
    """`ZArchive(**settings).save(obj, file_path)`."""
    return ZArchive(**settings).save(obj, file_path)


def read(
    file_path: PathLike | bytes, *, map_location: Any = None, dtype: Any = None, lazy: bool = True, **settings: Any
) -> Any:
    """`ZArchive(**settings).read(file_path, ...)`."""
    return ZArchive(**settings).read(file_path, map_location=map_location, dtype=dtype, lazy=lazy)


def open(file_path: PathLike | bytes, *, lazy: bool = True, **settings: Any) -> LazyArchive:  # noqa: A001
    """`ZArchive(**settings).open(file_path)`: a lazy view of an archive; use it as a context manager."""
    return ZArchive(**settings).open(file_path, lazy=lazy)


def verify(file_path: PathLike) -> list[tuple[str, str]]:
    """Check every member against its recorded checksums; [] when the archive is intact."""
    with ZArchive(verify=False).open(file_path) as arc:
        return arc.verify()
