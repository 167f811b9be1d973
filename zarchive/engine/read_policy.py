"""What a read may do, as the caller chose it: which classes and callables it may construct or call
(`trusted=`, and classes given by the caller), what it does with classes it cannot find
(`unresolved=`), what tensors come back as, and its limits (`max_nodes`, `max_read_bytes`). The
planner (engine.plan) checks a file against it before anything is built.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from .typeref import class_tag, code_tag

DEFAULT_MAX_NODES = 20_000_000
Unresolved = Literal["raise", "generic"]
TensorsAs = Literal["torch", "numpy"]


@dataclass(frozen=True)
class ReadPolicy:
    """What a read may construct, and how much it may read."""

    trusted: frozenset[str] | None = None  # class and callable tags; None: every resolvable class
    given: dict[str, type] = field(default_factory=dict)  # classes passed in trusted= or as the root's class
    unresolved: Unresolved = "raise"
    tensors: TensorsAs = "torch"
    max_nodes: int = DEFAULT_MAX_NODES
    max_read_bytes: int | None = None  # None: container.budget.default_read_budget(the file's size)

    @classmethod
    def make(
        cls,
        *,
        trusted: Iterable[type | str | Callable[..., Any]] | None = None,
        unresolved: str = "raise",
        tensors: str = "torch",
        max_nodes: int = DEFAULT_MAX_NODES,
        max_read_bytes: int | None = None,
    ) -> ReadPolicy:
        plain = type(unresolved) is str and type(tensors) is str and type(max_nodes) is int
        if trusted is None and plain and (max_read_bytes is None or type(max_read_bytes) is int):
            # (the common case, made once: opening a file for one tensor takes a few hundred microseconds)
            return _untrusted(unresolved, tensors, max_nodes, max_read_bytes)
        return cls._made(trusted, unresolved, tensors, max_nodes, max_read_bytes)

    @classmethod
    def _made(
        cls,
        trusted: Iterable[type | str | Callable[..., Any]] | None,
        unresolved: str,
        tensors: str,
        max_nodes: int,
        max_read_bytes: int | None,
    ) -> ReadPolicy:
        if unresolved not in ("raise", "generic"):
            raise ValueError(f"unresolved must be 'raise' or 'generic', not {unresolved!r}")
        if tensors not in ("torch", "numpy"):
            raise ValueError(f"tensors must be 'torch' or 'numpy', not {tensors!r}")
        for name, v in (("max_nodes", max_nodes), ("max_read_bytes", max_read_bytes)):
            if v is None and name == "max_read_bytes":
                continue
            if type(v) is not int or v <= 0:
                raise ValueError(f"{name} must be a positive int, not {v!r}")
        tags: set[str] | None = None
        given: dict[str, type] = {}
        if trusted is not None:
            if isinstance(trusted, (str, type)):
                trusted = [trusted]
            tags = set()
            for t in trusted:
                if isinstance(t, type):
                    tags.add(class_tag(t))
                    given[class_tag(t)] = t
                elif isinstance(t, str) and t.count(":") == 1:
                    tags.add(t)
                elif callable(t) and isinstance(getattr(getattr(t, "__func__", t), "__qualname__", None), str):
                    tags.add(code_tag(t))  # a function (a registered loader): trusted by its tag
                else:
                    raise TypeError(f"trusted= takes classes, functions and 'module:QualName' tags, not {t!r}")
        return cls(
            frozenset(tags) if tags is not None else None,
            given,
            unresolved,  # type: ignore[arg-type]
            tensors,  # type: ignore[arg-type]
            max_nodes,
            max_read_bytes,
        )

    def with_root_class(self, cls: type) -> ReadPolicy:
        """The same policy, reading `cls` (chosen by the caller) wherever the file names its tag."""
        return dataclasses.replace(self, given={**self.given, class_tag(cls): cls})


@functools.lru_cache(maxsize=64, typed=True)
def _untrusted(unresolved: str, tensors: str, max_nodes: int, max_read_bytes: int | None) -> ReadPolicy:
    """The policy without `trusted=` for these settings (immutable: shared by every read that asks)."""
    return ReadPolicy._made(None, unresolved, tensors, max_nodes, max_read_bytes)  # noqa: SLF001
