"""Object paths: how a value inside the saved object is named ('model/layers/0/weight').

Components are dict keys, list indices, field names; they are joined with '/'. A '~' or '/' inside a
component is escaped as '~0' or '~1' (as in JSON Pointer), so any string key has a unique path.
"""

from __future__ import annotations

from collections.abc import Iterable


def escape(component: str) -> str:
    if "~" not in component and "/" not in component:
        return component
    return component.replace("~", "~0").replace("/", "~1")


def unescape(component: str) -> str:
    return component.replace("~1", "/").replace("~0", "~")


def join_path(components: Iterable[str]) -> str:
    return "/".join([escape(c) for c in components])


def split_path(path: str) -> list[str]:
    path = path.strip("/")
    return [unescape(c) for c in path.split("/")] if path else []
