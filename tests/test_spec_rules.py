"""Rules of the spec that were once left undefined, each checked against what zarchive does:
the name of a float dict key (README 3.1.1), which names collide (section 1), gaps between zip
entries (section 1), float16/float32 NaN scalars (5.2), concrete paths read on another platform and
times in a named zone (5.1)."""

from __future__ import annotations

import datetime as dt
import math
import pathlib
import zoneinfo
from pathlib import Path

import numpy as np
import pytest
from hostile.craft import ZEntry, build_zip, dumps, metadata_table, unpack
from hypothesis import given
from hypothesis import strategies as st

import zarchive
from zarchive.container.names import collision_key
from zarchive.nodes.values import node_label


def spec_float_name(x: float) -> str:
    """README 3.1.1, written from the spec's words: shortest digits, then positional notation for
    exponents -4..15, else d[.ddd]e±XX."""
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    mantissa, exp_text = np.format_float_scientific(abs(x), unique=True, trim="-").split("e")
    digits = mantissa.replace(".", "")
    e = int(exp_text)
    if -4 <= e < 16:
        if e >= 0:
            whole, frac = digits[: e + 1].ljust(e + 1, "0"), digits[e + 1 :]
        else:
            whole, frac = "0", "0" * (-e - 1) + digits
        return f"{sign}{whole}.{frac or '0'}"
    body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{body}e{'-' if e < 0 else '+'}{abs(e):02d}"


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_float_key_is_named_as_the_spec_says(x: float) -> None:
    assert node_label(x) == spec_float_name(x) == repr(x)


@pytest.mark.parametrize("x", [1.0, 0.0001, 1e-05, 1e16, 1234567890123456.0, 1.5e16, 1e300, -0.0, 5e-324])
def test_float_key_names_at_the_edges(x: float) -> None:
    assert node_label(x) == spec_float_name(x) == repr(x)


def test_names_collide_after_nfc_and_lowercasing_and_zarchive_also_folds() -> None:
    assert collision_key("Caf\u00e9.npy") == collision_key("cafe\u0301.NPY")  # NFC, then lowercase
    assert collision_key("STRASSE") == collision_key("stra\u00dfe")  # full folding: what zarchive adds (MAY)
    assert "stra\u00dfe".lower() != "strasse"  # (which lowercasing alone does not collide)


def _with_gaps(src: Path, dst: Path) -> Path:
    """`src` written again with an unlisted 64-byte entry (bytes no member owns) between two members."""
    parts = unpack(src.read_bytes())
    mbytes = dumps(parts.manifest)
    raw = dict(parts.members)
    meta = dict(parts.meta)
    meta["members"] = metadata_table(parts, mbytes, raw)
    entries = [ZEntry("manifest.json", mbytes, align=1), ZEntry("junk", b"\x00" * 64, align=1)]
    entries += [ZEntry(n, raw[n]) for n in parts.members]
    entries.append(ZEntry("metadata.json", dumps(meta), align=1))
    order = [0, len(entries) - 1, *range(2, len(entries) - 1)]  # "junk" (1) is listed nowhere
    dst.write_bytes(build_zip(entries, cd_order=order))
    return dst


def test_gaps_between_entries_are_ignored(tmp_path: Path) -> None:
    src = Path(zarchive.save({"a": np.arange(300), "s": "x"}, tmp_path / "a.zarc", compress=False, durable=False))
    gapped = _with_gaps(src, tmp_path / "gapped.zarc")
    back = zarchive.read(gapped)
    assert back["s"] == "x" and np.array_equal(back["a"], np.arange(300))
    with zarchive.open(gapped) as arc:
        assert arc.verify() == []
    prefixed = tmp_path / "prefixed.zarc"  # before the first local header: "preceded by other data"
    prefixed.write_bytes(b"\xff" * 100 + src.read_bytes())
    with pytest.raises(zarchive.ZArchiveError):
        zarchive.read(prefixed)


def _bits(x: np.generic) -> int:
    return int.from_bytes(np.asarray(x).tobytes(), "little")


@pytest.mark.parametrize(
    ("dtype", "stored", "read"),
    [
        ("<u4", 0x7FC00123, 0x7FC00123),  # a quiet float32 NaN with a payload: kept
        ("<u4", 0xFFC00001, 0xFFC00001),  # negative
        ("<u4", 0x7F800001, 0x7FC00001),  # signalling: quiet when read, payload kept
        ("<u2", 0x7E01, 0x7E01),  # float16: bits kept as they are
        ("<u2", 0x7C01, 0x7C01),  # signalling float16 too
    ],
)
def test_narrow_nan_scalars_keep_what_the_spec_says(tmp_path: Path, dtype: str, stored: int, read: int) -> None:
    ftype = "<f4" if dtype == "<u4" else "<f2"
    x = np.array([stored], dtype=dtype).view(ftype)[0]
    back = zarchive.read(zarchive.save({"x": x}, tmp_path / "n.zarc", durable=False))["x"]
    assert back.dtype == np.dtype(ftype) and _bits(back) == read
    arr = zarchive.read(zarchive.save({"a": np.array([x] * 3)}, tmp_path / "a.zarc", durable=False))["a"]
    assert [_bits(v) for v in arr] == [stored] * 3  # in arrays every bit survives


def test_a_windows_path_read_on_posix_keeps_its_text(tmp_path: Path) -> None:
    if not isinstance(pathlib.Path(), pathlib.PosixPath):
        pytest.skip("POSIX only")
    node_text = "C:\\data\\x.csv"
    path = Path(zarchive.save({"p": pathlib.PureWindowsPath(node_text)}, tmp_path / "p.zarc", durable=False))
    assert zarchive.read(path)["p"] == pathlib.PureWindowsPath(node_text)
    from rewrite import rewrite

    def concrete(m: dict) -> None:  # what a Windows writer writes for a WindowsPath
        m["root"]["p"]["class"] = "WindowsPath"

    src = Path(
        zarchive.save({"p": pathlib.PureWindowsPath(node_text)}, tmp_path / "s.zarc", compress=False, durable=False)
    )
    back = zarchive.read(rewrite(src, tmp_path / "w.zarc", concrete))["p"]
    assert type(back) is pathlib.PosixPath and str(back) == node_text and back.parts == (node_text,)


def test_a_wall_time_in_a_named_zone_follows_pep_495(tmp_path: Path) -> None:
    paris = zoneinfo.ZoneInfo("Europe/Paris")
    twice = [dt.datetime(2024, 10, 27, 2, 30, tzinfo=paris, fold=f) for f in (0, 1)]  # clocks set back
    skipped = [dt.datetime(2024, 3, 31, 2, 30, tzinfo=paris, fold=f) for f in (0, 1)]  # clocks set forward
    back = zarchive.read(zarchive.save({"t": twice + skipped}, tmp_path / "z.zarc", durable=False))["t"]
    assert [b.fold for b in back] == [0, 1, 0, 1]
    assert [b.utcoffset() for b in back] == [dt.timedelta(hours=h) for h in (2, 1, 1, 2)]
