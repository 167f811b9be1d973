"""What a read builds beyond its plan is charged to the read's budget before it is built (issue 24):
dtype casts, views that repeat a small storage (zero strides), inline scalars sized by their dtype,
and members decompressed whole. Each hostile file is a few KB made here; each read that the old code
turned into gigabytes runs in a child process under an address-space limit, through the library and
through the command line (exit 2, one line naming the file and the setting).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import forkrun
import numpy as np
import pytest
import torch
from hostile.craft import Parts, pack
from hostile.formats import zstd_frame
from hostile.make_corpus import with_root

import zarchive
from zarchive.errors import UnsafeArchiveError
from zarchive.formats.convert_in import convert

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

BIG = 1 << 28  # elements of the broadcast tensor: 1 GiB as float32, 2 GiB as float64
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}


def _broadcast_pt(path: Path) -> Path:
    """A torch.save file (~1.5 KB) of {"w": torch.zeros(1).expand(BIG)}: one 4-byte storage."""
    torch.save({"w": torch.zeros(1).expand(BIG)}, path)
    assert path.stat().st_size < 4000
    return path


def _child(code: str, extra_mb: int = 700, timeout: int = 300) -> dict[str, Any]:
    """Run `code` (which sets `result`) in a fresh process (tests/forkrun.py) under an address-space limit of what it holds
    after importing zarchive and torch plus `extra_mb`; its result, or how it failed."""
    script = textwrap.dedent(
        """
        import json, resource, sys
        import numpy, torch, zarchive
        from zarchive.cli import main
        def _kb(key):
            for line in open("/proc/self/status"):
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        limit = _kb("VmSize") * 1024 + EXTRA
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
        CODE
        except BaseException as e:
            result = {"exc": type(e).__name__, "msg": str(e)[:2000], "zarchive": isinstance(e, zarchive.ZArchiveError)}
        print(json.dumps(result))
        """
    )
    script = script.replace("EXTRA", str(extra_mb << 20)).replace(
        "CODE", textwrap.indent(textwrap.dedent(code), "    ")
    )
    p = forkrun.run(["-c", script], timeout=timeout, env=ENV)  # a fork of a server that imported torch once
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _cli(argv: list[str], limit_mb: int = 2000, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """The command line in a real process, under an address-space limit of `limit_mb` in all."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))

    return subprocess.run(
        [sys.executable, "-m", "zarchive", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
        preexec_fn=limit,
        check=False,
    )


# --- casts and broadcast views -------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [
        "dict(dtype=torch.float64)",
        "dict(dtype=torch.float16)",
        "dict(tensors='numpy', dtype='float64')",
        "dict(lazy=False, dtype=torch.float64)",
    ],
    ids=["torch-float64", "torch-float16", "numpy-float64", "eager"],
)
def test_casting_a_broadcast_foreign_tensor_keeps_it_a_view(tmp_path: Path, kwargs: str) -> None:
    path = _broadcast_pt(tmp_path / "b.pt")
    result = _child(
        f"""
        w = zarchive.read({str(path)!r}, **{kwargs})["w"]
        strides = list(w.stride()) if isinstance(w, torch.Tensor) else list(w.strides)
        result = {{"shape": list(w.shape), "strides": strides, "dtype": str(w.dtype), "first": float(w[0]),
                   "last": float(w[-1])}}
        """,
        extra_mb=600,  # the cast tensor would be 2 GiB (float64) or 512 MiB (float16) if made dense
    )
    assert result.get("shape") == [BIG], result
    assert result["strides"] == [0] and result["first"] == result["last"] == 0.0


@pytest.mark.parametrize("how", ["pt", "zarc", "zarc-numpy", "pt-numpy"])
def test_a_cast_is_charged_to_the_read_budget(tmp_path: Path, how: str) -> None:
    # 16 MiB of float32 read under a 40 MB budget: as is it fits, cast to float64 (32 MiB more) it does not
    w = torch.arange(1 << 22, dtype=torch.float32)
    path = tmp_path / ("t.pt" if how.startswith("pt") else "t.zarc")
    if how.startswith("pt"):
        torch.save({"w": w}, path)
    else:
        zarchive.save({"w": w}, path, compress=False)
    tensors = "numpy" if how.endswith("numpy") else "torch"
    za = zarchive.ZArchive(max_read_bytes=40_000_000)
    plain = za.read(path, tensors=tensors)["w"]
    assert plain.shape == (1 << 22,)
    with pytest.raises(UnsafeArchiveError) as info:
        za.read(path, tensors=tensors, dtype=torch.float64 if tensors == "torch" else "float64")
    assert "max_read_bytes=40,000,000" in str(info.value)
    assert info.value.path == "w"


def test_a_broadcast_tensor_is_saved_as_its_storage(tmp_path: Path) -> None:
    t = torch.arange(3, dtype=torch.float32).expand(BIG // 4, 3)
    zarchive.save({"w": t, "plain": torch.ones(4)}, tmp_path / "b.zarc")
    assert (tmp_path / "b.zarc").stat().st_size < 10_000
    back = zarchive.read(tmp_path / "b.zarc")
    assert back["w"].shape == t.shape and back["w"].stride() == t.stride()
    assert torch.equal(back["w"][-1], t[-1]) and torch.equal(back["plain"], torch.ones(4))


def test_cat_of_broadcast_tensors_summarises_their_storage(tmp_path: Path) -> None:
    pt = _broadcast_pt(tmp_path / "b.pt")
    zarc = tmp_path / "b.zarc"
    zarchive.save({"w": torch.tensor([1.0, -1.0], dtype=torch.bfloat16).expand(BIG // 2, 2)}, zarc)
    out = {str(p): _cli(["cat", str(p), "w"], limit_mb=1500) for p in (pt, zarc)}
    assert out[str(pt)].returncode == 0, out[str(pt)].stderr
    assert "min 0  max 0  mean 0  std 0" in out[str(pt)].stdout
    assert out[str(zarc)].returncode == 0, out[str(zarc)].stderr
    assert "min -1  max 1  mean 0  std 1" in out[str(zarc)].stdout


def test_cat_statistics_match_numpy_for_a_partly_broadcast_array() -> None:
    from zarchive.cli.cat import _stats_lines

    rng = np.random.default_rng(0)
    base = rng.standard_normal((5, 1, 7)).astype(np.float32)
    base[0, 0, 0] = np.nan
    arr = np.broadcast_to(base, (5, 3, 7))
    dense = np.ascontiguousarray(arr).astype(np.float64)
    finite = dense[np.isfinite(dense)]
    line = _stats_lines(arr)[0]
    assert line == (
        f"min {finite.min():.6g}  max {finite.max():.6g}  mean {finite.mean():.6g}  std {finite.std():.6g}  (3 NaN)"
    )
    assert _stats_lines(np.lib.stride_tricks.as_strided(np.arange(4.0), (3, 2), (8, 8)))[0].startswith("(statistics")


def test_cat_statistics_of_one_row_longer_than_a_block() -> None:
    """A 2-D array of one row of 2,000,000 values (more than one block of statistics): its row is cut
    into blocks (this recursed until RecursionError before cat and the viewer shared the statistics)."""
    from zarchive.cli.cat import _stats_lines

    arr = np.arange(2_000_000, dtype=np.float32).reshape(1, -1)
    assert (
        _stats_lines(arr)[0]
        == f"min 0  max 2e+06  mean {arr.mean(dtype=np.float64):.6g}  std {arr.std(dtype=np.float64):.6g}"
    )


# --- convert: every direction honours --max-bytes, and nothing is expanded on the way ------------
def test_convert_keeps_broadcast_views_small_in_every_direction(tmp_path: Path) -> None:
    pt = _broadcast_pt(tmp_path / "b.pt")
    zarc, zarc2, out_pt = tmp_path / "b.zarc", tmp_path / "b2.zarc", tmp_path / "out.pt"
    for src, dst in ((pt, zarc), (zarc, zarc2), (zarc2, out_pt)):
        p = _cli(["convert", str(src), str(dst), "--max-bytes", "100000"], limit_mb=1500)
        assert p.returncode == 0, p.stderr
        assert dst.stat().st_size < 100_000
    back = zarchive.read(zarc2)["w"]
    assert back.shape == (BIG,) and back.stride() == (0,)
    # safetensors has no strides: the output would be expanded, refused before it is made (with
    # --max-bytes; without it, at the default, 1 GiB + 16 x the source's size, here passed by 2 GiB)
    st = tmp_path / "b.safetensors"
    zarchive.save({"w": torch.zeros(1).expand(2 * BIG)}, tmp_path / "c.zarc")
    for src, more in ((zarc, ["--max-bytes", "100000"]), (tmp_path / "c.zarc", [])):
        p = _cli(["convert", str(src), str(st), *more], limit_mb=1500)
        assert p.returncode == 2, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and str(src) in lines[0] and "max_bytes=" in lines[0] and "--max-bytes" in lines[0]
        assert not st.exists()


@pytest.mark.parametrize("src_kind", ["pt", "zarc", "safetensors"])
def test_convert_into_zarc_honours_max_bytes(tmp_path: Path, src_kind: str) -> None:
    w = torch.arange(1 << 16, dtype=torch.float32)  # 256 KiB
    src = tmp_path / f"s.{src_kind}"
    if src_kind == "pt":
        torch.save({"w": w}, src)
    elif src_kind == "zarc":
        zarchive.save({"w": w}, src)
    else:
        from safetensors.torch import save_file

        save_file({"w": w}, str(src))
    dst = tmp_path / "d.zarc"
    with pytest.raises(UnsafeArchiveError, match="max_bytes=100,000"):
        convert(src, dst, max_bytes=100_000)
    assert not dst.exists()
    convert(src, dst, max_bytes=1_000_000)
    assert torch.equal(zarchive.read(dst)["w"], w)


# --- planning: nodes in a member, compressed members, inline scalars ------------------------------
def _jsonl_bomb(path: Path, declared: int) -> Path:
    """A list node whose nodes lie in a zstd `.jsonl` member declaring `declared` bytes: a frame of
    RLE blocks (a few KB) that decodes to that many `[`s."""
    root = {"$type": "list", "$ref": "l.jsonl.zst", "length": 1, "nbytes": declared, "items": "nodes"}
    frame = zstd_frame(rle=(ord("["), declared))

    def lie(meta: dict[str, Any]) -> None:
        meta["members"]["l.jsonl.zst"]["size"] = declared

    parts = Parts({"format": "zarchive", "format_version": "1.0", "root": root}, {"l.jsonl.zst": b"["})
    path.write_bytes(pack(parts, stored={"l.jsonl.zst": frame}, meta_edit=lie))
    return path


@pytest.mark.parametrize("entry", ["read", "open-get", "audit", "lazy-read"])
def test_nodes_in_a_member_are_refused_before_it_is_decompressed(tmp_path: Path, entry: str) -> None:
    path = _jsonl_bomb(tmp_path / "j.zarc", 600 << 20)
    assert path.stat().st_size < 30_000
    call = {
        "read": f"zarchive.ZArchive(max_read_bytes=50_000_000).read({str(path)!r}, lazy=False)",
        "lazy-read": f"zarchive.ZArchive(max_read_bytes=50_000_000).read({str(path)!r})",
        "open-get": f"zarchive.ZArchive(max_read_bytes=50_000_000).open({str(path)!r}).get('')",
        "audit": f"zarchive.ZArchive(max_read_bytes=50_000_000).open({str(path)!r}).audit()",
    }[entry]
    result = _child(f"{call}\nresult = {{'ok': True}}", extra_mb=300)  # 600 MiB decoded would not fit
    assert result.get("exc") == "UnsafeArchiveError", result
    assert "l.jsonl.zst" in result["msg"] and "max_read_bytes=50,000,000" in result["msg"]


def test_cli_audit_of_a_member_bomb_exits_2_naming_the_setting(tmp_path: Path) -> None:
    path = _jsonl_bomb(tmp_path / "j.zarc", 2000 << 20)  # over the default budget (1 GiB + 16 x 30 KB)
    for argv in (["audit", str(path)], ["cat", str(path), ""], ["convert", str(path), str(tmp_path / "o.zarc")]):
        p = _cli(argv, limit_mb=1500)
        assert p.returncode == 2, (argv, p.returncode, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "max_read_bytes=" in lines[0] and "l.jsonl.zst" in lines[0], (argv, lines)


def test_a_compressed_member_is_checked_against_the_budget_before_decompressing(tmp_path: Path) -> None:
    n = 64 << 20
    node = {"$type": "bytes", "$ref": "z.bin.zst", "nbytes": n}
    data = with_root({"b": node}, {"z.bin.zst": bytes(n)}, stored={"z.bin.zst": zstd_frame(rle=(0, n))})
    path = tmp_path / "z.zarc"
    path.write_bytes(data)
    za = zarchive.ZArchive(max_read_bytes=32 << 20)
    for lazy in (False, True):
        with pytest.raises(UnsafeArchiveError, match="max_read_bytes=33,554,432") as info:
            za.read(path, lazy=lazy)["b"]
        assert info.value.path == "b" or info.value.member == "z.bin.zst", info.value


@pytest.mark.parametrize("dtype", ["|S2147483647", "S1500000000", "<U536870911"])
def test_an_inline_scalar_is_charged_at_its_item_size(tmp_path: Path, dtype: str) -> None:
    path = tmp_path / "s.zarc"
    value: dict[str, Any] = {"value": ""} if "S" in dtype else {"base64": ""}
    path.write_bytes(with_root({"s": {"$type": "numpy.scalar", "dtype": dtype, **value}}))
    result = _child(f"zarchive.read({str(path)!r})\nresult = {{'ok': True}}", extra_mb=1200)
    assert result.get("exc") == "UnsafeArchiveError", result
    assert "max_read_bytes=" in result["msg"] and "object path '/s'" in result["msg"], result


def test_small_inline_scalars_still_read(tmp_path: Path) -> None:
    values = {"f": np.float32(1.5), "s": np.bytes_(b"abc"), "u": np.str_("hé"), "i": np.int64(-3)}
    zarchive.save(values, tmp_path / "v.zarc")
    back = zarchive.read(tmp_path / "v.zarc")
    assert {k: (type(v), v) for k, v in back.items()} == {k: (type(v), v) for k, v in values.items()}
