"""A Lightning checkpoint's values made into data zarchive saves, and back (see zarchive.lightning
for what is converted: class objects named by tag, AttributeDict and Namespace as dicts,
hyperparameters zarchive cannot save left out per the ZArchive's error_mode). Needs no Lightning.
"""

from __future__ import annotations

import argparse
import copy
import logging
import warnings
from typing import Any

from ..api import ZArchive
from ..engine.typeref import class_tag
from ..errors import SaveError
from ..options import ErrorMode

_TYPE_KEYS = ("hparams_type", "datamodule_hparams_type")
_HPARAM_KEYS = ("hyper_parameters", "datamodule_hyper_parameters")


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
