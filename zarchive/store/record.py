"""What the model store records about a version, and the `VersionInfo` row a listing shows.

Each version's file is an ordinary archive of the model; the store's record lives in its metadata
(`settings.custom["zarchive.store.model_store"]`, spec/store.md), so listing a store reads each file's metadata
only, and the file stays readable with `zarchive.read` or `Model.read`.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError
from .semver import Version

RECORD_KEY = "zarchive.store.model_store"
RECORD_FIELDS = ("version", "created", "description", "metrics", "tags", "torch_version", "weights_hash")
MAX_METRIC_DEPTH = 20


@dataclass(frozen=True)
class VersionInfo:
    """One version of a ModelStore: what was recorded when it was saved, and its file's size.

    created: ISO 8601 time in UTC; metrics: JSON values by name; weights_hash: hex SHA-256 of the
    model's weights (spec/weights-hash.md); size: the file's bytes; exports: name -> what the archive
    records about each exported graph (empty when it has none)."""

    version: str
    created: str
    description: str
    metrics: dict[str, Any] = field(hash=False)
    tags: tuple[str, ...]
    torch_version: str
    weights_hash: str
    size: int
    exports: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON values (tags as a list)."""
        return {
            "version": self.version,
            "created": self.created,
            "description": self.description,
            "metrics": dict(self.metrics),
            "tags": list(self.tags),
            "torch_version": self.torch_version,
            "weights_hash": self.weights_hash,
            "size": self.size,
            "exports": {k: dict(v) for k, v in self.exports.items()},
        }


def make_record(
    version: Version,
    *,
    metrics: Mapping[str, Any] | None,
    description: str,
    tags: Iterable[str],
    torch_version: str,
    weights_hash: str,
) -> dict[str, Any]:
    """The record written into a version's metadata; TypeError/ValueError for arguments it cannot hold."""
    if not isinstance(description, str):
        raise TypeError(f"description must be a string, not {type(description).__name__}")
    if isinstance(tags, str):
        raise TypeError("tags must be a collection of strings, not one string (tags=('prod',))")
    tag_list = list(tags)
    for t in tag_list:
        if not isinstance(t, str):
            raise TypeError(f"tags must be strings, not {type(t).__name__} {t!r}")
    if metrics is not None and not isinstance(metrics, Mapping):
        raise TypeError(f"metrics must be a mapping of name -> value, not {type(metrics).__name__}")
    return {
        "version": str(version),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="microseconds"),
        "description": str.__str__(description),
        "metrics": {_metric_name(k): _metric_value(v, str(k), 0) for k, v in (metrics or {}).items()},
        "tags": [str.__str__(t) for t in tag_list],
        "torch_version": str.__str__(torch_version),
        "weights_hash": weights_hash,
    }


def _metric_name(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"metric names must be strings, not {type(key).__name__} {key!r}")
    return str.__str__(key)


def _metric_value(value: Any, name: str, depth: int) -> Any:
    """A metric as JSON: numbers (numpy and 0-d torch scalars via .item()), strings, booleans, None,
    and lists and dicts of them."""
    if depth > MAX_METRIC_DEPTH:
        raise ValueError(f"metric {name!r} is nested too deeply")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"metric {name!r} is {value}: metrics are stored as JSON, which has no NaN or infinity")
        return float(value)
    if isinstance(value, Mapping):
        return {_metric_name(k): _metric_value(v, f"{name}.{k}", depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_metric_value(v, f"{name}[{i}]", depth + 1) for i, v in enumerate(value)]
    if _is_scalar(value):
        return _metric_value(value.item(), name, depth + 1)
    raise TypeError(
        f"metric {name!r} is a {type(value).__name__}: metrics are numbers, strings, booleans, None, "
        "or lists and dicts of them"
    )


def _is_scalar(value: Any) -> bool:
    """A numpy scalar or a one-element torch tensor / numpy array (what `.item()` turns into a number)."""
    if not callable(getattr(value, "item", None)):
        return False
    numel = getattr(value, "numel", None)
    if callable(numel):
        return bool(numel() == 1)
    size = getattr(value, "size", None)
    return isinstance(size, int) and size == 1


def read_record(metadata: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The store record in an archive's metadata, checked; FormatError naming `where` when the file
    was not written by a ModelStore or its record is malformed."""
    settings = metadata.get("settings")
    custom = settings.get("custom") if isinstance(settings, Mapping) else None
    record = custom.get(RECORD_KEY) if isinstance(custom, Mapping) else None
    if not isinstance(record, Mapping):
        raise FormatError(f"{where} was not saved by a ModelStore: its metadata has no {RECORD_KEY!r} record")
    for key, kind in (
        ("version", str),
        ("created", str),
        ("description", str),
        ("metrics", dict),
        ("tags", list),
        ("torch_version", str),
        ("weights_hash", str),
    ):
        if not isinstance(record.get(key), kind):
            raise FormatError(f"{where}: the store record's {key!r} is missing or not a {kind.__name__}")
    if not all(isinstance(t, str) for t in record["tags"]):
        raise FormatError(f"{where}: the store record's tags must be strings")
    h = record["weights_hash"]
    if len(h) != 64 or any(c not in "0123456789abcdef" for c in h):
        raise FormatError(f"{where}: the store record's weights_hash is not a hex SHA-256")
    return dict(record)


def version_info(record: Mapping[str, Any], *, size: int, exports: Mapping[str, Any] | None) -> VersionInfo:
    return VersionInfo(
        version=record["version"],
        created=record["created"],
        description=record["description"],
        metrics=dict(record["metrics"]),
        tags=tuple(record["tags"]),
        torch_version=record["torch_version"],
        weights_hash=record["weights_hash"],
        size=size,
        exports={str(k): dict(v) if isinstance(v, Mapping) else {"info": v} for k, v in (exports or {}).items()},
    )


__all__ = ["RECORD_KEY", "VersionInfo", "make_record", "read_record", "version_info"]
