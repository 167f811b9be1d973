"""A fetch of one value finds its tensors by their checksum entries (issue 27, spec section 6): what it
reads and checks, what it refuses, and what a full read and verify check that a fetch does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hostile.craft import Parts, pack
from hostile.formats import safetensors_bytes

import zarchive
from zarchive.container.zipreader import ZipReader
from zarchive.errors import FormatError, IntegrityError

A = np.arange(4, dtype="<f4")
B = np.arange(10, 14, dtype="<f4")


def _node(key: str, shape: list[int]) -> dict[str, Any]:
    return {"$type": "torch.Tensor", "$ref": "tensors.safetensors", "key": key, "dtype": "float32", "shape": shape}


def _crafted(tmp_path: Path, entries: dict[str, tuple[int, int]], *, shape_b: list[int] | None = None) -> Path:
    """Tensors a and b (4 floats each) in one member whose header lays them out in order, with the
    checksum entries given (every checksum true to the bytes it covers)."""
    st, _ = safetensors_bytes([("a", "F32", [4], A.tobytes()), ("b", "F32", [4], B.tobytes())])
    root = {"a": _node("a", [4]), "b": _node("b", shape_b or [4])}
    parts = Parts({"format": "zarchive", "format_version": "1.0", "root": root}, {"tensors.safetensors": st})
    parts.entries["tensors.safetensors"] = entries
    path = tmp_path / "crafted.zarc"
    path.write_bytes(pack(parts))
    return path


def _layout() -> dict[str, tuple[int, int]]:
    """The entries a writer records for `_crafted`'s member: the header, then a, then b."""
    _, entries = safetensors_bytes([("a", "F32", [4], A.tobytes()), ("b", "F32", [4], B.tobytes())])
    return entries


def test_entries_as_written_read_alike_by_fetch_and_full_read(tmp_path: Path) -> None:
    path = _crafted(tmp_path, _layout())
    with zarchive.open(path) as arc:
        assert np.array_equal(arc["a"].numpy(), A) and np.array_equal(arc["b"].numpy(), B)
    got = zarchive.read(path)
    assert np.array_equal(got["a"].numpy(), A) and np.array_equal(got["b"].numpy(), B)
    assert zarchive.verify(path) == []


def test_a_damaged_header_fails_what_reads_it_and_no_fetch(tmp_path: Path) -> None:
    """Damage in a member's header (a flipped byte, no checksum redone): a fetch of a tensor, which
    reads only the tensor's bytes, returns it intact; a full read and verify, which read the header,
    report the damage."""
    path = tmp_path / "a.zarc"
    values = {"w": torch.randn(600, 600), "b": torch.randn(64)}  # (a member of over 1 MiB records entries)
    zarchive.save(values, path)
    with zarchive.open(path) as arc:
        member = arc.node("w")["$ref"]
        at = ZipReader(arc._reader.source).members[member].data_offset + 12  # inside the JSON header
    data = bytearray(path.read_bytes())
    data[at] ^= 0x20
    path.write_bytes(bytes(data))
    with zarchive.open(path) as arc:
        assert torch.equal(arc["w"], values["w"]) and torch.equal(arc["b"], values["b"])
    with pytest.raises(IntegrityError):
        zarchive.read(path)
    problems = zarchive.verify(path)
    assert any("'$header'" in problem for _, problem in problems), problems


def test_entries_that_disagree_with_the_header_are_verifys_to_find(tmp_path: Path) -> None:
    """A file whose entries say a lies where the header puts b (and the reverse), every checksum
    true: a fetch reads by the entries, a full read by the header, and verify names the lie."""
    layout = _layout()
    path = _crafted(tmp_path, {**layout, "a": layout["b"], "b": layout["a"]})
    with zarchive.open(path) as arc:
        assert np.array_equal(arc["a"].numpy(), B)  # (where its entry says)
    assert np.array_equal(zarchive.read(path)["a"].numpy(), A)  # (where the header says)
    problems = [p for _, p in zarchive.verify(path)]
    assert "entry 'a' disagrees with the header on where the tensor lies" in problems, problems
    assert "entry 'b' disagrees with the header on where the tensor lies" in problems, problems


def test_overlapping_entries_refuse_a_fetch(tmp_path: Path) -> None:
    """Entries that overlap would let one file's bytes be read (and checked) as many tensors: a fetch
    refuses them before reading, naming the member; the header tiles, so a full read goes on."""
    layout = _layout()
    head, (a_at, _) = layout["$header"], layout["a"]
    path = _crafted(tmp_path, {"$header": head, "a": (a_at, 16), "b": (a_at + 8, 16)})
    with zarchive.open(path) as arc, pytest.raises(FormatError, match="entries overlap") as info:
        arc["b"]
    assert info.value.member == "tensors.safetensors"
    assert np.array_equal(zarchive.read(path)["b"].numpy(), B)
    assert any("overlap" in p for _, p in zarchive.verify(path))


def test_entries_listed_out_of_data_order_still_serve_fetches(tmp_path: Path) -> None:
    layout = _layout()
    path = _crafted(tmp_path, {"b": layout["b"], "$header": layout["$header"], "a": layout["a"]})
    with zarchive.open(path) as arc:
        assert np.array_equal(arc["b"].numpy(), B) and np.array_equal(arc["a"].numpy(), A)


def test_a_node_whose_size_is_not_its_entrys_is_refused(tmp_path: Path) -> None:
    path = _crafted(tmp_path, _layout(), shape_b=[5])
    with (
        zarchive.open(path) as arc,
        pytest.raises(FormatError, match=r"entry 'b' holds 16 bytes, the manifest's") as info,
    ):
        arc["b"]
    assert info.value.member == "tensors.safetensors" and info.value.path == "b"
    with pytest.raises(FormatError, match=r"stores 'b' as F32\[4\]"):  # a full read: by the header
        zarchive.read(path)


def test_an_entry_reaching_past_its_member_is_refused(tmp_path: Path) -> None:
    st, entries = safetensors_bytes([("a", "F32", [4], A.tobytes()), ("b", "F32", [4], B.tobytes())])
    parts = Parts(
        {"format": "zarchive", "format_version": "1.0", "root": {"a": _node("a", [4]), "b": _node("b", [4])}},
        {"tensors.safetensors": st},
        {"tensors.safetensors": entries},
    )

    def reach_past(meta: dict[str, Any]) -> None:
        meta["members"]["tensors.safetensors"]["entries"]["b"]["size"] = len(st)

    path = tmp_path / "edited.zarc"
    path.write_bytes(pack(parts, meta_edit=reach_past))
    with zarchive.open(path) as arc, pytest.raises(FormatError, match="checksum entry 'b'") as info:
        arc["b"]
    assert info.value.member == "tensors.safetensors"
