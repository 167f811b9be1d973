"""The optional packages of exports (onnx, onnxruntime, onnxscript: the `deploy` extra), imported on
first use, with an error that says how to install them when they are missing."""

from __future__ import annotations

import importlib
from types import ModuleType

DEPLOY_EXTRA = "deploy"
INSTALL_HINT = (
    f"install the {DEPLOY_EXTRA!r} extra (in a zarchive checkout: pip install '.[{DEPLOY_EXTRA}]'), "
    "or the packages themselves: pip install onnx onnxruntime onnxscript"
)


def require(module: str, what: str) -> ModuleType:
    """Import an optional package of the `deploy` extra, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{what} needs the {module!r} package: {INSTALL_HINT}", name=module) from e


__all__ = ["DEPLOY_EXTRA", "INSTALL_HINT", "require"]
