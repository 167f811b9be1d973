"""Half-migrated ZANJ projects: models still deriving from the real zanj.torchutil.ConfiguredModel save
as the ConfiguredModels they are, read back as their class, and `zarchive convert --import MODULE`
turns a file the real ZANJ wrote into a .zarc. And `zarchive.compat.zanj.consts` stands in for
`zanj.consts`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

zanj = pytest.importorskip("zanj")

from zanj_half_migrated import HalfConfig, HalfModel

import zarchive

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _same_model(a: torch.nn.Module, b: torch.nn.Module) -> None:
    assert type(a) is type(b)
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a_model_deriving_from_zanjs_configured_model_saves_and_reads_back(tmp_path: Path) -> None:
    model = HalfModel(HalfConfig(n_in=5, n_out=2))
    path = tmp_path / "half.zarc"
    zarchive.save({"model": model, "step": 3}, path)
    back = zarchive.read(path)
    _same_model(model, back["model"])
    assert back["model"].zanj_model_config == model.zanj_model_config and back["step"] == 3
    with zarchive.open(path) as arc:
        assert arc.node("model")["$type"] == "torch.ConfiguredModel"
        assert "zanj_half_migrated:HalfModel" in arc.audit()


def test_convert_of_a_real_zanj_file_of_such_a_model(tmp_path: Path) -> None:
    model = HalfModel(HalfConfig())
    old = tmp_path / "old.zanj"
    zanj.ZANJ().save(model, str(old))
    new = tmp_path / "new.zarc"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "zarchive", "convert", "--import", "zanj_half_migrated", str(old), str(new)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    _same_model(model, zarchive.read(new))


def test_compat_consts_stand_in_for_zanjs() -> None:
    import zanj.consts as theirs

    from zarchive.compat.zanj import consts as ours

    for name in ("_FORMAT_KEY", "_REF_KEY", "JSONdict", "JSONitem", "MonoTuple"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.string_as_lines("a\nb\n") == theirs.string_as_lines("a\nb\n") == ["a", "b"]
    assert ours.string_as_lines(None) == [] and ours.safe_getsource(_same_model)[0].startswith("def _same_model")
    assert len(ours.safe_getsource(len)) == 1  # a builtin has no source: said, not raised


def test_the_zanj_probe_passes_and_fails_closed(tmp_path: Path) -> None:
    from zarchive._compat import disable_for_test, get_probe
    from zarchive._compat import zanj as zanj_compat

    assert zanj_compat.config_class(HalfModel) is HalfConfig
    assert get_probe("zanj.config_class").get() is not None
    with disable_for_test("zanj.config_class"), pytest.raises(zarchive.SaveError, match="has no config class"):
        zarchive.save(HalfModel(HalfConfig()), tmp_path / "x.zarc")
