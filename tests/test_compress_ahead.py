"""Members compressed on the worker pool ahead of the writer (container/compress_ahead.py): the same
frames as the streaming path, in order, a bounded window ahead, and failures reported for the member
with the previous file left as it was."""

from __future__ import annotations

import threading
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.container import codecs, compress_ahead
from zarchive.container.archive_writer import MemberPlan, atomic_write, choose_codecs, write_archive
from zarchive.container.compress_ahead import CompressAhead, Job, compress_frame
from zarchive.container.crc import crc32


def _streamed(bufs: list[bytes], level: int) -> bytes:
    """The frame the writer's streaming path makes of these bytes."""

    class Sink:
        def __init__(self) -> None:
            self.out = bytearray()

        def write(self, b: Any) -> int:
            self.out += b
            return len(b)

    total = sum(len(b) for b in bufs)
    sink = Sink()
    w = codecs.compressor(level, total).stream_writer(sink, size=total, closefd=False)  # type: ignore[arg-type]
    for b in bufs:
        w.write(b)
    w.close()
    return bytes(sink.out)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.binary(max_size=3000), max_size=5), st.sampled_from([1, 3, 9]))
def test_a_frame_made_ahead_is_the_streamed_frame(bufs: list[bytes], level: int) -> None:
    frame = compress_frame(lambda: [(None, memoryview(b)) for b in bufs], level)
    data = b"".join(frame.chunks)
    whole = b"".join(bufs)
    assert data == _streamed(bufs, level)
    assert frame.size == len(whole) and frame.stored_size == len(data)
    assert frame.content_crc == crc32(whole) and frame.crc == crc32(data)
    assert zstandard.ZstdDecompressor().decompress(data) == whole


def test_a_big_member_is_the_same_frame_as_streamed() -> None:
    """Members from MULTITHREAD_MIN_BYTES on are made by zstd's worker threads in both paths."""
    rng = np.random.default_rng(0)
    a = (np.arange(codecs.MULTITHREAD_MIN_BYTES // 8 + 1000) * 7 + rng.integers(0, 7, 1)).astype(np.int64)
    bufs = [b"header", a.tobytes()]
    frame = compress_frame(lambda: [(None, memoryview(b)) for b in bufs], 3)
    assert b"".join(frame.chunks) == _streamed(bufs, 3)


def test_the_window_stays_bounded_and_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compress_ahead, "AHEAD_MEMBERS", 3)
    monkeypatch.setattr(compress_ahead, "AHEAD_BYTES", 10_000)
    monkeypatch.setattr(compress_ahead, "AHEAD_MAX_MEMBER", 50_000)
    taken = [0]
    lock = threading.Lock()
    too_early: list[int] = []

    def job(i: int, size: int) -> Job:
        def parts() -> list[tuple[str | None, memoryview]]:
            with lock:
                if i > taken[0] + 3:  # (the member being taken, and at most 3 ahead of it)
                    too_early.append(i)
            return [(None, memoryview(bytes([i % 256]) * size))]

        return Job(parts, size, 3)

    sizes = [4000] * 6 + [60_000, 4000, 20_000, 100] + [1000] * 10
    jobs: list[Job | None] = [job(i, n) for i, n in enumerate(sizes)]
    jobs[3] = None  # a member the writer handles itself
    with CompressAhead(jobs) as ahead:
        for i, n in enumerate(sizes):
            with lock:
                taken[0] = i
            frame = ahead.take(i)
            if i == 3 or n > 50_000:
                assert frame is None  # the writer streams it
                continue
            assert frame is not None
            assert zstandard.ZstdDecompressor().decompress(b"".join(frame.chunks)) == bytes([i]) * n
    assert too_early == []


def test_many_compressed_members_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    obj = {  # (int8: zstd members; wider integers are byte-grouped)
        f"a{i}": np.cumsum(rng.integers(0, 3, 50_000 + 997 * i)).astype(np.int8)
        for i in range(3 * compress_ahead.AHEAD_MEMBERS)
    }
    obj["noise"] = rng.integers(0, 2**62, 100_000)  # does not pay: stored as it is
    obj["text"] = [f"row {i}" for i in range(20_000)]
    zarchive.save(obj, tmp_path / "m.zarc")
    assert zarchive.verify(tmp_path / "m.zarc") == []
    with zipfile.ZipFile(tmp_path / "m.zarc") as zf:
        names = zf.namelist()
    assert sum(n.endswith(".zst") for n in names) >= 3 * compress_ahead.AHEAD_MEMBERS
    assert not any(n.startswith("noise") and n.endswith(".zst") for n in names)
    back = zarchive.read(tmp_path / "m.zarc")
    assert back["text"] == obj["text"]
    for k, v in obj.items():
        if k != "text":
            assert np.array_equal(back[k], v), k


def test_a_member_failing_ahead_fails_the_save_and_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "old.zarc"
    zarchive.save({"x": np.arange(10)}, target)
    before = target.read_bytes()
    calls = [0]

    def failing() -> list[tuple[str | None, memoryview]]:
        calls[0] += 1
        if calls[0] > 1:  # choose_codecs sizes it; the writer's pool then fails to produce it
            raise ValueError("cannot produce these bytes")
        return [(None, memoryview(bytes(100_000)))]

    plans = [
        MemberPlan(base_name=f"ok{i}.bin", parts=lambda: [(None, memoryview(bytes(50_000)))], compress="always")
        for i in range(3)
    ]
    plans.insert(1, MemberPlan(base_name="bad.bin", parts=failing, compress="always"))
    choose_codecs(plans, 3)
    with pytest.raises(zarchive.SaveError, match="cannot produce these bytes.*bad.bin.zst"):
        atomic_write(str(target), lambda f: write_archive(f, {"root": {}}, plans, {}, 3))
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.zarc"]


def test_the_sample_spans_the_member() -> None:
    """A member whose head is noise and whose body is zeros is sampled across, not by its head: it is
    compressed (to a fifth of its size)."""
    rng = np.random.default_rng(2)
    head, body = rng.integers(0, 256, 1_500_000, dtype=np.uint8).tobytes(), bytes(6_000_000)
    sample = codecs.take_sample([head, body])
    assert len(sample) == codecs.SAMPLE_BYTES
    assert not codecs.worth_compressing(head[: codecs.SAMPLE_BYTES], 3)
    plan = MemberPlan(base_name="m.bin", parts=lambda: [(None, memoryview(head)), (None, memoryview(body))])
    choose_codecs([plan], 3)
    assert plan.codec == "zstd" and plan.size == len(head) + len(body)
    small = [b"abc" * 1000, b"xyz" * 1000]
    assert codecs.take_sample(small) == b"".join(small)


def test_members_made_by_decoding_chunks_do_not_starve_the_pool(tmp_path: Path) -> None:
    """A member's bytes may come from decoding a compress_weights archive (whose chunks are decoded on
    the bgzstd pool): compressing such members ahead, on every worker at once, must not wait on itself."""
    src = tmp_path / "src.zarc"
    w = np.random.default_rng(3).standard_normal(3 << 20).astype(np.float32)
    zarchive.save({"w": w}, src, compress_weights=True)

    def decoded() -> list[tuple[str | None, memoryview]]:
        return [(None, memoryview(zarchive.read(src, tensors="numpy")["w"].view(np.uint8)))]

    plans = [MemberPlan(base_name=f"m{i}.bin", parts=decoded, compress="always") for i in range(6)]
    choose_codecs(plans, 3)
    done = threading.Event()

    def save() -> None:
        atomic_write(str(tmp_path / "out.zarc"), lambda f: write_archive(f, {"root": {}}, plans, {}, 3))
        done.set()

    t = threading.Thread(target=save, daemon=True)
    t.start()
    t.join(120)
    assert done.is_set(), "the save waited on itself"
    with zipfile.ZipFile(tmp_path / "out.zarc") as zf:
        assert zstandard.ZstdDecompressor().decompress(zf.read("m5.bin.zst")) == w.tobytes()


def test_a_forked_child_saves_with_a_pool_of_its_own(tmp_path: Path) -> None:
    import multiprocessing as mp

    obj = {f"a{i}": np.arange(100_000 * (i + 1)) for i in range(4)}
    zarchive.save(obj, tmp_path / "parent.zarc")  # the parent's pools exist now
    with mp.get_context("fork").Pool(1) as pool:
        pool.apply_async(_save_in_child, (str(tmp_path / "child.zarc"),)).get(timeout=60)
    back = zarchive.read(tmp_path / "child.zarc")
    assert all(np.array_equal(back[k], v) for k, v in obj.items())


def _save_in_child(path: str) -> None:
    zarchive.save({f"a{i}": np.arange(100_000 * (i + 1)) for i in range(4)}, path)


def test_a_kept_compressor_left_mid_frame_makes_whole_frames_after() -> None:
    """Compressors are kept per thread (codecs.compressor): one whose last frame was abandoned (a save
    that failed while a member streamed) still makes the very frame a new compressor makes."""
    data = bytes(range(256)) * 2000
    kept = codecs.compressor(3, len(data))
    kept.compressobj(size=len(data)).compress(data[:100_000])  # abandoned mid-frame
    assert codecs.compressor(3, len(data)) is kept
    frame = compress_frame(lambda: [(None, memoryview(data))], 3)
    fresh = zstandard.ZstdCompressor(level=3, write_checksum=True, write_content_size=True).compressobj(size=len(data))
    assert b"".join(frame.chunks) == fresh.compress(data) + fresh.flush()
