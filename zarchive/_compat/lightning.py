"""Lightning internals: the function `LightningModule.load_from_checkpoint` uses to build a module
or datamodule from a checkpoint dict, `<namespace>.core.saving._load_state`.

`load_from_checkpoint` itself reads its file with torch.load, so zarchive reads the checkpoint and
hands the dict to `_load_state(cls, checkpoint, strict=..., **kwargs)`. Lightning ships under two
names (`lightning.pytorch` and `pytorch_lightning`), each with its own copy, probed separately.

Probes (see the package docstring for the rule), "lightning.load_state:<namespace>": the function
exists and takes (cls, checkpoint, strict=..., **kwargs). Fallback: None, and the caller builds
the object with public API (zarchive.lightning.from_checkpoint's `_load_state_publicly`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from functools import partial
from typing import Any

from . import Probe

NAMESPACES = ("lightning.pytorch", "pytorch_lightning")


def _check_load_state(namespace: str) -> Callable[..., Any] | None:
    saving = importlib.import_module(namespace + ".core.saving")  # a fixed name, never one read from a file
    fn = getattr(saving, "_load_state", None)
    if not callable(fn):
        return None
    params = list(inspect.signature(fn).parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if len(params) < 3 or [p.kind in positional for p in params[:2]] != [True, True]:
        return None
    if not any(p.name == "strict" and p.kind != inspect.Parameter.VAR_KEYWORD for p in params[2:]):
        return None
    if params[-1].kind != inspect.Parameter.VAR_KEYWORD:
        return None
    return fn


_LOAD_STATE = {ns: Probe(f"lightning.load_state:{ns}", partial(_check_load_state, ns)) for ns in NAMESPACES}


def load_state(namespace: str) -> Callable[..., Any] | None:
    """Lightning's `_load_state(cls, checkpoint, strict=None, **kwargs)` of `namespace` (one of
    NAMESPACES), or None when it is missing or takes other arguments."""
    return _LOAD_STATE[namespace].get()


__all__ = ["NAMESPACES", "load_state"]
