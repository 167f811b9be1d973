"""Every use of another package's private internals, kept in one module per package.

The rule
--------
zarchive reaches into a few private names of other packages (names starting with "_" in torch,
pandas, Lightning, fsspec, and CPython's undocumented C accelerators) where the public API is much
slower or cannot do the job. Every such use lives here, in `zarchive/_compat/<package>.py`, and no
module outside this folder touches another package's private attributes.

- Each internal is guarded by a `Probe`: a check run once, at its first use, whose result is cached.
  A probe checks the shape it relies on (the attribute exists, has the expected type, and behaves as
  expected on a small throwaway object), not just a version number.
- Failing CLOSED: when an internal is missing or has changed shape, the compat function says so (it
  returns None or False, or gives the public equivalent) and the caller takes the slow, safe public
  path. A probe never guesses "probably fine": an exception inside a check counts as a failure.
- This `__init__` imports no third-party package. Each per-package module imports its own package,
  and is imported only by code that already needs that package.
- Tests force a probe to fail with `disable_for_test(name)`, a documented hook that makes the probe
  report "unavailable" for the duration of a `with` block; `probe_names()` lists the probes of the
  compat modules imported so far.

What does not count
-------------------
- A torch state dict's `_metadata` attribute (per-module versions, read by `load_state_dict`) is data
  that torch stores on a plain `OrderedDict` it hands to the user; saving and restoring it is keeping
  the user's object as it was, not reaching into torch's code. It stays in handlers/builtins.py and
  checkpoint.py, which check it is a dict before using it.
- The documented underscore API of namedtuples (`_fields`, `_make`, `_field_defaults`).
- `json.encoder.encode_basestring` / `encode_basestring_ascii`: public names that every CPython has
  (json falls back to its pure-Python versions itself), with a fixed `str -> str` signature. The C
  encoder factory `json.encoder.c_make_encoder` (CPython's private `_json.make_encoder`, None on
  some builds, nine positional arguments) does count: see cpython.py.
- zarchive's own underscore names used across its modules.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_PROBES: dict[str, Probe[Any]] = {}
_LOCK = threading.RLock()  # re-entrant: a check may use another probe


class Probe(Generic[T]):
    """A check of one private internal, run at the first `get()` and cached.

    `check` returns what callers need (the internal itself, or True), or None when the internal is
    missing or not as expected; an exception raised by `check` also means None."""

    __slots__ = ("_check", "_disabled", "_done", "_value", "name")

    def __init__(self, name: str, check: Callable[[], T | None]) -> None:
        if name in _PROBES:
            raise ValueError(f"a compat probe named {name!r} exists already")
        self.name = name
        self._check = check
        self._value: T | None = None
        self._done = False
        self._disabled = 0
        _PROBES[name] = self

    def get(self) -> T | None:
        """The probed internal, or None when it is unavailable (or disabled for a test)."""
        if self._disabled:
            return None
        if not self._done:
            with _LOCK:
                if not self._done:
                    try:
                        value = self._check()
                    except Exception:  # noqa: BLE001 - any surprise means "not as expected"
                        value = None
                    self._value = value
                    self._done = True
        return self._value

    def __repr__(self) -> str:
        state = "disabled" if self._disabled else ("unprobed" if not self._done else repr(self._value))
        return f"Probe({self.name!r}: {state})"


def probe_names() -> list[str]:
    """The probes registered by the compat modules imported so far."""
    return sorted(_PROBES)


def get_probe(name: str) -> Probe[Any]:
    try:
        return _PROBES[name]
    except KeyError:
        raise KeyError(f"no compat probe {name!r} (known: {', '.join(probe_names())})") from None


@contextmanager
def disable_for_test(*names: str) -> Iterator[None]:
    """Test hook: inside the block, the named probes report their internal as unavailable, so the
    code under test takes its public path. Import the compat module first (it registers its probes)."""
    probes = [get_probe(name) for name in names]
    for p in probes:
        p._disabled += 1
    try:
        yield
    finally:
        for p in probes:
            p._disabled -= 1


__all__ = ["Probe", "disable_for_test", "get_probe", "probe_names"]
