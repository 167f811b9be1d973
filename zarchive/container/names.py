"""Member-name rules, shared by the writer (never produce a bad name) and the reader (reject one).

A member name is a relative POSIX path of printable characters. The rules exist so that extracting an
archive can never write outside its destination on any platform, and so two names never collide on a
case-insensitive or Unicode-normalising file system.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

from ..errors import UnsafeArchiveError

MAX_NAME_BYTES = 4096
MAX_COMPONENT_CHARS = 200
_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PORTABLE = re.compile(r"[A-Za-z0-9._~/\-]+")
_SAFE_CHAR = re.compile(r"[^A-Za-z0-9._\-]")
_WINDOWS_DEVICE = re.compile(r"^(con|prn|aux|nul|com[0-9]|lpt[0-9])(\.|$)", re.IGNORECASE)
MAX_STEM_BYTES = 1024  # leaves room for '~n' and the extensions under MAX_NAME_BYTES


def name_problem(name: str) -> str | None:
    """Why `name` is not an acceptable member name, or None if it is."""
    if (  # fast path for names like the writer's: portable characters, no component starts with '.'
        len(name) <= MAX_NAME_BYTES
        and _PORTABLE.fullmatch(name)
        and name[0] not in "./"
        and name[-1] != "/"
        and "/." not in name
        and "//" not in name
    ):
        return None
    if not name:
        return "empty member name"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"member name longer than {MAX_NAME_BYTES} bytes"
    if _CONTROL.search(name):
        return "member name contains a control character (NUL included)"
    if "\\" in name:
        return "member name contains a backslash"
    if name.startswith("/"):
        return "member name is an absolute path"
    if _DRIVE.match(name):
        return "member name starts with a drive letter"
    if ":" in name:  # 'a/C:/x' re-roots a Windows path join; 'x:y' is an NTFS alternate stream
        return "member name contains a colon"
    for part in name.split("/"):
        if part in ("", ".", ".."):
            return f"member name has a {part or 'empty'!r} path component"
    return None


def check_name(name: str, *, member: str | None = None) -> None:
    problem = name_problem(name)
    if problem:
        shown = name if len(name) <= 300 else name[:300] + "..."  # the error's message repr()s it
        raise UnsafeArchiveError(problem, member=member if member is not None else shown)


def collision_key(name: str) -> str:
    """Two names with the same key would land on one file on some file system."""
    if name.isascii():  # the common case, 10x faster: NFC changes no ASCII, casefold() is lower() there
        return name.lower()
    return unicodedata.normalize("NFC", name).casefold()


def sanitize_component(text: str) -> str:
    """A readable, portable file-name component derived from an object-path key."""
    s = _SAFE_CHAR.sub("_", text)[:MAX_COMPONENT_CHARS]
    if s in ("", ".", ".."):
        s = s.replace(".", "_") or "_"
    if s.endswith(".") or _WINDOWS_DEVICE.match(s):  # Windows drops trailing dots; CON, NUL... are devices
        s += "_"
    return s


def fit_stem(stem: str) -> str:
    """`stem` (sanitized components joined by '/'), shortened when too long for a member name: deep
    object paths keep their last component, prefixed by a digest of the whole path."""
    if len(stem.encode("utf-8")) <= MAX_STEM_BYTES:
        return stem
    digest = hashlib.sha256(stem.encode("utf-8")).hexdigest()[:16]
    return f"long/{digest}-{stem.rsplit('/', 1)[-1][:MAX_COMPONENT_CHARS]}"
