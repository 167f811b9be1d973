"""Subclasses of str that no handler takes (torch.__version__ is a TorchVersion) are saved as the
strings they are, by the mechanism of the handler chain (registry.VALUE_BASES); handlers that do
take a subclass (enums, custom handlers) still win."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import pytest
import torch

import zarchive
from zarchive.handlers.base import Handler


class Label(str):
    """A str subclass with a __str__ of its own: saved as the characters it holds, not as str(x)."""

    def __str__(self) -> str:
        return f"Label({super().__str__()})"


class Color(str, enum.Enum):
    RED = "red"


def test_torch_version_saved_as_str(tmp_path: Path) -> None:
    assert type(torch.__version__) is not str and isinstance(torch.__version__, str)
    value = {"torch": torch.__version__, "list": [torch.__version__], torch.__version__: 1}
    back = zarchive.read(zarchive.save(value, tmp_path / "v.zarc"))
    assert back == {"torch": str(torch.__version__), "list": [str(torch.__version__)], str(torch.__version__): 1}
    assert type(back["torch"]) is str and all(type(k) is str for k in back)
    zarchive.save({"torch": torch.__version__}, tmp_path / "plain.zarc")
    with zarchive.open(tmp_path / "plain.zarc") as arc:
        assert arc.manifest["root"] == {"torch": str(torch.__version__)}  # plain JSON, no type node


def test_own_str_subclass_keeps_its_characters(tmp_path: Path) -> None:
    back = zarchive.read(zarchive.save([Label("abc")], tmp_path / "l.zarc"))
    assert back == ["abc"] and type(back[0]) is str


def test_str_enum_is_still_an_enum(tmp_path: Path) -> None:
    back = zarchive.read(zarchive.save({"c": Color.RED}, tmp_path / "e.zarc"))
    assert back["c"] is Color.RED


class LabelHandler(Handler):
    name = "test.Label"

    def accepts(self, cls: type) -> bool:
        return cls is Label

    def save(self, obj: Any, ctx: Any) -> Any:
        return {"$type": self.name, "value": str.__str__(obj)}

    def load(self, node: dict[str, Any], ctx: Any) -> Any:
        return Label(node["value"])


def test_a_handler_for_the_subclass_wins(tmp_path: Path) -> None:
    za = zarchive.ZArchive(handlers_pre=[LabelHandler()])
    za.save({"x": Label("q")}, tmp_path / "h.zarc")
    back = za.read(tmp_path / "h.zarc")
    assert type(back["x"]) is Label and str.__str__(back["x"]) == "q"


def test_other_value_subclasses_still_refused(tmp_path: Path) -> None:
    class Meters(float):
        pass

    with pytest.raises(zarchive.SaveError, match="no handler"):
        zarchive.save(Meters(1.0), tmp_path / "m.zarc")
