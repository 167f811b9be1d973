"""save_async: the data is captured when it returns, written in the background, errors come back
through the future, one save to a path at a time, the staging buffer is reused, exit waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import zarchive
from zarchive.saving import background as async_save
from zarchive.saving.staging import staging_buffer

ROOT = Path(__file__).resolve().parent.parent


def _state(seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(64, 48, generator=g)
    return {
        "w": torch.randn(256, 128, generator=g),
        "bf16": torch.randn(300, generator=g).to(torch.bfloat16),
        "transposed": base.t(),  # not contiguous
        "view": base[3:9],  # shares storage with base
        "base": base,
        "steps": torch.arange(5000),  # integer data: a member zstd may compress
        "np": np.arange(10_000, dtype=np.float64),
        "step": 7,
        "name": "run-1",
    }


def _snapshot(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v.clone() if isinstance(v, torch.Tensor) else np.copy(v) if isinstance(v, np.ndarray) else v
        for k, v in obj.items()
    }


def _mutate(obj: dict[str, Any]) -> None:
    for v in obj.values():
        if isinstance(v, torch.Tensor):
            v.add_(1) if not v.dtype.is_floating_point else v.mul_(-3).add_(1)
        elif isinstance(v, np.ndarray):
            v[:] = -1


def _assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got.keys() == want.keys()
    for k, v in want.items():
        if isinstance(v, torch.Tensor):
            assert got[k].dtype == v.dtype and torch.equal(got[k], v), k
        elif isinstance(v, np.ndarray):
            np.testing.assert_array_equal(got[k], v)
        else:
            assert got[k] == v


def test_values_are_captured_when_it_returns(tmp_path: Path) -> None:
    obj = _state()
    before = _snapshot(obj)
    fut = zarchive.ZArchive().save_async(obj, tmp_path / "a.zarc")
    _mutate(obj)  # training goes on at once
    assert isinstance(fut, Future)
    assert fut.result(timeout=60) == str(tmp_path / "a.zarc")
    got = zarchive.read(tmp_path / "a.zarc")
    _assert_same(got, before)
    assert got["view"].untyped_storage().data_ptr() == got["base"].untyped_storage().data_ptr()  # still shared
    assert zarchive.verify(tmp_path / "a.zarc")


def test_module_function_and_settings(tmp_path: Path) -> None:
    fut = zarchive.save_async({"x": torch.ones(3)}, tmp_path / "b.zarc", compress=False, durable=False)
    assert fut.result(timeout=60) == str(tmp_path / "b.zarc")
    with pytest.raises(TypeError, match="save_async.*'compres'"):
        zarchive.save_async({}, tmp_path / "c.zarc", compres=False)
    with pytest.raises(ValueError, match="empty"):
        zarchive.save_async({}, "")


def _manifest_and_crcs(path: Path) -> tuple[bytes, dict[str, Any]]:
    with zipfile.ZipFile(path) as z:
        members = json.loads(z.read("metadata.json"))["members"]
        return z.read("manifest.json"), members


@given(
    arrays=st.lists(
        hnp.arrays(
            dtype=st.sampled_from([np.float32, np.int64, np.uint8, np.float16, np.bool_]),
            shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=40),
        ),
        max_size=6,
    ),
    compress=st.booleans(),
)
@settings(max_examples=25, deadline=None)
def test_same_archive_as_a_synchronous_save(
    tmp_path_factory: pytest.TempPathFactory, arrays: list[np.ndarray], compress: bool
) -> None:
    d = tmp_path_factory.mktemp("same")
    obj = {
        "tensors": {f"t{i}": torch.from_numpy(np.array(a)) for i, a in enumerate(arrays)},
        "arrays": [np.array(a) for a in arrays],
    }
    za = zarchive.ZArchive(compress=compress, durable=False)
    za.save(obj, d / "sync.zarc")
    za.save_async(obj, d / "async.zarc").result(timeout=60)
    assert _manifest_and_crcs(d / "sync.zarc") == _manifest_and_crcs(d / "async.zarc")


def test_errors_come_through_the_future(tmp_path: Path) -> None:
    target = tmp_path / "keep.zarc"
    zarchive.save({"v": torch.zeros(4)}, target)
    old = target.read_bytes()
    fut = zarchive.save_async({"v": torch.ones(4), "bad": object()}, target)
    with pytest.raises(zarchive.SaveError, match="builtins.object") as e:
        fut.result(timeout=60)
    assert e.value.path == "bad"
    (tmp_path / "dir.zarc").mkdir()
    fut = zarchive.save_async({"v": torch.ones(4)}, tmp_path / "dir.zarc")  # fails in the writer thread
    with pytest.raises(zarchive.SaveError, match="is a directory"):
        fut.result(timeout=60)
    assert target.read_bytes() == old  # a failed save leaves the previous file as it was
    assert not staging_buffer().busy  # the failed saves gave the buffer back


def test_a_meta_tensor_fails_like_a_save(tmp_path: Path) -> None:
    obj = {"m": torch.empty(3, device="meta")}
    with pytest.raises(zarchive.SaveError) as sync:
        zarchive.save(obj, tmp_path / "m.zarc")
    with pytest.raises(zarchive.SaveError) as asyn:
        zarchive.save_async(obj, tmp_path / "m.zarc").result(timeout=60)
    assert str(asyn.value) == str(sync.value)


class _SlowFile:
    """A writable file object whose writes are slow: keeps a save in flight long enough to observe."""

    def __init__(self, delay: float) -> None:
        self.buf = bytearray()
        self.pos = 0
        self.delay = delay
        self.release = threading.Event()
        self.writers: list[str] = []

    def write(self, b: Any) -> int:
        self.writers.append(threading.current_thread().name)  # who wrote, in order, before waiting
        self.release.wait(timeout=30)
        time.sleep(self.delay)
        data = bytes(b)
        self.buf[self.pos : self.pos + len(data)] = data
        self.pos += len(data)
        return len(data)

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = pos if whence == 0 else self.pos + pos if whence == 1 else len(self.buf) + pos
        return self.pos

    def flush(self) -> None:
        pass

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True


def test_one_save_to_a_path_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "same.zarc"
    first = zarchive.save_async({"v": torch.full((1000,), 1.0)}, path)
    second = zarchive.save_async({"v": torch.full((1000,), 2.0)}, path)  # waits for the first
    assert first.done()
    assert second.result(timeout=60) == str(path)
    assert torch.equal(zarchive.read(path)["v"], torch.full((1000,), 2.0))


def test_a_save_waits_for_the_save_async_in_flight(tmp_path: Path) -> None:
    slow = _SlowFile(0.0)
    fut = zarchive.save_async({"v": torch.randn(3_000_000)}, slow)  # 12 MB: copied out in two writes
    assert async_save.in_flight(async_save.path_key(slow)) is fut
    assert not fut.done()  # its writes are held back
    done: list[str] = []
    t = threading.Thread(target=lambda: done.append(zarchive.save({"v": torch.arange(3)}, slow)))
    t.start()
    time.sleep(0.3)
    assert not done  # the synchronous save waits for the one in flight
    slow.release.set()
    t.join(timeout=60)
    assert fut.done() and fut.exception() is None
    assert done and async_save.in_flight(async_save.path_key(slow)) is None
    background = [name.startswith("zarchive-save") for name in slow.writers]
    first_sync = background.index(False)
    assert any(background[:first_sync]) and not any(background[first_sync:])  # no write of one between the other's


def test_staging_buffer_is_reused_and_bounded(tmp_path: Path) -> None:
    buf = staging_buffer()
    buf.clear()
    obj = {"w": torch.randn(1 << 18)}  # 1 MiB
    zarchive.save_async(obj, tmp_path / "1.zarc").result(timeout=60)
    size, allocs = buf.nbytes, buf.allocations
    assert size >= 1 << 20
    for i in range(3):
        zarchive.save_async({"w": torch.randn(1 << 17)}, tmp_path / f"{i}.zarc").result(timeout=60)
    assert (buf.nbytes, buf.allocations) == (size, allocs)  # smaller saves reuse it
    zarchive.save_async({"w": torch.randn(1 << 20)}, tmp_path / "big.zarc").result(timeout=60)
    assert buf.nbytes >= 4 << 20 and buf.allocations == allocs + 1  # grown once, to the largest
    buf.clear()
    assert buf.nbytes == 0


def test_checkpoint_async(tmp_path: Path) -> None:
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    want = {k: v.clone() for k, v in model.state_dict().items()}
    fut = zarchive.save_checkpoint_async(tmp_path / "ck.zarc", model, opt, step=3)
    with torch.no_grad():
        model.weight.add_(1)
    opt.step()
    fut.result(timeout=60)
    model2 = torch.nn.Linear(8, 4)
    opt2 = torch.optim.Adam(model2.parameters())
    extra = zarchive.load_checkpoint(tmp_path / "ck.zarc", model2, opt2)
    assert extra["step"] == 3
    for k, v in want.items():
        assert torch.equal(model2.state_dict()[k], v)
    with pytest.raises(TypeError, match="save_checkpoint_async: 'rng' is a reserved name"):
        zarchive.save_checkpoint_async(tmp_path / "x.zarc", model, rng=1)


EXIT_SCRIPT = """
import sys, torch, zarchive
torch.manual_seed(0)
obj = {"w": torch.randn(4_000_000)}
fut = zarchive.save_async(obj, sys.argv[1])
fut.add_done_callback(lambda f: f.exception() and print("save failed:", repr(f.exception()), file=sys.stderr))
obj["w"].zero_()
print("returned", flush=True)
"""


def test_interpreter_exit_waits_for_pending_saves(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, str(tmp_path / "exit.zarc")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "returned" and "save failed" not in out.stderr, out.stderr
    torch.manual_seed(0)
    assert torch.equal(zarchive.read(tmp_path / "exit.zarc")["w"], torch.randn(4_000_000))


def test_a_big_capture_copied_in_pieces(tmp_path: Path) -> None:
    """Over 64 MiB the copy is split into 16 MiB pieces on several threads: every byte still lands."""
    w = torch.arange(17_500_001, dtype=torch.float32)  # 70 MB, not a whole number of pieces
    small = torch.arange(1000)
    fut = zarchive.save_async({"w": w, "small": small}, tmp_path / "big.zarc", durable=False)
    w.neg_()
    small.zero_()
    fut.result(timeout=120)
    got = zarchive.read(tmp_path / "big.zarc")
    assert torch.equal(got["w"], torch.arange(17_500_001, dtype=torch.float32))
    assert torch.equal(got["small"], torch.arange(1000))


def test_to_a_url_and_a_file_object(tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    obj = {"w": torch.arange(100.0)}
    fut = zarchive.save_async(obj, "memory://async/one.zarc")
    obj["w"].zero_()
    assert fut.result(timeout=60) == "memory://async/one.zarc"
    assert torch.equal(zarchive.read("memory://async/one.zarc")["w"], torch.arange(100.0))
    with open(tmp_path / "f.zarc", "wb") as f:
        zarchive.save_async({"w": torch.ones(3)}, f).result(timeout=60)
    assert torch.equal(zarchive.read(tmp_path / "f.zarc")["w"], torch.ones(3))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_tensors_are_copied_into_pinned_memory(tmp_path: Path) -> None:
    obj = {
        "w": torch.randn(1024, 512, device="cuda"),
        "t": torch.randn(64, 32, device="cuda").t(),
        "cpu": torch.ones(9),
    }
    before = {k: v.cpu().clone() for k, v in obj.items()}
    fut = zarchive.save_async(obj, tmp_path / "gpu.zarc")
    for v in obj.values():
        v.mul_(-1)  # on the GPU's stream, right after the return
    fut.result(timeout=60)
    assert staging_buffer().pinned
    got = zarchive.read(tmp_path / "gpu.zarc", map_location="saved")
    for k, v in before.items():
        assert got[k].device == obj[k].device and torch.equal(got[k].cpu(), v), k


def test_import_zarchive_does_not_load_the_staging_buffer() -> None:
    """`import zarchive` stays light: the staging module (and numpy with it) loads on the first save_async."""
    code = "import sys, zarchive; print('zarchive.saving.staging' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_exit_hook_falls_back_to_atexit_when_cpython_has_no_thread_exit_hook() -> None:
    """Without threading._register_atexit the wait is registered with atexit (later, best effort)."""
    import atexit

    from zarchive._compat import disable_for_test
    from zarchive._compat.cpython import call_before_threads_stop

    calls: list[int] = []

    def hook() -> None:
        calls.append(1)

    with disable_for_test("cpython.register_atexit"):
        assert call_before_threads_stop(hook) is False
    atexit.unregister(hook)  # (registered with atexit: taken back, so it does not run at this exit)
    assert call_before_threads_stop(lambda: None) is True  # this CPython has the hook


@pytest.mark.parametrize("run", range(4))
def test_exit_waits_even_when_the_write_starts_after_the_main_thread_ended(tmp_path: Path, run: int) -> None:
    """The script ends at once; the write (checksum and compression threads included) happens while
    the interpreter exits. Before the exit hook, pools refusing new work at exit lost such saves."""
    script = (
        "import sys, torch, zarchive\n"
        "obj = {'w': torch.arange(8_000_000, dtype=torch.int64), 'f': torch.ones(3_000_000)}\n"
        "zarchive.save_async(obj, sys.argv[1])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "late.zarc")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert torch.equal(zarchive.read(tmp_path / "late.zarc")["w"], torch.arange(8_000_000, dtype=torch.int64))
