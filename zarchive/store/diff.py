"""What changed between two versions of a model: its class, config fields, tensors (by the hash of
each) and metrics, read from the archives' manifests and tensors without building either model."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..engine.browse import OpenedArchive
from ..engine.objpath import join_path

_CONTAINER_TAGS = ("dataclass", None)  # config values walked into: dataclass nodes and plain dicts
MAX_CONFIG_DEPTH = 50


@dataclass(frozen=True)
class VersionSide:
    """What a diff needs of one version, read while its archive is open."""

    version: str
    model_class: str | None
    config: dict[str, Any]  # field path -> its manifest node
    digests: dict[str, bytes]  # tensor name -> SHA-256
    metrics: dict[str, Any]


@dataclass(frozen=True)
class VersionDiff:
    """Changes from `v1` to `v2`. config and metrics: name -> {"old": ..., "new": ...} (a side is left
    out when the field or metric is absent there); tensors by name (the state dict's keys)."""

    v1: str
    v2: str
    model_class: tuple[str | None, str | None] | None = None
    config: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)
    tensors_added: tuple[str, ...] = ()
    tensors_removed: tuple[str, ...] = ()
    tensors_changed: tuple[str, ...] = ()
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)

    @property
    def same_weights(self) -> bool:
        return not (self.tensors_added or self.tensors_removed or self.tensors_changed)

    def __bool__(self) -> bool:
        """True when anything differs."""
        return bool(self.model_class or self.config or self.metrics or not self.same_weights)

    def to_dict(self) -> dict[str, Any]:
        return {
            "v1": self.v1,
            "v2": self.v2,
            "model_class": list(self.model_class) if self.model_class else None,
            "config": self.config,
            "tensors": {
                "added": list(self.tensors_added),
                "removed": list(self.tensors_removed),
                "changed": list(self.tensors_changed),
            },
            "metrics": self.metrics,
        }

    def __str__(self) -> str:
        lines = [f"{self.v1} -> {self.v2}"]
        if self.model_class:
            lines.append(f"model class: {self.model_class[0]} -> {self.model_class[1]}")
        lines.append("config: " + ("no changes" if not self.config else f"{len(self.config)} changed"))
        lines += [f"  {name}: {_change_text(c)}" for name, c in self.config.items()]
        counts = (len(self.tensors_added), len(self.tensors_removed), len(self.tensors_changed))
        lines.append(
            "tensors: identical"
            if self.same_weights
            else f"tensors: {counts[0]} added, {counts[1]} removed, {counts[2]} changed"
        )
        for sign, names in (("+", self.tensors_added), ("-", self.tensors_removed), ("~", self.tensors_changed)):
            lines += [f"  {sign} {n}" for n in names]
        lines.append("metrics: " + ("no changes" if not self.metrics else f"{len(self.metrics)} changed"))
        lines += [f"  {name}: {_change_text(c)}" for name, c in self.metrics.items()]
        return "\n".join(lines)


def _change_text(change: Mapping[str, Any]) -> str:
    old = _show(change["old"]) if "old" in change else "(absent)"
    new = _show(change["new"]) if "new" in change else "(absent)"
    return f"{old} -> {new}"


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 200 else text[:197] + "..."


# --- reading one side ---
def read_side(version: str, arc: OpenedArchive, record: Mapping[str, Any]) -> VersionSide:
    """The class, flattened config, tensor digests and metrics of the model at the root of `arc`."""
    config: dict[str, Any] = {}
    tag = arc.model_tag()
    if tag is not None and "config" in arc:
        _flatten(arc, arc.node("config"), [], config, 0)
    digests = arc.tensor_digests()
    metrics = record.get("metrics")
    return VersionSide(version, tag, config, digests, dict(metrics) if isinstance(metrics, dict) else {})


def _flatten(arc: OpenedArchive, node: Any, path: list[str], out: dict[str, Any], depth: int) -> None:
    """Field path -> manifest node, walking into dataclass nodes and plain dicts (a field holding a
    list, tuple or other value is compared whole)."""
    kids = arc.children(node) if isinstance(node, dict) and node.get("$type") in _CONTAINER_TAGS else None
    if kids is None or depth > MAX_CONFIG_DEPTH or (not kids and path):
        out[join_path(path)] = _plain(node)
        return
    for key, child in kids.items():
        _flatten(arc, child, [*path, key], out, depth + 1)


def _plain(node: Any) -> Any:
    """A config value as shown in a diff: plain JSON as it is, a tuple or list node as its items,
    anything else as its manifest node."""
    if isinstance(node, dict) and node.get("$type") in ("tuple", "list") and isinstance(node.get("items"), list):
        return [_plain(x) for x in node["items"]]
    if isinstance(node, list):
        return [_plain(x) for x in node]
    return node


# --- comparing ---
def compare(a: VersionSide, b: VersionSide) -> VersionDiff:
    return VersionDiff(
        v1=a.version,
        v2=b.version,
        model_class=(a.model_class, b.model_class) if a.model_class != b.model_class else None,
        config=_changes(a.config, b.config),
        tensors_added=tuple(sorted(set(b.digests) - set(a.digests))),
        tensors_removed=tuple(sorted(set(a.digests) - set(b.digests))),
        tensors_changed=tuple(sorted(n for n in a.digests.keys() & b.digests.keys() if a.digests[n] != b.digests[n])),
        metrics=_changes(a.metrics, b.metrics),
    )


def _changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key in [*old, *(k for k in new if k not in old)]:
        change: dict[str, Any] = {}
        if key in old:
            change["old"] = old[key]
        if key in new:
            change["new"] = new[key]
        if key not in old or key not in new or _canonical(old[key]) != _canonical(new[key]):
            out[key] = change
    return out


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True)


__all__ = ["VersionDiff", "VersionSide", "compare", "read_side"]
