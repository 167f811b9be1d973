"""Each frozen example reads to exactly the value its `<name>.neutral.json` describes (spec/examples/README.md).

The neutral files are what an implementation in another language checks itself against; this test
re-derives each one from the frozen archives (compressed and uncompressed variant alike) with
spec/examples/make_neutral.py and compares, so they can never drift from what zarchive reads.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from json_walk import parts as json_parts

EXAMPLES = Path(__file__).resolve().parents[1] / "spec" / "examples"
sys.path.insert(0, str(EXAMPLES))
import make_neutral

GROUPS = make_neutral.examples()
ARCHIVES = [p for archives in GROUPS.values() for p in archives]
REPR = re.compile(r"\b[A-Za-z_][\w.]*\(|<class |<[\w.]+ object|\bdtype\(")  # Name(...), <class ...>, <... object>


def test_every_example_has_a_neutral_file() -> None:
    present = {p.name.removesuffix(".neutral.json") for p in EXAMPLES.glob("*.neutral.json")}
    assert present == set(GROUPS), f"missing: {sorted(set(GROUPS) - present)}; stray: {sorted(present - set(GROUPS))}"


@pytest.mark.parametrize("archive", ARCHIVES, ids=[p.name for p in ARCHIVES])
def test_archive_reads_to_its_neutral_description(archive: Path) -> None:
    name = archive.name.split(".")[0]
    committed = (EXAMPLES / f"{name}.neutral.json").read_text(encoding="utf-8")
    derived = make_neutral.dumps(make_neutral.neutral(make_neutral.zarchive.read(archive), name))
    if derived != committed:  # compare as data first, for a readable difference
        assert json.loads(derived) == json.loads(committed), f"{archive.name} reads differently than described"
    assert derived == committed, f"{name}.neutral.json is not in the generator's layout"


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_neutral_files_hold_no_python_reprs(name: str) -> None:
    """Ints as decimal text, floats as bits, zones by name or offset: nothing a repr() made."""
    doc = json.loads((EXAMPLES / f"{name}.neutral.json").read_text(encoding="utf-8"))
    assert doc["format"] == "zarchive-neutral-1" and doc["example"] == name
    for node in json_parts(doc["value"]):
        if isinstance(node, str):
            assert not REPR.search(node), f"{name}: {node!r} looks like a Python repr"
        if isinstance(node, dict) and node.get("kind") == "float":
            assert set(node) <= {"path", "kind", "bits"} and len(node["bits"]) == 16
