"""Fuzzing the reader: hypothesis mutates valid archives, and reading (load, browse, verify) must either
succeed or raise a ZArchiveError subclass; any other exception type is a bug.

Seven mutators, from blind to structure-aware: raw bytes (flips, truncation, insertion, deletion); zip
header fields; manifest JSON edits; metadata edits; member bytes; member format headers (.npy,
.safetensors); nodes of every registered handler type with fields drawn from what handlers read. All but the first two repack the archive with every checksum recomputed (see
tests/hostile/craft.py), so the damage reaches the layers under the integrity checks.

The normal run is short and derandomized. The long run (the README quotes its count):

    ZARCHIVE_FUZZ_EXAMPLES=200000 .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_fuzz.py -s

prints how many cases each mutator survived (the example count is per mutator; on two cores about 30
cases a second get through, so 4000 takes a quarter of an hour).
"""

from __future__ import annotations

import functools
import json
import os
import struct
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarchive
from hostile.craft import Parts, dumps, pack, unpack, zip_fields
from hostile.make_corpus import base as corpus_base
from zarchive.registry import HandlerRegistry

EXAMPLES = int(os.environ.get("ZARCHIVE_FUZZ_EXAMPLES", "100"))
LONG_RUN = "ZARCHIVE_FUZZ_EXAMPLES" in os.environ
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not LONG_RUN,
    database=None,
    suppress_health_check=list(HealthCheck),
)
COUNTS: dict[str, int] = {}


def _bases() -> dict[str, bytes]:
    """Small valid archives covering the built-in member kinds, compressed and not."""
    import tempfile

    g = torch.Generator().manual_seed(0)
    obj = {
        "model": {"w": torch.randn(8, 4, generator=g), "b": torch.arange(4, dtype=torch.int16)},
        "shared": [torch.arange(6.0)[1:4]],
        "arr": np.arange(300, dtype=np.int32).reshape(30, 10),
        "farr": np.linspace(0, 1, 300).astype(np.float16),
        "words": [f"w{i}" for i in range(300)],
        "mixed": [1, 2.5, None, "x", (1, 2), {3, 4}] * 50,
        "blob": bytes(range(256)) * 17,
        "small": {1: "a", (2, 3): frozenset({4.5}), "t": (1.5, float("inf"))},
    }
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for label, kw in {"zstd": {}, "plain": {"compress": False}}.items():
            path = os.path.join(d, f"{label}.zarc")
            zarchive.save(obj, path, **kw)
            with open(path, "rb") as f:
                out[label] = f.read()
    out["corpus"] = pack(corpus_base())
    return out


BASES = _bases()
PARTS = {k: unpack(v) for k, v in BASES.items()}
MEMBERS = sorted({m for p in PARTS.values() for m in p.members})
HANDLERS = [h.name for h in HandlerRegistry.build().handlers]


def attempt(data: bytes) -> str:
    """Everything a reader may do with a file; only ZArchiveErrors may come out. Returns the outcome."""
    start = time.monotonic()
    outcome = "ok"
    for lazy in (True, False):
        try:
            zarchive.read(data, lazy=lazy)
        except zarchive.ZArchiveError:
            outcome = "error"
    try:
        with zarchive.ZArchive(verify=False).open(data) as arc:
            arc.verify()
            todo = [""]
            for _ in range(50):
                if not todo:
                    break
                path = todo.pop()
                arc.summary(path)
                try:
                    arc.get(path)
                except zarchive.ZArchiveError:
                    pass
                todo += [f"{path}/{k}".strip("/") for k in arc.keys(path)[:10]]
    except zarchive.ZArchiveError:
        pass
    assert time.monotonic() - start < 30, "one case took more than 30 s"
    return outcome


def run(name: str) -> Callable[[Callable[..., bytes]], Callable[..., None]]:
    """Wrap a mutator (hypothesis args -> damaged bytes) into a test that attempts to read the bytes."""

    def wrap(mutate: Callable[..., bytes]) -> Callable[..., None]:
        @functools.wraps(mutate)
        def check(**kw: Any) -> None:
            attempt(mutate(**kw))
            COUNTS[name] = COUNTS.get(name, 0) + 1

        return check

    return wrap


base_names = st.sampled_from(sorted(BASES))


# --- 1. raw bytes --------------------------------------------------------------------------------------
byte_ops = st.lists(
    st.one_of(
        st.tuples(st.just("flip"), st.floats(0, 1), st.integers(1, 255)),
        st.tuples(st.just("truncate"), st.floats(0, 1), st.just(0)),
        st.tuples(st.just("insert"), st.floats(0, 1), st.binary(min_size=1, max_size=64)),
        st.tuples(st.just("delete"), st.floats(0, 1), st.integers(1, 64)),
        st.tuples(st.just("tail"), st.integers(1, 400), st.integers(1, 255)),  # the zip directory end
    ),
    min_size=1,
    max_size=4,
)


@given(base=base_names, ops=byte_ops)
@FUZZ
@run("bytes")
def test_fuzz_raw_bytes(base: str, ops: list[tuple[str, Any, Any]]) -> bytes:
    data = bytearray(BASES[base])
    for op, where, arg in ops:
        if not data:
            break
        if op == "tail":
            pos = max(0, len(data) - where)
        else:
            pos = min(int(where * len(data)), len(data) - 1)
        if op in ("flip", "tail"):
            data[pos] ^= arg
        elif op == "truncate":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = arg
        else:
            del data[pos : pos + arg]
    return bytes(data)


# --- 2. zip header fields ----------------------------------------------------------------------------------
@given(base=base_names, data=st.data())
@FUZZ
@run("zip-fields")
def test_fuzz_zip_fields(base: str, data: st.DataObject) -> bytes:
    raw = bytearray(BASES[base])
    fields = zip_fields(bytes(raw))
    for _ in range(data.draw(st.integers(1, 3), label="n")):
        offset, width, _label = data.draw(st.sampled_from(fields), label="field")
        old = int.from_bytes(raw[offset : offset + width], "little")
        top = (1 << (8 * width)) - 1
        value = data.draw(st.one_of(
            st.sampled_from([0, 1, top, top - 1, old + 1, max(old - 1, 0), old * 2, old // 2, 0x8000, 0x0800]),
            st.integers(0, top),
        ), label="value")
        raw[offset : offset + width] = (value & top).to_bytes(width, "little")
    return bytes(raw)


# --- 3. manifest edits, checksums fixed ------------------------------------------------------------------
KEYS = ["$type", "$ref", "dtype", "shape", "key", "length", "nbytes", "items", "data", "base64", "view", "class",
        "name", "value", "hex", "kind", "iso", "tz", "tz_offset_seconds", "bits", "real", "imag", "frozen",
        "default_factory", "order", "device", "parameter", "requires_grad", "storage_offset", "stride", "attrs",
        "fields", "config", "state_dict", "columns", "index", "bytearray", "fold", "module"]
leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([0, 1, -1, 2**31, 2**62, 2**64]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
    st.sampled_from(MEMBERS + HANDLERS + ["manifest.json", "metadata.json", "../x", "/etc/passwd", "<f8", "|O",
                                          "float32", "object", "cpu", "meta", "nan", "inf", "plain", "nodes",
                                          "OrderedDict", "defaultdict", "os:system", "builtins:eval"]),
)
json_values = st.recursive(
    leaves,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6)), kids, max_size=5),
        st.fixed_dictionaries({"$type": st.sampled_from(HANDLERS)},
                              optional={k: kids for k in KEYS[1:20]}),
    ),
    max_leaves=12,
)


def _slots(tree: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) in a JSON tree, the root's parent included."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        keys = list(node) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else []
        for k in keys:
            out.append((node, k))
            todo.append(node[k])
    return out


@given(base=base_names, data=st.data())
@FUZZ
@run("manifest")
def test_fuzz_manifest(base: str, data: st.DataObject) -> bytes:
    parts = PARTS[base].copy()
    for _ in range(data.draw(st.integers(1, 3), label="n")):
        slots = _slots(parts.manifest)
        container, key = data.draw(st.sampled_from(slots), label="where")
        action = data.draw(st.sampled_from(["replace", "delete", "copy", "field"]), label="action")
        if action == "delete" and isinstance(container, dict):
            del container[key]
        elif action == "copy":  # another node of the same archive here (shares a member, nests a ref...)
            other, okey = data.draw(st.sampled_from(slots), label="from")
            container[key] = json.loads(json.dumps(other[okey]))
        elif action == "field" and isinstance(container[key], dict):
            container[key][data.draw(st.sampled_from(KEYS), label="field")] = data.draw(json_values, label="v")
        else:
            container[key] = data.draw(json_values, label="value")
    return pack(parts)


# --- 4. metadata edits, the rest of the checksums fixed --------------------------------------------------
@given(base=base_names, data=st.data())
@FUZZ
@run("metadata")
def test_fuzz_metadata(base: str, data: st.DataObject) -> bytes:
    parts = PARTS[base].copy()
    edits = data.draw(st.lists(st.tuples(
        st.sampled_from(["manifest.json", *sorted(parts.members)]),
        st.sampled_from(["size", "stored_size", "codec", "crc32", "content_crc32", "entries", "offset", "esize"]),
        st.one_of(json_values, st.integers(-5, 10**10), st.sampled_from(["none", "zstd", "00000000", "gzip"])),
    ), min_size=1, max_size=3), label="edits")
    top = data.draw(st.one_of(st.none(), st.tuples(
        st.sampled_from(["format", "format_version", "members", "compression", "settings"]), json_values)), label="top")

    def edit(meta: dict[str, Any]) -> None:
        for member, field, value in edits:
            entry = meta["members"].get(member)
            if not isinstance(entry, dict):
                continue
            labelled = entry.get("entries")
            if field in ("offset", "esize") and isinstance(labelled, dict) and labelled:
                e = labelled[sorted(labelled)[0]]
                e["offset" if field == "offset" else "size"] = value
            else:
                entry[field] = value
        if top is not None:
            meta[top[0]] = top[1]

    return pack(parts, meta_edit=edit)


# --- 5. member bytes, checksums fixed -----------------------------------------------------------------------
@given(base=base_names, data=st.data())
@FUZZ
@run("member-bytes")
def test_fuzz_member_bytes(base: str, data: st.DataObject) -> bytes:
    parts = PARTS[base].copy()
    name = data.draw(st.sampled_from(sorted(parts.members)), label="member")
    content = bytearray(parts.members[name])
    for _ in range(data.draw(st.integers(1, 4), label="n")):
        op = data.draw(st.sampled_from(["flip", "truncate", "insert", "head"]), label="op")
        if not content:
            break
        pos = data.draw(st.integers(0, len(content) - 1), label="pos")
        if op == "head":  # the format header: the first 200 bytes
            pos = min(pos, 199, len(content) - 1)
            content[pos] ^= data.draw(st.integers(1, 255), label="x")
        elif op == "flip":
            content[pos] ^= data.draw(st.integers(1, 255), label="x")
        elif op == "truncate":
            del content[pos:]
        else:
            content[pos:pos] = data.draw(st.binary(min_size=1, max_size=16), label="ins")
    parts.members[name] = bytes(content)
    _fit_sizes(parts, name)
    return pack(parts)


def _fit_sizes(parts: Parts, name: str) -> None:
    """Make the manifest's sizes and the per-entry checksum ranges follow a member that changed (so the
    damage reaches the format parsers instead of stopping at the metadata checks)."""
    content = parts.members[name]
    for container, key in _slots(parts.manifest):
        node = container[key]
        if isinstance(node, dict) and node.get("$ref") == name and "nbytes" in node:
            node["nbytes"] = len(content)
    if name not in parts.entries:
        return
    entries = {}
    try:
        n = struct.unpack_from("<Q", content, 0)[0]
        entries["$header"] = (0, min(8 + n, len(content)))
        header = json.loads(content[8 : 8 + n])
        for k, info in header.items():
            if k != "__metadata__":
                begin, end = info["data_offsets"]
                if type(begin) is int and type(end) is int and 0 <= begin <= end and 8 + n + end <= len(content):
                    entries[k] = (8 + n + begin, end - begin)
    except (struct.error, ValueError, TypeError, KeyError, AttributeError):
        pass
    parts.entries[name] = entries


# --- 6. member format headers (.npy dict, .safetensors JSON), checksums fixed -------------------------------
npy_descr = st.one_of(st.sampled_from(["<f8", "<f4", "|u1", "<i8", "|b1", "<c16", "|O", "|V8", "<U3", "|S0", "<M8[s]",
                                       "(2,)<f4", ">f8", "<f2", "<m8[ns]", "|S5"]), st.text(max_size=8),
                      st.lists(st.tuples(st.text(max_size=3), st.sampled_from(["<f8", "|O"])), max_size=2))
npy_shape = st.one_of(st.lists(st.integers(-2, 2**40), max_size=4).map(tuple), json_values)


@given(base=base_names, data=st.data())
@FUZZ
@run("member-headers")
def test_fuzz_member_headers(base: str, data: st.DataObject) -> bytes:
    parts = PARTS[base].copy()
    names = [n for n in sorted(parts.members) if ".npy" in n or ".safetensors" in n]
    name = data.draw(st.sampled_from(names), label="member")
    content = parts.members[name]
    if ".npy" in name:
        hlen = struct.unpack_from("<H", content, 8)[0]
        header = {"descr": data.draw(npy_descr, label="descr"), "fortran_order": data.draw(
            st.one_of(st.booleans(), json_values), label="fortran"), "shape": data.draw(npy_shape, label="shape")}
        if data.draw(st.sampled_from([False] * 9 + [True]), label="extra"):
            header[data.draw(st.text(max_size=5), label="k")] = 1
        text = repr(header).encode("latin1", "replace")
        text += b" " * ((-(10 + len(text) + 1)) % 64) + b"\n"
        parts.members[name] = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text) % 65536) + text + content[10 + hlen :]
    else:
        n = struct.unpack_from("<Q", content, 0)[0]
        header = json.loads(content[8 : 8 + n])
        for _ in range(data.draw(st.integers(1, 3), label="n")):
            slots = _slots(header)
            container, key = data.draw(st.sampled_from(slots), label="where")
            container[key] = data.draw(st.one_of(json_values, st.integers(0, 4096)), label="value")
        text = json.dumps(header).encode()
        text += b" " * ((-(8 + len(text))) % 64)
        parts.members[name] = struct.pack("<Q", len(text)) + text + content[8 + n :]
    _fit_sizes(parts, name)
    return pack(parts)


# --- 7. handler nodes: every registered "$type" with fields drawn from what handlers read -------------------
field_values = st.one_of(
    json_values,
    st.lists(st.integers(-1, 40), max_size=4),  # shapes, strides
    st.sampled_from(["<f8", "<i4", "|b1", "<M8[s]", "|S0", "float32", "bfloat16", "int8", "object", "Decimal",
                     "UUID", "timedelta", "date", "time", "datetime", "F", "C", "America", "UTC", "Etc/GMT+5",
                     "zarchive.options:Settings", "zarchive.options:ErrorMode", "collections:OrderedDict"]),
)


@given(base=base_names, data=st.data())
@FUZZ
@run("handler-nodes")
def test_fuzz_handler_nodes(base: str, data: st.DataObject) -> bytes:
    parts = PARTS[base].copy()
    node: dict[str, Any] = {"$type": data.draw(st.sampled_from(HANDLERS), label="type")}
    for key in data.draw(st.lists(st.sampled_from(KEYS[1:]), max_size=8, unique=True), label="keys"):
        node[key] = data.draw(field_values, label=key)
    container, key = data.draw(st.sampled_from(_slots(parts.manifest)), label="where")
    container[key] = node
    return pack(parts)


def test_fuzz_bases_are_valid() -> None:
    """Control: the unmutated archives read, and a rebuilt one reads too (pack/unpack are faithful)."""
    for label, data in BASES.items():
        assert attempt(data) == "ok", label
        assert attempt(pack(PARTS[label])) == "ok", label
    assert dumps  # (used by the corpus tools; imported here so a broken craft module fails loudly)


@pytest.fixture(scope="module", autouse=True)
def report_counts() -> Any:
    yield
    if LONG_RUN:
        print(f"\nfuzz: {sum(COUNTS.values())} cases survived: {COUNTS}")
