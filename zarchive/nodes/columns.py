"""The planner's view of a text column in Arrow's string layout (format 1.3), shared by every node type
that stores one (a "utf8" `pandas.array`, a polars String column): `offsets` and `valid` are array
nodes, visited; `$ref` is the data member, of `nbytes` bytes. A "dict" `pandas.array` (format 1.4)
holds its `count` distinct values that way, plus `codes`, an array node visited too.

Budget: the data member is counted by the planner like any member; building the column also
allocates the buffer with separators, its decoded text and one Python str per row, counted here."""

from __future__ import annotations

from typing import Any

from .base import PlanSink

STR_OBJECT_BYTES = 64  # a short str object plus the two pointers (list, object array) that hold it


def plan_utf8(node: dict[str, Any], p: PlanSink) -> None:
    length, nbytes = node.get("length"), node.get("nbytes")
    if type(length) is not int or length < 0:
        raise p.error("a 'utf8' column needs a non-negative int 'length'")
    if type(nbytes) is not int or nbytes < 0:
        raise p.error("a 'utf8' column needs 'nbytes', the size of its data member")
    if "$ref" not in node or not isinstance(node.get("offsets"), dict):
        raise p.error("a 'utf8' column needs its data member ('$ref') and 'offsets'")
    p.member(node["$ref"], expected_size=nbytes)
    p.visit(node["offsets"], "offsets")
    if "valid" in node:
        if not isinstance(node["valid"], dict):
            raise p.error("'valid' must be a bool array node")
        p.visit(node["valid"], "valid")
    p.inline_bytes(2 * (nbytes + length) + length * STR_OBJECT_BYTES)


def plan_dict(node: dict[str, Any], p: PlanSink) -> None:
    length, count, nbytes = node.get("length"), node.get("count"), node.get("nbytes")
    if type(length) is not int or length < 0 or type(count) is not int or count < 0:
        raise p.error("a 'dict' column needs a non-negative int 'length' and 'count'")
    if type(nbytes) is not int or nbytes < 0:
        raise p.error("a 'dict' column needs 'nbytes', the size of its data member")
    if "$ref" not in node or not isinstance(node.get("offsets"), dict) or not isinstance(node.get("codes"), dict):
        raise p.error("a 'dict' column needs its data member ('$ref'), 'offsets' and 'codes'")
    p.member(node["$ref"], expected_size=nbytes)
    p.visit(node["offsets"], "offsets")
    p.visit(node["codes"], "codes")
    # the distinct strings as for "utf8", plus the object array of a pointer per row
    p.inline_bytes(2 * (nbytes + count) + count * STR_OBJECT_BYTES + 8 * (length + count))
