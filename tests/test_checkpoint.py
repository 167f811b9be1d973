"""Training checkpoints: every part of a training state comes back exactly, and a run resumed from a
checkpoint in another process ends bit for bit where the uninterrupted run ends."""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import os
import random
import struct
import subprocess
import sys
import zipfile
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarchive
from zarchive import ConfigMismatchError, FormatError, MemberNotFoundError, VersionError
from zarchive.container.archive_writer import MANIFEST_NAME, MemberPlan, atomic_write, choose_codecs, write_archive
from zarchive.torchutil import ConfiguredModel, set_config_class

HERE = Path(__file__).parent
WORKER = HERE / "checkpoint_resume_worker.py"


# --- exact comparison -------------------------------------------------------------------------------
def _tensor_bits(t: torch.Tensor) -> bytes:
    t = t.detach().cpu().reshape(-1).clone()  # a copy: .numpy() pins a storage's size for good
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def assert_exact(a: Any, b: Any, where: str = "") -> None:
    """`b` is exactly `a`: same classes all the way down (dict classes, int keys, tuples, Parameters),
    same key order, floats and tensors equal bit for bit, state dicts' `_metadata` too."""
    assert type(a) is type(b), f"/{where}: {type(b).__qualname__} instead of {type(a).__qualname__}"
    if isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape, a.device, a.requires_grad) == (b.dtype, b.shape, b.device, b.requires_grad), where
        assert _tensor_bits(a) == _tensor_bits(b), f"/{where}: tensor bits differ"
    elif isinstance(a, np.ndarray):
        assert (a.dtype.str, a.shape) == (b.dtype.str, b.shape), f"/{where}: {b.dtype}{b.shape} != {a.dtype}{a.shape}"
        assert a.tobytes() == b.tobytes(), f"/{where}: array bytes differ"
    elif isinstance(a, np.generic):
        assert a.dtype.str == b.dtype.str and a.tobytes() == b.tobytes(), f"/{where}: {b!r} != {a!r}"
    elif isinstance(a, float):
        assert struct.pack("<d", a) == struct.pack("<d", b), f"/{where}: {b!r} != {a!r}"
    elif isinstance(a, dict):
        assert [(type(k), k) for k in a] == [(type(k), k) for k in b], f"/{where}: keys {list(b)} != {list(a)}"
        assert getattr(a, "default_factory", None) is getattr(b, "default_factory", None), where
        assert_exact(getattr(a, "_metadata", None), getattr(b, "_metadata", None), f"{where}._metadata")
        for k in a:
            assert_exact(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"/{where}: length {len(b)} != {len(a)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_exact(x, y, f"{where}/{i}")
    elif type(a).__module__.startswith("pandas"):
        import pandas as pd

        (pd.testing.assert_frame_equal if isinstance(a, pd.DataFrame) else pd.testing.assert_series_equal)(
            a, b, check_exact=True
        )
    else:
        assert a == b, f"/{where}: {b!r} != {a!r}"


def _nan(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def _meta_dict(version: int) -> OrderedDict[str, Any]:
    d: OrderedDict[str, Any] = OrderedDict(w=1)
    d._metadata = {"": {"version": version}}  # type: ignore[attr-defined]
    return d


_T = torch.tensor([1.0, 2.0])
DIFFERENT = {
    "int_vs_float": (1, 1.0),
    "bool_vs_int": (True, 1),
    "tuple_vs_list": ((0.9, 0.99), [0.9, 0.99]),
    "int_key_vs_str_key": ({0: 1}, {"0": 1}),
    "ordereddict_vs_dict": (OrderedDict(a=1), {"a": 1}),
    "key_order": ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
    "zero_sign": (0.0, -0.0),
    "nan_payload": (_nan(0x7FF8000000000000), _nan(0x7FF8000000000001)),
    "tensor_dtype": (_T, _T.double()),
    "tensor_one_ulp": (_T, torch.tensor([1.0, float(np.nextafter(np.float32(2), np.float32(3)))])),
    "parameter_vs_tensor": (torch.nn.Parameter(_T.clone()), _T.clone().requires_grad_(True)),
    "requires_grad": (_T, _T.clone().requires_grad_(True)),
    "numpy_scalar_type": (np.float32(1), np.float64(1)),
    "numpy_array_dtype": (np.zeros(3, "<u4"), np.zeros(3, "<i4")),
    "state_dict_metadata": (_meta_dict(1), _meta_dict(2)),
    "defaultdict_factory": (defaultdict(list), defaultdict(dict)),
    "nested": ({"s": [(1, {"x": _T})]}, {"s": [(1, {"x": _T + 1})]}),
}


@pytest.mark.parametrize("a, b", DIFFERENT.values(), ids=DIFFERENT.keys())
def test_assert_exact_tells_apart(a: Any, b: Any) -> None:
    with pytest.raises(AssertionError):
        assert_exact(a, b)
    assert_exact(a, copy.deepcopy(a))


# --- training states ---------------------------------------------------------------------------------
def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 2)
    )


def _two_groups(m: torch.nn.Module) -> torch.optim.Optimizer:
    ps = list(m.parameters())
    return torch.optim.Adam([{"params": ps[:2], "lr": 1e-2}, {"params": ps[2:], "betas": (0.5, 0.75)}], lr=1e-3)


OPTIMIZERS: dict[str, Callable[[torch.nn.Module], torch.optim.Optimizer]] = {
    "adam_amsgrad": lambda m: torch.optim.Adam(m.parameters(), lr=1e-3, betas=(0.8, 0.95), amsgrad=True),
    "adam_two_groups": _two_groups,
    "adamw": lambda m: torch.optim.AdamW(m.parameters(), lr=2e-3, weight_decay=0.05),
    "sgd_nesterov": lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True),
    "rmsprop_centered": lambda m: torch.optim.RMSprop(m.parameters(), lr=1e-3, centered=True, momentum=0.5),
    "adagrad": lambda m: torch.optim.Adagrad(m.parameters(), lr=0.05, lr_decay=1e-3),
    "lbfgs": lambda m: torch.optim.LBFGS(m.parameters(), history_size=3, max_iter=3),
}
lr_scheduler = torch.optim.lr_scheduler
SCHEDULERS: dict[str, Callable[[torch.optim.Optimizer], Any]] = {
    "step": lambda o: lr_scheduler.StepLR(o, step_size=2, gamma=0.5),
    "onecycle": lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.01, total_steps=20),
    "plateau": lambda o: lr_scheduler.ReduceLROnPlateau(o, patience=0),
    "cosine_restarts": lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2),
    "sequential": lambda o: lr_scheduler.SequentialLR(
        o, [lr_scheduler.LinearLR(o, 0.1, total_iters=2), lr_scheduler.ExponentialLR(o, 0.9)], milestones=[2]
    ),
    "lambda": lambda o: lr_scheduler.LambdaLR(o, lambda epoch: 0.95**epoch),
}


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int, sched: Any = None, seed: int = 1) -> None:
    """A few steps that depend only on `seed` (dropout draws from a forked, reseeded global generator)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        _steps(model, opt, steps, sched, torch.Generator().manual_seed(seed))


def _steps(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int, sched: Any, g: torch.Generator) -> None:
    for _ in range(steps):
        x, y = torch.randn(8, 6, generator=g), torch.randn(8, 2, generator=g)

        def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        loss = opt.step(closure)
        if sched is not None:
            sched.step(float(loss.detach())) if isinstance(sched, lr_scheduler.ReduceLROnPlateau) else sched.step()


def _rng_states() -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
        "pcg64": np.random.default_rng(7).bit_generator.state,
        "philox": np.random.Generator(np.random.Philox(8)).bit_generator.state,
    }


def _scaler() -> torch.amp.GradScaler:
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=2)
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)
    for _ in range(5):
        opt.zero_grad()
        scaler.scale(w.sum()).backward()
        scaler.step(opt)
        scaler.update()
    return scaler


def _metrics() -> Any:
    rows = [{"step": i, "loss": 1 / (i + 1), "lr": 1e-3 * 0.9**i} for i in range(5)]
    try:
        import pandas as pd

        df = pd.DataFrame(rows)
        if zarchive.ZArchive().registry.for_object(df) is not None:
            return df
    except ImportError:
        pass
    return rows


@pytest.mark.parametrize(
    "opt_name, compress",
    [*((name, True) for name in OPTIMIZERS), ("adam_two_groups", False), ("lbfgs", False)],
    ids=[*(f"{name}-zstd" for name in OPTIMIZERS), "adam_two_groups-mapped", "lbfgs-mapped"],
)
def test_plain_save_and_read_give_the_same_dict(tmp_path: Path, opt_name: str, compress: bool) -> None:
    model = _model()
    opt = OPTIMIZERS[opt_name](model)
    sched = lr_scheduler.StepLR(opt, step_size=2)
    _train(model, opt, 3, sched)
    state = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "scaler": _scaler().state_dict(),
        "rng": _rng_states(),
        "epoch": 3,
        "metrics": _metrics(),
    }
    zarchive.save(state, tmp_path / "c.zarc", compress=compress)
    assert_exact(state, zarchive.read(tmp_path / "c.zarc"))
    assert_exact(state, zarchive.read(tmp_path / "c.zarc", lazy=False))


@pytest.mark.parametrize("name", SCHEDULERS)
def test_scheduler_state_round_trips_and_loads(tmp_path: Path, name: str) -> None:
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = SCHEDULERS[name](opt)
    _train(model, opt, 5, sched)
    zarchive.save_checkpoint(tmp_path / "c.zarc", model, opt, sched)
    assert_exact(sched.state_dict(), zarchive.read(tmp_path / "c.zarc")["scheduler"])

    model2 = _model(seed=3)
    opt2 = torch.optim.Adam(model2.parameters(), lr=0.5)
    sched2 = SCHEDULERS[name](opt2)
    zarchive.load_checkpoint(tmp_path / "c.zarc", model2, opt2, sched2, restore_rng=False)
    assert_exact(sched.state_dict(), sched2.state_dict())
    _train(model, opt, 2, sched, seed=9)
    _train(model2, opt2, 2, sched2, seed=9)
    assert_exact(model.state_dict(), model2.state_dict())


@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_optimizer_state_loads_into_a_fresh_optimizer(tmp_path: Path, opt_name: str) -> None:
    model = _model()
    opt = OPTIMIZERS[opt_name](model)
    _train(model, opt, 4)
    zarchive.save_checkpoint(tmp_path / "c.zarc", model, opt)

    model2 = _model(seed=5)
    opt2 = OPTIMIZERS[opt_name](model2)
    for group in opt2.param_groups:
        group["lr"] = 123.0  # hyperparameters come from the checkpoint
    zarchive.load_checkpoint(tmp_path / "c.zarc", model2, opt2)
    for group in opt2.param_groups:
        for p in group["params"]:
            for key, t in opt2.state.get(p, {}).items():  # .state is a defaultdict
                if isinstance(t, torch.Tensor) and key != "step":
                    assert t.device == p.device and t.dtype == p.dtype, key
                    assert t.untyped_storage().resizable(), f"{key} still borrows the archive's memory"
    assert_exact(opt.state_dict(), opt2.state_dict())
    assert_exact(model.state_dict(), model2.state_dict())
    _train(model, opt, 2, seed=9)
    _train(model2, opt2, 2, seed=9)
    assert_exact(model.state_dict(), model2.state_dict())
    assert_exact(opt.state_dict(), opt2.state_dict())


def test_gradscaler_state_loads(tmp_path: Path) -> None:
    scaler = _scaler()
    assert scaler.state_dict()["_growth_tracker"] != 0 or scaler.get_scale() != 2.0**12
    zarchive.save_checkpoint(tmp_path / "c.zarc", scaler=scaler)
    fresh = torch.amp.GradScaler("cpu")
    zarchive.load_checkpoint(tmp_path / "c.zarc", scaler=fresh)
    assert_exact(scaler.state_dict(), fresh.state_dict())


# --- the convenience API ------------------------------------------------------------------------------
def _draws(gens: dict[str, Any]) -> list[Any]:
    return [
        torch.rand(4), torch.randn(2, dtype=torch.float64), np.random.random(3), np.random.randn(2), random.random(),
        gens["np"].random(3), gens["np_legacy"].random_sample(2),
        torch.rand(3, generator=gens["torch"]), gens["py"].random(), gens["philox"].random_raw(2),
    ]  # fmt: skip


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _gens(seed: int) -> dict[str, Any]:
    return {
        "np": np.random.default_rng(seed),
        "np_legacy": np.random.RandomState(seed),
        "torch": torch.Generator().manual_seed(seed),
        "py": random.Random(seed),
        "philox": np.random.Philox(seed),
    }


def test_rng_states_are_restored(tmp_path: Path) -> None:
    _seed_all(1)
    gens = _gens(2)
    _draws(gens)  # move every generator off its seed state
    np.random.randn(1)  # numpy's cached Gaussian is part of its state
    zarchive.save_checkpoint(tmp_path / "c.zarc", generators=gens)
    expected = _draws(gens)

    _seed_all(99)
    fresh = _gens(99)
    rest = zarchive.load_checkpoint(tmp_path / "c.zarc", generators=fresh)
    assert rest == {}
    assert_exact(expected, _draws(fresh))


def test_result_holds_everything_not_loaded_into_a_live_object(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _train(model, opt, 2)
    metrics = _metrics()
    path = zarchive.save_checkpoint(tmp_path / "c.zarc", model, opt, epoch=3, step=120, metrics=metrics, note=None)
    assert path == str(tmp_path / "c.zarc")

    rest = zarchive.load_checkpoint(path, model=_model(seed=4))
    assert list(rest) == ["optimizer", "epoch", "step", "metrics", "note"]
    assert_exact(opt.state_dict(), rest["optimizer"])
    assert (rest["epoch"], rest["step"], rest["note"]) == (3, 120, None)
    assert_exact(metrics, rest["metrics"])

    rest = zarchive.load_checkpoint(path, restore_rng=False)
    assert list(rest) == ["model", "optimizer", "rng", "epoch", "step", "metrics", "note"]
    assert_exact(model.state_dict(), rest["model"])
    assert set(rest["rng"]) == {"python", "numpy", "torch"} | ({"cuda"} if "cuda" in rest["rng"] else set())
    assert list(zarchive.read(path)) == ["zarchive_checkpoint", "model", "optimizer", "rng", "epoch", "step",
                                          "metrics", "note"]  # fmt: skip


def test_dicts_of_models_and_optimizers(tmp_path: Path) -> None:
    models = {"G": _model(1), "D": _model(2)}
    opts = {k: torch.optim.Adam(m.parameters(), lr=1e-3) for k, m in models.items()}
    for k, m in models.items():
        _train(m, opts[k], 2)
    zarchive.save_checkpoint(tmp_path / "c.zarc", models, opts)
    live = {"G": _model(3), "D": _model(4)}
    live_opts = {k: torch.optim.Adam(m.parameters(), lr=0.5) for k, m in live.items()}
    zarchive.load_checkpoint(tmp_path / "c.zarc", live, live_opts)
    for k, m in models.items():
        assert_exact(m.state_dict(), live[k].state_dict())
        assert_exact(opts[k].state_dict(), live_opts[k].state_dict())
    with pytest.raises(ConfigMismatchError) as e:
        zarchive.load_checkpoint(tmp_path / "c.zarc", {"G": _model(3)})
    assert e.value.path == "model"


def test_a_plainly_saved_dict_loads_as_a_checkpoint(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.Adam(model.parameters())
    _train(model, opt, 2)
    zarchive.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, tmp_path / "p.zarc")
    model2 = _model(seed=8)
    opt2 = torch.optim.Adam(model2.parameters())
    assert zarchive.load_checkpoint(tmp_path / "p.zarc", model2, opt2, restore_rng=False) == {"epoch": 3}
    assert_exact(opt.state_dict(), opt2.state_dict())
    with pytest.raises(MemberNotFoundError, match="no RNG states"):
        zarchive.load_checkpoint(tmp_path / "p.zarc", model2, opt2)


def test_mismatches_name_the_part(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.Adam(model.parameters())
    _train(model, opt, 1)
    path = zarchive.save_checkpoint(tmp_path / "c.zarc", model, opt)
    small = torch.nn.Linear(6, 2)
    with pytest.raises(ConfigMismatchError) as e:
        zarchive.load_checkpoint(path, model=small)
    assert e.value.path == "model" and "weights do not fit" in str(e.value)
    with pytest.raises(ConfigMismatchError) as e:
        zarchive.load_checkpoint(path, optimizer=torch.optim.Adam(small.parameters()))
    assert e.value.path == "optimizer"
    with pytest.raises(MemberNotFoundError) as e:
        zarchive.load_checkpoint(path, scheduler=lr_scheduler.StepLR(opt, 1))
    assert e.value.path == "scheduler"
    with pytest.raises(MemberNotFoundError, match="'extra'"):
        zarchive.load_checkpoint(path, generators={"extra": random.Random()})
    gens = {"g": np.random.default_rng(0)}
    path2 = zarchive.save_checkpoint(tmp_path / "g.zarc", generators=gens)
    with pytest.raises(FormatError) as e:
        zarchive.load_checkpoint(path2, generators={"g": torch.Generator()})
    assert e.value.path == "rng/generators/g"


@pytest.mark.parametrize("kwargs", [{"rng": 1}, {"zarchive_checkpoint": 1}], ids=["rng", "layout"])
def test_reserved_names_are_refused(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="reserved"):
        zarchive.save_checkpoint(tmp_path / "c.zarc", **kwargs)
    assert not (tmp_path / "c.zarc").exists()


def test_objects_without_state_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="state_dict"):
        zarchive.save_checkpoint(tmp_path / "c.zarc", optimizer=object())
    with pytest.raises(TypeError, match="generator"):
        zarchive.save_checkpoint(tmp_path / "c.zarc", generators={"g": 5})


@pytest.mark.parametrize(
    "root, error",
    [({"zarchive_checkpoint": {"layout": 2}}, VersionError), ({"zarchive_checkpoint": {}}, FormatError),
     ([1, 2], FormatError)],
    ids=["newer_layout", "bad_layout", "not_a_dict"],
)  # fmt: skip
def test_layout_is_checked(tmp_path: Path, root: Any, error: type[Exception]) -> None:
    zarchive.save(root, tmp_path / "c.zarc")
    with pytest.raises(error):
        zarchive.load_checkpoint(tmp_path / "c.zarc")


# --- ConfiguredModel --------------------------------------------------------------------------------
@dataclasses.dataclass
class NetConfig:
    d_in: int = 6
    d_hidden: int = 16


@set_config_class(NetConfig)
class Net(ConfiguredModel[NetConfig]):
    def __init__(self, config: NetConfig) -> None:
        super().__init__(config)
        self.body = torch.nn.Sequential(torch.nn.Linear(config.d_in, config.d_hidden), torch.nn.ReLU())
        self.head = torch.nn.Linear(config.d_hidden, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def test_configured_model_checkpoint(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = Net(NetConfig())
    opt = torch.optim.Adam(net.parameters())
    _train(net, opt, 3)
    path = zarchive.save_checkpoint(tmp_path / "c.zarc", net, opt, epoch=1)
    with zarchive.open(path) as arc:
        assert arc.node("model")["$type"] == "torch.ConfiguredModel"

    rebuilt = zarchive.load_checkpoint(path, restore_rng=False)["model"]  # the checkpoint alone rebuilds it
    assert type(rebuilt) is Net and rebuilt.config == NetConfig()
    assert_exact(net.state_dict(), rebuilt.state_dict())

    torch.manual_seed(1)
    live = Net(NetConfig())
    live_opt = torch.optim.Adam(live.parameters())
    assert zarchive.load_checkpoint(path, live, live_opt) == {"epoch": 1}
    assert_exact(net.state_dict(), live.state_dict())
    assert_exact(opt.state_dict(), live_opt.state_dict())

    with pytest.raises(ConfigMismatchError) as e:
        zarchive.load_checkpoint(path, Net(NetConfig(d_hidden=8)))
    assert e.value.path == "model/config"
    plain = torch.nn.Module()
    plain.body, plain.head = copy.deepcopy(net.body), torch.nn.Linear(16, 2)
    zarchive.load_checkpoint(path, plain)  # any module with the same state dict takes the weights
    assert_exact(net.head.state_dict(), plain.head.state_dict())


# --- devices, dtypes, memory -----------------------------------------------------------------------------
def _retag_devices(node: Any, device: str) -> None:
    if isinstance(node, dict):
        if node.get("$type") == "torch.Tensor" or {"$ref", "device", "rows"} <= set(node):  # a node or a tensor table
            node["device"] = device
        for v in node.values():
            _retag_devices(v, device)
    elif isinstance(node, list):
        for v in node:
            _retag_devices(v, device)


def _parts(data: bytes, entries: dict[str, Any]) -> list[tuple[str | None, memoryview]]:
    """The member's bytes cut at its checksummed entries, so the copy records the same entries."""
    out: list[tuple[str | None, memoryview]] = []
    pos = 0
    for label, e in sorted(entries.items(), key=lambda kv: kv[1]["offset"]):
        if e["offset"] > pos:
            out.append((None, memoryview(data)[pos : e["offset"]]))
        out.append((label, memoryview(data)[e["offset"] : e["offset"] + e["size"]]))
        pos = e["offset"] + e["size"]
    return out + ([(None, memoryview(data)[pos:])] if pos < len(data) else [])


def saved_on(src: Path, dst: Path, device: str) -> None:
    """Copy an uncompressed archive, recording every tensor as saved on `device` (what a GPU run writes),
    with the archive writer so every checksum is right."""
    with zarchive.open(src) as arc, zipfile.ZipFile(src) as zf:
        manifest = json.loads(json.dumps(arc.manifest))
        meta = {k: v for k, v in arc.meta.items() if k != "members"}
        plans = []
        for name, entry in arc.members.items():
            if name != MANIFEST_NAME:
                assert entry["codec"] == "none"
                parts = partial(_parts, zf.read(name), arc.entries(name))
                plans.append(MemberPlan(base_name=name, parts=parts, compress="never"))
    _retag_devices(manifest["root"], device)
    choose_codecs(plans, None)
    atomic_write(str(dst), lambda f: write_archive(f, manifest, plans, meta, None))


def test_map_location_moves_a_gpu_checkpoint_to_the_cpu(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.Adam(model.parameters())
    _train(model, opt, 3)
    zarchive.save_checkpoint(
        tmp_path / "cpu.zarc", model, opt, ema=torch.randn(4), za=zarchive.ZArchive(compress=False)
    )
    saved_on(tmp_path / "cpu.zarc", tmp_path / "gpu.zarc", "cuda:1")
    assert zarchive.verify(tmp_path / "gpu.zarc") == []
    with zarchive.open(tmp_path / "gpu.zarc") as arc:
        assert arc.node("optimizer/state/0/exp_avg")["device"] == "cuda:1"
        assert arc.node("model/0.weight")["device"] == "cuda:1"

    on_meta = zarchive.read(tmp_path / "gpu.zarc", map_location={"cuda:1": "meta"})
    assert on_meta["model"]["0.weight"].device.type == "meta"  # the map applies to the recorded device
    assert on_meta["rng"]["torch"].device.type == "meta"

    model2 = _model(seed=6)
    opt2 = torch.optim.Adam(model2.parameters())
    rest = zarchive.load_checkpoint(tmp_path / "gpu.zarc", model2, opt2, map_location={"cuda:1": "cpu"})
    assert rest["ema"].device.type == "cpu"
    assert_exact(zarchive.read(tmp_path / "cpu.zarc")["ema"], rest["ema"])
    assert_exact(opt.state_dict(), opt2.state_dict())
    assert_exact(model.state_dict(), model2.state_dict())
    rest = zarchive.load_checkpoint(tmp_path / "gpu.zarc", model2, opt2, map_location={"cuda": "cpu"})
    assert rest["ema"].device.type == "cpu"


def test_dtype_casts_floating_values_but_not_rng_states(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.Adam(model.parameters())
    _train(model, opt, 2)
    ema = torch.randn(4)
    zarchive.save_checkpoint(tmp_path / "c.zarc", model, opt, ema=ema, counts=torch.arange(3))
    expected = torch.rand(3)
    model2 = _model(seed=2)
    opt2 = torch.optim.Adam(model2.parameters())
    rest = zarchive.load_checkpoint(tmp_path / "c.zarc", model2, opt2, dtype=torch.float64)
    assert_exact(expected, torch.rand(3))  # RNG restored from an uncast state
    assert_exact(ema.double(), rest["ema"])
    assert rest["counts"].dtype == torch.int64
    assert all(t.dtype == torch.float32 for s in opt2.state.values() for k, t in s.items() if k != "step")
    assert_exact(model.state_dict(), model2.state_dict())


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc/self/maps")
def test_loaded_training_state_does_not_keep_the_file_mapped(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.Adam(model.parameters())
    _train(model, opt, 2)
    path = tmp_path / "c.zarc"
    zarchive.save_checkpoint(path, model, opt, big=torch.randn(64, 64), za=zarchive.ZArchive(compress=False))

    def mapped() -> bool:
        gc.collect()
        return str(path) in Path("/proc/self/maps").read_text()

    rest = zarchive.load_checkpoint(path, _model(seed=1), opt, za=zarchive.ZArchive(mmap=True))
    assert mapped()  # the returned tensor views the file (the check can see a mapping)
    del rest
    assert not mapped()  # the optimizer state was copied out of it
    os.remove(path)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_checkpoint(tmp_path: Path) -> None:
    model = _model().cuda()
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 6, device="cuda")
    for _ in range(3):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    zarchive.save_checkpoint(tmp_path / "c.zarc", model, opt)
    expected = torch.rand(5, device="cuda")
    torch.cuda.manual_seed_all(123)
    model2 = _model(seed=3).cuda()
    opt2 = torch.optim.Adam(model2.parameters())
    zarchive.load_checkpoint(tmp_path / "c.zarc", model2, opt2)
    assert_exact(expected, torch.rand(5, device="cuda"))
    assert_exact(opt.state_dict(), opt2.state_dict())
    assert all(s["exp_avg"].is_cuda for s in opt2.state.values())
    with zarchive.open(tmp_path / "c.zarc") as arc:
        assert len(arc.keys("rng/cuda")) == torch.cuda.device_count()
        assert arc.node("optimizer/state/0/exp_avg")["device"] == "cuda:0"
    cpu_model = _model(seed=3)  # and the same checkpoint on the CPU
    cpu_opt = torch.optim.Adam(cpu_model.parameters())
    zarchive.load_checkpoint(tmp_path / "c.zarc", cpu_model, cpu_opt)
    assert all(s["exp_avg"].device.type == "cpu" for s in cpu_opt.state.values())
    assert_exact(model.cpu().state_dict(), cpu_model.state_dict())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only machine's warning")
def test_cuda_rng_states_without_cuda_warn(tmp_path: Path) -> None:
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    zarchive.save({"rng": {**rng, "cuda": [torch.get_rng_state()]}, "epoch": 2}, tmp_path / "c.zarc")
    with pytest.warns(UserWarning, match="CUDA is not available"):
        assert zarchive.load_checkpoint(tmp_path / "c.zarc") == {"epoch": 2}


# --- RNG states of any seed round-trip ---------------------------------------------------------------
BIT_GENERATORS = ["PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**128 - 1), kind=st.sampled_from(BIT_GENERATORS), draws=st.integers(0, 3))
def test_generator_states_round_trip(tmp_path: Path, seed: int, kind: str, draws: int) -> None:
    bitgen = getattr(np.random, kind)(seed)
    gen = np.random.Generator(bitgen)
    gen.random(draws)
    py = random.Random(seed)
    tg = torch.Generator().manual_seed(seed % 2**64)
    torch.rand(draws, generator=tg)
    state = {"numpy": gen.bit_generator.state, "python": py.getstate(), "torch": tg.get_state()}
    path = tmp_path / f"{kind}.zarc"
    zarchive.save(state, path, durable=False)
    back = zarchive.read(path)
    assert_exact(state, back)
    twin = np.random.Generator(getattr(np.random, kind)())
    twin.bit_generator.state = back["numpy"]
    assert_exact(gen.random(4), twin.random(4))


# --- the proof: resume in another process, end bit for bit where the straight run ends ------------------
def _worker(*args: str, cwd: Path) -> None:
    package_root = str(Path(zarchive.__file__).resolve().parent.parent)  # the zarchive under test
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": path}
    cmd = [sys.executable, str(WORKER), *args]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def test_resumed_run_matches_the_uninterrupted_run(tmp_path: Path) -> None:
    n, m = "150", "150"
    _worker("straight", str(tmp_path), n, m, cwd=tmp_path)
    _worker("resume", str(tmp_path), n, m, cwd=tmp_path)
    straight = zarchive.read(tmp_path / "straight.zarc")
    interrupted = zarchive.read(tmp_path / "interrupted.zarc")
    resumed = zarchive.read(tmp_path / "resumed.zarc")
    assert straight["step"] == 300 and len(straight["metrics"]) == 300
    assert_exact(straight, interrupted)  # saving a checkpoint did not disturb the run
    assert_exact(straight, resumed)  # weights, optimizer, scheduler, scaler, metrics, next random draws

    ckpt = zarchive.read(tmp_path / "ckpt.zarc")
    assert ckpt["step"] == 150
    assert ckpt["scaler"]["scale"] != 2.0**10  # the scaler's state moved during the run
    assert not torch.equal(ckpt["model"]["0.weight"], straight["model"]["0.weight"])
    no_rng = zarchive.read(tmp_path / "resumed_no_rng.zarc")  # the control: without RNG states it diverges
    assert not torch.equal(no_rng["model"]["0.weight"], straight["model"]["0.weight"])
