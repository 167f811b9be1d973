"""fsspec URLs and file objects: fsspec's memory filesystem, file:// URLs, real pipes, and a real
S3-compatible server (moto, as a subprocess on 127.0.0.1) driven through s3fs."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import zarchive
from zarchive.container.remote import RemoteSource, is_file_object, is_url
from zarchive.container.source import LocalFileSource, MappedSource

fsspec = pytest.importorskip("fsspec")


def _sample() -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "weights": {"a": torch.randn(300, 40, generator=g), "b": torch.arange(1000, dtype=torch.int64)},
        "table": np.arange(5000, dtype=np.float32).reshape(50, 100),
        "notes": ["x"] * 400,
        "step": 7,
    }


def _check(got: dict, want: dict) -> None:
    assert torch.equal(got["weights"]["a"], want["weights"]["a"])
    assert torch.equal(got["weights"]["b"], want["weights"]["b"])
    np.testing.assert_array_equal(got["table"], want["table"])
    assert got["notes"] == want["notes"] and got["step"] == want["step"]


@pytest.mark.parametrize("how", ["read", "read-not-lazy", "open-lazy", "open-not-lazy"])
def test_memory_url_round_trip(mem_url, how):
    obj = _sample()
    url = f"{mem_url}/runs/one.zarc"
    assert zarchive.save(obj, url) == url
    if how.startswith("read"):
        _check(zarchive.read(url, lazy=how == "read"), obj)
    else:
        with zarchive.open(url, lazy=how == "open-lazy") as arc:
            assert set(arc.keys()) == {"weights", "table", "notes", "step"}
            _check(arc.load(), obj)
    assert zarchive.verify(url) == []


def test_remote_overwrite_and_missing(mem_url):
    url = f"{mem_url}/x.zarc"
    zarchive.save({"v": 1}, url)
    zarchive.save({"v": 2}, url)
    assert zarchive.read(url) == {"v": 2}
    with pytest.raises(zarchive.ArchiveNotFoundError, match="no archive"):
        zarchive.open(f"{mem_url}/nope.zarc")
    with pytest.raises(zarchive.FormatError, match="directory"):
        zarchive.open(mem_url)


def test_interrupted_upload_is_rejected_not_misread(mem_url):
    """What a non-atomic backend can show mid-upload: the zip directory is last, so it is refused."""
    url = f"{mem_url}/half.zarc"
    buf = io.BytesIO()
    zarchive.save(_sample(), buf)
    mem = fsspec.filesystem("memory")
    mem.pipe_file(url[len("memory://") :], buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(zarchive.NotAZipError):
        zarchive.read(url)


def test_file_url_is_saved_and_read_like_a_local_path(tmp_path):
    target = tmp_path / "sub" / "f.zarc"
    url = target.as_uri()
    assert zarchive.save(_sample(), url) == url
    assert target.is_file() and not [p for p in target.parent.iterdir() if p != target]  # no temp left
    with zarchive.open(url, mmap=True) as arc:  # mapped, like a local path
        assert isinstance(arc._reader.source, MappedSource)
        _check(arc.load(), _sample())
    with zarchive.open(url) as arc:  # read into memory, like a local path (the default)
        assert isinstance(arc._reader.source, LocalFileSource)
        _check(arc.load(), _sample())


@pytest.mark.parametrize("kind", ["bytesio", "real-file"])
def test_file_objects(tmp_path, kind):
    obj = _sample()
    if kind == "bytesio":
        f = io.BytesIO()
    else:
        f = open(tmp_path / "obj.zarc", "w+b")  # noqa: SIM115
    with f:
        zarchive.save(obj, f)
        assert not f.closed
        f.seek(0)
        _check(zarchive.read(f), obj)
        assert not f.closed  # the caller's file stays open
        f.seek(0)
        with zarchive.open(f) as arc:
            assert torch.equal(arc["weights/b"], obj["weights"]["b"])
        assert not f.closed


def test_non_seekable_stream_is_read_whole(tmp_path):
    path = tmp_path / "p.zarc"
    zarchive.save(_sample(), path)
    with subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None and not proc.stdout.seekable()
        _check(zarchive.read(proc.stdout), _sample())


def test_argument_checks(tmp_path, mem_url):
    assert is_url("s3://b/k") and is_url("simplecache::s3://b/k") and is_url("memory://x")
    assert not is_url("C:\\data\\x.zarc") and not is_url("runs/x.zarc") and not is_url(tmp_path)
    assert is_file_object(io.BytesIO()) and not is_file_object(tmp_path) and not is_file_object(b"PK")
    with pytest.raises(TypeError, match="URLs only"):
        zarchive.save({"a": 1}, tmp_path / "a.zarc", storage_options={"anon": True})
    with pytest.raises(TypeError, match="URLs only"):
        zarchive.save({"a": 1}, io.BytesIO(), storage_options={"anon": True})
    with pytest.raises(ImportError, match=r"pip install fsspec s3fs"):  # gcsfs is not a test dependency
        zarchive.open("gcs://bucket/x.zarc")


def test_lazy_open_fetches_only_what_it_needs_memory(mem_url):
    url = f"{mem_url}/big.zarc"
    big = torch.randn(5_000_000)  # 20 MB in the same member as the small tensor
    zarchive.save({"big": big, "small": torch.arange(16.0)}, url)
    size = fsspec.filesystem("memory").size(url[len("memory://") :])
    assert size > 20_000_000
    with zarchive.open(url) as arc:
        src = arc._reader.source
        assert isinstance(src, RemoteSource)
        assert torch.equal(arc["small"], torch.arange(16.0))
        assert src.bytes_fetched < 0.01 * size, src.bytes_fetched


def test_s3_round_trip_and_overwrite(s3):
    url = f"s3://{s3['bucket']}/runs/a.zarc"
    obj = _sample()
    assert zarchive.save(obj, url, storage_options=s3["options"]) == url
    _check(zarchive.read(url, storage_options=s3["options"]), obj)
    zarchive.save({"v": 2}, url, storage_options=s3["options"])
    assert zarchive.read(url, storage_options=s3["options"]) == {"v": 2}
    assert s3["fs"].ls(f"{s3['bucket']}/runs") == [f"{s3['bucket']}/runs/a.zarc"]  # nothing else uploaded
    with pytest.raises(zarchive.ArchiveNotFoundError):
        zarchive.open(f"s3://{s3['bucket']}/runs/missing.zarc", storage_options=s3["options"])


def test_s3_lazy_open_fetches_a_small_fraction(s3):
    url = f"s3://{s3['bucket']}/big.zarc"
    big = torch.randn(5_000_000)  # 20 MB, in the same member as the small tensor
    zarchive.save({"big": big, "small": torch.arange(16.0), "meta": {"lr": 0.1}}, url, storage_options=s3["options"])
    size = s3["fs"].size(url)
    assert size > 20_000_000

    sent: list[int] = []  # what the server actually sent, read from the HTTP responses

    def count(http_response=None, **_: object) -> None:
        sent.append(int(http_response.headers["content-length"]))

    fs = fsspec.filesystem("s3", **s3["options"])  # the (cached) instance zarchive's fsspec call gets
    fs.ls(s3["bucket"])  # connect, so that its client exists
    events = fs.s3.meta.events
    events.register("after-call.s3.GetObject", count)
    try:
        with zarchive.open(url, storage_options=s3["options"]) as arc:
            src = arc._reader.source
            assert isinstance(src, RemoteSource)
            opened = src.bytes_fetched
            assert arc["meta"] == {"lr": 0.1}
            assert torch.equal(arc["small"], torch.arange(16.0))
            fetched = src.bytes_fetched
            assert sum(sent) == fetched  # the count is honest: every byte asked for, and no more
            assert 0 < opened < fetched < 0.02 * size, (opened, fetched, size)
            assert torch.equal(arc["big"], big)  # and the rest is there when asked for
    finally:
        events.unregister("after-call.s3.GetObject", count)


def test_s3_configured_from_the_environment(s3, monkeypatch):
    """No storage_options: credentials and endpoint come from the usual AWS environment variables."""
    import s3fs

    url = f"s3://{s3['bucket']}/env.zarc"
    zarchive.save({"from": "options"}, url, storage_options=s3["options"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3["endpoint"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        assert zarchive.read(url) == {"from": "options"}
        zarchive.save({"from": "env"}, url)
        assert zarchive.read(url, storage_options=s3["options"]) == {"from": "env"}
    finally:
        s3fs.S3FileSystem.clear_instance_cache()


@pytest.mark.parametrize("layer", ["blockcache", "filecache", "simplecache"])
def test_open_through_fsspec_cache_layers_local_and_memory(tmp_path: Path, mem_url: str, layer: str) -> None:
    sd = {f"w{i}": torch.randn(4096) for i in range(4)}
    local = tmp_path / "sd.zarc"
    zarchive.save(sd, local)
    zarchive.save(sd, f"{mem_url}/sd.zarc")
    options = {layer: {"cache_storage": str(tmp_path / "cache")}}
    for url in (f"{layer}::file://{local}", f"{layer}::{mem_url}/sd.zarc"):
        with zarchive.open(url, storage_options=options) as arc:
            assert torch.equal(arc["w2"], sd["w2"]), url
        assert zarchive.verify(url, storage_options=options)


def test_blockcache_on_s3_fetches_only_the_blocks_a_tensor_needs(s3, tmp_path: Path) -> None:
    sd = {f"w{i}": torch.randn(1 << 20) for i in range(16)}  # 16 tensors of 4 MiB
    url = f"s3://{s3['bucket']}/runs/blocks.zarc"
    zarchive.save(sd, url, storage_options=s3["options"])
    cache = tmp_path / "cache"
    options = {"s3": s3["options"], "blockcache": {"cache_storage": str(cache)}}
    with zarchive.open(f"blockcache::{url}", storage_options=options) as arc:
        assert torch.equal(arc["w7"], sd["w7"])
    (cached,) = [p for p in cache.iterdir() if p.name != "cache"]
    on_disk = cached.stat().st_blocks * 512  # blockcache writes the blocks it fetched into a sparse file
    assert cached.stat().st_size > 60 << 20 and on_disk < 16 << 20, on_disk
    with zarchive.open(f"blockcache::{url}", storage_options=options) as arc:  # again: from the cache
        assert torch.equal(arc["w7"], sd["w7"])
