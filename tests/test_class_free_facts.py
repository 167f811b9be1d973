"""Format 1.5: what a reader without the classes needs is in the file. An Enum member's plain value
beside its name, a Flag combination's member names beside its value, a model's modules, parameters
(with requires_grad) and buffers; a reader of format 1.4 (the commit before 1.5 opened, run from git)
reads such files unchanged, and the class-free neutral form (spec/neutral.md) shows the facts.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path
from typing import Any, ClassVar

import golden_models as gm
import pytest
import torch

import zarchive
from zarchive.neutral import neutral_form_of

ROOT = Path(__file__).resolve().parents[1]
READER_1_4 = "df87a9b"  # the last commit whose writer wrote format 1.4 (FORMAT_MINOR = 4)


def _value() -> dict[str, Any]:
    model = gm.TiedNet(gm.NetConfig(d_in=3, d_hidden=4, n_classes=2))
    model.embed.weight.requires_grad_(False)
    return {"color": gm.Color.GREEN, "level": gm.Level.HIGH, "rw": gm.Perm.R | gm.Perm.W, "none": gm.Perm(0),
            "x": gm.Perm.X, "model": model}  # fmt: skip


def _root(path: Path) -> dict[str, Any]:
    with zarchive.open(path) as arc:
        return arc.manifest["root"]


def test_enum_nodes_record_values_and_flag_names(tmp_path: Path) -> None:
    root = _root(Path(zarchive.save(_value(), tmp_path / "f.zarc", durable=False)))
    assert root["color"] == {"$type": "enum", "class": "golden_models:Color", "name": "GREEN", "value": "green"}
    assert root["level"]["value"] == 2 and root["x"]["value"] == 1
    assert root["rw"] == {"$type": "enum", "class": "golden_models:Perm", "value": 6, "names": ["R", "W"]}
    assert root["none"]["names"] == [] and root["none"]["value"] == 0


class Shape(enum.Enum):
    POINT = (0, 0)


def test_an_enum_value_that_is_not_plain_is_not_recorded(tmp_path: Path) -> None:
    root = _root(Path(zarchive.save({"e": Shape.POINT}, tmp_path / "e.zarc", durable=False)))
    assert root["e"] == {"$type": "enum", "class": f"{__name__}:Shape", "name": "POINT"}
    assert zarchive.read(tmp_path / "e.zarc")["e"] is Shape.POINT


def test_class_free_form_shows_the_recorded_facts(tmp_path: Path) -> None:
    path = zarchive.save(_value(), tmp_path / "f.zarc", durable=False)
    entries = dict(neutral_form_of(path)["value"]["entries"])
    assert entries["color"]["name"] == "GREEN" and entries["color"]["value"]["value"] == "green"
    assert entries["rw"]["names"] == ["R", "W"] and entries["rw"]["name"] is None
    model = entries["model"]
    assert model["parameters"] == [["embed.weight", False], ["head.weight", False]]  # tied: one Parameter
    assert model["buffers"] == ["positions"] and model["tensor_attributes"] == ["scale"]
    assert [m for m, _ in model["modules"]] == ["", "embed", "head", "drop"]


def _old_reader(tmp_path: Path) -> Path:
    """The zarchive package as of READER_1_4, from this checkout's git history (skipped without it:
    a shallow clone has no history)."""
    try:
        tar = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", READER_1_4, "zarchive"],
            capture_output=True, check=True, timeout=120,
        ).stdout  # fmt: skip
    except (subprocess.CalledProcessError, FileNotFoundError, subprocess.TimeoutExpired):
        pytest.skip(f"commit {READER_1_4} (the 1.4 reader) is not in this checkout's history")
    out = tmp_path / "reader_1_4"
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(out, filter="data")
    return out


_READ = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import golden_models, torch, zarchive
from zarchive.engine.protocol import FORMAT_MINOR
assert FORMAT_MINOR == 4 and zarchive.__file__.startswith(sys.argv[1]), zarchive.__file__
v = zarchive.read(sys.argv[3])
m = v["model"]
print(json.dumps({"enums": [repr(v[k]) for k in ("color", "level", "rw", "none", "x")],
                  "tied": m.head.weight is m.embed.weight, "positions": m.positions.tolist(),
                  "weight": m.embed.weight.tolist()}))
"""


def test_a_1_4_reader_reads_1_5_enum_and_model_nodes(tmp_path: Path) -> None:
    old = _old_reader(tmp_path)
    value = _value()
    path = zarchive.save(value, tmp_path / "f.zarc", durable=False)
    done = subprocess.run(
        [sys.executable, "-c", _READ, str(old), str(ROOT / "tests"), str(path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    assert got["enums"] == [repr(value[k]) for k in ("color", "level", "rw", "none", "x")]
    assert got["tied"] and got["positions"] == [0, 1, 2]
    assert torch.equal(torch.tensor(got["weight"]), value["model"].embed.weight.detach())


def test_1_5_fields_of_the_wrong_shape_are_refused(tmp_path: Path) -> None:
    from rewrite import rewrite

    src = Path(zarchive.save(_value(), tmp_path / "f.zarc", durable=False, compress=False))

    def bad_names(m: dict[str, Any]) -> None:
        m["root"]["rw"]["names"] = "R|W"

    def bad_params(m: dict[str, Any]) -> None:
        m["root"]["model"]["parameters"] = {"embed.weight": "yes"}

    for n, edit in enumerate((bad_names, bad_params)):
        with pytest.raises(zarchive.FormatError, match="names|parameters"):
            zarchive.read(rewrite(src, tmp_path / f"bad{n}.zarc", edit))


@dataclasses.dataclass
class Counted:
    """Counts its constructions: the class-free form must make none, even where the class resolves."""

    x: int
    made: ClassVar[list[int]] = []

    def __post_init__(self) -> None:
        Counted.made.append(self.x)


def test_the_form_constructs_no_class_even_one_it_could_resolve(tmp_path: Path) -> None:
    import numpy as np

    items = np.empty(2, dtype=object)
    items[:] = [Counted(1), Counted(2)]
    value = {"one": Counted(3), "array": items, "many": [Counted(i) for i in range(300)], "e": gm.Color.RED}
    path = zarchive.save(value, tmp_path / "c.zarc", durable=False, external_list_threshold=4)
    Counted.made.clear()
    entries = dict(neutral_form_of(path)["value"]["entries"])
    assert Counted.made == []
    assert entries["array"]["items"][1]["fields"] == [["x", {"kind": "int", "path": "array/items/1/x", "value": "2"}]]
    assert zarchive.read(path)["one"] == Counted(3) and Counted.made  # (a read does build them)


def test_module_tags_are_descriptive_only(tmp_path: Path) -> None:
    """`modules` names torch's classes and the model's submodules' classes: audit lists none of them
    (nothing reads them as classes to resolve), only the model's and its config's."""
    path = zarchive.save(gm.TinyNet(gm.NetConfig()), tmp_path / "m.zarc", durable=False)
    assert set(zarchive.audit(path)) == {"golden_models:TinyNet", "golden_models:NetConfig"}
    assert _root(Path(path))["modules"]["fc1"] == "torch.nn.modules.linear:Linear"


def test_the_frozen_1_5_example_shows_the_facts_class_free() -> None:
    form = json.loads((ROOT / "spec" / "examples" / "class_facts.generic.json").read_text(encoding="ascii"))
    entries = dict(form["value"]["entries"])
    enums = entries["enums"]["items"]
    assert [(e["name"], e["names"]) for e in enums] == [
        ("GREEN", None), ("RED", None), ("HIGH", None), ("X", None), (None, ["R", "W"]), (None, []),
    ]  # fmt: skip
    assert [e["value"]["value"] for e in enums] == ["green", "1", "2", "1", "6", "0"]
    assert entries["tiny"]["buffers"] == ["bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    assert entries["tied"]["parameters"] == [["embed.weight", True], ["head.weight", True]]
