"""PyTorch Lightning checkpoints as zarchives: a CheckpointIO plugin.

    from zarchive.lightning import ZArchiveCheckpointIO
    trainer = Trainer(plugins=[ZArchiveCheckpointIO(compress="zstd")])   # or za=ZArchive(...)
    trainer.fit(model, ckpt_path="last")                                  # resumes from a zarchive

Every checkpoint Lightning writes (ModelCheckpoint, `trainer.save_checkpoint`) becomes a zarchive:
weights, optimizer and scheduler states, loop progress, callback states and hyperparameters, with no
pickle. Paths may be fsspec URLs (`storage_options=` here, or per save from Lightning). A few values
in a Lightning checkpoint are not data and are converted on the way in:

- `hparams_type` / `datamodule_hparams_type` (a class object, e.g. omegaconf's DictConfig) is stored
  as its "module:QualName" string; on loading, DictConfig/ListConfig come back as those classes and
  any other name stays a string (Lightning then uses its AttributeDict).
- Lightning's `AttributeDict` and `argparse.Namespace` become plain dicts.
- omegaconf configs become plain dicts and lists (interpolations resolved; see zarchive.handlers).
- A hyperparameter that zarchive cannot save (`save_hyperparameters()` of a module taking a
  `loss_fn: nn.Module`, a callable, an open file...) is left out of `hyper_parameters` with one warning
  naming it (per the ZArchive's `error_mode`: "except" raises instead, "log" logs, "ignore" says
  nothing), so training never stops for a checkpoint's sake; resuming works (Lightning does not read
  hyperparameters to resume), and `load_from_checkpoint(path, loss_fn=...)` passes the value again.
Anything else that zarchive cannot save raises SaveError naming its place in the checkpoint.

`LightningModule.load_from_checkpoint` reads with torch.load and cannot read a zarchive (it fails
with torch's "PytorchStreamReader failed locating file data.pkl"). Either call
`zarchive.lightning.load_from_checkpoint(MyModule, path)`, or put `ZArchiveCheckpoints` first among
the module's bases; then `MyModule.load_from_checkpoint(path)` reads zarchives (and still reads
torch.save checkpoints as before):

    class MyModule(ZArchiveCheckpoints, L.LightningModule): ...
    model = MyModule.load_from_checkpoint("checkpoints/last.ckpt")
"""

from __future__ import annotations

import argparse
import copy
import inspect
import logging
import os
import sys
import warnings
import zipfile
from collections.abc import Mapping
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from typing import Any

from ._compat import lightning as lightning_compat
from .api import ZArchive
from .container.remote import exists, remove
from .engine.typeref import class_tag
from .errors import SaveError
from .options import ErrorMode
from .saving.background import path_key, wait_for

try:
    from lightning.pytorch.plugins.io import CheckpointIO as _CheckpointIO
except ImportError:
    try:
        from pytorch_lightning.plugins.io import CheckpointIO as _CheckpointIO  # type: ignore[no-redef,assignment]
    except ImportError:
        raise ImportError(
            "zarchive.lightning needs PyTorch Lightning: pip install lightning (the 'lightning' extra)"
        ) from None

_TYPE_KEYS = ("hparams_type", "datamodule_hparams_type")
_HPARAM_KEYS = ("hyper_parameters", "datamodule_hyper_parameters")
_OTHER_BASES = ("lightning.pytorch.plugins.io", "pytorch_lightning.plugins.io")


class ZArchiveCheckpointIO(_CheckpointIO):
    """Saves and loads Lightning checkpoints as zarchives.

    za: the ZArchive to use; or pass ZArchive settings (compress=..., durable=...) as keywords.
    storage_options: fsspec options for URL paths when Lightning passes none.
    """

    def __init__(
        self, za: ZArchive | None = None, *, storage_options: Mapping[str, Any] | None = None, **settings: Any
    ) -> None:
        if za is not None and settings:
            raise TypeError("pass either za=ZArchive(...) or ZArchive settings, not both")
        self.za = za if za is not None else ZArchive(**settings)
        self.storage_options = dict(storage_options) if storage_options else None
        _register_with_loaded_lightning()

    def __repr__(self) -> str:
        return f"ZArchiveCheckpointIO({self.za!r})"

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        """Write `checkpoint` to `path` atomically (see zarchive.container.remote for URLs)."""
        saveable = to_saveable(checkpoint, self.za)
        self.za.save(saveable, _fspath(path), storage_options=storage_options or self.storage_options)

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Read a checkpoint. map_location: as zarchive.read (None = CPU); a torch.load-style callable
        is taken as CPU (Lightning moves states to their devices itself). weights_only is moot: a
        zarchive never runs code."""
        p = _fspath(path)
        if not exists(p, self.storage_options):
            raise FileNotFoundError(f"Checkpoint file not found: {p}")
        location = None if callable(map_location) else map_location
        return from_saved(self.za.read(p, map_location=location, storage_options=self.storage_options))

    def remove_checkpoint(self, path: Any) -> None:
        remove(_fspath(path), self.storage_options)


class AsyncZArchiveCheckpointIO(ZArchiveCheckpointIO):
    """ZArchiveCheckpointIO whose saves return as soon as the checkpoint is copied to host memory
    (ZArchive.save_async: one reused staging buffer, no second copy of the weights on the GPU); the
    archive is written in the background. A background save that failed is raised by the next
    save_checkpoint, or when Lightning tears the plugin down (end of fit), which waits for every save.
    Removing or loading a checkpoint whose save is in flight waits for that save first.

        trainer = Trainer(plugins=[AsyncZArchiveCheckpointIO()])
    """

    def __init__(
        self, za: ZArchive | None = None, *, storage_options: Mapping[str, Any] | None = None, **settings: Any
    ) -> None:
        super().__init__(za, storage_options=storage_options, **settings)
        self._pending: list[Future[str]] = []

    def __repr__(self) -> str:
        return f"AsyncZArchiveCheckpointIO({self.za!r})"

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        """Capture `checkpoint` and write it to `path` in the background (atomically)."""
        self._raise_failed(wait=False)
        options = storage_options or self.storage_options
        self._pending.append(
            self.za.save_async(to_saveable(checkpoint, self.za), _fspath(path), storage_options=options)
        )

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        wait_for(path_key(_fspath(path)))
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path: Any) -> None:
        wait_for(path_key(_fspath(path)))  # else the save would land after the removal
        super().remove_checkpoint(path)

    def teardown(self) -> None:
        """Wait for every save in flight; raise the first that failed."""
        self._raise_failed(wait=True)

    def _raise_failed(self, *, wait: bool) -> None:
        if wait:
            futures_wait(self._pending)
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        for f in done:
            error = f.exception()
            if error is not None:
                raise error


def load_from_checkpoint(
    cls: type,
    path: Any,
    *,
    map_location: Any = None,
    strict: bool | None = None,
    checkpoint_io: ZArchiveCheckpointIO | None = None,
    **kwargs: Any,
) -> Any:
    """`cls.load_from_checkpoint(path, **kwargs)` for a LightningModule or LightningDataModule whose
    checkpoint is a zarchive: the class is built from the saved hyperparameters (updated by kwargs)."""
    namespace = _namespace(cls)
    checkpoint = (checkpoint_io or ZArchiveCheckpointIO()).load_checkpoint(path, map_location=map_location)
    checkpoint.setdefault(cls.CHECKPOINT_HYPER_PARAMS_KEY, {})  # type: ignore[attr-defined]
    checkpoint[cls.CHECKPOINT_HYPER_PARAMS_KEY].update(kwargs)  # type: ignore[attr-defined]
    load_state = lightning_compat.load_state(namespace)  # Lightning's own, or None: the public way
    if load_state is None:
        return _load_state_publicly(namespace, cls, checkpoint, strict, **kwargs)
    if _is_datamodule(cls):
        return load_state(cls, checkpoint, **kwargs)
    return load_state(cls, checkpoint, strict=strict, **kwargs)


class ZArchiveCheckpoints:
    """A mixin for a LightningModule or LightningDataModule, listed before it among the bases:
    `MyModule.load_from_checkpoint(path)` reads a zarchive checkpoint with zarchive (and any other
    file with Lightning's own loader, as before).

        class MyModule(ZArchiveCheckpoints, L.LightningModule): ...
    """

    @classmethod
    def load_from_checkpoint(
        cls,
        checkpoint_path: Any,
        map_location: Any = None,
        hparams_file: Any = None,
        strict: bool | None = None,
        weights_only: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        if is_zarchive(checkpoint_path):
            if hparams_file is not None:
                raise TypeError("hparams_file is not supported for a zarchive checkpoint: pass the values as keywords")
            # weights_only is moot: reading a zarchive never runs code from it
            return load_from_checkpoint(cls, checkpoint_path, map_location=map_location, strict=strict, **kwargs)
        if weights_only is not None:
            kwargs["weights_only"] = weights_only
        parent: Any = super()
        return parent.load_from_checkpoint(
            checkpoint_path, map_location=map_location, hparams_file=hparams_file, strict=strict, **kwargs
        )


def is_zarchive(path: Any) -> bool:
    """Whether `path` (a local path; a URL or file object is opened to see) holds a zarchive, or a ZANJ
    file zarchive reads, judged by its zip directory: a torch.save checkpoint is a zip too."""
    from .container.remote import is_url
    from .errors import ZArchiveError

    if isinstance(path, (str, os.PathLike)) and not is_url(path):
        try:
            with zipfile.ZipFile(os.fspath(path)) as z:
                names = set(z.namelist())
        except (OSError, zipfile.BadZipFile):
            return False
        return {"manifest.json", "metadata.json"} <= names or "__zanj__.json" in names
    try:
        with ZArchive(verify=False).open(path):
            return True
    except (ZArchiveError, OSError):
        return False
    finally:
        if hasattr(path, "seek"):
            path.seek(0)


def _namespace(cls: type) -> str:
    """The Lightning package (`lightning.pytorch` or `pytorch_lightning`) whose classes `cls` extends."""
    for name in lightning_compat.NAMESPACES:
        pkg = sys.modules.get(name)
        if pkg is not None and (issubclass(cls, pkg.LightningModule) or issubclass(cls, pkg.LightningDataModule)):
            return name
    raise TypeError(f"{cls!r} is not a LightningModule or LightningDataModule")


def _load_state_publicly(
    namespace: str, cls: type, checkpoint: dict[str, Any], strict: bool | None, **kwargs: Any
) -> Any:
    """What Lightning's `_load_state` does, with public API only (used when that function is missing
    or takes other arguments): `cls` built from the saved hyperparameters (updated by kwargs), then
    the datamodule's state or the module's on_load_checkpoint and state dict. Differences: a
    checkpoint naming an `_instantiator` is refused, and an explicit `strict` wins over the module's
    `strict_loading` without a conflict check."""
    pkg = sys.modules[namespace]
    init = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    named = [p.name for p in list(init.values())[1:] if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    any_keyword = any(p.kind == p.VAR_KEYWORD for p in init.values())
    loaded: dict[str, Any] = {}
    if cls.CHECKPOINT_HYPER_PARAMS_KEY in checkpoint:  # type: ignore[attr-defined]
        if issubclass(cls, pkg.LightningModule):
            for old_key in ("hparams", "module_arguments"):  # keys of Lightning 0.7
                loaded.update(checkpoint.get(old_key, {}))
        loaded.update(checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_KEY, {}))  # type: ignore[attr-defined]
        hparams_type = checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_TYPE)  # type: ignore[attr-defined]
        if hparams_type:
            loaded = (pkg.utilities.AttributeDict if isinstance(hparams_type, str) else hparams_type)(loaded)
        args_name = checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_NAME)  # type: ignore[attr-defined]
        if args_name and args_name in named:
            loaded = {args_name: loaded}
    init_kwargs = {**loaded, **kwargs}
    if "_instantiator" in init_kwargs:
        raise ValueError(
            "this checkpoint names an instantiator, which only Lightning's own loader can apply, and this "
            "Lightning version's loader is not one zarchive knows"
        )
    if not any_keyword:
        init_kwargs = {k: v for k, v in init_kwargs.items() if k in named}
    obj = cls(**init_kwargs)
    if isinstance(obj, pkg.LightningDataModule):
        if type(obj).__qualname__ in checkpoint:
            obj.load_state_dict(checkpoint[type(obj).__qualname__])
        return obj
    strict = obj.strict_loading if strict is None else strict
    if type(obj).configure_model is not pkg.LightningModule.configure_model:
        obj.configure_model()
    obj.on_load_checkpoint(checkpoint)
    keys = obj.load_state_dict(checkpoint["state_dict"], strict=strict)
    if not strict and keys.missing_keys:
        warnings.warn(f"Found keys that are in the model state dict but not in the checkpoint: {keys.missing_keys}")
    if not strict and keys.unexpected_keys:
        warnings.warn(f"Found keys that are not in the model state dict but in the checkpoint: {keys.unexpected_keys}")
    return obj


def _is_datamodule(cls: type) -> bool:
    return any(
        pkg is not None and issubclass(cls, pkg.LightningDataModule)
        for pkg in (sys.modules.get("lightning.pytorch"), sys.modules.get("pytorch_lightning"))
    )


# --- conversions ---
def to_saveable(checkpoint: dict[str, Any], za: ZArchive | None = None) -> dict[str, Any]:
    """The checkpoint with Lightning's non-data values made into data (see the module docstring).
    Containers are copied only where something inside them changes, so state dicts keep their class
    and `_metadata`. With `za`, hyperparameters it cannot save are left out (per its error_mode)."""
    out = dict(checkpoint)
    for key in _TYPE_KEYS:
        value = out.get(key)
        if isinstance(value, type):
            out[key] = class_tag(value)
    out = _plain(out)
    if za is not None:
        for key in _HPARAM_KEYS:
            if isinstance(out.get(key), dict):
                out[key] = _saveable_hyperparameters(out[key], key, za)
    return out


def _saveable_hyperparameters(hparams: dict[Any, Any], key: str, za: ZArchive) -> dict[Any, Any]:
    """`hparams` without the values `za` cannot save, each reported once per error_mode."""
    left_out: list[str] = []
    kept: dict[Any, Any] = {}
    for name, value in hparams.items():
        try:
            za.plan_save(value)
        except SaveError as e:
            if za.settings.error_mode is ErrorMode.EXCEPT:
                raise SaveError(f"hyperparameter {name!r} cannot be saved: {e.message}", path=f"{key}/{name}") from e
            left_out.append(f"{name!r} ({type(value).__module__}.{type(value).__qualname__})")
            continue
        kept[name] = value
    if left_out:
        message = (
            f"the checkpoint's {key} leave out what zarchive cannot save: {', '.join(left_out)}; training and "
            "resuming are not affected, and load_from_checkpoint(path, NAME=...) passes such a value again "
            "(or exclude it: self.save_hyperparameters(ignore=[...]))"
        )
        if za.settings.error_mode is ErrorMode.WARN:
            warnings.warn(message, UserWarning, stacklevel=4)
        elif za.settings.error_mode is ErrorMode.LOG:
            logging.getLogger("zarchive").warning("%s", message)
    return kept if left_out else hparams


def from_saved(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """Undo to_saveable where that is safe: known config classes by their fixed names."""
    for key in _TYPE_KEYS:
        value = checkpoint.get(key)
        if isinstance(value, str):
            checkpoint[key] = _known_class(value) or value
    return checkpoint


def _known_class(tag: str) -> type | None:
    if tag in ("omegaconf.dictconfig:DictConfig", "omegaconf.listconfig:ListConfig"):
        try:
            import omegaconf
        except ImportError:
            return None
        return omegaconf.DictConfig if tag.endswith("DictConfig") else omegaconf.ListConfig
    return None


def _plain(x: Any) -> Any:
    if isinstance(x, argparse.Namespace):
        return _plain(dict(vars(x)))
    if isinstance(x, dict):
        if type(x).__name__ == "AttributeDict":  # Lightning's dict with attribute access
            x = dict(x)
        changed = False
        items = {}
        for k, v in x.items():
            nv = _plain(v)
            changed = changed or nv is not v
            items[k] = nv
        if not changed:
            return x
        return items if type(x) is dict else _rebuild_dict(x, items)
    if type(x) in (list, tuple):
        new = [_plain(v) for v in x]
        if all(a is b for a, b in zip(new, x)):
            return x
        return new if type(x) is list else tuple(new)
    return x


def _rebuild_dict(original: dict[Any, Any], items: dict[Any, Any]) -> dict[Any, Any]:
    """A copy of `original` (its class, defaultdict factory and `_metadata` kept) holding `items`."""
    out = copy.copy(original)
    out.clear()
    out.update(items)
    return out


def _fspath(path: Any) -> Any:
    return path if isinstance(path, str) else os.fspath(path)


def _register_with_loaded_lightning() -> None:
    """Make the plugin acceptable to whichever Lightning namespace is loaded (`lightning.pytorch` and
    `pytorch_lightning` each define their own CheckpointIO ABC)."""
    for name in _OTHER_BASES:
        mod = sys.modules.get(name)
        base = getattr(mod, "CheckpointIO", None) if mod is not None else None
        if base is not None and base is not _CheckpointIO and not issubclass(ZArchiveCheckpointIO, base):
            base.register(ZArchiveCheckpointIO)


__all__ = [
    "ZArchiveCheckpointIO",
    "ZArchiveCheckpoints",
    "from_saved",
    "is_zarchive",
    "load_from_checkpoint",
    "to_saveable",
]
