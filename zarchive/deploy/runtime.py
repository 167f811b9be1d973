"""Opening an archive's exports: an onnxruntime session from the ONNX member's bytes, a TorchScript
module from its member (which runs code stored in the file: only on request, see LazyArchive).
The optional packages are imported here, on first use, with an error naming the extra when missing."""

from __future__ import annotations

import io
from typing import Any

from ..errors import FormatError
from .extras import require


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
    try:
        return ort.InferenceSession(data, **ort_kwargs)
    except Exception as e:  # noqa: BLE001 - onnxruntime's own error types (InvalidGraph, InvalidArgument, ...)
        message = " ".join(str(e).split())[:300]
        raise FormatError(
            f"onnxruntime cannot load the ONNX export ({type(e).__name__}: {message}): the member is damaged "
            "or was not written by a matching exporter",
            member=member,
        ) from None


def load_torchscript(data: bytes, map_location: Any = None) -> Any:
    """torch.jit.load of a TorchScript file's bytes. It runs the code the file holds."""
    import torch

    return torch.jit.load(io.BytesIO(data), map_location=map_location)
