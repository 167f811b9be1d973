"""`zarchive convert URL out.zarc`: a sharded checkpoint (zarchive.dcp) on an fsspec store into one
archive, with the checks and budget of a local directory: fsspec's memory filesystem (the command run
in this process, which owns that filesystem) and a real S3-compatible server (moto, tests/s3_server.py;
the command in a child process, configured by --storage-option or by the AWS environment variables),
and the hostile DCP directories of tests/hostile uploaded there."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")
fsspec = pytest.importorskip("fsspec")

import zarchive
from tests.s3_server import fresh_url
from zarchive.cli import main
from zarchive.dcp import ZArchiveWriter

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # DCP warns that no process group is set up
ROOT = Path(__file__).resolve().parent.parent


def _state() -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    return {"model": {"w": torch.randn(64, 32, generator=g), "b": torch.tensor([1.5, float("nan")])}, "step": 5,
            "config": {"lr": 0.1, "name": "run"}}  # fmt: skip


def _save(url: str, value: dict[str, Any] | None = None, **options: Any) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(_state() if value is None else value, storage_writer=ZArchiveWriter(url, **options), no_dist=True)
    return url


def _same(path: Path) -> None:
    out, want = zarchive.read(path), _state()
    assert torch.equal(out["model"]["w"], want["model"]["w"]) and out["step"] == 5 and out["config"] == want["config"]
    assert out["model"]["b"][0] == 1.5 and torch.isnan(out["model"]["b"][1])


@pytest.fixture
def mem_url(mem_url: str) -> str:
    """A checkpoint's URL in a fresh folder of the memory filesystem (conftest's mem_url)."""
    return f"{mem_url}/ck"


def _main(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


# --- fsspec's memory filesystem, the command in this process ---
def test_memory_url_converts(mem_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _save(mem_url)
    for src in (mem_url, mem_url + "/"):
        rc, out, err = _main(capsys, "convert", "-f", src, tmp_path / "one.zarc")
        assert rc == 0, err
        assert out.strip() == f"converted {src} -> {tmp_path / 'one.zarc'} (sharded checkpoint->zarc, 5 keys)"
        _same(tmp_path / "one.zarc")
    rc, _, err = _main(capsys, "convert", "--compress", "none", "-f", mem_url, tmp_path / "plain.zarc")
    assert rc == 0, err
    assert all(m["codec"] == "none" for m in zarchive.open(tmp_path / "plain.zarc").members.values())


def test_memory_url_within_the_budget(mem_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--max-bytes is the read budget of a remote checkpoint as of a local one: over it, refused (exit
    2, one line naming the URL), nothing written; the same limit on the same checkpoint on disk agrees."""
    local = _save(str(tmp_path / "ck"))
    _save(mem_url)
    outcomes = []
    for src in (mem_url, local):
        rc, _, err = _main(capsys, "convert", "--max-bytes", "4096", src, tmp_path / "small.zarc")
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and src in lines[0] and "max_read_bytes" in lines[0], err
        assert not (tmp_path / "small.zarc").exists()
        outcomes.append(lines[0].replace(src, "SRC"))
    assert outcomes[0] == outcomes[1]


def test_memory_url_refusals(mem_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _save(mem_url)
    (tmp_path / "there.zarc").write_bytes(b"keep")
    cases = [
        (["convert", mem_url + "-nothing", tmp_path / "x.zarc"], "no archive at"),
        (["convert", mem_url, tmp_path / "x.safetensors"], "converts to a .zarc file"),
        (["convert", mem_url, "memory://elsewhere/x.zarc"], "convert writes a local file"),
        (["convert", mem_url, tmp_path / "there.zarc"], "already exists; pass --force"),
        (["convert", mem_url, tmp_path / "x.zarc", "--storage-option", "no_equals"], "expected KEY=VALUE"),
        (["convert", mem_url, tmp_path / "x.zarc", "--storage-option", "a=1", "--storage-option", "a=2"], "twice"),
        (["convert", tmp_path / "there.zarc", tmp_path / "x.safetensors", "--storage-option", "a=1"], "URL source"),
    ]
    for args, message in cases:
        rc, _, err = _main(capsys, *args)
        assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, (args, err)
    assert (tmp_path / "there.zarc").read_bytes() == b"keep" and not (tmp_path / "x.zarc").exists()


def test_memory_url_damaged(mem_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A shard cut short on the store: refused as on disk (exit 2), the old output left as it was."""
    _save(mem_url)
    mem = fsspec.filesystem("memory")
    (shard,) = [p for p in mem.ls(mem_url[len("memory://") :], detail=False) if "shard-" in p]
    mem.pipe_file(shard, mem.cat_file(shard)[:-10])
    (tmp_path / "old.zarc").write_bytes(b"old")
    rc, _, err = _main(capsys, "convert", "-f", mem_url, tmp_path / "old.zarc")
    assert rc == 2 and "recorded" in err, err
    assert (tmp_path / "old.zarc").read_bytes() == b"old"


def test_storage_option_values_are_json_or_text() -> None:
    from zarchive.cli.common import parse_storage_options

    got = parse_storage_options(
        ["anon=true", "endpoint_url=http://127.0.0.1:9000", 'client_kwargs={"region_name": "eu-west-1"}', "n=3",
         "key=", "token=null"]
    )  # fmt: skip
    assert got == {"anon": True, "endpoint_url": "http://127.0.0.1:9000", "n": 3, "key": "", "token": None,
                   "client_kwargs": {"region_name": "eu-west-1"}}  # fmt: skip
    assert parse_storage_options(None) == {}


def _option_args(options: dict[str, Any]) -> list[str]:
    import json

    return [
        a for k, v in options.items() for a in ("--storage-option", f"{k}={v if isinstance(v, str) else json.dumps(v)}")
    ]


def _cli(*args: str | Path, env: dict[str, str] | None = None, limit: bool = False) -> subprocess.CompletedProcess[str]:
    def cap() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (12 << 30, 12 << 30))  # torch maps several GiB it never touches

    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return subprocess.run([sys.executable, "-m", "zarchive", *map(str, args)], capture_output=True, text=True,
                          env={**clean, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=120, check=False,
                          preexec_fn=cap if limit else None)  # fmt: skip


def test_s3_with_storage_options(s3: dict[str, Any], tmp_path: Path) -> None:
    url = _save(fresh_url(s3), storage_options=s3["options"])
    done = _cli("convert", url, tmp_path / "one.zarc", *_option_args(s3["options"]))
    assert done.returncode == 0, done.stderr
    assert "(sharded checkpoint->zarc, 5 keys)" in done.stdout
    _same(tmp_path / "one.zarc")


def test_s3_from_the_environment(s3: dict[str, Any], tmp_path: Path) -> None:
    url = _save(fresh_url(s3), storage_options=s3["options"])
    done = _cli("convert", url, tmp_path / "one.zarc", env=s3["env"])
    assert done.returncode == 0, done.stderr
    _same(tmp_path / "one.zarc")
    missing = _cli("convert", url + "-nothing", tmp_path / "two.zarc", env=s3["env"])
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert f"{url}-nothing" in missing.stderr and not (tmp_path / "two.zarc").exists()


@pytest.mark.parametrize("name", ["many_chunks", "chunk_reused"])
def test_hostile_dcp_cases_on_s3(s3: dict[str, Any], tmp_path: Path, name: str) -> None:
    """The hostile DCP directories of tests/hostile, uploaded to the S3 server and converted from there
    in a child under an address-space limit: what the entry matrix asks of `convert` on disk (refused
    with one line naming the URL, exit 2, or converted within the budget), never a crash or a hang."""
    from hostile.foreign_craft import CASES

    case = next(c for c in CASES if c.kind == "dcp" and c.name == name)
    local = case.build(tmp_path / "built")
    url = fresh_url(s3)
    for f in local.iterdir():
        s3["fs"].put_file(str(f), f"{url[5:]}/{f.name}")
    done = _cli("convert", url, tmp_path / "out.zarc", *_option_args(s3["options"]), limit=True)
    lines = done.stderr.strip().splitlines()
    if case.outcome.error not in (None, "*"):
        assert done.returncode == 2 and len(lines) == 1 and url in lines[0], done.stderr[-3000:]
        assert not (tmp_path / "out.zarc").exists()
    else:
        assert done.returncode in (0, 2), done.stderr[-3000:]
        assert done.returncode == 0 or (len(lines) == 1 and url in lines[0]), done.stderr[-3000:]
