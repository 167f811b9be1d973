"""ISA-L's CRC-32 is a dependency: a default install verifies with it, it equals zlib's on any data
(whole, in chunks with a running value, combined from parts), and zlib takes over where isal is absent."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.version import Version

import zarchive
from zarchive.container import crc

ROOT = Path(__file__).resolve().parent.parent


def _isal_requirement() -> Requirement:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (req,) = [Requirement(d) for d in deps if Requirement(d).name == "isal"]
    return req


def test_isal_is_a_dependency_with_zlib_only_where_it_has_no_wheel() -> None:
    req = _isal_requirement()
    assert req.marker is not None
    base = {"sys_platform": "linux", "platform_machine": "x86_64"}
    wheels = [("linux", "x86_64"), ("linux", "aarch64"), ("darwin", "x86_64"), ("darwin", "arm64"), ("win32", "AMD64")]
    for platform, machine in wheels:
        assert req.marker.evaluate({**base, "sys_platform": platform, "platform_machine": machine}), (platform, machine)
    assert not req.marker.evaluate({**base, "sys_platform": "win32", "platform_machine": "ARM64"})
    (spec,) = req.specifier
    floors = [
        Requirement(line.split(" #")[0])
        for line in (ROOT / "requirements-floors.txt").read_text().splitlines()
        if line[:1].isalpha()
    ]
    (pin,) = [next(iter(f.specifier)) for f in floors if f.name == "isal"]  # make test-floors installs the floor
    assert spec.operator == ">=" and pin.operator == "==" and Version(pin.version) == Version(spec.version)


def test_a_default_install_uses_isal() -> None:
    marker = _isal_requirement().marker
    if marker is not None and not marker.evaluate():
        pytest.skip("no isal wheel for this platform: zlib's CRC-32 is the default here")
    assert crc.CRC32_BACKEND == "isal"
    from isal.isal_zlib import crc32

    assert crc.crc32 is not zlib.crc32 and crc.crc32(b"abc") == crc32(b"abc")


isal_zlib = pytest.importorskip("isal.isal_zlib")


@given(st.binary(max_size=1 << 16), st.integers(0, 0xFFFFFFFF))
@settings(max_examples=200, deadline=None)
def test_isal_equals_zlib(data: bytes, start: int) -> None:
    assert isal_zlib.crc32(data) == zlib.crc32(data)
    assert isal_zlib.crc32(data, start) == zlib.crc32(data, start)
    assert crc.crc32(memoryview(data)) == zlib.crc32(data)


@given(st.lists(st.binary(max_size=5000), max_size=8), st.integers(0, 0xFFFFFFFF))
@settings(max_examples=200, deadline=None)
def test_chunked_and_combined_agree(chunks: list[bytes], start: int) -> None:
    """How the writer uses it: a running CRC over parts, and parts' CRCs combined (crc32_combine)."""
    whole = b"".join(chunks)
    running_isal = running_zlib = start
    combined = zlib.crc32(b"", start)
    for c in chunks:
        running_isal = isal_zlib.crc32(c, running_isal)
        running_zlib = zlib.crc32(c, running_zlib)
        combined = crc.crc32_combine(combined, isal_zlib.crc32(c), len(c))
    assert running_isal == running_zlib == zlib.crc32(whole, start) == combined


def test_big_unaligned_buffers() -> None:
    data = os.urandom((8 << 20) + 13)
    for lo, hi in [(0, len(data)), (1, len(data) - 1), (7, 1 << 20), (3 << 20, (3 << 20) + 4097)]:
        view = memoryview(data)[lo:hi]
        assert crc.crc32(view) == zlib.crc32(view) == isal_zlib.crc32(view)


FALLBACK = """
import sys, zlib
sys.modules["isal"] = None  # as on a platform without an isal wheel
from zarchive.container import crc
import zarchive, torch
zarchive.save({"w": torch.arange(1000.0)}, sys.argv[1], durable=False)
print(crc.CRC32_BACKEND, crc.crc32(b"zarchive") == zlib.crc32(b"zarchive"), bool(zarchive.verify(sys.argv[1])))
"""


def test_zlib_takes_over_without_isal(tmp_path: Path) -> None:
    path = tmp_path / "z.zarc"
    out = subprocess.run(
        [sys.executable, "-c", FALLBACK, str(path)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["zlib", "True", "True"]
    assert crc.CRC32_BACKEND == "isal" and zarchive.verify(path)  # and read here with isal
