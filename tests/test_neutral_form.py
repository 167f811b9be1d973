"""The class-free neutral form (spec/neutral.md): `zarchive neutral` on every frozen example prints
exactly its committed `<name>.generic.json`, without the examples' classes; archives written fresh
give the same form every time, whatever their compression; the command runs as a real subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from zarchive.neutral import canonical_json, neutral_form_of

EXAMPLES = Path(__file__).resolve().parents[1] / "spec" / "examples"
sys.path.insert(0, str(EXAMPLES))
import make_generic

ARCHIVES = sorted([*EXAMPLES.glob("*.zarc"), EXAMPLES / "dcp_sharded"])  # (a checkpoint directory too)


def _form_file(archive: Path) -> Path:
    return EXAMPLES / (archive.name.removesuffix(".zarc").removesuffix(".uncompressed") + ".generic.json")


def test_every_example_has_a_generic_file() -> None:
    present = {p.name for p in EXAMPLES.glob("*.generic.json")}
    wanted = {make_generic.form_path(a).name for a in make_generic.examples()}
    assert present == wanted, f"missing: {sorted(wanted - present)}; stray: {sorted(present - wanted)}"


@pytest.mark.parametrize("archive", ARCHIVES, ids=[p.name for p in ARCHIVES])
def test_example_reads_to_its_generic_form(archive: Path) -> None:
    committed = _form_file(archive).read_text(encoding="ascii")
    derived = canonical_json(neutral_form_of(archive))
    if derived != committed:  # as data first, for a readable difference
        assert json.loads(derived) == json.loads(committed), f"{archive.name} reads differently than described"
    assert derived == committed, f"{_form_file(archive).name} is not in canonical form"


def test_generic_form_needs_no_class(tmp_path: Path) -> None:
    """The examples' classes live in tests/golden_models.py; a fresh interpreter that never imports
    them prints the same form (the command resolves nothing)."""
    archive = EXAMPLES / "configured_model_extras.zarc"
    code = "import sys, zarchive.cli as c; sys.exit(c.main(['neutral', sys.argv[1]]))"
    done = subprocess.run(
        [sys.executable, "-c", code, str(archive)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == _form_file(archive).read_text(encoding="ascii")


def _walk(desc: Any) -> list[Any]:
    out = [desc]
    if isinstance(desc, dict):
        for v in desc.values():
            out += _walk(v)
    elif isinstance(desc, list):
        for v in desc:
            out += _walk(v)
    return out


@pytest.mark.parametrize("archive", make_generic.examples(), ids=lambda p: p.name)
def test_generic_form_is_plain_and_ascii(archive: Path) -> None:
    """Canonical text: ASCII, sorted keys, no floats anywhere (every float is bits), a path on every
    description made from a node."""
    text = make_generic.form_path(archive).read_text(encoding="ascii")
    doc = json.loads(text)
    assert doc["format"] == "zarchive-generic-1"
    for x in _walk(doc):
        assert not isinstance(x, float), f"{archive.name}: a JSON float in the form"
        if isinstance(x, dict):
            assert list(x) == sorted(x)
    assert text.isascii() and text.endswith("\n")
