"""Nodes that name the same member (or the same tensor entry): counted once by the read's budget,
built once and shared, and never given another node's value when they describe it differently."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rewrite import rewrite

import zarchive
from zarchive.container.budget import json_memory_estimate


def _copies(src: Path, dst: Path, key: str, n: int, edit: Any = None) -> Path:
    """`src` with n more root entries that repeat the node at `key` (edited by `edit`)."""

    def more(m: dict[str, Any]) -> None:
        for i in range(n):
            node = json.loads(json.dumps(m["root"][key]))
            if edit is not None:
                edit(node)
            m["root"][f"{key}{i}"] = node

    return rewrite(src, dst, more)


def test_bytes_members_named_twenty_times_are_read_and_held_once(tmp_path: Path) -> None:
    zarchive.save({"b": bytes(range(256)) * 4096}, tmp_path / "b.zarc", compress=False)  # 1 MiB: a member
    path = _copies(tmp_path / "b.zarc", tmp_path / "b20.zarc", "b", 20)
    with zarchive.open(path, mmap=True) as arc:
        assert arc.plan().nbytes == 0  # one mapped member, however many nodes name it
    with zarchive.open(path) as arc:
        assert arc.plan().nbytes == 1 << 20  # read into memory (the default): once
    back = zarchive.read(path)
    assert all(back[f"b{i}"] is back["b"] for i in range(20))


def test_compressed_members_named_many_times_count_once(tmp_path: Path) -> None:
    from hostile.craft import Parts, pack

    lines = b"".join(b"%d\n" % i for i in range(100_000))  # a .jsonl member, stored zstd-compressed
    node = {"$type": "list", "$ref": "l.jsonl.zst", "length": 100_000, "nbytes": len(lines), "items": "plain"}
    parts = Parts({"format": "zarchive", "format_version": "1.2", "root": {f"l{i}": node for i in range(20)}},
                  {"l.jsonl.zst": lines})  # fmt: skip
    path = tmp_path / "l.zarc"
    path.write_bytes(pack(parts))
    with zarchive.open(path) as arc:
        assert arc.plan().nbytes == len(lines)  # decoded once, not 20 times
    once = len(lines) + json_memory_estimate(lines) + 100_000  # decoded and parsed once (+ the manifest)
    assert once < 20 * len(lines)
    back = zarchive.read(path, max_read_bytes=once)
    assert back["l19"] == list(range(100_000)) and all(back[f"l{i}"] is back["l0"] for i in range(20))


def test_an_array_node_describing_its_member_differently_is_refused(tmp_path: Path) -> None:
    zarchive.save({"a": np.arange(1000, dtype=np.int32)}, tmp_path / "a.zarc", compress=False)

    def as_float(node: dict[str, Any]) -> None:
        node["dtype"] = "<f4"

    path = _copies(tmp_path / "a.zarc", tmp_path / "a2.zarc", "a", 1, as_float)
    with pytest.raises(zarchive.FormatError, match="member holds <i4\\[1000\\], this node says <f4\\[1000\\]"):
        zarchive.read(path)  # before: the float node silently got the int array
    with pytest.raises(zarchive.FormatError), zarchive.open(path) as arc:
        arc["a0"]  # a lazy fetch says the same


def test_a_tensor_node_describing_its_entry_differently_is_refused(tmp_path: Path) -> None:
    zarchive.save({"t": torch.arange(12, dtype=torch.float32)}, tmp_path / "t.zarc", compress=False)

    def reshape(node: dict[str, Any]) -> None:
        node["shape"] = [3, 4]

    path = _copies(tmp_path / "t.zarc", tmp_path / "t2.zarc", "t", 1, reshape)
    with pytest.raises(zarchive.FormatError, match="the member stores 't' as F32\\[12\\]"):
        zarchive.read(path)
    assert zarchive.verify(path) == []  # the bytes are intact: the manifest contradicts itself
