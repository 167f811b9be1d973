"""What to tell a user whose object no handler saves, for objects people commonly try to save whole.

`torch.save(model)` pickles a whole `nn.Module` (its class, by name, and every attribute); zarchive
never pickles, so a plain module, an optimizer or a scheduler is saved through its `state_dict()`,
or as a ConfiguredModel (the module rebuilt from its config on reading), or with save_checkpoint.
torch is never imported here: an object of its classes cannot exist unless torch already was.
"""

from __future__ import annotations

import functools
import sys
import types
from typing import Any

_MODULE = (
    "a torch.nn.Module is not saved whole (that would need pickling its class): save its state_dict() "
    "(zarchive.save(model.state_dict(), path), then model.load_state_dict(zarchive.read(path))), or make it a "
    "zarchive.torchutil.ConfiguredModel to save it with its config and read it back as a model"
)
_STATEFUL = (
    "a torch {what} is not saved whole (that would need pickling it): save its state_dict(), or save model, "
    "optimizer and scheduler together with zarchive.save_checkpoint"
)


_CODE = (
    "a {what} is code, and zarchive stores data, never code (a reader must not run anything a file names): "
    "save the values it computes, or its name as a string and look it up in your program after reading"
)
_CODE_KINDS: tuple[tuple[tuple[type, ...], str], ...] = (
    ((types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial), "function"),
    ((types.ModuleType,), "module"),
    ((types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType), "generator or coroutine"),
    ((types.CodeType, types.FrameType, types.TracebackType), "code object"),
)


def save_hint(obj: Any) -> str | None:
    """Advice for saving `obj`, when it is code (a function, lambda, module, generator), a torch module,
    optimizer or LR scheduler; else None."""
    for kinds, what in _CODE_KINDS:
        if isinstance(obj, kinds):
            return _CODE.format(what=what)
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if isinstance(obj, torch.nn.Module):
            return _MODULE
        if isinstance(obj, torch.optim.Optimizer):
            return _STATEFUL.format(what="optimizer")
        if isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
            return _STATEFUL.format(what="learning-rate scheduler")
    except AttributeError:  # a torch without one of these classes
        return None
    return None
