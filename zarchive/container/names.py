"""Member-name rules, shared by the writer (never produce a bad name) and the reader (reject one).

A member name is a relative POSIX path of printable characters. The rules exist so that extracting an
archive can never write outside its destination on any platform, and so two names never collide on a
case-insensitive or Unicode-normalising file system.
"""

from __future__ import annotations

import re
import unicodedata

from ..errors import UnsafeArchiveError

MAX_NAME_BYTES = 4096
MAX_COMPONENT_CHARS = 200
_DRIVE = re.compile(r"^[A-Za-z]:")
_SAFE_CHAR = re.compile(r"[^A-Za-z0-9._\-]")


def name_problem(name: str) -> str | None:
    """Why `name` is not an acceptable member name, or None if it is."""
    if not name:
        return "empty member name"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"member name longer than {MAX_NAME_BYTES} bytes"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "member name contains a control character (NUL included)"
    if "\\" in name:
        return "member name contains a backslash"
    if name.startswith("/"):
        return "member name is an absolute path"
    if _DRIVE.match(name):
        return "member name starts with a drive letter"
    for part in name.split("/"):
        if part in ("", ".", ".."):
            return f"member name has a {part or 'empty'!r} path component"
    return None


def check_name(name: str, *, member: str | None = None) -> None:
    problem = name_problem(name)
    if problem:
        raise UnsafeArchiveError(problem, member=member if member is not None else repr(name))


def collision_key(name: str) -> str:
    """Two names with the same key would land on one file on some file system."""
    return unicodedata.normalize("NFC", name).casefold()


def sanitize_component(text: str) -> str:
    """A readable, portable file-name component derived from an object-path key."""
    s = _SAFE_CHAR.sub("_", text)[:MAX_COMPONENT_CHARS]
    if s in ("", ".", ".."):
        s = s.replace(".", "_") or "_"
    return s
