"""compress_weights=True: float and complex tensors and arrays stored byte-grouped and zstd-compressed
in independent chunks (codec bgzstd, spec 4.6): round trips, lazy reads of one tensor, damaged chunks
named with their tensor, the read budget, extract to plain files, checkpoints and the integrations."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import forkrun
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.container import byte_groups
from zarchive.container.archive_reader import ArchiveReader
from zarchive.container.source import open_local
from zarchive.errors import IntegrityError, UnsafeArchiveError

FLOATS = [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128]


def weights(n: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(n, generator=g) * 0.02
    if dtype.is_complex:
        return torch.complex(t, t.flip(0)).to(dtype)
    return t.to(dtype)


def members(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("metadata.json"))["members"]


def metadata(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("metadata.json"))


def test_default_keeps_weights_mappable(tmp_path: Path) -> None:
    p = tmp_path / "plain.zarc"
    zarchive.save({"model": {"w": weights(100_000)}}, p)
    assert members(p)["model.safetensors"]["codec"] == "none"
    assert metadata(p)["settings"]["compress_weights"] is False


def test_weights_shrink_and_read_back(tmp_path: Path) -> None:
    sd = {f"l{i}.{dt}": weights(20_000, dt, i) for i, dt in enumerate(FLOATS)}
    sd["steps"] = torch.arange(5000)
    arr = weights(100_000, seed=9).numpy()
    plain, packed = tmp_path / "plain.zarc", tmp_path / "packed.zarc"
    zarchive.save({"model": sd, "arr": arr}, plain)
    zarchive.save({"model": sd, "arr": arr}, packed, compress_weights=True)
    assert packed.stat().st_size < 0.9 * plain.stat().st_size
    info = members(packed)
    assert info["model.safetensors.bgz"]["codec"] == "bgzstd" and info["arr.npy.bgz"]["codec"] == "bgzstd"
    assert metadata(packed)["settings"]["compress_weights"] is True
    assert metadata(packed)["format_version"] == zarchive.FORMAT_VERSION  # (compressed weights: 1.3 and later)
    back = zarchive.read(packed)
    for k, v in sd.items():
        assert back["model"][k].dtype == v.dtype and torch.equal(back["model"][k], v), k
    assert np.array_equal(back["arr"], arr) and back["arr"].dtype == arr.dtype
    as_numpy = zarchive.read(packed, tensors="numpy")
    assert np.array_equal(as_numpy["model"]["l2.torch.float32"], sd["l2.torch.float32"].numpy())
    back["model"]["l2.torch.float32"].add_(1)  # the bytes are the load's own: a later read is unchanged
    assert torch.equal(zarchive.read(packed)["model"]["l2.torch.float32"], sd["l2.torch.float32"])


@settings(max_examples=25, deadline=None)
@given(
    dtype=st.sampled_from([*FLOATS, torch.float8_e4m3fn, torch.int32, torch.uint8]),
    sizes=st.lists(st.integers(0, 70_000), min_size=1, max_size=5),
    shared=st.booleans(),
)
def test_round_trip_any_float_tensors(
    tmp_path_factory: pytest.TempPathFactory, dtype: torch.dtype, sizes: list[int], shared: bool
) -> None:
    p = tmp_path_factory.mktemp("rt") / "a.zarc"
    base = torch.randn(sum(sizes) + 1) * 0.1
    if dtype.is_complex:
        base = torch.complex(base, base * 2)
    base = base.to(dtype) if dtype not in (torch.int32, torch.uint8) else (base * 100).to(dtype)
    ts = {f"t{i}": base[:n].clone() for i, n in enumerate(sizes)}
    if shared and sizes[0] > 2:
        ts["view"] = ts["t0"][1:]  # a view of another tensor's storage: stored once, as raw bytes
    zarchive.save({"g": ts}, p, compress_weights=True)
    back = zarchive.read(p)
    for k, v in ts.items():
        assert back["g"][k].dtype == v.dtype and back["g"][k].shape == v.shape
        assert torch.equal(back["g"][k].view(torch.uint8), v.contiguous().view(torch.uint8)), k
    with zarchive.open(p) as arc:
        k = max(ts)
        assert torch.equal(arc[f"g/{k}"].view(torch.uint8), ts[k].contiguous().view(torch.uint8))


def test_big_tensor_fills_several_chunks_and_lazy_reads_decode_only_theirs(tmp_path: Path) -> None:
    big = weights(3 << 20, seed=1)  # 12 MiB of float32: 6 chunks
    small = {f"s{i}": weights(300, seed=10 + i) for i in range(30)}  # share one chunk
    p = tmp_path / "a.zarc"
    zarchive.save({"m": {"big": big, **small}}, p, compress_weights=True)
    rows = members(p)["m.safetensors.bgz"]["chunks"]
    assert sum(r[0] == "big" for r in rows) == 6
    assert all(r[2] <= byte_groups.CHUNK_BYTES for r in rows)
    assert len({r[0] for r in rows if r[0].startswith("s")}) == 1  # the small ones share a chunk
    # damage the stored bytes of the big tensor's 3rd chunk: only reads of it fail, and they say so
    data = bytearray(p.read_bytes())
    with zipfile.ZipFile(p) as z:
        info = z.getinfo("m.safetensors.bgz")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)  # local header: 30 bytes + name + extra
    third = [r for r in rows if r[0] == "big"][2]
    data[start + third[4] + sum(third[5]) - 1] ^= 0xFF
    damaged = tmp_path / "damaged.zarc"
    damaged.write_bytes(bytes(data))
    with zarchive.open(damaged) as arc:  # (the zip CRC of the member is wrong too: lazy reads check chunks)
        assert torch.equal(arc["m/s7"], small["s7"])
        with pytest.raises(IntegrityError, match="does not match its checksum") as e:
            arc["m/big"]
        assert e.value.path == "m/big" and e.value.member == "m.safetensors.bgz"
    with pytest.raises(IntegrityError) as e:
        zarchive.read(damaged)
    assert e.value.member == "m.safetensors.bgz" and "'big'" in str(e.value)
    problems = list(zarchive.verify(damaged))
    assert problems and all(m == "m.safetensors.bgz" for m, _ in problems)
    assert any("'big'" in why for _, why in problems)


def test_noise_that_does_not_pay_stays_uncompressed(tmp_path: Path) -> None:
    noise = torch.from_numpy(
        np.random.default_rng(0).integers(-(1 << 31), 1 << 31, 50_000, dtype=np.int64).astype(np.int32).view(np.float32)
    )
    p = tmp_path / "a.zarc"
    zarchive.save({"n": {"x": noise}}, p, compress_weights=True)
    assert members(p)["n.safetensors"]["codec"] == "none"
    assert torch.equal(zarchive.read(p)["n"]["x"].view(torch.int32), noise.view(torch.int32))


def test_read_budget_counts_decoded_bytes(tmp_path: Path) -> None:
    p = tmp_path / "a.zarc"
    t = torch.zeros(1 << 20)  # 4 MiB that compress to almost nothing
    zarchive.save({"m": {"t": t}}, p, compress_weights=True)
    assert p.stat().st_size < 100_000
    with pytest.raises(UnsafeArchiveError, match="max_read_bytes"):
        zarchive.read(p, max_read_bytes=1 << 20)
    assert torch.equal(zarchive.read(p, max_read_bytes=8 << 20)["m"]["t"], t)


def test_extract_restores_plain_files(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    sd = {"a": weights(50_000), "b": weights(1000, torch.bfloat16)}
    arr = weights(20_000, torch.float64).numpy()
    p = tmp_path / "a.zarc"
    zarchive.save({"model": sd, "arr": arr}, p, compress_weights=True)
    out = tmp_path / "out"
    run = forkrun.cli("extract", p, out)
    assert run.returncode == 0, run.stderr
    got = load_file(out / "model.safetensors")
    assert torch.equal(got["a"], sd["a"]) and torch.equal(got["b"], sd["b"])
    assert np.array_equal(np.load(out / "arr.npy"), arr)
    run = forkrun.cli("verify", p)
    assert run.returncode == 0 and run.stdout.startswith("OK"), run.stdout + run.stderr


def test_checkpoint_compresses_adam_moments(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 16))
    opt = torch.optim.Adam(model.parameters())
    for _ in range(2):
        model(torch.randn(8, 256)).square().mean().backward()
        opt.step()
    p = tmp_path / "ckpt.zarc"
    zarchive.save_checkpoint(p, model, opt, compress_weights=True, epoch=3)
    info = members(p)
    assert info["model.safetensors.bgz"]["codec"] == "bgzstd"
    assert info["optimizer.safetensors.bgz"]["codec"] == "bgzstd"
    model2 = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 16))
    opt2 = torch.optim.Adam(model2.parameters())
    zarchive.load_checkpoint(p, model2, opt2)
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)
    s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert all(torch.equal(s1[k]["exp_avg_sq"], s2[k]["exp_avg_sq"]) for k in s1)
    with pytest.raises(TypeError, match="compress_weights"):
        zarchive.save_checkpoint(p, model, za=zarchive.ZArchive(), compress_weights=True)


def test_settings_are_checked_and_shown() -> None:
    with pytest.raises(TypeError, match="compress_weights"):
        zarchive.ZArchive(compress_weights="yes")  # type: ignore[arg-type]
    assert "compress_weights=True" in repr(zarchive.ZArchive(compress_weights=True))
    assert zarchive.ZArchive(compress=False, compress_weights=True).settings.compress_weights


def test_compress_off_and_weights_on(tmp_path: Path) -> None:
    p = tmp_path / "a.zarc"
    zarchive.save({"m": {"w": weights(100_000)}, "lst": list(range(1000))}, p, compress=False, compress_weights=True)
    info = members(p)
    assert info["m.safetensors.bgz"]["codec"] == "bgzstd" and info["lst.jsonl"]["codec"] == "none"
    assert metadata(p)["compression"]["codec"] == "none" and "bgzstd" in metadata(p)["compression"]["policy"]


def test_lightning_and_hydra_take_the_setting(tmp_path: Path) -> None:
    lightning = pytest.importorskip("zarchive.lightning")
    io = lightning.ZArchiveCheckpointIO(compress_weights=True)
    p = tmp_path / "l.zarc"
    io.save_checkpoint({"state_dict": {"w": weights(100_000)}, "epoch": 1}, str(p))
    assert any(e["codec"] == "bgzstd" for e in members(p).values())
    assert torch.equal(io.load_checkpoint(str(p))["state_dict"]["w"], weights(100_000))
    pytest.importorskip("hydra")
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    za = instantiate(OmegaConf.create({"_target_": "zarchive.ZArchive", "compress_weights": True}))
    assert za.settings.compress_weights is True


def test_pieces_share_small_parts_and_split_big_ones() -> None:
    parts = [
        ("$header", memoryview(bytes(64)), 1),
        ("a", memoryview(bytes(100)), 4),
        ("b", memoryview(bytes(40)), 4),
        ("c", memoryview(bytes(1000)), 4),
        ("d", memoryview(bytes(30)), 2),
        ("e", memoryview(bytes(7)), 2),  # not a multiple of its width: grouped as width 1
    ]
    got = [(p.label, p.offset, p.size, p.width) for p in byte_groups.pieces(parts, chunk=256)]
    assert got == [
        ("$header", 0, 64, 1),
        ("a", 64, 140, 4),
        ("c", 204, 252, 4),  # 1000 bytes in 4 chunks of about the same size (multiples of the width)
        ("c", 456, 252, 4),
        ("c", 708, 252, 4),
        ("c", 960, 244, 4),
        ("d", 1204, 30, 2),
        ("e", 1234, 7, 1),
    ]


def test_frozen_example_decodes_by_the_spec_alone() -> None:
    """The frozen example's bgzstd members, decoded by a decoder written from spec 4.6 alone
    (tests/hostile/formats.py), are what zarchive decodes; every chunk's CRC covers its stored bytes."""
    import zlib

    from hostile.formats import decode_bgzstd

    path = Path(__file__).resolve().parent.parent / "spec" / "examples" / "compressed_weights.zarc"
    info = members(path)
    grouped = [n for n, e in info.items() if e["codec"] == "bgzstd"]
    assert len(grouped) == 4
    reader = ArchiveReader(open_local(str(path), mmap=True))
    with zipfile.ZipFile(path) as z:
        for name in grouped:
            stored = z.read(name)
            rows = info[name]["chunks"]
            for r in rows:
                assert f"{zlib.crc32(stored[r[4] : r[4] + sum(r[5])]):08x}" == r[6]
            plain = decode_bgzstd(stored, rows)
            assert len(plain) == info[name]["size"]
            assert bytes(reader.member_bytes(name)) == plain
        assert any(len(info[n]["chunks"]) > 2 for n in grouped)  # the 2.4 MB tensor: two chunks + header


@settings(max_examples=60, deadline=None)
@given(
    parts=st.lists(
        st.tuples(st.integers(0, 3000), st.sampled_from([1, 2, 4, 8]), st.sampled_from(["zeros", "ramp", "noise"])),
        min_size=1,
        max_size=8,
    ),
    chunk=st.sampled_from([64, 256, 1024]),
    cut=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_any_range_decodes_from_its_chunks(
    parts: list[tuple[int, int, str]], chunk: int, cut: tuple[float, float]
) -> None:
    """Any byte range of a member, decoded from the chunks that hold it, is the member's bytes there,
    whatever the parts' sizes and widths and however the chunks fall (small chunks: many boundaries)."""
    from zarchive.container.chunk_reader import ChunkedMember

    rng = np.random.default_rng(len(parts) * 1000 + chunk)
    bufs = []
    for n, width, kind in parts:
        if kind == "zeros":
            data = bytes(n * width)
        elif kind == "ramp":
            data = (
                (np.arange(n, dtype=np.float64) * 0.001).astype(f"<f{width}" if width in (2, 4, 8) else "u1").tobytes()
            )
        else:
            data = rng.integers(0, 256, n * width, dtype=np.uint8).tobytes()
        bufs.append((f"p{len(bufs)}", memoryview(data), width))
    plain = b"".join(bytes(b) for _, b, _ in bufs)
    rows, stored = [], b""
    for row, out in byte_groups.encode(byte_groups.pieces(bufs, chunk=chunk)):
        rows.append(row)
        stored += b"".join(bytes(b) for b in out)
    entry = {"size": len(plain), "stored_size": len(stored), "chunks": rows}
    member = ChunkedMember(
        "m", byte_groups.parse_index(entry, member="m"), lambda at, n: memoryview(stored)[at : at + n], verify=True
    )
    a, b = sorted(int(x * len(plain)) for x in cut)
    assert bytes(member.read(a, b)) == plain[a:b]
    assert bytes(member.read(0, len(plain))) == plain


def test_a_forked_child_reads_with_a_pool_of_its_own(tmp_path: Path) -> None:
    """A process forked after a read (a DataLoader worker) still decodes: the parent's pool threads do
    not exist in the child."""
    import multiprocessing as mp

    p = tmp_path / "a.zarc"
    big = weights(3 << 20, seed=3)  # several chunks: the pool is used
    zarchive.save({"m": {"w": big}}, p, compress_weights=True)
    assert torch.equal(zarchive.read(p)["m"]["w"], big)  # the parent's pool exists now
    ctx = mp.get_context("fork")
    with ctx.Pool(1) as pool:
        ok = pool.apply_async(_read_sum, (str(p),)).get(timeout=30)
    assert ok == hashlib.sha256(big.numpy().tobytes()).hexdigest()


def _read_sum(path: str) -> str:
    # (numpy, not torch ops: torch's OpenMP threads do not survive a fork either)
    return hashlib.sha256(zarchive.read(path, tensors="numpy")["m"]["w"].tobytes()).hexdigest()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex64])
def test_encoding_with_reused_plane_memory_gives_the_same_chunks(dtype: Any) -> None:
    """encode(reuse=True) hands a chunk's plane memory to a later chunk once the caller asks for the
    next one: a caller that writes each chunk before asking gets exactly the chunks of a fresh encode."""
    rng = np.random.default_rng(7)
    parts = [
        (f"t{i}", memoryview((rng.standard_normal(n) * 0.02).astype(dtype)).cast("B"), np.dtype(dtype).itemsize)
        for i, n in enumerate([300_000, 5, 1_200_000, 77_777])
    ]

    def chunks(reuse: bool) -> list[tuple[list[Any], bytes]]:
        out = []
        for row, bufs in byte_groups.encode(byte_groups.pieces(parts, chunk=256 << 10), reuse=reuse):
            out.append((row, b"".join(bytes(memoryview(b)) for b in bufs)))  # (written before the next)
        return out

    fresh, reused = chunks(False), chunks(True)
    assert len(fresh) > 2 * byte_groups.workers() + 2  # more chunks than are ever in flight: memory is reused
    assert reused == fresh
