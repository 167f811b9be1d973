"""Building a model on the meta device without computing the values its __init__ would fill in.

Reading a ConfiguredModel builds `cls(config)` on meta (no memory) and then assigns the loaded
tensors. In-place value changes of meta tensors (random fills, nn.init functions, `w.mul_(2)`) change
nothing, but many run torch's Python meta kernels, which import torch._dynamo on first use (seconds,
once per process): they are skipped, and torch.randn/randn_like return empty meta tensors. In-place
ops that change shape, strides or flags are not value changes and still run.

Both jobs run in one torch-function mode that is also the `torch.device("meta")` context: every torch
call made under a Python mode takes a round trip through it, and stacking our mode on top of
torch.device's doubled the build time of a 124M-parameter GPT (16 ms -> 8 ms with one layer). The one
layer is a subclass of torch's private DeviceContext, made by zarchive/_compat/torch.py; when that
class is not as expected, `torch.device("meta")` and SkipValuesOnMeta are stacked instead.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .._compat import torch as torch_compat

_NOT_VALUE_ONLY = frozenset({
    "requires_grad_", "resize_", "resize_as_", "set_", "as_strided_", "squeeze_", "unsqueeze_", "t_",
    "transpose_", "swapdims_", "swapaxes_", "share_memory_", "detach_", "rename_", "refine_names_",
    "sparse_resize_", "sparse_resize_and_clear_", "resize_as_sparse_",
})  # fmt: skip
_INPLACE_DUNDERS = frozenset({
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
    "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__imatmul__", "__setitem__",
})  # fmt: skip
_RUN = object()  # "not skipped: run the function"


def _value_only_inplace(name: Any) -> bool:
    if not isinstance(name, str):
        return False
    if name in _INPLACE_DUNDERS:
        return True
    return name.endswith("_") and not name.startswith("_") and name not in _NOT_VALUE_ONLY


def _meta(device: Any) -> bool:
    return device is None or torch.device(device).type == "meta"


# what each function seen so far needs (a build makes ~750 torch calls through the mode, mostly of a
# dozen functions): 0 nothing, 1 maybe skipped (value-only in-place, randn, randn_like)
_KIND: dict[Any, int] = {}
_MAX_KINDS = 4096


def _kind(func: Any) -> int:
    try:
        return _KIND[func]
    except (KeyError, TypeError):  # TypeError: an unhashable callable
        pass
    kind = 1 if _value_only_inplace(getattr(func, "__name__", None)) or func in (torch.randn, torch.randn_like) else 0
    if len(_KIND) < _MAX_KINDS:  # the functions model code calls: a few dozen; never more than this
        try:
            _KIND[func] = kind
        except TypeError:
            pass
    return kind


def skipped_result(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """What `func(*args, **kwargs)` returns without running when building on meta, or _RUN."""
    if not _kind(func):
        return _RUN
    name = getattr(func, "__name__", None)
    if _value_only_inplace(name):
        target = kwargs.get("tensor", args[0] if args else None)
        if isinstance(target, torch.Tensor) and target.is_meta:
            return None if name == "__setitem__" else target
    elif func is torch.randn and not ({"out", "names"} & kwargs.keys()) and _meta(kwargs.get("device")):
        size = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else args
        return torch.empty(
            size, dtype=kwargs.get("dtype"), device="meta", requires_grad=kwargs.get("requires_grad", False)
        )
    elif (
        func is torch.randn_like
        and args
        and isinstance(args[0], torch.Tensor)
        and args[0].is_meta
        and _meta(kwargs.get("device"))
    ):
        return torch.empty_like(args[0], dtype=kwargs.get("dtype"), requires_grad=kwargs.get("requires_grad", False))
    return _RUN


class SkipValuesOnMeta(TorchFunctionMode):
    """The skipping alone, for use on top of `torch.device("meta")` (the two-layer fallback)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = skipped_result(func, args, kwargs)
        return func(*args, **kwargs) if out is _RUN else out


class _TwoLayers:
    """torch.device("meta") with SkipValuesOnMeta on top: the same effect, one mode layer more."""

    def __enter__(self) -> None:
        self._device = torch.device("meta")
        self._device.__enter__()
        self._skip = SkipValuesOnMeta()
        try:
            self._skip.__enter__()
        except BaseException:
            self._device.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self._skip.__exit__(*exc)
        finally:
            self._device.__exit__(*exc)


def building_on_meta(*, single_layer: bool = True) -> Any:
    """The context to run `cls(config)` in: tensors are created on meta and their values not computed."""
    if single_layer:
        # torch.device("meta") and the skipping in one mode layer, through torch's private
        # DeviceContext class (None when it is not as expected: then two public layers)
        mode_class = torch_compat.device_mode_class(skipped_result, _RUN)
        if mode_class is not None:
            return mode_class("meta")
    return _TwoLayers()


__all__ = ["SkipValuesOnMeta", "building_on_meta", "skipped_result"]
