"""ConfiguredModel parity with ZANJ: `training_records` saved and read (format 1.3), kept through a
.zanj read and re-save and through `zarchive convert`; `_load_state_dict_wrapper` honoured;
`MyModel.read` on .zanj files; the NotImplementedError of a model without config class."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field

import zarchive
from zarchive.engine.protocol import FORMAT_VERSION
from zarchive.errors import ConfigMismatchError, FormatError
from zarchive.models.configured import NoConfigClassError
from zarchive.torchutil import ConfiguredModel, set_config_class

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")
REPO = Path(__file__).resolve().parents[1]


@serializable_dataclass
class RecCfg(SerializableDataclass):
    d_in: int = serializable_field(default=3)
    d_out: int = serializable_field(default=2)


@set_config_class(RecCfg)
class RecNet(ConfiguredModel[RecCfg]):
    def __init__(self, cfg: RecCfg) -> None:
        super().__init__(cfg)
        self.fc = torch.nn.Linear(cfg.d_in, cfg.d_out)


CALLS: list[dict[str, Any]] = []


@set_config_class(RecCfg)
class HookNet(ConfiguredModel[RecCfg]):
    def __init__(self, cfg: RecCfg) -> None:
        super().__init__(cfg)
        self.fc = torch.nn.Linear(cfg.d_in, cfg.d_out)

    def _load_state_dict_wrapper(self, state_dict: dict[str, torch.Tensor], **kwargs: Any) -> Any:
        CALLS.append(dict(kwargs))
        return self.load_state_dict({k: v * 2 for k, v in state_dict.items()}, **kwargs)


RECORDS = {"loss": [1.0, 0.5, 0.25], "lr": torch.tensor([0.1, 0.01]), "notes": ("warmup", 3)}


def _same_records(a: Any, b: Any) -> None:
    assert a.keys() == b.keys()
    assert a["loss"] == b["loss"] and a["notes"] == b["notes"] and torch.equal(a["lr"], b["lr"])


def test_training_records_round_trip(tmp_path: Path) -> None:
    model = RecNet(RecCfg())
    assert model.training_records is None
    model.training_records = RECORDS
    path = model.save(tmp_path / "m.zarc")
    _same_records(RecNet.read(path).training_records, RECORDS)
    _same_records(zarchive.read(path).training_records, RECORDS)
    with zarchive.open(path) as arc:
        assert arc.manifest["format_version"] == FORMAT_VERSION  # (training records: 1.3 and later)
        assert arc.manifest["root"]["training_records"]["loss"] == [1.0, 0.5, 0.25]
        assert arc.keys() == ["config", "state_dict", "training_records"]
        assert arc["training_records/loss"] == [1.0, 0.5, 0.25]
    as_numpy = zarchive.read(path, tensors="numpy")
    assert as_numpy.training_records["lr"].tolist() == pytest.approx([0.1, 0.01])


def test_no_records_no_key(tmp_path: Path) -> None:
    path = RecNet(RecCfg()).save(tmp_path / "m.zarc")
    with zarchive.open(path) as arc:
        assert "training_records" not in arc.manifest["root"]
    assert zarchive.read(path).training_records is None


def test_records_in_a_nested_model_and_a_checkpoint_dict(tmp_path: Path) -> None:
    model = RecNet(RecCfg())
    model.training_records = {"epochs": 4}
    back = zarchive.read(zarchive.save({"model": model, "step": 4}, tmp_path / "n.zarc"))
    assert back["model"].training_records == {"epochs": 4}


def test_malformed_records_are_format_errors(tmp_path: Path) -> None:
    from rewrite import rewrite

    model = RecNet(RecCfg())
    model.training_records = {"loss": [1.0]}
    path = Path(model.save(tmp_path / "m.zarc", zarchive.ZArchive(compress=False)))

    def edit(manifest: dict[str, Any]) -> None:
        manifest["root"]["training_records"] = {"$type": "tuple"}

    bad = rewrite(path, tmp_path / "bad.zarc", manifest_edit=edit)
    with pytest.raises(FormatError, match="training_records"):
        zarchive.read(bad)


def test_load_state_dict_wrapper_is_honoured(tmp_path: Path) -> None:
    model = HookNet(RecCfg())
    path = model.save(tmp_path / "h.zarc")
    CALLS.clear()
    back = HookNet.read(path)
    assert CALLS == [{}] and torch.equal(back.fc.weight, model.fc.weight * 2)
    CALLS.clear()
    za = zarchive.ZArchive(custom_settings={"_load_state_dict_wrapper": {"strict": False}})
    HookNet.read(path, za)
    assert CALLS == [{"strict": False}]
    with pytest.raises(ConfigMismatchError, match="_load_state_dict_wrapper"):
        zarchive.ZArchive(custom_settings={"_load_state_dict_wrapper": [1]}).read(path)


def test_custom_settings_route_a_plain_model_through_load_state_dict(tmp_path: Path) -> None:
    model = RecNet(RecCfg())
    path = model.save(tmp_path / "p.zarc")
    za = zarchive.ZArchive(custom_settings={"_load_state_dict_wrapper": {"strict": True}})
    back = RecNet.read(path, za)
    assert torch.equal(back.fc.weight, model.fc.weight) and back.fc.weight.device.type == "cpu"
    with pytest.raises(ConfigMismatchError, match="_load_state_dict_wrapper failed"):
        RecNet.read(path, zarchive.ZArchive(custom_settings={"_load_state_dict_wrapper": {"nonsense": 1}}))


def test_no_config_class_is_not_implemented_and_a_type_error() -> None:
    class Undeclared(ConfiguredModel[RecCfg]):
        pass

    for kind in (NotImplementedError, TypeError):
        with pytest.raises(kind):
            Undeclared(RecCfg())
    assert issubclass(NoConfigClassError, NotImplementedError)


# --- .zanj files written by the real zanj ------------------------------------------------------------
def _zanj_net(zanj_torchutil: Any, name: str = "RecNet") -> type:
    @zanj_torchutil.set_config_class(RecCfg)
    class Net(zanj_torchutil.ConfiguredModel):  # the same class as written for ZANJ
        def __init__(self, cfg: RecCfg) -> None:
            super().__init__(cfg)
            self.fc = torch.nn.Linear(cfg.d_in, cfg.d_out)

    Net.__name__ = Net.__qualname__ = name
    return Net


@pytest.fixture
def zanj_model_file(tmp_path: Path) -> tuple[Path, Any]:
    zanj = pytest.importorskip("zanj")
    import zanj.torchutil as zt

    theirs = _zanj_net(zt)(RecCfg())
    theirs.training_records = {"loss": [0.75, 0.5], "best": 1}
    path = Path(zanj.ZANJ().save(theirs, str(tmp_path / "theirs.zanj")))
    return path, theirs


def test_my_model_read_on_a_zanj_file_keeps_records(zanj_model_file: tuple[Path, Any], tmp_path: Path) -> None:
    path, theirs = zanj_model_file
    model = RecNet.read(path)
    assert type(model) is RecNet and torch.equal(model.fc.weight, theirs.fc.weight)
    assert model.training_records == {"loss": [0.75, 0.5], "best": 1}
    again = RecNet.read(model.save(tmp_path / "resaved.zarc"))  # read .zanj, save .zarc: kept
    assert again.training_records == {"loss": [0.75, 0.5], "best": 1}


def test_zanj_hook_is_honoured_for_zanj_files(tmp_path: Path) -> None:
    zanj = pytest.importorskip("zanj")
    import zanj.torchutil as zt

    theirs = _zanj_net(zt, "HookNet")(RecCfg())
    path = zanj.ZANJ().save(theirs, str(tmp_path / "hook.zanj"))
    CALLS.clear()
    back = zarchive.read(path)
    assert type(back) is HookNet and CALLS == [{}]
    assert torch.equal(back.fc.weight, theirs.fc.weight * 2)


def test_convert_keeps_records(zanj_model_file: tuple[Path, Any], tmp_path: Path) -> None:
    """`zarchive convert` in a process that has the model class, and (--plain) in one that has not."""
    path, _ = zanj_model_file
    out, plain = tmp_path / "converted.zarc", tmp_path / "plain.zarc"
    with_class = (
        "import sys, runpy\n"
        "sys.path.insert(0, sys.argv.pop())\n"
        "import test_model_records  # the model classes, so the file's names resolve\n"
        "sys.argv = ['zarchive', 'convert', *sys.argv[1:]]\n"
        "runpy.run_module('zarchive', run_name='__main__')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for command in (
        [sys.executable, "-c", with_class, str(path), str(out), str(REPO / "tests")],
        [sys.executable, "-m", "zarchive", "convert", "--plain", str(path), str(plain)],
    ):
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
    assert RecNet.read(out).training_records == {"loss": [0.75, 0.5], "best": 1}
    assert zarchive.read(plain)["training_records"] == {"loss": [0.75, 0.5], "best": 1}
    from zarchive.formats.convert_in import convert

    report = convert(out, tmp_path / "again.zarc")  # .zarc -> .zarc
    assert report.kind == "zarc->zarc"
    assert RecNet.read(tmp_path / "again.zarc").training_records == {"loss": [0.75, 0.5], "best": 1}


def test_convert_of_a_zanj_named_file_that_zarchive_compat_wrote(tmp_path: Path) -> None:
    """zarchive.compat.zanj.ZANJ writes `.zanj` names holding zarchives: convert reads them as such."""
    from zarchive.compat.zanj import ZANJ
    from zarchive.formats.convert_in import convert

    model = RecNet(RecCfg(d_in=4))
    model.training_records = {"loss": [0.5]}
    path = ZANJ().save(model, tmp_path / "m")  # ZANJ's idiom: the suffix is appended
    assert str(path).endswith(".zanj")
    report = convert(path, tmp_path / "m.zarc")
    assert report.kind == "zarc->zarc" and "zarchive.compat.zanj" in report.notes[-1]
    back = RecNet.read(tmp_path / "m.zarc")
    assert back.training_records == {"loss": [0.5]}
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), model.state_dict().values()))
