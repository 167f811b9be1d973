"""zanj internals: the config class that a model class deriving from zanj's own
`zanj.torchutil.ConfiguredModel` declares. zanj's `set_config_class` keeps it in the class attribute
`_config_class`; zanj's public `zanj_config_class` is a property of instances only, and reading needs
it before an instance exists.

Probe "zanj.config_class": `zanj.torchutil.ConfiguredModel` has a class attribute `_config_class`
(None on the base) beside its public `zanj_config_class` property (zanj's `set_config_class` cannot
be tried on a throwaway class: it registers the class with zanj's loaders). Fallback: None
(the class counts as having no config class: saving it refuses it, naming the fix).
This module is imported only where `zanj.torchutil` is already in `sys.modules`.
"""

from __future__ import annotations

import sys
from typing import Any

from . import Probe


def _check_config_class() -> bool | None:
    base = getattr(sys.modules.get("zanj.torchutil"), "ConfiguredModel", None)
    if not isinstance(base, type) or "_config_class" not in base.__dict__:
        return None
    ok = base.__dict__["_config_class"] is None and isinstance(base.__dict__.get("zanj_config_class"), property)
    return True if ok else None


_CONFIG_CLASS = Probe("zanj.config_class", _check_config_class)


def zanj_model_base() -> type | None:
    """zanj's own ConfiguredModel class, if zanj.torchutil is imported (never imports it)."""
    base = getattr(sys.modules.get("zanj.torchutil"), "ConfiguredModel", None)
    return base if isinstance(base, type) else None


def config_class(cls: type) -> Any:
    """The config class a subclass of zanj's ConfiguredModel declares (None if none, or if zanj's
    layout is not as expected)."""
    if _CONFIG_CLASS.get() is None:
        return None
    found = getattr(cls, "_config_class", None)
    return found if isinstance(found, type) else None


__all__ = ["config_class", "zanj_model_base"]
