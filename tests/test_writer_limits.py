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
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary left behind
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
