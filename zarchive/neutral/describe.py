"""The class-free neutral form of an archive (spec/neutral.md): every node described from the file
alone, without resolving or constructing any class the file names.

The walk goes node by node over the manifest (and the nodes stored as `.jsonl` lines), in the order
the spec fixes, and fetches the values of leaves (arrays, tensors, byte strings, text members)
through the archive's own reader, so every check and limit of a read applies: the whole tree is
planned first (reading.md section 1), and member bytes come through the read budget. Representation
choices of the writer (inline or member, codec, tensor table or nodes, view or not, text layout,
`list` node or array) do not show; everything the file records about the value does.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any, Protocol

from ..container.budget import ReadBudget
from ..container.depth import MAX_DEPTH, too_deep
from ..container.jsontext import decode_jsonl
from ..engine.objpath import escape
from ..errors import FormatError
from ..nodes.tensor_rows import tensor_nodes
from ..nodes.values import node_label
from ..weights_hash import value_nbytes, value_sha256
from .encode import FORM_NAME, D, float_bits, int_from_hex, number_desc, sha256_hex, special_float_bits


class NodeSource(Protocol):
    """What the walk needs of an opened archive (zarchive.engine.lazy.PlannedArchive has it)."""

    def node(self, path: str = "") -> Any: ...
    def plan(self, path: str = "", *, root_class: type | None = None) -> Any: ...
    def load_node(self, node: Any, path: str = "", *, map_location: Any = None, dtype: Any = None) -> Any: ...
    @property
    def read_budget(self) -> ReadBudget | None: ...


def child(path: str, component: str | int) -> str:
    """The object path of a child (spec 3.1): components escaped, joined by `/`."""
    c = escape(str(component))
    return c if path == "" else f"{path}/{c}"


_TEXT_KINDS = {"Decimal": "decimal", "UUID": "uuid"}
_PATH_CLASSES = frozenset({"PurePosixPath", "PureWindowsPath", "PosixPath", "WindowsPath"})


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
        self._storages()

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
        method = _TYPED.get(tag) if isinstance(tag, str) else None
        if method is None:
            from .tables import TABLE_TYPES

            table = TABLE_TYPES.get(tag) if isinstance(tag, str) else None
            if table is None:
                raise FormatError(f"no class-free form is defined for {str(tag)[:60]!r} nodes", path=path)
            return table(self, node, path)
        return method(self, node, path)

    # --- reading through the archive ---
    def load(self, node: Any, path: str) -> Any:
        """A leaf's value, on the CPU whatever device the node names (the form copies the device)."""
        return self.arc.load_node(node, path, map_location="cpu")

    def member_bytes(self, ref: Any, nbytes: Any, path: str) -> bytes:
        """A member's decoded bytes, read as a `bytes` node naming it (checked and budgeted)."""
        if not isinstance(ref, str) or type(nbytes) is not int:
            raise FormatError("a member reference needs '$ref' and an int 'nbytes'", path=path)
        key = (ref, nbytes)
        if key not in self.members:
            self.members[key] = bytes(self.load({"$type": "bytes", "$ref": ref, "nbytes": nbytes}, path))
        return self.members[key]

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

    # --- node types of spec section 5.1 ---
    def t_int(self, node: D, path: str) -> D:
        return {"kind": "int", "value": str(int_from_hex(_text(node, "hex", path), path))}

    def t_float(self, node: D, path: str) -> D:
        return {"kind": "float", "bits": special_float_bits(node, path)}

    def t_list(self, node: D, path: str) -> D:
        return {"kind": "list", "items": [self.value(v, child(path, i)) for i, v in enumerate(self.lines(node, path))]}

    def t_tuple(self, node: D, path: str) -> D:
        items = self.sequence(node.get("items"), path)
        return {"kind": "tuple", "items": [self.value(v, child(path, i)) for i, v in enumerate(items)]}

    def t_set(self, node: D, path: str) -> D:
        items = node.get("items")
        if not isinstance(items, list):
            raise FormatError("set items must be a list", path=path)
        return {
            "kind": "set",
            "frozen": node.get("frozen") is True,
            "items": [self.value(v, child(path, i)) for i, v in enumerate(items)],
        }

    def t_dict(self, node: D, path: str) -> D:
        cls = node.get("class", "dict")
        out: D = {"kind": "dict", "class": cls}
        entries: list[Any] = []
        if isinstance(node.get("data"), dict):
            entries = [[k, self.value(v, child(path, k))] for k, v in node["data"].items()]
        elif "tensors" in node:
            try:
                rows = list(tensor_nodes(node["tensors"], None))
            except ValueError as e:
                raise FormatError(str(e), path=path) from None
            entries = [[name, self.value(n, child(path, name))] for name, n in rows]
        elif isinstance(node.get("items"), list):
            for pair in node["items"]:
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise FormatError("dict items must be [key, value] pairs", path=path)
                name = node_label(pair[0])
                key = pair[0] if type(pair[0]) is str else self.value(pair[0], child(path, name + ".key"))
                entries.append([key, self.value(pair[1], child(path, name))])
        else:
            raise FormatError("a 'dict' node needs 'data', 'tensors' or 'items'", path=path)
        out["entries"] = entries
        if cls == "defaultdict":
            out["default_factory"] = node.get("default_factory")
        attrs = node.get("attrs")
        if isinstance(attrs, dict) and "_metadata" in attrs:
            out["_metadata"] = self.value(attrs["_metadata"], child(path, "_metadata"))
        return out

    def t_bytes(self, node: D, path: str) -> D:
        if "$ref" in node:  # (hashed once per member: a file may name it from thousands of nodes)
            key = json.dumps([node["$ref"], node.get("nbytes")])
            if key not in self.hashes:
                data = self.member_bytes(node["$ref"], node.get("nbytes"), path)
                self.hashes[key] = ([len(data)], sha256_hex(data))
            (length,), digest = self.hashes[key]
            return {"kind": "bytes", "bytearray": node.get("bytearray") is True, "length": length, "sha256": digest}
        else:
            try:
                data = base64.b64decode(_text(node, "base64", path), validate=True)
            except (binascii.Error, ValueError):
                raise FormatError("a 'bytes' node's base64 is malformed", path=path) from None
        return {
            "kind": "bytes",
            "bytearray": node.get("bytearray") is True,
            "length": len(data),
            "sha256": sha256_hex(data),
        }

    def t_complex(self, node: D, path: str) -> D:
        real, imag = (_float_part(node.get(k), path) for k in ("real", "imag"))
        return {"kind": "complex", "real": real, "imag": imag}

    def t_datetime(self, node: D, path: str) -> D:
        kind = node.get("kind")
        if kind == "timedelta":
            parts = {k: node.get(k) for k in ("days", "seconds", "microseconds")}
            if not all(type(v) is int for v in parts.values()):
                raise FormatError("a timedelta needs int days, seconds and microseconds", path=path)
            return {"kind": "timedelta", **parts}
        if kind not in ("datetime", "date", "time"):
            raise FormatError(f"unknown datetime kind {str(kind)[:20]!r}", path=path)
        out: D = {"kind": kind, "iso": _text(node, "iso", path)}
        out.update(zone_fields(node, path))
        if node.get("fold") == 1:
            out["fold"] = 1
        return out

    def t_path(self, node: D, path: str) -> D:
        cls = node.get("class")
        if cls not in _PATH_CLASSES:
            raise FormatError(f"unknown path class {str(cls)[:40]!r}", path=path)
        return {"kind": "path", "class": cls, "value": _text(node, "value", path)}

    def t_enum(self, node: D, path: str) -> D:
        out: D = {"kind": "enum", "class": _text(node, "class", path)}
        name = node.get("name")
        if name is not None and not isinstance(name, str):
            raise FormatError("an enum member's 'name' must be a string", path=path)
        out["name"] = name
        out["value"] = self.value(node["value"], child(path, "value")) if "value" in node else None
        names = node.get("names")  # format 1.5: the Flag members a combination is made of
        if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise FormatError("an enum's 'names' must be a list of strings", path=path)
        out["names"] = names
        return out

    def t_text_value(self, node: D, path: str) -> D:
        kind = _TEXT_KINDS.get(str(node.get("kind")))
        if kind is None:
            raise FormatError(f"unknown text_value kind {str(node.get('kind'))[:20]!r}", path=path)
        return {"kind": kind, "value": _text(node, "value", path)}

    # --- numpy (5.2) ---
    def t_ndarray(self, node: D, path: str) -> D:
        dtype = node.get("dtype")
        out: D = {"kind": "ndarray", "dtype": dtype, "shape": node.get("shape"), "order": node.get("order", "C")}
        if dtype == "object":
            out["order"] = "C"
            items = self.sequence(node.get("items"), child(path, "items"))
            shape = node.get("shape")
            if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
                raise FormatError("an array's shape must be a list of sizes", path=path)
            if math.prod(shape) != len(items):  # (checked, not loaded: the items may name classes)
                raise FormatError("an object array's items do not fill its shape", path=path)
            base = child(path, "items")
            out["items"] = [self.value(v, child(base, i)) for i, v in enumerate(items)]
            return out
        out["shape"], out["sha256"] = self.hashed_values(node, path)
        ref = node.get("$ref")
        if isinstance(ref, str):
            first = self.arrays.setdefault(ref, path)
            if first != path:
                out["same_as"] = first
        return out

    def t_scalar(self, node: D, path: str) -> D:
        import numpy as np

        value = self.load(node, path)
        arr = np.asarray(value)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return {"kind": "numpy.scalar", "dtype": node.get("dtype"), "hex": arr.tobytes().hex()}

    def t_dtype(self, node: D, path: str) -> D:
        return {"kind": "numpy.dtype", "value": _text(node, "value", path)}

    # --- torch (5.4) ---
    def t_tensor(self, node: D, path: str) -> D:
        shape, sha = self.hashed_values(node, path)
        out: D = {
            "kind": "tensor",
            "dtype": node.get("dtype"),
            "shape": shape,
            "device": node.get("device"),
            "parameter": node.get("parameter") is True,
            "requires_grad": node.get("requires_grad") is True,
            "sha256": sha,
        }
        view = node.get("view")
        identity = _identity(node)
        first = self.identities.setdefault(identity, path)
        if first != path:
            out["same_as"] = first
        if isinstance(view, dict):
            offset, stride = view.get("storage_offset"), view.get("stride")
        else:
            offset, stride = 0, _c_strides(shape)
        out["storage"] = {"offset": offset, "stride": stride}
        entry = (str(node.get("$ref")), str(node.get("key")))
        self.tensors.append((out, path, entry, identity, math.prod(shape) > 0))
        return out

    def t_device(self, node: D, path: str) -> D:
        return {"kind": "torch.device", "value": _text(node, "value", path)}

    def t_torch_dtype(self, node: D, path: str) -> D:
        return {"kind": "torch.dtype", "value": _text(node, "value", path)}

    def t_size(self, node: D, path: str) -> D:
        items = node.get("items")
        if not (isinstance(items, list) and all(type(i) is int for i in items)):
            raise FormatError("a torch.Size needs a list of ints", path=path)
        return {"kind": "torch.Size", "items": items}

    def _storages(self) -> None:
        """`storage` stays only on tensors with elements whose entry another tensor identity (with
        elements) also names; `first` is the path of the first such node."""
        users: dict[tuple[str, str], set[str]] = {}
        firsts: dict[tuple[str, str], str] = {}
        for _, path, entry, identity, nonempty in self.tensors:
            if nonempty:
                users.setdefault(entry, set()).add(identity)
                firsts.setdefault(entry, path)
        for desc, _, entry, _, nonempty in self.tensors:
            if not nonempty or len(users.get(entry, ())) < 2:
                del desc["storage"]
            else:
                desc["storage"] = {"first": firsts[entry], **desc["storage"]}

    # --- classes (models.md) ---
    def t_fields(self, node: D, path: str) -> D:
        fields = node.get("fields")
        if not isinstance(fields, dict):
            raise FormatError(f"a {node.get('$type')!r} node lacks its 'fields' object", path=path)
        return {
            "kind": node["$type"],
            "class": _text(node, "class", path),
            "fields": [[k, self.value(v, child(path, k))] for k, v in fields.items()],
        }

    def t_model(self, node: D, path: str) -> D:
        out: D = {"kind": "model", "class": _text(node, "class", path)}
        out["config"] = self.value(node.get("config"), child(path, "config"))
        out["state_dict"] = self.value(node.get("state_dict"), child(path, "state_dict"))
        training = node.get("training")
        if type(training) is not bool:
            raise FormatError("a model node needs a boolean 'training'", path=path)
        out["training"] = training
        out["training_modules"] = [[k, v] for k, v in _object(node, "training_modules", path).items()]
        out["unsaved_buffers"] = [
            [k, v.get("dtype"), v.get("device")] if isinstance(v, dict) else [k, None, None]
            for k, v in _object(node, "unsaved_buffers", path).items()
        ]
        out["tensor_attributes"] = _strings(node.get("tensor_attributes", []), "tensor_attributes", path)
        if "training_records" in node:
            out["training_records"] = self.value(node["training_records"], child(path, "training_records"))
        # format 1.5: what only running the class told before
        modules = node.get("modules")
        out["modules"] = None if modules is None else [[k, v] for k, v in _object(node, "modules", path).items()]
        params = node.get("parameters")
        out["parameters"] = None if params is None else [[k, v] for k, v in _object(node, "parameters", path).items()]
        buffers = node.get("buffers")
        out["buffers"] = None if buffers is None else _strings(buffers, "buffers", path)
        return out


def zone_fields(node: D, path: str) -> D:
    """A time zone as the node records it: `tz` (a name), `tz_offset_seconds` (a number DESC),
    `tz_name`, `tz_lib`; only those present."""
    out: D = {}
    if "tz" in node:
        out["tz"] = _text(node, "tz", path)
    if "tz_offset_seconds" in node:
        out["tz_offset_seconds"] = number_desc(node["tz_offset_seconds"], path)
    for key in ("tz_name", "tz_lib"):
        if key in node:
            out[key] = _text(node, key, path)
    return out


def _float_part(x: Any, path: str) -> str:
    desc = number_desc(x, path)
    if desc["kind"] == "int":  # a float NODE written without a fraction: its double
        return float_bits(float(int(desc["value"])))
    return str(desc["bits"])


def _identity(node: D) -> str:
    """Nodes that agree in all of these read as one tensor object (spec 5.4)."""
    fields = {k: node.get(k) for k in ("$ref", "key", "dtype", "shape", "device", "view")}
    fields["parameter"] = node.get("parameter") is True
    fields["requires_grad"] = node.get("requires_grad") is True
    return json.dumps(fields, sort_keys=True)


def _c_strides(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return strides[::-1]


def _text(node: D, key: str, path: str) -> str:
    value = node.get(key)
    if not isinstance(value, str):
        raise FormatError(f"a {str(node.get('$type'))[:40]!r} node needs a string {key!r}", path=path)
    return value


def _object(node: D, key: str, path: str) -> dict[str, Any]:
    value = node.get(key, {})
    if not isinstance(value, dict):
        raise FormatError(f"a model's {key!r} must be an object", path=path)
    return value


def _strings(value: Any, key: str, path: str) -> list[str]:
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise FormatError(f"a model's {key!r} must be a list of strings", path=path)
    return value


_TYPED = {
    "int": Describer.t_int,
    "float": Describer.t_float,
    "list": Describer.t_list,
    "tuple": Describer.t_tuple,
    "set": Describer.t_set,
    "dict": Describer.t_dict,
    "bytes": Describer.t_bytes,
    "complex": Describer.t_complex,
    "datetime": Describer.t_datetime,
    "path": Describer.t_path,
    "enum": Describer.t_enum,
    "text_value": Describer.t_text_value,
    "numpy.ndarray": Describer.t_ndarray,
    "numpy.scalar": Describer.t_scalar,
    "numpy.dtype": Describer.t_dtype,
    "torch.Tensor": Describer.t_tensor,
    "torch.device": Describer.t_device,
    "torch.dtype": Describer.t_torch_dtype,
    "torch.Size": Describer.t_size,
    "dataclass": Describer.t_fields,
    "namedtuple": Describer.t_fields,
    "torch.ConfiguredModel": Describer.t_model,
}


def neutral_form(arc: NodeSource) -> D:
    """The class-free neutral form of an opened archive (or sharded checkpoint directory):
    `{"format": "zarchive-generic-1", "value": DESC}`. Open it with `unresolved="generic"` (as
    `neutral_form_of` and the command do), or a class tag this process cannot resolve is refused by
    the plan; nothing is constructed either way."""
    from ..dcp.view import ShardedCheckpoint
    from ..engine.lazy import LazyArchive

    if isinstance(arc, ShardedCheckpoint):
        from .sharded import ShardedDescriber

        return {"format": FORM_NAME, "value": ShardedDescriber(arc).run()}
    if not isinstance(arc, LazyArchive):
        raise FormatError(
            "the class-free neutral form is defined for zarchive archives and sharded checkpoint directories "
            "(spec/neutral.md), not for this file's format: convert it first (zarchive convert FILE out.zarc)"
        )
    return {"format": FORM_NAME, "value": Describer(arc).run()}


__all__ = ["Describer", "NodeSource", "child", "neutral_form", "zone_fields"]
