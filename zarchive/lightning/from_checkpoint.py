"""Building a LightningModule or LightningDataModule from a zarchive checkpoint (see
zarchive.lightning): `load_from_checkpoint(cls, path)`, and the `ZArchiveCheckpoints` mixin that
makes `cls.load_from_checkpoint(path)` read zarchives (and every other file with Lightning's own
loader). The object is built by Lightning's own `_load_state` where this Lightning version has the
one zarchive knows (zarchive._compat.lightning), else with public API only.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
import zipfile
from typing import Any

from .._compat import lightning as lightning_compat
from ..api import ZArchive
from .checkpoint_io import ZArchiveCheckpointIO


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
    from ..container.remote import is_url
    from ..errors import ZArchiveError

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
