"""Assigning a loaded state dict to a freshly built model, quickly, exactly as
`model.load_state_dict(sd, strict=True, assign=True)` would.

torch's load_state_dict copies the dict, walks every module through `_load_from_state_dict` with
its hooks and checks, and assigns through `Module.__setattr__`: ~4 ms for GPT-2 small's 148 tensors,
a sixth of reading the whole model. When nothing can observe the difference (no module overrides
`_load_from_state_dict` or `set_extra_state`, no load hooks, no global registration hooks, no
swap-tensors mode, no lazy parameters), the same assignment is made here directly. Anything else
(missing or unexpected keys, a shape that differs, a value that is not a tensor) returns False
before touching the model, and the caller uses load_state_dict, which then reports the problem
in torch's own words. The look at torch's private module dicts and hook registries is made by
zarchive/_compat/torch.py; when they are not as expected, this always returns False.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .._compat import torch as torch_compat

_BASE_SET_EXTRA = nn.Module.set_extra_state


def _plain(m: nn.Module) -> bool:
    return getattr(
        type(m), "set_extra_state", _BASE_SET_EXTRA
    ) is _BASE_SET_EXTRA and torch_compat.loads_like_base_module(m)


def assign_state_dict(model: nn.Module, sd: dict[str, Any]) -> bool:
    """Assign every tensor of `sd` to `model` like load_state_dict(assign=True); False (the model
    untouched) when only load_state_dict itself can do it exactly."""
    slots = torch_compat.module_slots()  # None: torch's internals are not as expected
    if (
        slots is None
        or torch.__future__.get_swap_module_params_on_conversion()
        or not torch_compat.no_global_registration_hooks()
    ):
        return False
    params_of, buffers_of, non_persistent_of = slots.parameters, slots.buffers, slots.non_persistent
    todo: list[tuple[nn.Module, str, bool, torch.Tensor, Any]] = []  # module, name, is_param, old, new
    for prefix, m in model.named_modules(remove_duplicate=False):
        if not _plain(m):
            return False
        dot = prefix + "." if prefix else ""
        for name, p in params_of(m).items():
            if p is not None:
                todo.append((m, name, True, p, sd.get(dot + name, _MISSING)))
        non_persistent = non_persistent_of(m)
        for name, b in buffers_of(m).items():
            if b is not None and name not in non_persistent:
                todo.append((m, name, False, b, sd.get(dot + name, _MISSING)))
    if len(todo) != len(sd):  # a key of sd that no slot takes, or a slot without a key
        return False
    for _, _, is_param, old, new in todo:
        if (
            new is _MISSING
            or not isinstance(new, torch.Tensor)
            or nn.parameter.is_lazy(old)
            or new.shape != old.shape
            or (not is_param and isinstance(new, nn.Parameter))  # setattr would turn the buffer into a parameter
        ):
            return False
    with torch.no_grad():
        for m, name, is_param, old, new in todo:
            if is_param:
                if isinstance(new, nn.Parameter):
                    new.requires_grad_(old.requires_grad)
                else:
                    new = nn.Parameter(new, requires_grad=old.requires_grad)
                params_of(m)[name] = new
            else:
                buffers_of(m)[name] = new
    return True


_MISSING: Any = object()

__all__ = ["assign_state_dict"]
