"""spec/ is a true contract: the frozen example archives read exactly as they did when written, their
manifests and metadata (and those of fresh saves) match the JSON Schemas, and every handler's `$type`
is documented.

The examples are frozen (spec/examples/README.md): never regenerate them. Whether today's writer
still gives back the same values from freshly written examples is checked only on request:
ZARCHIVE_CHECK_EXAMPLES=1 (or `python spec/examples/make_examples.py --check`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import golden_models  # noqa: F401  (the examples' classes must be imported for their tags to resolve)
import jsonschema
import pytest
from golden_digest import describe
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.engine.objpath import escape
from zarchive.engine.registry import default_handlers

SPEC = Path(__file__).resolve().parents[1] / "spec"
EXAMPLES = SPEC / "examples"
sys.path.insert(0, str(EXAMPLES))
import example_builders
import make_examples

ARCHIVES = sorted(EXAMPLES.glob("*.zarc"))
NOT_NODE_TYPES = {"json", "omegaconf"}  # handler names that never appear as "$type" (spec section 5)


def _schema(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SPEC / "schema" / name).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


MANIFEST = _schema("manifest.schema.json")
METADATA = _schema("metadata.schema.json")


def _expected(archive: Path) -> dict[str, Any]:
    return json.loads(archive.with_suffix(".expected.json").read_text(encoding="utf-8"))


def _json_members(archive: Path) -> tuple[Any, Any]:
    """manifest.json and metadata.json, read with the standard library (not zarchive's reader)."""
    with zipfile.ZipFile(archive) as z:
        return json.loads(z.read("manifest.json")), json.loads(z.read("metadata.json"))


def _assert_valid(validator: jsonschema.Draft202012Validator, doc: Any, what: str) -> None:
    errors = list(validator.iter_errors(doc))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        raise AssertionError(f"{what}: {len(errors)} schema error(s); at {best.json_path}: {best.message[:500]}")


# --- the frozen examples ---


def test_every_example_is_committed() -> None:
    wanted = {f"{ex.name}{v}.zarc" for ex, v in make_examples.all_names()}
    present = {p.name for p in ARCHIVES}
    assert wanted == present, f"missing: {sorted(wanted - present)}; unknown: {sorted(present - wanted)}"
    for archive in ARCHIVES:
        assert archive.with_suffix(".expected.json").is_file(), archive.name


@pytest.mark.parametrize("archive", ARCHIVES, ids=[p.name for p in ARCHIVES])
def test_example_is_unchanged(archive: Path) -> None:
    """Released examples never change (a regenerated file has another creation time, hence digest)."""
    expected = _expected(archive)
    assert expected["archive"] == archive.name
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == expected["sha256"], (
        f"{archive.name} was changed or regenerated: released examples are frozen (spec/examples/README.md)"
    )


@pytest.mark.parametrize("archive", ARCHIVES, ids=[p.name for p in ARCHIVES])
def test_example_reads_as_it_did(archive: Path) -> None:
    expected = _expected(archive)
    value = zarchive.read(archive)
    assert describe(value) == expected["value"], f"{archive.name} reads differently than when it was written"
    assert describe(zarchive.read(archive, lazy=False)) == expected["value"]
    with zarchive.open(archive) as arc:
        assert arc.verify() == []
        assert {name: e["codec"] for name, e in arc.members.items()} == expected["members"]
        if type(value) is dict:  # each top-level value alone, through lazy access, as in the whole
            for key in arc.keys(""):
                assert describe(arc[escape(key)]) == describe(value[key]), f"{archive.name}: open()[{key!r}]"


@pytest.mark.parametrize("archive", ARCHIVES, ids=[p.name for p in ARCHIVES])
def test_example_matches_the_schemas(archive: Path) -> None:
    manifest, metadata = _json_members(archive)
    _assert_valid(MANIFEST, manifest, f"{archive.name} manifest.json")
    _assert_valid(METADATA, metadata, f"{archive.name} metadata.json")


@pytest.mark.skipif(os.environ.get("ZARCHIVE_CHECK_EXAMPLES") != "1", reason="set ZARCHIVE_CHECK_EXAMPLES=1")
def test_writer_still_makes_the_examples() -> None:
    """Opt-in: every example written today reads back as the committed example's value (the layout
    may have moved on since it was frozen: the script lists where, without failing)."""
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "make_examples.py"), "--check"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr


# --- fresh saves stay inside the schemas ---

SETTINGS = {
    "zstd": {},
    "none": {"compress": False},
    "all-members": {"external_array_threshold": 0, "external_list_threshold": 0},
    "all-inline": {"compress": 19, "external_array_threshold": 10**9, "external_list_threshold": 10**9},
}


def _extra_values() -> dict[str, Any]:
    """Values beyond the examples: configs, registered names, nested and odd shapes."""
    import numpy as np
    import pandas as pd
    import torch

    values: dict[str, Any] = {}
    try:
        from omegaconf import OmegaConf
    except ImportError:  # an optional extra (hydra)
        pass
    else:
        values["omegaconf"] = OmegaConf.create({"model": {"width": 4, "ref": "${model.width}"}, "tags": ["a", "b"]})
    return {
        **values,
        "deep": {"a": [{"b": ({"c": [1, (2, {3})]},)}]},
        "long_lists": [list(range(300)), ["s"] * 300, [[1, 2]] * 300],
        "frames": [pd.DataFrame(), pd.DataFrame({"a": []}), pd.Series([], dtype="float32")],
        "arrays": [np.zeros((3, 0)), np.arange(1000).reshape(10, 100).T, np.array([], dtype=object)],
        "tensors": {"a": {"b": {"c": torch.ones(2, 2)}}, "list": [torch.zeros(3), torch.ones(3)]},
        "model": example_builders.tiny_net(),
        "models": [example_builders.tied_net()],
    }


@pytest.fixture(scope="module")
def fresh_values() -> dict[str, Any]:
    values = {name: build() for name, build in example_builders.ALL.items()}
    values.update(_extra_values())
    return values


@pytest.mark.parametrize("options", list(SETTINGS.values()), ids=list(SETTINGS))
def test_fresh_saves_match_the_schemas(options: dict[str, Any], fresh_values: dict[str, Any], tmp_path: Path) -> None:
    za = zarchive.ZArchive(durable=False, custom_settings={"run": 1}, **options)
    path = Path(za.save(fresh_values, tmp_path / "fresh.zarc"))
    manifest, metadata = _json_members(path)
    _assert_valid(MANIFEST, manifest, "manifest.json")
    _assert_valid(METADATA, metadata, "metadata.json")


_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8) | st.binary(max_size=16)
    | st.complex_numbers() | st.decimals(allow_nan=True) | st.datetimes() | st.timedeltas()
)  # fmt: skip
_hashable = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
                         lambda inner: st.tuples(inner, inner), max_leaves=4)  # fmt: skip
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=4), inner, max_size=4)
        | st.dictionaries(_hashable, inner, max_size=3)
        | st.sets(_hashable, max_size=4)
        | st.frozensets(st.integers(), max_size=3)
    ),
    max_leaves=20,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_values)
def test_random_values_match_the_schema(value: Any, tmp_path: Path) -> None:
    path = Path(zarchive.save(value, tmp_path / "v.zarc", durable=False, external_list_threshold=2))
    manifest, _ = _json_members(path)
    _assert_valid(MANIFEST, manifest, f"manifest.json of {value!r:.200}")


def test_fresh_checkpoint_matches_the_schemas(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.zarc"
    example_builders.write_checkpoint(example_builders.checkpoint_parts(), path, {"durable": False})
    manifest, metadata = _json_members(path)
    _assert_valid(MANIFEST, manifest, "checkpoint manifest.json")
    _assert_valid(METADATA, metadata, "checkpoint metadata.json")


# --- the schemas are strict, and know every node type ---


def _first(node: Any, pred: Callable[[Any], bool]) -> Any:
    """The first dict inside `node` (depth first) for which pred holds."""
    if isinstance(node, dict):
        if pred(node):
            return node
        children = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _first(child, pred)
        if found is not None:
            return found
    return None


MUTATIONS: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "unknown-type": ("python_types.zarc", lambda n: n.update({"$type": "pickle"})),
    "extra-field": ("torch_tensors.zarc", lambda n: n.update({"pin_memory": True})),
    "missing-field": ("numpy_arrays.zarc", lambda n: n.pop("shape")),
    "bad-ref-extension": ("torch_tensors.zarc", lambda n: n.update({"$ref": "weights.npy"})),
    "dollar-key-without-type": ("json_values.zarc", lambda n: n.update({"$ref": "x.bin"})),
    "list-with-two-layouts": ("python_types.zarc", lambda n: n.update({"items": "rows"})),
    "strings-without-count": ("pandas_frame.zarc", lambda n: n.pop("count")),
    "range-index-with-values": ("pandas_frame.zarc", lambda n: n.update({"values": [1, 2]})),
    "frame-with-3d-column": ("pandas_frame.zarc", lambda n: n["data"][0].update({"shape": [6, 1, 1]})),
    "model-without-training": ("configured_model.zarc", lambda n: n.pop("training")),
    "config-not-a-dataclass": ("configured_model.zarc", lambda n: n.update({"config": {"d_in": 4}})),
    "dataclass-without-tag": ("dataclasses.zarc", lambda n: n.update({"class": "Point"})),
}
_TARGETS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "unknown-type": lambda n: n.get("$type") == "tuple",
    "extra-field": lambda n: n.get("$type") == "torch.Tensor",
    "missing-field": lambda n: n.get("$type") == "numpy.ndarray",
    "bad-ref-extension": lambda n: n.get("$type") == "torch.Tensor",
    "dollar-key-without-type": lambda n: "nested" in n,
    "list-with-two-layouts": lambda n: n.get("$type") == "list",
    "strings-without-count": lambda n: n.get("layout") == "strings",
    "range-index-with-values": lambda n: n.get("kind") == "range",
    "frame-with-3d-column": lambda n: n.get("$type") == "pandas.DataFrame",
    "model-without-training": lambda n: n.get("$type") == "torch.ConfiguredModel",
    "config-not-a-dataclass": lambda n: n.get("$type") == "torch.ConfiguredModel",
    "dataclass-without-tag": lambda n: n.get("$type") == "dataclass",
}


@pytest.mark.parametrize("mutation", list(MUTATIONS), ids=list(MUTATIONS))
def test_schema_rejects_what_writers_never_write(mutation: str) -> None:
    archive, change = MUTATIONS[mutation]
    manifest, _ = _json_members(EXAMPLES / archive)
    manifest = copy.deepcopy(manifest)
    target = _first(manifest["root"], _TARGETS[mutation])
    assert target is not None, f"{archive} has no node for {mutation}"
    change(target)
    assert not MANIFEST.is_valid(manifest), f"the manifest schema accepts a {mutation} manifest"


def test_metadata_schema_rejects_a_zstd_member_without_content_crc() -> None:
    _, metadata = _json_members(EXAMPLES / "numpy_arrays.zarc")
    name = next(n for n, e in metadata["members"].items() if e["codec"] == "zstd")
    del metadata["members"][name]["content_crc32"]
    assert not METADATA.is_valid(metadata)


def test_schema_has_a_definition_for_every_node_type() -> None:
    schema = MANIFEST.schema
    names = {h.name for h in default_handlers()} - NOT_NODE_TYPES
    assert set(schema["$defs"]["typed_node"]["properties"]["$type"]["enum"]) == names
    dispatched = {rule["if"]["properties"]["$type"]["const"] for rule in schema["$defs"]["typed_node"]["allOf"]}
    assert dispatched == names
    for name in names:
        definition = schema["$defs"][name]
        assert definition["properties"]["$type"] == {"const": name}, name
        assert definition.get("additionalProperties") is False or definition.get("unevaluatedProperties") is False


def test_schema_since_is_the_readers() -> None:
    """Every node type's `since` in the schema is the version the reader's node schema names (what a
    version error about a node in a shape the reader does not know cites; reading.md section 4)."""
    defs = MANIFEST.schema["$defs"]
    for handler in default_handlers():
        if handler.name not in NOT_NODE_TYPES:
            assert defs[handler.name].get("since") == handler.since, handler.name


def test_spec_documents_every_handler() -> None:
    """A handler without a spec entry fails here: its `$type` must appear (in backticks) in spec/*.md."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(SPEC.glob("*.md")))
    missing = [h.name for h in default_handlers() if f"`{h.name}`" not in text]
    assert not missing, f"spec/*.md does not document: {missing}"
    documented = set(re.findall(r"^\| `([a-zA-Z_.]+)` \|", text, flags=re.MULTILINE))
    assert {h.name for h in default_handlers()} - NOT_NODE_TYPES <= documented, "every node type needs a table row"


def test_spec_and_schemas_name_the_current_format_version() -> None:
    """The spec's title and each schema's title name zarchive.engine.protocol.FORMAT_VERSION."""
    from zarchive.engine.protocol import FORMAT_VERSION

    title = (SPEC / "README.md").read_text(encoding="utf-8").splitlines()[0]
    assert title == f"# The zarchive format, version {FORMAT_VERSION}"
    for validator in (MANIFEST, METADATA):
        assert f"format {FORMAT_VERSION} " in validator.schema["title"], validator.schema["title"]
