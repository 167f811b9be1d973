"""Dataclasses (plain and muutils SerializableDataclass) and named tuples, saved field by field.

Every field value goes through the handler chain, so arrays, tensors and tables inside a config or a
record become members of their own, and each field has an object path (`config/n_layers`).
The node records the class by its tag; reading resolves the tag without importing anything
(see typeref), so the class must be imported or registered before reading.

Classes change between saving and reading. A field the archive has and the class lost is dropped
(a mismatch: warning, error or nothing per error_mode); a field the class gained takes its default
(also a mismatch, naming the field and the default used); a required field the archive lacks is a
FieldMismatchError.

muutils' own `.serialize()` is not used: it turns arrays into lists and nested objects into dicts.
Its field options are honoured: `serialize=False` fields are skipped, `serialization_fn` is applied
before saving, `deserialize_fn` (the field's value) or `loading_fn` (the dict of all loaded fields)
after loading, as muutils does.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
import weakref
from collections.abc import Collection
from typing import Any

from ..engine.annotation_check import Check, check_for, describe_hint
from ..engine.context import LoadContext, Node, SaveContext
from ..engine.generic import GenericObject
from ..engine.main_classes import warn_on_save
from ..engine.objpath import join_path
from ..engine.typeref import class_tag, is_dataclass_class, is_namedtuple_class, registered_classes
from ..errors import FieldMismatchError, SaveError
from ..nodes.classes import DataclassSchema, NamedTupleSchema
from .base import Handler, expect


def recorded_tag(cls: type, ctx: SaveContext, what: str = "dataclass") -> str:
    """The tag written for `cls`: its registered name if it was registered under one, else its
    natural "module:QualName" (so a class registered under a custom name reads back by that name).
    A natural tag no other program can resolve (a class in __main__ or a function) warns once."""
    names: dict[int, list[str]] = ctx.state("typeref.names", _registered_names)
    found = names.get(id(cls))
    natural = class_tag(cls)
    if not found or natural in found:
        warn_on_save(cls, natural, what)
        return natural
    return found[0]


def _registered_names() -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for name, c in registered_classes().items():
        out.setdefault(id(c), []).append(name)
    return out


def _save_field(value: Any, f: dataclasses.Field[Any], ctx: SaveContext) -> Node:
    """One field's node, after the field's serialization_fn (muutils) where it applies."""
    fn = getattr(f, "serialization_fn", None)
    if _is_serializable_dataclass(value):
        pass  # walked by us, as muutils walks it with .serialize() rather than serialization_fn
    elif fn is not None:
        try:
            value = fn(value)
        except Exception as e:
            raise SaveError(
                f"serialization_fn of field {f.name!r} failed: {type(e).__name__}: {e}",
                path=join_path([*ctx.path, f.name]),
            ) from e
    elif ctx.registry.for_object(value) is None and callable(getattr(value, "serialize", None)):
        value = value.serialize()  # a muutils-style object we have no handler for: its own form
    return ctx.save(value, f.name)


def _is_serializable_dataclass(value: Any) -> bool:
    """A muutils SerializableDataclass (muutils is never imported here: such an object can only exist
    once it is)."""
    module = sys.modules.get("muutils.json_serialize")
    base = getattr(module, "SerializableDataclass", None)
    return base is not None and isinstance(value, base)


class DataclassHandler(DataclassSchema, Handler):
    """Any dataclass instance: {"class": tag, "fields": {name: node}}."""

    name = "dataclass"

    def accepts(self, cls: type) -> bool:
        return is_dataclass_class(cls)

    def save(self, obj: Any, ctx: SaveContext) -> Node:
        fields: dict[str, Node] = {}
        for f in dataclasses.fields(obj):
            if not getattr(f, "serialize", True):
                continue
            if not f.init and not hasattr(obj, f.name):
                continue  # an init=False field nothing has set yet
            fields[f.name] = _save_field(getattr(obj, f.name), f, ctx)
        return {"$type": self.name, "class": recorded_tag(type(obj), ctx), "fields": fields}

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        return load_dataclass(node, ctx)


def load_dataclass(node: dict[str, Any], ctx: LoadContext, cls: type | None = None) -> Any:
    """The dataclass instance a "dataclass" node describes, as an instance of `cls` when given
    (a caller that already knows the class, e.g. a model's declared config class)."""
    tag = node.get("class")
    if cls is None:
        cls = ctx.resolve_class(tag, "dataclass")
    stored = expect(node, "fields", dict, ctx)
    if cls is None:  # unresolved="generic"
        return GenericObject(str(tag), {name: ctx.load(sub, name) for name, sub in stored.items()}, "dataclass")
    return build_dataclass(cls, tag, stored, ctx)


def build_dataclass(
    cls: type,
    tag: Any,
    stored: dict[str, Any],
    ctx: LoadContext,
    *,
    ignored: Collection[str] = (),
    lists_as_tuples: bool = False,
) -> Any:
    """An instance of the dataclass `cls` from the file's field nodes `stored` (also for a ZANJ
    file's dataclasses). Stored fields the class lacks are mismatches (except `ignored` ones);
    `lists_as_tuples`: a list read for a field declared a tuple becomes a tuple (ZANJ writes tuples
    as lists)."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    _report_dropped({k: v for k, v in stored.items() if k not in ignored}, known, tag, cls, ctx)

    loaded: dict[str, Any] = {}
    for name, sub in stored.items():
        f = known.get(name)
        if f is not None and getattr(f, "serialize", True):
            loaded[name] = ctx.load(sub, name)
    values = {name: apply_field_loaders(value, known[name], loaded, ctx.path) for name, value in loaded.items()}
    hints = _type_hints(cls)
    if lists_as_tuples:
        for name, value in values.items():
            hint = hints.get(name)
            if isinstance(value, list) and not has_field_loader(known[name]) and _is_tuple_type(hint):
                values[name] = tuple(value)
    _report_type_drift(values, hints, tag, cls, ctx)

    _check_required([f.name for f in known.values() if f.init and f.name not in values and _required(f)], tag, cls, ctx)
    gained = [f for f in known.values() if f.init and f.name not in stored and getattr(f, "serialize", True)]
    _report_gained([(f.name, _default_text(f)) for f in gained], tag, cls, ctx)
    obj = _construct(cls, {n: v for n, v in values.items() if known[n].init}, ctx)
    for name, value in values.items():
        if not known[name].init:
            object.__setattr__(obj, name, value)  # works for frozen dataclasses too
    return obj


def _report_type_drift(values: dict[str, Any], hints: dict[str, Any], tag: Any, cls: type, ctx: LoadContext) -> None:
    """A recorded value that does not fit its field's annotation is a mismatch (warning, error or
    nothing per error_mode), naming the field, the value's type and the annotation. Fields whose
    muutils functions make their own representation are their own business."""
    checks = _field_checks(cls, hints)
    for name, check in checks.items():
        if name not in values:
            continue
        value = values[name]
        if check(value) or isinstance(value, GenericObject):
            continue  # (a GenericObject stands for a class this reader does not have: no news)
        ctx.path.append(name)
        try:
            ctx.mismatch(
                f"the archive's {str(tag)[:200]} has {name}={_short_repr(value)} ({type(value).__qualname__}), which "
                f"does not match the annotation {describe_hint(hints[name])} of {cls.__qualname__}.{name}; it is "
                "kept as read"
            )
        finally:
            ctx.path.pop()


_CHECKS: weakref.WeakKeyDictionary[type, dict[str, Check]] = weakref.WeakKeyDictionary()


def _field_checks(cls: type, hints: dict[str, Any]) -> dict[str, Check]:
    """{field: its annotation's check} for the fields worth checking, worked out once per class."""
    try:
        return _CHECKS[cls]
    except (KeyError, TypeError):
        pass
    checks: dict[str, Check] = {}
    for f in dataclasses.fields(cls):
        if f.name not in hints or has_field_loader(f) or getattr(f, "serialization_fn", None) is not None:
            continue
        check = check_for(hints[f.name])
        if check is not None:
            checks[f.name] = check
    try:
        _CHECKS[cls] = checks
    except TypeError:
        pass
    return checks


_HINTS: weakref.WeakKeyDictionary[type, dict[str, Any]] = weakref.WeakKeyDictionary()


def _type_hints(cls: type) -> dict[str, Any]:
    """The class's resolved field annotations, worked out once per class (get_type_hints evaluates
    string annotations: far too slow to repeat for every object of a long list)."""
    try:
        return _HINTS[cls]
    except (KeyError, TypeError):
        pass
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001  # unresolvable forward references: what the fields record
        hints = {f.name: f.type for f in dataclasses.fields(cls) if isinstance(f.type, type)}
    try:
        _HINTS[cls] = hints
    except TypeError:
        pass  # a class that cannot be weakly referenced: not cached
    return hints


def _is_tuple_type(hint: Any) -> bool:
    return hint is tuple or typing.get_origin(hint) is tuple


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _report_dropped(stored: dict[str, Any], known: Any, tag: Any, cls: type, ctx: LoadContext) -> None:
    for name in stored:
        if name not in known:
            ctx.mismatch(
                f"the archive's {str(tag)[:200]} has a field {str(name)[:100]!r} that {cls.__qualname__} "
                "does not have; it is dropped"
            )


def _default_text(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        return _short_repr(f.default)
    factory = f.default_factory
    return f"{getattr(factory, '__qualname__', None) or _short_repr(factory)}()"


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001  # a default whose repr fails: still say there is one
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def _report_gained(gained: list[tuple[str, str]], tag: Any, cls: type, ctx: LoadContext) -> None:
    """Fields the class has and the archive does not (the class gained them since the save): each
    takes its default, a mismatch (warning, error or nothing per error_mode) naming field and default."""
    for name, default in gained:
        ctx.mismatch(
            f"the archive's {str(tag)[:200]} has no field {name!r}, which {cls.__qualname__} has; "
            f"it takes its default {default}"
        )


def _check_required(missing: list[str], tag: Any, cls: type, ctx: LoadContext) -> None:
    if missing:
        raise FieldMismatchError(
            f"{cls.__qualname__} requires field(s) {', '.join(map(repr, missing))} that the archive's "
            f"{str(tag)[:200]} does not have (give them defaults to read old archives)",
            path=ctx.path_str,
        )


def has_field_loader(f: dataclasses.Field[Any]) -> bool:
    """Whether a (muutils) field has a deserialize_fn or loading_fn."""
    return getattr(f, "deserialize_fn", None) is not None or getattr(f, "loading_fn", None) is not None


def apply_field_loaders(value: Any, f: dataclasses.Field[Any], loaded: dict[str, Any], path: list[str]) -> Any:
    """A loaded field value after its muutils deserialize_fn / loading_fn (shared with the ZANJ reader)."""
    deserialize_fn = getattr(f, "deserialize_fn", None)
    loading_fn = getattr(f, "loading_fn", None)
    try:
        if deserialize_fn is not None:
            return deserialize_fn(value)
        if loading_fn is not None:
            return loading_fn(dict(loaded))
    except Exception as e:
        which = "deserialize_fn" if deserialize_fn is not None else "loading_fn"
        raise FieldMismatchError(
            f"{which} of field {f.name!r} failed on the archive's value: {type(e).__name__}: {e}",
            path=join_path([*path, f.name]),
        ) from e
    return value


def _construct(cls: type, kwargs: dict[str, Any], ctx: LoadContext) -> Any:
    try:
        return cls(**kwargs)
    except Exception as e:  # __init__/__post_init__ rejected the archive's values
        raise FieldMismatchError(
            f"{cls.__qualname__}(...) failed on the archive's fields: {type(e).__name__}: {e}", path=ctx.path_str
        ) from e


class NamedTupleHandler(NamedTupleSchema, Handler):
    """typing.NamedTuple and collections.namedtuple instances; they come back as their class."""

    name = "namedtuple"

    def accepts(self, cls: type) -> bool:
        return is_namedtuple_class(cls)

    def save(self, obj: Any, ctx: SaveContext) -> Node:
        fields = {name: ctx.save(value, name) for name, value in zip(type(obj)._fields, obj)}
        return {"$type": self.name, "class": recorded_tag(type(obj), ctx, "named tuple"), "fields": fields}

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        tag = node.get("class")
        cls = ctx.resolve_class(tag, "namedtuple")
        stored = expect(node, "fields", dict, ctx)
        if cls is None:  # unresolved="generic"
            return GenericObject(str(tag), {name: ctx.load(sub, name) for name, sub in stored.items()}, "namedtuple")
        known: tuple[str, ...] = cls._fields  # type: ignore[attr-defined]
        _report_dropped(stored, known, tag, cls, ctx)
        values = {name: ctx.load(sub, name) for name, sub in stored.items() if name in known}
        defaults = getattr(cls, "_field_defaults", {})
        _check_required([n for n in known if n not in values and n not in defaults], tag, cls, ctx)
        _report_gained([(n, _short_repr(defaults[n])) for n in known if n not in stored], tag, cls, ctx)
        return _construct(cls, values, ctx)


__all__ = [
    "DataclassHandler",
    "NamedTupleHandler",
    "build_dataclass",
    "is_dataclass_class",
    "is_namedtuple_class",
    "load_dataclass",
    "recorded_tag",
]
