"""CRC-32: the optional ISA-L backend agrees with zlib, and crc32_combine with direct computation."""

from __future__ import annotations

import os
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarchive.container import crc


@given(st.binary(max_size=5000), st.binary(max_size=5000))
@settings(max_examples=100, deadline=None)
def test_combine_matches_direct(a: bytes, b: bytes) -> None:
    assert crc.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


@pytest.mark.parametrize("size", [0, 1, 63, 4096, 1 << 20])
def test_backend_agrees_with_zlib(size: int) -> None:
    data = os.urandom(size)
    assert crc.crc32(data) == zlib.crc32(data)
    assert crc.crc32(data, 12345) == zlib.crc32(data, 12345)
    assert crc.CRC32_BACKEND in ("zlib", "isal")


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**45))
@settings(max_examples=200, deadline=None)
def test_both_combines_agree(crc1: int, crc2: int, len2: int) -> None:
    """The pure-Python combine (the fallback without ISA-L) and the backend's agree, lengths past 4 GiB too."""
    assert crc.crc32_combine(crc1, crc2, len2) == crc._combine_py(crc1, crc2, len2)
