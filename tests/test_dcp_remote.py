"""zarchive.dcp on fsspec URLs, in one process (no_dist): a checkpoint saved to and loaded from
fsspec's memory filesystem, `file://` URLs and a real S3-compatible server (moto, tests/s3_server.py);
the view of a remote checkpoint reads the index and then only the bytes of what is fetched (counted
from the server's own responses); the command line on it; the read budget; hostile and damaged
indexes on the store refused as they are locally. The multi-rank runs are in test_dcp_remote_dist.py."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
import warnings
from pathlib import Path
from typing import Any, Self

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")
fsspec = pytest.importorskip("fsspec")

from torch.distributed.checkpoint.api import CheckpointException

import zarchive
from tests.s3_server import fresh_url
from tests.test_dcp import HOSTILE, TrainConfig, bits, blank, failure, state, tensor
from zarchive.dcp import ZArchiveReader, ZArchiveWriter
from zarchive.errors import FormatError, IntegrityError, MemberNotFoundError, UnsafeArchiveError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # DCP warns that no process group is set up
ROOT = Path(__file__).parent.parent


def save(url: str, value: dict[str, Any] | None = None, **options: Any) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state() if value is None else value, storage_writer=ZArchiveWriter(url, **options), no_dist=True)
    return url


def load(url: str, target: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    target = blank() if target is None else target
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(target, storage_reader=ZArchiveReader(url, **options), no_dist=True)
    return target


def rewrite_index(url: str, edit: Any, **options: Any) -> None:
    doc = zarchive.read(f"{url}/index.zarc", **options)
    edit(doc)
    zarchive.save(doc, f"{url}/index.zarc", **options)


def same_state(out: dict[str, Any]) -> None:
    want = state()
    assert bits(out["model"]["w"]) == bits(want["model"]["w"]) and bits(out["model"]["b"]) == bits(want["model"]["b"])
    assert out["step"] == 5 and out["config"] == TrainConfig() and out["notes"] == want["notes"]


@pytest.fixture
def mem_url(mem_url: str) -> str:
    """A checkpoint's URL in a fresh folder of the memory filesystem (conftest's mem_url)."""
    return f"{mem_url}/ck"


# --- round trips ---
@pytest.mark.parametrize("slash", ["", "/"], ids=["no-slash", "slash"])
def test_memory_round_trip_and_view(mem_url: str, slash: str) -> None:
    url = save(mem_url + slash)
    same_state(load(url))
    with zarchive.open(url, trusted=[TrainConfig]) as arc:
        assert arc.directory == url and set(arc.keys()) == {"model", "step", "config", "rng", "notes"}
        assert bits(arc["model/w"]) == bits(state()["model"]["w"])
        same_state(arc.load())
        assert arc.verify() and set(arc.members) == {"index.zarc", *arc.index.shards}
    assert zarchive.verify(url)


def test_file_url_is_a_local_directory(tmp_path: Path) -> None:
    url = (tmp_path / "ck").as_uri()
    save(url)
    assert min(p.name for p in (tmp_path / "ck").iterdir()) == "index.zarc"
    same_state(load(url))
    with zarchive.open(url, trusted=[TrainConfig]) as arc:
        same_state(arc.load())


def test_checkpoint_id_may_be_a_url(mem_url: str) -> None:
    """dcp.save/dcp.load(checkpoint_id=URL): the writer and reader accept URLs as checkpoint ids."""
    assert ZArchiveWriter.validate_checkpoint_id(mem_url) and ZArchiveReader.validate_checkpoint_id(mem_url)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state(), checkpoint_id=mem_url, storage_writer=ZArchiveWriter("unused"), no_dist=True)
    same_state(load(mem_url))


def test_s3_round_trip_and_a_new_save_removes_the_old_shards(s3: dict[str, Any]) -> None:
    url, options = fresh_url(s3), {"storage_options": s3["options"]}
    save(url, **options)
    first = set(s3["fs"].ls(url, refresh=True))
    changed = {**state(), "step": 6}
    save(url, changed, **options)
    names = {p.rsplit("/", 1)[1] for p in s3["fs"].ls(url, refresh=True)}
    assert len(names) == 2 and "index.zarc" in names and not first & {f"{url[5:]}/{n}" for n in names - {"index.zarc"}}
    out = load(url, **options)
    assert out["step"] == 6 and bits(out["model"]["w"]) == bits(state()["model"]["w"])
    with zarchive.open(url, trusted=[TrainConfig], **options) as arc:
        assert arc["step"] == 6 and arc.verify()


def test_s3_wrong_options_are_refused_not_misread(s3: dict[str, Any]) -> None:
    url = save(fresh_url(s3), storage_options=s3["options"])
    with pytest.raises(TypeError, match="URLs only"):
        ZArchiveReader("local/dir", storage_options=s3["options"]).open()
    with pytest.raises(zarchive.ArchiveNotFoundError):
        zarchive.open(f"{url}-nothing/", storage_options=s3["options"])


# --- lazy views: only the index, then only what is fetched ---
class Requests:
    """The GetObject and ListObjects requests an s3fs filesystem sends, and the bytes the server sent
    back (read from its responses' Content-Length)."""

    def __init__(self, s3: dict[str, Any]) -> None:
        self.fs = fsspec.filesystem("s3", **s3["options"])  # the (cached) instance zarchive's fsspec calls get
        self.fs.ls(s3["bucket"])  # connect, so that its client exists
        self.gets: list[str] = []
        self.sizes: list[int] = []
        self.lists = 0

    def _before(self, params: dict[str, Any] | None = None, **_: Any) -> None:
        self.gets.append(str((params or {}).get("Key")))

    def _after(self, http_response: Any = None, **_: Any) -> None:
        self.sizes.append(int(http_response.headers["content-length"]))

    def _listed(self, **_: Any) -> None:
        self.lists += 1

    def __enter__(self) -> Self:
        events = self.fs.s3.meta.events
        events.register("before-parameter-build.s3.GetObject", self._before)
        events.register("after-call.s3.GetObject", self._after)
        events.register("before-call.s3.ListObjectsV2", self._listed)
        return self

    def __exit__(self, *exc: object) -> None:
        events = self.fs.s3.meta.events
        events.unregister("before-parameter-build.s3.GetObject", self._before)
        events.unregister("after-call.s3.GetObject", self._after)
        events.unregister("before-call.s3.ListObjectsV2", self._listed)

    @property
    def fetched(self) -> int:
        return sum(self.sizes)


def test_s3_view_reads_the_index_then_only_what_is_fetched(s3: dict[str, Any]) -> None:
    """16 tensors of 1 MiB: opening reads the index (one listing, no shard byte); one tensor fetches
    its own bytes and the shard's directory and manifest, the next its own bytes; a small fraction of
    the checkpoint."""
    sd = {"model": {f"w{i}": torch.randn(1 << 18, generator=torch.Generator().manual_seed(i)) for i in range(16)}}
    url = save(fresh_url(s3), sd, storage_options=s3["options"])
    total = sum(s3["fs"].size(p) for p in s3["fs"].ls(url, refresh=True))
    one = sd["model"]["w7"].nbytes
    with Requests(s3) as seen, zarchive.open(url + "/", storage_options=s3["options"]) as arc:
        assert {k.rsplit("/", 1)[1] for k in seen.gets} == {"index.zarc"} and seen.lists == 1
        opened = seen.fetched
        w = arc["model/w7"]
        assert bits(w) == bits(sd["model"]["w7"])
        read = seen.fetched - opened
        assert {k.rsplit("/", 1)[1] for k in seen.gets[-1:]} <= set(arc.index.shards)
        before = seen.fetched
        assert bits(arc["model/w8"]) == bits(sd["model"]["w8"])  # the shard is open: the tensor's bytes alone
        again = seen.fetched - before
        print(f"\nremote view: opened with {opened} bytes; one tensor of {one} bytes fetched {read} bytes (opening "
              f"its shard), the next {again}; checkpoint {total} bytes")  # fmt: skip
        assert one <= read < one + (512 << 10), (read, one)
        assert one <= again < one + (128 << 10), (again, one)
        assert opened + read < 0.1 * total, (opened, read, total)


def test_s3_dcp_load_of_part_reads_part(s3: dict[str, Any]) -> None:
    """dcp.load of two tensors of 16 from S3 fetches about their bytes, not the shard."""
    sd = {"model": {f"w{i}": torch.randn(1 << 18, generator=torch.Generator().manual_seed(i)) for i in range(16)}}
    url = save(fresh_url(s3), sd, storage_options=s3["options"])
    target = {"model": {"w3": torch.zeros(1 << 18), "w12": torch.zeros(1 << 18)}}
    with Requests(s3) as seen:
        load(url, target, storage_options=s3["options"])
    assert bits(target["model"]["w3"]) == bits(sd["model"]["w3"])
    assert bits(target["model"]["w12"]) == bits(sd["model"]["w12"])
    print(f"\ndcp.load of 2 tensors of 16 (2 MiB of 16 MiB): fetched {seen.fetched} bytes in {len(seen.gets)} GETs")
    assert seen.fetched < 2 * (1 << 20) + (768 << 10), seen.fetched  # (the index, its shard opened, read-ahead)


# --- the command line ---
def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    run_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "zarchive", *args], capture_output=True, text=True, env=run_env,
                          timeout=120, check=False)  # fmt: skip


def test_command_line_on_s3(s3: dict[str, Any]) -> None:
    """ls, show and verify on an s3:// checkpoint, configured from the AWS environment variables."""
    url = save(fresh_url(s3), {**state(), "config": {"lr": 0.1}}, storage_options=s3["options"])
    ls = cli("ls", url, env=s3["env"])
    assert ls.returncode == 0 and "index.zarc" in ls.stdout and "/model/w" in ls.stdout, ls.stderr
    show = cli("show", url + "/", env=s3["env"])
    assert show.returncode == 0 and "w  tensor float32 [4, 3] in 1 chunk" in show.stdout, show.stderr
    assert cli("verify", url, env=s3["env"]).returncode == 0
    s3["fs"].rm(f"{url[5:]}/index.zarc")
    missing = cli("ls", url, env=s3["env"])
    assert missing.returncode == 2 and "no index.zarc" in missing.stderr, missing.stderr


# --- the gate: budget, damaged and hostile checkpoints on a store ---
def test_remote_reads_are_under_the_read_budget(mem_url: str, tmp_path: Path) -> None:
    """The directory's budget holds for a remote checkpoint as for a local one: the index opens, a
    tensor over max_read_bytes is refused before it is fetched, and so is an index over it."""
    sd = {"model": {"big": torch.zeros(1 << 20), "small": torch.ones(4)}}
    for where in (save(mem_url, sd), str(save(str(tmp_path / "ck"), sd))):
        with zarchive.open(where, max_read_bytes=2 << 20) as arc:
            assert arc.budget.limit == 2 << 20
            with pytest.raises(UnsafeArchiveError, match="max_read_bytes"):
                arc["model/big"]
        with pytest.raises(UnsafeArchiveError):
            zarchive.open(where, max_read_bytes=1000)  # not even the index


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_index_on_memory_refused(mem_url: str, case: str) -> None:
    edit, message = HOSTILE[case]
    url = save(mem_url)
    rewrite_index(url, edit)
    with pytest.raises(FormatError, match=message):
        zarchive.open(url)
    with pytest.raises(FormatError, match=message):
        zarchive.verify(url)
    with pytest.raises(CheckpointException) as info:
        load(url)
    assert message in str(failure(info))


def test_damaged_checkpoints_on_memory(mem_url: str) -> None:
    url = save(mem_url)
    mem = fsspec.filesystem("memory")
    (shard,) = [p for p in mem.ls(url[len("memory://") :], detail=False) if "shard-" in p]
    data = bytearray(mem.cat_file(shard))
    key = tensor(zarchive.read(f"{url}/index.zarc"), "model.w")["chunks"][0][1]
    with zarchive.open(f"memory://{shard}") as arc:
        at = bytes(data).index(bits(arc[f"tensors/{key}"]))
    data[at + 5] ^= 0xFF  # a flipped byte in one tensor: its member (under 1 MiB, checked whole) is refused
    mem.pipe_file(shard, bytes(data))
    with zarchive.open(url) as arc:
        with pytest.raises(IntegrityError):
            arc["model/w"]
        with pytest.raises(IntegrityError):
            arc["model/b"]
    assert not zarchive.verify(url)
    mem.pipe_file(shard, bytes(data[:-10]))  # another size than the index recorded
    with pytest.raises(IntegrityError, match="recorded"):
        zarchive.open(url)
    mem.rm_file(shard)
    with pytest.raises(MemberNotFoundError, match="missing"):
        zarchive.open(url)
    mem.mkdir(shard)  # a folder where a shard should be
    mem.pipe_file(f"{shard}/x", b"x")
    with pytest.raises(FormatError, match="not a file"):
        zarchive.open(url)


CRAFT = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3_000_000_000, 3_000_000_000))
sys.path[:0] = [{tests!r}, {root!r}]
import zarchive
from zarchive.errors import ZArchiveError
try:
    with zarchive.open({url!r}, storage_options={options!r}) as arc:
        arc.verify()
        arc[{leaf!r}]
    print("read")
except ZArchiveError as e:
    print("refused", type(e).__name__, str(e)[:200])
"""


@pytest.mark.parametrize("name", ["many_chunks", "chunk_reused"])
def test_hostile_dcp_corpus_cases_on_s3(s3: dict[str, Any], tmp_path: Path, name: str) -> None:
    """The hostile DCP directories of tests/hostile, uploaded to the S3 server and opened there in a
    child under an address-space and time limit: the same outcome as on disk (read within the
    budget, or refused with a ZArchiveError), never a crash or a hang."""
    from hostile.foreign_craft import CASES

    case = next(c for c in CASES if c.kind == "dcp" and c.name == name)
    local = case.build(tmp_path)
    url = fresh_url(s3)
    for f in local.iterdir():
        s3["fs"].put_file(str(f), f"{url[5:]}/{f.name}")
    code = CRAFT.format(tests=str(ROOT / "tests"), root=str(ROOT), url=url, options=s3["options"], leaf=case.leaf)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = done.stdout.strip()
    if case.outcome.error not in (None, "*"):
        assert outcome.startswith("refused") and outcome.split()[1] in case.outcome.error.split("|"), outcome
    else:
        assert outcome.startswith(("read", "refused")), outcome


def test_consolidate_a_remote_checkpoint(mem_url: str, tmp_path: Path) -> None:
    from zarchive.dcp.consolidate import consolidate

    url = save(mem_url, {**state(), "config": {"lr": 0.1}})
    assert consolidate(url, str(tmp_path / "one.zarc"), storage_options={}) == 7
    one = zarchive.read(tmp_path / "one.zarc")
    assert bits(one["model"]["w"]) == bits(state()["model"]["w"]) and one["config"] == {"lr": 0.1}


def test_through_an_fsspec_cache_layer_on_s3(s3: dict[str, Any], tmp_path: Path) -> None:
    """blockcache:: in front of s3://: the view and dcp.load read through it (the cache keeps the
    blocks it fetched; it does not see a later save's index, so clear it after one)."""
    sd = {"model": {f"w{i}": torch.randn(1 << 16, generator=torch.Generator().manual_seed(i)) for i in range(4)}}
    url = save(fresh_url(s3), sd, storage_options=s3["options"])
    options = {"s3": s3["options"], "blockcache": {"cache_storage": str(tmp_path / "cache")}}
    with zarchive.open(f"blockcache::{url}", storage_options=options) as arc:
        assert bits(arc["model/w2"]) == bits(sd["model"]["w2"]) and arc.verify()
    target = {"model": {"w1": torch.zeros(1 << 16)}}
    load(f"blockcache::{url}", target, storage_options=options)
    assert bits(target["model"]["w1"]) == bits(sd["model"]["w1"])


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8, torch.bool]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tensors=st.dictionaries(
        st.text("abcdefgh_", min_size=1, max_size=6),
        st.tuples(st.sampled_from(DTYPES), st.lists(st.integers(0, 5), max_size=3), st.integers(0, 2**31)),
        min_size=1,
        max_size=5,
    ),
    step=st.integers(-(2**40), 2**40),
)
def test_round_trip_on_memory_is_bitwise(mem_url: str, tensors: dict[str, Any], step: int) -> None:
    """Any state dict of tensors (dtypes, shapes, empty ones) and a value: saved to memory://, read
    back bitwise by dcp.load and by the view."""
    sd: dict[str, Any] = {"model": {}, "step": step}
    for name, (dtype, shape, seed) in tensors.items():
        g = torch.Generator().manual_seed(seed)
        sd["model"][name] = (torch.randn(shape, generator=g) * 100).to(dtype)
    url = f"{mem_url}/{uuid.uuid4().hex[:8]}"
    save(url, sd)
    target = {"model": {k: torch.zeros_like(v) for k, v in sd["model"].items()}, "step": 0}
    load(url, target)
    with zarchive.open(url) as arc:
        viewed = arc.load()
    assert target["step"] == step and viewed["step"] == step
    for k, v in sd["model"].items():
        assert bits(target["model"][k]) == bits(v) and bits(viewed["model"][k]) == bits(v), k
        assert viewed["model"][k].dtype == v.dtype and viewed["model"][k].shape == v.shape
