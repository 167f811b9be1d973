"""The built-in handlers, named but not imported: a handler module is imported the first time a save
or a read needs it, so `import zarchive` imports neither torch nor pandas nor muutils.

Each row names a handler's tag, where its class lives, and the module that must already be imported
before an object of its family can exist (`needs`): a torch tensor cannot reach a save without torch
being imported, so the save dispatcher never imports torch to ask whether it handles an object. Rows
are in dispatch order: earlier rows win for a class (named tuples before tuples, models before
dataclasses). `exact` lists the classes a row takes by exact type, dispatched without asking the
other rows (the plain Python values that make up most of a manifest).
"""

from __future__ import annotations

import datetime as dt
import decimal
import pathlib
import uuid
from collections import OrderedDict, defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class BuiltinHandler:
    tag: str
    target: str  # "module:Class", the module relative to zarchive.handlers
    needs: str | None = None  # a module that must be in sys.modules for this family's objects to exist
    exact: tuple[type, ...] = ()  # classes this row takes by exact type


_PATHS = (pathlib.PurePosixPath, pathlib.PureWindowsPath, pathlib.PosixPath, pathlib.WindowsPath)

BUILTIN_HANDLERS: tuple[BuiltinHandler, ...] = (
    BuiltinHandler("json", "builtins:ScalarHandler", exact=(str, bool, type(None))),
    BuiltinHandler("int", "builtins:IntHandler", exact=(int,)),
    BuiltinHandler("float", "builtins:FloatHandler", exact=(float,)),
    BuiltinHandler("list", "builtins:ListHandler", exact=(list,)),
    BuiltinHandler("dict", "builtins:DictHandler", exact=(dict, OrderedDict, defaultdict)),
    BuiltinHandler("omegaconf", "omegaconf_:OmegaConfHandler", needs="omegaconf"),
    BuiltinHandler("torch.ConfiguredModel", "torch_model:ConfiguredModelHandler", needs="torch"),
    BuiltinHandler("namedtuple", "dataclass_:NamedTupleHandler"),
    BuiltinHandler("dataclass", "dataclass_:DataclassHandler"),
    BuiltinHandler("tuple", "builtins:TupleHandler", exact=(tuple,)),
    BuiltinHandler("set", "builtins:SetHandler", exact=(set, frozenset)),
    BuiltinHandler("bytes", "stdlib:BytesHandler", exact=(bytes, bytearray)),
    BuiltinHandler("complex", "stdlib:ComplexHandler", exact=(complex,)),
    BuiltinHandler("datetime", "stdlib:DateTimeHandler", exact=(dt.datetime, dt.date, dt.time, dt.timedelta)),
    BuiltinHandler("path", "stdlib:PathHandler", exact=_PATHS),
    BuiltinHandler("enum", "stdlib:EnumHandler"),
    BuiltinHandler("text_value", "stdlib:DecimalUUIDHandler", exact=(decimal.Decimal, uuid.UUID)),
    BuiltinHandler("numpy.ndarray", "numpy_:NumpyArrayHandler", needs="numpy"),
    BuiltinHandler("numpy.scalar", "numpy_:NumpyScalarHandler", needs="numpy"),
    BuiltinHandler("numpy.dtype", "numpy_:NumpyDtypeHandler", needs="numpy"),
    BuiltinHandler("pandas.DataFrame", "pandas_:PandasFrameHandler", needs="pandas"),
    BuiltinHandler("pandas.Series", "pandas_:PandasSeriesHandler", needs="pandas"),
    BuiltinHandler("pandas.Index", "pandas_:PandasIndexHandler", needs="pandas"),
    BuiltinHandler("pandas.array", "pandas_arrays:PandasArrayHandler", needs="pandas"),
    BuiltinHandler("pandas.scalar", "pandas_scalars:PandasScalarHandler", needs="pandas"),
    BuiltinHandler("arrow.array", "arrow_:ArrowArrayHandler", needs="pyarrow"),
    BuiltinHandler("polars.DataFrame", "polars_:PolarsFrameHandler", needs="polars"),
    BuiltinHandler("polars.Series", "polars_:PolarsSeriesHandler", needs="polars"),
    BuiltinHandler("torch.Tensor", "torch_tensor:TensorHandler", needs="torch"),
    BuiltinHandler("torch.device", "torch_types:TorchDeviceHandler", needs="torch"),
    BuiltinHandler("torch.dtype", "torch_types:TorchDtypeHandler", needs="torch"),
    BuiltinHandler("torch.Size", "torch_types:TorchSizeHandler", needs="torch"),
)

# Read with tensors="numpy": these tags get handlers that never import torch.
NUMPY_TENSOR_HANDLERS: dict[str, str] = {
    "torch.Tensor": "tensor_numpy:NumpyTensorHandler",
    "torch.device": "torch_free:DeviceAsText",
    "torch.dtype": "torch_free:DtypeAsText",
    "torch.Size": "torch_free:SizeAsTuple",
    "torch.ConfiguredModel": "torch_free:ModelAsGeneric",
}

BY_TAG: dict[str, BuiltinHandler] = {b.tag: b for b in BUILTIN_HANDLERS}
