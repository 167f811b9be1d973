"""The manifest's `exports` section (format 1.3): the model exported to ONNX and TorchScript, next to
its config and weights. What a reader knows of it without running anything: each export's member
(stored uncompressed under a fixed name), its size, and what the save recorded when it checked the
export against the PyTorch model. Imports neither torch nor onnx.

    "exports": {"$type": "exports",
                "onnx": {"member": "exports/model.onnx", "size": 68553, "exporter": "...", "opset": 20, ...},
                "torchscript": {"member": "exports/model.torchscript.pt", ...}}
"""

from __future__ import annotations

import math
from typing import Any

from .base import NodeSchema, PlanSink

EXPORTS_KEY = "exports"  # the manifest key, beside "root"
EXPORT_MEMBERS = {"onnx": "exports/model.onnx", "torchscript": "exports/model.torchscript.pt"}
EXPORT_NAMES = tuple(EXPORT_MEMBERS)
_TEXT_LISTS = ("inputs", "outputs", "warnings")
_DIFFS = ("max_abs_diff", "max_rel_diff", "rtol", "atol")


def _is_number(x: Any) -> bool:
    return type(x) in (int, float) and math.isfinite(x) and x >= 0


def _is_texts(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(s, str) for s in x)


def _is_axes(x: Any) -> bool:
    """{tensor name: {axis index as decimal text: dimension name}}"""
    return isinstance(x, dict) and all(
        isinstance(axes, dict) and all(k.isdigit() and isinstance(v, str) for k, v in axes.items())
        for axes in x.values()
    )


class ExportsSchema(NodeSchema):
    """The `exports` node: export name -> its entry (see the module docstring and spec section 3.2)."""

    name = "exports"
    since = "1.3"

    def plan(self, node: dict[str, Any], p: PlanSink) -> None:
        for key, entry in node.items():
            if key.startswith("$"):
                continue
            if key not in EXPORT_MEMBERS:
                raise p.error(f"unknown export {key[:60]!r} (this reader knows {', '.join(EXPORT_NAMES)})")
            self.check_entry(key, entry, p)

    def check_entry(self, key: str, entry: Any, p: PlanSink) -> None:
        if not isinstance(entry, dict):
            raise p.error(f"the {key!r} export's entry must be an object")
        member = entry.get("member")
        if member != EXPORT_MEMBERS[key]:
            raise p.error(f"the {key!r} export must be the member {EXPORT_MEMBERS[key]!r}, not {str(member)[:200]!r}")
        size = entry.get("size")
        if type(size) is not int or size < 0:
            raise p.error(f"bad 'size' {str(size)[:30]!r} in the {key!r} export", member=member)
        found = p.member(member, expected_size=size)  # a size that disagrees with the metadata is refused
        if found.get("codec", "none") != "none":
            raise p.error("an export member is stored uncompressed", member=member)
        if not isinstance(entry.get("exporter"), str):
            raise p.error(f"the {key!r} export has no 'exporter'", member=member)
        opset = entry.get("opset")
        if (key == "onnx" and not (type(opset) is int and opset > 0)) or (key != "onnx" and opset is not None):
            raise p.error(f"bad 'opset' {str(opset)[:30]!r} in the {key!r} export", member=member)
        for field in _TEXT_LISTS:
            if not _is_texts(entry.get(field)):
                raise p.error(f"the {key!r} export's {field!r} must be a list of strings", member=member)
        axes = entry.get("dynamic_axes")
        if not (axes is None or _is_axes(axes)):
            raise p.error(f"bad 'dynamic_axes' in the {key!r} export", member=member)
        for field in _DIFFS:
            if not _is_number(entry.get(field)):
                raise p.error(f"the {key!r} export's {field!r} must be a non-negative number", member=member)

    def children(self, node: dict[str, Any]) -> dict[str, Any] | None:
        return None  # entries are records, not values: nothing below them loads

    def summary(self, node: dict[str, Any]) -> str:
        names = [k for k in node if not k.startswith("$")]
        return f"exports ({', '.join(names)})" if names else "exports (none)"


def export_entries(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The entries of a checked `exports` node, as plain dicts (copies)."""
    return {k: dict(v) for k, v in node.items() if not k.startswith("$")}
