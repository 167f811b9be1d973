"""Node schemas: what the reader knows of each node type without constructing anything (checking,
planning, browsing, one-line summaries). Imports neither torch nor pandas."""

from __future__ import annotations

from .arrays import (
    NumpyArraySchema,
    NumpyDtypeSchema,
    NumpyScalarSchema,
    TensorSchema,
    TorchDeviceSchema,
    TorchDtypeSchema,
    TorchSizeSchema,
)
from .arrow_array import ArrowArraySchema
from .base import MISSING, NodeSchema
from .classes import ConfiguredModelSchema, DataclassSchema, EnumSchema, NamedTupleSchema, OmegaConfSchema
from .polars_nodes import PolarsFrameSchema, PolarsSeriesSchema
from .tables import (
    PandasArraySchema,
    PandasFrameSchema,
    PandasIndexSchema,
    PandasScalarSchema,
    PandasSeriesSchema,
)
from .values import (
    BytesSchema,
    ComplexSchema,
    DateTimeSchema,
    DictSchema,
    FloatSchema,
    IntSchema,
    JsonSchema,
    ListSchema,
    PathSchema,
    SetSchema,
    TextValueSchema,
    TupleSchema,
)

BUILTIN_SCHEMAS: dict[str, NodeSchema] = {
    s.name: s
    for s in (
        JsonSchema(), IntSchema(), FloatSchema(), ListSchema(), TupleSchema(), SetSchema(), DictSchema(),
        BytesSchema(), ComplexSchema(), DateTimeSchema(), PathSchema(), TextValueSchema(),
        DataclassSchema(), NamedTupleSchema(), EnumSchema(), ConfiguredModelSchema(), OmegaConfSchema(),
        NumpyArraySchema(), NumpyScalarSchema(), NumpyDtypeSchema(),
        TensorSchema(), TorchDeviceSchema(), TorchDtypeSchema(), TorchSizeSchema(),
        PandasFrameSchema(), PandasSeriesSchema(), PandasIndexSchema(), PandasArraySchema(), PandasScalarSchema(),
        PolarsFrameSchema(), PolarsSeriesSchema(), ArrowArraySchema(),
    )
}  # fmt: skip

__all__ = ["BUILTIN_SCHEMAS", "MISSING", "NodeSchema"]
