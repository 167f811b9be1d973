"""The module-level shortcuts: `zarchive.save`, `save_async`, `read`, `open`, `verify` and `audit`,
each a ZArchive with its settings given as keywords. An unknown keyword is a TypeError that names
the function, suggests the closest keyword, and says what zarchive does instead of torch.load's
habits (`weights_only=`, `pickle_module=`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any

from .api import PathLike, StorageOptions, ZArchive
from .deploy import DynamicAxes, ExportErrors
from .engine.browse import OpenedArchive
from .engine.plan import TensorsAs, Unresolved
from .engine.verify_result import VerifyResult


def audit(file_path: PathLike | bytes | Any, *, storage_options: StorageOptions = None) -> dict[str, list[str]]:
    """Every class and callable ('module:QualName') that reading the file would construct or call,
    each with the object paths where it occurs: the classes it names (dataclasses, named tuples,
    enums, ConfiguredModels and their configs), their field functions, defaultdict factories,
    handlers from outside zarchive and registered ZANJ loaders it picks. `trusted=` checks this same
    list before anything is built. The result's `.exports` lists the archive's exports (member, kind,
    what opening one runs; a read never does). Reads the manifest only (and .jsonl members whose
    lines are nodes); never imports, constructs, calls or refuses a class."""
    with ZArchive(verify=True).open(file_path, storage_options=storage_options) as arc:
        return arc.audit()


# torch.load keywords people pass out of habit, and what zarchive does instead
_TORCH_HABITS = {
    "weights_only": "zarchive never runs code from a file (no pickle), so every read is already as safe as "
    "torch.load(weights_only=True); to limit which classes a read may build, pass trusted=[...]",
    "pickle_module": "zarchive never uses pickle",
}


@functools.cache
def _settings_names() -> frozenset[str]:
    """The keywords ZArchive(...) takes: what the module functions pass through as settings (looked
    up once: inspect.signature costs 0.1 ms, a tenth of opening an archive for one tensor)."""
    import inspect

    return frozenset(p for p in inspect.signature(ZArchive.__init__).parameters if p != "self")


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

            close = difflib.get_close_matches(key, [*own, *sorted(known)], n=1)
            if close:
                message += f"; did you mean {close[0]!r}?"
        raise TypeError(message)
    return ZArchive(**settings)


def save(
    obj: Any,
    file_path: PathLike | Any,
    *,
    storage_options: StorageOptions = None,
    export: Sequence[str] = (),
    example_inputs: tuple[Any, ...] | None = None,
    export_errors: ExportErrors = "raise",
    dynamic_axes: DynamicAxes | None = None,
    **settings: Any,
) -> str:
    """`ZArchive(**settings).save(obj, file_path, ...)` (see ZArchive.save for export= and dynamic_axes=)."""
    own = ("storage_options", "export", "example_inputs", "export_errors", "dynamic_axes")
    return _archive("save", own, settings).save(
        obj,
        file_path,
        storage_options=storage_options,
        export=export,
        example_inputs=example_inputs,
        export_errors=export_errors,
        dynamic_axes=dynamic_axes,
    )


def save_async(
    obj: Any, file_path: PathLike | Any, *, storage_options: StorageOptions = None, **settings: Any
) -> Future[str]:
    """`ZArchive(**settings).save_async(obj, file_path)`: returns once the data is copied."""
    za = _archive("save_async", ("storage_options",), settings)
    return za.save_async(obj, file_path, storage_options=storage_options)


def read(
    file_path: PathLike | bytes | Any,
    *,
    map_location: Any = None,
    dtype: Any = None,
    lazy: bool = True,
    storage_options: StorageOptions = None,
    trusted: Iterable[type | str | Callable[..., Any]] | None = None,
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
    trusted: Iterable[type | str | Callable[..., Any]] | None = None,
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
