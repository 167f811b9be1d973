"""Semantic versions (https://semver.org, 2.0.0): parsing, validating and ordering version strings
such as `1.4.0`, `2.0.0-rc.1` or `1.0.0+build.7`, for the model store.

Order is semver precedence: major, minor and patch numerically; a pre-release sorts before its
release; pre-release identifiers compare one by one, numeric ones as numbers and below
alphanumeric ones, a longer list after its prefix. Build metadata (`+...`) does not change the
precedence; versions that differ only in it are ordered by their text, so the order is total.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

MAX_LENGTH = 200  # a version is a file name in the store: keep it short
_NUMERIC = r"(?:0|[1-9][0-9]*)"
_IDENT = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_PATTERN = re.compile(
    rf"^(?P<major>{_NUMERIC})\.(?P<minor>{_NUMERIC})\.(?P<patch>{_NUMERIC})"
    rf"(?:-(?P<pre>{_IDENT}(?:\.{_IDENT})*))?"
    r"(?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$",
    re.ASCII,
)


@total_ordering
@dataclass(frozen=True, eq=False)
class Version:
    """A parsed semantic version; compares by precedence (then by text, see the module docstring)."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: object) -> Version:
        """The version `text` names; ValueError (saying what a version looks like) when it names none."""
        if not isinstance(text, str):
            raise TypeError(f"a version is a string such as '1.2.0', not {type(text).__name__}")
        match = _PATTERN.match(text) if len(text) <= MAX_LENGTH else None
        if match is None:
            raise ValueError(
                f"{text[:MAX_LENGTH]!r} is not a semantic version: MAJOR.MINOR.PATCH with numbers without "
                "leading zeros, optionally followed by -PRERELEASE and +BUILD (e.g. '1.2.0', '2.0.0-rc.1')"
            )
        pre, build = match["pre"], match["build"]
        return cls(
            int(match["major"]),
            int(match["minor"]),
            int(match["patch"]),
            tuple(pre.split(".")) if pre else (),
            tuple(build.split(".")) if build else (),
        )

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def _key(self) -> tuple[object, ...]:
        # a release (no pre-release) sorts after every pre-release of it
        pre: tuple[object, ...] = (
            (1,)
            if not self.prerelease
            else (0, *((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.prerelease))
        )
        return (self.major, self.minor, self.patch, pre, str(self))

    def precedence(self) -> tuple[object, ...]:
        """What semver orders by (build metadata left out)."""
        return self._key()[:4]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()


def parse(text: object) -> Version:
    """`Version.parse(text)`."""
    return Version.parse(text)


def is_version(text: str) -> bool:
    try:
        Version.parse(text)
    except ValueError:
        return False
    return True


__all__ = ["Version", "is_version", "parse"]
