"""spec/models.md section 2: the ConfiguredModel contract, as written and as read.

What the node records (fields, order, optional fields only when needed), what a writer refuses, how a
reader finds the classes (never by importing) and rebuilds the model (config, cls(config), weights),
and which disagreements are errors.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import golden_models
import pytest
import torch
from hostile.craft import pack, unpack

import zarchive
from zarchive.errors import ConfigMismatchError, FormatError, SaveError, UnknownTypeError
from zarchive.torchutil import ConfiguredModel, set_config_class

EXAMPLES = Path(__file__).resolve().parents[1] / "spec" / "examples"
FIELD_ORDER = ["$type", "class", "config", "state_dict", "training"]
OPTIONAL = ["training_modules", "unsaved_buffers", "tensor_attributes"]
INVENTORY = ["modules", "parameters", "buffers"]  # format 1.5: always written, last


@dataclass
class OtherConfig:
    width: int = 3


@set_config_class(OtherConfig)
class OtherNet(ConfiguredModel[OtherConfig]):
    def __init__(self, config: OtherConfig) -> None:
        super().__init__(config)
        self.fc = torch.nn.Linear(config.width, config.width)


def _root(path: Path) -> dict[str, Any]:
    return unpack(path.read_bytes()).manifest["root"]


def test_node_fields_and_their_order(tmp_path: Path) -> None:
    tiny = zarchive.save(golden_models.TinyNet(golden_models.NetConfig()), tmp_path / "tiny.zarc", durable=False)
    assert list(_root(Path(tiny))) == FIELD_ORDER + INVENTORY  # no optional field when nothing needs it
    model = golden_models.TiedNet(golden_models.NetConfig()).eval()
    model.drop.train()
    root = _root(Path(zarchive.save(model, tmp_path / "tied.zarc", durable=False)))
    assert list(root) == FIELD_ORDER + OPTIONAL + INVENTORY
    assert root["class"] == "golden_models:TiedNet" and root["training"] is False
    assert root["training_modules"] == {"drop": True}
    assert root["config"]["$type"] == "dataclass" and root["config"]["class"] == "golden_models:NetConfig"
    assert root["state_dict"]["class"] == "OrderedDict" and "_metadata" in root["state_dict"]["attrs"]
    assert root["unsaved_buffers"] == {"positions": {"dtype": "int64", "device": "cpu"}}
    assert root["tensor_attributes"] == ["scale"]
    # what only building the class told before 1.5: tied names both listed, the non-persistent buffer too
    assert root["modules"] == {
        "": "golden_models:TiedNet",
        "embed": "torch.nn.modules.sparse:Embedding",
        "head": "torch.nn.modules.linear:Linear",
        "drop": "torch.nn.modules.dropout:Dropout",
    }
    assert root["parameters"] == {"embed.weight": True, "head.weight": True}
    assert root["buffers"] == ["positions"]


def test_model_inventory_records_frozen_parameters_and_persistent_buffers(tmp_path: Path) -> None:
    model = golden_models.TinyNet(golden_models.NetConfig())
    model.fc1.bias.requires_grad_(False)
    root = _root(Path(zarchive.save(model, tmp_path / "m.zarc", durable=False)))
    assert root["parameters"]["fc1.bias"] is False and root["parameters"]["fc1.weight"] is True
    assert root["buffers"] == ["bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    assert list(root["modules"]) == [name for name, _ in model.named_modules()]


def test_training_modules_lists_only_the_submodules_that_differ(tmp_path: Path) -> None:
    model = golden_models.TinyNet(golden_models.NetConfig())
    model.drop.eval()
    root = _root(Path(zarchive.save(model, tmp_path / "m.zarc", durable=False)))
    assert root["training"] is True and root["training_modules"] == {"drop": False}


def test_writer_refuses_a_model_whose_config_is_not_its_declared_class(tmp_path: Path) -> None:
    model = OtherNet(OtherConfig())
    model.config = {"width": 3}  # type: ignore[assignment]
    with pytest.raises(SaveError, match="super"):
        zarchive.save(model, tmp_path / "m.zarc", durable=False)


def test_set_config_class_needs_a_dataclass() -> None:
    with pytest.raises(TypeError):
        set_config_class(dict)


# --- reading: classes are found, never imported; mismatches are errors ---


def _tampered(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    parts = unpack((EXAMPLES / "configured_model.uncompressed.zarc").read_bytes())
    change(parts.manifest["root"])
    out = tmp_path / "tampered.zarc"
    out.write_bytes(pack(parts))
    return out


def _drop_first_weight(root: dict[str, Any]) -> None:
    root["state_dict"]["data"].pop(next(iter(root["state_dict"]["data"])))


CASES: dict[str, tuple[Callable[[dict[str, Any]], None], type[Exception]]] = {
    "class-not-imported": (lambda r: r.update({"class": "zarchive_never_imported_pkg:Net"}), UnknownTypeError),
    "class-not-a-model": (lambda r: r.update({"class": "golden_models:NetConfig"}), UnknownTypeError),
    "class-local": (lambda r: r.update({"class": "golden_models:make.<locals>.Net"}), UnknownTypeError),
    "config-not-a-dataclass-node": (lambda r: r.update({"config": {"d_in": 4}}), FormatError),
    "config-of-another-class": (lambda r: r["config"].update({"class": "golden_models:Point"}), ConfigMismatchError),
    "config-that-cannot-build": (lambda r: r["config"]["fields"].update({"d_hidden": -1}), ConfigMismatchError),
    "training-not-a-bool": (lambda r: r.update({"training": 1}), FormatError),
    "state-dict-key-missing": (_drop_first_weight, ConfigMismatchError),
    "state-dict-key-unknown": (
        lambda r: r["state_dict"]["data"].update({"extra.weight": next(iter(r["state_dict"]["data"].values()))}),
        ConfigMismatchError,
    ),
    "weights-that-do-not-fit": (lambda r: r["config"]["fields"].update({"d_hidden": 9}), ConfigMismatchError),
    "training-modules-not-bools": (lambda r: r.update({"training_modules": {"drop": "no"}}), FormatError),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_reader_refuses(case: str, tmp_path: Path) -> None:
    change, error = CASES[case]
    path = _tampered(tmp_path, change)
    with pytest.raises(error):
        zarchive.read(path)
    assert "zarchive_never_imported_pkg" not in sys.modules


def test_read_into_an_expected_class() -> None:
    path = EXAMPLES / "configured_model.zarc"
    model = golden_models.TinyNet.read(path)
    assert type(model) is golden_models.TinyNet and isinstance(model.config, golden_models.NetConfig)
    assert type(ConfiguredModel.read(path)) is golden_models.TinyNet
    with pytest.raises(ConfigMismatchError):
        OtherNet.read(path)


def test_rebuilt_model_has_the_saved_weights_and_flags(tmp_path: Path) -> None:
    model = golden_models.TiedNet(golden_models.NetConfig(d_in=3))
    model.drop.eval()
    with torch.no_grad():
        model.embed.weight.mul_(2)
    back = zarchive.read(zarchive.save(model, tmp_path / "m.zarc", durable=False))
    assert type(back) is golden_models.TiedNet and back.config == model.config
    assert torch.equal(back.embed.weight, model.embed.weight)
    assert back.head.weight is back.embed.weight  # tied again
    assert back.training and not back.drop.training
    assert back.positions.tolist() == [0, 1, 2]  # made again by __init__ from the config
