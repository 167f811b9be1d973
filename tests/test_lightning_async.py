"""Saves in the background from Lightning, two ways: Lightning's AsyncCheckpointIO wrapping
ZArchiveCheckpointIO, and AsyncZArchiveCheckpointIO (ZArchive.save_async). A real tiny CPU run writes
its checkpoints from the background thread, and a second run resumes from them."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.plugins.io import AsyncCheckpointIO

import zarchive
from zarchive.lightning import AsyncZArchiveCheckpointIO, ZArchiveCheckpointIO

PLUGINS = {
    "lightning-async": lambda: AsyncCheckpointIO(ZArchiveCheckpointIO()),
    "zarchive-async": lambda: AsyncZArchiveCheckpointIO(),
}


class Tiny(pl.LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        g = torch.Generator().manual_seed(0)
        ds = torch.utils.data.TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
        return torch.utils.data.DataLoader(ds, batch_size=8)


class WeightsAtStart(pl.Callback):
    def on_train_start(self, trainer, pl_module) -> None:  # type: ignore[no-untyped-def]
        self.step = trainer.global_step
        self.weight = pl_module.layer.weight.detach().clone()


def _trainer(tmp_path: Path, max_steps: int, plugin: str, *callbacks: pl.Callback, top_k: int = -1) -> pl.Trainer:
    ckpt = pl.callbacks.ModelCheckpoint(
        dirpath=tmp_path / "ckpts", save_last=True, every_n_train_steps=2, save_top_k=top_k
    )
    return pl.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        plugins=[PLUGINS[plugin]()],
        callbacks=[ckpt, *callbacks],
    )


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(num_workers|experimental|LeafSpec|is not empty|ended before).*")
        yield


@pytest.mark.parametrize("plugin", list(PLUGINS))
def test_async_checkpoint_io_writes_zarchives_and_resumes(tmp_path: Path, plugin: str) -> None:
    model = Tiny()
    trainer = _trainer(tmp_path, 6, plugin)
    trainer.fit(model)  # teardown waits for the saves in flight
    ckpts = sorted(p.name for p in (tmp_path / "ckpts").iterdir())
    assert "last.ckpt" in ckpts and len(ckpts) >= 4, ckpts  # steps 2, 4, 6 and last
    assert not any(name.endswith("zarc-tmp") for name in ckpts)
    for name in ckpts:
        assert zarchive.verify(tmp_path / "ckpts" / name), name
    last = zarchive.read(tmp_path / "ckpts" / "last.ckpt")
    assert last["global_step"] == 6
    assert torch.equal(last["state_dict"]["layer.weight"], model.layer.weight.detach())

    start = WeightsAtStart()
    resumed = Tiny()
    _trainer(tmp_path / "again", 8, plugin, start).fit(resumed, ckpt_path=tmp_path / "ckpts" / "last.ckpt")
    assert start.step == 6
    assert torch.equal(start.weight, last["state_dict"]["layer.weight"])


@pytest.mark.parametrize("plugin", list(PLUGINS))
def test_a_failed_background_save_is_raised_by_the_trainer(tmp_path: Path, plugin: str) -> None:
    class Unsaveable(Tiny):
        def on_save_checkpoint(self, checkpoint: dict) -> None:  # type: ignore[type-arg]
            checkpoint["bad"] = object()  # nothing can save this

    with pytest.raises(zarchive.SaveError, match="builtins.object") as e:
        _trainer(tmp_path, 2, plugin).fit(Unsaveable())
    assert e.value.path == "bad"


def test_removed_checkpoints_stay_removed(tmp_path: Path) -> None:
    """save_top_k=1: Lightning removes the older checkpoint right after the newer one is submitted;
    the removal waits for a save of that path in flight, so no stale file lands afterwards."""
    _trainer(tmp_path, 8, "zarchive-async", top_k=1).fit(Tiny())
    names = sorted(p.name for p in (tmp_path / "ckpts").iterdir())
    assert names == ["epoch=0-step=8.ckpt", "last.ckpt"], names
    assert zarchive.read(tmp_path / "ckpts" / "epoch=0-step=8.ckpt")["global_step"] == 8
