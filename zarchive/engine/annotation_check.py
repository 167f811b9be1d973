"""Whether a value read for a dataclass field fits the field's annotation, as far as can be told
cheaply and without false alarms.

Reading warns (per error_mode) when a recorded value does not match its field's annotation: the
class changed a field's type since the file was written (`n_layers: int` that is now
`n_layers: list[int]`), or the file was written by other code. Only what can be decided for certain
is decided: classes (with the numeric tower: an int fits `float`, numpy scalars fit `int` and
`float`), `Optional`/unions, `Literal`, `Annotated`, and the container kind of `list[...]`,
`dict[...]`, `tuple[...]`, `set[...]` together with their items. Anything else (type variables,
protocols, strings that do not resolve, generics of other classes) counts as a match.
"""

from __future__ import annotations

import collections.abc
import numbers
import types
import typing
from collections.abc import Callable
from typing import Any

_NUMERIC: dict[type, type] = {float: numbers.Real, int: numbers.Integral, complex: numbers.Complex}
MAX_ITEMS = 1000  # items of a container checked against its item type (the rest are assumed to fit)
MAX_DEPTH = 8

Check = Callable[[Any], bool]
_cache: dict[Any, Check | None] = {}  # checks by annotation, made once (annotations are few)
MAX_CACHED = 10_000


def fits(value: Any, hint: Any) -> bool:
    """False only when `value` certainly does not fit the annotation `hint`."""
    check = check_for(hint)
    return check is None or check(value)


def check_for(hint: Any, depth: int = 0) -> Check | None:
    """A function telling whether a value fits `hint` (None: anything fits), made once per hint."""
    try:
        return _cache[hint]
    except KeyError:
        pass
    except TypeError:  # an annotation that cannot be a dict key: not cached
        return _make(hint, depth)
    check = _make(hint, depth)
    if len(_cache) < MAX_CACHED:
        _cache[hint] = check
    return check


def _make(hint: Any, depth: int) -> Check | None:
    if depth > MAX_DEPTH or hint is Any or hint is object or isinstance(hint, (str, typing.TypeVar, typing.ForwardRef)):
        return None
    if hint is None or hint is type(None):
        return _is_none
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        arms = [check_for(a, depth + 1) for a in args]
        if any(a is None for a in arms):
            return None
        checks = [a for a in arms if a is not None]
        return lambda v: any(c(v) for c in checks)
    if origin is typing.Literal:
        return lambda v: any(v == a and type(v) is type(a) for a in args)
    if origin is typing.Annotated or origin is typing.ClassVar or origin is typing.Final:
        return check_for(args[0], depth + 1) if args else None
    if origin is not None:
        return _make_generic(origin, args, depth)
    if not isinstance(hint, type):
        return None
    if hint is bool:
        return _is_bool
    if hint is int:
        return _is_int
    if hint is float:
        return _is_real
    if hint in _NUMERIC:
        kind = _NUMERIC[hint]
        return lambda v: isinstance(v, kind)
    if typing.is_typeddict(hint) or getattr(hint, "_is_protocol", False):
        return None
    return lambda v: type(v) is hint or isinstance(v, hint)


def _is_none(v: Any) -> bool:
    return v is None


def _is_bool(v: Any) -> bool:
    t = type(v)  # numpy's bool scalar too (numpy is not imported for it)
    return t is bool or (t.__module__ == "numpy" and t.__name__ in ("bool", "bool_"))


def _is_int(v: Any) -> bool:
    return type(v) is int or isinstance(v, numbers.Integral)


def _is_real(v: Any) -> bool:
    t = type(v)
    return t is float or t is int or isinstance(v, numbers.Real)


def _make_generic(origin: Any, args: tuple[Any, ...], depth: int) -> Check | None:
    if not isinstance(origin, type):
        return None
    if origin is collections.abc.Callable:
        return callable
    if not args:
        return lambda v: isinstance(v, origin)
    items: Check | None
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        items = check_for(args[0], depth + 1)
        return lambda v: isinstance(v, tuple) and (items is None or all(items(x) for x in v[:MAX_ITEMS]))
    if origin is tuple:
        if args == ((),):
            return lambda v: isinstance(v, tuple) and len(v) == 0
        each = [check_for(a, depth + 1) for a in args]
        return lambda v: (
            isinstance(v, tuple) and len(v) == len(each) and all(c is None or c(x) for c, x in zip(each, v))
        )
    if issubclass(origin, collections.abc.Mapping) and len(args) == 2:
        keys, values = check_for(args[0], depth + 1), check_for(args[1], depth + 1)

        def mapping(v: Any) -> bool:
            if not isinstance(v, origin):
                return False
            pairs = list(v.items())[:MAX_ITEMS]
            return all((keys is None or keys(k)) and (values is None or values(x)) for k, x in pairs)

        return mapping
    if issubclass(origin, (collections.abc.Sequence, collections.abc.Set)) and len(args) == 1:
        items = check_for(args[0], depth + 1)
        if items is None:
            return lambda v: isinstance(v, origin)
        return lambda v: isinstance(v, origin) and all(items(x) for x in list(v)[:MAX_ITEMS])
    return lambda v: isinstance(v, origin)


def describe_hint(hint: Any) -> str:
    """An annotation as it is written in code (`list[int]`, `int | None`)."""
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__qualname__
    return str(hint).replace("typing.", "")


__all__ = ["describe_hint", "fits"]
