"""LazyArchive.load_into: a stored tensor read and checked straight into memory the caller has."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest
import torch

import zarchive


def _values() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(40, 30, generator=gen)
    return {
        "w": torch.randn(500, 300, generator=gen) * 0.02,  # several MB: more than one compressed chunk
        "h": torch.randn(3000, generator=gen).to(torch.bfloat16),
        "i": torch.arange(1000, dtype=torch.int64),
        "b": torch.tensor([True, False, True]),
        "e": torch.empty(0, 7),
        "c": torch.randn(50, dtype=torch.complex64, generator=gen),
        "view": base[:, 3],  # a view of a shared storage: loaded, then copied in
        "base": base,
    }


@pytest.mark.parametrize("compress_weights", [False, True])
@pytest.mark.parametrize("mmap", [False, True])
def test_every_tensor_fills_the_callers_memory(tmp_path: Path, compress_weights: bool, mmap: bool) -> None:
    values = _values()
    zarchive.save(values, tmp_path / "a.zarc", compress_weights=compress_weights, durable=False)
    with zarchive.ZArchive(mmap=mmap).open(tmp_path / "a.zarc") as arc:
        for key, value in values.items():
            out = torch.full_like(value, 7) if value.dtype != torch.bool else torch.zeros_like(value)
            ptr = out.data_ptr()
            assert arc.load_into(key, out) is out
            assert out.data_ptr() == ptr and torch.equal(out, value), key


def test_a_non_contiguous_destination_is_filled_by_a_copy(tmp_path: Path) -> None:
    value = torch.randn(20, 10)
    zarchive.save({"t": value}, tmp_path / "a.zarc", durable=False)
    holder = torch.zeros(10, 20)
    out = holder.t()  # (20, 10), not contiguous
    with zarchive.open(tmp_path / "a.zarc") as arc:
        arc.load_into("t", out)
    assert torch.equal(holder.t(), value)


def test_the_model_parameters_take_the_weights_in_place(tmp_path: Path) -> None:
    torch.manual_seed(0)
    src, dst = torch.nn.Linear(64, 32), torch.nn.Linear(64, 32)
    zarchive.save(src.state_dict(), tmp_path / "w.zarc", durable=False)
    before = {k: p.data_ptr() for k, p in dst.state_dict().items()}
    with zarchive.open(tmp_path / "w.zarc") as arc, torch.no_grad():
        for key, param in dst.state_dict().items():
            arc.load_into(key, param)
    assert all(torch.equal(a, b) for a, b in zip(src.state_dict().values(), dst.state_dict().values(), strict=True))
    assert {k: p.data_ptr() for k, p in dst.state_dict().items()} == before


@pytest.mark.parametrize(
    "out", [torch.empty(3), torch.empty(20, 10, dtype=torch.float64), "not a tensor"], ids=["shape", "dtype", "type"]
)
def test_what_does_not_match_is_refused(tmp_path: Path, out: object) -> None:
    zarchive.save({"t": torch.randn(20, 10), "s": "text"}, tmp_path / "a.zarc", durable=False)
    with zarchive.open(tmp_path / "a.zarc") as arc:
        with pytest.raises(zarchive.FormatError, match="not a tensor like `out`") as info:
            arc.load_into("t", out)
        assert info.value.path == "t"
        with pytest.raises(zarchive.FormatError, match="not a tensor like"):
            arc.load_into("s", torch.empty(1))
        with pytest.raises(zarchive.MemberNotFoundError):
            arc.load_into("nothing/here", torch.empty(1))


@pytest.mark.parametrize("compress_weights", [False, True])
def test_damaged_bytes_are_refused_and_named(tmp_path: Path, compress_weights: bool) -> None:
    value = torch.randn(1000, 1000) * 0.02
    zarchive.save({"t": value}, tmp_path / "a.zarc", compress_weights=compress_weights, durable=False)
    data = bytearray((tmp_path / "a.zarc").read_bytes())
    with zipfile.ZipFile(tmp_path / "a.zarc") as z:
        (info,) = [i for i in z.infolist() if i.filename.startswith("tensors.safetensors")]
    name = info.filename
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    at = info.header_offset + 30 + name_len + extra_len + info.compress_size // 2  # the middle of its stored bytes
    data[at] ^= 0x40
    (tmp_path / "b.zarc").write_bytes(data)
    with zarchive.open(tmp_path / "b.zarc") as arc, pytest.raises(zarchive.IntegrityError) as info:
        arc.load_into("t", torch.empty(1000, 1000))
    assert info.value.member == name and "checksum" in str(info.value)
