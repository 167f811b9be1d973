"""ConfiguredModel: exact weight round-trips (buffers, tied weights, bf16, extra state, training flags),
the meta-device build and its fallback, class and config checks, nesting next to other values, lazy
paths, and clear errors."""

from __future__ import annotations

import dataclasses
import gc
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import models_a
import models_b
import numpy as np
import pandas as pd
import pytest
import torch
from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field

import zarchive
from zarchive.engine.typeref import class_tag
from zarchive.torchutil import ConfiguredModel, set_config_class


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models: thread pools only add contention (seconds on a busy 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- models under test (tiny, module level so they resolve without registration) ---
@serializable_dataclass
class NetConfig(SerializableDataclass):
    d: int = serializable_field(default=4)
    n_layers: int = serializable_field(default=2)
    vocab: int = serializable_field(default=11)
    p_drop: float = serializable_field(default=0.5)


BUILT_ON: list[str] = []  # the device each __init__ ran under ("meta" for the fast path)


def _note_device() -> None:
    BUILT_ON.append(torch.empty(0).device.type)


@set_config_class(NetConfig)
class Net(ConfiguredModel[NetConfig]):
    """Linear layers, BatchNorm (running stats, num_batches_tracked), Dropout, a frozen embedding."""

    def __init__(self, config: NetConfig) -> None:
        super().__init__(config)
        _note_device()
        self.embed = torch.nn.Embedding(config.vocab, config.d)
        self.embed.weight.requires_grad_(False)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(config.d, config.d) for _ in range(config.n_layers))
        self.bn = torch.nn.BatchNorm1d(config.d)
        self.drop = torch.nn.Dropout(config.p_drop)
        self.head = torch.nn.Linear(config.d, 1)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(self.drop(self.bn(x)))


@set_config_class(NetConfig)
class TiedLM(ConfiguredModel[NetConfig]):
    def __init__(self, config: NetConfig) -> None:
        super().__init__(config)
        _note_device()
        self.embed = torch.nn.Embedding(config.vocab, config.d)
        self.proj = torch.nn.Linear(config.d, config.d)
        self.unembed = torch.nn.Linear(config.d, config.vocab, bias=False)
        self.unembed.weight = self.embed.weight  # tied

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.unembed(torch.tanh(self.proj(self.embed(idx))))


@set_config_class(NetConfig)
class WithUnsavedBuffer(ConfiguredModel[NetConfig]):
    """A non-persistent buffer (computed by __init__, not in the state dict): built for real."""

    def __init__(self, config: NetConfig) -> None:
        super().__init__(config)
        _note_device()
        self.fc = torch.nn.Linear(config.d, config.d)
        self.register_buffer("pos", torch.arange(config.d, dtype=torch.float32) / config.d, persistent=False)
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + self.pos


@set_config_class(NetConfig)
class WithTensorAttribute(ConfiguredModel[NetConfig]):
    """A plain tensor attribute (not a buffer): meta would leave it empty, so it is built for real."""

    def __init__(self, config: NetConfig) -> None:
        super().__init__(config)
        _note_device()
        self.fc = torch.nn.Linear(config.d, config.d)
        self.scale = torch.full((config.d,), 3.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale


@set_config_class(NetConfig)
class NeedsValues(ConfiguredModel[NetConfig]):
    """__init__ reads tensor values (impossible on meta)."""

    def __init__(self, config: NetConfig) -> None:
        super().__init__(config)
        _note_device()
        self.width = int(torch.ones(config.d).sum().item())
        self.fc = torch.nn.Linear(self.width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def get_extra_state(self) -> Any:
        return {"calls": self.calls}

    def set_extra_state(self, state: Any) -> None:
        self.calls = state["calls"]


@set_config_class(NetConfig)
class WithExtraState(ConfiguredModel[NetConfig]):
    def __init__(self, config: NetConfig) -> None:
        super().__init__(config)
        self.fc = torch.nn.Linear(config.d, config.d)
        self.counter = Counter()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


@set_config_class(NetConfig)
class NetSub(Net):
    pass


def trained(model: torch.nn.Module, steps: int = 3) -> torch.nn.Module:
    """A few gradient steps, so weights, running stats and counters are not their initial values.
    (Plain updates: torch.optim's first use costs seconds of imports.)"""
    model.train()
    for _ in range(steps):
        model.zero_grad()
        model(_inputs(model)).float().pow(2).mean().backward()
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p -= 0.1 * p.grad
    return model


def _inputs(model: torch.nn.Module) -> torch.Tensor:
    cfg = model.config
    if isinstance(model, (Net, TiedLM)):
        return torch.randint(0, cfg.vocab, (6,))
    if isinstance(model, NeedsValues):
        return torch.randn(6, model.width)
    dtype = next(model.parameters()).dtype
    return torch.randn(6, cfg.d, dtype=dtype)


def _bytes(t: torch.Tensor) -> bytes:
    return t.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()


def assert_same_model(a: torch.nn.Module, b: torch.nn.Module) -> None:
    assert type(a) is type(b)
    assert a.config == b.config and type(a.config) is type(b.config)
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        if isinstance(sa[k], torch.Tensor):
            assert sa[k].dtype == sb[k].dtype and sa[k].shape == sb[k].shape, k
            assert _bytes(sa[k]) == _bytes(sb[k]), k
        else:
            assert sa[k] == sb[k], k
    assert [(n, p.requires_grad) for n, p in a.named_parameters()] == [
        (n, p.requires_grad) for n, p in b.named_parameters()
    ]
    assert [(n, m.training) for n, m in a.named_modules()] == [(n, m.training) for n, m in b.named_modules()]
    assert all(t.device.type == "cpu" for t in [*b.parameters(), *b.buffers()])


def _outputs_equal(a: torch.nn.Module, b: torch.nn.Module) -> None:
    a.eval()
    b.eval()
    x = _inputs(a)
    with torch.no_grad():
        assert torch.equal(a(x), b(x))


MODEL_CASES = {
    "net": (Net, "meta"),
    "tied": (TiedLM, "meta"),
    "unsaved_buffer": (WithUnsavedBuffer, "cpu"),
    "tensor_attribute": (WithTensorAttribute, "cpu"),
    "init_reads_values": (NeedsValues, "cpu"),
}


@pytest.mark.parametrize("cls,final_device", list(MODEL_CASES.values()), ids=list(MODEL_CASES))
@pytest.mark.parametrize("route", ["Cls.read", "zarchive.read", "eager", "uncompressed"])
def test_roundtrip_is_exact(cls: type, final_device: str, route: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = trained(cls(NetConfig(d=4)))
    path = tmp_path / "m.zarc"
    model.save(path, za=zarchive.ZArchive(compress=False) if route == "uncompressed" else None)
    BUILT_ON.clear()
    rng = torch.get_rng_state()
    if route == "zarchive.read":
        back = zarchive.read(path)
    elif route == "eager":
        back = zarchive.read(path, lazy=False)
    else:
        back = cls.read(path)
    assert torch.equal(torch.get_rng_state(), rng), "reading a model changed the global RNG"
    assert BUILT_ON[-1] == final_device, BUILT_ON  # meta build where it is safe, a real one otherwise
    if cls in (WithUnsavedBuffer, WithTensorAttribute):
        assert BUILT_ON == ["cpu"]  # the archive says so: no meta attempt
    assert len(BUILT_ON) <= 2
    assert_same_model(model, back)
    _outputs_equal(model, back)


def test_unsaved_buffer_keeps_its_dtype(tmp_path: Path) -> None:
    model = WithUnsavedBuffer(NetConfig()).to(torch.float64)
    back = WithUnsavedBuffer.read(model.save(tmp_path / "m.zarc"))
    assert back.pos.dtype == torch.float64 and back.fc.weight.dtype == torch.float64
    assert torch.equal(back.pos, model.pos)
    with zarchive.open(tmp_path / "m.zarc") as arc:
        assert arc.manifest["root"]["unsaved_buffers"] == {"pos": {"dtype": "float64", "device": "cpu"}}


def test_tied_weights_stay_tied_and_are_stored_once(tmp_path: Path) -> None:
    model = trained(TiedLM(NetConfig()))
    back = TiedLM.read(model.save(tmp_path / "m.zarc", za=zarchive.ZArchive(compress=False)))
    assert back.unembed.weight is back.embed.weight
    assert back.num_params() == model.num_params() == 11 * 4 + 4 * 4 + 4
    with zarchive.open(tmp_path / "m.zarc") as arc:
        sd = arc.manifest["root"]["state_dict"]["data"]
        assert sd["embed.weight"]["key"] == sd["unembed.weight"]["key"]
        assert len({node["key"] for node in sd.values()}) == len(sd) - 1  # one copy of the table
    trained(back, 1)  # a step moves both names together
    assert back.unembed.weight is back.embed.weight


def test_bf16_model_stays_bf16(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = Net(NetConfig()).to(torch.bfloat16)
    model.bn.float()  # mixed dtypes: each tensor keeps its own
    back = Net.read(model.save(tmp_path / "m.zarc"))
    assert back.layers[0].weight.dtype == torch.bfloat16 and back.bn.weight.dtype == torch.float32
    assert back.bn.num_batches_tracked.dtype == torch.int64
    assert_same_model(model, back)


def test_read_dtype_and_meta(tmp_path: Path) -> None:
    path = Net(NetConfig()).save(tmp_path / "m.zarc")
    half = Net.read(path, dtype=torch.float16)
    assert half.layers[0].weight.dtype == torch.float16 and half.bn.num_batches_tracked.dtype == torch.int64
    meta = zarchive.read(path, map_location="meta")
    assert type(meta) is Net and all(p.is_meta for p in meta.parameters())
    assert meta.layers[1].weight.shape == (4, 4)


@pytest.mark.parametrize("mode", ["train", "eval", "mixed"])
def test_training_flags_restored(mode: str, tmp_path: Path) -> None:
    model = Net(NetConfig())
    model.train(mode != "eval")
    if mode == "mixed":
        model.bn.eval()  # a frozen BatchNorm inside a model in training
    back = Net.read(model.save(tmp_path / "m.zarc"))
    assert back.training == (mode != "eval")
    assert back.bn.training == (mode == "train") and back.drop.training == (mode != "eval")
    with zarchive.open(tmp_path / "m.zarc") as arc:
        assert ("training_modules" in arc.manifest["root"]) == (mode == "mixed")


def test_extra_state_roundtrips(tmp_path: Path) -> None:
    model = WithExtraState(NetConfig())
    model.counter.calls = 7
    back = WithExtraState.read(model.save(tmp_path / "m.zarc"))
    assert back.counter.calls == 7


def test_same_names_in_two_modules(tmp_path: Path) -> None:
    a = models_a.Model(models_a.Config(n_layers=3))
    b = models_b.Model(models_b.Config(depth=2))
    pa, pb = a.save(tmp_path / "a.zarc"), b.save(tmp_path / "b.zarc")
    assert type(zarchive.read(pa)) is models_a.Model and type(zarchive.read(pb)) is models_b.Model
    assert_same_model(a, models_a.Model.read(pa))
    with pytest.raises(zarchive.ConfigMismatchError, match="models_a:Model model, not a models_b:Model"):
        models_b.Model.read(pa)
    with pytest.raises(zarchive.ZArchiveError):
        models_a.Model.read(pb)
    assert type(ConfiguredModel.read(pb)) is models_b.Model


def test_subclass_archive_reads_through_base(tmp_path: Path) -> None:
    path = NetSub(NetConfig()).save(tmp_path / "m.zarc")
    assert type(Net.read(path)) is NetSub
    with pytest.raises(zarchive.ConfigMismatchError):
        NetSub.read(Net(NetConfig()).save(tmp_path / "base.zarc"))


def _local_model_class() -> type:
    @set_config_class(NetConfig)
    class Local(ConfiguredModel[NetConfig]):
        def __init__(self, config: NetConfig) -> None:
            super().__init__(config)
            self.fc = torch.nn.Linear(config.d, 2)

    return Local


def test_local_model_class(tmp_path: Path) -> None:
    Local = _local_model_class()
    model = Local(NetConfig())
    path = model.save(tmp_path / "m.zarc")
    assert_same_model(model, Local.read(path))  # the class is named: no registration needed
    assert_same_model(model, zarchive.read(path))  # the process that saved the class finds it again
    del Local, model
    gc.collect()
    with pytest.raises(zarchive.UnknownTypeError, match="register_class"):
        zarchive.read(path)  # any other reader must register it
    again = _local_model_class()
    zarchive.register_class(again)
    try:
        assert type(zarchive.read(path)) is again
    finally:
        zarchive.unregister_class(again)


@dataclasses.dataclass
class Run:
    model: Net
    records: list[dict[str, Any]]
    metrics: pd.DataFrame
    notes: np.ndarray


def test_model_nested_next_to_records_and_metrics(tmp_path: Path) -> None:
    model = trained(Net(NetConfig()))
    records = [{"step": i, "loss": 1.0 / (i + 1), "lr": 0.1} for i in range(300)]
    metrics = pd.DataFrame({"step": np.arange(5), "acc": np.linspace(0.1, 0.9, 5)})
    obj = {"run": Run(model, records, metrics, np.arange(3)), "model": model}
    path = zarchive.save(obj, tmp_path / "run.zarc")
    back = zarchive.read(path)
    assert_same_model(model, back["model"])
    assert_same_model(model, back["run"].model)
    assert back["run"].records == records
    pd.testing.assert_frame_equal(back["run"].metrics, metrics, check_exact=True)
    with zarchive.open(path) as arc:
        assert arc["run/model/config/n_layers"] == 2
        assert torch.equal(arc["model/state_dict/layers.0.weight"], model.layers[0].weight)
        assert arc.keys("model") == ["config", "state_dict"]


def test_lazy_paths_into_a_model(tmp_path: Path) -> None:
    model = Net(NetConfig(n_layers=3))
    path = model.save(tmp_path / "m.zarc", za=zarchive.ZArchive(compress=False))
    with zarchive.open(path) as arc:
        assert "state_dict.safetensors" in arc.members
        assert arc["config/n_layers"] == 3
        assert torch.equal(arc["state_dict/layers.2.weight"], model.layers[2].weight)
        assert arc["state_dict/bn.num_batches_tracked"].dtype == torch.int64
        assert type(arc["config"]) is NetConfig
        assert arc.summary() == f"ConfiguredModel {class_tag(Net)}"


# --- errors ---
@serializable_dataclass
class OtherConfig(SerializableDataclass):
    d: int = serializable_field(default=4)


@set_config_class(OtherConfig)
class ConfiguredByOther(ConfiguredModel[OtherConfig]):
    def __init__(self, config: OtherConfig) -> None:
        super().__init__(config)
        self.fc = torch.nn.Linear(config.d, 1)


@set_config_class(NetConfig)
class OtherShape(ConfiguredModel[NetConfig]):
    def __init__(self, config: NetConfig) -> None:
        super().__init__(config)
        self.fc = torch.nn.Linear(config.d, 3)


@set_config_class(NetConfig)
class OneOut(ConfiguredModel[NetConfig]):
    def __init__(self, config: NetConfig) -> None:
        super().__init__(config)
        self.fc = torch.nn.Linear(config.d, 1)


@set_config_class(NetConfig)
class OtherLayers(OneOut):
    def __init__(self, config: NetConfig) -> None:
        super().__init__(config)
        self.extra = torch.nn.Linear(1, 1)


def _read_as(cls: type, saved: torch.nn.Module, tmp_path: Path) -> Any:
    """Read `saved`'s archive while `cls` is registered under its tag (the class changed)."""
    path = saved.save(tmp_path / "m.zarc")
    zarchive.register_class(cls, name=class_tag(type(saved)), overwrite=True)
    try:
        return zarchive.read(path)
    finally:
        zarchive.unregister_class(class_tag(type(saved)))


def test_config_class_changed(tmp_path: Path) -> None:
    with pytest.raises(zarchive.ConfigMismatchError, match="OtherConfig.*NetConfig") as info:
        _read_as(ConfiguredByOther, Net(NetConfig()), tmp_path)
    assert info.value.path == "config"


def test_weights_do_not_fit(tmp_path: Path) -> None:
    with pytest.raises(zarchive.ConfigMismatchError, match="missing from the archive: 'extra.weight'") as info:
        _read_as(OtherLayers, OneOut(NetConfig()), tmp_path)
    assert info.value.path == "state_dict"
    with pytest.raises(zarchive.ConfigMismatchError, match="not in the model: 'extra.weight', 'extra.bias'"):
        _read_as(OneOut, OtherLayers(NetConfig()), tmp_path)
    with pytest.raises(zarchive.ConfigMismatchError, match="size mismatch for fc.weight"):
        _read_as(OneOut, OtherShape(NetConfig()), tmp_path)


def test_root_is_not_a_model(tmp_path: Path) -> None:
    path = zarchive.save({"model": Net(NetConfig())}, tmp_path / "d.zarc")
    with pytest.raises(zarchive.ConfigMismatchError, match="not a ConfiguredModel"):
        Net.read(path)


def test_config_evolution_through_the_model(tmp_path: Path) -> None:
    @serializable_dataclass
    class NetConfigV2(SerializableDataclass):  # lost p_drop and vocab, gained `note`
        d: int = serializable_field(default=4)
        n_layers: int = serializable_field(default=2)
        note: str = serializable_field(default="new")

    @set_config_class(NetConfigV2)
    class NetV2(ConfiguredModel[NetConfigV2]):
        def __init__(self, config: NetConfigV2) -> None:
            super().__init__(config)
            self.fc = torch.nn.Linear(config.d, 1)

    saved = OneOut(NetConfig())  # written by the old classes
    path = saved.save(tmp_path / "m.zarc")
    zarchive.register_class(NetV2, name=class_tag(OneOut), overwrite=True)
    zarchive.register_class(NetConfigV2, name=class_tag(NetConfig), overwrite=True)
    try:
        with pytest.warns(UserWarning) as caught:
            back = zarchive.read(path)
        dropped = sorted(f for f in ("p_drop", "vocab") if any(f"'{f}'" in str(w.message) for w in caught))
        assert dropped == ["p_drop", "vocab"]
        assert type(back) is NetV2 and back.config == NetConfigV2(d=4, n_layers=2, note="new")
        assert torch.equal(back.fc.weight, saved.fc.weight)
    finally:
        zarchive.unregister_class(class_tag(OneOut))
        zarchive.unregister_class(class_tag(NetConfig))


def test_declaring_and_constructing_errors() -> None:
    with pytest.raises(TypeError, match="dataclass"):
        set_config_class(dict)
    with pytest.raises(TypeError, match="ConfiguredModel subclasses"):
        set_config_class(NetConfig)(torch.nn.Linear)

    class Undeclared(ConfiguredModel[NetConfig]):
        pass

    with pytest.raises(TypeError, match="set_config_class"):
        Undeclared(NetConfig())
    with pytest.raises(TypeError, match="takes a NetConfig config, not a OtherConfig"):
        Net(OtherConfig())


def test_saving_a_model_whose_config_was_replaced(tmp_path: Path) -> None:
    model = Net(NetConfig())
    model.config = {"d": 4}  # type: ignore[assignment]
    with pytest.raises(zarchive.SaveError, match="not its declared NetConfig"):
        model.save(tmp_path / "m.zarc")


def test_num_params_and_zanj_names() -> None:
    model = Net(NetConfig(d=4, n_layers=1, vocab=11))
    trainable = 4 * 4 + 4 + 2 * 4 + 4 + 1
    assert model.num_params() == trainable
    assert model.num_params(only_trainable=False) == trainable + 11 * 4
    assert model.zanj_model_config is model.config and model.zanj_config_class is NetConfig


def test_no_warnings_on_a_clean_roundtrip(tmp_path: Path) -> None:
    path = Net(NetConfig()).save(tmp_path / "m.zarc")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Net.read(path)


def test_fresh_process_reads_fast_path(tmp_path: Path) -> None:
    """In a fresh process, reading a model with normal-distributed initialisation builds it on the
    meta device without running the initialisers (which would import torch._dynamo, seconds)."""
    torch.manual_seed(3)
    model = models_a.LM(models_a.Config())
    path = model.save(tmp_path / "lm.zarc")
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import torch, zarchive, models_a
        t = time.perf_counter()
        m = models_a.LM.read({path!r})
        print("seconds", time.perf_counter() - t)
        print("dynamo", "torch._dynamo" in sys.modules)
        print("sum", float(sum(p.double().sum() for p in m.parameters())))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "dynamo False" in out.stdout, out.stdout
    assert f"sum {float(sum(p.detach().double().sum() for p in model.parameters()))}" in out.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_map_location_moves_every_tensor(tmp_path: Path) -> None:
    model = WithUnsavedBuffer(NetConfig()).cuda()
    path = model.save(tmp_path / "m.zarc")
    on_cpu = WithUnsavedBuffer.read(path)
    assert all(t.device.type == "cpu" for t in [*on_cpu.parameters(), *on_cpu.buffers()])
    back = WithUnsavedBuffer.read(path, map_location="saved")
    assert all(t.device.type == "cuda" for t in [*back.parameters(), *back.buffers()])
    assert torch.equal(back.pos, model.pos) and torch.equal(back.fc.weight, model.fc.weight)
    net = Net.read(Net(NetConfig()).save(tmp_path / "n.zarc"), map_location="cuda")
    assert all(t.device.type == "cuda" for t in [*net.parameters(), *net.buffers()])
