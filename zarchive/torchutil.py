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
The contract itself lives in `zarchive.models.configured`; this class adds saving and reading.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Self, TypeVar

from .api import ZArchive
from .deploy import DynamicAxes, ExportErrors
from .models.configured import ConfiguredModelBase, set_config_class
from .models.read import read_model

T_config = TypeVar("T_config")


class ConfiguredModel(ConfiguredModelBase[T_config]):
    """Base class for models built from a single config dataclass.

    Subclasses declare their config class with `@set_config_class(...)` and take the config as the
    first argument of `__init__`, passing it to `super().__init__(config)`. Everything else the model
    needs must be in the config or in its state dict, since reading calls `cls(config)`.
    """

    def save(
        self,
        file_path: str | os.PathLike[str],
        za: ZArchive | None = None,
        *,
        export: Sequence[str] = (),
        example_inputs: tuple[Any, ...] | None = None,
        export_errors: ExportErrors = "raise",
        dynamic_axes: DynamicAxes | None = None,
    ) -> str:
        """Write the model (class, config, weights, training flag) to `file_path`; return the path.
        `export`, `example_inputs`, `export_errors`, `dynamic_axes`: exports to ONNX and TorchScript,
        as for ZArchive.save."""
        return (za if za is not None else ZArchive()).save(
            self,
            file_path,
            export=export,
            example_inputs=example_inputs,
            export_errors=export_errors,
            dynamic_axes=dynamic_axes,
        )

    @classmethod
    def read(
        cls,
        file_path: str | os.PathLike[str] | bytes,
        za: ZArchive | None = None,
        map_location: Any = None,
        *,
        dtype: Any = None,
        trusted: Iterable[type | str | Callable[..., Any]] | None = None,
    ) -> Self:
        """The model saved at `file_path`, which must be of this class (or a subclass of it).

        Raises ConfigMismatchError when the archive holds another model class or a config of another
        class. `map_location`, `dtype` and `trusted` are as for zarchive.read (this class itself is
        always trusted).
        """
        with (za if za is not None else ZArchive()).open(file_path, trusted=trusted) as arc:
            return read_model(arc, cls, map_location=map_location, dtype=dtype)


__all__ = ["ConfiguredModel", "set_config_class"]
