"""ZArchive: the settings and handler chain of a save or read, and the module-level shortcuts."""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .browse import OpenedArchive
from .container.archive_reader import DEFAULT_MAX_DECOMPRESSED, ArchiveReader
from .container.archive_writer import atomic_write, choose_codecs, write_archive
from .container.source import ByteSource, BytesSource, open_local
from .context import SaveContext
from .errors import FormatError, MemberNotFoundError
from .gcpause import gc_paused
from .handlers.base import Handler
from .handlers.omegaconf_ import to_plain as config_to_plain
from .lazy import LazyArchive
from .metadata import build_metadata
from .options import CompressArg, ErrorMode, Settings, parse_compress
from .plan import DEFAULT_MAX_NODES, ReadPolicy, TensorsAs, Unresolved
from .progress import check_setting as check_progress
from .progress import for_read as progress_for_read
from .progress import for_save as progress_for_save
from .protocol import FORMAT_NAME, FORMAT_VERSION
from .registry import HandlerRegistry
from .remote import is_file_object, is_url, open_source, save_to
from .verify_result import VerifyResult
from .write_check import CheckedManifest, check_read_budget, check_readable

PathLike = str | os.PathLike[str]
StorageOptions = Mapping[str, Any] | None


class ZArchive:
    """Saves objects to `.zarc` archives and reads them back.

    compress: False/"none", True/"zstd" (level 3, the default) or a zstd level. Tables, lists and
        JSON-like members are compressed; arrays and tensors only where a sample shows it pays, so
        float weights stay uncompressed and can be mapped from the file.
    compress_weights: True stores float and complex tensors and arrays (weights, optimizer states)
        byte-grouped and zstd-compressed in chunks where a sample shows it pays (smaller files;
        they are decompressed on reading instead of mapped). Default False. Independent of `compress`.
    external_array_threshold: arrays and tensors with more elements than this go to their own
        members; smaller numpy arrays are written inline in the manifest.
    external_list_threshold: lists longer than this go to a `.jsonl` member.
    handlers_pre: handlers tried before the built-in ones (and before registered ones).
    custom_settings: any JSON, recorded in the metadata.
    error_mode: "except", "warn" (default) or "ignore", for recoverable mismatches such as a
        dataclass field that the class no longer has.
    durable: fsync the archive and its directory before save() returns.
    verify: check checksums of every member read (switch off only for trusted files).
    mmap: True (default): uncompressed arrays and tensors read from a local file are zero-copy views
        of a private mapping of the file (full reads cost page faults, not a copy; no anonymous
        memory). If another process truncates the file while they live, touching them kills the
        interpreter with SIGBUS, as with safetensors' load_file or torch.load(mmap=True); zarchive's
        own saves replace files and never truncate them, but `cp`, `rsync --inplace` or a writer
        that rewrites in place do. False: values are copied into memory of their own (read with
        pread, only what is asked for), so nothing another process does to the file can crash them,
        at the cost of a copy (measured in README "Lazy reads and memory"). Either way a fetch after
        the file shrank raises IntegrityError, and verify=False never returns bytes not read from it.
    progress: None shows a tqdm bar for saves and reads of 64 MiB or more when stderr is a terminal;
        True always shows one, False never.
    max_nodes, max_read_bytes: a read refuses a file whose manifest has more nodes, or whose values
        would allocate more bytes (decompressed members, inline data, members read into memory; members
        mapped (mmap=True) cost nothing), than these, checked before anything is built. max_read_bytes=None: 1 GiB + 64 x the file's size.

    Paths may also be fsspec URLs ("s3://bucket/run.zarc", "memory://x.zarc"; `storage_options=` go
    to fsspec) or binary file objects; see `zarchive.remote`.
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
        mmap: bool = True,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
        max_nodes: int = DEFAULT_MAX_NODES,
        max_read_bytes: int | None = None,
        progress: bool | None = None,
        compress_weights: bool = False,
    ) -> None:
        self.progress = check_progress(progress)
        self.settings = Settings(
            compress_level=parse_compress(compress),
            external_array_threshold=external_array_threshold,
            external_list_threshold=external_list_threshold,
            error_mode=ErrorMode.parse(error_mode),
            custom_settings=config_to_plain(custom_settings),  # e.g. a DictConfig from Hydra
            durable=durable,
            verify=verify,
            compress_weights=compress_weights,
        )
        if not isinstance(mmap, bool):
            raise TypeError(f"mmap must be True or False, not {mmap!r}")
        self.mmap = mmap
        self.max_decompressed = max_decompressed
        self.max_nodes = max_nodes
        self.max_read_bytes = max_read_bytes
        ReadPolicy.make(max_nodes=max_nodes, max_read_bytes=max_read_bytes)  # checked now, not at the first read
        self.registry = HandlerRegistry.build(handlers_pre)

    def __repr__(self) -> str:
        s = self.settings
        return (
            f"ZArchive(compress={s.compress_level!r}, external_array_threshold={s.external_array_threshold}, "
            f"external_list_threshold={s.external_list_threshold}, error_mode={s.error_mode.value!r}"
            + (", compress_weights=True)" if s.compress_weights else ")")
        )

    # --- saving ---
    def save(self, obj: Any, file_path: PathLike | Any, *, storage_options: StorageOptions = None) -> str:
        """Write `obj` to exactly `file_path` (parent folders created), atomically; return the path.

        file_path may be an fsspec URL (written locally, then uploaded) or a writable binary file
        object (the archive is written at its position; it is not closed)."""
        remote = is_url(file_path) or is_file_object(file_path)
        path = "" if remote else os.fspath(file_path)
        if not remote and not path:
            raise ValueError("file_path is empty")
        with gc_paused():
            manifest, members, metadata = self._plan(obj)
        level = self.settings.compress_level
        bar = progress_for_save(self.progress, members, file_path)
        on_member = bar.advance if bar is not None else None

        def check_size(decoded: int, file_size: int) -> None:
            check_read_budget(decoded, manifest.inline_bytes, file_size)

        def write(f: Any) -> None:
            write_archive(f, manifest.data, members, metadata, level, on_member=on_member, check_size=check_size)

        try:
            if remote:
                return save_to(file_path, write, storage_options=storage_options, durable=self.settings.durable)
            if storage_options:
                raise TypeError("storage_options apply to URLs only")
            try:
                atomic_write(path, write, durable=self.settings.durable)
            except PermissionError as e:
                raise _not_writable(path, e) from None
        finally:
            if bar is not None:
                bar.close()
        return path

    def _plan(self, obj: Any) -> tuple[CheckedManifest, list[Any], dict[str, Any]]:
        """The manifest (encoded, and checked to be readable: see write_check), members, metadata."""
        ctx = SaveContext(self.registry, self.settings)
        root = ctx.save(obj)
        ctx.finalize()
        choose_codecs(ctx.members, self.settings.compress_level, weights=self.settings.compress_weights)
        manifest = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "root": root}
        return check_readable(manifest, ctx.members, self.registry), ctx.members, build_metadata(self.settings)

    # --- reading ---
    def open(
        self,
        file_path: PathLike | bytes | Any,
        *,
        lazy: bool = True,
        storage_options: StorageOptions = None,
        trusted: Iterable[type | str] | None = None,
        unresolved: Unresolved = "raise",
        tensors: TensorsAs = "torch",
    ) -> OpenedArchive:
        """Open an archive without loading it: only the zip directory, manifest and metadata are read.

        file_path may be an fsspec URL (then only the byte ranges that are used are fetched) or a
        readable binary file object (left open). trusted, unresolved and tensors apply to every value
        loaded from it (see read)."""
        policy = ReadPolicy.make(
            trusted=trusted,
            unresolved=unresolved,
            tensors=tensors,
            max_nodes=self.max_nodes,
            max_read_bytes=self.max_read_bytes,
        )
        source: ByteSource
        if isinstance(file_path, (bytes, bytearray)):
            source = BytesSource(file_path)
        elif is_url(file_path) or is_file_object(file_path):
            source = open_source(file_path, lazy=lazy, storage_options=storage_options, mmap=self.mmap)
        else:
            if storage_options:
                raise TypeError("storage_options apply to URLs only")
            path = os.fspath(file_path)
            try:
                source = open_local(path, mmap=self.mmap) if lazy else BytesSource(_read_all(path))
            except FileNotFoundError:
                raise MemberNotFoundError(f"no archive at {path!r}") from None
            except IsADirectoryError:
                raise FormatError(f"{path!r} is a directory, not an archive") from None
        try:
            with gc_paused():
                reader = ArchiveReader(source, verify=self.settings.verify, max_decompressed=self.max_decompressed)
        except FormatError:
            from .zanj import open_if_zanj  # a ZANJ file (known by its members) gets the ZANJ reader

            zanj = open_if_zanj(source, self, policy)
            if zanj is None:
                source.close()
                raise
            return zanj
        except BaseException:
            source.close()
            raise
        return LazyArchive(reader, self.registry, self.settings, policy)

    def read(
        self,
        file_path: PathLike | bytes | Any,
        *,
        map_location: Any = None,
        dtype: Any = None,
        lazy: bool = True,
        storage_options: StorageOptions = None,
        trusted: Iterable[type | str] | None = None,
        unresolved: Unresolved = "raise",
        tensors: TensorsAs = "torch",
    ) -> Any:
        """Load a whole archive; the type of the result comes from the manifest.

        Reading plans first (every node checked, every class the file names resolved and checked,
        limits applied) and constructs only once the plan passed.

        map_location: None (CPU), "saved", a device, a dict {saved: new}, or "meta".
        dtype: cast floating-point tensors to this dtype.
        lazy: True reads only what is used, when it is used (mapped with ZArchive(mmap=True));
            False reads the file into memory first. A remote (URL) archive is fetched whole
            either way: everything is needed, so one request beats many ranged ones.
        trusted: classes (or 'module:QualName' tags) this read may construct; any other class the
            file names raises UntrustedTypeError before anything is built. Built-in types are
            always allowed. None (default): any class that is registered or already imported.
        unresolved: "raise" (default) or "generic": a class that cannot be resolved comes back as a
            zarchive.GenericObject holding its tag and decoded fields.
        tensors: "torch" (default) or "numpy": tensors as numpy arrays, without importing torch
            (bfloat16 and float8 need the ml_dtypes package); models come back as GenericObjects.
        """
        whole = is_url(file_path) and not str(file_path).startswith("file://")
        opened = self.open(
            file_path,
            lazy=lazy and not whole,
            storage_options=storage_options,
            trusted=trusted,
            unresolved=unresolved,
            tensors=tensors,
        )
        with opened as arc:
            bar = progress_for_read(self.progress, arc, file_path)
            if bar is None:
                return arc.load(map_location=map_location, dtype=dtype)
            try:
                return arc.load(map_location=map_location, dtype=dtype)
            finally:
                bar.close()


def _not_writable(path: str, e: PermissionError) -> PermissionError:
    """A save refused by the file system is reported for the target, not for the hidden temporary
    file beside it that the save was creating."""
    directory = os.path.dirname(os.path.abspath(path))
    existing = directory
    while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)  # the folders to create start below this one
    reason = e.strerror or str(e)
    if existing != directory:
        why = f"cannot save {path!r}: cannot create its directory in {existing!r}, which is not writable ({reason})"
    elif not os.access(directory, os.W_OK) or os.path.basename(str(e.filename or "")).startswith("."):
        why = f"cannot save {path!r}: the directory {directory!r} is not writable ({reason})"
    else:
        why = f"cannot save {path!r}: {reason}"
    return PermissionError(e.errno, why)  # the message names the path: no `filename` to repeat it


def _read_all(path: str) -> bytes:
    with io.open(path, "rb") as f:  # noqa: UP020 - this module's own open() shadows the builtin
        return f.read()


def audit(file_path: PathLike | bytes | Any, *, storage_options: StorageOptions = None) -> dict[str, list[str]]:
    """Every class tag ('module:QualName') that reading the file would construct or call
    (dataclasses, named tuples, enums, ConfiguredModels, their field functions, defaultdict
    factories), each with the object paths where it occurs. Reads the manifest only (and .jsonl
    members whose lines are nodes); never imports, constructs or refuses a class."""
    with ZArchive(verify=True).open(file_path, storage_options=storage_options) as arc:
        return arc.audit()


# torch.load keywords people pass out of habit, and what zarchive does instead
_TORCH_HABITS = {
    "weights_only": "zarchive never runs code from a file (no pickle), so every read is already as safe as "
    "torch.load(weights_only=True); to limit which classes a read may build, pass trusted=[...]",
    "pickle_module": "zarchive never uses pickle",
}


def _settings_names() -> list[str]:
    """The keywords ZArchive(...) takes: what the module functions pass through as settings."""
    import inspect

    return [p for p in inspect.signature(ZArchive.__init__).parameters if p != "self"]


def _archive(fn: str, own: Sequence[str], settings: dict[str, Any]) -> ZArchive:
    """`ZArchive(**settings)` for the module function `fn`, whose unknown keywords are reported as its own."""
    known = _settings_names()
    for key in settings:
        if key in known:
            continue
        message = f"{fn}() got an unexpected keyword argument {key!r}"
        if key in _TORCH_HABITS:
            message += f": {_TORCH_HABITS[key]}"
        else:
            import difflib

            close = difflib.get_close_matches(key, [*own, *known], n=1)
            if close:
                message += f"; did you mean {close[0]!r}?"
        raise TypeError(message)
    return ZArchive(**settings)


def save(obj: Any, file_path: PathLike | Any, *, storage_options: StorageOptions = None, **settings: Any) -> str:
    """`ZArchive(**settings).save(obj, file_path)`."""
    return _archive("save", ("storage_options",), settings).save(obj, file_path, storage_options=storage_options)


def read(
    file_path: PathLike | bytes | Any,
    *,
    map_location: Any = None,
    dtype: Any = None,
    lazy: bool = True,
    storage_options: StorageOptions = None,
    trusted: Iterable[type | str] | None = None,
    unresolved: Unresolved = "raise",
    tensors: TensorsAs = "torch",
    **settings: Any,
) -> Any:
    """`ZArchive(**settings).read(file_path, ...)`."""
    own = ("map_location", "dtype", "lazy", "storage_options", "trusted", "unresolved", "tensors")
    return _archive("read", own, settings).read(
        file_path,
        map_location=map_location,
        dtype=dtype,
        lazy=lazy,
        storage_options=storage_options,
        trusted=trusted,
        unresolved=unresolved,
        tensors=tensors,
    )


def open(
    file_path: PathLike | bytes | Any,
    *,
    lazy: bool = True,
    storage_options: StorageOptions = None,
    trusted: Iterable[type | str] | None = None,
    unresolved: Unresolved = "raise",
    tensors: TensorsAs = "torch",
    **settings: Any,
) -> OpenedArchive:
    """`ZArchive(**settings).open(file_path)`: a lazy view of an archive; use it as a context manager."""
    own = ("lazy", "storage_options", "trusted", "unresolved", "tensors")
    return _archive("open", own, settings).open(
        file_path,
        lazy=lazy,
        storage_options=storage_options,
        trusted=trusted,
        unresolved=unresolved,
        tensors=tensors,
    )


def verify(file_path: PathLike | Any, *, storage_options: StorageOptions = None) -> VerifyResult:
    """Check every member against its recorded checksums. The result is truthy when the archive is
    intact, falsy when damaged; it is also the list of (member, problem) found (`== []` when intact)."""
    with ZArchive(verify=False).open(file_path, storage_options=storage_options) as arc:
        return arc.verify()
