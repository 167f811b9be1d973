"""The README's custom-handler recipe works: per-instance handlers, global registration, safety rules."""

from __future__ import annotations

import fractions
from pathlib import Path
from typing import Any

import pytest

import zarchive


class FractionHandler(zarchive.Handler):
    name = "myproject.Fraction"

    def accepts(self, cls: type) -> bool:
        return cls is fractions.Fraction

    def save(self, obj: Any, ctx: Any) -> Any:
        return {"$type": self.name, "text": str(obj)}

    def load(self, node: dict[str, Any], ctx: Any) -> Any:
        return fractions.Fraction(node["text"])


def test_handlers_pre_round_trip(tmp_path: Path) -> None:
    za = zarchive.ZArchive(handlers_pre=(FractionHandler(),))
    obj = {"ratio": fractions.Fraction(3, 7), "nested": [fractions.Fraction(-1, 2)]}
    path = za.save(obj, tmp_path / "f.zarc")
    assert za.read(path) == obj
    with pytest.raises(zarchive.SaveError, match="Fraction"):  # without the handler: a clear error
        zarchive.save(obj, tmp_path / "g.zarc")
    with pytest.raises(zarchive.UnknownTypeError, match="myproject.Fraction"):  # and reading needs it too
        zarchive.read(path)


def test_register_handler_applies_to_new_instances_and_can_be_removed(tmp_path: Path) -> None:
    zarchive.register_handler(FractionHandler())
    try:
        with pytest.raises(ValueError, match="already registered"):
            zarchive.register_handler(FractionHandler())
        path = zarchive.save(fractions.Fraction(5, 3), tmp_path / "f.zarc")
        assert zarchive.read(path) == fractions.Fraction(5, 3)
    finally:
        zarchive.unregister_handler("myproject.Fraction")
    with pytest.raises(zarchive.SaveError):
        zarchive.save(fractions.Fraction(5, 3), tmp_path / "g.zarc")


def test_builtin_names_are_protected() -> None:
    class Impostor(FractionHandler):
        name = "numpy.ndarray"

    with pytest.raises(ValueError, match="built-in"):
        zarchive.register_handler(Impostor())
