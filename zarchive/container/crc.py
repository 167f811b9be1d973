"""CRC-32 (the zip polynomial) helpers.

The writer checksums each tensor separately (so a lazy reader can verify one tensor without reading
its neighbours) and the member as a whole (the zip header needs it). `crc32_combine` derives the
member's CRC from the parts' CRCs, so large buffers are scanned once, not twice.
"""

from __future__ import annotations

import zlib

_POLY = 0xEDB88320


def _multmodp(a: int, b: int) -> int:
    """Multiply a and b modulo the CRC polynomial (bit-reflected representation)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _build_x2n_table() -> tuple[int, ...]:
    table = [1 << 30]  # x^1
    for _ in range(31):
        table.append(_multmodp(table[-1], table[-1]))
    return tuple(table)


_X2N = _build_x2n_table()


def _x2nmodp(n: int, k: int) -> int:
    """x^(n * 2^k) modulo the polynomial."""
    p = 1 << 31  # x^0
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return p


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A+B from crc32(A), crc32(B) and len(B); O(log len2), no data touched (ISA-L's
    zlib-compatible combine when installed, ~100x this module's own in pure Python)."""
    return _combine_impl(crc1, crc2, len2)


def _combine_py(crc1: int, crc2: int, len2: int) -> int:
    return _multmodp(_x2nmodp(len2, 3), crc1) ^ crc2


try:  # isal (a dependency where it has wheels): ISA-L's CRC-32 is ~3x zlib's, with equal results
    from isal.isal_zlib import crc32 as _crc32_impl
    from isal.isal_zlib import crc32_combine as _combine_impl
except ImportError:  # pragma: no cover - Windows on ARM (no isal wheel), or isal removed: zlib's
    _crc32_impl = zlib.crc32
    _combine_impl = _combine_py

CRC32_BACKEND = "isal" if _crc32_impl is not zlib.crc32 else "zlib"


def crc32(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32 of the zip polynomial (ISA-L's when installed, else zlib's; both release the GIL)."""
    return _crc32_impl(data, value)


def crc_hex(value: int) -> str:
    """The form checksums take in the metadata: 8 lowercase hex digits."""
    return f"{value & 0xFFFFFFFF:08x}"
