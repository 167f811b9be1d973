"""ConfiguredModel: a torch module that is fully described by a config dataclass plus its weights.

    from zarchive.torchutil import ConfiguredModel, set_config_class

    @set_config_class(MyConfig)
    class MyModel(ConfiguredModel[MyConfig]):
        def __init__(self, config: MyConfig):
            super().__init__(config)
            self.fc = torch.nn.Linear(config.d_in, config.d_out)

    model.save("model.zarc"); MyModel.read("model.zarc")  # or zarchive.read("model.zarc")

Reading rebuilds the model from its config (`MyModel(config)`) and loads the saved weights into it
exactly. The names follow ZANJ's, so code written for ZANJ moves over by changing the imports.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import torch
from typing_extensions import Self

if TYPE_CHECKING:
    from .api import ZArchive

T_config = TypeVar("T_config")
M = TypeVar("M", bound="ConfiguredModel[Any]")


class ConfiguredModel(torch.nn.Module, Generic[T_config]):
    """Base class for models built from a single config dataclass.

    Subclasses declare their config class with `@set_config_class(...)` and take the config as the
    first argument of `__init__`, passing it to `super().__init__(config)`. Everything else the model
    needs must be in the config or in its state dict, since reading calls `cls(config)`.
    """

    _config_class: ClassVar[type | None] = None

    def __init__(self, config: T_config) -> None:
        super().__init__()
        expected = type(self)._config_class
        if expected is None:
            raise TypeError(
                f"{type(self).__qualname__} has no config class: decorate it with @set_config_class(YourConfig)"
            )
        if not isinstance(config, expected):
            raise TypeError(
                f"{type(self).__qualname__} takes a {expected.__qualname__} config, not a {type(config).__qualname__}"
            )
        self.config: T_config = config

    # names ZANJ uses, so migrated code keeps working
    @property
    def zanj_model_config(self) -> T_config:
        return self.config

    @property
    def zanj_config_class(self) -> type | None:
        return type(self)._config_class

    def save(self, file_path: str | os.PathLike[str], za: ZArchive | None = None) -> str:
        """Write the model (class, config, weights, training flag) to `file_path`; return the path."""
        from .api import ZArchive

        return (za if za is not None else ZArchive()).save(self, file_path)

    @classmethod
    def read(
        cls,
        file_path: str | os.PathLike[str] | bytes,
        za: ZArchive | None = None,
        map_location: Any = None,
        *,
        dtype: Any = None,
    ) -> Self:
        """The model saved at `file_path`, which must be of this class (or a subclass of it).

        Raises ConfigMismatchError when the archive holds another model class or a config of another
        class. `map_location` and `dtype` are as for zarchive.read.
        """
        from .api import ZArchive
        from .handlers.torch_model import read_model

        with (za if za is not None else ZArchive()).open(file_path) as arc:
            return read_model(arc, cls, map_location=map_location, dtype=dtype)

    def num_params(self, only_trainable: bool = True) -> int:
        """The number of parameter values, each shared parameter counted once (trainable ones only
        unless `only_trainable=False`, as in ZANJ)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not only_trainable)


def set_config_class(config_class: type) -> Callable[[type[M]], type[M]]:
    """Class decorator declaring the config dataclass of a ConfiguredModel subclass."""
    if not (isinstance(config_class, type) and dataclasses.is_dataclass(config_class)):
        raise TypeError(
            f"set_config_class needs a dataclass (e.g. a muutils SerializableDataclass), not {config_class!r}"
        )

    def wrapper(cls: type[M]) -> type[M]:
        if not (isinstance(cls, type) and issubclass(cls, ConfiguredModel)):
            raise TypeError(f"@set_config_class decorates ConfiguredModel subclasses, not {cls!r}")
        cls._config_class = config_class
        return cls

    return wrapper


__all__ = ["ConfiguredModel", "set_config_class"]
