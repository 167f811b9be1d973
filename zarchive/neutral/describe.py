"""The walk of the class-free neutral form (spec/neutral.md): every node of an archive described
from the file alone, without resolving or constructing any class the file names.

The walk goes node by node over the manifest (and the nodes stored as `.jsonl` lines), in the order
the spec fixes, and fetches the values of leaves (arrays, tensors, byte strings, text members)
through the archive's own reader, so every check and limit of a read applies: the whole tree is
planned first (reading.md section 1), and member bytes come through the read budget. Representation
choices of the writer (inline or member, codec, tensor table or nodes, view or not, text layout,
`list` node or array) do not show; everything the file records about the value does.

Each `$type` is described by its family's module (`builtins`, `arrays`, `classes`, `tables`,
`arrow`), which calls back into the walk through `zarchive.neutral.walker.Walker`.
"""

from __future__ import annotations

import json
from typing import Any

from ..container.budget import ReadBudget
from ..container.depth import MAX_DEPTH, too_deep
from ..container.jsontext import decode_jsonl
from ..errors import FormatError
from ..weights_hash import value_nbytes, value_sha256
from .arrays import ARRAY_TYPES, fill_storages
from .builtins import BUILTIN_TYPES
from .classes import CLASS_TYPES
from .encode import D, float_bits, sha256_hex
from .tables import TABLE_TYPES
from .walker import NodeDescriber, NodeSource, child

NODE_TYPES: dict[str, NodeDescriber] = {**BUILTIN_TYPES, **ARRAY_TYPES, **CLASS_TYPES, **TABLE_TYPES}


class Describer:
    """One walk: `run()` gives the form's `value`. Tensor and array identities are collected on the
    way and `same_as` / `storage` filled in at the end (they need the whole tree)."""

    def __init__(self, arc: NodeSource, budget: ReadBudget | None = None) -> None:
        self.arc = arc
        self.budget = budget if budget is not None else arc.read_budget
        self.depth = 0
        self.hashed = 0  # bytes of values hashed so far, charged against the read budget
        self.arrays: dict[str, str] = {}  # .npy member -> path of the first array node naming it
        self.tensors: list[tuple[D, str, tuple[str, str], str, bool]] = []  # desc, path, entry, identity, nonempty
        self.identities: dict[str, str] = {}  # tensor identity -> path of its first node
        # each member and each array or tensor node is decoded once per walk: a file may name one
        # compressed member from thousands of nodes (the plan charged it once; so is its work here)
        self.members: dict[tuple[str, int], bytes] = {}
        self.hashes: dict[str, tuple[list[int], str]] = {}  # a node's JSON -> (shape, sha256)

    def run(self) -> D:
        self.arc.plan("")  # every check of a read's phase one, before anything is described
        out = self.value(self.arc.node(""), "")
        self.finish()
        return out

    def finish(self) -> None:
        """Fill in `storage` once every tensor of the walk was met."""
        fill_storages(self.tensors)

    # --- the dispatch ---
    def value(self, node: Any, path: str) -> D:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise too_deep(path=path, what="nodes")
            out = self._describe(node, path)  # (the same object: tensors' storage is filled in later)
            out["path"] = path
            return out
        finally:
            self.depth -= 1

    def _describe(self, node: Any, path: str) -> D:
        t = type(node)
        if node is None:
            return {"kind": "null"}
        if t is bool:
            return {"kind": "bool", "value": node}
        if t is str:
            return {"kind": "str", "value": node}
        if t is int:
            return {"kind": "int", "value": str(node)}
        if t is float:
            return {"kind": "float", "bits": float_bits(node)}
        if t is list:
            return {"kind": "list", "items": [self.value(v, child(path, i)) for i, v in enumerate(node)]}
        if t is not dict:
            raise FormatError("not a node", path=path)
        tag = node.get("$type")
        if tag is None:
            return {
                "kind": "dict",
                "class": "dict",
                "entries": [[k, self.value(v, child(path, k))] for k, v in node.items()],
            }
        describe = NODE_TYPES.get(tag) if isinstance(tag, str) else None
        if describe is None:
            raise FormatError(f"no class-free form is defined for {str(tag)[:60]!r} nodes", path=path)
        return describe(self, node, path)

    # --- reading through the archive ---
    def load(self, node: Any, path: str) -> Any:
        """A leaf's value, on the CPU whatever device the node names (the form copies the device), read
        as a full read reads it (whole=True: the form describes what reading the file gives)."""
        return self.arc.load_node(node, path, map_location="cpu", whole=True)

    def member_bytes(self, ref: Any, nbytes: Any, path: str) -> bytes:
        """A member's decoded bytes, read as a `bytes` node naming it (checked and budgeted)."""
        if not isinstance(ref, str) or type(nbytes) is not int:
            raise FormatError("a member reference needs '$ref' and an int 'nbytes'", path=path)
        key = (ref, nbytes)
        if key not in self.members:
            self.members[key] = bytes(self.load({"$type": "bytes", "$ref": ref, "nbytes": nbytes}, path))
        return self.members[key]

    def member_digest(self, ref: Any, nbytes: Any, path: str) -> tuple[int, str]:
        """(length, SHA-256) of a member's decoded bytes, hashed once per member and size."""
        key = json.dumps([ref, nbytes])
        if key not in self.hashes:
            data = self.member_bytes(ref, nbytes, path)
            self.hashes[key] = ([len(data)], sha256_hex(data))
        (length,), digest = self.hashes[key]
        return length, digest

    def hashed_values(self, node: D, path: str) -> tuple[list[int], str]:
        """(shape, SHA-256 of the values) of an array or tensor node, loaded once per distinct node."""
        key = json.dumps(node, sort_keys=True)
        if key not in self.hashes:
            value = self.load(node, path)
            self.hashes[key] = ([int(d) for d in value.shape], self.values_sha256(value, path))
        return self.hashes[key]

    def lines(self, node: dict[str, Any], path: str) -> list[Any]:
        """The items of a `list` node: the values of its `.jsonl` member's lines."""
        length = node.get("length")
        if type(length) is not int or node.get("items") not in ("plain", "nodes"):
            raise FormatError("a 'list' node needs 'length' and 'items'", path=path)
        data = self.member_bytes(node.get("$ref"), node.get("nbytes"), path)
        return decode_jsonl(data, length, member=str(node.get("$ref")))

    def sequence(self, items: Any, path: str) -> list[Any]:
        """The nodes of a NODE that reads as a list: a JSON array, or a `list` node's lines."""
        if isinstance(items, list):
            return items
        if isinstance(items, dict) and items.get("$type") == "list":
            return self.lines(items, path)
        raise FormatError("expected a list (an array or a 'list' node)", path=path)

    def values_sha256(self, value: Any, path: str) -> str:
        """SHA-256 of an array's or tensor's values (C order, little-endian), hashed in pieces, with
        the values hashed in all charged against the read budget (a view of a few bytes may name
        terabytes of values)."""
        self.hashed += value_nbytes(value)
        if self.budget is not None:
            self.budget.fits(self.hashed, "hashing the values for the neutral form", path=path)
        return value_sha256(value)


__all__ = ["NODE_TYPES", "Describer"]
