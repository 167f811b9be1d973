"""Built-in handlers, one module per family of types. They are listed (not imported) in `catalog`,
and imported by the registry when a save or a read first needs one."""

from __future__ import annotations

from typing import Any

from .base import Handler


def __getattr__(name: str) -> Any:
    if name == "DEFAULT_HANDLERS":  # every built-in handler, imported: for tests and tools that list them
        from ..engine.registry import default_handlers

        return default_handlers()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Handler"]
