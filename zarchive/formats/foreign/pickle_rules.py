"""What a restricted pickle's names mean: the interface between the opcode reader
(foreign.restricted_pickle) and an allow-list (foreign.torch_pickle's for torch.save files).

A GLOBAL opcode yields a `Global`, a name and nothing more: nothing is imported or looked up. What a
REDUCE of it builds, what BUILD may set and what a persistent id stands for is the `Rules`' to decide,
refusing (RefusedPickleError) whatever it does not allow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Global", "Rules"]


@dataclass(frozen=True)
class Global:
    """A name a GLOBAL opcode pushed: nothing is imported; only the rules give it a meaning."""

    module: str
    name: str

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.name}"


class Rules(Protocol):
    """What the file's globals mean (the caller's allow-list)."""

    def global_value(self, g: Global) -> Any:
        """The value a GLOBAL stands for (a marker, or a plain value such as a dtype placeholder);
        RefusedPickleError for a name that is not allowed."""
        ...

    def reduce(self, func: Any, args: tuple[Any, ...]) -> Any:
        """What calling `func` (a value global_value gave) with `args` builds; RefusedPickleError if
        not allowed."""
        ...

    def build(self, obj: Any, state: Any) -> Any:
        """BUILD: set `state` on `obj`; RefusedPickleError if not allowed."""
        ...

    def persistent(self, pid: Any) -> Any:
        """What a persistent id (torch's storages) stands for."""
        ...
