"""Progress bars: forced on, forced off, and automatic (a real terminal via a pty, and pytest's capture)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import zarchive
from zarchive.saving.progress import PROGRESS_THRESHOLD

pytest.importorskip("tqdm")


def _small() -> dict:
    return {"w": {"a": torch.randn(1000, 100), "b": torch.randn(10)}, "n": np.zeros(100_000), "l": list(range(1000))}


def _big() -> dict:
    return {"w": torch.zeros(PROGRESS_THRESHOLD // 4 + 1024)}  # just over the threshold, float32


def test_forced_bar_reports_save_and_read(tmp_path, capsys):
    za = zarchive.ZArchive(progress=True)
    path = tmp_path / "pb.zarc"
    za.save(_small(), path)
    err = capsys.readouterr().err
    assert "saving pb.zarc" in err and "100%" in err
    got = za.read(path)
    err = capsys.readouterr().err
    assert "reading pb.zarc" in err and "100%" in err
    assert got["w"]["a"].shape == (1000, 100) and got["l"] == list(range(1000))


@pytest.mark.parametrize("setting", [None, False], ids=["automatic", "off"])
def test_no_bar_when_automatic_under_pytest_or_off(tmp_path, capsys, setting):
    za = zarchive.ZArchive(progress=setting)
    path = tmp_path / "big.zarc"
    za.save(_big(), path)  # over the threshold: only the terminal check keeps "automatic" quiet here
    za.read(path)
    err = capsys.readouterr().err
    assert "big.zarc" not in err and "%|" not in err, err


def test_bad_setting():
    with pytest.raises(TypeError, match="progress"):
        zarchive.ZArchive(progress="yes")


_SCRIPT = textwrap.dedent(
    """
    import sys, torch, zarchive
    from zarchive.saving.progress import PROGRESS_THRESHOLD
    out = sys.argv[1]
    zarchive.save({"w": torch.zeros(1000)}, out + "/small.zarc")
    print("SMALL-DONE", file=sys.stderr, flush=True)
    zarchive.save({"w": torch.zeros(PROGRESS_THRESHOLD // 4 + 1024)}, out + "/big.zarc")
    print("BIG-DONE", file=sys.stderr, flush=True)
    """
)


@pytest.mark.skipif(not hasattr(os, "openpty") or sys.platform == "win32", reason="needs a pseudo-terminal")
def test_automatic_bar_on_a_real_terminal_only_for_big_saves(tmp_path):
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a 0-column tty shows no bar
    try:
        proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, str(tmp_path)], stderr=slave, stdout=subprocess.DEVNULL)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=120) == 0
    finally:
        os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace")
    small_part, _, big_part = text.partition("SMALL-DONE")
    assert "saving" not in small_part  # under the threshold: no bar
    assert "saving big.zarc" in big_part and "100%" in big_part and "BIG-DONE" in big_part
