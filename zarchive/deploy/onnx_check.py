"""Whether an ONNX export stands on its own: nothing in it makes onnxruntime read another file.

An ONNX file can keep a tensor's values in another file (`data_location: EXTERNAL`, with its
`external_data` naming a path). onnxruntime, given the model as bytes, looks for that path relative
to the current directory, so an archive's export could pull any file the reader can read (a
`.aws/credentials` beside the program) into the model's output. An export zarchive writes never has
one: `check_self_contained` refuses, before any session is made, every file that has:

- a TensorProto anywhere in the model (graph and subgraph initializers, sparse initializers' values
  and indices, tensors in node attributes and in functions' default attributes, training graphs;
  found by walking every message of the parsed model, so no place is missed) whose `data_location`
  is not DEFAULT or that has `external_data` entries;
- an `EPContext` node (an execution provider's precompiled context, which may name a file of its own);
- model metadata `ort_config` (session settings onnxruntime applies from the model when the
  ORT_LOAD_CONFIG_FROM_MODEL variable is set: profiling files, optimized-model output paths).

The model is parsed from its bytes with the `onnx` package (never from a path, which would resolve
external data), iteratively, with nesting capped at container.depth.MAX_DEPTH.
"""

from __future__ import annotations

from typing import Any

from ..container.depth import MAX_DEPTH
from ..errors import FormatError, UnsafeArchiveError
from .extras import require

_EP_CONTEXT = "EPContext"
_ORT_CONFIG = "ort_config"
_NAME_SHOWN = 80


def parse_model(data: bytes, *, member: str | None = None) -> Any:
    """The onnx.ModelProto of an ONNX file's bytes (FormatError where they are not one)."""
    onnx = require("onnx", "checking an ONNX export")
    from google.protobuf.message import DecodeError

    model = onnx.ModelProto()
    try:
        model.ParseFromString(bytes(data))
    except (DecodeError, RecursionError, ValueError) as e:
        raise FormatError(
            f"the ONNX export is not a readable ONNX model ({type(e).__name__}: {e})"[:400], member=member
        ) from None
    return model


def _label(msg: Any, field: str, index: int | None) -> str:
    name = getattr(msg, "name", "")
    at = f"{field}[{index}]" if index is not None else field
    return f"{at}({str(name)[:_NAME_SHOWN]!r})" if isinstance(name, str) and name else at


def external_references(model: Any) -> list[str]:
    """Where a parsed ONNX model refers to something outside itself (see the module docstring): one
    line per place, e.g. "graph.initializer[0]('w'): external data at '.aws/credentials'"."""
    import onnx
    from google.protobuf.message import Message

    found: list[str] = []
    for prop in model.metadata_props:
        if prop.key == _ORT_CONFIG:
            found.append(f"metadata_props({_ORT_CONFIG!r}): session settings onnxruntime may apply from the model")
    stack: list[tuple[Any, str, int]] = [(model, "model", 0)]
    while stack:
        msg, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise UnsafeArchiveError(f"the ONNX model is nested more than {MAX_DEPTH} levels deep at {where[:300]}")
        if isinstance(msg, onnx.TensorProto):
            if msg.data_location != onnx.TensorProto.DEFAULT or len(msg.external_data):
                places = [e.value[:200] for e in msg.external_data if e.key == "location"]
                shown = f" at {places[0]!r}" if places else ""
                found.append(f"{where}: external data{shown}")
            continue  # a tensor holds no further messages that matter
        if isinstance(msg, onnx.NodeProto) and msg.op_type == _EP_CONTEXT:
            found.append(f"{where}: an {_EP_CONTEXT} node (an execution provider's context, which may name a file)")
        for field, value in msg.ListFields():
            if field.message_type is None:
                continue  # numbers, strings, bytes
            if isinstance(value, Message):
                stack.append((value, f"{where}.{_label(value, field.name, None)}", depth + 1))
            else:  # a repeated field of messages
                stack.extend((v, f"{where}.{_label(v, field.name, i)}", depth + 1) for i, v in enumerate(value))
    return found


def check_self_contained(data: bytes, *, member: str | None = None) -> Any:
    """Refuse (UnsafeArchiveError naming the member and the first place) an ONNX file that refers to
    anything outside its bytes; return the parsed model where it stands on its own."""
    model = parse_model(data, member=member)
    found = external_references(model)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise UnsafeArchiveError(
            f"the ONNX export is not self-contained: {found[0][:600]}{more}; onnxruntime would read files "
            "outside the archive (from the current directory), so no session is made. An export zarchive "
            "writes keeps its weights inside the file: export the model again",
            member=member,
        )
    return model


__all__ = ["check_self_contained", "external_references", "parse_model"]
