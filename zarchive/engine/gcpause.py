"""Pause Python's cyclic garbage collector around work that allocates many small objects.

Saving or reading thousands of tensors builds tens of thousands of small dicts, lists and tensor
objects; each allocation burst triggers collections that traverse everything alive and find nothing.
Pausing the collector for the duration is what json and pickle users commonly do for the same reason.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
