"""Standard-library value types: bytes, complex, date and time, paths, Enum members, Decimal, UUID."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import enum
import pathlib
import re
import uuid
from typing import Any

from .._compat import enum as enum_compat
from ..engine.context import LoadContext, Node, SaveContext
from ..engine.generic import GenericObject
from ..engine.main_classes import warn_on_save
from ..engine.typeref import class_tag
from ..nodes.classes import EnumSchema
from ..nodes.values import BytesSchema, ComplexSchema, DateTimeSchema, PathSchema, TextValueSchema
from .base import Handler, expect
from .builtins import float_node, load_float

EXTERNAL_BYTES = 4096
MAX_TEXT_VALUE = 10_000  # characters of a Decimal's (or UUID's) text a reader accepts
_TZ_KEY = re.compile(r"^[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*$")
MAX_TZ_KEY = 100


def tz_key_ok(key: str) -> bool:
    """Whether a reader accepts `key` as a time zone name (it refuses any other before zoneinfo sees it)."""
    return len(key) <= MAX_TZ_KEY and ".." not in key and _TZ_KEY.match(key) is not None


class BytesHandler(BytesSchema, Handler):
    """bytes and bytearray: base64 inline, a `.bin` member when longer than 4 KiB."""

    name = "bytes"

    def accepts(self, cls: type) -> bool:
        return cls is bytes or cls is bytearray

    def save(self, obj: bytes | bytearray, ctx: SaveContext) -> Node:
        extra = {"bytearray": True} if type(obj) is bytearray else {}
        if len(obj) <= EXTERNAL_BYTES:
            return {"$type": "bytes", "base64": base64.b64encode(obj).decode("ascii"), **extra}
        data = bytes(obj)
        plan = ctx.add_member("bin", lambda: [(None, memoryview(data))], compress="try")
        return ctx.ref_node(plan, "bytes", nbytes=len(data), **extra)

    def load(self, node: dict[str, Any], ctx: LoadContext) -> bytes | bytearray:
        if "$ref" in node:
            nbytes = expect(node, "nbytes", int, ctx)
            memo: dict[tuple[str, bool], bytes | bytearray] = ctx.state("bytes.memo", dict)
            name, mutable = node["$ref"], node.get("bytearray") is True
            shared = memo.get((name, mutable)) if isinstance(name, str) else None
            if shared is not None:  # nodes naming one member share one value (a hostile file's 20 nodes
                if len(shared) != nbytes:  # naming one big member cost it once, not 20 times)
                    raise ctx.error(f"the member holds {len(shared)} bytes, this node says {nbytes}", member=name)
                return shared
            data = bytes(ctx.member_bytes(name, expected_size=nbytes, shared=True))
            value = bytearray(data) if mutable else data
            memo[(name, mutable)] = value
            return value
        else:
            text = expect(node, "base64", str, ctx)
            try:
                data = base64.b64decode(text, validate=True)
            except ValueError as e:
                raise ctx.error(f"bad base64: {e}") from None
        return bytearray(data) if node.get("bytearray") is True else data


class ComplexHandler(ComplexSchema, Handler):
    name = "complex"

    def accepts(self, cls: type) -> bool:
        return cls is complex

    def save(self, obj: complex, ctx: SaveContext) -> Node:
        return {"$type": "complex", "real": float_node(obj.real), "imag": float_node(obj.imag)}

    def load(self, node: dict[str, Any], ctx: LoadContext) -> complex:
        return complex(load_float(node.get("real"), ctx), load_float(node.get("imag"), ctx))


def stdlib_tz_fields(tz: dt.tzinfo | None, ctx: SaveContext) -> dict[str, Any]:
    if tz is None:
        return {}
    key = getattr(tz, "key", None)
    if isinstance(key, str) and type(tz).__module__ == "zoneinfo":
        if not tz_key_ok(key):
            raise ctx.error(
                f"time zone key {key[:60]!r} cannot be saved: a reader accepts only IANA-style names (letters, "
                f"digits, '_', '+', '-' in '/'-separated parts, at most {MAX_TZ_KEY} characters)"
            )
        return {"tz": key}
    if type(tz) is dt.timezone:
        offset = tz.utcoffset(None)
        fields: dict[str, Any] = {"tz_offset_seconds": offset.total_seconds()}
        if tz is not dt.UTC and tz.tzname(None) != dt.timezone(offset).tzname(None):
            fields["tz_name"] = tz.tzname(None)
        return fields
    raise ctx.error(
        f"time zone of type {type(tz).__qualname__} cannot be saved exactly: use zoneinfo.ZoneInfo or datetime.timezone"
    )


def stdlib_tz_from(node: dict[str, Any], ctx: LoadContext) -> dt.tzinfo | None:
    if "tz" in node:
        key = expect(node, "tz", str, ctx)
        if not tz_key_ok(key):
            raise ctx.error(f"bad time zone key {key[:40]!r}")
        import zoneinfo

        try:
            return zoneinfo.ZoneInfo(key)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as e:  # OSError: a key naming a folder
            raise ctx.error(f"unknown time zone {key!r}: {e}") from None
    if "tz_offset_seconds" in node:
        seconds = expect(node, "tz_offset_seconds", (int, float), ctx)
        offset = dt.timedelta(seconds=seconds)
        name = node.get("tz_name")
        if offset == dt.timedelta(0) and name is None:
            return dt.UTC
        return dt.timezone(offset, name) if isinstance(name, str) else dt.timezone(offset)
    return None


class DateTimeHandler(DateTimeSchema, Handler):
    """datetime, date, time and timedelta, exact to the microsecond, with zoneinfo/fixed zones."""

    name = "datetime"

    def accepts(self, cls: type) -> bool:
        return cls in (dt.datetime, dt.date, dt.time, dt.timedelta)

    def save(self, obj: Any, ctx: SaveContext) -> Node:
        cls = type(obj)
        if cls is dt.timedelta:
            return {
                "$type": "datetime",
                "kind": "timedelta",
                "days": obj.days,
                "seconds": obj.seconds,
                "microseconds": obj.microseconds,
            }
        if cls is dt.date:
            return {"$type": "datetime", "kind": "date", "iso": obj.isoformat()}
        naive = obj.replace(tzinfo=None)
        node: dict[str, Any] = {
            "$type": "datetime",
            "kind": "datetime" if cls is dt.datetime else "time",
            "iso": naive.isoformat(),
            **stdlib_tz_fields(obj.tzinfo, ctx),
        }
        if obj.fold:
            node["fold"] = 1
        return node

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        kind = node.get("kind")
        if kind == "timedelta":
            return dt.timedelta(
                days=expect(node, "days", int, ctx),
                seconds=expect(node, "seconds", int, ctx),
                microseconds=expect(node, "microseconds", int, ctx),
            )
        iso = expect(node, "iso", str, ctx)[:64]
        if kind == "date":
            return dt.date.fromisoformat(iso)
        fold = 1 if node.get("fold") == 1 else 0
        if kind == "datetime":
            return dt.datetime.fromisoformat(iso).replace(tzinfo=stdlib_tz_from(node, ctx), fold=fold)
        if kind == "time":
            return dt.time.fromisoformat(iso).replace(tzinfo=stdlib_tz_from(node, ctx), fold=fold)
        raise ctx.error(f"unknown datetime kind {str(kind)[:20]!r}")


_PATH_CLASSES: dict[str, type] = {
    "PurePosixPath": pathlib.PurePosixPath,
    "PureWindowsPath": pathlib.PureWindowsPath,
    "PosixPath": pathlib.PosixPath,
    "WindowsPath": pathlib.WindowsPath,
}


class PathHandler(PathSchema, Handler):
    """pathlib paths; concrete paths come back as the current platform's concrete class."""

    name = "path"

    def accepts(self, cls: type) -> bool:
        return cls in _PATH_CLASSES.values()

    def save(self, obj: pathlib.PurePath, ctx: SaveContext) -> Node:
        return {"$type": "path", "class": type(obj).__name__, "value": str(obj)}

    def load(self, node: dict[str, Any], ctx: LoadContext) -> pathlib.PurePath:
        cname = node.get("class")
        value = expect(node, "value", str, ctx)
        if cname in ("PosixPath", "WindowsPath"):
            return pathlib.Path(value)
        if cname not in _PATH_CLASSES:
            raise ctx.error(f"unknown path class {str(cname)[:40]!r}")
        return _PATH_CLASSES[cname](value)


_PLAIN_ENUM_VALUES = (bool, int, float, str)


class EnumHandler(EnumSchema, Handler):
    """Enum members by class and name (the class must be importable already or registered)."""

    name = "enum"

    def accepts(self, cls: type) -> bool:
        return isinstance(cls, type) and issubclass(cls, enum.Enum)

    def save(self, obj: enum.Enum, ctx: SaveContext) -> Node:
        tag = class_tag(type(obj))
        warn_on_save(type(obj), tag, "Enum")
        node: dict[str, Any] = {"$type": "enum", "class": tag}
        if obj.name is not None and type(obj).__members__.get(obj.name) is obj:
            node["name"] = obj.name
            if obj.value is None or type(obj.value) in _PLAIN_ENUM_VALUES:  # format 1.5: for class-free readers
                node["value"] = ctx.save(obj.value, "value")
        else:  # a combination of Flag members
            node["value"] = ctx.save(obj.value, "value")
            if isinstance(obj, enum.Flag):  # format 1.5: the members it combines, by name
                node["names"] = [m.name for m in obj if m.name is not None]
        return node

    def load(self, node: dict[str, Any], ctx: LoadContext) -> enum.Enum:
        tag = node.get("class")
        cls = ctx.resolve_class(tag, "enum")
        if cls is None:  # unresolved="generic": the member's recorded name and value (1.5: both), a Flag's names
            fields: dict[str, Any] = {}
            if "name" in node:
                fields["name"] = expect(node, "name", str, ctx)
            if "value" in node:
                fields["value"] = ctx.load(node["value"], "value")
            if "names" in node:
                fields["names"] = list(expect(node, "names", list, ctx))
            return GenericObject(str(tag), fields, "enum")  # type: ignore[return-value]
        if "name" in node:
            name = expect(node, "name", str, ctx)
            member = cls.__members__.get(name)  # type: ignore[attr-defined]
            if member is None:
                ctx.mismatch(f"{cls.__qualname__} has no member {name!r}")
                return None  # type: ignore[return-value]
            return member
        return _member_by_value(cls, ctx.load(node.get("value"), "value"), ctx)


def _member_by_value(cls: Any, value: Any, ctx: LoadContext) -> Any:
    """The member (or Flag combination) of `cls` with `value`, without leaving state behind that grows
    with the files read.

    `cls(value)` on a Flag builds a pseudo-member for a combination and caches it in the class
    (Python 3.11-3.13; so does `A | B`), and a Flag with boundary KEEP (like re.RegexFlag) accepts any
    int, so every read of a new value would add an entry for good (see _compat/enum.py). Here: a
    value already there is returned as is; a Flag value must be a combination of the class's own
    members' bits (anything else is a mismatch); an int-valued Flag's combination (IntFlag, RegexFlag,
    compared by value) is built and then dropped from the cache again; a pure Flag's stays cached,
    since its members compare by identity (at most one entry per combination of its own members)."""
    known = enum_compat.known_member(cls, value)
    if known is not None:
        return known
    if isinstance(cls, enum.EnumType) and issubclass(cls, enum.Flag):
        mask = enum_compat.flag_mask(cls)
        if type(value) is not int or value < 0 or (isinstance(mask, int) and value & ~mask):
            ctx.mismatch(f"{cls.__qualname__} has no combination of members with value {_short_value(value)}")
            return None
        return enum_compat.flag_combination(cls, value)
    try:
        return cls(value)
    except ValueError:
        ctx.mismatch(f"{cls.__qualname__} has no member with value {_short_value(value)}")
        return None


def _short_value(value: Any) -> str:
    if type(value) is int and value.bit_length() > 64:
        return f"(an int of {value.bit_length()} bits)"
    text = repr(value) if type(value) is not int else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


class DecimalUUIDHandler(TextValueSchema, Handler):
    """decimal.Decimal and uuid.UUID, by their exact string forms."""

    name = "text_value"

    def accepts(self, cls: type) -> bool:
        return cls is decimal.Decimal or cls is uuid.UUID

    def save(self, obj: Any, ctx: SaveContext) -> Node:
        text = str(obj)
        if len(text) > MAX_TEXT_VALUE:
            raise ctx.error(
                f"a Decimal of {len(text):,} characters cannot be saved: a reader accepts at most {MAX_TEXT_VALUE:,}"
            )
        return {"$type": "text_value", "kind": "Decimal" if type(obj) is decimal.Decimal else "UUID", "value": text}

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        value = expect(node, "value", str, ctx)
        if len(value) > MAX_TEXT_VALUE:
            raise ctx.error("value too long")
        kind = node.get("kind")
        if kind == "Decimal":
            try:
                return decimal.Decimal(value)
            except decimal.InvalidOperation:  # an ArithmeticError, not a ValueError
                raise ctx.error(f"bad Decimal {value[:40]!r}") from None
        if kind == "UUID":
            return uuid.UUID(value)
        raise ctx.error(f"unknown kind {str(kind)[:20]!r}")
