"""The writer refuses what its reader would refuse, and never replaces or blocks on a special file.

Every limit the reader applies to a file (shapes, sizes, nesting, number and text lengths, member
counts...) that a legitimately saved object could reach is checked at save time: the save raises a
SaveError naming the object path and the limit, and the file that was at the target is unchanged.
An object just inside each limit round-trips. A save target that is not a regular file (a device
node, a FIFO, a socket, a /proc descriptor link) is refused before anything is opened.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import zarchive
from zarchive import SaveError


def _existing(path: Path) -> bytes:
    """An archive already at `path` (its bytes), so a refused save can be seen to leave it alone."""
    zarchive.save({"previous": 1}, path)
    return path.read_bytes()


def _refused(obj: Any, path: Path, *, match: str, **settings: Any) -> SaveError:
    before = _existing(path)
    with pytest.raises(SaveError, match=match) as info:
        zarchive.save(obj, path, **settings)
    assert path.read_bytes() == before
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".zarc-tmp")]  # no temporary left behind
    return info.value


# --- special files ------------------------------------------------------------------------------------
def _no_hang(fn: Any, seconds: float = 20) -> None:
    """Run fn on a thread; fail (rather than hang the suite) if it does not return in time."""
    error: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001  # handed to the test thread
            error.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the save blocked"
    if error:
        raise error[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_save_to_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.zarc"
    os.mkfifo(fifo)

    def save() -> None:
        with pytest.raises(SaveError, match="FIFO"):
            zarchive.save({"a": 1}, fifo)

    _no_hang(save)
    assert fifo.is_fifo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.zarc"]


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="no /dev/null")
def test_save_to_a_character_device_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SaveError, match="character device.*file object"):
        zarchive.save({"a": 1}, "/dev/null")
    assert Path("/dev/null").is_char_device()
    link = tmp_path / "null.zarc"  # a symlink that resolves to one: refused too, the link kept
    link.symlink_to("/dev/null")
    with pytest.raises(SaveError, match="character device"):
        zarchive.save({"a": 1}, link)
    assert link.is_symlink() and os.readlink(link) == "/dev/null"


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no UNIX sockets")
def test_save_to_a_unix_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.zarc"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(SaveError, match="socket"):
            zarchive.save({"a": 1}, path)
        assert path.is_socket()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd is Linux's")
@pytest.mark.parametrize("target", ["/proc/self/fd/1", "/dev/stdout", "/dev/fd/2"])
def test_save_to_a_descriptor_link_is_refused(target: str, tmp_path: Path) -> None:
    with pytest.raises(SaveError, match="file descriptor.*file object"):
        zarchive.save({"a": 1}, target)
    link = tmp_path / "out.zarc"  # also through a link of our own
    link.symlink_to(target)
    with pytest.raises(SaveError, match="file descriptor"):
        zarchive.save({"a": 1}, link)
    assert link.is_symlink()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd is Linux's")
def test_descriptor_link_to_a_regular_file_is_refused_too(tmp_path: Path) -> None:
    """/proc/self/fd/N of an open regular file: renaming into /proc is impossible; say so."""
    target = tmp_path / "real.zarc"
    before = _existing(target)
    with open(target, "rb") as f, pytest.raises(SaveError, match="file descriptor"):
        zarchive.save({"a": 2}, f"/proc/self/fd/{f.fileno()}")
    assert target.read_bytes() == before


def test_save_to_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "d.zarc").mkdir()
    with pytest.raises(SaveError, match="directory"):
        zarchive.save({"a": 1}, tmp_path / "d.zarc")


def test_a_file_object_over_a_special_file_is_the_way(tmp_path: Path) -> None:
    """What the refusal suggests works: pass a binary file object (here over /dev/null)."""
    with open(os.devnull, "wb") as f:
        zarchive.save({"a": 1}, f)


def test_symlink_to_a_regular_file_is_replaced_not_written_through(tmp_path: Path) -> None:
    """Documented behaviour: the save renames over the link (the link's target keeps its old bytes)."""
    real = tmp_path / "real.zarc"
    before = _existing(real)
    link = tmp_path / "link.zarc"
    link.symlink_to(real)
    zarchive.save({"new": 2}, link)
    assert not link.is_symlink()
    assert zarchive.read(link) == {"new": 2}
    assert real.read_bytes() == before


def test_dangling_symlink_is_replaced(tmp_path: Path) -> None:
    link = tmp_path / "link.zarc"
    link.symlink_to(tmp_path / "missing.zarc")
    zarchive.save({"a": 1}, link)
    assert not link.is_symlink() and zarchive.read(link) == {"a": 1}


# --- convert to .safetensors --------------------------------------------------------------------------
def _convert_refused(tmp_path: Path, obj: Any, match: str) -> None:
    from zarchive.formats.convert_in import convert

    src = tmp_path / "src.zarc"
    zarchive.save(obj, src)
    dst = tmp_path / "out.safetensors"
    with pytest.raises(SaveError, match=match):
        convert(src, dst)
    assert not dst.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.zarc"]


def test_convert_refuses_the_reserved_metadata_name(tmp_path: Path) -> None:
    import torch

    _convert_refused(tmp_path, {"__metadata__": torch.ones(2), "w": torch.zeros(3)}, "'__metadata__'.*reserves")


def test_convert_refuses_names_that_are_not_utf8(tmp_path: Path) -> None:
    import torch

    _convert_refused(tmp_path, {"a\ud800": torch.ones(2)}, "lone surrogate")


def test_convert_refuses_a_header_safetensors_would_not_read(tmp_path: Path) -> None:
    import numpy as np

    from zarchive.container.safetensors_layout import MAX_HEADER_BYTES

    # two arrays under keys of 60 MB each: the archive holds them, a .safetensors header cannot
    long = {"k" * (MAX_HEADER_BYTES * 6 // 10) + str(i): np.arange(300, dtype=np.int32) for i in range(2)}
    _convert_refused(tmp_path, long, "header of about")


def test_every_file_convert_writes_opens_with_safetensors(tmp_path: Path) -> None:
    """Names safetensors allows (empty, spaces, NUL, '__metadata__' as a prefix, '/', non-ASCII...) and
    every dtype a .zarc can hold: the output opens with the real safetensors, every kept tensor equal."""
    import numpy as np
    import torch
    from safetensors import safe_open

    from zarchive.formats.convert_in import convert

    names = [" ", "x\x00y", "__metadata__x", "_metadata", "a/b", "é", "\u2603", "~1", "t" * 5000]
    obj: dict[str, Any] = {n: torch.arange(3, dtype=torch.float32) + i for i, n in enumerate(names)}
    for name in ("float64", "float16", "bfloat16", "complex64", "complex128", "int8", "uint16", "uint64", "bool"):
        obj[f"dt_{name}"] = torch.zeros(4, dtype=getattr(torch, name))
    for name in ("float8_e4m3fn", "float8_e5m2", "bits8", "uint4", "int2"):
        obj[f"dt_{name}"] = torch.zeros(4, dtype=torch.uint8).view(getattr(torch, name))
    obj["np"] = {"f": np.ones((2, 3)), "big_endian": np.arange(5, dtype=">i4"), "empty": np.zeros((0, 70 // 2))}
    obj["tied"] = [obj["dt_float64"], obj["dt_float64"][1:]]
    src, dst = tmp_path / "src.zarc", tmp_path / "out.safetensors"
    zarchive.save(obj, src)
    report = convert(src, dst)
    with safe_open(str(dst), framework="pt") as f:
        keys = set(f.keys())
        for key in keys:
            f.get_tensor(key)
        assert "zarchive.aliases" not in (f.metadata() or {}) or f.metadata()["zarchive.aliases"]
    assert report.count == len(keys)
    for i, n in enumerate(names):
        with safe_open(str(dst), framework="pt") as f:
            assert torch.equal(f.get_tensor(n), torch.arange(3, dtype=torch.float32) + i)
    skipped = {note.split(":")[0] for note in report.notes if note.startswith("skipped")}
    # what the installed safetensors cannot write (its versions differ: 0.4 lacks complex64, float8 and
    # uint16), asked of safetensors itself; none has complex128 or the sub-byte types
    from safetensors.torch import save as st_save

    def writable(t: torch.Tensor) -> bool:
        try:
            st_save({"x": t})
        except Exception:  # noqa: BLE001
            return False
        return True

    dtypes = {n[3:]: t for n, t in obj.items() if isinstance(n, str) and n.startswith("dt_")}
    assert skipped == {f"skipped dt_{n}" for n, t in dtypes.items() if not writable(t)}
    assert {"skipped dt_complex128", "skipped dt_bits8", "skipped dt_uint4", "skipped dt_int2"} <= skipped


def test_tensor_under_a_key_with_a_lone_surrogate_round_trips(tmp_path: Path) -> None:
    """Its entry key in the member's safetensors header must be UTF-8: the writer escapes it."""
    import torch

    obj = {"a\ud800": torch.arange(3), "a\\ud800": torch.arange(4)}  # the escape must not collide
    zarchive.save(obj, tmp_path / "s.zarc")
    back = zarchive.read(tmp_path / "s.zarc")
    assert list(back) == list(obj)
    assert all(torch.equal(back[k], obj[k]) for k in obj)


# --- every limit the reader applies that a saved object can reach --------------------------------------
def _round_trips(obj: Any, path: Path, **settings: Any) -> Any:
    zarchive.save(obj, path, **settings)
    return zarchive.read(path)


def test_more_than_64_dimensions(tmp_path: Path) -> None:
    """The reported case: an empty tensor of 65 dimensions made the whole archive unreadable."""
    import torch

    from zarchive.container.shapes import MAX_DIMS

    err = _refused({"t": torch.zeros([0] * (MAX_DIMS + 1))}, tmp_path / "a.zarc", match="65 dimensions.*64")
    assert err.path == "t"
    back = _round_trips({"t": torch.zeros([0] * MAX_DIMS), "u": torch.zeros([1] * MAX_DIMS)}, tmp_path / "b.zarc")
    assert back["t"].shape == (0,) * MAX_DIMS and back["u"].shape == (1,) * MAX_DIMS


def test_more_than_2_to_62_elements(tmp_path: Path) -> None:
    """Only a broadcast view (stride 0) can have that many; refused before any byte is produced.
    Inside the limit, a broadcast view of 2**62 elements would be written out in full, so the
    round trip uses a small one: views are saved as the values they show."""
    import numpy as np
    import torch

    from zarchive.container.shapes import MAX_ELEMENTS

    _refused({"t": torch.zeros(1).expand(3, 1 << 61)}, tmp_path / "a.zarc", match=r"elements.*2\*\*62")
    big = np.broadcast_to(np.zeros(1, dtype=np.int8), (MAX_ELEMENTS + 1,))
    assert _refused({"a": big}, tmp_path / "b.zarc", match=r"elements.*2\*\*62").path == "a"
    back = _round_trips(
        {"t": torch.ones(1).expand(300, 400), "a": np.broadcast_to(np.ones(3), (300, 3))}, tmp_path / "c.zarc"
    )
    assert torch.equal(back["t"], torch.ones(300, 400)) and np.array_equal(back["a"], np.ones((300, 3)))


def _nested_lists(depth: int) -> list[Any]:
    root: list[Any] = []
    x = root
    for _ in range(depth - 1):
        x.append([])
        x = x[0]
    return root


def test_nesting_depth(tmp_path: Path) -> None:
    from zarchive.engine.plan import MAX_DEPTH

    _refused(_nested_lists(MAX_DEPTH + 1), tmp_path / "a.zarc", match=f"nested more than {MAX_DEPTH}")
    assert _round_trips(_nested_lists(MAX_DEPTH), tmp_path / "b.zarc") == _nested_lists(MAX_DEPTH)


def test_dict_key_nesting_inside_the_limit_round_trips(tmp_path: Path) -> None:
    """Keys that are not strings take more JSON levels per object level than plain dicts."""
    from zarchive.engine.plan import MAX_DEPTH

    d: dict[Any, Any] = {}
    x = d
    for _ in range(MAX_DEPTH // 2 - 1):
        x[(1, 2)] = {}
        x = x[(1, 2)]
    assert _round_trips(d, tmp_path / "a.zarc") == d


def test_big_int_hex_text(tmp_path: Path) -> None:
    from zarchive.handlers.builtins import MAX_BIG_INT_HEX

    inside = 1 << 4 * (MAX_BIG_INT_HEX - 3)  # '0x1' and then the zeros: exactly the limit
    assert len(hex(inside)) == MAX_BIG_INT_HEX
    assert _round_trips({"n": inside, "m": -(inside >> 4)}, tmp_path / "b.zarc") == {"n": inside, "m": -(inside >> 4)}
    assert _refused({"n": inside << 4}, tmp_path / "a.zarc", match="hex text").path == "n"
    _refused([-inside], tmp_path / "c.zarc", match="hex text")


def test_decimal_text(tmp_path: Path) -> None:
    import decimal

    from zarchive.handlers.stdlib import MAX_TEXT_VALUE

    inside = decimal.Decimal("1" * MAX_TEXT_VALUE)
    assert _round_trips([inside], tmp_path / "b.zarc") == [inside]
    _refused({"d": decimal.Decimal("1" * (MAX_TEXT_VALUE + 1))}, tmp_path / "a.zarc", match="Decimal")


def test_inline_array_cap(tmp_path: Path) -> None:
    """A reader reads at most 2**24 elements of an inline array: with the threshold set above that,
    a bigger array goes to a member instead (nothing to refuse)."""
    import numpy as np

    from zarchive.handlers.numpy_ import MAX_INLINE_LIST_ELEMENTS

    arr = np.arange(MAX_INLINE_LIST_ELEMENTS + 1, dtype=np.int32)
    back = _round_trips({"a": arr}, tmp_path / "a.zarc", external_array_threshold=MAX_INLINE_LIST_ELEMENTS * 2)
    assert np.array_equal(back["a"], arr)
    with zarchive.open(tmp_path / "a.zarc") as arc:
        assert "$ref" in arc.manifest["root"]["a"]


def test_time_zone_keys(tmp_path: Path) -> None:
    import datetime as dt
    import zoneinfo

    try:
        good = zoneinfo.ZoneInfo("America/Argentina/Buenos_Aires")
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip("no time zone data")
    value = dt.datetime(2020, 1, 2, 3, 4, tzinfo=good)
    assert _round_trips([value], tmp_path / "b.zarc") == [value]
    with open(good._file_path if hasattr(good, "_file_path") else _tz_file(good.key), "rb") as f:  # type: ignore[attr-defined]
        odd = zoneinfo.ZoneInfo.from_file(f, key="my zone.v2")
    _refused({"t": dt.datetime(2020, 1, 2, tzinfo=odd)}, tmp_path / "a.zarc", match="time zone key")


def _tz_file(key: str) -> str:
    import zoneinfo

    for base in zoneinfo.TZPATH:
        path = os.path.join(base, key)
        if os.path.isfile(path):
            return path
    pytest.skip("the time zone data is not in files")


def test_safetensors_header_size(tmp_path: Path) -> None:
    """Tensor keys (object paths) so long that a member's header passes the 100 MB readers accept.
    Inside the limit: keys of 1 MB (a header of tens of MB takes a while to parse, for nothing)."""
    import torch

    from zarchive.container.safetensors_layout import MAX_HEADER_BYTES

    long = {"k" * (MAX_HEADER_BYTES * 6 // 10) + str(i): torch.zeros(1) for i in range(2)}
    _refused(long, tmp_path / "a.zarc", match="header of .* bytes")
    ok = {"k" * 1_000_000 + str(i): torch.full((2,), float(i)) for i in range(3)}
    back = _round_trips(ok, tmp_path / "b.zarc")
    assert all(torch.equal(back[k], v) for k, v in ok.items())


def test_compressed_members_past_the_read_budget(tmp_path: Path) -> None:
    """A read may allocate 1 GiB + 16 x the file's size by default; 1.1 GiB of zeros compress to far
    less than 1/16 of that, so reading them back would be refused. (np.zeros maps zero pages: the
    array costs no memory until written.) Inside: 64 MiB of zeros, compressed, read back."""
    import numpy as np

    from zarchive.container.budget import DEFAULT_READ_BYTES_BASE

    zeros = np.zeros(DEFAULT_READ_BYTES_BASE + (100 << 20), dtype=np.uint8)
    _refused({"z": zeros}, tmp_path / "a.zarc", match="compress=False", compress=True)
    small = np.zeros(64 << 20, dtype=np.uint8)
    zarchive.save({"z": small}, tmp_path / "b.zarc", compress=True)
    assert (tmp_path / "b.zarc").stat().st_size < 1 << 20
    assert np.array_equal(zarchive.read(tmp_path / "b.zarc")["z"], small)


class _BigNumberHandler(zarchive.Handler):
    """A custom handler that writes a JSON number the reader's parser refuses (over 4,300 digits)."""

    name = "tests.BigNumber"

    def accepts(self, cls: type) -> bool:
        return cls is complex

    def save(self, obj: Any, ctx: Any) -> Any:
        return {"$type": self.name, "n": 10**5000}

    def load(self, node: dict[str, Any], ctx: Any) -> Any:
        return complex(0)


class _DuplicateKeyHandler(_BigNumberHandler):
    """... and one whose node has two keys that write as the same JSON key."""

    name = "tests.DuplicateKey"

    def save(self, obj: Any, ctx: Any) -> Any:
        return {"$type": self.name, 1: 1, "1": 2}


@pytest.mark.parametrize("handler", [_BigNumberHandler(), _DuplicateKeyHandler()])
def test_manifest_json_the_reader_refuses(tmp_path: Path, handler: zarchive.Handler) -> None:
    path = tmp_path / "a.zarc"
    before = _existing(path)
    za = zarchive.ZArchive(handlers_pre=(handler,))
    with pytest.raises(SaveError, match="manifest"):
        za.save({"c": 1j}, path)
    assert path.read_bytes() == before


def test_text_a_reader_takes_back_exactly(tmp_path: Path) -> None:
    """Lone surrogates (keys, values, long lists), NUL, and numpy strings ending in NUL."""
    import numpy as np

    obj = {
        "a\udc80": "b\ud800",
        "long": ["\ud800x"] * 300,
        "nul": "a\x00b",
        "np": np.str_("a\x00"),
        "npb": np.bytes_(b"a\x00"),
        ("\udfff", 1): {"\ud800": 1},
    }
    back = _round_trips(obj, tmp_path / "a.zarc")
    assert back == obj
    assert back["np"].dtype == obj["np"].dtype and type(back["np"]) is np.str_
