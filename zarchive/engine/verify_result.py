"""What `zarchive.verify(path)` and `arc.verify()` return: the list of problems found, truthy when
the archive is intact.

    result = zarchive.verify("run.zarc")
    if result:                       # intact
        print(result)                # VerifyResult(OK: 3 members intact)
    else:
        for member, problem in result:
            print(member, problem)

It is a sequence of (member, problem) tuples, so code written when verify() returned a plain list
keeps working where it compares (`result == []`), iterates, indexes or counts (`len(result)`: the
number of problems) — but truth is the other way round from a plain list: an intact archive (no
problems) is truthy, a damaged one falsy (`.ok` says the same in words). `list(result)` is the plain
list (for json.dumps, for instance).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload


class VerifyResult(Sequence[tuple[str, str]]):
    """(member, problem) for each problem found; truthy when there is none.

    members: how many members the zip holds, as `unzip -l` and `zarchive ls` count them (the JSON
    members included); every one was checked. Not a list subclass on purpose: a list that is falsy
    when it has items would be written as `[]` by json.dumps(..., indent=...); `list(result)` (or
    `result.problems`) is the plain list."""

    __slots__ = ("_problems", "members")

    def __init__(self, problems: Iterable[tuple[str, str]] = (), *, members: int = 0) -> None:
        self._problems = [(str(m), str(p)) for m, p in problems]
        self.members = members

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self._problems

    @property
    def problems(self) -> list[tuple[str, str]]:
        """The problems as a plain list of (member, problem)."""
        return list(self._problems)

    @property
    def damaged_members(self) -> list[str]:
        """The members with a problem, each once, in the order found."""
        return list(dict.fromkeys(m for m, _ in self._problems))

    def __bool__(self) -> bool:
        return self.ok

    def __len__(self) -> int:
        return len(self._problems)

    @overload
    def __getitem__(self, index: int) -> tuple[str, str]: ...
    @overload
    def __getitem__(self, index: slice) -> list[tuple[str, str]]: ...
    def __getitem__(self, index: int | slice) -> tuple[str, str] | list[tuple[str, str]]:
        return self._problems[index]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._problems)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, VerifyResult):
            return self._problems == other._problems
        if isinstance(other, (list, tuple)):  # old callers: `zarchive.verify(p) == []`
            return self._problems == [tuple(x) if isinstance(x, (list, tuple)) else x for x in other]
        return NotImplemented

    __hash__: Any = None

    def __repr__(self) -> str:
        if self.ok:
            return f"VerifyResult(OK: {self.members} members intact)"
        shown = ", ".join(f"{m}: {p}" for m, p in self._problems[:3])
        more = f", ... (+{len(self) - 3} more)" if len(self) > 3 else ""
        return (
            f"VerifyResult(DAMAGED: {len(self)} problem(s) in {len(self.damaged_members)} of {self.members} "
            f"members: {shown}{more})"
        )

    __str__ = __repr__


__all__ = ["VerifyResult"]
