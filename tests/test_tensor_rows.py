"""Format 1.1's compact forms: dicts of many plain tensors as a table of rows, and checksum entries as
rows; format 1.2's split of big tensor groups into members of MEMBER_ENTRIES tensors, with one table
per member. Round trips, when the table is (not) used, lazy access to one row, and malformed tables."""

from __future__ import annotations

import json
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import forkrun
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_container import manifest_of, metadata_of

import zarchive
from zarchive.engine.objpath import join_path
from zarchive.engine.protocol import FORMAT_VERSION
from zarchive.handlers.torch_members import MEMBER_ENTRIES
from zarchive.nodes.tensor_rows import MIN_ROWS


def many(n: int = MIN_ROWS, dtype: torch.dtype = torch.float32, *, big: bool = False) -> dict[str, torch.Tensor]:
    """n tensors of 1 to 5 rows of 3 values (`big`: of 3,000 values, so that a member of them holds
    over 1 MiB and records checksum entries, format 1.6)."""
    gen = torch.Generator().manual_seed(n)
    cols = 3000 if big else 3
    return {f"layers.{i}.w": torch.randn(i % 5 + 1, cols, generator=gen).to(dtype) for i in range(n)}


def assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert list(got) == list(want)
    for k, w in want.items():
        assert got[k].dtype == w.dtype and got[k].shape == w.shape, k
        assert torch.equal(got[k], w), k


def test_a_big_plain_dict_is_written_as_rows_and_reads_back(tmp_path: Path) -> None:
    sd = many()
    zarchive.save(sd, tmp_path / "a.zarc")
    root = manifest_of(tmp_path / "a.zarc")["root"]
    assert root["$type"] == "dict" and set(root) == {"$type", "tensors"}
    table = root["tensors"]
    assert table["$ref"] == "tensors.safetensors" and table["device"] == "cpu"
    assert table["rows"][1] == ["layers.1.w", "float32", [2, 3]]  # name = key: no fourth column
    assert_same(zarchive.read(tmp_path / "a.zarc"), sd)
    assert metadata_of(tmp_path / "a.zarc")["format_version"] == FORMAT_VERSION


def test_below_the_threshold_each_tensor_keeps_its_node(tmp_path: Path) -> None:
    sd = many(MIN_ROWS - 1)
    zarchive.save(sd, tmp_path / "a.zarc")
    root = manifest_of(tmp_path / "a.zarc")["root"]
    assert root["layers.0.w"]["$type"] == "torch.Tensor"
    assert_same(zarchive.read(tmp_path / "a.zarc"), sd)


def test_a_model_state_dict_keeps_its_class_metadata_and_tied_entries(tmp_path: Path) -> None:
    model = torch.nn.Sequential(*[torch.nn.Linear(3, 3) for _ in range(40)])
    model[39].weight = model[0].weight  # tied: one stored entry, a row with its own key
    sd = model.state_dict()
    assert isinstance(sd, OrderedDict) and len(sd) >= MIN_ROWS
    zarchive.save({"model": sd}, tmp_path / "m.zarc")
    node = manifest_of(tmp_path / "m.zarc")["root"]["model"]
    assert list(node) == ["$type", "class", "tensors", "attrs"] and node["class"] == "OrderedDict"
    rows = {row[0]: row for row in node["tensors"]["rows"]}
    assert rows["39.weight"] == ["39.weight", "float32", [3, 3], "0.weight"]
    got = zarchive.read(tmp_path / "m.zarc")["model"]
    assert isinstance(got, OrderedDict) and got._metadata == sd._metadata  # type: ignore[attr-defined]
    assert_same(got, sd)
    assert got["39.weight"].data_ptr() == got["0.weight"].data_ptr()  # still one storage
    fresh = torch.nn.Sequential(*[torch.nn.Linear(3, 3) for _ in range(40)])
    fresh.load_state_dict(got)


def test_nested_dicts_record_the_member_key(tmp_path: Path) -> None:
    sd = many()
    zarchive.save({"run": {"weights": sd}}, tmp_path / "n.zarc")
    table = manifest_of(tmp_path / "n.zarc")["root"]["run"]["weights"]["tensors"]
    assert table["$ref"] == "run.safetensors"
    assert table["rows"][0] == ["layers.0.w", "float32", [1, 3], "weights/layers.0.w"]
    assert_same(zarchive.read(tmp_path / "n.zarc")["run"]["weights"], sd)


def test_compressed_members_are_named_in_the_table(tmp_path: Path) -> None:
    ints = {f"c{i}": torch.zeros(300, dtype=torch.int64) for i in range(MIN_ROWS)}
    zarchive.save(ints, tmp_path / "c.zarc")
    table = manifest_of(tmp_path / "c.zarc")["root"]["tensors"]
    assert table["$ref"] == "tensors.safetensors.zst"
    assert_same(zarchive.read(tmp_path / "c.zarc"), ints)


@pytest.mark.parametrize(
    "spoil",
    [
        lambda sd: sd.update(extra=[1, 2]),  # a value that is not a tensor
        lambda sd: sd.update(p=torch.nn.Parameter(torch.ones(2))),  # a Parameter keeps its flags in a node
        lambda sd: sd.update(g=torch.ones(2, requires_grad=True)),
        lambda sd: sd.update(zip(("v1", "v2"), torch.ones(2, 4).unbind())),  # two views of one storage
    ],
    ids=["not-a-tensor", "parameter", "requires-grad", "view"],
)
def test_dicts_that_need_full_nodes_keep_them(spoil: Any, tmp_path: Path) -> None:
    sd: dict[str, Any] = dict(many())
    spoil(sd)
    zarchive.save(sd, tmp_path / "s.zarc")
    root = manifest_of(tmp_path / "s.zarc")["root"]
    assert "tensors" not in root and root["layers.0.w"]["$type"] == "torch.Tensor"
    got = zarchive.read(tmp_path / "s.zarc")
    assert list(got) == list(sd)


def test_one_row_is_fetched_lazily_and_listed(tmp_path: Path) -> None:
    sd = many(200)
    zarchive.save({"model": sd}, tmp_path / "l.zarc")
    with zarchive.open(tmp_path / "l.zarc") as arc:
        assert arc.keys("model") == list(sd)
        assert "model/layers.7.w" in arc and "model/nope" not in arc
        assert torch.equal(arc["model/layers.7.w"], sd["layers.7.w"])
        assert "float32 [3, 3]" in arc.summary("model/layers.7.w")
        with pytest.raises(zarchive.MemberNotFoundError):
            arc["model/nope"]
        assert arc.entries("model.safetensors") == {}  # (a member of at most 1 MiB: checked whole, format 1.6)
    sd = many(100, big=True)
    zarchive.save({"model": sd}, tmp_path / "e.zarc")
    with zarchive.open(tmp_path / "e.zarc") as arc:
        assert torch.equal(arc["model/layers.7.w"], sd["layers.7.w"])
        entries = arc.entries("model.safetensors")
        assert set(entries) == {"$header", *sd} and entries["layers.7.w"]["size"] == 3 * 3000 * 4


def test_the_cli_shows_rows(tmp_path: Path) -> None:

    zarchive.save(many(), tmp_path / "c.zarc")
    done = forkrun.cli("show", tmp_path / "c.zarc")  # a process of its own, forked from a server that imported torch
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "layers.63.w  tensor float32 [4, 3] -> tensors.safetensors['layers.63.w']" in out


def _table_file(tmp_path: Path, edit: Any) -> Path:
    """A valid archive whose tensor table is edited (only the manifest: every checksum is redone)."""
    from zarchive.container.archive_writer import MemberPlan, choose_codecs, write_archive

    src = tmp_path / "src.zarc"
    zarchive.save(many(), src, compress=False)
    with zarchive.open(src) as arc, zipfile.ZipFile(src) as zf:
        manifest = json.loads(json.dumps(arc.manifest))
        meta = {k: v for k, v in arc.meta.items() if k != "members"}
        data = zf.read("tensors.safetensors")
    edit(manifest["root"]["tensors"])
    parts: list[tuple[str | None, memoryview]] = [(None, memoryview(data))]  # (under 1 MiB: no entries)
    plan = MemberPlan(base_name="tensors.safetensors", parts=lambda: parts, compress="never")
    choose_codecs([plan], None)
    out = tmp_path / "edited.zarc"
    with open(out, "wb") as f:
        write_archive(f, manifest, [plan], meta, None)
    return out


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda t: t["rows"].append(list(t["rows"][0])), "listed twice"),
        (lambda t: t["rows"].append(["x", "float32"]), "row must be"),
        (lambda t: t["rows"].append(["x", "float32", [1], 5]), "must be a string"),
        (lambda t: t.pop("$ref"), "needs a '\\$ref'"),
        (lambda t: t.update(rows="no"), "with 'rows'"),
        (lambda t: t["rows"][0].append("layers.1.w"), "member stores"),  # the wrong entry: shapes differ
        (lambda t: t["rows"][0].__setitem__(1, "float64"), "member stores"),
        (lambda t: t["rows"][0].__setitem__(1, "pickle"), "unknown torch dtype"),
    ],
    ids=["duplicate", "short-row", "key-not-str", "no-ref", "rows-not-list", "wrong-key", "wrong-dtype", "bad-dtype"],
)
def test_malformed_tables_are_format_errors(edit: Any, match: str, tmp_path: Path) -> None:
    path = _table_file(tmp_path, edit)
    with pytest.raises(zarchive.FormatError, match=match):
        zarchive.read(path)


def test_the_edited_table_control_reads(tmp_path: Path) -> None:
    """Control for the test above: the rewrite itself keeps a valid archive."""
    assert_same(zarchive.read(_table_file(tmp_path, lambda t: None)), many())


def test_a_table_saved_on_a_gpu_follows_map_location(tmp_path: Path) -> None:
    """The table's one device tag is mapped like a tensor node's (a GPU save, simulated by its tag)."""
    path = _table_file(tmp_path, lambda t: t.update(device="cuda:0"))
    assert_same(zarchive.read(path), many())  # default: CPU
    assert_same(zarchive.read(path, map_location={"cuda:0": "cpu"}), many())
    assert zarchive.read(path, map_location="meta")["layers.5.w"].device.type == "meta"
    if not torch.cuda.is_available():
        with pytest.raises(zarchive.DeviceError, match="saved on 'cuda:0'"):
            zarchive.read(path, map_location="saved")


def test_duplicate_checksum_entry_rows_are_refused(tmp_path: Path) -> None:
    from hostile.craft import pack, unpack

    zarchive.save(many(big=True), tmp_path / "d.zarc", compress=False)
    parts = unpack((tmp_path / "d.zarc").read_bytes())

    def dup(meta: dict[str, Any]) -> None:
        entries = meta["members"]["tensors.safetensors"]["entries"]
        rows = [[k, e["offset"], e["size"], e["crc32"]] for k, e in entries.items()]
        meta["members"]["tensors.safetensors"]["entries"] = rows + [rows[1]]

    (tmp_path / "dup.zarc").write_bytes(pack(parts, meta_edit=dup))
    with zarchive.open(tmp_path / "dup.zarc") as arc, pytest.raises(zarchive.FormatError, match="listed twice"):
        arc["layers.3.w"]


dtypes = st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool, torch.float64])
shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3)
names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12)


@settings(max_examples=15, deadline=None)
@given(
    specs=st.dictionaries(names, st.tuples(dtypes, shapes), min_size=MIN_ROWS - 2, max_size=MIN_ROWS + 8),
    nested=st.booleans(),
)
def test_round_trip_around_the_threshold(specs: dict[str, Any], nested: bool, tmp_path_factory: Any) -> None:
    gen = torch.Generator().manual_seed(len(specs))
    sd = {k: (torch.rand(shape, generator=gen) * 100).to(dtype) for k, (dtype, shape) in specs.items()}
    value: Any = {"outer": {"inner": sd}} if nested else sd
    path = tmp_path_factory.mktemp("rt") / "p.zarc"
    zarchive.save(value, path)
    got = zarchive.read(path)
    assert_same(got["outer"]["inner"] if nested else got, sd)
    with zarchive.open(path) as arc:
        prefix = ["outer", "inner"] if nested else []
        some = next(iter(sd))
        assert torch.equal(arc[join_path([*prefix, some])], sd[some])


# --- format 1.2: a group of more than MEMBER_ENTRIES tensors fills several members ---------------------
def test_a_big_group_is_split_into_members_with_one_table_each(tmp_path: Path) -> None:
    n = 2 * MEMBER_ENTRIES + 10
    sd = many(n)
    zarchive.save({"model": sd}, tmp_path / "s.zarc", compress=False)
    tables = manifest_of(tmp_path / "s.zarc")["root"]["model"]["tensors"]
    assert [t["$ref"] for t in tables] == ["model.safetensors", "model~2.safetensors", "model~3.safetensors"]
    assert [len(t["rows"]) for t in tables] == [MEMBER_ENTRIES, MEMBER_ENTRIES, 10]
    assert [row[0] for t in tables for row in t["rows"]] == list(sd)  # the dict's order, across members
    with zipfile.ZipFile(tmp_path / "s.zarc") as zf:
        from safetensors.torch import load

        for t in tables:  # each member is a complete safetensors file of its own tensors
            assert set(load(zf.read(t["$ref"]))) == {row[-1] if len(row) == 4 else row[0] for row in t["rows"]}
    assert_same(zarchive.read(tmp_path / "s.zarc")["model"], sd)
    with zarchive.open(tmp_path / "s.zarc") as arc:
        assert arc.keys("model") == list(sd) and arc.verify() == []
        assert torch.equal(arc[f"model/layers.{n - 1}.w"], sd[f"layers.{n - 1}.w"])


def test_the_cli_counts_the_tensors_of_each_member(tmp_path: Path) -> None:

    zarchive.save(many(MEMBER_ENTRIES + 3), tmp_path / "c.zarc", compress=False)
    done = forkrun.cli("ls", "--json", tmp_path / "c.zarc")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    counts = {row["member"]: row["tensors"] for row in json.loads(out) if row["tensors"] is not None}
    assert counts == {"tensors.safetensors": MEMBER_ENTRIES, "tensors~2.safetensors": 3}


def test_fetching_one_tensor_reads_no_header(tmp_path: Path) -> None:
    """A fetch finds its tensor by the checksum entry of its member (in the metadata opening read):
    it reads the tensor's bytes and nothing else of the member, and parses no header."""
    sd = {f"layers.{i}.w": torch.randn(1100) for i in range(4 * MEMBER_ENTRIES)}  # members of over 1 MiB
    zarchive.save(sd, tmp_path / "h.zarc", compress=False)
    with zarchive.open(tmp_path / "h.zarc") as arc:
        key = f"layers.{2 * MEMBER_ENTRIES + 5}.w"
        before = arc._reader.source.bytes_read
        assert torch.equal(arc[key], sd[key])
        assert arc._reader.source.bytes_read - before == sd[key].nbytes
        assert list(arc._reader.parsed) == []
        arc.load()  # a full read goes by the headers (and checks them)
        assert len(arc._reader.parsed) == 4


def test_ties_across_members_point_at_the_first_member(tmp_path: Path) -> None:
    model = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(MEMBER_ENTRIES)])
    model[-1].weight = model[0].weight  # its row comes after the split, its entry is in the first member
    sd = model.state_dict()
    zarchive.save(sd, tmp_path / "t.zarc")
    tables = manifest_of(tmp_path / "t.zarc")["root"]["tensors"]
    tied = [(t["$ref"], row) for t in tables for row in t["rows"] if row[0] == f"{MEMBER_ENTRIES - 1}.weight"]
    assert tied == [("tensors.safetensors", [f"{MEMBER_ENTRIES - 1}.weight", "float32", [2, 2], "0.weight"])]
    # so the rows run through member 1, member 2, member 1 (the tied row), member 2 (the last bias)
    assert [t["$ref"] for t in tables] == ["tensors.safetensors", "tensors~2.safetensors"] * 2
    got = zarchive.read(tmp_path / "t.zarc")
    assert_same(got, sd)
    assert got[f"{MEMBER_ENTRIES - 1}.weight"].data_ptr() == got["0.weight"].data_ptr()
    model.load_state_dict(got)


def test_a_table_list_with_a_name_in_two_members_is_refused(tmp_path: Path) -> None:
    from hostile.craft import pack, unpack

    zarchive.save(many(MEMBER_ENTRIES + 1), tmp_path / "d.zarc", compress=False)
    parts = unpack((tmp_path / "d.zarc").read_bytes())

    first, second = parts.manifest["root"]["tensors"]
    second["rows"].append(list(first["rows"][0]))
    (tmp_path / "dup.zarc").write_bytes(pack(parts))
    with pytest.raises(zarchive.FormatError, match="listed twice"):
        zarchive.read(tmp_path / "dup.zarc")
    with zarchive.open(tmp_path / "dup.zarc") as arc, pytest.raises(zarchive.FormatError, match="listed twice"):
        arc["layers.0.w"]


@pytest.mark.parametrize(
    ("tensors", "match"), [([], "list is empty"), ([5], "with 'rows'")], ids=["empty", "not-a-table"]
)
def test_malformed_table_lists_are_format_errors(tensors: Any, match: str, tmp_path: Path) -> None:
    from hostile.craft import pack, unpack

    zarchive.save(many(), tmp_path / "m.zarc", compress=False)
    parts = unpack((tmp_path / "m.zarc").read_bytes())
    parts.manifest["root"]["tensors"] = tensors
    (tmp_path / "bad.zarc").write_bytes(pack(parts))
    with pytest.raises(zarchive.FormatError, match=match):
        zarchive.read(tmp_path / "bad.zarc")


@settings(max_examples=8, deadline=None)
@given(
    n=st.integers(MEMBER_ENTRIES - 2, 2 * MEMBER_ENTRIES + 2),
    ties=st.lists(
        st.tuples(st.integers(0, 2 * MEMBER_ENTRIES + 1), st.integers(0, 2 * MEMBER_ENTRIES + 1)), max_size=4
    ),
    top=st.booleans(),
)
@example(n=MEMBER_ENTRIES, ties=[(0, 1), (0, 2)], top=False)  # the second tie moves name 0 to tensor 2
def test_split_round_trip_with_ties(n: int, ties: list[tuple[int, int]], top: bool, tmp_path_factory: Any) -> None:
    """Around and across the member split: dict order, values and shared storage come back; every
    member is a valid safetensors file; one row is fetched lazily."""
    sd: dict[str, torch.Tensor] = dict(many(n))
    keys = list(sd)
    for a, b in ties:
        if a < n and b < n:
            sd[keys[a]] = sd[keys[b]]  # one tensor under two names, wherever they fall
    value: Any = {"model": sd} if top else sd
    path = tmp_path_factory.mktemp("split") / "s.zarc"
    zarchive.save(value, path, compress=False)
    got = zarchive.read(path)
    got = got["model"] if top else got
    assert_same(got, sd)
    # Names share storage after the read exactly where they hold one tensor in `sd`: a later tie can
    # move a name to another tensor ([(0, 1), (0, 2)] leaves name 0 with tensor 2, name 1 on its own).
    tied = sorted({keys[i] for a, b in ties if a < n and b < n for i in (a, b)})
    for ka in tied:
        for kb in tied:
            assert (got[ka].data_ptr() == got[kb].data_ptr()) == (sd[ka] is sd[kb]), (ka, kb)
    with zipfile.ZipFile(path) as zf:
        from safetensors.torch import load

        for name in zf.namelist():
            if name.endswith(".safetensors"):
                assert 0 < len(load(zf.read(name))) <= MEMBER_ENTRIES
    with zarchive.open(path) as arc:
        last = keys[-1]
        assert torch.equal(arc[("model/" if top else "") + last], sd[last])
