"""ZANJ's `zanj.torchutil` over zarchive: `ConfiguredModel`, `set_config_class`,
`ConfigMismatchException`, `get_module_device`, `num_params`, `assert_model_cfg_equality`,
`assert_model_exact_equality`.

`ConfiguredModel` is zarchive's (`zarchive.torchutil.ConfiguredModel`: saved as a
`torch.ConfiguredModel` node, read by `zarchive.read` and `MyModel.read`, also from `.zanj` files the
real ZANJ wrote) with ZANJ's method signatures: `save(path, zanj)` and `read(path, zanj)` take a
`ZANJ` (ZANJ's defaults: ".zanj" appended, mismatches raise), `serialize()` and `load(obj, path,
zanj)` give and take ZANJ's dict form, `load_file` is `read` with a DeprecationWarning, and
`training_records` and `_load_state_dict_wrapper` are kept and honoured. The config is `self.config`,
also reachable as ZANJ's `zanj_model_config`. `set_config_class` takes any dataclass (ZANJ's took
only muutils SerializableDataclasses).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Self, TypeVar

import torch

from ...errors import ConfigMismatchError
from ...models.configured import ConfiguredModelBase, set_config_class
from ...torchutil import ConfiguredModel as _ZArchiveModel
from . import ZANJ
from .loading import FORMAT_KEY, LoaderHandler, ObjectPath, load_item_recursive

T_config = TypeVar("T_config")


def num_params(m: torch.nn.Module, only_trainable: bool = True) -> int:
    """The number of parameter values of `m`, a parameter shared under several names counted once;
    only those that require grad unless `only_trainable=False`."""
    seen: dict[int, torch.nn.Parameter] = {}
    for p in m.parameters():
        if p.requires_grad or not only_trainable:
            seen.setdefault(id(p), p)
    return sum(p.numel() for p in seen.values())


def get_module_device(m: torch.nn.Module) -> tuple[bool, torch.device | dict[str, torch.device]]:
    """(True, the device) when every parameter of `m` is on one device; else (False, {name: device})
    ((False, {}) for a module without parameters)."""
    devices = {name: p.device for name, p in m.named_parameters()}
    if not devices:
        return False, devices
    first = next(iter(devices.values()))
    if all(d == first for d in devices.values()):
        return True, first
    return False, devices


class ConfiguredModel(_ZArchiveModel[T_config]):
    """zarchive's ConfiguredModel with ZANJ's methods (see the module docstring)."""

    def __init__(self, zanj_model_config: T_config, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"{type(self).__qualname__}.__init__ got unexpected keyword arguments {sorted(kwargs)}")
        super().__init__(zanj_model_config)

    @property
    def zanj_model_config(self) -> T_config:
        return self.config

    @zanj_model_config.setter
    def zanj_model_config(self, value: T_config) -> None:
        self.config = value

    def save(self, file_path: str | os.PathLike[str], zanj: Any = None) -> str:  # type: ignore[override]
        """Write the model with `zanj` (default: ZANJ(): ".zanj" appended); return the path."""
        return (zanj if zanj is not None else ZANJ()).save(self, file_path)

    @classmethod
    def read(cls, file_path: str | os.PathLike[str] | bytes, zanj: Any = None, *args: Any, **kwargs: Any) -> Self:  # type: ignore[override]
        """The model saved at `file_path`, which must be of this class (ConfigMismatchError if not).
        FileNotFoundError when there is no file, as in ZANJ."""
        if isinstance(file_path, (str, os.PathLike)) and not os.path.isfile(file_path):
            raise FileNotFoundError(f"file not found: {os.fspath(file_path)}")
        za = zanj if zanj is not None else ZANJ()
        try:
            return super().read(file_path, za, *args, **kwargs)
        except ConfigMismatchError:
            saved = za.read(file_path)  # a model saved as its serialize() dict, as ZANJ allowed
            if isinstance(saved, dict) and str(saved.get(FORMAT_KEY, "")).startswith(cls.__name__):
                return cls.load(saved, (), za)
            raise

    @classmethod
    def load_file(cls, file_path: str | os.PathLike[str], zanj: Any = None) -> Self:
        """`read`, under the name ZANJ deprecated."""
        warnings.warn("load_file() is deprecated, use read() instead", DeprecationWarning, stacklevel=2)
        return cls.read(file_path, zanj)

    def serialize(self, path: ObjectPath = (), zanj: Any = None) -> dict[str, Any]:
        """The model as ZANJ's dict form: config, information about the class, training records,
        state dict, and the class name as "__muutils_format__". `zarchive.save` does not need it
        (it saves the model itself); `load` takes it back."""
        config: Any = self.config
        serialize = getattr(config, "serialize", None)
        fields = serialize() if callable(serialize) else dataclasses.asdict(config)
        cls = type(self)
        return {
            "zanj_model_config": fields,
            "meta": {
                "class_name": cls.__name__,
                "class_doc": (cls.__doc__ or "").splitlines(),
                "module_name": cls.__module__,
                "module_mro": [str(c) for c in cls.__mro__],
                "num_params": num_params(self),
                "as_str": str(self).splitlines(),
            },
            "training_records": self.training_records,
            "state_dict": self.state_dict(),
            FORMAT_KEY: cls.__name__,
        }

    @classmethod
    def load(cls, obj: dict[str, Any], path: ObjectPath = (), zanj: Any = None) -> Self:
        """A model from ZANJ's dict form (what `serialize` returns, saved and read back)."""
        zanj = zanj if zanj is not None else ZANJ()
        config_class = cls.config_class()
        if config_class is None:
            raise NotImplementedError(f"{cls.__qualname__} has no config class: use @set_config_class")
        stored = obj["zanj_model_config"]
        config: Any
        if isinstance(stored, config_class):
            config = stored
        elif callable(getattr(config_class, "load", None)):
            config = config_class.load(stored)  # type: ignore[attr-defined]
        else:
            config = config_class(**{k: v for k, v in stored.items() if not k.startswith("__")})
        model = cls(config)
        state = load_item_recursive(obj["state_dict"], (*path, "state_dict"), zanj)
        state = {k: v if isinstance(v, torch.Tensor) else torch.as_tensor(v) for k, v in state.items()}
        wrapper_kwargs = (
            zanj.custom_settings.get("_load_state_dict_wrapper", {}) if hasattr(zanj, "custom_settings") else {}
        )
        model._load_state_dict_wrapper(state, **wrapper_kwargs)
        model.training_records = load_item_recursive(obj.get("training_records"), (*path, "training_records"), zanj)
        return model

    @classmethod
    def get_handler(cls) -> LoaderHandler:
        """A LoaderHandler for this class's ZANJ dict form (for register_loader_handler)."""
        name = cls.__name__

        def check(item: Any, path: ObjectPath = (), z: Any = None) -> bool:
            return isinstance(item, dict) and str(item.get(FORMAT_KEY, "")).startswith(name)

        def load(item: Any, path: ObjectPath = (), z: Any = None) -> Any:
            return cls.load(item, path, z)

        return LoaderHandler(
            check=check,
            load=load,
            uid=name,
            source_pckg=cls.__module__,
            desc=f"{cls.__module__} {name} loader via zarchive.compat.zanj.torchutil.ConfiguredModel",
        )


class ConfigMismatchException(ValueError):
    """Two models' configs differ; `diff` says how ({field: {"self": a, "other": b}})."""

    def __init__(self, msg: str, diff: Any) -> None:
        super().__init__(msg)
        self.diff = diff

    def __str__(self) -> str:
        return f"{super().__str__()}: {self.diff}"


def _config_of(model: Any, which: str) -> Any:
    if not isinstance(model, torch.nn.Module):
        raise AssertionError(f"{which} must be a ConfiguredModel")  # noqa: TRY004 - (ZANJ's words)
    config = getattr(model, "zanj_model_config", None)
    if config is None:
        config = getattr(model, "config", None)
    if not dataclasses.is_dataclass(config):
        raise AssertionError(f"{which} must have a dataclass config")
    return config


def config_diff(a: Any, b: Any) -> dict[str, dict[str, Any]]:
    """The fields in which two dataclass configs differ: {field: {"self": a's, "other": b's}}
    (muutils' own `diff` where the class has one)."""
    diff = getattr(type(a), "diff", None)
    if callable(diff) and type(a) is type(b):
        return diff(a, b)  # type: ignore[no-any-return]
    out: dict[str, dict[str, Any]] = {}
    names_a = {f.name for f in dataclasses.fields(a)}
    names_b = {f.name for f in dataclasses.fields(b)}
    for name in sorted(names_a | names_b):
        va, vb = getattr(a, name, None), getattr(b, name, None)
        if name not in names_a or name not in names_b or not _equal(va, vb):
            out[name] = {"self": va, "other": vb}
    return out


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - arrays and tensors compare elementwise
        return type(a) is type(b) and bool((a == b).all())


def assert_model_cfg_equality(model_a: Any, model_b: Any) -> None:
    """Raise ConfigMismatchException (with `.diff`) unless both models' configs are equal."""
    cfg_a, cfg_b = _config_of(model_a, "model_a"), _config_of(model_b, "model_b")
    if type(cfg_a) is not type(cfg_b) or not _equal(cfg_a, cfg_b):
        raise ConfigMismatchException(
            f"configs of type {type(cfg_a).__qualname__}, {type(cfg_b).__qualname__} don't match",
            diff=config_diff(cfg_a, cfg_b),
        )


def assert_model_exact_equality(model_a: Any, model_b: Any) -> None:
    """Raise unless the configs are equal (ConfigMismatchException) and the state dicts have the same
    keys and equal tensors (AssertionError naming the keys that differ)."""
    assert_model_cfg_equality(model_a, model_b)
    sd_a, sd_b = model_a.state_dict(), model_b.state_dict()
    if set(sd_a) != set(sd_b):
        raise AssertionError(f"state dict keys don't match: {set(sd_a) - set(sd_b)} / {set(sd_b) - set(sd_a)}")
    failed = [k for k, v in sd_a.items() if not (v.shape == sd_b[k].shape and bool((v == sd_b[k]).all()))]
    if failed:
        raise AssertionError(f"{len(failed)} / {len(sd_a)} state dict elements don't match: {failed}")


__all__ = [
    "ConfigMismatchException",
    "ConfiguredModel",
    "ConfiguredModelBase",
    "assert_model_cfg_equality",
    "assert_model_exact_equality",
    "config_diff",
    "get_module_device",
    "num_params",
    "set_config_class",
]
