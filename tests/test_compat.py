"""zarchive/_compat: every probe of another package's internals passes on the installed versions, runs
once, fails closed, and with a probe forced off (the documented `disable_for_test` hook) the callers
take their public paths and give the same results."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field
from torch import nn

import zarchive
from zarchive import _compat
from zarchive._compat import cpython as cpython_compat
from zarchive._compat import disable_for_test, get_probe, probe_names
from zarchive._compat import pandas as pandas_compat
from zarchive._compat import torch as torch_compat
from zarchive.container.jsontext import dumps_pretty
from zarchive.errors import SaveError
from zarchive.handlers.meta_build import building_on_meta
from zarchive.handlers.state_assign import assign_state_dict
from zarchive.torchutil import ConfiguredModel, set_config_class

TORCH_PROBES = ("torch.module_dicts", "torch.load_hooks", "torch.device_context")
_LIGHTNING = [ns for ns in ("lightning.pytorch", "pytorch_lightning") if importlib.util.find_spec(ns.split(".")[0])]


def _import_all_compat_modules() -> None:
    importlib.import_module("zarchive._compat.fsspec")
    if _LIGHTNING:
        importlib.import_module("zarchive._compat.lightning")


# --- (a) the probes ---
def test_every_probe_passes_on_the_installed_versions() -> None:
    _import_all_compat_modules()
    names = probe_names()
    assert {
        *TORCH_PROBES,
        "pandas.masked_parts",
        "pandas.string_ndarray",
        "pandas.string_simple_new",
        "fsspec.parent",
    } <= set(names)
    assert "cpython.json_c_encoder" in names
    for name in names:
        if name.startswith("lightning.load_state:") and name.split(":", 1)[1] not in _LIGHTNING:
            continue
        if name.startswith("test."):
            continue
        assert get_probe(name).get() is not None, name


def test_the_compat_package_imports_no_third_party_package() -> None:
    """Checked without zarchive's own __init__ (which imports numpy and more): an empty stand-in
    package holds the real _compat folder."""
    code = (
        "import sys, types\n"
        "pkg = types.ModuleType('zarchive')\n"
        f"pkg.__path__ = [{str(Path(zarchive.__file__).parent)!r}]\n"
        "sys.modules['zarchive'] = pkg\n"
        "import zarchive._compat, zarchive._compat.cpython\n"
        "assert zarchive._compat.cpython.json_c_encoder() is not None\n"
        "print(sorted(m for m in ('torch', 'pandas', 'fsspec', 'lightning', 'pytorch_lightning', 'numpy')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_probe_runs_once_and_an_exception_fails_closed() -> None:
    calls: list[int] = []

    def check() -> str:
        calls.append(1)
        return "found"

    def broken() -> str:
        raise AttributeError("renamed in a new version")

    try:
        ok, bad = _compat.Probe("test.once", check), _compat.Probe("test.broken", broken)
        assert ok.get() == ok.get() == "found" and len(calls) == 1
        assert bad.get() is None
        with disable_for_test("test.once"):
            assert ok.get() is None
            with disable_for_test("test.once"):  # nests
                assert ok.get() is None
            assert ok.get() is None
        assert ok.get() == "found" and len(calls) == 1
        with pytest.raises(ValueError):
            _compat.Probe("test.once", check)
    finally:
        _compat._PROBES.pop("test.once", None)
        _compat._PROBES.pop("test.broken", None)
    with pytest.raises(KeyError, match="no compat probe"), disable_for_test("no.such.probe"):
        pass


# --- (b) torch: the public paths ---
class _Module(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.register_parameter("absent", None)
        self.register_buffer("kept", torch.arange(3.0))
        self.register_buffer("computed", torch.ones(2), persistent=False)
        self.register_buffer("param_as_buffer", nn.Parameter(torch.zeros(1), requires_grad=False))


def test_module_accessors_give_the_same_answers_through_the_public_api() -> None:
    m = _Module()
    fast = (
        {k: v for k, v in torch_compat.own_parameters(m).items() if v is not None},
        dict(torch_compat.own_buffers(m)),
        set(torch_compat.non_persistent_buffer_names(m)),
        set(torch_compat.non_persistent_buffer_names(m.lin)),
    )
    with disable_for_test("torch.module_dicts"):
        assert torch_compat.module_slots() is None
        slow = (
            dict(torch_compat.own_parameters(m)),
            dict(torch_compat.own_buffers(m)),
            set(torch_compat.non_persistent_buffer_names(m)),
            set(torch_compat.non_persistent_buffer_names(m.lin)),
        )
        assert slow == fast and fast[2] == {"computed"} and not fast[3]
        p, b, pb = nn.Parameter(torch.ones(2, 3)), torch.zeros(2), nn.Parameter(torch.ones(1), requires_grad=False)
        torch_compat.set_parameter(m.lin, "weight", p)
        torch_compat.set_buffer(m, "computed", b)
        torch_compat.set_buffer(m, "param_as_buffer", pb)
        assert m.lin.weight is p and m.computed is b and m.param_as_buffer is pb
        assert set(torch_compat.non_persistent_buffer_names(m)) == {"computed"}  # persistence kept
        assert "param_as_buffer" in dict(m.named_buffers()) and "param_as_buffer" not in dict(m.named_parameters())
        with pytest.raises(KeyError):
            torch_compat.set_buffer(m, "not_a_buffer", b)
    with pytest.raises(TypeError):
        torch_compat.set_parameter(m.lin, "weight", torch.ones(2, 3))


@pytest.mark.parametrize("probe", ["torch.module_dicts", "torch.load_hooks"])
def test_fast_state_dict_assignment_declines_when_a_probe_fails(probe: str) -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    with disable_for_test(probe):
        assert not torch_compat.loads_like_base_module(model) or probe == "torch.module_dicts"
        assert not assign_state_dict(model, sd)
        assert all(model.state_dict()[k].data_ptr() != v.data_ptr() for k, v in sd.items())  # untouched
    assert assign_state_dict(model, sd)
    assert all(model.state_dict()[k].data_ptr() == v.data_ptr() for k, v in sd.items())


@serializable_dataclass
class TinyConfig(SerializableDataclass):
    d: int = serializable_field(default=4)
    vocab: int = serializable_field(default=7)


@set_config_class(TinyConfig)
class TiedLM(ConfiguredModel[TinyConfig]):
    """Tied weights and a tied buffer: assigned on the meta-built model, then re-tied."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab, config.d)
        self.proj = nn.Linear(config.d, config.d)
        self.unembed = nn.Linear(config.d, config.vocab, bias=False)
        self.unembed.weight = self.embed.weight
        self.register_buffer("scale", torch.full((config.d,), 0.5))
        self.register_buffer("scale_again", self.scale)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))


@set_config_class(TinyConfig)
class WithUnsaved(ConfiguredModel[TinyConfig]):
    """A non-persistent buffer: built for real, its dtype restored after reading."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.fc = nn.Linear(config.d, config.d)
        self.register_buffer("pos", torch.arange(config.d, dtype=torch.float32), persistent=False)


def _layout(model: nn.Module) -> list[tuple[Any, ...]]:
    first: dict[int, str] = {}
    out = []
    for kind, named in (
        ("p", model.named_parameters(remove_duplicate=False)),
        ("b", model.named_buffers(remove_duplicate=False)),
    ):
        for name, t in named:
            out.append((kind, name, first.setdefault(id(t), name), t.dtype, tuple(t.shape), t.requires_grad))
            out.append(t.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return out


@pytest.mark.parametrize("cls", [TiedLM, WithUnsaved])
def test_reading_a_model_with_every_torch_probe_off_gives_the_same_model(cls: type, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = cls(TinyConfig())
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    if cls is WithUnsaved:
        model = model.to(torch.float64)
    path = model.save(tmp_path / "m.zarc")
    fast = cls.read(path)
    with disable_for_test(*TORCH_PROBES):
        slow = cls.read(path)
        resaved = slow.save(tmp_path / "again.zarc")
    assert _layout(fast) == _layout(slow) == _layout(model)
    if cls is TiedLM:
        assert slow.unembed.weight is slow.embed.weight and slow.scale_again is slow.scale
    with zarchive.open(path) as a, zarchive.open(resaved) as b:
        assert a.manifest["root"].get("unsaved_buffers") == b.manifest["root"].get("unsaved_buffers")


def test_building_on_meta_through_the_two_layer_fallback() -> None:
    def build() -> nn.Module:
        m = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
        m.register_buffer("noise", torch.randn(2, 5))
        return m

    single = building_on_meta()
    assert isinstance(single, torch.overrides.TorchFunctionMode)
    with single:
        a = build()
    with disable_for_test("torch.device_context"):
        assert torch_compat.device_mode_class(lambda f, args, kw: None, None) is None
        fallback = building_on_meta()
        assert not isinstance(fallback, torch.overrides.TorchFunctionMode)
        with fallback:
            b = build()
    assert torch.empty(1).device.type == "cpu"
    for m in (a, b):
        assert all(t.is_meta for t in [*m.parameters(), *m.buffers()])
    assert [(n, t.shape, t.dtype) for n, t in a.state_dict().items()] == [
        (n, t.shape, t.dtype) for n, t in b.state_dict().items()
    ]


# --- (b) pandas ---
def _masked_frame() -> pd.DataFrame:
    ints = pd.arrays.IntegerArray(np.array([5, -1, 7], dtype=np.int32), np.array([False, True, False]))
    floats = pd.arrays.FloatingArray(np.array([1.5, np.nan, 2.0]), np.array([False, False, True]))  # NaN, not NA
    bools = pd.arrays.BooleanArray(np.array([True, True, False]), np.array([True, False, False]))
    text = pd.array(["x", None, "zé"], dtype=pd.StringDtype("python"))
    return pd.DataFrame({"i": ints, "f": floats, "b": bools, "s": text})


@pytest.mark.parametrize("probes", [(), ("pandas.masked_parts",), ("pandas.string_ndarray",)])
def test_pandas_arrays_saved_through_the_public_paths_read_back_the_same(probes: tuple[str, ...], tmp_path) -> None:
    df = _masked_frame()
    with disable_for_test(*probes):
        assert (pandas_compat.masked_parts(df["i"].array) is None) == ("pandas.masked_parts" in probes)
        assert (pandas_compat.string_object_values(df["s"].array) is None) == ("pandas.string_ndarray" in probes)
        path = zarchive.save(df, tmp_path / "df.zarc")
    back = zarchive.read(path)
    pd.testing.assert_frame_equal(back, df)
    assert np.isnan(back["f"].array.to_numpy(dtype="float64", na_value=0.0)[1])  # the present NaN stays NaN
    parts = pandas_compat.masked_parts(back["i"].array)
    assert parts is not None
    # the values under the mask: kept by the fast path, 0 by the public one (pandas shows neither)
    assert parts[0].tolist() == ([5, 0, 7] if "pandas.masked_parts" in probes else [5, -1, 7])


# --- (b) fsspec ---
def test_fsspec_parent_public_path_matches() -> None:
    fsspec = pytest.importorskip("fsspec")
    from zarchive._compat import fsspec as fsspec_compat

    for url in ("memory://a/b/c.zarc", "memory://c.zarc", "memory://a/b/"):
        fs, path = fsspec.core.url_to_fs(url)
        fast = fsspec_compat.parent(fs, path)
        with disable_for_test("fsspec.parent"):
            assert fsspec_compat.parent(fs, path) == fast == fs._parent(path), url
    assert fsspec_compat.public_parent(object(), "bucket/dir/key") == "bucket/dir"
    assert fsspec_compat.public_parent(object(), "key") == ""


def test_saving_to_a_url_whose_folder_is_missing_with_the_probe_off() -> None:
    fsspec = pytest.importorskip("fsspec")
    from fsspec.implementations.memory import MemoryFileSystem

    made: list[str] = []

    class NeedsFolders(MemoryFileSystem):
        """In-memory files that, like a backend with real folders, need the folder to exist."""

        protocol = ("zcompatdirs",)

        @classmethod
        def _strip_protocol(cls, path: str) -> str:  # (the memory backend strips only "memory://")
            return str(super()._strip_protocol(path.removeprefix("zcompatdirs://")))

        def put_file(self, lpath: str, rpath: str, **kwargs: Any) -> None:
            if not self.isdir(self._parent(rpath)):
                raise FileNotFoundError(rpath)
            super().put_file(lpath, rpath, **kwargs)

        def makedirs(self, path: str, exist_ok: bool = False) -> None:
            made.append(path)
            super().makedirs(path, exist_ok=exist_ok)

    fsspec.register_implementation("zcompatdirs", NeedsFolders, clobber=True)
    fs = NeedsFolders()
    try:
        for i, off in enumerate(((), ("fsspec.parent",))):
            with disable_for_test(*off):
                zarchive.save({"a": i}, f"zcompatdirs://zcompat{i}/x/y/a.zarc")
            assert zarchive.read(f"zcompatdirs://zcompat{i}/x/y/a.zarc") == {"a": i}
        assert sorted(set(made)) == ["/zcompat0/x/y", "/zcompat1/x/y"]  # what fs.makedirs was asked for
    finally:
        for i in range(2):
            if fs.exists(f"/zcompat{i}"):
                fs.rm(f"/zcompat{i}", recursive=True)


# --- (b) CPython's json ---
def _json_sample() -> Any:
    return {
        "rows": [[f"layer.{i}.weight", "float32", [768, i], i * 1000, 1e-7 * i] for i in range(120)],
        "nested": {"a": {"b": [list(range(90)), {"c": "x" * 200}], 5: None, 2.5: True}},
        "text": 'é\u2028"\\\n\t',
        "empty": [{}, [], ""],
        "big": 10**40,
    }


def test_json_public_encoder_writes_the_same_bytes_and_errors() -> None:
    assert cpython_compat.json_c_encoder() is not None
    fast = dumps_pretty(_json_sample())
    with disable_for_test("cpython.json_c_encoder"):
        assert cpython_compat.json_c_encoder() is None
        assert dumps_pretty(_json_sample()) == fast
    cycle: list[Any] = []
    cycle.append(cycle)
    for bad in ({"x": float("nan")}, {"x": [object()]}, cycle):
        for off in ((), ("cpython.json_c_encoder",)):
            with disable_for_test(*off), pytest.raises(SaveError):
                dumps_pretty(bad)
    assert dumps_pretty(_json_sample()) == fast  # a failure leaves nothing behind


# --- (b) Lightning ---
@pytest.mark.skipif(not _LIGHTNING, reason="needs Lightning")
@pytest.mark.parametrize("namespace", _LIGHTNING)
def test_lightning_load_through_the_public_path(namespace: str, tmp_path: Path) -> None:
    pl = importlib.import_module(namespace)
    from zarchive.lightning import ZArchiveCheckpointIO, load_from_checkpoint

    class Module(pl.LightningModule):
        def __init__(self, width: int = 3, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = nn.Linear(width, 1)
            self.seen: list[str] = []

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            self.seen.append("on_load_checkpoint")

    class Data(pl.LightningDataModule):
        def __init__(self, batch_size: int = 8) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.state: dict[str, Any] = {}

        def state_dict(self) -> dict[str, Any]:
            return {"cursor": 17}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.state = dict(state_dict)

    model, data = Module(width=5, lr=0.3), Data(batch_size=4)
    checkpoint = {
        "state_dict": model.state_dict(),
        Module.CHECKPOINT_HYPER_PARAMS_KEY: dict(model.hparams),
        Module.CHECKPOINT_HYPER_PARAMS_NAME: "kwargs",
        Data.__qualname__: data.state_dict(),
        "datamodule_hyper_parameters": dict(data.hparams),
    }
    path = tmp_path / "m.ckpt"
    ZArchiveCheckpointIO().save_checkpoint(checkpoint, path)
    probe = f"lightning.load_state:{namespace}"
    results = []
    for off in ((), (probe,)):
        with disable_for_test(*off):
            m = load_from_checkpoint(Module, path, lr=0.01)
            d = load_from_checkpoint(Data, path, batch_size=2)
        results.append((m, d))
    (fm, fd), (sm, sd) = results
    assert dict(fm.hparams) == dict(sm.hparams) == {"width": 5, "lr": 0.01}
    assert fm.seen == sm.seen == ["on_load_checkpoint"]
    assert torch.equal(fm.layer.weight, sm.layer.weight) and torch.equal(sm.layer.weight, model.layer.weight)
    assert dict(fd.hparams) == dict(sd.hparams) == {"batch_size": 2}
    assert fd.state == sd.state == {"cursor": 17}


def test_enum_flags_read_the_same_with_the_enum_probe_off(tmp_path: Path) -> None:
    import enum
    import re

    class Perm(enum.Flag):
        R = 4
        W = 2
        X = 1

    zarchive.register_class(Perm, name="test_compat:Perm")
    try:
        value = {"p": Perm.R | Perm.W, "re": re.IGNORECASE | re.MULTILINE, "one": Perm.X}
        zarchive.save(value, tmp_path / "f.zarc")
        with_probe = zarchive.read(tmp_path / "f.zarc")
        with disable_for_test("enum.value_map"):
            without = zarchive.read(tmp_path / "f.zarc")
        assert with_probe == without == value
    finally:
        zarchive.unregister_class(Perm)
