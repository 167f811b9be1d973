"""Exports inside the archive (format 1.3): ONNX and TorchScript members made at save time, checked
against the model on the example inputs, and usable straight from the zip by onnxruntime and
torch.jit.load. Needs the `deploy` extra (skipped only when onnxruntime is missing)."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

import forkrun
import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.deploy.compare import ATOL, RTOL, compare
from zarchive.errors import ExportWarning
from zarchive.torchutil import ConfiguredModel, set_config_class

ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning")  # torch 2.9+ on TorchScript

ONNX, TS = "exports/model.onnx", "exports/model.torchscript.pt"
ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class CNNConfig:
    channels: int = 4
    n_classes: int = 10


@set_config_class(CNNConfig)
class SmallCNN(ConfiguredModel[CNNConfig]):
    """The seed's small CNN: Conv2d, ReLU, MaxPool, Linear on 1x28x28 images."""

    def __init__(self, config: CNNConfig) -> None:
        super().__init__(config)
        self.conv = torch.nn.Conv2d(1, config.channels, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(config.channels * 14 * 14, config.n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(torch.relu(self.conv(x))).flatten(1))


@dataclasses.dataclass
class MLPConfig:
    d_in: int = 12
    hidden: int = 16
    d_out: int = 3
    dropout: float = 0.5


@set_config_class(MLPConfig)
class MLP(ConfiguredModel[MLPConfig]):
    def __init__(self, config: MLPConfig) -> None:
        super().__init__(config)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(config.d_in, config.hidden),
            torch.nn.GELU(),
            torch.nn.Dropout(config.dropout),  # exports are made in eval mode: no dropout in them
            torch.nn.Linear(config.hidden, config.d_out),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@dataclasses.dataclass
class ScaleConfig:
    scale: float = 2.0


@set_config_class(ScaleConfig)
class UsesConfig(ConfiguredModel[ScaleConfig]):
    """Reads its config in forward: TorchScript cannot compile that, so it is traced."""

    def __init__(self, config: ScaleConfig) -> None:
        super().__init__(config)
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.config.scale


@set_config_class(ScaleConfig)
class OnnxLies(ConfiguredModel[ScaleConfig]):
    """Computes something else while being exported to ONNX: the check at save time must catch it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if torch.onnx.is_in_onnx_export() else x


@set_config_class(ScaleConfig)
class ScriptLies(ConfiguredModel[ScaleConfig]):
    """Computes something else once compiled by TorchScript."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():
            return x + 1
        return x


@set_config_class(ScaleConfig)
class NoOnnxOp(ConfiguredModel[ScaleConfig]):
    """Uses an operator ONNX has no counterpart for: both ONNX exporters fail."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.eigvals(x).abs()


@set_config_class(ScaleConfig)
class Branchy(ConfiguredModel[ScaleConfig]):
    """Branches on a tensor's value: torch.export refuses that, the TorchScript-based ONNX exporter
    traces the branch the example takes, torch.jit.script compiles both."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() > 0):
            return x * 2
        return x - 1


CASES = {
    "cnn": (lambda: SmallCNN(CNNConfig()), lambda n: torch.randn(n, 1, 28, 28)),
    "mlp": (lambda: MLP(MLPConfig()), lambda n: torch.randn(n, 12)),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A model saved once per module with both exports (exporting takes seconds)."""
    torch.manual_seed(0)
    make, inputs = CASES[request.param]
    model = make()
    model.train()  # saved training; exported (and checked) in eval mode, then put back
    path = tmp_path_factory.mktemp(request.param) / "model.zarc"
    model.save(path, export=("onnx", "torchscript"), example_inputs=(inputs(2),))
    return {"name": request.param, "model": model, "path": path, "inputs": inputs}


def _expected(model: torch.nn.Module, x: torch.Tensor) -> np.ndarray:
    model.eval()
    try:
        with torch.no_grad():
            return np.asarray(model(x).numpy())
    finally:
        model.train()


def test_members_run_after_unzip(saved: dict[str, Any], tmp_path: Path) -> None:
    """Extracted with Python's zipfile, each member runs as it is, on another batch size than the example."""
    with zipfile.ZipFile(saved["path"]) as z:
        z.extractall(tmp_path)
        infos = {i.filename: i for i in z.infolist()}
    assert sorted(n for n in infos if n.startswith("exports/")) == [ONNX, TS]
    assert all(i.compress_type == zipfile.ZIP_STORED for i in infos.values())
    assert not (tmp_path / "exports" / "model.onnx.data").exists()  # self-contained: weights inside
    x = saved["inputs"](5)
    want = _expected(saved["model"], x)
    session = ort.InferenceSession(str(tmp_path / ONNX), providers=["CPUExecutionProvider"])
    (got_onnx,) = session.run(None, {"input": x.numpy()})
    np.testing.assert_allclose(got_onnx, want, rtol=1e-4, atol=1e-5)
    scripted = torch.jit.load(str(tmp_path / TS))
    with torch.no_grad():
        np.testing.assert_allclose(scripted(x).numpy(), want, rtol=1e-5, atol=1e-6)


def test_recorded_checks(saved: dict[str, Any]) -> None:
    with zarchive.open(saved["path"]) as arc:
        exports = arc.exports
        members = arc.members
    assert list(exports) == ["onnx", "torchscript"]
    onnx, ts = exports["onnx"], exports["torchscript"]
    assert onnx["member"] == ONNX and ts["member"] == TS
    assert onnx["size"] == members[ONNX]["size"] and ts["size"] == members[TS]["size"]
    assert members[ONNX]["codec"] == members[TS]["codec"] == "none"  # though the save compresses
    assert onnx["exporter"] == "torch.onnx.export(dynamo=True)" and ts["exporter"] == "torch.jit.script"
    assert isinstance(onnx["opset"], int) and onnx["opset"] >= 17 and ts["opset"] is None
    assert onnx["inputs"] == ["input"] and onnx["outputs"] == ["output"]
    assert onnx["dynamic_axes"] == {"input": {"0": "batch"}, "output": {"0": "batch"}}
    assert ts["inputs"] == ["x"] and ts["dynamic_axes"] is None
    for e in (onnx, ts):
        assert 0 <= e["max_abs_diff"] < 1e-4 and 0 <= e["max_rel_diff"] < 1e-2
        assert e["warnings"] == [] and e["torch"] == torch.__version__


def test_opened_from_the_archive(saved: dict[str, Any]) -> None:
    x = saved["inputs"](3)
    want = _expected(saved["model"], x)
    with zarchive.open(saved["path"]) as arc:
        (got,) = arc.onnx_session(providers=["CPUExecutionProvider"]).run(None, {"input": x.numpy()})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        with pytest.raises(zarchive.UnsafeArchiveError, match="trusted=True"):
            arc.load_torchscript()
        module = arc.load_torchscript(trusted=True)
        with torch.no_grad():
            np.testing.assert_allclose(module(x).numpy(), want, rtol=1e-5, atol=1e-6)
        with zipfile.ZipFile(saved["path"]) as z:
            assert arc.export_bytes("onnx") == z.read(ONNX) and arc.export_bytes("torchscript") == z.read(TS)
        with pytest.raises(zarchive.MemberNotFoundError, match="no 'tflite' export"):
            arc.export_bytes("tflite")


def test_read_leaves_the_exports_alone(saved: dict[str, Any]) -> None:
    """zarchive.read rebuilds the model from config and weights; the exports are not part of the
    object tree, so no read plans, reads or loads them."""
    model = zarchive.read(saved["path"])
    assert type(model) is type(saved["model"]) and model.training
    for k, v in saved["model"].state_dict().items():
        assert torch.equal(model.state_dict()[k], v)
    with zarchive.open(saved["path"]) as arc:
        assert not {ONNX, TS} & set(arc.plan("").members)
    model2 = zarchive.read(saved["path"], mmap=False)  # the full read of an unmapped file reads no export
    assert type(model2) is type(saved["model"])


def test_training_flags_come_back(tmp_path: Path) -> None:
    model = MLP(MLPConfig())
    model.net[1].eval()  # mixed flags survive the eval() the exports need
    model.save(tmp_path / "m.zarc", export="torchscript", example_inputs=torch.randn(2, 12))
    assert model.training and not model.net[1].training and model.net[0].training


def _cli(*args: str) -> str:
    run = forkrun.cli(*args, cwd=ROOT, timeout=120)  # a process of its own, forked from a server that imported torch
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_ls_shows_the_exports(saved: dict[str, Any]) -> None:
    out = _cli("ls", "--bytes", str(saved["path"]))
    with zarchive.open(saved["path"]) as arc:
        sizes = {name: e["size"] for name, e in arc.exports.items()}
    onnx_line = next(line for line in out.splitlines() if line.startswith(ONNX))
    ts_line = next(line for line in out.splitlines() if line.startswith(TS))
    assert str(sizes["onnx"]) in onnx_line and "ONNX export" in onnx_line and "own copy of the weights" in onnx_line
    assert str(sizes["torchscript"]) in ts_line and "TorchScript export" in ts_line
    by_member = {r["member"]: r for r in json.loads(_cli("ls", "--json", str(saved["path"])))}
    assert by_member[ONNX]["export"] == "onnx" and by_member[TS]["export"] == "torchscript"
    assert by_member[ONNX]["size"] == sizes["onnx"] and by_member["manifest.json"]["export"] is None


def test_show_lists_the_exports_under_the_tree(saved: dict[str, Any]) -> None:
    """`zarchive show` of the whole archive names each export, its member and size after the tree;
    under an object path it shows that part of the tree only."""
    out = _cli("show", str(saved["path"])).splitlines()
    at = out.index(next(line for line in out if line.startswith("exports (beside the object tree")))
    listed = out[at + 1 :]
    with zarchive.open(saved["path"]) as arc:
        for name, entry in arc.exports.items():
            line = next(line for line in listed if line.strip().startswith(name))
            assert entry["member"] in line and ("ONNX" in line if name == "onnx" else "TorchScript" in line)
    assert len(listed) == 2 and at > 0
    part = _cli("show", str(saved["path"]), "config")
    assert "exports (beside" not in part


# --- fallbacks, failures, warnings ------------------------------------------------------------------------
def test_unscriptable_model_is_traced_with_a_recorded_warning(tmp_path: Path) -> None:
    model = UsesConfig(ScaleConfig(3.0))
    x = torch.randn(2, 4)
    model.save(tmp_path / "m.zarc", export=("torchscript",), example_inputs=(x,))
    with zarchive.open(tmp_path / "m.zarc") as arc:
        entry = arc.exports["torchscript"]
        module = arc.load_torchscript(trusted=True)
    assert entry["exporter"] == "torch.jit.trace"
    assert any("torch.jit.script failed" in w and "traced" in w for w in entry["warnings"])
    with torch.no_grad():
        assert torch.allclose(module(x), model(x))


def test_dynamo_failure_falls_back_with_recorded_warnings(tmp_path: Path) -> None:
    x = torch.ones(2, 4)
    zarchive.save(Branchy(ScaleConfig()), tmp_path / "m.zarc", export=("onnx", "torchscript"), example_inputs=(x,))
    with zarchive.open(tmp_path / "m.zarc") as arc:
        onnx, ts = arc.exports["onnx"], arc.exports["torchscript"]
        (got,) = arc.onnx_session().run(None, {"input": x.numpy()})
    assert onnx["exporter"] == "torch.onnx.export(dynamo=False)" and ts["exporter"] == "torch.jit.script"
    assert onnx["warnings"][0].startswith("the dynamo exporter failed (") and "data-dependent" in onnx["warnings"][0]
    assert any(w.startswith("traced: Converting a tensor to a Python boolean") for w in onnx["warnings"])
    assert np.array_equal(got, (x * 2).numpy()) and onnx["max_abs_diff"] == 0.0


def test_export_that_disagrees_raises_and_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "m.zarc"
    path.write_bytes(b"the previous file")
    with pytest.raises(zarchive.SaveError, match=r"'onnx' export disagrees with the model.*differs .* by up to 1"):
        OnnxLies(ScaleConfig()).save(path, export=("onnx",), example_inputs=(torch.ones(2, 3),))
    assert path.read_bytes() == b"the previous file"
    with pytest.raises(zarchive.SaveError, match=r"'torchscript' export disagrees with the model.*by up to 1"):
        zarchive.save(ScriptLies(ScaleConfig()), path, export="torchscript", example_inputs=(torch.ones(2, 3),))
    assert path.read_bytes() == b"the previous file"


def test_export_that_fails_raises_naming_it(tmp_path: Path) -> None:
    with pytest.raises(zarchive.SaveError, match=r"the 'onnx' export failed: .*eigvals") as info:
        zarchive.save(
            NoOnnxOp(ScaleConfig()), tmp_path / "m.zarc", export=("onnx",), example_inputs=(torch.randn(2, 3, 3),)
        )
    assert "dynamo" in str(info.value)  # both exporters were tried
    assert not (tmp_path / "m.zarc").exists()


def test_warn_keeps_the_other_exports(tmp_path: Path) -> None:
    x = torch.randn(2, 3, 3)
    with pytest.warns(ExportWarning, match="'onnx' export failed.*saved without it"):
        zarchive.save(NoOnnxOp(ScaleConfig()), tmp_path / "a.zarc", export=("onnx", "torchscript"),
                      example_inputs=(x,), export_errors="warn")  # fmt: skip
    with zarchive.open(tmp_path / "a.zarc") as arc:
        assert list(arc.exports) == ["torchscript"]
        assert ONNX not in arc.members
        with pytest.raises(zarchive.MemberNotFoundError, match="has no 'onnx' export .*'torchscript'"):
            arc.onnx_session()
    with pytest.warns(ExportWarning, match="'onnx' export disagrees"):
        zarchive.save(OnnxLies(ScaleConfig()), tmp_path / "b.zarc", export=("onnx",), example_inputs=(x,),
                      export_errors="warn")  # fmt: skip
    with zarchive.open(tmp_path / "b.zarc") as arc:  # no export kept: no exports section at all
        assert arc.exports == {} and "exports" not in arc.manifest
    assert torch.equal(zarchive.read(tmp_path / "b.zarc")(x), x)


def test_arguments_are_checked(tmp_path: Path) -> None:
    model, x = MLP(MLPConfig()), torch.randn(2, 12)
    with pytest.raises(ValueError, match="unknown export 'tflite'"):
        model.save(tmp_path / "m.zarc", export=("tflite",), example_inputs=(x,))
    with pytest.raises(ValueError, match="needs example_inputs"):
        model.save(tmp_path / "m.zarc", export=("onnx",))
    with pytest.raises(ValueError, match="export_errors must be"):
        model.save(tmp_path / "m.zarc", export=("onnx",), example_inputs=(x,), export_errors="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="names an export twice"):
        model.save(tmp_path / "m.zarc", export=("onnx", "onnx"), example_inputs=(x,))
    with pytest.raises(zarchive.SaveError, match="needs a torch.nn.Module"):
        zarchive.save({"model": model}, tmp_path / "m.zarc", export=("onnx",), example_inputs=(x,))
    with pytest.raises(zarchive.SaveError, match="the model fails on example_inputs .*shapes cannot be multiplied"):
        model.save(tmp_path / "m.zarc", export=("onnx",), example_inputs=(torch.randn(2, 5),))
    with pytest.raises(zarchive.SaveError, match="tuple of tensors"):
        model.save(tmp_path / "m.zarc", export=("onnx",), example_inputs=(x.numpy(),))
    assert not (tmp_path / "m.zarc").exists()


def test_no_export_no_section(tmp_path: Path) -> None:
    path = MLP(MLPConfig()).save(tmp_path / "m.zarc")
    with zarchive.open(path) as arc:
        assert arc.exports == {} and "exports" not in arc.manifest
        with pytest.raises(zarchive.MemberNotFoundError, match="has no 'torchscript' export"):
            arc.load_torchscript(trusted=True)


def test_configured_models_script() -> None:
    """The base class stays scriptable: its properties that TorchScript cannot compile are skipped."""
    model = SmallCNN(CNNConfig()).eval()
    scripted = torch.jit.script(model)
    x = torch.randn(2, 1, 28, 28)
    assert torch.equal(scripted(x), model(x))
    assert model.zanj_model_config == CNNConfig() and model.zanj_config_class is CNNConfig  # still there
    buf = io.BytesIO()
    torch.jit.save(scripted, buf)
    assert torch.equal(torch.jit.load(io.BytesIO(buf.getvalue()))(x), model(x))


def test_hostile_valid_exports_file() -> None:
    """The corpus file every export case damages opens and lists its exports."""
    path = ROOT / "tests" / "hostile" / "corpus" / "export_valid.zarc"
    with zarchive.open(path) as arc, warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(arc.exports) == ["onnx", "torchscript"]
        assert len(arc.export_bytes("onnx")) == arc.exports["onnx"]["size"]
    assert zarchive.verify(path)


def test_frozen_example_still_runs() -> None:
    """spec/examples/exports_model.zarc (format 1.3): its exports give the outputs of the model read from it."""
    sys.path.insert(0, str(ROOT / "tests"))
    import golden_models  # noqa: F401 - the example's classes

    path = ROOT / "spec" / "examples" / "exports_model.zarc"
    x = torch.linspace(-2.0, 2.0, 8).reshape(2, 4)  # what the example's exports were checked on
    model = zarchive.read(path).eval()
    with torch.no_grad():
        want = model(x).numpy()
    with zarchive.open(path) as arc:
        assert arc.exports["onnx"]["inputs"] == ["input"]
        assert arc.exports["torchscript"]["exporter"] == "torch.jit.script"
        (got,) = arc.onnx_session(providers=["CPUExecutionProvider"]).run(None, {"input": x.numpy()})
        scripted = arc.load_torchscript(trusted=True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(scripted(x).numpy(), want, rtol=1e-5, atol=1e-6)


# --- the comparison rule (zarchive.deploy.compare), on its own ----------------------------------------------
finite = st.floats(-1e6, 1e6, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(max_dims=3, max_side=5), elements=finite), st.integers(0, 10**6))
def test_compare_accepts_within_and_refuses_beyond_tolerance(want: np.ndarray, pick: int) -> None:
    same = compare([want], [want.copy()])
    assert same.problem is None and same.max_abs_diff == same.max_rel_diff == 0.0
    near = want.astype(np.float64) + ATOL / 2  # within atol everywhere
    assert compare([want], [near]).problem is None
    if want.size:
        off = want.astype(np.float64).copy()
        i = pick % want.size
        step = 2 * (ATOL + RTOL * abs(float(off.flat[i]))) + 1.0
        off.flat[i] += step
        result = compare([want], [off])
        assert result.problem is not None and "output 0 differs" in result.problem
        assert result.max_abs_diff == pytest.approx(step, rel=1e-6)
    assert "returns 2 outputs" in str(compare([want], [want, want]).problem)


def test_compare_nan_and_shapes() -> None:
    w = np.array([np.nan, np.inf, 1.0], dtype=np.float32)
    assert compare([w], [w.copy()]).problem is None  # NaN where the model gives NaN, equal infinities
    assert "NaN or infinity" in str(compare([w], [np.array([np.nan, np.inf, np.nan])]).problem)
    assert "shape [3]" in str(compare([np.zeros((1, 3))], [np.zeros(3)]).problem)


def test_a_missing_deploy_package_says_how_to_install_it_from_a_checkout() -> None:
    from zarchive.deploy.extras import require

    with pytest.raises(ImportError, match=r"pip install '\.\[deploy\]'.*pip install onnx onnxruntime") as info:
        require("zarchive_no_such_package", "testing")
    assert "zarchive-ml[" not in str(info.value)  # not on PyPI yet: never offered as a name to install
