"""Opening an archive's exports: an onnxruntime session from the ONNX member's bytes, a TorchScript
module from its member (which runs code stored in the file: only on request, see LazyArchive).
The optional packages are imported here, on first use, with an error naming the extra when missing."""

from __future__ import annotations

import importlib
import io
from types import ModuleType
from typing import Any

DEPLOY_EXTRA = "deploy"


def require(module: str, what: str) -> ModuleType:
    """Import an optional package of the `deploy` extra, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"{what} needs the {module!r} package: pip install 'zarchive-ml[{DEPLOY_EXTRA}]'", name=module
        ) from e


def onnx_session(data: bytes, *, member: str | None = None, **ort_kwargs: Any) -> Any:
    """An onnxruntime.InferenceSession of the ONNX file `data`, once it is checked to refer to nothing
    outside its bytes (deploy.onnx_check: UnsafeArchiveError naming `member` otherwise; no session is
    made). Without `providers=`, every provider this onnxruntime build has (CUDA first where present),
    as onnxruntime orders them."""
    from .onnx_check import check_self_contained

    check_self_contained(data, member=member)
    ort = require("onnxruntime", "running an ONNX export")
    if "providers" not in ort_kwargs:
        ort_kwargs["providers"] = ort.get_available_providers()
    return ort.InferenceSession(data, **ort_kwargs)


def load_torchscript(data: bytes, map_location: Any = None) -> Any:
    """torch.jit.load of a TorchScript file's bytes. It runs the code the file holds."""
    import torch

    return torch.jit.load(io.BytesIO(data), map_location=map_location)
