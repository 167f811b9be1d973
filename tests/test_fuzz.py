"""Fuzzing the reader: hypothesis mutates valid archives, and reading (load, browse, verify) must either
succeed or raise a ZArchiveError subclass; any other exception type is a bug.

Seven mutators, from blind to structure-aware: raw bytes (flips, truncation, insertion, deletion); zip
header fields; manifest JSON edits; metadata edits; member bytes; member format headers (.npy,
.safetensors); nodes of every registered handler type, with fields drawn from what handlers read. All
but the first two repack the archive with every checksum recomputed (see tests/hostile/craft.py), so
the damage reaches the layers under the integrity checks.

The normal run is short and derandomized. The long run (the README quotes its count):

    ZARCHIVE_FUZZ_EXAMPLES=14286 .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_fuzz.py -s

prints how many cases each mutator survived (100,002 in all with that setting, about 15 minutes on
two cores, each case under an address-space limit).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import resource
import struct
import tempfile
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hostile.craft import dumps, pack, unpack, zip_fields
from hostile.filling import fill_declared
from hostile.make_corpus import base as corpus_base
from hostile.strategies import KEYS, byte_ops, field_values, fit_sizes, json_values, npy_descrs, slots
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.cli import main as cli_main
from zarchive.engine.registry import default_handlers
from zarchive.inspection.diff import diff_archives

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
CLI_CASES: list[int] = []  # cases that also ran every CLI command
# In the long run every case runs under an address-space limit: 4 GiB more than the process has mapped
# when the run starts (torch alone maps several GiB it never touches), so a case that tries to allocate
# what the file does not hold fails (a MemoryError that is not a ZArchiveError fails the test).
if LONG_RUN:
    with open("/proc/self/status") as _status:
        _vm = next(int(line.split()[1]) * 1024 for line in _status if line.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (_vm + (4 << 30), resource.RLIM_INFINITY))


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
    try:  # an Arrow column (format 1.5 arrow.array: bitmaps, offsets, text, a struct child, a dictionary)
        import pyarrow as pa

        obj["arrow"] = pa.array([{"k": ["x", None]}, None, {"k": []}] * 100)
        obj["arrow_dict"] = pa.array(["a", "b", None] * 100).dictionary_encode()
    except ImportError:
        pass
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for label, kw in {"zstd": {}, "plain": {"compress": False}, "weights": {"compress_weights": True}}.items():
            path = os.path.join(d, f"{label}.zarc")
            extra = {"layer": {"w": torch.randn(2048, generator=g) * 0.02}} if label == "weights" else {}
            zarchive.save({**obj, **extra}, path, **kw)  # weights: float members stored bgzstd (spec 4.6)
            with open(path, "rb") as f:
                out[label] = f.read()
    out["corpus"] = pack(corpus_base())
    return out


BASES = _bases()
PARTS = {k: unpack(v) for k, v in BASES.items()}
MEMBERS = sorted({m for p in PARTS.values() for m in p.members})
HANDLERS = [h.name for h in default_handlers()]
JSON = json_values(MEMBERS, HANDLERS)
FIELDS = field_values(JSON)


def _cli(*argv: str) -> int:
    """One CLI command in this process, its output discarded: the exit status."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli_main(list(argv))
    if code == 3:  # say what the unexpected failure was
        print(out.getvalue()[-2000:])
    return code


def attempt(data: bytes) -> str:
    """Everything a reader may do with a file: read (mapped, in memory, with trusted=(), generically,
    tensors as numpy), open and browse and fetch (and read tensors into memory of the caller's), audit, verify, diff with
    itself, and every CLI command (ls, show, meta, cat, verify, audit, extract, convert, diff: on one case in ten, chosen by the bytes' CRC). Only
    ZArchiveErrors may come out of the library, and the CLI exits 0, 1 or 2, never 3. Returns the
    outcome of the plain read."""
    start = time.monotonic()
    outcome = "ok"
    for kw in ({"lazy": True}, {"lazy": False}, {"trusted": ()}, {"unresolved": "generic"}, {"tensors": "numpy"}):
        try:
            zarchive.read(data, **kw)
        except zarchive.ZArchiveError:
            if kw.get("lazy"):
                outcome = "error"
    try:
        zarchive.audit(data)
    except zarchive.ZArchiveError:
        pass
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
                fill_declared(arc, path)
                todo += [f"{path}/{k}".strip("/") for k in arc.keys(path)[:10]]
    except zarchive.ZArchiveError:
        pass
    try:
        with zarchive.open(data) as arc:
            diff_archives(arc, arc, checksums=False)  # every tensor read and compared with itself
    except zarchive.ZArchiveError:
        pass
    if zlib.crc32(data) % 10:  # the CLI costs ten times the rest: every command on one case in ten
        assert time.monotonic() - start < 30, "one case took more than 30 s"
        return outcome
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "case.zarc")
        with open(path, "wb") as f:
            f.write(data)
        commands = [
            ("ls", path), ("show", path), ("meta", path), ("verify", path), ("audit", path),
            ("cat", path, "model/w"), ("extract", path, os.path.join(d, "out")),
            ("convert", path, os.path.join(d, "out.safetensors")), ("diff", "--no-checksums", path, path),
            ("view", "--html", os.path.join(d, "view.html"), "--no-verify", path),
        ]  # fmt: skip
        CLI_CASES.append(1)
        for argv in commands:
            code = _cli(*argv)
            assert code in (0, 1, 2), f"zarchive {argv[0]} exited {code} (unexpected)"
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
        value = data.draw(
            st.one_of(
                st.sampled_from([0, 1, top, top - 1, old + 1, max(old - 1, 0), old * 2, old // 2, 0x8000, 0x0800]),
                st.integers(0, top),
            ),
            label="value",
        )
        raw[offset : offset + width] = (value & top).to_bytes(width, "little")
    return bytes(raw)


# --- 3. manifest edits, checksums fixed ------------------------------------------------------------------
@given(base=base_names, data=st.data())
@FUZZ
@run("manifest")
def test_fuzz_manifest(base: str, data: st.DataObject) -> bytes:
    parts = PARTS[base].copy()
    for _ in range(data.draw(st.integers(1, 3), label="n")):
        places = slots(parts.manifest)
        container, key = data.draw(st.sampled_from(places), label="where")
        action = data.draw(st.sampled_from(["replace", "delete", "copy", "field"]), label="action")
        if action == "delete" and isinstance(container, dict):
            del container[key]
        elif action == "copy":  # another node of the same archive here (shares a member, nests a ref...)
            other, okey = data.draw(st.sampled_from(places), label="from")
            container[key] = json.loads(json.dumps(other[okey]))
        elif action == "field" and isinstance(container[key], dict):
            container[key][data.draw(st.sampled_from(KEYS), label="field")] = data.draw(JSON, label="v")
        else:
            container[key] = data.draw(JSON, label="value")
    return pack(parts)


# --- 4. metadata edits, the rest of the checksums fixed --------------------------------------------------
@given(base=base_names, data=st.data())
@FUZZ
@run("metadata")
def test_fuzz_metadata(base: str, data: st.DataObject) -> bytes:
    parts = PARTS[base].copy()
    edits = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(["manifest.json", *sorted(parts.members)]),
                st.sampled_from(
                    ["size", "stored_size", "codec", "crc32", "content_crc32", "entries", "offset", "esize"]
                ),
                st.one_of(JSON, st.integers(-5, 10**10), st.sampled_from(["none", "zstd", "00000000", "gzip"])),
            ),
            min_size=1,
            max_size=3,
        ),
        label="edits",
    )
    top = data.draw(
        st.one_of(
            st.none(),
            st.tuples(st.sampled_from(["format", "format_version", "members", "compression", "settings"]), JSON),
        ),
        label="top",
    )

    def edit(meta: dict[str, Any]) -> None:
        for member, field, value in edits:
            entry = meta["members"].get(member)
            if not isinstance(entry, dict):
                continue
            labelled = entry.get("entries")
            first = labelled[min(labelled)] if isinstance(labelled, dict) and labelled else None
            if field in ("offset", "esize") and isinstance(first, dict):
                first["offset" if field == "offset" else "size"] = value
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
    fit_sizes(parts, name)
    return pack(parts)


# --- 6. member format headers (.npy dict, .safetensors JSON), checksums fixed -------------------------------
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
        header = {
            "descr": data.draw(npy_descrs(), label="descr"),
            "fortran_order": data.draw(st.one_of(st.booleans(), JSON), label="fortran"),
            "shape": data.draw(st.one_of(st.lists(st.integers(-2, 2**40), max_size=4).map(tuple), JSON), label="shape"),
        }
        if data.draw(st.sampled_from([False] * 9 + [True]), label="extra"):
            header[data.draw(st.text(max_size=5), label="k")] = 1
        text = repr(header).encode("latin1", "replace")
        text += b" " * ((-(10 + len(text) + 1)) % 64) + b"\n"
        parts.members[name] = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text) % 65536) + text + content[10 + hlen :]
    else:
        n = struct.unpack_from("<Q", content, 0)[0]
        header = json.loads(content[8 : 8 + n])
        for _ in range(data.draw(st.integers(1, 3), label="n")):
            places = slots(header)
            container, key = data.draw(st.sampled_from(places), label="where")
            container[key] = data.draw(st.one_of(JSON, st.integers(0, 4096)), label="value")
        text = json.dumps(header).encode()
        text += b" " * ((-(8 + len(text))) % 64)
        parts.members[name] = struct.pack("<Q", len(text)) + text + content[8 + n :]
    fit_sizes(parts, name)
    return pack(parts)


# --- 7. handler nodes: every registered "$type" with fields drawn from what handlers read -------------------
@given(base=base_names, data=st.data())
@FUZZ
@run("handler-nodes")
def test_fuzz_handler_nodes(base: str, data: st.DataObject) -> bytes:
    parts = PARTS[base].copy()
    node: dict[str, Any] = {"$type": data.draw(st.sampled_from(HANDLERS), label="type")}
    for key in data.draw(st.lists(st.sampled_from(KEYS[1:]), max_size=8, unique=True), label="keys"):
        node[key] = data.draw(FIELDS, label=key)
    container, key = data.draw(st.sampled_from(slots(parts.manifest)), label="where")
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
    if LONG_RUN or os.environ.get("ZARCHIVE_FUZZ_REPORT"):
        print(f"\nfuzz: {sum(COUNTS.values())} cases survived: {COUNTS} ({len(CLI_CASES)} with every CLI command)")
