"""ConfiguredModel instances: the model class, its config dataclass and its state dict.

Node: {"$type": "torch.ConfiguredModel", "class": tag, "config": <dataclass node>,
       "state_dict": <dict node>, "training": bool}, plus, only when needed, "training_modules"
(submodules whose train/eval flag differs from the model's) and "unsaved_buffers" (dtype and device
of non-persistent buffers, which the state dict leaves out) and "tensor_attributes" (tensors held
as plain attributes). Both say the model must be built for real on reading. "training_records"
(format 1.3): the model's `training_records` (anything, e.g. losses, as ZANJ keeps them), when not None.

A class that overrides `_load_state_dict_wrapper` (ZANJ's hook), or a read whose custom_settings
hold "_load_state_dict_wrapper" keyword arguments, gets a real build and the weights through that
method instead of the assignment below.

Reading builds the model under `torch.device("meta")` (no memory; initialisers skipped) and
assigns the loaded tensors, which map the file, so a large model reads about as fast as the file can
be mapped. When the model has state the state dict does not hold (non-persistent buffers, plain tensor
attributes, an __init__ that needs real values) it is built normally instead, without disturbing the
global RNG. Parameters tied in the freshly built model (one Parameter under two names) are tied again
after the weights are assigned. Out-of-place arithmetic on tensors in __init__ (`torch.randn(n) * 0.02`)
runs torch's Python meta kernels, which import torch._dynamo the first time (a second or so, once
per process).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from .._compat import torch as torch_compat
from ..engine.context import LoadContext, Node, SaveContext
from ..engine.typeref import class_tag, is_model_class
from ..errors import ConfigMismatchError, FormatError, UnsafeArchiveError
from ..models.configured import ConfiguredModelBase, declared_config_class
from ..nodes.classes import ConfiguredModelSchema
from .base import Handler, expect
from .build_limit import AllocationLimit
from .dataclass_ import DataclassHandler, load_dataclass, recorded_tag
from .load_hook import load_through_wrapper, overrides_wrapper, wrapper_settings
from .meta_build import building_on_meta
from .state_assign import assign_state_dict
from .torch_free import ModelAsGeneric
from .torch_types import dtype_from_name, dtype_name, place

NAME = "torch.ConfiguredModel"


def _is_model_class(cls: type) -> bool:
    return is_model_class(cls)


class ConfiguredModelHandler(ConfiguredModelSchema, Handler):
    name = NAME

    def accepts(self, cls: type) -> bool:
        return _is_model_class(cls)

    def save(self, model: ConfiguredModelBase[Any], ctx: SaveContext) -> Node:
        cls = type(model)
        config_class = declared_config_class(cls)
        if config_class is None:
            raise ctx.error(f"{cls.__qualname__} has no config class: decorate it with @set_config_class")
        config = getattr(model, "zanj_model_config", None)  # .config; zanj's own models have only this name
        if not isinstance(config, config_class):
            raise ctx.error(
                f"{cls.__qualname__}.config is a {type(config).__qualname__}, not its declared "
                f"{config_class.__qualname__} (did __init__ call super().__init__(config)?)"
            )
        node: dict[str, Any] = {
            "$type": NAME,
            "class": recorded_tag(cls, ctx, "ConfiguredModel"),
            "config": ctx.save(config, "config"),
            "state_dict": ctx.save(model.state_dict(), "state_dict"),
            "training": model.training,
        }
        differing = {name: m.training for name, m in model.named_modules() if name and m.training != model.training}
        if differing:
            node["training_modules"] = differing
        unsaved = _unsaved_buffers(model)
        if unsaved:
            node["unsaved_buffers"] = unsaved
        attrs = _tensor_attributes(model)
        if attrs:
            node["tensor_attributes"] = attrs
        records = getattr(model, "training_records", None)
        if records is not None:
            node["training_records"] = ctx.save(records, "training_records")
        node.update(model_inventory(model))
        return node

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        cls = ctx.resolve_class(node.get("class"), "ConfiguredModel")
        if cls is None:  # unresolved="generic": the config (itself generic if need be) and real tensors
            return ModelAsGeneric().load(node, ctx)
        return load_model(node, ctx, cls)


def model_inventory(model: torch.nn.Module) -> dict[str, Any]:
    """Format 1.5: what only building the class told a reader before (spec/models.md 2.2): every
    module's class, which names are parameters (and whether each requires grad) and which are buffers."""
    return {
        "modules": {name: class_tag(type(m)) for name, m in model.named_modules()},
        "parameters": {name: p.requires_grad for name, p in model.named_parameters(remove_duplicate=False)},
        "buffers": [name for name, _ in model.named_buffers(remove_duplicate=False)],
    }


def _unsaved_buffers(model: torch.nn.Module) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for mname, m in model.named_modules():
        for bname in sorted(torch_compat.non_persistent_buffer_names(m)):
            t = torch_compat.own_buffers(m).get(bname)
            if t is not None:
                out[f"{mname}.{bname}" if mname else bname] = {"dtype": dtype_name(t.dtype), "device": str(t.device)}
    return out


def _tensor_attributes(model: torch.nn.Module) -> list[str]:
    """Tensors held as plain attributes (neither parameters nor buffers): not in the state dict."""
    return [
        f"{mname}.{k}" if mname else k
        for mname, m in model.named_modules()
        for k, v in vars(m).items()
        if isinstance(v, torch.Tensor)
    ]


# --- reading ---
# classes seen to need a real build in this process (non-persistent buffers, tensor attributes, an
# __init__ that cannot run on meta), so the meta attempt is not repeated for them
_REAL_BUILD: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def load_model(node: dict[str, Any], ctx: LoadContext, cls: type[Any]) -> Any:
    """Build `cls` from the node's config and load the node's weights into it exactly."""
    config = _in_path(ctx, "config", lambda: _load_config(node.get("config"), ctx, cls))
    sd = ctx.load(node.get("state_dict"), "state_dict")
    if not isinstance(sd, dict) or not all(isinstance(k, str) for k in sd):
        raise ctx.error("the model's state_dict is not a dict with string keys")
    training = expect(node, "training", bool, ctx)
    records = ctx.load(node["training_records"], "training_records") if "training_records" in node else None

    real_only = bool(node.get("unsaved_buffers") or node.get("tensor_attributes"))
    model = build_model(cls, config, sd, ctx, real_only=real_only)
    _place_unsaved_buffers(model, node.get("unsaved_buffers"), ctx)

    model.train(training)
    _restore_training_flags(model, node.get("training_modules"), ctx)
    if records is not None or hasattr(model, "training_records"):
        model.training_records = records
    return model


def build_model(cls: type[Any], config: Any, sd: dict[str, Any], ctx: LoadContext, *, real_only: bool = False) -> Any:
    """`cls(config)` holding exactly the loaded tensors of `sd` (also for a ZANJ file's models).

    Built on meta and the tensors assigned where the class allows it; otherwise (or with
    `real_only`: the model has state the state dict lacks) built for real, allocating at most
    twice the bytes of `sd` plus REAL_BUILD_MARGIN. A config that asks for more than the archive
    holds is refused (ConfigMismatchError or UnsafeArchiveError) before it allocates."""
    budget = 2 * _state_bytes(sd) + REAL_BUILD_MARGIN
    wrapper_kwargs = wrapper_settings(ctx)
    if wrapper_kwargs is not None or overrides_wrapper(cls):
        model = _build(cls, config, ctx, on_meta=False, budget=budget)
        return load_through_wrapper(model, sd, wrapper_kwargs or {}, cls, ctx)
    model = None if real_only or cls in _REAL_BUILD else _load_on_meta(cls, config, sd, ctx, budget)
    if model is None:
        model = _load_weights(_build(cls, config, ctx, on_meta=False, budget=budget), sd, cls, ctx)
    return model


def _load_on_meta(cls: type[Any], config: Any, sd: dict[str, Any], ctx: LoadContext, budget: int) -> Any:
    """The model built on meta with the loaded tensors assigned, or None where a real build is
    needed: the class cannot be built on meta or holds state the state dict lacks. Weights that do
    not fit the meta build are refused (ConfigMismatchError), never tried on a real build: a config
    that asks for more than the archive holds must not allocate it."""
    model = _build(cls, config, ctx, on_meta=True)
    if model is None:
        _REAL_BUILD[cls] = True
        return None
    needed = _state_bytes(dict(model.state_dict(keep_vars=True)))
    _load_weights(model, sd, cls, ctx)
    if not _all_meta(sd) and _meta_left(model):
        _REAL_BUILD[cls] = True
        if needed > budget:
            raise UnsafeArchiveError(
                f"{cls.__qualname__} built from the archive's config needs {needed:,} bytes, far more than the "
                f"{_state_bytes(sd):,} bytes of weights the archive holds",
                path=ctx.path_str,
            )
        return None
    return model


REAL_BUILD_MARGIN = 256 << 20  # bytes a real build may allocate beyond twice the archive's weights


def _state_bytes(sd: dict[str, Any]) -> int:
    return sum(t.numel() * t.element_size() for t in sd.values() if isinstance(t, torch.Tensor))


def _in_path(ctx: LoadContext, key: str, fn: Callable[[], Any]) -> Any:
    ctx.path.append(key)
    try:
        return fn()
    finally:
        ctx.path.pop()


def _load_config(cfg_node: Any, ctx: LoadContext, cls: type[Any]) -> Any:
    declared = declared_config_class(cls)
    if declared is None:
        raise ConfigMismatchError(f"{cls.__qualname__} has no config class (@set_config_class)", path=ctx.path_str)
    if not (isinstance(cfg_node, dict) and cfg_node.get("$type") == DataclassHandler.name):
        raise FormatError("a model's config must be a dataclass node", path=ctx.path_str)
    tag = cfg_node.get("class")
    config_class = declared
    if tag != class_tag(declared):
        found = ctx.resolve_class(tag, "dataclass")
        if found is None or not issubclass(found, declared):
            raise ConfigMismatchError(
                f"{cls.__qualname__} is configured by {class_tag(declared)}, but the archive's config is a "
                f"{str(tag)[:200]}",
                path=ctx.path_str,
            )
        config_class = found
    return load_dataclass(cfg_node, ctx, config_class)


def _build(cls: type[Any], config: Any, ctx: LoadContext, *, on_meta: bool, budget: int = 0) -> Any:
    """`cls(config)`: on the meta device (None if that cannot work for this class), or for real,
    allocating at most `budget` bytes of tensors (an UnsafeArchiveError past it).
    The global RNG is left as it was, so reading a model does not change later random numbers."""
    with torch.random.fork_rng(devices=[]):
        if on_meta:
            try:
                with building_on_meta():
                    model = cls(config)
            except Exception:  # noqa: BLE001 - e.g. __init__ reads tensor values; the real build will tell
                return None
            if any(torch_compat.non_persistent_buffer_names(m) for m in model.modules()):
                return None
            return model
        try:
            with AllocationLimit(budget) as limit:
                return cls(config)
        except Exception as e:
            if limit.exceeded:
                raise UnsafeArchiveError(
                    f"building {cls.__qualname__} from the archive's config asked for more than {budget:,} bytes "
                    "of tensors, far more than the weights the archive holds",
                    path=ctx.path_str,
                ) from None
            raise ConfigMismatchError(
                f"{cls.__qualname__}(config) failed: {type(e).__name__}: {e}", path=ctx.path_str
            ) from e


def _tie_groups(model: torch.nn.Module) -> list[tuple[str, list[str]]]:
    """Names sharing one Parameter or buffer object in `model`: [(kind, [names])]."""
    groups: list[tuple[str, list[str]]] = []
    for kind, named in (
        ("parameter", model.named_parameters(remove_duplicate=False)),
        ("buffer", model.named_buffers(remove_duplicate=False)),
    ):
        by_id: dict[int, list[str]] = {}
        for name, t in named:
            by_id.setdefault(id(t), []).append(name)
        groups += [(kind, names) for names in by_id.values() if len(names) > 1]
    return groups


def _load_weights(model: torch.nn.Module, sd: dict[str, Any], cls: type[Any], ctx: LoadContext) -> torch.nn.Module:
    """Assign the loaded tensors (no copy, dtypes kept) and re-tie what the fresh model ties."""
    ties = _tie_groups(model)
    if assign_state_dict(model, sd):  # the usual case, without load_state_dict's per-module machinery
        missing: list[str] = []
        unexpected: list[str] = []
    else:
        try:
            result = model.load_state_dict(sd, strict=False, assign=True)
        except RuntimeError as e:
            raise ConfigMismatchError(
                f"the archive's weights do not fit {cls.__qualname__} built from its config: {str(e)[:2000]}",
                path=_sd_path(ctx),
            ) from None
        missing, unexpected = result.missing_keys, result.unexpected_keys
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing from the archive: {_names(missing)}")
        if unexpected:
            parts.append(f"not in the model: {_names(unexpected)}")
        raise ConfigMismatchError(
            f"the archive's state dict does not match {cls.__qualname__} built from its config ({'; '.join(parts)})",
            path=_sd_path(ctx),
        )
    for kind, names in ties:
        get = model.get_parameter if kind == "parameter" else model.get_buffer
        first = get(names[0])
        for name in names[1:]:
            other = get(name)
            if other is first:
                continue
            if not _same_tensor(first, other):
                ctx.mismatch(
                    f"{cls.__qualname__} ties {names[0]!r} and {name!r}, but they differ in the archive; "
                    "they are left untied"
                )
                continue
            owner, _, leaf = name.rpartition(".")
            module = model.get_submodule(owner)
            if kind == "parameter":
                torch_compat.set_parameter(module, leaf, first)
            else:
                torch_compat.set_buffer(module, leaf, first)
    return model


def _sd_path(ctx: LoadContext) -> str:
    return "/".join([p for p in (ctx.path_str, "state_dict") if p])


def _names(keys: list[str]) -> str:
    shown = ", ".join(repr(k) for k in keys[:10])
    return shown + (f" and {len(keys) - 10} more" if len(keys) > 10 else "")


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.device != b.device or a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.device.type == "meta":
        return True
    return (
        a.numel() == 0
        or (a.data_ptr() == b.data_ptr() and a.stride() == b.stride())
        or bool(torch.equal(a.detach(), b.detach()))
    )


def _all_meta(sd: dict[str, Any]) -> bool:
    tensors = [t for t in sd.values() if isinstance(t, torch.Tensor)]
    return bool(tensors) and all(t.device.type == "meta" for t in tensors)


def _meta_left(model: torch.nn.Module) -> bool:
    """Whether anything built on the meta device was not replaced by loaded data."""
    for m in model.modules():
        for t in (*torch_compat.own_parameters(m).values(), *torch_compat.own_buffers(m).values(), *vars(m).values()):
            if isinstance(t, torch.Tensor) and t.is_meta:
                return True
    return False


def _place_unsaved_buffers(model: torch.nn.Module, recorded: Any, ctx: LoadContext) -> None:
    """Give non-persistent buffers (built by __init__) the dtype and device they were saved with."""
    if not isinstance(recorded, dict):
        return
    for name, info in recorded.items():
        if not isinstance(name, str) or not isinstance(info, dict):
            raise ctx.error("bad 'unsaved_buffers' entry")
        owner, _, leaf = name.rpartition(".")
        try:
            module = model.get_submodule(owner)
        except AttributeError:
            module = None
        t = torch_compat.own_buffers(module).get(leaf) if module is not None else None
        if t is None:
            continue  # the class no longer builds it: nothing to restore
        dtype = dtype_from_name(info.get("dtype"), ctx)
        if ctx.dtype is not None and dtype.is_floating_point:
            dtype = ctx.dtype
        device = place(info.get("device", "cpu"), ctx)
        torch_compat.set_buffer(module, leaf, t.to(device=device if device is not None else t.device, dtype=dtype))  # type: ignore[arg-type]


def _restore_training_flags(model: torch.nn.Module, differing: Any, ctx: LoadContext) -> None:
    if differing is None:
        return
    if not isinstance(differing, dict) or not all(isinstance(v, bool) for v in differing.values()):
        raise ctx.error("bad 'training_modules' (must map submodule names to booleans)")
    for name, flag in differing.items():
        try:
            model.get_submodule(name).training = flag
        except AttributeError:
            ctx.mismatch(f"{type(model).__qualname__} has no submodule {str(name)[:100]!r} to set training={flag}")


__all__ = ["ConfiguredModelHandler", "build_model", "load_model"]
