"""Training checkpoints: everything a run needs to continue exactly where it stopped, in one archive.

A checkpoint is an ordinary zarchive whose root is a dict laid out as spec/checkpoints.md describes:
"model", "optimizer", "scheduler", "scaler" (state dicts, or a ConfiguredModel as itself), "rng" (every
generator's state) and the caller's own values (epoch, step, metrics...) beside them. `zarchive.read`
gives that dict back as saved; `load_checkpoint` puts each part into the live objects it is given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

import torch

from ..api import ZArchive
from ..engine.browse import OpenedArchive
from ..engine.objpath import join_path
from ..engine.typeref import class_tag, is_model_class, resolve_class
from ..errors import ConfigMismatchError, FormatError, MemberNotFoundError, UnknownTypeError, VersionError
from ..models.configured import ConfiguredModelBase as ConfiguredModel
from ..models.read import MODEL_TAG as CONFIGURED_MODEL
from .rng import GeneratorLike, capture_rng
from .rng import restore_rng as _restore_rng_states

LAYOUT_KEY = "zarchive_checkpoint"
LAYOUT_VERSION = 1
RNG_KEY = "rng"
PARTS = ("model", "optimizer", "scheduler", "scaler")
RESERVED = frozenset({LAYOUT_KEY, RNG_KEY, *PARTS})
_MISMATCH = (RuntimeError, ValueError, KeyError, TypeError, IndexError)

PathLike = str | os.PathLike[str]


def save_checkpoint(
    path: PathLike,
    model: Any = None,
    optimizer: Any = None,
    scheduler: Any = None,
    scaler: Any = None,
    *,
    generators: Mapping[str, GeneratorLike] | None = None,
    za: ZArchive | None = None,
    compress_weights: bool = False,
    **extra: Any,
) -> str:
    """Save a training checkpoint to `path` (atomically) and return the path.

    model: an nn.Module (its state dict is saved) or a ConfiguredModel (saved whole, so the checkpoint
        alone rebuilds it); optimizer, scheduler, scaler: anything with state_dict()/load_state_dict().
        Each may also be a dict {name: object} (e.g. a GAN's two models and two optimizers).
    generators: your own generator objects (np.random.Generator, torch.Generator, random.Random...)
        whose states are saved beside the global ones (Python, numpy, torch CPU and CUDA).
    za: a ZArchive with the settings to save with (compression, durability).
    compress_weights: store the weights and the optimizer's states (Adam moments) byte-grouped and
        compressed (ZArchive(compress_weights=True)); without za only.
    extra: anything else the archive can hold (epoch=3, step=1200, metrics=<DataFrame>, config=...).
    Nothing here draws from a random generator, so saving does not change the run.
    """
    root = _checkpoint_root("save_checkpoint", (model, optimizer, scheduler, scaler), generators, extra)
    if za is not None and compress_weights:
        raise TypeError("save_checkpoint: pass compress_weights=True to the ZArchive given as za, not beside it")
    return (za or ZArchive(compress_weights=compress_weights)).save(root, path)


def save_checkpoint_async(
    path: PathLike,
    model: Any = None,
    optimizer: Any = None,
    scheduler: Any = None,
    scaler: Any = None,
    *,
    generators: Mapping[str, GeneratorLike] | None = None,
    za: ZArchive | None = None,
    **extra: Any,
) -> Future[str]:
    """save_checkpoint that returns as soon as the states are copied (ZArchive.save_async): a Future
    of the path. Training may go on (and change the weights and optimizer states) at once; the
    checkpoint holds the states and random generator states of the moment of the call."""
    root = _checkpoint_root("save_checkpoint_async", (model, optimizer, scheduler, scaler), generators, extra)
    return (za or ZArchive()).save_async(root, path)


def _checkpoint_root(
    fn: str, parts: tuple[Any, ...], generators: Mapping[str, GeneratorLike] | None, extra: dict[str, Any]
) -> dict[str, Any]:
    """The dict a checkpoint archive holds (spec/checkpoints.md)."""
    for key in extra:
        if key in RESERVED or key.startswith("$"):
            raise TypeError(f"{fn}: {key!r} is a reserved name in a checkpoint; choose another")
    root: dict[str, Any] = {LAYOUT_KEY: {"layout": LAYOUT_VERSION}}
    for key, obj in zip(PARTS, parts):
        if obj is not None:
            root[key] = _state_of(obj, key, whole_models=key == "model")
    root[RNG_KEY] = capture_rng(generators)
    root.update(extra)
    return root


def load_checkpoint(
    path: PathLike | bytes,
    model: Any = None,
    optimizer: Any = None,
    scheduler: Any = None,
    scaler: Any = None,
    *,
    generators: Mapping[str, GeneratorLike] | None = None,
    restore_rng: bool = True,
    map_location: Any = None,
    dtype: Any = None,
    strict: bool = True,
    za: ZArchive | None = None,
) -> dict[str, Any]:
    """Load a checkpoint into the live objects given; return every part that was not loaded into one.

    model/optimizer/scheduler/scaler: live objects (or dicts of them, as saved) whose
        load_state_dict() receives the saved state. A model saved as a ConfiguredModel must match the
        live one's class and config. Optimizer state moves to its parameters' devices
        (Optimizer.load_state_dict's rule) and is copied out of the file, so the checkpoint file can be
        deleted or overwritten afterwards.
    generators: your own generator objects, as given to save_checkpoint, to restore.
    restore_rng: set the Python, numpy, torch (CPU and CUDA) generators, and `generators`, to their
        saved states; done last, after anything that might draw from them.
    map_location, dtype: as for zarchive.read (the RNG states always load on the CPU, unconverted).
    strict: passed to the model's load_state_dict.
    The result holds the extra values (epoch, metrics...) and each part without a live object, e.g.
    result["model"] is the saved state dict (or the ConfiguredModel) when no model was given, and
    result["rng"] the saved RNG states when restore_rng is False.
    """
    live = dict(zip(PARTS, (model, optimizer, scheduler, scaler)))
    out: dict[str, Any] = {}
    rng_states: Any = None
    with (za or ZArchive()).open(path) as arc:
        _check_layout(arc)
        keys = arc.keys("")
        for key, target in live.items():
            if target is not None and key not in keys:
                raise MemberNotFoundError(
                    f"the checkpoint has no {key!r} to load into the given {type(target).__qualname__}", path=key
                )
        loader = _PartLoader(arc, map_location, dtype, strict)
        for key in keys:
            if key == LAYOUT_KEY:
                continue
            if key == RNG_KEY and restore_rng:
                rng_states = arc.get(key)  # CPU, unconverted: the generators take nothing else
            elif live.get(key) is not None:
                loader.load_into(live[key], [key])
            else:
                out[key] = arc.get(key, map_location=map_location, dtype=dtype)
    if restore_rng:
        if rng_states is None:
            raise MemberNotFoundError("the checkpoint has no RNG states (pass restore_rng=False)", path=RNG_KEY)
        _restore_rng_states(rng_states, generators)
    return out


def _check_layout(arc: OpenedArchive) -> None:
    root = arc.node("")
    if not isinstance(root, dict) or "$type" in root:
        raise FormatError("not a checkpoint: the archive's root is not a plain dict", path="")
    marker = root.get(LAYOUT_KEY)
    if marker is None:  # a dict saved "the plain way" with the same keys reads as well
        return
    layout = marker.get("layout") if isinstance(marker, dict) else None
    if type(layout) is not int:
        raise FormatError("bad checkpoint layout record", path=LAYOUT_KEY)
    if layout > LAYOUT_VERSION:
        raise VersionError(
            f"checkpoint layout {layout} is newer than this zarchive reads ({LAYOUT_VERSION}): upgrade zarchive",
            path=LAYOUT_KEY,
        )


def _state_of(obj: Any, key: str, *, whole_models: bool) -> Any:
    if isinstance(obj, Mapping) and not hasattr(obj, "state_dict"):
        out: dict[str, Any] = {}
        for name, item in obj.items():
            if not isinstance(name, str) or name.startswith("$"):
                raise TypeError(f"save_checkpoint: names in {key}= must be strings not starting with '$', not {name!r}")
            out[name] = _state_of(item, f"{key}/{name}", whole_models=whole_models)
        return out
    if whole_models and isinstance(obj, ConfiguredModel):
        return obj
    state_dict = getattr(obj, "state_dict", None)
    if not callable(state_dict):
        raise TypeError(f"save_checkpoint: {key}= is a {type(obj).__qualname__}, which has no state_dict()")
    return state_dict()


class _PartLoader:
    """Reads parts of an open checkpoint into live objects (load_state_dict), one object path at a time."""

    def __init__(self, arc: OpenedArchive, map_location: Any, dtype: Any, strict: bool) -> None:
        self.arc, self.map_location, self.dtype, self.strict = arc, map_location, dtype, strict

    def get(self, path: list[str]) -> Any:
        return self.arc.get(join_path(path), map_location=self.map_location, dtype=self.dtype)

    def load_into(self, target: Any, path: list[str]) -> None:
        where = join_path(path)
        if isinstance(target, Mapping) and not hasattr(target, "load_state_dict"):
            node = self.arc.node(where)
            saved = sorted(node) if isinstance(node, dict) and "$type" not in node else None
            if saved != sorted(target):
                raise ConfigMismatchError(
                    f"the checkpoint holds {saved if saved is not None else 'one object'} here, the live "
                    f"objects are {sorted(target)}",
                    path=where,
                )
            for name, item in target.items():
                self.load_into(item, [*path, name])
            return
        if isinstance(target, torch.nn.Module):
            self._load_model(target, path)
            return
        load = getattr(target, "load_state_dict", None)
        if not callable(load):
            raise TypeError(
                f"load_checkpoint: {where}= is a {type(target).__qualname__}, which has no load_state_dict()"
            )
        state = _own_memory(self.get(path))
        try:
            load(state)
        except _MISMATCH as e:
            raise ConfigMismatchError(
                f"the saved state does not fit the {type(target).__qualname__}: {type(e).__name__}: {str(e)[:1000]}",
                path=where,
            ) from e

    def _load_model(self, target: torch.nn.Module, path: list[str]) -> None:
        node = self.arc.node(join_path(path))
        if isinstance(node, dict) and node.get("$type") == CONFIGURED_MODEL:
            if isinstance(target, ConfiguredModel):
                self._check_model(target, node, path)
            path = [*path, "state_dict"]  # the weights alone: no need to build the saved model
        state = self.get(path)
        try:
            target.load_state_dict(state, strict=self.strict)
        except _MISMATCH as e:
            raise ConfigMismatchError(
                f"the saved weights do not fit the {type(target).__qualname__}: {str(e)[:1000]}", path=join_path(path)
            ) from e

    def _check_model(self, target: ConfiguredModel[Any], node: dict[str, Any], path: list[str]) -> None:
        tag, where = node.get("class"), join_path(path)
        if tag != class_tag(type(target)):
            try:
                same = resolve_class(tag, is_model_class, what="ConfiguredModel", path=where) is type(target)
            except UnknownTypeError:
                same = False
            if not same:
                raise ConfigMismatchError(
                    f"the checkpoint holds a {str(tag)[:200]} model, the live model is a {class_tag(type(target))}",
                    path=where,
                )
        saved_config = self.arc.get(join_path([*path, "config"]))
        if not _same_config(saved_config, target.config):
            shown = f"{saved_config!r} != {target.config!r}"[:2000]
            raise ConfigMismatchError(
                f"the checkpoint's model config differs from the live model's: {shown}",
                path=join_path([*path, "config"]),
            )


def _same_config(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except (ValueError, RuntimeError, TypeError):  # fields whose == is elementwise (arrays, tensors)
        return type(a) is type(b) and repr(a) == repr(b)


def _own_memory(obj: Any) -> Any:
    """`obj` with every tensor that borrows the archive's memory replaced by its own copy.

    Tensors read with `mmap=True` view the mapped file; a live optimizer keeps its state tensors for the
    rest of the run, which would keep the file mapped (and its disk space in use after it is deleted).
    Containers are rebuilt as the same classes; a tensor met twice is copied once.
    """
    memo: dict[int, torch.Tensor] = {}

    def walk(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            if x.device.type == "meta" or x.untyped_storage().resizable():
                return x
            got = memo.get(id(x))
            if got is None:
                got = memo[id(x)] = _copy_tensor(x)
            return got
        if isinstance(x, dict):
            new = type(x)() if type(x) is not dict else {}
            if hasattr(x, "default_factory"):
                new.default_factory = x.default_factory  # type: ignore[attr-defined]
            for k, v in x.items():
                new[k] = walk(v)
            meta = getattr(x, "_metadata", None)
            if meta is not None:
                new._metadata = meta  # type: ignore[attr-defined]  # noqa: SLF001 - torch state-dict data (see _compat)
            return new
        if type(x) is list:
            return [walk(v) for v in x]
        if type(x) is tuple:
            return tuple(walk(v) for v in x)
        return x

    return walk(obj)


def _copy_tensor(t: torch.Tensor) -> torch.Tensor:
    out = t.detach().clone(memory_format=torch.preserve_format)
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(out, requires_grad=t.requires_grad)
    return out.requires_grad_(t.requires_grad) if t.requires_grad else out
