"""The CheckpointIO plugins (see zarchive.lightning): every checkpoint Lightning writes saved as a
zarchive, atomically, to a path or an fsspec URL; ZArchiveCheckpointIO saves in the caller's time,
AsyncZArchiveCheckpointIO through ZArchive.save_async, in the background.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from typing import Any

from ..api import ZArchive
from ..container.remote import exists, remove
from ..saving.background import path_key, wait_for
from .checkpoint_data import from_saved, to_saveable

try:
    from lightning.pytorch.plugins.io import CheckpointIO as _CheckpointIO
except ImportError:
    try:
        from pytorch_lightning.plugins.io import CheckpointIO as _CheckpointIO  # type: ignore[no-redef,assignment]
    except ImportError:
        raise ImportError(
            "zarchive.lightning needs PyTorch Lightning: pip install lightning (the 'lightning' extra)"
        ) from None

_OTHER_BASES = ("lightning.pytorch.plugins.io", "pytorch_lightning.plugins.io")


class ZArchiveCheckpointIO(_CheckpointIO):
    """Saves and loads Lightning checkpoints as zarchives.

    za: the ZArchive to use; or pass ZArchive settings (compress=..., durable=...) as keywords.
    storage_options: fsspec options for URL paths when Lightning passes none.
    """

    def __init__(
        self, za: ZArchive | None = None, *, storage_options: Mapping[str, Any] | None = None, **settings: Any
    ) -> None:
        if za is not None and settings:
            raise TypeError("pass either za=ZArchive(...) or ZArchive settings, not both")
        self.za = za if za is not None else ZArchive(**settings)
        self.storage_options = dict(storage_options) if storage_options else None
        _register_with_loaded_lightning()

    def __repr__(self) -> str:
        return f"ZArchiveCheckpointIO({self.za!r})"

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        """Write `checkpoint` to `path` atomically (see zarchive.container.remote for URLs)."""
        saveable = to_saveable(checkpoint, self.za)
        self.za.save(saveable, _fspath(path), storage_options=storage_options or self.storage_options)

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Read a checkpoint. map_location: as zarchive.read (None = CPU); a torch.load-style callable
        is taken as CPU (Lightning moves states to their devices itself). weights_only is moot: a
        zarchive never runs code."""
        p = _fspath(path)
        if not exists(p, self.storage_options):
            raise FileNotFoundError(f"Checkpoint file not found: {p}")
        location = None if callable(map_location) else map_location
        return from_saved(self.za.read(p, map_location=location, storage_options=self.storage_options))

    def remove_checkpoint(self, path: Any) -> None:
        remove(_fspath(path), self.storage_options)


class AsyncZArchiveCheckpointIO(ZArchiveCheckpointIO):
    """ZArchiveCheckpointIO whose saves return as soon as the checkpoint is copied to host memory
    (ZArchive.save_async: one reused staging buffer, no second copy of the weights on the GPU); the
    archive is written in the background. A background save that failed is raised by the next
    save_checkpoint, or when Lightning tears the plugin down (end of fit), which waits for every save.
    Removing or loading a checkpoint whose save is in flight waits for that save first.

        trainer = Trainer(plugins=[AsyncZArchiveCheckpointIO()])
    """

    def __init__(
        self, za: ZArchive | None = None, *, storage_options: Mapping[str, Any] | None = None, **settings: Any
    ) -> None:
        super().__init__(za, storage_options=storage_options, **settings)
        self._pending: list[Future[str]] = []

    def __repr__(self) -> str:
        return f"AsyncZArchiveCheckpointIO({self.za!r})"

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        """Capture `checkpoint` and write it to `path` in the background (atomically)."""
        self._raise_failed(wait=False)
        options = storage_options or self.storage_options
        self._pending.append(
            self.za.save_async(to_saveable(checkpoint, self.za), _fspath(path), storage_options=options)
        )

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        wait_for(path_key(_fspath(path)))
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path: Any) -> None:
        wait_for(path_key(_fspath(path)))  # else the save would land after the removal
        super().remove_checkpoint(path)

    def teardown(self) -> None:
        """Wait for every save in flight; raise the first that failed."""
        self._raise_failed(wait=True)

    def _raise_failed(self, *, wait: bool) -> None:
        if wait:
            futures_wait(self._pending)
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        for f in done:
            error = f.exception()
            if error is not None:
                raise error


def _fspath(path: Any) -> Any:
    return path if isinstance(path, str) else os.fspath(path)


def _register_with_loaded_lightning() -> None:
    """Make the plugin acceptable to whichever Lightning namespace is loaded (`lightning.pytorch` and
    `pytorch_lightning` each define their own CheckpointIO ABC)."""
    for name in _OTHER_BASES:
        mod = sys.modules.get(name)
        base = getattr(mod, "CheckpointIO", None) if mod is not None else None
        if base is not None and base is not _CheckpointIO and not issubclass(ZArchiveCheckpointIO, base):
            base.register(ZArchiveCheckpointIO)
