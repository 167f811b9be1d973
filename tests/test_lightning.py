"""ZArchiveCheckpointIO: a real (tiny, CPU) Lightning training run writes zarchives and resumes from them."""

from __future__ import annotations

import argparse
import warnings

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")
omegaconf = pytest.importorskip("omegaconf")

import zarchive
from zarchive.lightning import ZArchiveCheckpointIO, load_from_checkpoint


class TinyModule(pl.LightningModule):
    def __init__(self, lr: float = 0.05, width: int = 3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(width, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)}


class TinyData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 8, extra: object = None) -> None:
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        g = torch.Generator().manual_seed(0)
        ds = torch.utils.data.TensorDataset(torch.randn(64, 3, generator=g), torch.randn(64, 1, generator=g))
        return torch.utils.data.DataLoader(ds, batch_size=self.hparams.batch_size)


class RecordStart(pl.Callback):
    """What the trainer holds when training (re)starts: after a checkpoint is restored."""

    def on_train_start(self, trainer, pl_module) -> None:  # type: ignore[no-untyped-def]
        self.step = trainer.global_step
        self.weight = pl_module.layer.weight.detach().clone()
        self.opt_state = {
            k: {n: v.clone() if torch.is_tensor(v) else v for n, v in s.items()}
            for k, s in trainer.optimizers[0].state_dict()["state"].items()
        }
        self.lr = trainer.optimizers[0].param_groups[0]["lr"]


def _trainer(tmp_path, max_steps: int, io: ZArchiveCheckpointIO, *callbacks: pl.Callback) -> pl.Trainer:
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpts", save_last=True)
    return pl.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        plugins=[io],
        callbacks=[ckpt, *callbacks],
    )


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=".*(num_workers|many workers|LeafSpec|is not empty|ended before the epoch ended).*"
        )
        yield


def test_fit_writes_zarchive_and_resume_restores_everything(tmp_path):
    torch.manual_seed(0)
    io = ZArchiveCheckpointIO(compress=7)
    first = _trainer(tmp_path, 4, io)
    first.fit(TinyModule(), datamodule=TinyData())
    last = tmp_path / "ckpts" / "last.ckpt"
    assert last.read_bytes()[:4] == b"PK\x03\x04"
    assert zarchive.verify(last) == []
    with zarchive.open(last) as arc:
        assert arc.meta["compression"]["level"] == 7
        assert {"state_dict", "optimizer_states", "lr_schedulers", "loops", "callbacks", "hyper_parameters"} <= set(
            arc.keys()
        )
    saved = zarchive.read(last)
    assert saved["global_step"] == 4

    torch.manual_seed(123)  # a differently initialised model: everything must come from the checkpoint
    rec = RecordStart()
    second = _trainer(tmp_path, 6, ZArchiveCheckpointIO(compress=7), rec)
    model = TinyModule()
    assert not torch.equal(model.layer.weight, saved["state_dict"]["layer.weight"])
    second.fit(model, datamodule=TinyData(), ckpt_path="last")  # Lightning finds last.ckpt, we read it
    assert rec.step == 4
    assert torch.equal(rec.weight, saved["state_dict"]["layer.weight"])
    saved_opt = saved["optimizer_states"][0]["state"]
    assert rec.opt_state.keys() == saved_opt.keys()
    for k in saved_opt:
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(rec.opt_state[k][name], saved_opt[k][name]), (k, name)
    assert rec.lr == pytest.approx(saved["optimizer_states"][0]["param_groups"][0]["lr"])
    assert second.global_step == 6
    assert zarchive.read(last)["global_step"] == 6


def test_config_hparams_namespace_and_types_round_trip(tmp_path):
    cfg = omegaconf.OmegaConf.create({"lr": 0.1, "width": 3})
    model = TinyModule(**cfg)
    model.save_hyperparameters(cfg)  # Lightning keeps the DictConfig and records its class
    trainer = _trainer(tmp_path, 1, ZArchiveCheckpointIO())
    trainer.fit(model, datamodule=TinyData(extra=argparse.Namespace(a=1, b="x")))
    path = tmp_path / "manual.ckpt"
    trainer.save_checkpoint(path)

    ckpt = ZArchiveCheckpointIO().load_checkpoint(path)
    assert ckpt["hparams_type"] is omegaconf.DictConfig
    assert ckpt["hyper_parameters"] == {"lr": 0.1, "width": 3}
    assert ckpt["datamodule_hyper_parameters"]["extra"] == {"a": 1, "b": "x"}
    assert any(k.startswith("ModelCheckpoint") for k in ckpt["callbacks"])
    with zarchive.open(path) as arc:
        assert arc["hparams_type"] == "omegaconf.dictconfig:DictConfig"

    restored = load_from_checkpoint(TinyModule, path)
    assert isinstance(restored, TinyModule)
    assert restored.hparams.lr == 0.1
    assert torch.equal(restored.layer.weight, model.layer.weight)


def test_checkpoint_io_unit_behaviour(tmp_path):
    io = ZArchiveCheckpointIO(za=zarchive.ZArchive(compress=False))
    with pytest.raises(TypeError, match="not both"):
        ZArchiveCheckpointIO(za=zarchive.ZArchive(), compress=3)
    with pytest.raises(FileNotFoundError):
        io.load_checkpoint(tmp_path / "missing.ckpt")

    ck = {"state_dict": {"w": torch.ones(2)}, "epoch": 1, "hyper_parameters": {"bad": object(), "lr": 0.1}}
    with pytest.raises(zarchive.SaveError, match="hyper_parameters/bad"):  # error_mode="except": refused
        ZArchiveCheckpointIO(error_mode="except").save_checkpoint(ck, tmp_path / "bad.ckpt")
    assert not (tmp_path / "bad.ckpt").exists()
    with pytest.warns(UserWarning, match="leave out what zarchive cannot save: 'bad'"):  # the default: left out
        io.save_checkpoint(ck, tmp_path / "bad.ckpt")
    assert io.load_checkpoint(tmp_path / "bad.ckpt")["hyper_parameters"] == {"lr": 0.1}
    ck["state_dict"]["bad"] = object()  # anything else that cannot be saved is still refused
    with pytest.raises(zarchive.SaveError, match="state_dict/bad"):
        io.save_checkpoint(ck, tmp_path / "worse.ckpt")
    del ck["state_dict"]["bad"]

    del ck["hyper_parameters"]
    target = tmp_path / "sub" / "ok.ckpt"
    io.save_checkpoint(ck, target)
    assert io.load_checkpoint(target, map_location=lambda storage, loc: storage)["epoch"] == 1
    io.remove_checkpoint(target)
    assert not target.exists()
    io.remove_checkpoint(target)  # removing what is gone is not an error, as in Lightning


def test_remote_checkpoint_path():
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    io = ZArchiveCheckpointIO()
    url = "memory://zarchive-lightning-test/run/last.ckpt"
    try:
        io.save_checkpoint({"state_dict": {"w": torch.arange(4.0)}, "global_step": 3}, url)
        got = io.load_checkpoint(url)
        assert got["global_step"] == 3 and torch.equal(got["state_dict"]["w"], torch.arange(4.0))
        io.remove_checkpoint(url)
        assert not mem.exists("/zarchive-lightning-test/run/last.ckpt")
        with pytest.raises(FileNotFoundError):
            io.load_checkpoint(url)
    finally:
        if mem.exists("/zarchive-lightning-test"):
            mem.rm("/zarchive-lightning-test", recursive=True)


class ModuleWithALossModule(pl.LightningModule):
    """save_hyperparameters() of a module argument: Lightning's own IO pickles it; zarchive cannot."""

    def __init__(self, loss_fn: torch.nn.Module | None = None, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.loss_fn = loss_fn if loss_fn is not None else torch.nn.MSELoss()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return self.loss_fn(self.layer(x), y)

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def test_a_hyperparameter_that_cannot_be_saved_is_left_out_with_a_warning_and_training_goes_on(tmp_path) -> None:
    model = ModuleWithALossModule(loss_fn=torch.nn.SmoothL1Loss())
    with pytest.warns(
        UserWarning, match=r"hyper_parameters leave out .*'loss_fn' \(torch.nn.modules.loss.SmoothL1Loss\)"
    ):
        _trainer(tmp_path, 16, ZArchiveCheckpointIO()).fit(model, TinyData())  # 2 epochs, a checkpoint each
    saved = zarchive.read(tmp_path / "ckpts" / "last.ckpt")
    assert saved["hyper_parameters"] == {"lr": 0.05} and saved["global_step"] == 16
    resumed = ModuleWithALossModule(loss_fn=torch.nn.SmoothL1Loss())
    start = RecordStart()
    _trainer(tmp_path, 24, ZArchiveCheckpointIO(), start).fit(resumed, TinyData(), ckpt_path="last")
    assert start.step == 16 and torch.equal(start.weight, saved["state_dict"]["layer.weight"])
    back = load_from_checkpoint(ModuleWithALossModule, tmp_path / "ckpts" / "last.ckpt", loss_fn=torch.nn.L1Loss())
    assert isinstance(back.loss_fn, torch.nn.L1Loss) and back.hparams.lr == 0.05


def test_error_mode_except_keeps_refusing_such_a_hyperparameter(tmp_path) -> None:
    with pytest.raises(zarchive.SaveError, match="hyperparameter 'loss_fn' cannot be saved") as info:
        _trainer(tmp_path, 8, ZArchiveCheckpointIO(error_mode="except")).fit(
            ModuleWithALossModule(loss_fn=torch.nn.SmoothL1Loss()), TinyData()
        )
    assert info.value.path == "hyper_parameters/loss_fn"
