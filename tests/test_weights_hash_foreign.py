"""The weights hash of a foreign file (`.pt`, `.safetensors`, `.npy`, `.npz`) read directly: the same as
the hash of the same values saved as `.zarc`, and changed by any byte, shape, dtype or name.

The hash finds tensors by their node type (`NodeSchema.tensor`); a node type that reads as a tensor
without saying so is invisible to it, and every such file hashed as the empty set. The contract test
at the end walks files of every input kind and checks that the nodes the hash fetches are exactly the
nodes that read as tensors."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import forkrun
import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import zarchive
from zarchive.engine.objpath import join_path
from zarchive.weights_hash import combine, state_dict_hash

ROOT = Path(__file__).resolve().parent.parent
EMPTY = combine({})


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return {
        "fc1.weight": torch.randn(4, 3, generator=g),
        "fc1.bias": torch.randn(4, generator=g).to(torch.bfloat16),
        "steps": torch.tensor(7, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
    }


def _hash(path: Path, objpath: str = "") -> str:
    with zarchive.open(path) as arc:
        return str(arc.weights_hash(objpath))


def _write(sd: dict[str, torch.Tensor], path: Path) -> Path:
    if path.suffix == ".pt":
        torch.save(sd, path)
    elif path.suffix == ".safetensors":
        save_file(sd, str(path))
    else:
        zarchive.save(sd, path)
    return path


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_foreign_file_hashes_like_the_zarc(tmp_path: Path, suffix: str) -> None:
    sd = _state()
    expected = _hash(_write(sd, tmp_path / "w.zarc"))
    assert expected == state_dict_hash(sd) != EMPTY
    assert _hash(_write(sd, tmp_path / f"w{suffix}")) == expected


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_any_change_to_a_foreign_file_changes_its_hash(tmp_path: Path, suffix: str) -> None:
    sd = _state()
    w = sd["fc1.weight"]
    variants = {
        "base": sd,
        "renamed": {("fc9.weight" if k == "fc1.weight" else k): v for k, v in sd.items()},
        "reshaped": sd | {"fc1.weight": w.reshape(3, 4).clone()},
        "dtype": sd | {"fc1.weight": w.view(torch.int32).clone()},
        "dropped": {k: v for k, v in sd.items() if k != "steps"},
    }
    hashes = {name: _hash(_write(v, tmp_path / f"{name}{suffix}")) for name, v in variants.items()}
    assert len(set(hashes.values())) == len(hashes), hashes
    for name, v in variants.items():
        assert hashes[name] == state_dict_hash(v), name


def test_one_flipped_data_byte_changes_a_safetensors_hash(tmp_path: Path) -> None:
    sd = {"w": torch.arange(12, dtype=torch.float32)}
    path = _write(sd, tmp_path / "w.safetensors")
    base = _hash(path)
    raw = bytearray(path.read_bytes())
    (header_len,) = struct.unpack("<Q", raw[:8])
    begin, end = json.loads(raw[8 : 8 + header_len])["w"]["data_offsets"]
    for at in (begin, (begin + end) // 2, end - 1):  # first, middle and last byte of the data
        flipped = bytearray(raw)
        flipped[8 + header_len + at] ^= 1
        (tmp_path / "f.safetensors").write_bytes(bytes(flipped))
        assert _hash(tmp_path / "f.safetensors") != base


def test_one_flipped_data_byte_in_a_pt_file_changes_or_fails_its_hash(tmp_path: Path) -> None:
    sd = {"w": torch.arange(64, dtype=torch.float32) + 1000.0}
    path = _write(sd, tmp_path / "w.pt")
    base = _hash(path)
    raw = path.read_bytes()
    needle = torch.tensor([1031.0]).numpy().tobytes()  # element 31: inside the stored data only
    at = raw.index(needle)
    flipped = bytearray(raw)
    flipped[at] ^= 1
    (tmp_path / "f.pt").write_bytes(bytes(flipped))
    try:
        changed = _hash(tmp_path / "f.pt")
    except zarchive.ZArchiveError:  # the zip member's CRC caught it
        return
    assert changed != base


def test_cli_hash_of_foreign_files(tmp_path: Path) -> None:
    sd = _state()
    expected = state_dict_hash(sd)
    for suffix in (".pt", ".safetensors"):
        path = _write(sd, tmp_path / f"w{suffix}")
        out = forkrun.cli("hash", path, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == expected, suffix


def test_numpy_files_hash_like_the_zarc_of_the_same_arrays(tmp_path: Path) -> None:
    # spec/weights-hash.md 1: numpy arrays are not tensors, in a .zarc or in an .npy / .npz file alike
    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, 2], dtype=np.int64)}
    np.savez(tmp_path / "w.npz", **arrays)
    np.save(tmp_path / "a.npy", arrays["a"])
    zarchive.save(arrays, tmp_path / "w.zarc")
    zarchive.save(arrays["a"], tmp_path / "a.zarc")
    assert _hash(tmp_path / "w.npz") == _hash(tmp_path / "w.zarc")
    assert _hash(tmp_path / "a.npy") == _hash(tmp_path / "a.zarc")


# --- the contract: the hash fetches exactly the nodes that read as tensors ---
def _nodes(arc: Any, node: Any, rel: list[str]) -> Iterator[tuple[str, Any]]:
    yield join_path(rel), node
    if isinstance(node, dict) and arc.is_tensor(node):
        return
    kids = arc.children(node) if isinstance(node, (dict, list)) else None
    for key, child in (kids or {}).items():
        yield from _nodes(arc, child, [*rel, key])


def _files(tmp_path: Path) -> Iterator[Path]:
    sd = _state()
    nested = {"model": sd, "extra": {"t": torch.arange(3), "n": 1, "list": [torch.ones(2), "x"]}}
    yield _write(sd, tmp_path / "w.pt")
    yield _write(sd, tmp_path / "w.safetensors")
    torch.save(nested, tmp_path / "nested.pt")
    yield tmp_path / "nested.pt"
    zarchive.save(nested, tmp_path / "nested.zarc")
    yield tmp_path / "nested.zarc"
    params = {k: torch.nn.Parameter(v.clone(), requires_grad=False) for k, v in sd.items() if v.is_floating_point()}
    zarchive.save(params, tmp_path / "nodes.zarc", compress=False)  # parameters: one node each
    yield tmp_path / "nodes.zarc"
    zarchive.save(sd, tmp_path / "table.zarc")  # plain tensors: a tensor table
    yield tmp_path / "table.zarc"


def test_every_node_that_reads_as_a_tensor_is_hashed(tmp_path: Path) -> None:
    for path in _files(tmp_path):
        with zarchive.open(path) as arc:
            for objpath, node in _nodes(arc, arc.node(""), []):
                if objpath == "":
                    continue
                value = arc.get(objpath)
                declared = isinstance(node, dict) and arc.is_tensor(node)
                assert declared == isinstance(value, torch.Tensor), (path.name, objpath)


# --- views that are not contiguous: hashed in pieces, within the read budget ---
def _views() -> dict[str, torch.Tensor]:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return {
        "expanded": torch.tensor([1.5, -2.0, 3.25]).expand(5, 3),
        "scalar_expanded": torch.tensor(7, dtype=torch.int16).expand(4, 2, 3),
        "transposed": base.t(),
        "stepped": base[:, ::2],
        "inner_expanded": torch.arange(3, dtype=torch.int64).reshape(3, 1).expand(3, 4),
    }


@pytest.mark.parametrize("piece", [1, 8, 40, 1 << 20])
def test_views_hash_like_their_contiguous_copies(monkeypatch: pytest.MonkeyPatch, piece: int) -> None:
    import zarchive.weights_hash as wh

    monkeypatch.setattr(wh, "HASH_PIECE", piece)  # pieces smaller than a row, a few rows, the whole
    for name, view in _views().items():
        assert not view.is_contiguous(), name
        want = wh.tensor_digest(view.contiguous())
        assert wh.tensor_digest(view) == want, name
        assert wh.tensor_digest(view.numpy()) == wh.tensor_digest(view.contiguous().numpy()), name
    big_endian = np.arange(12, dtype=">i4").reshape(3, 4)
    assert wh.tensor_digest(big_endian.T) == wh.tensor_digest(np.ascontiguousarray(big_endian.T).astype("<i4"))


def test_a_pt_file_of_views_hashes_like_the_zarc(tmp_path: Path) -> None:
    sd = _views()
    torch.save(sd, tmp_path / "v.pt")  # torch.save keeps the views: strides and shared storages
    zarchive.save({k: v.contiguous() for k, v in sd.items()}, tmp_path / "v.zarc")
    assert _hash(tmp_path / "v.pt") == _hash(tmp_path / "v.zarc") == state_dict_hash(sd)


def _limits() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def test_expanded_tensor_past_the_budget_is_refused_not_materialised(tmp_path: Path) -> None:
    # a 1.4 KB file naming 8 GB of values (one float32 repeated 2**31 times): before the open gate
    # counted hashing, `zarchive hash` copied it whole (a raw RuntimeError, or gigabytes resident)
    torch.save({"w": torch.zeros(1).expand(1 << 31)}, tmp_path / "zs.pt")
    assert (tmp_path / "zs.pt").stat().st_size < 4096
    code = f"""
import resource, zarchive
try:
    with zarchive.open({str(tmp_path / "zs.pt")!r}) as arc:
        arc.weights_hash()
    print("hashed")
except zarchive.ZArchiveError as e:
    print(type(e).__name__, e.path)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        preexec_fn=_limits,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    verdict, peak_mb = out.stdout.split("\n")[:2]
    assert verdict == "UnsafeArchiveError w"
    assert int(peak_mb) < 1500  # torch itself is a few hundred MB; the 8 GB were never allocated
    cli = subprocess.run(
        [sys.executable, "-m", "zarchive", "hash", str(tmp_path / "zs.pt")],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        preexec_fn=_limits,
    )
    assert cli.returncode == 2, (cli.stdout, cli.stderr)
    assert "max_read_bytes" in cli.stderr and "Traceback" not in cli.stderr


def test_expanded_tensor_within_the_budget_is_hashed_in_bounded_memory(tmp_path: Path) -> None:
    n = 100_000_000  # 400 MB of values from a 1.4 KB file, within the default budget
    torch.save({"w": torch.full((1,), 0.5).expand(n)}, tmp_path / "zs.pt")
    code = f"""
import resource, zarchive
with zarchive.open({str(tmp_path / "zs.pt")!r}) as arc:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(arc.weights_hash())
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=300,
        preexec_fn=_limits,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    digest, grew_mb = out.stdout.split("\n")[:2]
    assert int(grew_mb) < 250  # not the 400 MB copy
    h = hashlib.sha256(b"zarchive.tensor.v1\x00")
    h.update(struct.pack("<I", 7) + b"float32" + struct.pack("<I", 1) + struct.pack("<Q", n) + struct.pack("<Q", 4 * n))
    piece = torch.full((1 << 20,), 0.5).numpy().tobytes()
    for _ in range(n >> 20):
        h.update(piece)
    h.update(piece[: 4 * (n % (1 << 20))])
    assert digest == combine({"w": h.digest()})
