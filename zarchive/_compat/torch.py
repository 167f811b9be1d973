"""torch internals: a module's own parameter and buffer dicts, its load_state_dict hook registries,
and the class behind `torch.device(...)` used as a context.

Probes (see the package docstring for the rule):

- "torch.module_dicts": `Module._parameters`, `_buffers`, `_non_persistent_buffers_set` hold what
  register_parameter/register_buffer put there, and writing them changes what the public API sees.
  Fallback: `named_parameters/named_buffers(recurse=False)`, setattr/register_buffer, and the
  non-persistent buffers found as the buffers missing from the module's state dict.
- "torch.load_hooks": `Module._load_from_state_dict`, the per-module `_load_state_dict_pre_hooks` /
  `_load_state_dict_post_hooks` and the global registration-hook dicts of torch.nn.modules.module
  are where the public register_* functions put hooks. Fallback: "cannot tell", so the fast state
  dict assignment declines and load_state_dict runs.
- "torch.device_context": `torch.utils._device.DeviceContext` and `_device_constructors()` make a
  subclass that is the torch.device context and an extra torch-function mode in one layer.
  Fallback: None, and the caller stacks its mode on the public `with torch.device(...)`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as _module
from torch.overrides import TorchFunctionMode

from . import Probe

# --- a module's own parameters and buffers ---


@dataclass(frozen=True)
class ModuleSlots:
    """Direct access to a module's own dicts, read and written in place (no hooks, no checks)."""

    parameters: Callable[[nn.Module], dict[str, nn.Parameter | None]]
    buffers: Callable[[nn.Module], dict[str, torch.Tensor | None]]
    non_persistent: Callable[[nn.Module], set[str]]


_SLOTS = ModuleSlots(
    parameters=attrgetter("_parameters"),
    buffers=attrgetter("_buffers"),
    non_persistent=attrgetter("_non_persistent_buffers_set"),
)


def _check_module_dicts() -> ModuleSlots | None:
    m = nn.Module()
    p, b, nb = nn.Parameter(torch.zeros(1)), torch.zeros(1), torch.ones(1)
    m.register_parameter("w", p)
    m.register_parameter("absent", None)
    m.register_buffer("b", b)
    m.register_buffer("nb", nb, persistent=False)
    params, buffers, non_persistent = _SLOTS.parameters(m), _SLOTS.buffers(m), _SLOTS.non_persistent(m)
    if not (isinstance(params, dict) and isinstance(buffers, dict) and isinstance(non_persistent, set)):
        return None
    if list(params) != ["w", "absent"] or params["w"] is not p or params["absent"] is not None:
        return None
    if list(buffers) != ["b", "nb"] or buffers["b"] is not b or buffers["nb"] is not nb or non_persistent != {"nb"}:
        return None
    p2, b2 = nn.Parameter(torch.ones(1)), torch.full((1,), 2.0)
    params["w"], buffers["b"] = p2, b2  # writes must be what the public API then reads
    if m.get_parameter("w") is not p2 or m.get_buffer("b") is not b2:
        return None
    sd = m.state_dict(keep_vars=True)
    if list(sd) != ["w", "b"] or sd["w"] is not p2 or sd["b"] is not b2:
        return None
    return _SLOTS


_MODULE_DICTS = Probe("torch.module_dicts", _check_module_dicts)


def module_slots() -> ModuleSlots | None:
    """Direct access to modules' own dicts, or None when torch no longer keeps them as expected."""
    return _MODULE_DICTS.get()


def own_parameters(m: nn.Module) -> Mapping[str, nn.Parameter | None]:
    """`m`'s own parameters by name (not its submodules'); read-only (the live dict when fast)."""
    if _MODULE_DICTS.get() is not None:
        return _SLOTS.parameters(m)
    return dict(m.named_parameters(recurse=False, remove_duplicate=False))


def own_buffers(m: nn.Module) -> Mapping[str, torch.Tensor | None]:
    """`m`'s own buffers by name, persistent or not; read-only (the live dict when fast)."""
    if _MODULE_DICTS.get() is not None:
        return _SLOTS.buffers(m)
    return dict(m.named_buffers(recurse=False, remove_duplicate=False))


def non_persistent_buffer_names(m: nn.Module) -> AbstractSet[str]:
    """Names of `m`'s own buffers registered with persistent=False (left out of its state dict).

    Public fallback: `m`'s buffers whose names its state dict lacks (a state-dict hook that drops a
    buffer makes it count as non-persistent, which every caller treats as the cautious answer)."""
    if _MODULE_DICTS.get() is not None:
        return _SLOTS.non_persistent(m)
    own = {name for name, _ in m.named_buffers(recurse=False, remove_duplicate=False)}
    if not own:
        return frozenset()
    return frozenset(own - {k for k in m.state_dict(keep_vars=True) if "." not in k})


def set_parameter(m: nn.Module, name: str, p: torch.Tensor) -> None:
    """Make `p` (an nn.Parameter) `m`'s own parameter `name` (replacing the one there)."""
    if not isinstance(p, nn.Parameter):
        raise TypeError(f"{name!r}: a parameter must be an nn.Parameter, not {type(p).__name__}")
    if _MODULE_DICTS.get() is not None:
        _SLOTS.parameters(m)[name] = p
    else:
        m.register_parameter(name, p)


def set_buffer(m: nn.Module, name: str, t: torch.Tensor) -> None:
    """Make `t` `m`'s own buffer `name` (replacing the one there, persistence kept)."""
    if _MODULE_DICTS.get() is not None:
        _SLOTS.buffers(m)[name] = t
    elif isinstance(t, nn.Parameter):  # setattr would make it a parameter
        m.register_buffer(name, t, persistent=name not in non_persistent_buffer_names(m))
    else:
        if name not in own_buffers(m):
            raise KeyError(f"{type(m).__name__} has no buffer {name!r}")
        setattr(m, name, t)


# --- load_state_dict's hooks ---

_GLOBAL_HOOK_DICTS = (
    "_global_parameter_registration_hooks",
    "_global_buffer_registration_hooks",
    "_global_module_registration_hooks",
)
_GLOBAL_HOOK_REGISTRARS = (  # the public functions that fill them, in the same order
    "register_module_parameter_registration_hook",
    "register_module_buffer_registration_hook",
    "register_module_module_registration_hook",
)


def _hook_seen(registry: Callable[[], Any], register: Callable[[Callable[..., Any]], Any]) -> bool:
    """Whether a hook added through the public `register` shows in `registry()` until removed."""
    before = len(registry())
    handle = register(lambda *args: None)
    try:
        seen = len(registry()) == before + 1
    finally:
        handle.remove()
    return seen and len(registry()) == before


def _check_load_hooks() -> Callable[..., Any] | None:
    base = nn.Module.__dict__.get("_load_from_state_dict")
    if not callable(base):
        return None
    m = nn.Module()
    for attr, register in (
        ("_load_state_dict_pre_hooks", m.register_load_state_dict_pre_hook),
        ("_load_state_dict_post_hooks", m.register_load_state_dict_post_hook),
    ):
        if not isinstance(getattr(m, attr), dict) or not _hook_seen(functools.partial(getattr, m, attr), register):
            return None
    for attr, registrar in zip(_GLOBAL_HOOK_DICTS, _GLOBAL_HOOK_REGISTRARS):
        register = getattr(_module, registrar)
        if not isinstance(getattr(_module, attr), dict) or not _hook_seen(
            functools.partial(getattr, _module, attr), register
        ):
            return None
    return base  # type: ignore[no-any-return]


_LOAD_HOOKS = Probe("torch.load_hooks", _check_load_hooks)


def loads_like_base_module(m: nn.Module) -> bool:
    """Whether load_state_dict treats `m` as it treats a bare nn.Module: its class keeps
    Module._load_from_state_dict and `m` has no load_state_dict pre or post hook. False when this
    cannot be told (the caller then uses load_state_dict itself)."""
    base = _LOAD_HOOKS.get()
    if base is None:
        return False
    return (
        type(m)._load_from_state_dict is base and not m._load_state_dict_pre_hooks and not m._load_state_dict_post_hooks
    )


def no_global_registration_hooks() -> bool:
    """Whether no global parameter/buffer/module registration hook is installed. False when this
    cannot be told."""
    if _LOAD_HOOKS.get() is None:
        return False
    try:
        return not any(getattr(_module, attr) for attr in _GLOBAL_HOOK_DICTS)
    except AttributeError:
        return False


# --- torch.device(...) as a context ---


def _check_device_context() -> tuple[type[TorchFunctionMode], Collection[Any]] | None:
    from torch.utils import _device

    base = _device.DeviceContext
    constructors = _device._device_constructors()
    if not (isinstance(base, type) and issubclass(base, TorchFunctionMode)):
        return None
    if torch.empty not in constructors or torch.zeros not in constructors:
        return None
    mode_class = _make_device_mode_class(base, constructors, lambda func, args, kwargs: _PASS, _PASS)
    before = torch.empty(0).device
    mode = mode_class("meta")
    if getattr(mode, "device", None) != torch.device("meta"):
        return None
    with mode:
        inside = torch.empty(2).is_meta and torch.zeros(1, device="cpu").device.type == "cpu"
    if not inside or torch.empty(0).device != before:
        return None
    return base, constructors


_PASS = object()
_DEVICE_CONTEXT = Probe("torch.device_context", _check_device_context)


def _make_device_mode_class(
    base: type[TorchFunctionMode],
    constructors: Collection[Any],
    intercept: Callable[[Any, Any, dict[str, Any]], Any],
    run: object,
) -> Callable[[Any], TorchFunctionMode]:
    class DeviceModeWithIntercept(base):  # type: ignore[valid-type,misc]
        """`torch.device(device)` as a context, and `intercept(func, args, kwargs)` asked first: its
        result is returned unless it is `run`, in which case the call runs."""

        def __init__(self, device: Any) -> None:
            super().__init__(device)

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = intercept(func, args, kwargs)
            if out is not run:
                return out
            if func in constructors and kwargs.get("device") is None:
                kwargs["device"] = self.device
            return func(*args, **kwargs)

    return DeviceModeWithIntercept


@functools.cache
def _device_mode_class(
    intercept: Callable[[Any, Any, dict[str, Any]], Any], run: object
) -> Callable[[Any], TorchFunctionMode] | None:
    found = _DEVICE_CONTEXT.get()
    return None if found is None else _make_device_mode_class(found[0], found[1], intercept, run)


def device_mode_class(
    intercept: Callable[[Any, Any, dict[str, Any]], Any], run: object
) -> Callable[[Any], TorchFunctionMode] | None:
    """A class whose instances, made with a device, are `torch.device(device)` as a context and an
    extra torch-function mode in one mode layer: every torch call is first given to
    `intercept(func, args, kwargs)`, whose result is returned unless it is `run`. None when torch's
    device context class is not as expected (use `with torch.device(...)` plus a mode on top)."""
    if _DEVICE_CONTEXT.get() is None:
        return None
    return _device_mode_class(intercept, run)


__all__ = [
    "ModuleSlots",
    "device_mode_class",
    "loads_like_base_module",
    "module_slots",
    "no_global_registration_hooks",
    "non_persistent_buffer_names",
    "own_buffers",
    "own_parameters",
    "set_buffer",
    "set_parameter",
]
