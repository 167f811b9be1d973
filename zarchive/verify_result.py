"""What `zarchive.verify(path)` and `arc.verify()` return: the list of problems found, truthy when
the archive is intact.

    result = zarchive.verify("run.zarc")
    if result:                       # intact
        print(result)                # VerifyResult(OK: 3 members intact)
    else:
        for member, problem in result:
            print(member, problem)

It is a list of (member, problem) tuples, so code written when verify() returned a plain list keeps
working where it compares (`result == []`), iterates, indexes or counts (`len(result)`: the number of
problems) — but truth is the other way round from a plain list: an intact archive (no problems) is
truthy, a damaged one falsy. `.ok` says the same in words.
"""

from __future__ import annotations

from collections.abc import Iterable


class VerifyResult(list[tuple[str, str]]):
    """(member, problem) for each problem found; truthy when there is none.

    members: how many members the zip holds, as `unzip -l` and `zarchive ls` count them (the JSON
    members included); every one was checked."""

    def __init__(self, problems: Iterable[tuple[str, str]] = (), *, members: int = 0) -> None:
        super().__init__((str(m), str(p)) for m, p in problems)
        self.members = members

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return len(self) == 0

    @property
    def damaged_members(self) -> list[str]:
        """The members with a problem, each once, in the order found."""
        return list(dict.fromkeys(m for m, _ in self))

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        if self.ok:
            return f"VerifyResult(OK: {self.members} members intact)"
        shown = ", ".join(f"{m}: {p}" for m, p in self[:3])
        more = f", ... (+{len(self) - 3} more)" if len(self) > 3 else ""
        return (
            f"VerifyResult(DAMAGED: {len(self)} problem(s) in {len(self.damaged_members)} of {self.members} "
            f"members: {shown}{more})"
        )

    __str__ = __repr__


__all__ = ["VerifyResult"]
