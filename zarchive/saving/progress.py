"""Progress bars for long saves and reads (tqdm, optional).

`ZArchive(progress=None)` (the default) shows a bar only when it is worth one and someone can see it:
at least `PROGRESS_THRESHOLD` bytes of member data, stderr is a terminal, and tqdm is installed.
`progress=True` always shows one (on stderr, and needs tqdm); `progress=False` never does. The bar
counts uncompressed member bytes and advances once per member written or value read.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

PROGRESS_THRESHOLD = 64 << 20
INSTALL_HINT = "pip install tqdm  (the 'progress' extra: pip install '.[progress]' in a zarchive checkout)"


def check_setting(value: Any) -> bool | None:
    """Validate a `progress=` setting once, when the ZArchive is made."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"progress must be None (automatic), True or False, not {value!r}")
    if value is True and not tqdm_available():
        raise ImportError(f"progress=True needs tqdm: {INSTALL_HINT}")
    return value


def tqdm_available() -> bool:
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


def might_show(setting: bool | None) -> bool:
    """Cheap first check, so that no totals are computed when no bar can be shown."""
    if setting is None:
        return _stderr_is_terminal() and tqdm_available()
    return setting


class Bar:
    """A byte-counting tqdm bar on stderr."""

    def __init__(self, total: int, desc: str) -> None:
        from tqdm.auto import tqdm

        self._bar = tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr)

    def advance(self, name: str, nbytes: int) -> None:
        """A member (or a value's range of one) is done: `nbytes` more bytes."""
        self._bar.update(nbytes)

    def close(self) -> None:
        self._bar.close()


def _start(setting: bool | None, total: int, desc: str) -> Bar | None:
    if setting is None and total < PROGRESS_THRESHOLD:
        return None
    return Bar(total, desc)


def _label(target: Any) -> str:
    if isinstance(target, (str, os.PathLike)):
        return os.path.basename(os.fspath(target).rstrip("/")) or str(target)
    return type(target).__name__


def for_save(setting: bool | None, members: Iterable[Any], target: Any) -> Bar | None:
    """A bar for writing these planned members, or None."""
    if not might_show(setting):
        return None
    total = sum(memoryview(buf).nbytes for m in members for _, buf in m.parts())
    return _start(setting, total, f"saving {_label(target)}")


def for_read(setting: bool | None, arc: Any, target: Any) -> Bar | None:
    """A bar for loading all of an opened archive, hooked to its reader, or None. The total is every
    member the metadata lists but the manifest (read when it was opened)."""
    if not might_show(setting):
        return None
    table = arc.members
    if not isinstance(table, Mapping):
        return None
    from ..container.archive_writer import MANIFEST_NAME

    total = sum(int(e.get("size", 0)) for name, e in table.items() if name != MANIFEST_NAME and isinstance(e, Mapping))
    bar = _start(setting, total, f"reading {_label(target)}")
    if bar is not None:
        arc.on_read = bar.advance  # every opened archive (zarchive or ZANJ) calls it per member read
    return bar
