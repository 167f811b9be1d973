"""Built-in handlers, in dispatch order (earlier handlers win for a class)."""

from __future__ import annotations

from .base import Handler
from .builtins import DictHandler, FloatHandler, IntHandler, ListHandler, ScalarHandler, SetHandler, TupleHandler
from .dataclass_ import DataclassHandler, NamedTupleHandler
from .numpy_ import NumpyArrayHandler, NumpyDtypeHandler, NumpyScalarHandler
from .omegaconf_ import OmegaConfHandler
from .pandas_ import PandasFrameHandler, PandasIndexHandler, PandasSeriesHandler
from .pandas_arrays import PandasArrayHandler
from .pandas_scalars import PandasScalarHandler
from .stdlib import BytesHandler, ComplexHandler, DateTimeHandler, DecimalUUIDHandler, EnumHandler, PathHandler
from .torch_model import ConfiguredModelHandler
from .torch_tensor import TensorHandler
from .torch_types import TorchDeviceHandler, TorchDtypeHandler, TorchSizeHandler

DEFAULT_HANDLERS: tuple[Handler, ...] = (
    ScalarHandler(),
    IntHandler(),
    FloatHandler(),
    ListHandler(),
    DictHandler(),
    OmegaConfHandler(),  # Hydra configs: saved as plain dicts/lists
    ConfiguredModelHandler(),  # before anything taking nn.Module
    NamedTupleHandler(),  # before tuple
    DataclassHandler(),
    TupleHandler(),
    SetHandler(),
    BytesHandler(),
    ComplexHandler(),
    DateTimeHandler(),
    PathHandler(),
    EnumHandler(),
    DecimalUUIDHandler(),
    NumpyArrayHandler(),
    NumpyScalarHandler(),
    NumpyDtypeHandler(),
    PandasFrameHandler(),
    PandasSeriesHandler(),
    PandasIndexHandler(),
    PandasArrayHandler(),
    PandasScalarHandler(),
    TensorHandler(),
    TorchDeviceHandler(),
    TorchDtypeHandler(),
    TorchSizeHandler(),
)

__all__ = ["DEFAULT_HANDLERS", "Handler"]
