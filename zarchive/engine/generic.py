"""GenericObject: what a class node becomes when its class cannot be resolved and the read asked
for `unresolved="generic"` (a model from a notebook's `__main__`, a renamed class, a reader without
the training code). It holds the recorded tag and the decoded fields; nothing of the class runs."""

from __future__ import annotations

from typing import Any


class GenericObject:
    """An object of an unavailable class: `.tag` ("module:QualName"), `.kind` ("dataclass",
    "namedtuple", "enum" or "ConfiguredModel") and `.fields` (name -> decoded value)."""

    __slots__ = ("fields", "kind", "tag")

    def __init__(self, tag: str, fields: dict[str, Any], kind: str = "dataclass") -> None:
        self.tag = tag
        self.kind = kind
        self.fields = fields

    def __getattr__(self, name: str) -> Any:
        if name in GenericObject.__slots__:  # not set yet (a copy being made)
            raise AttributeError(name)
        try:
            return self.fields[name]  # generic.config.n_layers reads like the real object
        except KeyError:
            raise AttributeError(f"{self.tag} (generic) has no field {name!r}") from None

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GenericObject):
            return NotImplemented
        return (self.tag, self.kind) == (other.tag, other.kind) and _fields_equal(self.fields, other.fields)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={_short(v)}" for k, v in list(self.fields.items())[:8])
        more = ", ..." if len(self.fields) > 8 else ""
        return f"GenericObject({self.tag!r}, {shown}{more})"


def _fields_equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for k, left in a.items():
        try:
            same = left == b[k]
            if not isinstance(same, bool):
                all_of = getattr(same, "all", None)  # arrays and tensors compare elementwise
                same = bool(all_of()) if callable(all_of) else bool(same)
        except Exception:  # noqa: BLE001 - values without a plain truth value (tensors of other shapes)
            return False
        if not same:
            return False
    return True


def _short(value: Any) -> str:
    text = repr(value) if not hasattr(value, "shape") else f"<{type(value).__name__} {tuple(value.shape)}>"
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["GenericObject"]
