"""The class-free neutral form of class nodes (spec/models.md, spec/neutral.md): dataclasses and
named tuples by their fields, configured torch models by config, state dict and what the file
records of their modules; no class is resolved."""

from __future__ import annotations

from ..errors import FormatError
from .encode import D
from .fields import object_field, strings_field, text_field
from .walker import NodeDescriber, Walker, child


def fields_node(w: Walker, node: D, path: str) -> D:
    fields = node.get("fields")
    if not isinstance(fields, dict):
        raise FormatError(f"a {node.get('$type')!r} node lacks its 'fields' object", path=path)
    return {
        "kind": node["$type"],
        "class": text_field(node, "class", path),
        "fields": [[k, w.value(v, child(path, k))] for k, v in fields.items()],
    }


def model_node(w: Walker, node: D, path: str) -> D:
    out: D = {"kind": "model", "class": text_field(node, "class", path)}
    out["config"] = w.value(node.get("config"), child(path, "config"))
    out["state_dict"] = w.value(node.get("state_dict"), child(path, "state_dict"))
    training = node.get("training")
    if type(training) is not bool:
        raise FormatError("a model node needs a boolean 'training'", path=path)
    out["training"] = training
    out["training_modules"] = [[k, v] for k, v in object_field(node, "training_modules", path).items()]
    out["unsaved_buffers"] = [
        [k, v.get("dtype"), v.get("device")] if isinstance(v, dict) else [k, None, None]
        for k, v in object_field(node, "unsaved_buffers", path).items()
    ]
    out["tensor_attributes"] = strings_field(node.get("tensor_attributes", []), "tensor_attributes", path)
    if "training_records" in node:
        out["training_records"] = w.value(node["training_records"], child(path, "training_records"))
    # format 1.5: what only running the class told before
    modules = node.get("modules")
    out["modules"] = None if modules is None else [[k, v] for k, v in object_field(node, "modules", path).items()]
    params = node.get("parameters")
    out["parameters"] = None if params is None else [[k, v] for k, v in object_field(node, "parameters", path).items()]
    buffers = node.get("buffers")
    out["buffers"] = None if buffers is None else strings_field(buffers, "buffers", path)
    return out


CLASS_TYPES: dict[str, NodeDescriber] = {
    "dataclass": fields_node,
    "namedtuple": fields_node,
    "torch.ConfiguredModel": model_node,
}

__all__ = ["CLASS_TYPES"]
