"""Every part of a JSON document (the neutral forms' tests look through them all)."""

from __future__ import annotations

from typing import Any


def parts(doc: Any) -> list[Any]:
    """`doc` and everything inside it, depth first: every object, array and scalar."""
    out = [doc]
    if isinstance(doc, dict):
        for v in doc.values():
            out += parts(v)
    elif isinstance(doc, list):
        for v in doc:
            out += parts(v)
    return out
