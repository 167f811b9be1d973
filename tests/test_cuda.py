"""Tensors on a CUDA device: saved, read back to the GPU or to the host, loaded into GPU memory the
caller has, compressed, checkpointed with an optimizer, and read from torch.save files written on a
GPU. Skipped where torch sees no CUDA device (CI); run on a GPU machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import zarchive

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _weights() -> dict[str, torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    return {
        "w": torch.randn(1024, 700, device="cuda", generator=gen) * 0.02,  # more than one compressed chunk
        "h": torch.randn(4096, device="cuda", generator=gen).to(torch.bfloat16),
        "i": torch.arange(1000, device="cuda"),
        "b": torch.rand(33, device="cuda", generator=gen) > 0.5,
        "e": torch.empty(0, 3, device="cuda"),
    }


def _host(value: Any) -> Any:
    return {k: v.cpu() for k, v in value.items()}


@pytest.mark.parametrize("compress_weights", [False, True], ids=["plain", "compressed"])
def test_read_to_the_gpu_and_to_the_host(tmp_path: Path, compress_weights: bool) -> None:
    values = _weights()
    path = zarchive.save(values, tmp_path / "w.zarc", compress_weights=compress_weights)
    for map_location, device in ((None, "cpu"), ("cuda", "cuda"), ("saved", "cuda"), ({"cuda:0": "cpu"}, "cpu")):
        back = zarchive.read(path, map_location=map_location)
        for key, value in values.items():
            assert back[key].device.type == device, (map_location, key)
            assert back[key].dtype == value.dtype and torch.equal(back[key].cpu(), value.cpu()), (map_location, key)
    with zarchive.open(path) as arc:
        one = arc.get("w", map_location="cuda")
        assert one.is_cuda and torch.equal(one, values["w"])


@pytest.mark.parametrize("compress_weights", [False, True], ids=["plain", "compressed"])
def test_load_into_gpu_memory(tmp_path: Path, compress_weights: bool) -> None:
    """load_into a CUDA tensor fills that tensor: same storage, every byte equal."""
    values = _weights()
    path = zarchive.save(values, tmp_path / "w.zarc", compress_weights=compress_weights)
    with zarchive.open(path) as arc:
        for key, value in values.items():
            out = torch.zeros_like(value)
            ptr = out.data_ptr()
            assert arc.load_into(key, out) is out
            assert out.is_cuda and out.data_ptr() == ptr and torch.equal(out, value), key


def test_model_and_optimizer_checkpoint_on_the_gpu(tmp_path: Path) -> None:
    """A CUDA model and its Adam state: saved with compressed moments, restored into a fresh CUDA
    model whose training then goes on exactly as the original's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(16, 32, device="cuda")

    def step(m: torch.nn.Module, o: torch.optim.Optimizer) -> None:
        m(x).pow(2).mean().backward()
        o.step()
        o.zero_grad()

    step(model, opt)
    path = zarchive.save_checkpoint(tmp_path / "ck.zarc", model, opt, compress_weights=True)
    model2 = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).cuda()
    opt2 = torch.optim.Adam(model2.parameters(), lr=1e-3)
    zarchive.load_checkpoint(path, model2, opt2)
    assert all(s["exp_avg_sq"].is_cuda for s in opt2.state.values())
    step(model, opt)
    step(model2, opt2)
    for a, b in zip(model.parameters(), model2.parameters(), strict=True):
        assert b.is_cuda and torch.equal(a, b)


def test_torch_save_file_written_on_the_gpu(tmp_path: Path) -> None:
    """A torch.save file whose storages say 'cuda:0' reads through the restricted reader: onto the
    host by default, onto the GPU when asked, and converts into an archive."""
    values = _weights()
    torch.save(values, tmp_path / "gpu.pt")
    on_host = zarchive.read(tmp_path / "gpu.pt")
    on_gpu = zarchive.read(tmp_path / "gpu.pt", map_location="cuda")
    for key, value in values.items():
        assert on_host[key].device.type == "cpu" and torch.equal(on_host[key], value.cpu()), key
        assert on_gpu[key].is_cuda and torch.equal(on_gpu[key], value), key
    zarchive.save(zarchive.read(tmp_path / "gpu.pt", map_location="saved"), tmp_path / "from_pt.zarc")
    assert all(torch.equal(v, values[k].cpu()) for k, v in zarchive.read(tmp_path / "from_pt.zarc").items())


def test_safetensors_read_to_the_gpu(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    values = {k: v for k, v in _host(_weights()).items() if k != "e"}
    save_file(values, str(tmp_path / "w.safetensors"))
    back = zarchive.read(tmp_path / "w.safetensors", map_location="cuda")
    for key, value in values.items():
        assert back[key].is_cuda and torch.equal(back[key].cpu(), value), key
