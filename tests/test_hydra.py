"""Hydra/omegaconf: ZArchive from a `_target_` config, configs saved as plain dicts and lists, and the
example script run as a real Hydra app."""

from __future__ import annotations

import dataclasses
import pathlib
import subprocess
import sys

import pytest
import torch

import zarchive

hydra = pytest.importorskip("hydra")
omegaconf = pytest.importorskip("omegaconf")
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "hydra"


@pytest.mark.parametrize(
    ("override", "level"),
    [(None, 3), ("zarchive.compress=false", None), ("zarchive.compress=9", 9), ("zarchive.compress=zstd:-3", -3)],
    ids=["default", "off", "level-9", "string-level"],
)
def test_instantiate_example_config(tmp_path, override, level):
    with initialize_config_dir(config_dir=str(EXAMPLE), version_base=None):
        cfg = compose(config_name="config", overrides=[override] if override else [])
    za = instantiate(cfg.zarchive)
    assert isinstance(za, zarchive.ZArchive)
    assert za.settings.compress_level == level
    assert za.settings.error_mode is zarchive.ErrorMode.WARN and za.progress is None
    assert za.settings.custom_settings == {"run": "demo", "seed": 0}  # a DictConfig, made plain and resolved
    za.save({"x": torch.arange(1000)}, tmp_path / "a.zarc")
    with zarchive.open(tmp_path / "a.zarc") as arc:
        assert arc.meta["settings"]["custom"] == {"run": "demo", "seed": 0}
        assert arc.meta["compression"].get("level") == level


def test_instantiate_rejects_bad_settings():
    cfg = OmegaConf.create({"_target_": "zarchive.ZArchive", "compress": "gzip"})
    with pytest.raises(Exception, match="compress must be"):
        instantiate(cfg)


@dataclasses.dataclass
class _Opt:
    lr: float = 0.1
    betas: tuple = (0.9, 0.99)
    name: str = "adam"


def test_configs_are_saved_as_plain_containers(tmp_path):
    cfg = OmegaConf.create(
        {"lr": 0.5, "sched": {"base": "${lr}", "steps": [1, 2, 3]}, "todo": "???", 3: "int key", "opt": _Opt}
    )
    obj = {"cfg": cfg, "steps": cfg.sched.steps, "structured": OmegaConf.structured(_Opt(lr=0.2))}
    zarchive.save(obj, tmp_path / "c.zarc")
    got = zarchive.read(tmp_path / "c.zarc")
    assert got["cfg"] == {
        "lr": 0.5,
        "sched": {"base": 0.5, "steps": [1, 2, 3]},
        "todo": "???",
        3: "int key",
        "opt": {"lr": 0.1, "betas": [0.9, 0.99], "name": "adam"},
    }
    assert type(got["cfg"]) is dict and type(got["steps"]) is list and got["steps"] == [1, 2, 3]
    assert got["structured"] == {"lr": 0.2, "betas": [0.9, 0.99], "name": "adam"}
    with zarchive.open(tmp_path / "c.zarc") as arc:  # plain JSON in the manifest, no omegaconf node
        assert arc.manifest["root"]["steps"] == [1, 2, 3]
        assert arc.manifest["root"]["structured"]["lr"] == 0.2
    assert OmegaConf.create(got["structured"]).lr == 0.2


def test_unresolvable_config_is_a_save_error(tmp_path):
    cfg = OmegaConf.create({"a": {"b": "${nowhere}"}})
    with pytest.raises(zarchive.SaveError, match="cannot be resolved") as info:
        zarchive.save({"run": {"cfg": cfg}}, tmp_path / "bad.zarc")
    assert info.value.path == "run/cfg"
    assert not (tmp_path / "bad.zarc").exists()


def test_example_script_runs_as_a_hydra_app(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE / "save_run.py"), "zarchive.compress=9", "run_name=exp2", "hydra.run.dir=."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "wrote exp2.zarc" in proc.stdout
    got = zarchive.read(tmp_path / "exp2.zarc")
    assert got["config"]["run_name"] == "exp2" and got["config"]["out"] == "exp2.zarc"
    assert got["config"]["zarchive"]["compress"] == 9
    assert set(got["state_dict"]) == {"weight", "bias"} and got["state_dict"]["weight"].shape == (2, 4)
    with zarchive.open(tmp_path / "exp2.zarc") as arc:
        assert arc.meta["compression"]["level"] == 9
        assert arc.meta["settings"]["custom"] == {"run": "exp2", "seed": 0}
