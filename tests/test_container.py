"""Properties of the file itself: a standard zip that other tools open, strict JSON, aligned members
that numpy / safetensors / zstd read after `unzip`, reproducible bytes, complete metadata, and the
compression policy. Also the zip writer's zip64 path and crc32_combine."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.container.archive_reader import ArchiveReader
from zarchive.container.archive_writer import ENTRIES_FROM
from zarchive.container.crc import crc32_combine
from zarchive.container.source import BytesSource, MappedSource
from zarchive.container.zipreader import ZipReader
from zarchive.container.zipwriter import ZipWriter

needs_unzip = pytest.mark.skipif(shutil.which("unzip") is None, reason="Info-ZIP unzip is not installed")
needs_jq = pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
needs_zstd = pytest.mark.skipif(shutil.which("zstd") is None, reason="the zstd command-line tool is not installed")


def sample_object() -> dict[str, Any]:
    """Something of everything: inline JSON, .npy (float and int), .safetensors, .jsonl, .bin members."""
    rng = np.random.default_rng(1)
    torch.manual_seed(1)
    return {
        "config": {"lr": 1e-3, "layers": [64, 64], "name": "run ✓"},
        "weights": rng.standard_normal((64, 80)).astype(np.float32),
        "counts": np.arange(5000, dtype=np.int64) % 7,
        "model": {"w": torch.randn(32, 48), "b": torch.zeros(48), "steps": torch.arange(100)},
        "history": [{"step": i, "loss": 1 / (i + 1)} for i in range(400)],
        "blob": bytes(range(256)) * 40,
        "special": [float("nan"), float("-inf"), 2**80],
    }


@pytest.fixture(params=[True, False], ids=["zstd", "plain"])
def archive(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / "sample.zarc"
    zarchive.save(sample_object(), path, compress=request.param)
    return path


@pytest.fixture
def extracted(archive: Path, tmp_path: Path) -> Path:
    if shutil.which("unzip") is None:
        pytest.skip("Info-ZIP unzip is not installed")
    out = tmp_path / "x"
    subprocess.run(["unzip", "-q", str(archive), "-d", str(out)], check=True)
    return out


def manifest_of(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("manifest.json"))


def metadata_of(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("metadata.json"))


def _reject(token: str) -> Any:
    raise ValueError(f"non-standard JSON constant {token}")


# --- a standard zip ---


def test_python_zipfile_opens_and_tests_it(archive: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        assert zf.testzip() is None
        names = zf.namelist()
        assert names[:2] == ["manifest.json", "metadata.json"]
        assert all(info.compress_type == zipfile.ZIP_STORED for info in zf.infolist())
        meta = json.loads(zf.read("metadata.json"))
        assert sorted(names) == sorted([*meta["members"], "metadata.json"])


@needs_unzip
def test_info_zip_tests_it_and_lists_manifest_and_metadata_first(archive: Path) -> None:
    test = subprocess.run(["unzip", "-t", str(archive)], capture_output=True, text=True, check=False)
    assert test.returncode == 0, test.stdout + test.stderr
    assert "No errors detected" in test.stdout
    listing = subprocess.run(["unzip", "-Z1", str(archive)], capture_output=True, text=True, check=True)
    names = listing.stdout.splitlines()
    assert names[:2] == ["manifest.json", "metadata.json"]
    long = subprocess.run(["unzip", "-l", str(archive)], capture_output=True, text=True, check=True).stdout
    rows = [line.split()[-1] for line in long.splitlines()[3:-2]]
    assert rows[:2] == ["manifest.json", "metadata.json"]


@needs_jq
def test_manifest_and_metadata_are_strict_json(archive: Path, extracted: Path) -> None:
    for name in ("manifest.json", "metadata.json"):
        text = (extracted / name).read_text(encoding="utf-8")
        json.loads(text, parse_constant=_reject)
        jq = subprocess.run(["jq", "-e", ".", str(extracted / name)], capture_output=True, text=True, check=False)
        assert jq.returncode == 0, jq.stderr
        assert json.loads(jq.stdout) == json.loads(text, parse_constant=_reject)
    manifest = json.loads((extracted / "manifest.json").read_text())
    assert manifest["format"] == "zarchive" and manifest["format_version"] == zarchive.FORMAT_VERSION


def test_uncompressed_array_data_is_64_byte_aligned_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "a.zarc"
    obj = {f"a{i}": np.random.default_rng(i).standard_normal(300 + i).astype("f4") for i in range(5)}
    obj["model"] = {f"t{i}": torch.randn(7 + i, 3) for i in range(5)}  # odd sizes: padding must work
    zarchive.save(obj, path, compress=False)
    source = MappedSource(path)
    try:
        zr = ZipReader(source)
        data_members = [m for m in zr.members.values() if m.name.endswith((".npy", ".safetensors"))]
        assert len(data_members) == 6
        for m in data_members:
            assert m.data_offset % 64 == 0, m.name
            head = bytes(source.view(m.data_offset, 16))
            if m.name.endswith(".npy"):
                hlen = int.from_bytes(head[8:10], "little")
                assert (10 + hlen) % 64 == 0, m.name  # the array data too
            else:
                assert (8 + int.from_bytes(head[:8], "little")) % 64 == 0, m.name
    finally:
        source.close()


def test_npy_members_open_with_numpy_load(tmp_path: Path) -> None:
    """numpy.load (no pickle) reads every .npy member after plain unzip, including Fortran order."""
    path = tmp_path / "n.zarc"
    obj = {
        "f": np.random.default_rng(0).standard_normal((40, 30)).astype(">f8"),
        "fortran": np.asfortranarray(np.arange(1200, dtype="i2").reshape(30, 40)),
        "text": np.array(["a", "bé", ""] * 100),
        "when": np.arange(300).astype("M8[s]"),
    }
    zarchive.save(obj, path, compress=False)
    manifest = manifest_of(path)
    with zipfile.ZipFile(path) as zf:
        for key, arr in obj.items():
            member = manifest["root"][key]["$ref"]
            assert member.endswith(".npy"), member
            back = np.load(io.BytesIO(zf.read(member)), allow_pickle=False)
            assert back.dtype == arr.dtype and back.shape == arr.shape and np.array_equal(back, arr), key
            if key == "fortran":
                assert back.flags.f_contiguous


def test_npy_members_open_with_numpy_load_after_unzip(extracted: Path) -> None:
    manifest = json.loads((extracted / "manifest.json").read_text())
    node = manifest["root"]["weights"]
    assert node["$ref"] == "weights.npy"  # random floats are never compressed
    back = np.load(extracted / node["$ref"], allow_pickle=False)
    np.testing.assert_array_equal(back, sample_object()["weights"])


def test_safetensors_members_open_with_safetensors(extracted: Path) -> None:
    from safetensors import safe_open

    manifest = json.loads((extracted / "manifest.json").read_text())
    expected = sample_object()["model"]
    nodes = manifest["root"]["model"]
    member = nodes["w"]["$ref"]
    file = extracted / member
    if member.endswith(".zst"):
        if shutil.which("zstd") is None:
            pytest.skip("the zstd command-line tool is not installed")
        subprocess.run(["zstd", "-q", "-d", str(file)], check=True)
        file = file.with_suffix("")
    with safe_open(str(file), framework="pt") as f:
        assert sorted(f.keys()) == sorted(node["key"] for node in nodes.values())
        for name, node in nodes.items():
            assert node["$ref"] == member
            t = f.get_tensor(node["key"])
            assert t.dtype == expected[name].dtype and torch.equal(t, expected[name]), name


@needs_zstd
def test_zstd_members_decompress_with_the_zstd_tool(archive: Path, extracted: Path) -> None:
    meta = metadata_of(archive)
    zst = [name for name, e in meta["members"].items() if e["codec"] == "zstd"]
    if not zst:
        assert meta["compression"]["codec"] == "none"
        return
    with zarchive.open(archive) as arc:
        reader = arc._reader
        for name in zst:
            assert name.endswith(".zst")
            out = subprocess.run(["zstd", "-q", "-d", "-c", str(extracted / name)], capture_output=True, check=True)
            assert out.stdout == bytes(reader.member_bytes(name)), name
            assert len(out.stdout) == meta["members"][name]["size"]


def test_every_member_extracts_to_the_bytes_the_reader_serves(archive: Path) -> None:
    with zipfile.ZipFile(archive) as zf, zarchive.open(archive) as arc:
        for name, entry in arc.members.items():
            raw = zf.read(name)
            assert len(raw) == entry["stored_size"]
            assert f"{zlib.crc32(raw):08x}" == entry["crc32"]
            if entry["codec"] == "zstd":
                decoded = bytes(arc._reader.member_bytes(name))
                assert len(decoded) == entry["size"] and f"{zlib.crc32(decoded):08x}" == entry["content_crc32"]
            for label, part in arc.entries(name).items():
                chunk = raw[part["offset"] : part["offset"] + part["size"]]
                assert f"{zlib.crc32(chunk):08x}" == part["crc32"], (name, label)


# --- reproducible bytes ---


@pytest.mark.parametrize("compress", [True, False, 9], ids=["zstd", "plain", "zstd-9"])
def test_same_object_gives_the_same_bytes(compress: Any, tmp_path: Path) -> None:
    a, b = tmp_path / "a.zarc", tmp_path / "b.zarc"
    zarchive.save(sample_object(), a, compress=compress)
    zarchive.save(sample_object(), b, compress=compress)
    with zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
        assert za.namelist() == zb.namelist()
        for name in za.namelist():
            if name != "metadata.json":
                assert za.read(name) == zb.read(name), name
        for info_a, info_b in zip(za.infolist(), zb.infolist()):
            assert (info_a.date_time, info_a.header_offset) == (info_b.date_time, info_b.header_offset)
        meta_a, meta_b = json.loads(za.read("metadata.json")), json.loads(zb.read("metadata.json"))
    meta_a.pop("created_utc"), meta_b.pop("created_utc")
    assert meta_a == meta_b


# --- metadata ---


def test_metadata_describes_versions_settings_and_every_member(archive: Path) -> None:
    meta = metadata_of(archive)
    assert meta["format"] == "zarchive" and meta["format_version"] == zarchive.FORMAT_VERSION
    assert isinstance(meta["library_version"], str) and meta["library_version"]
    assert isinstance(meta["created_utc"], str)
    env = meta["environment"]
    assert env["python"].count(".") == 2
    assert env["packages"]["numpy"] == np.__version__
    assert env["packages"]["torch"].split("+")[0] == torch.__version__.split("+")[0]  # '2.11.0' vs '2.11.0+cu130'
    assert meta["compression"]["codec"] in ("zstd", "none")
    if meta["compression"]["codec"] == "zstd":
        assert meta["compression"]["level"] == 3
    assert meta["settings"]["external_array_threshold"] == 256
    with zipfile.ZipFile(archive) as zf:
        listed = set(zf.namelist()) - {"metadata.json"}
    assert set(meta["members"]) == listed
    for name, entry in meta["members"].items():
        assert entry["codec"] in ("none", "zstd", "bgzstd"), name
        assert {"size", "stored_size", "crc32"} <= set(entry), name
        assert len(entry["crc32"]) == 8 and int(entry["crc32"], 16) >= 0
        if entry["codec"] == "none":
            assert entry["size"] == entry["stored_size"]
        if name.endswith(".safetensors") and entry["size"] > ENTRIES_FROM:
            labels = [row[0] for row in entry["entries"]]  # [label, offset, size, crc32] rows
            assert labels[0] == "$header" and {"w", "b", "steps"} <= set(labels)
        else:  # (format 1.6: a member of at most 1 MiB is checked whole)
            assert "entries" not in entry, name


def test_custom_settings_are_recorded(tmp_path: Path) -> None:
    path = tmp_path / "c.zarc"
    zarchive.save(1, path, custom_settings={"experiment": "x", "seed": 3})
    assert metadata_of(path)["settings"]["custom"] == {"experiment": "x", "seed": 3}


# --- compression settings and policy ---


@pytest.mark.parametrize(
    "compress, codec, level",
    [
        (False, "none", None),
        ("none", "none", None),
        (0, "none", None),
        (True, "zstd", 3),
        ("zstd", "zstd", 3),
        (1, "zstd", 1),
        (19, "zstd", 19),
        (-5, "zstd", -5),
        ("zstd:7", "zstd", 7),
    ],
    ids=["False", "none", "0", "True", "zstd", "1", "19", "-5", "zstd:7"],
)
def test_compress_settings(compress: Any, codec: str, level: Any, tmp_path: Path) -> None:
    path = tmp_path / "c.zarc"
    obj = {"ints": (np.arange(10_000) % 5).astype(np.int8), "list": list(range(1000))}  # (int8: not byte-grouped)
    zarchive.save(obj, path, compress=compress)
    meta = metadata_of(path)
    assert meta["compression"]["codec"] == codec and meta["compression"].get("level") == level
    codecs = {e["codec"] for name, e in meta["members"].items() if name != "manifest.json"}
    assert codecs == {codec}
    back = zarchive.read(path)
    assert np.array_equal(back["ints"], obj["ints"]) and back["list"] == obj["list"]


@pytest.mark.parametrize("compress", ["gzip", "ZSTD:x", 23, -8, 100, "", "zstd:99"])
def test_invalid_compress_raises_value_error(compress: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        zarchive.save(1, tmp_path / "x.zarc", compress=compress)
    with pytest.raises(ValueError):
        zarchive.ZArchive(compress=compress)
    assert not (tmp_path / "x.zarc").exists()


def test_compress_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    with pytest.raises((TypeError, ValueError)):
        zarchive.save(1, tmp_path / "x.zarc", compress=1.5)


def test_random_weights_stay_uncompressed_while_structured_data_is_compressed(tmp_path: Path) -> None:
    path = tmp_path / "p.zarc"
    rng = np.random.default_rng(0)
    obj = {
        "weights": rng.standard_normal((256, 256)).astype(np.float32),
        "model": {"w": torch.randn(128, 128), "v": torch.randn(300)},
        "labels": rng.integers(0, 10, 100_000),
        "int_tensors": {"idx": torch.randint(0, 10, (100_000,))},
        "list": [{"step": i, "ok": i % 2 == 0} for i in range(1000)],
        "strings": [f"token-{i % 50}" for i in range(1000)],
    }
    zarchive.save(obj, path, compress=True)
    m = manifest_of(path)["root"]
    assert m["weights"]["$ref"] == "weights.npy"
    assert m["model"]["w"]["$ref"] == "model.safetensors"
    assert m["labels"]["$ref"] == "labels.npy.bgz"  # integers: byte-grouped where it pays
    assert m["int_tensors"]["idx"]["$ref"] == "int_tensors.safetensors.zst"
    assert m["list"]["$ref"] == "list.jsonl.zst" and m["strings"]["$ref"] == "strings.jsonl.zst"
    meta = metadata_of(path)["members"]
    assert meta["labels.npy.bgz"]["stored_size"] < meta["labels.npy.bgz"]["size"] / 3
    back = zarchive.read(path)
    assert np.array_equal(back["labels"], obj["labels"]) and torch.equal(back["model"]["w"], obj["model"]["w"])


# --- zip writer and reader internals ---


def test_zip64_directory_for_more_than_65535_entries(tmp_path: Path) -> None:
    path = tmp_path / "many.zip"
    n = 65_535  # with "first.txt": 65536 entries, one more than the classic directory can count
    with open(path, "w+b") as f:
        zw = ZipWriter(f)
        zw.write_entry("first.txt", b"hello")
        for i in range(n):
            zw.write_entry(f"d/{i}", bytes([i % 256]) if i % 3 else b"")
        zw.finish(["first.txt"])
    zr = ZipReader(BytesSource(path.read_bytes()))
    assert len(zr.members) == n + 1
    assert bytes(zr.view("first.txt")) == b"hello" and bytes(zr.view("d/65534")) == bytes([65534 % 256])
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        assert len(names) == n + 1 and names[0] == "first.txt"
        assert zf.read("d/12346") == bytes([12346 % 256]) and zf.read("d/12345") == b""
    if shutil.which("unzip"):
        test = subprocess.run(["unzip", "-tqq", str(path)], capture_output=True, text=True, check=False)
        assert test.returncode == 0, test.stdout[-500:] + test.stderr[-500:]


def test_zip_writer_aligns_data_and_the_reader_agrees(tmp_path: Path) -> None:
    path = tmp_path / "al.zip"
    with open(path, "w+b") as f:
        zw = ZipWriter(f)
        for i, align in enumerate([1, 4, 64, 4096, 64]):
            w = zw.open_entry(f"m{i}" + "x" * i, align=align)
            w.write(b"z" * (i * 7 + 1))
            entry = w.close()
            assert entry.data_offset % align == 0
        zw.finish([])
    zr = ZipReader(BytesSource(path.read_bytes()))
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        for i, name in enumerate(zf.namelist()):
            assert zf.read(name) == b"z" * (i * 7 + 1) == bytes(zr.view(name))


def test_reader_of_an_archive_checks_what_zipfile_sees(archive: Path) -> None:
    reader = ArchiveReader(BytesSource(archive.read_bytes()))
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            if info.filename == "metadata.json":
                continue
            assert reader.zip.members[info.filename].crc == info.CRC
            assert reader.zip.members[info.filename].size == info.file_size


@settings(max_examples=200, deadline=None)
@given(a=st.binary(max_size=300), b=st.binary(max_size=300), seed=st.integers(0, 2**32 - 1))
def test_crc32_combine_matches_zlib(a: bytes, b: bytes, seed: int) -> None:
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    start = seed  # a running CRC that did not start at 0
    assert crc32_combine(zlib.crc32(a, start), zlib.crc32(b), len(b)) == zlib.crc32(a + b, start)


@pytest.mark.parametrize("length", [0, 1, 65535, 65536, 1 << 20, (1 << 20) + 3])
def test_crc32_combine_at_large_lengths(length: int) -> None:
    a = b"prefix"
    b = bytes(range(256)) * (length // 256) + bytes(length % 256)
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


@pytest.mark.parametrize("descr", [",", "a(", "(2)f8", "U1000000000000000000", "x" * 100])
def test_npy_dtype_text_numpy_cannot_parse_is_a_format_error(descr: str) -> None:
    """Found by the fuzzer's long run: numpy parses comma-separated dtype text with ast.literal_eval,
    so a header whose descr is ',' raised SyntaxError out of the reader."""
    from hostile.formats import npy_bytes

    from zarchive.container import npy

    with pytest.raises(zarchive.FormatError):
        npy.parse(memoryview(npy_bytes(descr, (2,), b"\0" * 16)), member="a.npy")


def test_safetensors_headers_parsed_again_give_the_same_slots_read_only() -> None:
    """Parsed headers are remembered by their bytes: the same bytes give equal slots (in a mapping
    the caller cannot change), other bytes or another member size are parsed (and refused) afresh."""
    from zarchive.container.safetensors_layout import forget_parsed_headers, layout, parse_header

    head, slots = layout([("a", "F32", (4,)), ("b", "I64", (2, 3))])
    size = slots[-1].end
    first = parse_header(memoryview(head), size, member="m")
    assert dict(first) == {s.key: s for s in slots}
    assert not hasattr(first, "pop") and not hasattr(first, "__setitem__")
    again = parse_header(memoryview(bytearray(head)), size, member="m")
    assert dict(again) == {s.key: s for s in slots}
    forget_parsed_headers()
    assert dict(parse_header(memoryview(head), size, member="m")) == {s.key: s for s in slots}
    with pytest.raises(zarchive.FormatError, match="fill the member"):
        parse_header(memoryview(head), size + 1, member="m")
    bad = head.replace(b'"I64"', b'"I32"')  # "b": 24 bytes by its dtype and shape, 48 by its offsets
    parsed = parse_header(memoryview(bad), size, member="m")  # (tiling checked; entries when looked up)
    assert parsed["a"] == {s.key: s for s in slots}["a"]
    with pytest.raises(zarchive.FormatError, match="offsets of 'b' disagree") as e:
        parsed.get("b")
    assert e.value.member == "m"
    with pytest.raises(zarchive.FormatError, match="offsets of 'b' disagree") as e:
        dict(parse_header(memoryview(bad), size, member="other"))  # every entry: every one checked
    assert e.value.member == "other"


def test_safetensors_header_out_of_order_or_malformed_is_checked_entry_by_entry() -> None:
    """Headers not in data order (other writers) are checked whole when parsed, as are malformed
    ones; the fast check of in-order headers refuses exactly what the full one refuses."""
    import json
    import struct

    from zarchive.container.safetensors_layout import parse_header

    def member(header: dict[str, object], data: int) -> tuple[memoryview, int]:
        text = json.dumps(header).encode()
        return memoryview(struct.pack("<Q", len(text)) + text), 8 + len(text) + data

    a = {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}
    b = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    head, size = member({"a": a, "b": b}, 16)  # out of data order: still tiles
    assert set(parse_header(head, size, member="m")) == {"a", "b"}
    bad_b = {**b, "dtype": "XX"}
    head, size = member({"a": a, "b": bad_b}, 16)
    with pytest.raises(zarchive.FormatError, match="unknown safetensors dtype"):
        parse_header(head, size, member="m")
    for offsets, match in (([0, 9], "offsets of .b. disagree"), ([True, 8], "bad shape or offsets")):
        head, size = member({"b": {**b, "data_offsets": offsets}, "a": a}, 16)
        with pytest.raises(zarchive.FormatError, match=match):
            dict(parse_header(head, size, member="m"))
    head, size = member({"__metadata__": {"format": "pt"}, "b": b, "a": a}, 16)  # in order: checked when used
    slots = parse_header(head, size, member="m")
    assert list(slots) == ["b", "a"] and slots["a"].end == size
