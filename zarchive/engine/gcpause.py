"""Pause Python's cyclic garbage collector around work that allocates many small objects.

Saving or reading thousands of tensors builds tens of thousands of small dicts, lists and tensor
objects; each allocation burst triggers collections that traverse everything alive and find nothing.
Pausing the collector for the duration is what json and pickle users commonly do for the same reason.
"""

from __future__ import annotations

import gc
from types import TracebackType


class gc_paused:  # (lower case: used as a function, `with gc_paused():`)
    """The collector paused for the `with` block (and left as it was found: a paused collector stays
    paused). A class rather than a generator-based context manager: it runs several times in a fetch
    of one tensor, whose whole cost is a fraction of a millisecond."""

    __slots__ = ("_was_enabled",)

    def __enter__(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._was_enabled:
            gc.enable()
