"""CPython internals: json's C encoder factory, `json.encoder.c_make_encoder`, and
`threading._register_atexit`.

That name is CPython's private `_json.make_encoder` as the json package imports it: None on builds
without the accelerator, and called with nine positional arguments whose order is json's own
business. `json.JSONEncoder.encode` builds one per call, which is most of the cost of encoding many
small values one by one; built once, the same C code does the work without that cost.

Probe (see the package docstring for the rule), "cpython.json_c_encoder": the factory exists and
the encoder it makes writes what `json.dumps(ensure_ascii=False, allow_nan=False,
separators=(", ", ": "))` writes, refuses NaN, hands unknown objects to its `default` and catches
cycles. Fallback: None, and the caller uses a public `json.JSONEncoder` with those settings.

`threading._register_atexit(fn)` runs `fn` when the main thread ends, before thread pools stop
taking work (concurrent.futures registers its own shutdown the same way, earlier, and these run in
reverse order). `atexit` callbacks run only after the pools have shut down, too late for a
background save that still has to start its checksum and compression threads. Probe,
"cpython.register_atexit": the name is callable. Fallback: `atexit.register`, and the caller says
that an exit may then cut a background save short.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from . import Probe

_SETTINGS: dict[str, Any] = {"ensure_ascii": False, "allow_nan": False, "separators": (", ", ": ")}


def _not_json(o: Any) -> Any:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


@dataclass(frozen=True)
class CJsonEncoder:
    """json's C encoder, made once, writing one-line JSON as json.dumps does with `_SETTINGS`.

    The ids of the containers being encoded (for cycle checks) are kept in one dict shared by every
    call; an encode that fails midway leaves entries in it, so call `reset()` after a failure."""

    one: Callable[[Any], str]
    many: Callable[[list[Any]], list[str]]  # `one` of each value, with no Python frame per value
    reset: Callable[[], None]
    markers: dict[int, Any]


def _make() -> CJsonEncoder | None:
    factory = getattr(json.encoder, "c_make_encoder", None)
    if factory is None:
        return None
    markers: dict[int, Any] = {}
    encode = factory(markers, _not_json, json.encoder.encode_basestring, None, ": ", ", ", False, False, False)
    join = "".join

    def one(value: Any) -> str:
        return join(encode(value, 0))

    def many(values: list[Any]) -> list[str]:
        return list(map(join, map(encode, values, repeat(0))))

    return CJsonEncoder(one, many, markers.clear, markers)


def _fails_with(enc: CJsonEncoder, value: Any, error: type[Exception]) -> bool:
    try:
        enc.one(value)
    except error:
        enc.reset()
        return True
    except Exception:  # noqa: BLE001 - another error than the public encoder's
        return False
    return False


def _check_c_encoder() -> CJsonEncoder | None:
    enc = _make()
    if enc is None:
        return None
    sample: Any = {"a": [1, -2.5, 'x\u00e9\n"', None, True, False], "b": {"c": [], 5: 1e300}, "d": 10**20}
    if enc.one(sample) != json.dumps(sample, **_SETTINGS) or enc.many([sample, "s"]) != [enc.one(sample), '"s"']:
        return None
    cycle: list[Any] = []
    cycle.append(cycle)
    if not (
        _fails_with(enc, float("nan"), ValueError)
        and _fails_with(enc, [object()], TypeError)
        and _fails_with(enc, cycle, ValueError)
    ):
        return None
    return enc if not enc.markers else None


_C_ENCODER = Probe("cpython.json_c_encoder", _check_c_encoder)


def json_c_encoder() -> CJsonEncoder | None:
    """The C encoder (one per process), or None when this Python has none or it is not as expected."""
    return _C_ENCODER.get()


def _check_register_atexit() -> Callable[[Callable[[], None]], None] | None:
    import threading

    fn = getattr(threading, "_register_atexit", None)
    return fn if callable(fn) else None


_REGISTER_ATEXIT = Probe("cpython.register_atexit", _check_register_atexit)


def call_before_threads_stop(fn: Callable[[], None]) -> bool:
    """Run `fn` at interpreter exit while thread pools still take work; False when this Python offers
    no such hook and `fn` was registered with `atexit` instead (it then runs after they stopped)."""
    register = _REGISTER_ATEXIT.get()
    if register is not None:
        try:
            register(fn)
            return True
        except RuntimeError:  # the interpreter is already shutting down
            return False
    import atexit

    atexit.register(fn)
    return False


__all__ = ["CJsonEncoder", "call_before_threads_stop", "json_c_encoder"]
