"""JSON values and Python's containers, saved so that they come back with their exact types.

Plain JSON stays plain: str, bool, None, ints within +-2**53, finite floats, lists, and dicts whose
keys are strings not starting with '$' appear in the manifest as themselves. Everything JSON cannot say
exactly gets a "$type" node: big ints, NaN/inf, tuples, sets, dicts with other keys or of other dict
classes. Lists longer than `external_list_threshold` go to a `.jsonl` member, one item per line.
"""

from __future__ import annotations

import builtins
import math
import struct
from collections import OrderedDict, defaultdict
from typing import Any

from ..container.jsontext import decode_jsonl, encode_jsonl, encode_jsonl_strings
from ..engine.context import LoadContext, Node, SaveContext
from ..nodes.tensor_rows import tensor_nodes
from ..nodes.values import (
    DEFAULT_FACTORIES,
    DictSchema,
    FloatSchema,
    IntSchema,
    JsonSchema,
    ListSchema,
    SetSchema,
    TupleSchema,
    key_label,
    node_label,
    points_at_member,
)
from .base import Handler, expect
from .tensor_tables import tabulate_when_laid_out

SAFE_INT = 2**53
MAX_BIG_INT_HEX = 1 << 20
_CANONICAL_NAN = 0x7FF8000000000000
_PLAIN_SCALARS = (str, bool, type(None))


class ScalarHandler(JsonSchema, Handler):
    """str, bool and None: JSON as they are."""

    name = "json"

    def accepts(self, cls: type) -> bool:
        return cls in _PLAIN_SCALARS

    def save(self, obj: Any, ctx: SaveContext) -> Node:
        # a str subclass (registry.VALUE_BASES) is written as the plain str it holds
        return obj if type(obj) in _PLAIN_SCALARS else str.__str__(obj)

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        raise ctx.error("'json' is not a node type")


class IntHandler(IntSchema, Handler):
    """int of any size: plain JSON up to 2**53 (what every JSON reader keeps exact), hex beyond."""

    name = "int"

    def accepts(self, cls: type) -> bool:
        return cls is int

    def save(self, obj: int, ctx: SaveContext) -> Node:
        if -SAFE_INT <= obj <= SAFE_INT:
            return obj
        if obj.bit_length() > 4 * MAX_BIG_INT_HEX - 16:  # near the limit: measure the text itself
            text = hex(obj)
            if len(text) > MAX_BIG_INT_HEX:
                raise ctx.error(
                    f"an int of {obj.bit_length():,} bits cannot be saved: its hex text would be {len(text):,} "
                    f"characters, more than the {MAX_BIG_INT_HEX:,} a reader accepts (save it as bytes, e.g. "
                    "x.to_bytes(...))"
                )
            return {"$type": "int", "hex": text}
        return {"$type": "int", "hex": hex(obj)}

    def load(self, node: dict[str, Any], ctx: LoadContext) -> int:
        text = expect(node, "hex", str, ctx)
        if len(text) > MAX_BIG_INT_HEX:
            raise ctx.error("big int longer than the limit")
        return int(text, 16)


def float_node(x: float) -> Node:
    if math.isfinite(x):
        return x
    if math.isnan(x):
        bits = struct.unpack("<Q", struct.pack("<d", x))[0]
        node: dict[str, Any] = {"$type": "float", "value": "nan"}
        if bits != _CANONICAL_NAN:
            node["bits"] = f"{bits:016x}"
        return node
    return {"$type": "float", "value": "inf" if x > 0 else "-inf"}


class FloatHandler(FloatSchema, Handler):
    """float: plain JSON when finite (-0.0 included); NaN (with its bits) and infinities tagged."""

    name = "float"

    def accepts(self, cls: type) -> bool:
        return cls is float

    def save(self, obj: float, ctx: SaveContext) -> Node:
        return float_node(obj)

    def load(self, node: dict[str, Any], ctx: LoadContext) -> float:
        return load_float(node, ctx)


def load_float(node: Node, ctx: LoadContext) -> float:
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return float(node)
    if not isinstance(node, dict) or node.get("$type") != "float":
        raise ctx.error("expected a float")
    value = node.get("value")
    if value == "nan":
        bits = node.get("bits")
        if bits is None:
            return float("nan")
        value = int(bits, 16) if isinstance(bits, str) and len(bits) == 16 else -1  # int() takes '-fff...'
        if not 0 <= value < 1 << 64:
            raise ctx.error("bad NaN bits")
        return struct.unpack("<d", struct.pack("<Q", value))[0]
    if value in ("inf", "-inf"):
        return float(value)
    raise ctx.error(f"bad special float {str(value)[:20]!r}")


def _is_plain_json(x: Any) -> bool:
    t = type(x)
    if t is str or t is bool or x is None:
        return True
    if t is int:
        return -SAFE_INT <= x <= SAFE_INT
    if t is float:
        return math.isfinite(x)
    return False


def _has_ref(node: Node) -> bool:
    """Whether a manifest node (or one inside it) points at a member."""
    if isinstance(node, dict):
        return "$ref" in node or any(_has_ref(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_ref(v) for v in node)
    return False


class ListHandler(ListSchema, Handler):
    """list: inline, or a `.jsonl` member past `external_list_threshold` items (unless an item points
    at a member of its own)."""

    name = "list"

    def accepts(self, cls: type) -> bool:
        return cls is list

    def save(self, obj: list[Any], ctx: SaveContext) -> Node:
        if len(obj) <= ctx.settings.external_list_threshold:
            return [ctx.save(item, i) for i, item in enumerate(obj)]
        if all(type(x) is str for x in obj):
            data = encode_jsonl_strings(obj)
            items = "plain"
        else:
            nodes = [ctx.save(item, i) for i, item in enumerate(obj)]
            if any(_has_ref(x) for x in nodes):
                # Items that point at members (arrays, tensors, long lists) stay in the manifest: their
                # nodes are completed later (tensor keys at finalize, '.zst' names once codecs are
                # chosen), after a .jsonl member's bytes and size would have been fixed.
                return nodes
            items = "plain" if all(_is_plain_json(x) for x in nodes) else "nodes"
            data = encode_jsonl(nodes)
        plan = ctx.add_member("jsonl", lambda: [(None, memoryview(data))], compress="always")
        return ctx.ref_node(plan, "list", length=len(obj), nbytes=len(data), items=items)

    def load(self, node: dict[str, Any], ctx: LoadContext) -> list[Any]:
        length = expect(node, "length", int, ctx)
        nbytes = expect(node, "nbytes", int, ctx)
        memo: dict[tuple[Any, Any, int], list[Any]] = ctx.state("list.memo", dict)
        key = (node.get("$ref"), node.get("items"), length)
        if isinstance(key[0], str) and key in memo:  # nodes naming one member share one list
            return memo[key]
        data = ctx.member_bytes(node.get("$ref"), expected_size=nbytes, shared=True)
        values = decode_jsonl(data, length, member=node["$ref"])
        if points_at_member(values):  # never written (see save): would allow ref cycles and 2**n blow-ups
            raise ctx.error("a .jsonl list holds nodes that point at members", member=node["$ref"])
        if node.get("items") == "plain":
            if not all(_is_plain_json(v) for v in values):
                raise ctx.error("a 'plain' list holds nodes", member=node["$ref"])
        else:
            values = [ctx.load(v, i) for i, v in enumerate(values)]
        memo[key] = values
        return values


class TupleHandler(TupleSchema, Handler):
    name = "tuple"

    def accepts(self, cls: type) -> bool:
        return cls is tuple

    def save(self, obj: tuple[Any, ...], ctx: SaveContext) -> Node:
        # the items list is a node of its own (as the reader walks it): saved through ctx, so the
        # writer counts nesting as the reader does and refuses what the reader would
        return {"$type": "tuple", "items": ctx.save(list(obj))}

    def load(self, node: dict[str, Any], ctx: LoadContext) -> tuple[Any, ...]:
        items = ctx.load(node.get("items"))
        if not isinstance(items, list):
            raise ctx.error("tuple items must be a list")
        return tuple(items)


def _sorted_for_determinism(items: Any) -> list[Any]:
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=lambda x: (type(x).__qualname__, repr(x)))


class SetHandler(SetSchema, Handler):
    """set and frozenset, items in sorted order so equal sets give equal manifests."""

    name = "set"

    def accepts(self, cls: type) -> bool:
        return cls is set or cls is frozenset

    def save(self, obj: set[Any] | frozenset[Any], ctx: SaveContext) -> Node:
        items = [ctx.save(x, i) for i, x in enumerate(_sorted_for_determinism(obj))]
        node: dict[str, Any] = {"$type": "set", "items": items}
        if type(obj) is frozenset:
            node["frozen"] = True
        return node

    def load(self, node: dict[str, Any], ctx: LoadContext) -> set[Any] | frozenset[Any]:
        items = expect(node, "items", list, ctx)
        values = [ctx.load(v, i) for i, v in enumerate(items)]
        return frozenset(values) if node.get("frozen") is True else set(values)


_DEFAULT_FACTORIES: dict[str, Any] = {name: getattr(builtins, name) for name in DEFAULT_FACTORIES}
_FACTORY_NAMES = {v: k for k, v in _DEFAULT_FACTORIES.items()}


def _plain_keys(d: dict[Any, Any]) -> bool:
    return all(type(k) is str and not k.startswith("$") for k in d)


class DictHandler(DictSchema, Handler):
    """dict, OrderedDict and defaultdict: keys keep their types (int, tuple, ...), order is kept."""

    name = "dict"

    def accepts(self, cls: type) -> bool:
        return cls is dict or cls is OrderedDict or cls is defaultdict

    def save(self, obj: dict[Any, Any], ctx: SaveContext) -> Node:
        cls = type(obj)
        if cls is dict and _plain_keys(obj):
            plain = {k: ctx.save(v, k) for k, v in obj.items()}
            tabulate_when_laid_out(ctx, plain, plain)
            return plain
        node: dict[str, Any] = {"$type": "dict"}
        if cls is OrderedDict:
            node["class"] = "OrderedDict"
        elif cls is defaultdict:
            factory = obj.default_factory  # type: ignore[attr-defined]
            if factory is not None and factory not in _FACTORY_NAMES:
                raise ctx.error(f"defaultdict factory {factory!r} cannot be saved (only builtin types)")
            node["class"] = "defaultdict"
            node["default_factory"] = None if factory is None else _FACTORY_NAMES[factory]
        if _plain_keys(obj):
            node["data"] = {k: ctx.save(v, k) for k, v in obj.items()}
            if cls is OrderedDict:
                tabulate_when_laid_out(ctx, node, node["data"])
        else:
            node["items"] = []
            for k, v in obj.items():
                key_node = ctx.save(k, f"{key_label(k)}.key")
                node["items"].append([key_node, ctx.save(v, node_label(key_node))])
        meta = getattr(obj, "_metadata", None)  # torch state dicts carry per-module versions here
        if cls is OrderedDict and isinstance(meta, dict):
            node["attrs"] = {"_metadata": ctx.save(meta, "_metadata")}
        return node

    def load(self, node: dict[str, Any], ctx: LoadContext) -> dict[Any, Any]:
        kind = node.get("class")
        out: dict[Any, Any]
        if kind is None:
            out = {}
        elif kind == "OrderedDict":
            out = OrderedDict()
        elif kind == "defaultdict":
            fname = node.get("default_factory")
            if fname is not None and fname not in _DEFAULT_FACTORIES:
                raise ctx.error(f"unknown defaultdict factory {str(fname)[:40]!r}")
            out = defaultdict(_DEFAULT_FACTORIES[fname] if fname else None)
        else:
            raise ctx.error(f"unknown dict class {str(kind)[:40]!r}")
        if "data" in node:
            data = expect(node, "data", dict, ctx)
            for k, v in data.items():
                out[k] = ctx.load(v, k)
        elif "tensors" in node:
            for k, tensor_node in tensor_nodes(node["tensors"], ctx):
                out[k] = ctx.load(tensor_node, k)
        else:
            for pair in expect(node, "items", list, ctx):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise ctx.error("dict items must be [key, value] pairs")
                key = ctx.load(pair[0], "key")
                try:
                    out[key] = ctx.load(pair[1], node_label(pair[0]))
                except TypeError as e:
                    raise ctx.error(f"unhashable dict key: {e}") from None
        attrs = node.get("attrs")
        if isinstance(attrs, dict) and "_metadata" in attrs and isinstance(out, OrderedDict):
            out._metadata = ctx.load(attrs["_metadata"], "_metadata")  # type: ignore[attr-defined]  # noqa: SLF001 - torch state-dict data
        return out
