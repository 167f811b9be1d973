"""Fuzzing every input kind through every entry point (issue 24, item 8): valid base files of each kind
(torch .pt, .safetensors, .npy, .npz, .zanj, a DCP checkpoint directory, a .zarc with exports; from
tests/hostile/kinds.py) are mutated, and `read`, `open` + fetch of every leaf, `audit`, `verify`, the
weights hash, a diff with itself (and `onnx_session` for exports) must each succeed or raise a ZArchiveError, nothing else;
on one case in ten every CLI command runs too and must exit 0, 1 or 2. tests/test_fuzz.py does the
same for .zarc files; its settings are reused here.

Mutators: raw bytes (any kind, DCP shards and index included); zip header fields (the zip kinds);
pickle opcodes spliced into a .pt's data.pkl; .safetensors and .npy headers; a .zanj's JSON; a DCP
index's tensor rows; an export's manifest entry and ONNX bytes.

The normal run is short and derandomized: about 100 cases in all. The long run gives each of the seven
mutators ZARCHIVE_FUZZ_EXAMPLES cases, as tests/test_fuzz.py does (14286 each: 100,002 cases), every
case under an address-space limit of 4 GiB over the process's mappings at the start:

    ZARCHIVE_FUZZ_EXAMPLES=14286 .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_fuzz_kinds.py -s
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import functools
import io
import json
import os
import shutil
import struct
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hostile.cases_foreign import glob, small, uni
from hostile.craft import pack, unpack, zip_fields
from hostile.kinds import KINDS, deflated, edit_dcp_index, stored, write_base, zip_of
from hostile.strategies import byte_ops, json_values, slots
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fuzz import FUZZ, LONG_RUN

import zarchive
from zarchive.cli import main as cli_main
from zarchive.inspection.diff import diff_archives

MUTATORS = 7
# per mutator: as tests/test_fuzz.py in the long run; about 100 in all otherwise
EXAMPLES = int(os.environ["ZARCHIVE_FUZZ_EXAMPLES"]) if LONG_RUN else max(1, 100 // MUTATORS)
KIND_FUZZ = settings(FUZZ, max_examples=EXAMPLES)
FUZZ_KINDS = tuple(k for k in KINDS if k not in ("zarc", "store"))  # (.zarc: tests/test_fuzz.py)
COUNTS: dict[str, int] = {}
SUFFIX = {"pt": ".pt", "safetensors": ".safetensors", "npy": ".npy", "npz": ".npz", "zanj": ".zanj",
          "exports": ".zarc"}  # fmt: skip


def _bases() -> dict[str, dict[str, bytes]]:
    """Each kind's base as {relative file name: bytes} (a DCP directory: its index and shards)."""
    out: dict[str, dict[str, bytes]] = {}
    with tempfile.TemporaryDirectory() as d:
        for kind in FUZZ_KINDS:
            path = write_base(kind, Path(d) / kind)
            files = sorted(path.iterdir()) if path.is_dir() else [path]
            out[kind] = {p.name: p.read_bytes() for p in files}
    return out


BASES = _bases()
WORK = Path(tempfile.mkdtemp(prefix="zarchive-fuzz-kinds-"))
atexit.register(shutil.rmtree, WORK, ignore_errors=True)
JSON = json_values(["arr.npy", "w", "b", "model.w@0,0"], ["torch.Tensor", "numpy.ndarray", "exports"])


def _files(kind: str, files: dict[str, bytes]) -> Path:
    """Write a case's files; returns the path an entry point gets (a file, or the DCP directory)."""
    shutil.rmtree(WORK / "case", ignore_errors=True)
    d = WORK / "case" / "ck"
    d.mkdir(parents=True)
    for name, data in files.items():
        (d / name).write_bytes(data)
    return d if kind == "dcp" else d / next(iter(files))


def _walk(arc: Any) -> None:
    todo, seen = [""], 0
    while todo and seen < 200:
        path, seen = todo.pop(), seen + 1
        try:
            keys = arc.keys(path)
            if keys:
                todo += [f"{path}/{k}".strip("/") for k in keys[:20]]
            else:
                arc.get(path)
        except zarchive.ZArchiveError:
            pass


def _cli(*argv: str) -> int:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli_main(list(argv))
    if code not in (0, 1, 2):
        print(out.getvalue()[-2000:])
    return code


def attempt(kind: str, files: dict[str, bytes]) -> str:
    """Every entry point on one case: only ZArchiveErrors out of the library, CLI exits 0, 1 or 2.
    Returns the outcome of the plain read ("ok" or "error")."""
    start = time.monotonic()
    path = _files(kind, files)
    outcome = "ok"
    calls: list[Callable[[], Any]] = [
        lambda: zarchive.read(path),
        lambda: zarchive.audit(path),
        lambda: zarchive.verify(path),
    ]
    for i, call in enumerate(calls):
        try:
            call()
        except zarchive.ZArchiveError:
            outcome = "error" if i == 0 else outcome
    try:
        with zarchive.open(path) as arc:
            _walk(arc)
            diff = lambda: diff_archives(arc, arc, checksums=False)  # every tensor read and compared
            for extra in (arc.weights_hash, diff, *((lambda: arc.onnx_session(),) if kind == "exports" else ())):
                try:
                    extra()
                except zarchive.ZArchiveError:
                    pass
    except zarchive.ZArchiveError:
        pass
    if zlib.crc32(b"".join(files.values())) % 10 == 0:
        out = str(WORK / "case" / "out")
        leaf = {"npy": "", "npz": "w", "dcp": "model/w"}.get(kind, "w")
        p = str(path)
        commands = [["ls", p], ["show", p], ["cat", p, leaf], ["hash", p], ["verify", p], ["audit", p],
                    ["convert", "-f", p, out + ".zarc"], ["diff", "--no-checksums", p, p]]  # fmt: skip
        commands += [["extract", "-f", p, out]] if kind in ("zanj", "exports") else []
        for argv in commands:
            code = _cli(*argv)
            assert code in (0, 1, 2), f"zarchive {' '.join(argv)} exited {code} (unexpected)"
    assert time.monotonic() - start < 30, "one case took more than 30 s"
    return outcome


def run(name: str) -> Callable[[Callable[..., tuple[str, dict[str, bytes]]]], Callable[..., None]]:
    def wrap(mutate: Callable[..., tuple[str, dict[str, bytes]]]) -> Callable[..., None]:
        @functools.wraps(mutate)
        def check(**kw: Any) -> None:
            attempt(*mutate(**kw))
            COUNTS[name] = COUNTS.get(name, 0) + 1

        return check

    return wrap


kinds = st.sampled_from(FUZZ_KINDS)
ZIP_KINDS = ("pt", "npz", "zanj", "exports")


def _apply(data: bytes, ops: list[tuple[str, Any, Any]]) -> bytes:
    out = bytearray(data)
    for op, where, arg in ops:
        if not out:
            break
        pos = max(0, len(out) - where) if op == "tail" else min(int(where * len(out)), len(out) - 1)
        if op in ("flip", "tail"):
            out[pos] ^= arg
        elif op == "truncate":
            del out[pos:]
        elif op == "insert":
            out[pos:pos] = arg
        else:
            del out[pos : pos + arg]
    return bytes(out)


def _repack(data: bytes, edit: Callable[[str, bytes], bytes]) -> bytes:
    """A zip's members, each replaced by edit(name, bytes), deflated where they were."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        infos = z.infolist()
        members = [(i.filename, edit(i.filename, z.read(i)), i.compress_type) for i in infos]
    return zip_of([deflated(n, d) if m == 8 else stored(n, d) for n, d, m in members])


# --- 1. raw bytes of any file of any kind ------------------------------------------------------------------
@given(kind=kinds, data=st.data(), ops=byte_ops)
@KIND_FUZZ
@run("bytes")
def test_fuzz_kinds_raw_bytes(
    kind: str, data: st.DataObject, ops: list[tuple[str, Any, Any]]
) -> tuple[str, dict[str, bytes]]:
    files = dict(BASES[kind])
    name = data.draw(st.sampled_from(sorted(files)), label="file")
    files[name] = _apply(files[name], ops)
    return kind, files


# --- 2. zip header fields ------------------------------------------------------------------------------------
@given(kind=st.sampled_from([*ZIP_KINDS, "dcp"]), data=st.data())
@KIND_FUZZ
@run("zip-fields")
def test_fuzz_kinds_zip_fields(kind: str, data: st.DataObject) -> tuple[str, dict[str, bytes]]:
    files = dict(BASES[kind])
    name = data.draw(st.sampled_from(sorted(files)), label="file")
    raw = bytearray(files[name])
    fields = zip_fields(bytes(raw))
    for _ in range(data.draw(st.integers(1, 3), label="n")):
        offset, width, _label = data.draw(st.sampled_from(fields), label="field")
        old = int.from_bytes(raw[offset : offset + width], "little")
        top = (1 << (8 * width)) - 1
        value = data.draw(st.one_of(st.sampled_from([0, 1, top, old + 1, max(old - 1, 0), old * 2, 0x0800]),
                                    st.integers(0, top)), label="value")  # fmt: skip
        raw[offset : offset + width] = (value & top).to_bytes(width, "little")
    files[name] = bytes(raw)
    return kind, files


# --- 3. pickle opcodes spliced into a .pt's data.pkl ------------------------------------------------------------
SNIPPETS = [b"(", b"t", b")", b"\x85", b"\x86", b"}", b"]", b"s", b"u", b"a", b"e", b"R", b"b", b"0", b"2", b"N",
            b"h\x00", b"q\x00", b"h\x01", b"j\xff\xff\xff\xff", b"\x94", small(7), small(70000), b"\x8a\x09" + bytes(8) + b"\x01",
            uni("_metadata"), uni("x" * 40), glob("torch", "Size"), glob("collections", "OrderedDict"),
            glob("torch._utils", "_rebuild_tensor_v2"), glob("torch", "FloatStorage"), glob("posix", "system"),
            b"\x8c\x03abc", b"\x8d" + struct.pack("<Q", 1 << 40), b"X" + struct.pack("<I", 1 << 30)]  # fmt: skip


@given(data=st.data())
@KIND_FUZZ
@run("pickle")
def test_fuzz_kinds_pickle(data: st.DataObject) -> tuple[str, dict[str, bytes]]:
    def edit(name: str, content: bytes) -> bytes:
        if not name.endswith("data.pkl"):
            return content
        out = bytearray(content)
        for _ in range(data.draw(st.integers(1, 4), label="n")):
            pos = data.draw(st.integers(0, max(0, len(out) - 1)), label="pos")
            op = data.draw(st.sampled_from(["insert", "replace", "delete", "repeat"]), label="op")
            snip = data.draw(st.sampled_from(SNIPPETS), label="snippet")
            if op == "insert":
                out[pos:pos] = snip
            elif op == "replace":
                out[pos : pos + len(snip)] = snip
            elif op == "delete":
                del out[pos : pos + data.draw(st.integers(1, 8), label="len")]
            else:  # a snippet many times: deep nesting, long memo chains
                out[pos:pos] = snip * data.draw(st.integers(2, 3000), label="times")
        return bytes(out)

    return "pt", {n: _repack(d, edit) for n, d in BASES["pt"].items()}


# --- 4. .safetensors and .npy headers ------------------------------------------------------------------------
@given(kind=st.sampled_from(["safetensors", "npy", "npz"]), data=st.data())
@KIND_FUZZ
@run("headers")
def test_fuzz_kinds_headers(kind: str, data: st.DataObject) -> tuple[str, dict[str, bytes]]:
    def npy(content: bytes) -> bytes:
        hlen = struct.unpack_from("<H", content, 8)[0]
        header = {
            "descr": data.draw(st.sampled_from(["<f4", "<f8", "|O", "|V2147483648", "<U99999999", "|S0", "(2,)<f4"]),
                               label="descr"),
            "fortran_order": data.draw(st.booleans(), label="fortran"),
            "shape": data.draw(st.lists(st.integers(-2, 2**62), max_size=4).map(tuple), label="shape"),
        }  # fmt: skip
        text = repr(header).encode("latin1", "replace")
        text += b" " * ((-(10 + len(text) + 1)) % 64) + b"\n"
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + content[10 + hlen :]

    if kind == "npz":
        return kind, {n: _repack(d, lambda _n, c: npy(c) if data.draw(st.booleans(), label="which") else c)
                      for n, d in BASES[kind].items()}  # fmt: skip
    ((name, content),) = BASES[kind].items()
    if kind == "npy":
        return kind, {name: npy(content)}
    n = struct.unpack_from("<Q", content, 0)[0]
    header = json.loads(content[8 : 8 + n])
    for _ in range(data.draw(st.integers(1, 3), label="n")):
        container, key = data.draw(st.sampled_from(slots(header)), label="where")
        container[key] = data.draw(st.one_of(JSON, st.integers(0, 4096), st.lists(st.integers(-1, 2**40), max_size=3)),
                                   label="value")  # fmt: skip
    text = json.dumps(header).encode()
    return kind, {name: struct.pack("<Q", len(text)) + text + content[8 + n :]}


# --- 5. a .zanj's JSON ----------------------------------------------------------------------------------------
ZANJ_WORDS = ["numpy.ndarray:external", "numpy.ndarray:array_list_meta", "torch.Tensor:array_list_meta",
              "pandas.DataFrame", "list:external", "arr.npy", "float64", "int8", [12000], [2, 2], 10**12, [{}] * 50]  # fmt: skip


@given(data=st.data())
@KIND_FUZZ
@run("zanj")
def test_fuzz_kinds_zanj(data: st.DataObject) -> tuple[str, dict[str, bytes]]:
    def edit(name: str, content: bytes) -> bytes:
        if name != "__zanj__.json":
            return content
        root = json.loads(content)
        for _ in range(data.draw(st.integers(1, 3), label="n")):
            container, key = data.draw(st.sampled_from(slots(root)), label="where")
            # a copy: a later edit may write inside it, and ZANJ_WORDS' lists must stay as they are
            container[key] = copy.deepcopy(data.draw(st.one_of(JSON, st.sampled_from(ZANJ_WORDS)), label="value"))
        return json.dumps(root).encode()

    return "zanj", {n: _repack(d, edit) for n, d in BASES["zanj"].items()}


# --- 6. a DCP index's tensor rows -------------------------------------------------------------------------------
@given(data=st.data())
@KIND_FUZZ
@run("dcp-index")
def test_fuzz_kinds_dcp_index(data: st.DataObject) -> tuple[str, dict[str, bytes]]:
    d = WORK / "dcp-edit"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for name, content in BASES["dcp"].items():
        (d / name).write_bytes(content)
    values = st.one_of(JSON, st.integers(-2, 2**40), st.lists(st.integers(-1, 9), max_size=3),
                       st.sampled_from(["model.w@0,0", "model.b@0", "float32", "bfloat16", "object", 0, 1, 7]))  # fmt: skip

    def edit(doc: dict[str, Any]) -> None:
        for _ in range(data.draw(st.integers(1, 3), label="n")):
            action = data.draw(st.sampled_from(["field", "copy_chunk", "copy_tensor"]), label="action")
            tensors = doc.get("tensors") if isinstance(doc, dict) else None
            tensors = tensors if isinstance(tensors, list) else []  # an earlier edit may have replaced the list
            t = tensors[data.draw(st.integers(0, len(tensors) - 1), label="tensor")] if tensors else None
            if action == "copy_chunk" and isinstance(t, dict) and isinstance(t.get("chunks"), list) and t["chunks"]:
                t["chunks"] = t["chunks"] * data.draw(st.integers(2, 64), label="times")
            elif action == "copy_tensor" and t:
                tensors.append(json.loads(json.dumps(t)))
            else:
                container, key = data.draw(st.sampled_from(slots(doc)), label="where")
                container[key] = data.draw(values, label="value")

    try:
        edit_dcp_index(d, edit)
    except zarchive.ZArchiveError:
        pass  # (the index's writer refuses what it cannot save: the case stays as it is)
    return "dcp", {p.name: p.read_bytes() for p in sorted(d.iterdir())}


# --- 7. exports: the manifest entry and the ONNX bytes ------------------------------------------------------------
EXPORT_PARTS = unpack(next(iter(BASES["exports"].values())))


@given(data=st.data())
@KIND_FUZZ
@run("exports")
def test_fuzz_kinds_exports(data: st.DataObject) -> tuple[str, dict[str, bytes]]:
    parts = EXPORT_PARTS.copy()
    if data.draw(st.booleans(), label="onnx bytes"):
        ops = data.draw(byte_ops, label="ops")
        parts.members["exports/model.onnx"] = _apply(parts.members["exports/model.onnx"], ops)
        parts.manifest["exports"]["onnx"]["size"] = len(parts.members["exports/model.onnx"])
    else:
        entry = parts.manifest["exports"][data.draw(st.sampled_from(["onnx", "torchscript"]), label="which")]
        key = data.draw(st.sampled_from(sorted(entry)), label="field")
        entry[key] = data.draw(st.one_of(JSON, st.integers(-1, 2**41)), label="value")
    return "exports", {"base.zarc": pack(parts)}


def test_fuzz_kinds_bases_are_valid() -> None:
    """Control: every base reads through every entry point, and its plain read succeeds."""
    for kind in FUZZ_KINDS:
        assert attempt(kind, BASES[kind]) == "ok", kind


@pytest.fixture(scope="module", autouse=True)
def report_counts() -> Any:
    yield
    shutil.rmtree(WORK, ignore_errors=True)
    if LONG_RUN or os.environ.get("ZARCHIVE_FUZZ_REPORT"):
        print(f"\nfuzz kinds: {sum(COUNTS.values())} cases survived: {COUNTS}")
