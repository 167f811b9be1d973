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
from typing import Any

_NUMERIC: dict[type, type] = {float: numbers.Real, int: numbers.Integral, complex: numbers.Complex}
MAX_ITEMS = 1000  # items of a container checked against its item type (the rest are assumed to fit)


def fits(value: Any, hint: Any, depth: int = 0) -> bool:
    """False only when `value` certainly does not fit the annotation `hint`."""
    if depth > 8 or hint is Any or hint is object or isinstance(hint, (str, typing.TypeVar, typing.ForwardRef)):
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(fits(value, a, depth + 1) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin is typing.Annotated:
        return fits(value, args[0], depth + 1)
    if origin is typing.ClassVar or origin is typing.Final:
        return fits(value, args[0], depth + 1) if args else True
    if origin is not None:
        return _fits_generic(value, origin, args, depth)
    if isinstance(hint, type):
        if hint is bool:
            t = type(value)  # numpy's bool scalar too (numpy is not imported for it)
            return isinstance(value, bool) or (t.__module__ == "numpy" and t.__name__ in ("bool", "bool_"))
        if hint in _NUMERIC:
            return isinstance(value, _NUMERIC[hint]) and (hint is not int or not _is_float(value))
        if typing.is_typeddict(hint) or _is_protocol(hint):
            return True
        return isinstance(value, hint)
    return True


def _is_float(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral)


def _is_protocol(hint: type) -> bool:
    return bool(getattr(hint, "_is_protocol", False))


def _fits_generic(value: Any, origin: Any, args: tuple[Any, ...], depth: int) -> bool:
    if not isinstance(origin, type):
        return True
    if not isinstance(value, origin):
        return origin is collections.abc.Callable and callable(value)
    if not isinstance(value, collections.abc.Collection):
        return True
    if not args:
        return True
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return all(fits(v, args[0], depth + 1) for v in list(value)[:MAX_ITEMS])
        if args == ((),):
            return len(value) == 0
        return len(value) == len(args) and all(fits(v, a, depth + 1) for v, a in zip(value, args))
    if isinstance(value, collections.abc.Mapping) and len(args) == 2:
        items = list(value.items())[:MAX_ITEMS]
        return all(fits(k, args[0], depth + 1) and fits(v, args[1], depth + 1) for k, v in items)
    if issubclass(origin, (list, set, frozenset, collections.abc.Sequence, collections.abc.Set)) and len(args) == 1:
        return all(fits(v, args[0], depth + 1) for v in list(value)[:MAX_ITEMS])
    return True


def describe_hint(hint: Any) -> str:
    """An annotation as it is written in code (`list[int]`, `int | None`)."""
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__qualname__
    return str(hint).replace("typing.", "")


__all__ = ["describe_hint", "fits"]
