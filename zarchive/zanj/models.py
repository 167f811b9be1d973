"""ZANJ ConfiguredModels read into the matching model class here.

ZANJ writes a model as its class name, its config (a SerializableDataclass), its state dict and some
information (module, source code, parameter count) that is shown but never run. The class is found by
name among ConfiguredModel subclasses already imported (zarchive's first, then ZANJ's own); it must
declare a config class of the same name as the file's. The model is built as `cls(config)` and the
weights are loaded strictly, so a class that builds other shapes is a ConfigMismatchError.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigMismatchError, UnknownTypeError
from .classes import SDC_SUFFIX, config_class_of, resolve_model
from .loader import FORMAT_KEY, ZanjLoader, node_kind


def load_model(ld: ZanjLoader, node: dict[str, Any]) -> Any:
    """The model a ZANJ model node describes (or, with unknown="dict", a dict if its class is not here)."""
    name = node[FORMAT_KEY]
    cfg_node = node["zanj_model_config"]
    if node_kind(cfg_node) != "dataclass":
        raise ld.error("a ZANJ model's zanj_model_config must be a SerializableDataclass")
    cfg_name = cfg_node[FORMAT_KEY][: -len(SDC_SUFFIX)]
    try:
        cls = resolve_model(name, node["meta"].get("module_name"), cfg_name, path=ld.path_str)
    except UnknownTypeError:
        if ld.unknown == "error":
            raise
        return {k: ld.load(v, k) for k, v in node.items() if k != "meta"}
    cfg_cls = config_class_of(cls)
    if cfg_cls is None or cfg_cls.__name__ != cfg_name:
        raise ld.error(
            f"{cls.__qualname__} takes a {getattr(cfg_cls, '__qualname__', None)} config; the file's {name} "
            f"has a {cfg_name} config",
            cls=ConfigMismatchError,
        )
    ld.path.append("zanj_model_config")
    try:
        config = ld.load_dataclass(cfg_node, cfg_cls)
    finally:
        ld.path.pop()
    placement = (ld.map_location, ld.dtype)
    ld.map_location = ld.dtype = None  # weights are copied into the model, which is moved after
    try:
        state = ld.load(node["state_dict"], "state_dict")
    finally:
        ld.map_location, ld.dtype = placement
    records = ld.load(node.get("training_records"), "training_records")
    return _build_model(ld, cls, config, state, records)


def _build_model(ld: ZanjLoader, cls: type, config: Any, state: Any, records: Any) -> Any:
    import torch

    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ld.error("a ZANJ model's state_dict must map names to tensors")
    try:
        model = cls(config)
    except Exception as e:  # the class's own __init__ rejected the config
        raise ld.error(f"{cls.__qualname__}(config) failed: {type(e).__name__}: {e}", cls=ConfigMismatchError) from e
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise ld.error(
            f"the file's weights do not fit {cls.__qualname__} built from its config: {str(e)[:500]}",
            cls=ConfigMismatchError,
        ) from e
    if records is not None or hasattr(model, "training_records"):
        model.training_records = records
    device = ld.target_device()
    if device is not None:
        model = model.to(device)
    if ld.dtype is not None:
        model = model.to(ld.dtype)
    return model
