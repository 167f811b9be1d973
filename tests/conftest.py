"""Shared fixtures: a round-trip runner over every reading route, and an exact (bitwise) comparison;
hypothesis' settings for the suite."""

from __future__ import annotations

import itertools
import math
import struct
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import settings

import zarchive

# No example database: a failing example saved in a checkout's .hypothesis/ would be replayed first by
# every later run there, so one flaky failure (or a test since fixed) kept failing that checkout only.
# A failure prints its example and a @reproduce_failure blob to replay it instead. Examples are random;
# `pytest --hypothesis-profile=derandomized` runs a fixed set (the same on every run and machine).
settings.register_profile("zarchive", database=None, print_blob=True)
settings.register_profile("derandomized", settings.get_profile("zarchive"), derandomize=True)
settings.load_profile("zarchive")

_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def tensor_bytes(t: torch.Tensor) -> bytes:
    """A tensor's values as bytes, also for dtypes torch cannot copy (int1..7, bits*)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.numel() == 0:
        return b""
    carrier = _SAME_SIZE_INT.get(t.element_size())
    if carrier is not None and t.dtype != carrier:
        t = t.view(carrier)
    flat = t.contiguous().reshape(-1)
    if flat.stride(0) != 1:  # one element can carry any stride and still count as contiguous
        flat = flat.as_strided((flat.numel(),), (1,))
    return flat.view(torch.uint8).numpy().tobytes()


def array_bytes(arr: np.ndarray) -> bytes:
    """An array's values as bytes; for long doubles only the significant bytes (x87's 80-bit format
    leaves 6 padding bytes of 16 undefined, and numpy does not keep them when copying a scalar)."""
    if arr.dtype.char not in "gG" or arr.size == 0:
        return arr.tobytes()
    finfo = np.finfo(np.longdouble)
    width = np.dtype(np.longdouble).itemsize
    significant = (finfo.nmant + finfo.nexp + 1 + 7) // 8
    if sys.byteorder != "little" or significant >= width:
        return arr.tobytes()
    return np.ascontiguousarray(arr).view(np.uint8).reshape(-1, width)[:, :significant].tobytes()


def _float_bits(x: float) -> bytes:
    return struct.pack("<d", x)


def assert_same(a: Any, b: Any, where: str = "/") -> None:
    """`b` is exactly `a`: same types all the way down, same key order, floats equal bit for bit."""
    assert type(a) is type(b), f"{where}: {type(b).__qualname__} instead of {type(a).__qualname__}"
    if isinstance(a, float):
        assert _float_bits(a) == _float_bits(b), f"{where}: {b!r} != {a!r}"
    elif isinstance(a, complex):
        assert _float_bits(a.real) + _float_bits(a.imag) == _float_bits(b.real) + _float_bits(b.imag), where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.dtype.str == b.dtype.str, f"{where}: dtype {b.dtype} != {a.dtype}"
        assert a.shape == b.shape, f"{where}: shape {b.shape} != {a.shape}"
        if a.dtype == object:
            for i, (x, y) in enumerate(zip(a.reshape(-1), b.reshape(-1))):
                assert_same(x, y, f"{where}[{i}]")
        else:
            assert array_bytes(a) == array_bytes(b), f"{where}: values differ"
        if a.ndim > 1 and a.flags.f_contiguous and not a.flags.c_contiguous:
            assert b.flags.f_contiguous, f"{where}: a Fortran-ordered array came back C-ordered"
    elif isinstance(a, np.generic):
        assert a.dtype.str == b.dtype.str, f"{where}: dtype {b.dtype} != {a.dtype}"
        assert array_bytes(np.asarray(a)) == array_bytes(np.asarray(b)), f"{where}: {b!r} != {a!r}"
    elif isinstance(a, torch.Tensor):
        assert (a.dtype, tuple(a.shape), a.device) == (b.dtype, tuple(b.shape), b.device), where
        assert a.requires_grad == b.requires_grad, f"{where}: requires_grad {b.requires_grad}"
        assert tensor_bytes(a) == tensor_bytes(b), f"{where}: tensor values differ"
    elif isinstance(a, dict):
        assert [(type(k), k) for k in a] == [(type(k), k) for k in b], f"{where}: keys {list(b)} != {list(a)}"
        if isinstance(a, defaultdict):
            assert a.default_factory is b.default_factory, f"{where}: default_factory"
        for k in a:
            assert_same(a[k], b[k], f"{where}{k!r}/")
    elif isinstance(a, (list, tuple)) and not isinstance(a, torch.Size):
        assert len(a) == len(b), f"{where}: length {len(b)} != {len(a)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}{i}/")
    elif isinstance(a, (set, frozenset)):
        assert a == b, f"{where}: {b!r} != {a!r}"
        assert sorted(map(repr, a)) == sorted(map(repr, b)), f"{where}: {b!r} != {a!r}"
    else:  # value types: repr is exact for Decimal (digits, sNaN), datetime (tzinfo, fold), paths, enums
        assert repr(a) == repr(b), f"{where}: {b!r} != {a!r}"
        if not (isinstance(a, float) and math.isnan(a)) and type(a).__module__ != "decimal":
            assert a == b, f"{where}: {b!r} != {a!r}"


Roundtrip = Callable[..., list[tuple[str, Any]]]


@pytest.fixture
def roundtrip(tmp_path: Path) -> Roundtrip:
    """roundtrip(obj, **settings) -> [(route, loaded)] for: save+read, save+read(lazy=False), and the
    value nested one level down, saved and taken with open(...)["item"]."""
    counter = itertools.count()

    def run(obj: Any, **settings: Any) -> list[tuple[str, Any]]:
        settings.setdefault("durable", False)  # fsync changes no byte of the file, only the test's speed
        n = next(counter)
        top = tmp_path / f"top{n}.zarc"
        nested = tmp_path / f"nested{n}.zarc"
        zarchive.save(obj, top, **settings)
        zarchive.save({"item": obj}, nested, **settings)
        out = [("read", zarchive.read(top)), ("read-eager", zarchive.read(top, lazy=False))]
        with zarchive.open(nested) as arc:
            out.append(("open[item]", arc["item"]))
        return out

    return run


@pytest.fixture
def check_roundtrip(roundtrip: Roundtrip) -> Callable[..., list[Any]]:
    """Round-trip `obj` through every route and assert each result is exactly `obj`."""

    def run(obj: Any, **settings: Any) -> list[Any]:
        results = roundtrip(obj, **settings)
        for route, loaded in results:
            assert_same(obj, loaded, f"[{route}] /")
        return [loaded for _, loaded in results]

    return run


@pytest.fixture
def same() -> Callable[..., None]:
    """assert_same(expected, actual): exact equality, see above."""
    return assert_same


@pytest.fixture
def raw_bytes() -> Callable[[torch.Tensor], bytes]:
    """tensor_bytes(t): a tensor's values as bytes, for bitwise comparisons."""
    return tensor_bytes


@pytest.fixture
def mem_url() -> Iterator[str]:
    """A fresh folder on fsspec's (process-wide) memory filesystem, removed afterwards."""
    fsspec = pytest.importorskip("fsspec")
    import uuid

    root = f"/zarchive-test-{uuid.uuid4().hex}"
    yield f"memory://{root}"
    mem = fsspec.filesystem("memory")
    if mem.exists(root):
        mem.rm(root, recursive=True)


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, Any]]:
    """moto's S3 server in a subprocess on a free loopback port, with a bucket and the s3fs options
    that reach it (tests/s3_server.py); skipped where s3fs or moto is not installed."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from tests.s3_server import moto_s3

    with moto_s3() as server:
        yield server
