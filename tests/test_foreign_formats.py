"""torch.save, safetensors, npy and npz files read by zarchive.open / zarchive.read: recognised by
their bytes, read lazily (a value's own bytes only) and exactly as torch.load(weights_only=True),
safetensors and numpy read them; refused, without running anything, when they hold more than weights.
Real files written by torch, safetensors and numpy; the command line in real subprocesses."""

from __future__ import annotations

import collections
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import forkrun
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from safetensors.torch import save, save_file

import zarchive
from zarchive.errors import IntegrityError, RefusedPickleError, SaveError


def torch_load(path: Path) -> Any:
    return torch.load(path, map_location="cpu", weights_only=True)


def assert_same(got: Any, want: Any) -> None:
    """Equal values of equal types; tensors bit-exact with equal dtype, shape, stride and class."""
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
        assert got.requires_grad == want.requires_grad
        if want.numel():
            as_bytes = [
                torch.empty(t.numel(), dtype=t.dtype).copy_(t.detach().reshape(-1)).view(torch.uint8)
                for t in (got, want)
            ]
            assert torch.equal(*as_bytes)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            assert_same(got[k], want[k])
        assert getattr(got, "_metadata", None) == getattr(want, "_metadata", None)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert_same(a, b)
    else:
        assert got == want


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 4))
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    return path


def test_state_dict_reads_as_torch_load_does(model_file: Path) -> None:
    got = zarchive.read(model_file)
    want = torch_load(model_file)
    assert_same(got, want)
    assert isinstance(got, collections.OrderedDict) and got._metadata  # type: ignore[attr-defined]
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 4))
    model.load_state_dict(got)  # straight into load_state_dict


def test_one_tensor_reads_only_its_own_bytes(tmp_path: Path) -> None:
    sd = {f"layers.{i}.weight": torch.randn(256, 256) for i in range(8)}
    path = tmp_path / "big.pt"
    torch.save(sd, path)
    for mmap in (True, False):
        read: list[tuple[str, int]] = []
        with zarchive.open(path, mmap=mmap) as arc:
            arc.on_read = lambda member, n, read=read: read.append((member, n))
            w = arc["layers.3.weight"]
        assert torch.equal(w, sd["layers.3.weight"])
        assert sum(n for _, n in read) == 256 * 256 * 4 and len(read) == 1, read


def test_shared_storages_views_and_offsets(tmp_path: Path) -> None:
    base = torch.arange(24, dtype=torch.float32)
    tied = torch.randn(4, 3)
    obj = {
        "base": base,
        "view": base[5:17].view(3, 4),  # an offset into a shared storage
        "t": base[:12].view(3, 4).t(),  # non-contiguous
        "strided": base[::3],
        "tied_a": tied,
        "tied_b": tied,  # the same tensor twice
        "nested": {"deep": [base[20:], (tied[1],)]},
    }
    path = tmp_path / "shared.pt"
    torch.save(obj, path)
    got = zarchive.read(path)
    assert_same(got, torch_load(path))
    assert got["tied_a"] is got["tied_b"]
    ptr = got["base"].untyped_storage().data_ptr()
    for key in ("view", "t", "strided"):
        assert got[key].untyped_storage().data_ptr() == ptr, key  # views share memory, as with torch.load
    got["base"][6] = -1.0
    assert got["view"][0, 1] == -1.0
    assert zarchive.read(path)["view"][0, 1] == 6.0  # a write to a loaded value never reaches the file


def test_lone_view_reads_only_its_extent(tmp_path: Path) -> None:
    big = torch.randn(1000)
    path = tmp_path / "view.pt"
    torch.save({"slice": big[100:110]}, path)  # torch.save writes the whole storage
    read: list[int] = []
    with zarchive.open(path) as arc:
        arc.on_read = lambda member, n: read.append(n)
        got = arc["slice"]
    assert torch.equal(got, big[100:110]) and got.storage_offset() == 0 and read == [40]


DTYPES = [
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128, torch.uint16, torch.uint32,
    torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2,
]  # fmt: skip


def test_every_dtype_parameters_and_plain_values(tmp_path: Path) -> None:
    torch.manual_seed(1)
    obj: dict[str, Any] = {str(d): (torch.randn(3, 5) * 10).to(d) for d in DTYPES}
    obj["param"] = torch.nn.Parameter(torch.randn(2, 2))
    obj["frozen"] = torch.nn.Parameter(torch.randn(2), requires_grad=False)
    obj["grad"] = torch.randn(3).requires_grad_()
    obj["empty"] = torch.empty(0, 4)
    obj["scalar"] = torch.tensor(3.5)
    obj["plain"] = {"step": 7, "lr": 1e-3, "name": "run", "none": None, "tuple": (1, "a"), "big": 2**80,
                    "nan": float("nan"), "set": {1, 2}, "bytes": b"\x00\xff", "complex": 1 - 2j}  # fmt: skip
    obj["torch_values"] = [torch.float16, torch.device("cpu"), torch.Size([2, 3])]
    path = tmp_path / "dtypes.pth"
    torch.save(obj, path)
    got, want = zarchive.read(path), torch_load(path)
    nan = got["plain"].pop("nan")
    want["plain"].pop("nan")
    assert math.isnan(nan)
    assert_same(got, want)
    assert isinstance(got["param"], torch.nn.Parameter) and got["param"].requires_grad
    assert isinstance(got["frozen"], torch.nn.Parameter) and not got["frozen"].requires_grad


def test_recognised_by_bytes_not_by_name(model_file: Path, tmp_path: Path) -> None:
    want = torch_load(model_file)
    for name in ("weights.ckpt", "weights.bin", "weights.zarc", "weights"):
        other = tmp_path / name
        shutil.copy(model_file, other)
        assert_same(zarchive.read(other), want)
    assert_same(zarchive.read(model_file.read_bytes()), want)  # bytes in memory too


def test_read_options_apply(model_file: Path) -> None:
    half = zarchive.read(model_file, dtype=torch.float16)
    assert half["0.weight"].dtype == torch.float16 and half["1.num_batches_tracked"].dtype == torch.int64
    meta = zarchive.read(model_file, map_location="meta")
    assert meta["0.weight"].device.type == "meta"
    assert zarchive.read(model_file, map_location="saved")["0.weight"].device.type == "cpu"
    with zarchive.open(model_file) as arc:
        assert arc.keys()[:2] == ["0.weight", "0.bias"] and "2.bias" in arc
        assert arc.summary("0.weight").startswith("tensor float32 [16, 8]")
        assert arc.verify() and arc.audit() == {}
        assert arc.format == "torch" and arc.meta["format"] == "torch.save"


def test_numpy_mode_never_imports_torch(tmp_path: Path) -> None:
    path = tmp_path / "sd.pt"
    sd = {"w": torch.randn(3, 4), "t": torch.randn(4, 3).t(), "i": torch.arange(5)}
    torch.save(sd, path)
    save_file({k: v.contiguous() for k, v in sd.items()}, tmp_path / "sd.safetensors")
    code = (
        "import sys, zarchive, numpy as np\n"
        f"st = zarchive.read({str(tmp_path / 'sd.safetensors')!r}, tensors='numpy')\n"
        f"got = zarchive.read({str(path)!r}, tensors='numpy')\n"
        "assert all(np.array_equal(st[k], got[k]) for k in got)\n"
        "assert 'torch' not in sys.modules\n"
        "print(repr({k: v.tolist() for k, v in got.items()}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    got = eval(out.stdout)
    for k, v in sd.items():
        assert np.array_equal(np.array(got[k]), v.numpy())


def _st_writes(dtype: torch.dtype) -> bool:
    """Whether the installed safetensors writes this dtype (the floors' 0.4 lacks some)."""
    from safetensors.torch import save

    try:
        save({"x": torch.zeros(1, dtype=dtype)})
    except Exception:  # noqa: BLE001 - KeyError and others: "not this dtype"
        return False
    return True


def test_safetensors_files(tmp_path: Path) -> None:
    torch.manual_seed(2)
    tensors = {"embed.weight": torch.randn(10, 4), "bf": torch.randn(3).bfloat16(), "i": torch.arange(6).view(2, 3),
               "b": torch.tensor([True, False]), "f8": torch.randn(4).to(torch.float8_e4m3fn)}  # fmt: skip
    tensors = {k: t for k, t in tensors.items() if _st_writes(t.dtype)}  # safetensors 0.4 has no float8
    path = tmp_path / "model.safetensors"
    save_file(tensors, path, metadata={"format": "pt", "note": "hi"})
    got = zarchive.read(path)
    assert sorted(got) == sorted(tensors)
    for k, t in tensors.items():
        assert_same(got[k], t)
    with zarchive.open(path) as arc:
        read: list[int] = []
        arc.on_read = lambda member, n: read.append(n)
        assert torch.equal(arc["embed.weight"], tensors["embed.weight"]) and read == [160]
        assert arc.meta["metadata"] == {"format": "pt", "note": "hi"} and arc.format == "safetensors"


def test_npy_and_npz_files(tmp_path: Path) -> None:
    a = np.arange(12, dtype=">i4").reshape(3, 4)
    f = np.asfortranarray(np.random.default_rng(0).random((3, 5)))
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "f.npy", f)
    got = zarchive.read(tmp_path / "a.npy")
    assert got.dtype == a.dtype and np.array_equal(got, a)
    got = zarchive.read(tmp_path / "f.npy")
    assert np.array_equal(got, f) and got.flags.f_contiguous
    for savez in (np.savez, np.savez_compressed):
        savez(tmp_path / "z.npz", a=a, f=f, s=np.array(["x", "yz"]))
        got = zarchive.read(tmp_path / "z.npz")
        assert list(got) == ["a", "f", "s"]
        assert all(np.array_equal(got[k], v) for k, v in {"a": a, "f": f, "s": np.array(["x", "yz"])}.items())
        with zarchive.open(tmp_path / "z.npz") as arc:
            assert np.array_equal(arc["f"], f) and arc.verify()


class Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_malicious_reduce_payload_is_refused_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.randn(2), "evil": Payload(str(marker))}, path)
    for call in (zarchive.read, zarchive.open, zarchive.audit):
        with pytest.raises(RefusedPickleError, match="system.*nothing was run"):
            call(path)
    assert not marker.exists()
    with pytest.raises(Exception, match="weights_only"):  # torch refuses it as well (the control)
        torch.load(path, weights_only=True)


def test_whole_modules_and_optimizers(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2)
    path = tmp_path / "whole.pt"
    torch.save(model, path)  # pickles the class: refused by name
    with pytest.raises(RefusedPickleError, match="torch.nn.modules.linear"):
        zarchive.read(path)
    with pytest.raises(SaveError, match=r"save its state_dict\(\)"):
        zarchive.save(model, tmp_path / "m.zarc")
    with pytest.raises(SaveError, match=r"optimizer .*state_dict\(\).*save_checkpoint"):
        zarchive.save(torch.optim.SGD(model.parameters(), lr=0.1), tmp_path / "o.zarc")
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    torch.save(opt.state_dict(), path)  # an optimizer's state dict is weights and numbers: it reads
    assert_same(zarchive.read(path), torch_load(path))


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
def test_more_than_weights_is_refused(tmp_path: Path) -> None:
    """What torch.load(weights_only=True) takes but zarchive does not build: refused by name."""
    p = torch.nn.Parameter(torch.randn(2))
    p.note = "an attribute"  # type: ignore[attr-defined]
    torch.save({"p": p}, tmp_path / "p.pt")
    assert torch.load(tmp_path / "p.pt", weights_only=True)["p"].note == "an attribute"  # (the control)
    with pytest.raises(RefusedPickleError, match="parameter with extra state"):
        zarchive.read(tmp_path / "p.pt")
    torch.save({"c": collections.Counter("aab")}, tmp_path / "c.pt")
    with pytest.raises(RefusedPickleError, match="collections.Counter"):
        zarchive.read(tmp_path / "c.pt")
    torch.save({"q": torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)}, tmp_path / "q.pt")
    with pytest.raises(RefusedPickleError, match="_rebuild_qtensor"):
        zarchive.read(tmp_path / "q.pt")
    torch.save({"s": torch.randn(3, 3).to_sparse()}, tmp_path / "s.pt")
    with pytest.raises(RefusedPickleError, match="sparse"):
        zarchive.read(tmp_path / "s.pt")


def test_legacy_format_and_damage(tmp_path: Path, model_file: Path) -> None:
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": torch.randn(2)}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(RefusedPickleError, match="legacy format"):
        zarchive.read(legacy)
    data = bytearray(model_file.read_bytes())
    with zarchive.open(model_file) as arc:
        member = next(m for m in arc.members if arc.members[m]["size"] >= 64)
    damaged = tmp_path / "damaged.pt"
    at = data.find(torch_load(model_file)["0.weight"].numpy().tobytes()[:16])
    data[at + 3] ^= 0xFF
    damaged.write_bytes(bytes(data))
    assert not zarchive.verify(damaged)
    with pytest.raises(IntegrityError, match="CRC"):
        zarchive.read(damaged)
    assert zarchive.read(damaged, verify=False)["2.bias"].shape == (4,) and member


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return forkrun.cli(*args, timeout=120)  # a process of its own, forked from a server that imported torch


def test_command_line_on_foreign_files(model_file: Path, tmp_path: Path) -> None:
    st = tmp_path / "m.safetensors"
    save_file({"w": torch.ones(2, 2)}, st)
    np.savez(tmp_path / "z.npz", x=np.arange(3))
    out = run_cli("ls", str(model_file))
    assert out.returncode == 0 and "model/data/0" in out.stdout and "/0.weight" in out.stdout, out.stderr
    out = run_cli("show", str(model_file))
    assert out.returncode == 0 and "0.weight  tensor float32 [16, 8]" in out.stdout, out.stderr
    out = run_cli("cat", str(model_file), "2.bias")
    assert out.returncode == 0 and "tensor float32 shape [4]" in out.stdout, out.stderr
    out = run_cli("cat", str(st), "w")
    assert out.returncode == 0 and "[[1., 1.]," in out.stdout, out.stderr
    out = run_cli("show", str(tmp_path / "z.npz"))
    assert out.returncode == 0 and "x  ndarray <i8 [3]" in out.stdout, out.stderr
    out = run_cli("meta", str(st))
    assert out.returncode == 0 and "safetensors" in out.stdout, out.stderr
    out = run_cli("audit", str(model_file))
    assert out.returncode == 0 and "no classes" in out.stdout, out.stderr
    out = run_cli("verify", str(model_file))
    assert out.returncode == 0 and out.stdout.startswith("OK"), out.stderr
    evil = tmp_path / "evil.pt"
    torch.save({"e": Payload(str(tmp_path / "pwned"))}, evil)
    out = run_cli("show", str(evil))
    assert out.returncode != 0 and "RefusedPickleError" in out.stderr + out.stdout or "system" in out.stderr
    assert not (tmp_path / "pwned").exists()


def test_extract_of_a_foreign_file_says_what_to_do(model_file: Path, tmp_path: Path) -> None:
    """extract unpacks an archive's members: on a torch.save, safetensors or npz file it names the
    file's kind and the commands that work (show, convert), writes nothing and exits 2; after
    convert, extract unpacks the archive."""
    st = tmp_path / "m.safetensors"
    save_file({"w": torch.ones(2, 2)}, st)
    np.savez(tmp_path / "z.npz", x=np.arange(3))
    for path, kind in ((model_file, "torch.save"), (st, "safetensors"), (tmp_path / "z.npz", "npz")):
        out = run_cli("extract", str(path), str(tmp_path / "out"))
        assert out.returncode == 2 and f"is a {kind} file, not a zarchive" in out.stderr, out.stderr
        assert "zarchive convert" in out.stderr and not (tmp_path / "out").exists()
    assert run_cli("convert", str(st), str(tmp_path / "m.zarc")).returncode == 0
    out = run_cli("extract", str(tmp_path / "m.zarc"), str(tmp_path / "out"))
    assert out.returncode == 0 and (tmp_path / "out" / "manifest.json").exists(), out.stderr


JUNK: list[Any] = [None, True, -1, 2**70, 1.5, "", "x", [], [-1], [[]], {}, {"$type": "int"}, "archive/data/0"]


def test_every_field_of_a_foreign_node_replaced_by_junk_is_a_zarchive_error_or_loads(tmp_path: Path) -> None:
    """The handler contract's junk test for the read-only foreign node types: start from a real node,
    break one field at a time; a node given to load_node is planned and checked like one from the file."""
    torch.save({"w": torch.randn(4, 3).t(), "shared": torch.arange(6)[2:]}, tmp_path / "t.pt")
    np.save(tmp_path / "a.npy", np.arange(6.0).reshape(2, 3))
    for path, keys in ((tmp_path / "t.pt", ["w", "shared"]), (tmp_path / "a.npy", [""])):
        with zarchive.open(path) as arc:
            for key in keys:
                node = arc.node(key)
                for field in [k for k in node if k != "$type"]:
                    variants = [{**node, field: junk} for junk in JUNK] + [
                        {k: v for k, v in node.items() if k != field}
                    ]
                    for bad in variants:
                        try:
                            arc.load_node(bad)
                        except zarchive.ZArchiveError:
                            pass


def test_a_node_cannot_reach_past_its_member(tmp_path: Path) -> None:
    torch.save({"w": torch.arange(4, dtype=torch.float32)}, tmp_path / "t.pt")
    with zarchive.open(tmp_path / "t.pt") as arc:
        node = arc.node("w")
        for bad in ({**node, "shape": [100], "end": 400}, {**node, "offset": 3, "begin": 12, "end": 28}):
            with pytest.raises(zarchive.FormatError, match="reads bytes up to"):
                arc.load_node(bad)
        with pytest.raises(zarchive.FormatError, match="its node says"):
            arc.load_node({**node, "end": 8})


@pytest.mark.filterwarnings("ignore")
def test_a_lightning_checkpoint_reads_as_torch_load_does(tmp_path: Path) -> None:
    lightning = pytest.importorskip("lightning")

    class Tiny(lightning.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.fc = torch.nn.Linear(2, 1)

        def training_step(self, batch: Any, i: int) -> Any:
            return self.fc(batch[0]).sum()

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=4)
    trainer = lightning.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(Tiny(), data)
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    got, want = zarchive.read(tmp_path / "last.ckpt"), torch_load(tmp_path / "last.ckpt")
    assert sorted(got) == sorted(want)
    assert_same(got["state_dict"], want["state_dict"])
    assert_same(got["optimizer_states"], want["optimizer_states"])
    assert got["hyper_parameters"] == want["hyper_parameters"] and got["epoch"] == want["epoch"]


SAVED_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int8, torch.bool, torch.uint16]


@st.composite
def tensors(draw: Any) -> torch.Tensor:
    """A tensor as state dicts hold them: any of several dtypes and shapes, sometimes a view
    (transposed, sliced with an offset or a step) of a larger storage."""
    shape = draw(st.lists(st.integers(0, 5), min_size=0, max_size=3))
    dtype = draw(st.sampled_from(SAVED_DTYPES))
    seed = draw(st.integers(0, 2**16))
    base = (torch.randn([*shape, 2], generator=torch.Generator().manual_seed(seed)) * 50).to(dtype)
    view = draw(st.sampled_from(["whole", "first", "step", "t"]))
    if view == "first":
        return base[..., 1]
    if view == "step" and base.ndim:
        return base.reshape(-1)[1::2]
    if view == "t" and base.ndim >= 2:
        return base.transpose(0, -1)
    return base


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.dictionaries(st.text("abc.", min_size=1, max_size=6), tensors(), min_size=1, max_size=5),
    tie=st.booleans(),
)
def test_generated_torch_save_files_read_as_torch_load(items: dict[str, torch.Tensor], tie: bool) -> None:
    import io

    if tie:  # the same tensor under two names
        first = next(iter(items))
        items["tied"] = items[first]
    buf = io.BytesIO()
    torch.save(items, buf)
    want = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    got = zarchive.read(buf.getvalue())
    assert_same(got, want)
    if tie:
        assert got["tied"] is got[first]
    np_got = zarchive.read(buf.getvalue(), tensors="numpy")
    for k, t in want.items():
        if t.dtype not in (torch.bfloat16, torch.uint16):
            assert np.array_equal(np_got[k], t.numpy()), k


@settings(max_examples=30, deadline=None)
@given(items=st.dictionaries(st.text("abcxyz_.", min_size=1, max_size=8), tensors(), min_size=1, max_size=5))
def test_generated_safetensors_files_read_as_safetensors(items: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import load

    assume(all(_st_writes(v.dtype) for v in items.values()))  # (safetensors 0.4 has no uint16, float8)
    data = save({k: v.contiguous() for k, v in items.items()})
    try:
        want = load(data)
    except ValueError:  # safetensors 0.4 with numpy 1.x cannot load an empty tensor itself: no reference
        assume(False)
    got = zarchive.read(data)
    assert sorted(got) == sorted(want)
    for k in want:
        assert_same(got[k], want[k])


def test_remote_files_fetch_only_what_is_read(tmp_path: Path) -> None:
    """A torch.save file at an fsspec URL: recognised, browsed and read one tensor at a time."""
    fsspec = pytest.importorskip("fsspec")
    sd = {f"w{i}": torch.randn(128, 128) for i in range(4)}
    torch.save(sd, tmp_path / "sd.pt")
    mem = fsspec.filesystem("memory")
    mem.pipe_file("/foreign/sd.pt", (tmp_path / "sd.pt").read_bytes())
    try:
        read: list[int] = []
        with zarchive.open("memory://foreign/sd.pt") as arc:
            arc.on_read = lambda member, n: read.append(n)
            assert torch.equal(arc["w2"], sd["w2"]) and read == [128 * 128 * 4]
        assert_same(zarchive.read("memory://foreign/sd.pt"), torch_load(tmp_path / "sd.pt"))
    finally:
        mem.rm("/foreign", recursive=True)


def test_the_read_budget_covers_the_pickle_and_the_values(tmp_path: Path) -> None:
    """One budget per open file (max_read_bytes): what unpickling data.pkl builds is charged when the
    file is opened, what a read allocates is planned against the rest."""
    sd = {f"w{i}": torch.randn(64, 64) for i in range(50)}
    torch.save(sd, tmp_path / "sd.pt")
    with pytest.raises(zarchive.UnsafeArchiveError, match="max_read_bytes"):
        zarchive.open(tmp_path / "sd.pt", max_read_bytes=10_000)  # the pickle alone takes more
    with zarchive.open(tmp_path / "sd.pt", max_read_bytes=400_000) as arc:  # (the pickle: ~155 KB)
        assert torch.equal(arc["w3"], sd["w3"])  # one tensor fits
        with pytest.raises(zarchive.UnsafeArchiveError, match="max_read_bytes"):
            arc.load()  # all 50 (800 KB, read into memory) do not
    assert_same(zarchive.read(tmp_path / "sd.pt", max_read_bytes=10_000_000), torch_load(tmp_path / "sd.pt"))
