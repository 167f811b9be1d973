"""The class-free neutral form (spec/neutral.md): what an archive reads to, described from the file
alone in plain JSON, so that any implementation in any language can compare its reading with
zarchive's. `zarchive neutral FILE` prints it.

    >>> form = zarchive.neutral.neutral_form_of("run.zarc")     # {"format": "zarchive-generic-1", "value": ...}
    >>> text = zarchive.neutral.canonical_json(form)            # sorted keys, ASCII, one-space indents
"""

from __future__ import annotations

from typing import Any

from .encode import FORM_NAME, canonical_json
from .form import neutral_form


def neutral_form_of(path: Any, **open_settings: Any) -> dict[str, Any]:
    """Open the archive at `path` and return its class-free neutral form. No class the file names is
    resolved or constructed: the file is read with `unresolved="generic"` and every class node is
    described from its fields."""
    from ..api import ZArchive

    arc: Any = ZArchive(**open_settings).open(path, unresolved="generic")
    with arc:
        return neutral_form(arc)


__all__ = ["FORM_NAME", "canonical_json", "neutral_form", "neutral_form_of"]
