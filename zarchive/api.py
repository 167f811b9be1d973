"""ZArchive: the settings and handler chain of a save or read (the module-level shortcuts that
take the same settings as keywords, zarchive.save/read/open/verify, are in shortcuts.py)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from .container.archive_reader import DEFAULT_MAX_DECOMPRESSED, ArchiveReader
from .container.archive_writer import MemberPlan, choose_codecs
from .container.compress_early import EarlyCompression
from .container.open_gate import open_regular
from .container.remote import is_file_object, is_url, open_source
from .container.source import ByteSource, BytesSource, open_local
from .deploy import DynamicAxes, ExportErrors, check_dynamic_axes
from .deploy import check_arguments as check_export_arguments
from .engine.browse import OpenedArchive
from .engine.context import SaveContext
from .engine.gcpause import gc_paused
from .engine.lazy import LazyArchive
from .engine.plan import DEFAULT_MAX_NODES, ReadPolicy, TensorsAs, Unresolved
from .engine.protocol import FORMAT_NAME, FORMAT_VERSION
from .engine.registry import HandlerRegistry
from .errors import ArchiveNotFoundError, FormatError, NotAZipError
from .handlers.base import Handler
from .handlers.omegaconf_ import to_plain as config_to_plain
from .nodes.exports import EXPORTS_KEY
from .options import CompressArg, ErrorMode, Settings, parse_compress
from .saving.background import path_key, submit, wait_for
from .saving.check import check_readable
from .saving.metadata import build_metadata
from .saving.progress import check_setting as check_progress
from .saving.progress import for_read as progress_for_read
from .saving.write import PlannedSave, check_target, write_planned

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
    external_array_threshold: numpy arrays with this many elements or more go to their own members
        (as ZANJ counts); smaller ones are written inline in the manifest. Tensors always have members.
    external_list_threshold: lists longer than this go to a `.jsonl` member.
    handlers_pre: handlers tried before the built-in ones (and before registered ones).
    custom_settings: any JSON, recorded in the metadata.
    error_mode: "except", "warn" (default), "log" (the "zarchive" logger) or "ignore", for
        recoverable mismatches such as a dataclass field that the class no longer has.
    durable: fsync the archive and its directory before save() returns.
    verify: check checksums of every member read (switch off only for trusted files).
    mmap: False (default): arrays and tensors read from a local file live in memory of the reader's
        own, read with pread (only what is asked for; big members on several threads, checksummed as
        they land), so nothing another process does to the file afterwards can touch them. True:
        uncompressed arrays and tensors are zero-copy views of a private mapping of the file (a full
        read costs page faults, not a copy, and no anonymous memory), with the hazard of every mapping
        reader (safetensors' load_file, torch.load(mmap=True)): if another process truncates the file
        while they live (`cp` over it, `rsync --inplace`, a writer that rewrites in place; zarchive's
        own saves replace files and never do), touching them kills the interpreter with SIGBUS. Either
        way a fetch after the file shrank raises IntegrityError, and verify=False never returns bytes
        not read from it. The cost of the copy is measured in the README ("Lazy reads and memory").
    progress: None shows a tqdm bar for saves and reads of 64 MiB or more when stderr is a terminal;
        True always shows one, False never.
    max_nodes, max_read_bytes: a read refuses a file whose manifest has more nodes, or whose values
        would allocate more bytes (decompressed members, inline data, members read into memory; members
        mapped (mmap=True) cost nothing), than these, checked before anything is built. max_read_bytes=None: 1 GiB + 64 x the file's size.

    Paths may also be fsspec URLs ("s3://bucket/run.zarc", "memory://x.zarc"; `storage_options=` go
    to fsspec) or binary file objects; see `zarchive.container.remote`.
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
        mmap: bool = False,
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
    def save(
        self,
        obj: Any,
        file_path: PathLike | Any,
        *,
        storage_options: StorageOptions = None,
        export: Sequence[str] = (),
        example_inputs: tuple[Any, ...] | None = None,
        export_errors: ExportErrors = "raise",
        dynamic_axes: DynamicAxes | None = None,
    ) -> str:
        """Write `obj` to exactly `file_path` (parent folders created), atomically; return the path.

        file_path may be an fsspec URL (written locally, then uploaded) or a writable binary file
        object (the archive is written at its position; it is not closed). A save_async to the same
        path that is still being written is waited for first.

        export: for a torch module, "onnx" and/or "torchscript": the model exported (in eval mode)
            into the members `exports/model.onnx` and `exports/model.torchscript.pt`, each run on
            `example_inputs` (a tuple of tensors) and checked against the model; what was checked is
            recorded (`arc.exports`). An export that fails or disagrees raises SaveError naming it;
            export_errors="warn" saves without it instead, with an ExportWarning. Needs the `deploy`
            extra for ONNX.
        dynamic_axes: for ONNX, the axes left free, `{name: {axis: dimension name}}` over the export's
            input and output names ("input", or "input_0", "input_1", ...; "output", ...), e.g.
            `{"input": {0: "batch", 1: "sequence"}, "output": {0: "batch", 1: "sequence"}}`; the export
            is then also checked with every free axis at another size. Default: the first axis of every
            input and output ("batch")."""
        check_target(file_path, storage_options, obj)
        planned = self.plan_save(
            obj, export=export, example_inputs=example_inputs, export_errors=export_errors, dynamic_axes=dynamic_axes
        )
        wait_for(path_key(file_path))
        return self._write(planned, file_path, storage_options)

    def save_async(self, obj: Any, file_path: PathLike | Any, *, storage_options: StorageOptions = None) -> Future[str]:
        """Like save, but return as soon as the bytes to write are copied: a Future of the path.

        The tensors and arrays of `obj` are copied into a host buffer that is reused from save to
        save (pinned memory when CUDA is available), so the caller may change them as soon as this
        returns; the archive is then written on a background thread, atomically as by save. Errors
        (the ZArchiveError a save would raise, or OSError) are the future's exception. A save to a
        path whose earlier save_async is still being written waits for it first; saves are written
        one at a time, in order, and an interpreter exit waits for them (see zarchive.saving.background)."""
        check_target(file_path, storage_options, obj)
        return submit(
            path_key(file_path),
            lambda stage: self.plan_save(obj, stage=stage),
            lambda planned: self._write(planned, file_path, storage_options),
        )

    def plan_save(
        self,
        obj: Any,
        *,
        stage: Callable[[list[MemberPlan]], None] | None = None,
        export: Sequence[str] = (),
        example_inputs: tuple[Any, ...] | None = None,
        export_errors: ExportErrors = "raise",
        dynamic_axes: DynamicAxes | None = None,
    ) -> PlannedSave:
        """Phase one of a save, before the target is touched: walk `obj` with the handler chain, plan
        its members (and its exports: see save), encode the manifest and check it is readable (see
        write_check). `stage(members)` runs once the members are known, before their codecs are
        chosen (save_async copies their bytes there)."""
        names = check_export_arguments(export, example_inputs, export_errors)
        axes = check_dynamic_axes(dynamic_axes)
        if axes is not None and "onnx" not in names:
            raise ValueError("dynamic_axes= applies to an ONNX export: pass export=('onnx', ...) too")
        level = self.settings.compress_level
        # members compressed while the walk goes on; not where `stage` copies their bytes after it
        early = EarlyCompression(level) if level is not None and stage is None else None
        with gc_paused():
            ctx = SaveContext(self.registry, self.settings, on_member=early.offer if early is not None else None)
            try:
                root = ctx.save(obj)
                ctx.finalize()
            except BaseException:
                if early is not None:
                    early.cancel()
                raise
            if early is not None:
                early.walk_done()
            manifest = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "root": root}
            members = ctx.members
            if names:
                from .deploy.build import build_exports  # (imports torch: obj is a torch module already)

                exports, more = build_exports(obj, names, example_inputs, export_errors, axes)
                if exports is not None:
                    manifest[EXPORTS_KEY] = exports
                    members = [*members, *more]
            if stage is not None:
                stage(members)
            choose_codecs(members, self.settings.compress_level, weights=self.settings.compress_weights)
            checked = check_readable(manifest, members, self.registry)
        return PlannedSave(checked, members, build_metadata(self.settings))

    def _write(self, planned: PlannedSave, file_path: PathLike | Any, storage_options: StorageOptions) -> str:
        s = self.settings
        return write_planned(
            planned,
            file_path,
            level=s.compress_level,
            durable=s.durable,
            progress=self.progress,
            storage_options=storage_options,
        )

    # --- reading ---
    def open(
        self,
        file_path: PathLike | bytes | Any,
        *,
        lazy: bool = True,
        storage_options: StorageOptions = None,
        trusted: Iterable[type | str | Callable[..., Any]] | None = None,
        unresolved: Unresolved = "raise",
        tensors: TensorsAs = "torch",
    ) -> OpenedArchive:
        """Open an archive without loading it: only the zip directory, manifest and metadata are read.
        ZANJ files, and torch.save (zip format), .safetensors, .npy and .npz files, are recognised by
        their bytes and opened read-only behind the same interface (zarchive.formats.zanj, zarchive.formats.foreign).

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
        elif isinstance(file_path, str) and is_url(file_path):
            if file_path.endswith("/"):  # a folder: a sharded checkpoint on a store (zarchive.dcp)
                return self._open_remote_folder(file_path, storage_options, policy)
            try:
                source = open_source(file_path, lazy=lazy, storage_options=storage_options, mmap=self.mmap)
            except FormatError as e:
                if type(e) is not FormatError:  # (a plain FormatError: the URL names a folder, not a file)
                    raise
                return self._open_remote_folder(file_path, storage_options, policy)
        elif is_file_object(file_path):
            source = open_source(file_path, lazy=lazy, storage_options=storage_options, mmap=self.mmap)
        else:
            if storage_options:
                raise TypeError("storage_options apply to URLs only")
            path = os.fspath(file_path)
            if path.endswith(".safetensors.index.json"):
                return self._open_folder(path, policy)
            try:
                source = open_local(path, mmap=self.mmap, what="archive") if lazy else BytesSource(_read_all(path))
            except FileNotFoundError:
                raise ArchiveNotFoundError(f"no archive at {path!r}") from None
            except IsADirectoryError:  # (the gate found no regular file: opening it is all it cost)
                if not os.path.isdir(path):  # a FIFO, socket or device: the open gate's own message
                    raise
                return self._open_folder(path, policy)
        try:
            with gc_paused(keep=True):  # (the manifest and metadata live as long as the open archive)
                reader = ArchiveReader(
                    source,
                    verify=self.settings.verify,
                    max_decompressed=self.max_decompressed,
                    max_read_bytes=self.max_read_bytes,
                )
        except FormatError as e:
            from .formats.foreign import open_if_foreign  # torch.save, .safetensors, .npy, .npz (known by their bytes)
            from .formats.zanj import open_if_zanj  # a ZANJ file (known by its members) gets the ZANJ reader

            opened = open_if_zanj(source, self, policy) or open_if_foreign(source, self, policy)
            if opened is None:
                source.close()
                if isinstance(e, NotAZipError) and isinstance(file_path, (str, os.PathLike)):
                    raise NotAZipError(f"{os.fspath(file_path)!r}: {e.message}", member=e.member, path=e.path) from None
                raise
            return opened
        except BaseException:
            source.close()
            raise
        return LazyArchive(reader, self.registry, self.settings, policy)

    def _open_folder(self, path: str, policy: ReadPolicy) -> OpenedArchive:
        """A checkpoint stored as several files: a Hugging Face sharded folder (or its index file), or
        a DCP directory (zarchive.dcp); a folder that is neither says what was looked for."""
        from .formats.foreign import open_hf_folder

        opened = open_hf_folder(path, self, policy)
        if opened is not None:
            return opened
        from .dcp.index import INDEX_NAME
        from .dcp.view import is_sharded, open_sharded

        if not os.path.isdir(path):
            raise ArchiveNotFoundError(f"no archive at {path!r}")
        if is_sharded(path):
            return open_sharded(path, self, policy)
        raise FormatError(
            f"{path!r} is a directory, not an archive, and holds no sharded checkpoint zarchive reads: no Hugging "
            "Face index (*.safetensors.index.json, as save_pretrained(..., max_shard_size=...) writes) and no "
            f"{INDEX_NAME} (the DCP index zarchive.dcp.ZArchiveWriter writes last: a save killed before then "
            "leaves none)"
        )

    def _open_remote_folder(self, url: str, storage_options: StorageOptions, policy: ReadPolicy) -> OpenedArchive:
        """A folder named by a URL: a `file://` folder as a local one, else a sharded checkpoint."""
        from .dcp.location import Location
        from .dcp.view import is_sharded, open_sharded

        at = Location(url, storage_options)
        if at.local is not None:
            return self._open_folder(at.local, policy)
        if is_sharded(at):
            return open_sharded(at, self, policy)
        if not at.is_dir():
            raise ArchiveNotFoundError(f"no archive at {url!r}")
        return open_sharded(at, self, policy)  # (its message: what was looked for)

    def read(
        self,
        file_path: PathLike | bytes | Any,
        *,
        map_location: Any = None,
        dtype: Any = None,
        lazy: bool = True,
        storage_options: StorageOptions = None,
        trusted: Iterable[type | str | Callable[..., Any]] | None = None,
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
        trusted: classes, functions (or their 'module:QualName' tags) this read may construct or
            call; any other the file names or picks (a class, a handler from outside zarchive, a
            registered ZANJ loader: what zarchive.audit lists) raises UntrustedTypeError before
            anything is built. Built-in types are always allowed; a class brings its field functions
            and a model its declared config class. None (default): any class that is registered or
            already imported, any registered handler or loader.
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


def _read_all(path: str) -> bytes:
    with open_regular(path, what="archive") as f:  # a FIFO or device is refused without blocking
        return f.read()
