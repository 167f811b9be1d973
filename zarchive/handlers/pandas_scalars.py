"""pandas scalars (Timestamp, Timedelta, NaT, NA, Period) and the time zones of pandas values.

Timestamps and timedeltas are stored as their exact integer count of their own unit (a decimal string,
so JSON readers that parse numbers as doubles lose nothing), with an ISO form beside it for people.
Time zones are stored by name (zoneinfo keys, pytz zones, dateutil zone files) or as fixed offsets,
with the library they came from, so a value comes back with the same kind of tzinfo.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import numpy as np
import pandas as pd

from ..engine.context import LoadContext, Node, SaveContext
from ..nodes.tables import PandasScalarSchema
from .base import Handler, expect
from .stdlib import stdlib_tz_fields, stdlib_tz_from

UNITS = ("s", "ms", "us", "ns")
_TZ_KEY = re.compile(r"^[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*$")
_FREQ = re.compile(r"^[A-Za-z0-9\-_]{1,40}$")
_NaTType = type(pd.NaT)
_NAType = type(pd.NA)


def _zone_key(key: Any, ctx: LoadContext) -> str:
    if not isinstance(key, str) or len(key) > 100 or ".." in key or not _TZ_KEY.match(key):
        raise ctx.error(f"bad time zone key {str(key)[:40]!r}")
    return key


def tz_fields(tz: dt.tzinfo | None, ctx: SaveContext) -> dict[str, Any]:
    """The manifest fields naming `tz` ({} for naive values)."""
    if tz is None:
        return {}
    module = type(tz).__module__
    cls = type(tz).__name__
    offset = tz.utcoffset(None)
    if module.startswith("pytz"):
        zone = getattr(tz, "zone", None)
        if isinstance(zone, str):
            return {"tz": zone, "tz_lib": "pytz"}
        if offset is not None:  # pytz.FixedOffset
            return {"tz_offset_seconds": offset.total_seconds(), "tz_lib": "pytz"}
    elif module.startswith("dateutil"):
        if cls == "tzutc":
            return {"tz_offset_seconds": 0, "tz_lib": "dateutil"}
        if cls == "tzoffset" and offset is not None:
            return {"tz_offset_seconds": offset.total_seconds(), "tz_name": tz.tzname(None), "tz_lib": "dateutil"}
        from .._compat.dateutil import tzfile_key  # dateutil is imported: the zone is one of its objects

        filename = tzfile_key(tz) if cls == "tzfile" else None
        if isinstance(filename, str):
            key = filename.rsplit("zoneinfo/", 1)[-1] if filename.startswith("/") else filename
            if _TZ_KEY.match(key):
                return {"tz": key, "tz_lib": "dateutil"}
    else:
        return stdlib_tz_fields(tz, ctx)
    raise ctx.error(f"time zone {tz!r} ({module}.{cls}) cannot be saved by name or offset")


def tz_from(node: dict[str, Any], ctx: LoadContext) -> dt.tzinfo | None:
    """The tzinfo described by a node's tz fields (None: naive)."""
    lib = node.get("tz_lib")
    if lib is None:
        return stdlib_tz_from(node, ctx)
    if lib == "pytz":
        try:
            import pytz
        except ImportError:
            raise ctx.error("this value's time zone is a pytz zone: install pytz to read it") from None
        if "tz" in node:
            try:
                return pytz.timezone(_zone_key(node["tz"], ctx))
            except pytz.UnknownTimeZoneError:
                raise ctx.error(f"unknown pytz time zone {node['tz']!r}") from None
        seconds = expect(node, "tz_offset_seconds", (int, float), ctx)
        return pytz.FixedOffset(int(seconds) // 60)
    if lib == "dateutil":
        import dateutil.tz

        if "tz" in node:
            key = _zone_key(node["tz"], ctx)
            try:  # pandas' own lookup, so the zone is the object pandas caches for this name
                return pd.DatetimeTZDtype("ns", "dateutil/" + key).tz
            except (TypeError, ValueError):
                raise ctx.error(f"unknown dateutil time zone {key!r}") from None
        seconds = expect(node, "tz_offset_seconds", (int, float), ctx)
        if "tz_name" in node:
            name = node["tz_name"]
            if name is not None and not isinstance(name, str):
                raise ctx.error("bad tz_name")
            return dateutil.tz.tzoffset(name, seconds)
        return dateutil.tz.tzutc() if seconds == 0 else dateutil.tz.tzoffset(None, seconds)
    raise ctx.error(f"unknown time zone library {str(lib)[:20]!r}")


def check_unit(unit: Any, ctx: LoadContext) -> str:
    if unit not in UNITS:
        raise ctx.error(f"bad time unit {str(unit)[:10]!r}")
    return unit


def check_freq(freq: Any, ctx: LoadContext) -> str:
    """A pandas frequency string, checked to be short and plain before pandas parses it."""
    if not isinstance(freq, str) or not _FREQ.match(freq):
        raise ctx.error(f"bad frequency {str(freq)[:40]!r}")
    return freq


def _int64_text(node: dict[str, Any], key: str, ctx: LoadContext) -> int:
    text = expect(node, key, str, ctx)
    if len(text) > 21 or not re.fullmatch(r"-?\d+", text):
        raise ctx.error(f"bad integer {text[:30]!r}")
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ctx.error("integer outside int64")
    return value


class PandasScalarHandler(PandasScalarSchema, Handler):
    """pd.Timestamp (with its unit and zone), pd.Timedelta, pd.NaT, pd.NA and pd.Period."""

    name = "pandas.scalar"

    def accepts(self, cls: type) -> bool:
        return cls in (pd.Timestamp, pd.Timedelta, _NaTType, _NAType, pd.Period)

    def save(self, obj: Any, ctx: SaveContext) -> Node:
        cls = type(obj)
        if obj is pd.NaT:
            return {"$type": self.name, "kind": "NaT"}
        if obj is pd.NA:
            return {"$type": self.name, "kind": "NA"}
        if cls is pd.Timestamp:
            return {
                "$type": self.name,
                "kind": "Timestamp",
                "iso": obj.isoformat(),
                "unit": obj.unit,
                "value": str(int(obj.asm8.view("i8"))),  # UTC for zone-aware values
                **tz_fields(obj.tz, ctx),
            }
        if cls is pd.Timedelta:
            return {
                "$type": self.name,
                "kind": "Timedelta",
                "iso": obj.isoformat(),
                "unit": obj.unit,
                "value": str(int(obj.asm8.view("i8"))),
            }
        if cls is pd.Period:
            return {"$type": self.name, "kind": "Period", "iso": str(obj), "freq": obj.freqstr, "ordinal": obj.ordinal}
        raise ctx.error(f"unexpected pandas scalar {cls.__qualname__}")

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        kind = node.get("kind")
        if kind == "NaT":
            return pd.NaT
        if kind == "NA":
            return pd.NA
        if kind == "Timestamp":
            value = _int64_text(node, "value", ctx)
            unit: Any = check_unit(node.get("unit"), ctx)  # one of numpy's unit names (checked)
            ts = pd.Timestamp(np.datetime64(value, unit))
            tz = tz_from(node, ctx)
            return ts if tz is None else ts.tz_localize("UTC").tz_convert(tz)
        if kind == "Timedelta":
            value = _int64_text(node, "value", ctx)
            unit = check_unit(node.get("unit"), ctx)
            return pd.Timedelta(np.timedelta64(value, unit))
        if kind == "Period":
            ordinal = expect(node, "ordinal", int, ctx)
            return pd.Period(ordinal=ordinal, freq=check_freq(node.get("freq"), ctx))
        raise ctx.error(f"unknown pandas scalar kind {str(kind)[:20]!r}")
