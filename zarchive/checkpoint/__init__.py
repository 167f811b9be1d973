"""Training checkpoints: `save_checkpoint`, `save_checkpoint_async` and `load_checkpoint` (state), and
every random generator's state (rng)."""

from __future__ import annotations

from .state import load_checkpoint, save_checkpoint, save_checkpoint_async

__all__ = ["load_checkpoint", "save_checkpoint", "save_checkpoint_async"]
