"""`ConfiguredModel.read`: the model at an archive's root, which must be of the class asked for."""

from __future__ import annotations

from typing import Any

from ..engine.browse import OpenedArchive
from ..engine.typeref import class_tag, is_model_class, resolve_class
from ..errors import ConfigMismatchError, UnknownTypeError
from ..nodes.classes import ConfiguredModelSchema
from .configured import ConfiguredModelBase

MODEL_TAG = ConfiguredModelSchema.name


def read_model(arc: OpenedArchive, expected: type[Any], *, map_location: Any = None, dtype: Any = None) -> Any:
    """The model at the root of `arc` (a .zarc or a ZANJ file), an instance of `expected` or of a
    subclass of it."""
    tag = arc.model_tag()
    if tag is None:
        raise ConfigMismatchError(
            f"the archive holds a {arc.summary()[:100]!r}, not a ConfiguredModel; read it with zarchive.read"
        )
    cls = model_class_for(tag, expected)
    return arc.load(map_location=map_location, dtype=dtype, root_class=cls)


def model_class_for(tag: Any, expected: type[Any]) -> type[Any]:
    """The class to build for a model node tagged `tag` when the caller asks for `expected`."""
    if not (isinstance(expected, type) and issubclass(expected, ConfiguredModelBase)):
        raise TypeError(f"expected a ConfiguredModel subclass, not {expected!r}")
    if tag == class_tag(expected):
        return expected
    try:
        found = resolve_class(tag, is_model_class, what="ConfiguredModel")
    except UnknownTypeError:
        if expected.config_class() is None:  # ConfiguredModel.read itself: the file's class is needed
            raise
        found = None
    if found is not None and issubclass(found, expected):
        return found
    raise ConfigMismatchError(
        f"the archive holds a {str(tag)[:200]} model, not a {class_tag(expected)} (if it is the same class "
        f"under another name, zarchive.register_class({expected.__qualname__}, name={str(tag)[:200]!r}))"
    )


__all__ = ["model_class_for", "read_model"]
