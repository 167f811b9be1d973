"""Built-in handlers, in dispatch order (earlier handlers win for a class)."""

from __future__ import annotations

from .base import Handler
from .builtins import DictHandler, FloatHandler, IntHandler, ListHandler, ScalarHandler, SetHandler, TupleHandler
from .numpy_ import NumpyArrayHandler, NumpyDtypeHandler, NumpyScalarHandler
from .stdlib import BytesHandler, ComplexHandler, DateTimeHandler, DecimalUUIDHandler, EnumHandler, PathHandler
from .torch_tensor import TensorHandler
from .torch_types import TorchDeviceHandler, TorchDtypeHandler, TorchSizeHandler

DEFAULT_HANDLERS: tuple[Handler, ...] = (
    ScalarHandler(),
    IntHandler(),
    FloatHandler(),
    ListHandler(),
    DictHandler(),
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
    TensorHandler(),
    TorchDeviceHandler(),
    TorchDtypeHandler(),
    TorchSizeHandler(),
)

__all__ = ["DEFAULT_HANDLERS", "Handler"]
