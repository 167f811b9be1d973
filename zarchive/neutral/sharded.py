"""The class-free neutral form of a sharded checkpoint directory (spec/neutral.md section 9): the
state dict DCP loads, nested as the index says, each tensor put together from its chunks and
described by its values, each other value described from its node in its shard."""

from __future__ import annotations

from typing import Any

from ..engine.objpath import join_path
from ..errors import FormatError
from .describe import Describer
from .encode import D
from .walker import child

DICT, LIST, VALUE, TENSOR = "dcp.dict", "dcp.list", "dcp.value", "torch.Tensor"


class ShardedDescriber:
    """One walk over a `zarchive.dcp.view.ShardedCheckpoint`'s tree (index order)."""

    def __init__(self, view: Any) -> None:
        self.view = view
        self.tensors = Describer(view, view.budget)  # (hashing, charged to the directory's budget)

    def run(self) -> D:
        return self.node(self.view.node(""), "")

    def node(self, node: Any, path: str) -> D:
        tag = node.get("$type") if isinstance(node, dict) else None
        out: D
        if tag == DICT:
            out = {
                "kind": "dict",
                "class": "dict",
                "entries": [[k, self.node(v, child(path, k))] for k, v in node["items"].items()],
            }
        elif tag == LIST:
            items = node["items"]
            if sorted(items, key=int) == [str(i) for i in range(len(items))]:
                out = {"kind": "list", "items": [self.node(items[str(i)], child(path, i)) for i in range(len(items))]}
            else:  # indices with gaps: a dict of int keys, as a read gives it
                out = {"kind": "dict", "class": "dict", "entries": [
                    [{"kind": "int", "value": k, "path": child(path, f"{k}.key")}, self.node(v, child(path, k))]
                    for k, v in items.items()
                ]}  # fmt: skip
        elif tag == TENSOR:
            value = self.view.load_node(node, path, map_location="cpu")
            shape = [int(d) for d in value.shape]
            out = {"kind": "tensor", "dtype": node.get("dtype"), "shape": shape,
                   "sha256": self.tensors.values_sha256(value, path)}  # fmt: skip
        elif tag == VALUE:
            shard = self.view.shard(node["$ref"])
            where = join_path(["objects", node["key"]])
            shard.plan(where)
            walker = Describer(shard)
            out = walker.value(shard.node(where), path)
            walker.finish()
            return out
        else:
            raise FormatError(f"unknown node {str(tag)[:40]!r} in a sharded checkpoint's tree", path=path)
        out["path"] = path
        return out


__all__ = ["ShardedDescriber"]
