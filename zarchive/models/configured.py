"""The ConfiguredModel contract, and nothing else: a torch module fully described by one config
dataclass plus its state dict. This module imports only torch; saving and reading live elsewhere
(`zarchive.torchutil.ConfiguredModel` adds `.save()` and `.read()`), so the handlers that need the
contract do not depend on the front end that uses them.

A subclass declares its config class with `@set_config_class(ConfigClass)` and takes the config as
the first argument of `__init__`, passing it on to `super().__init__(config)`. Reading calls
`cls(config)`, so everything else the model needs must be in the config or in its state dict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

import torch

T_config = TypeVar("T_config")
M = TypeVar("M", bound="ConfiguredModelBase[Any]")


class NoConfigClassError(TypeError, NotImplementedError):
    """A ConfiguredModel subclass was built without @set_config_class (a TypeError, and the
    NotImplementedError ZANJ raises in that case)."""


class ConfiguredModelBase(torch.nn.Module, Generic[T_config]):
    """Base class for models built from a single config dataclass (see the module docstring)."""

    _config_class: ClassVar[type | None] = None
    # TorchScript compiles every property of a module it scripts, and cannot compile these (their
    # type hints name a config class, or `type`): torch.jit.script(model) skips them instead
    __jit_unused_properties__: ClassVar[list[str]] = ["zanj_model_config", "zanj_config_class"]

    def __init__(self, config: T_config) -> None:
        super().__init__()
        expected = type(self)._config_class  # noqa: SLF001 - this class's own attribute
        if expected is None:
            raise NoConfigClassError(
                f"{type(self).__qualname__} has no config class: you need to set it with @set_config_class(YourConfig)"
            )
        if not isinstance(config, expected):
            raise TypeError(
                f"{type(self).__qualname__} takes a {expected.__qualname__} config, not a {type(config).__qualname__} "
                f"(the config must be an instance of {expected.__qualname__} or of a subclass of it)"
            )
        self.config: T_config = config
        self.training_records: Any = None  # anything you keep with the model (losses...): saved and read

    def _load_state_dict_wrapper(self, state_dict: dict[str, torch.Tensor], **kwargs: Any) -> Any:
        """How reading puts the archive's weights into a freshly built model (ZANJ's hook).

        Override it to adapt weights on reading (renamed keys, strict=False...); reading then builds
        the model for real and calls it with the state dict and the keyword arguments of the
        ZArchive's `custom_settings["_load_state_dict_wrapper"]`. Without an override (and without
        such settings) reading assigns the weights itself, without a copy."""
        return self.load_state_dict(state_dict, **kwargs)

    @classmethod
    def config_class(cls) -> type | None:
        """The declared config dataclass (None before @set_config_class)."""
        return cls._config_class

    # names ZANJ uses, so migrated code keeps working
    @property
    def zanj_model_config(self) -> T_config:
        return self.config

    @property
    def zanj_config_class(self) -> type | None:
        return type(self)._config_class  # noqa: SLF001 - this class's own attribute

    def num_params(self, only_trainable: bool = True) -> int:
        """The number of parameter values, each shared parameter counted once (trainable ones only
        unless `only_trainable=False`, as in ZANJ)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not only_trainable)


def set_config_class(config_class: type) -> Callable[[type[M]], type[M]]:
    """Class decorator declaring the config dataclass of a ConfiguredModel subclass."""
    if not (isinstance(config_class, type) and dataclasses.is_dataclass(config_class)):
        raise TypeError(
            f"set_config_class needs a dataclass, not {config_class!r}: the config class must be a subclass of "
            "SerializableDataclass (muutils) or another dataclass"
        )

    def wrapper(cls: type[M]) -> type[M]:
        if not (isinstance(cls, type) and issubclass(cls, ConfiguredModelBase)):
            raise TypeError(f"@set_config_class decorates ConfiguredModel subclasses, not {cls!r}")
        cls._config_class = config_class
        return cls

    return wrapper


__all__ = ["ConfiguredModelBase", "NoConfigClassError", "set_config_class"]


def declared_config_class(cls: type) -> type | None:
    """The config class a model class declares: zarchive's ConfiguredModel subclasses, and classes
    still deriving from zanj's own `zanj.torchutil.ConfiguredModel` (half-migrated projects; zanj
    is never imported here)."""
    if issubclass(cls, ConfiguredModelBase):
        return cls._config_class
    from .._compat import zanj as zanj_compat

    base = zanj_compat.zanj_model_base()
    if base is not None and issubclass(cls, base):
        found: type | None = zanj_compat.config_class(cls)
        return found
    return None
