"""`MyModule.load_from_checkpoint(path)` on a zarchive checkpoint: with the ZArchiveCheckpoints mixin it
reads it (and still reads torch.save checkpoints); without it, Lightning's own loader cannot."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")

from zarchive.lightning import ZArchiveCheckpointIO, ZArchiveCheckpoints, is_zarchive


class Plain(pl.LightningModule):
    def __init__(self, width: int = 3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(width, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Mixed(ZArchiveCheckpoints, Plain):
    pass


def _fit(module: pl.LightningModule, tmp_path: Path, plugins: list[object]) -> pl.Trainer:
    data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    trainer = pl.Trainer(
        max_steps=2,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
        plugins=plugins,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=8))
    return trainer


def test_the_mixin_makes_lightnings_own_load_from_checkpoint_read_a_zarchive(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = Mixed(width=4)
    trainer = _fit(module, tmp_path, [ZArchiveCheckpointIO()])
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(path)
    assert is_zarchive(path)

    again = Mixed.load_from_checkpoint(path)
    assert isinstance(again, Mixed) and again.hparams.width == 4
    assert torch.equal(again.layer.weight, module.layer.weight)
    with pytest.raises(RuntimeError):  # without the mixin Lightning reads with torch.load, which cannot
        Plain.load_from_checkpoint(path)

    # a torch.save checkpoint still goes to Lightning's own loader
    trainer_torch = _fit(Mixed(width=4), tmp_path / "t", [])
    plain_path = tmp_path / "plain.ckpt"
    trainer_torch.save_checkpoint(plain_path)
    assert not is_zarchive(plain_path)
    assert Mixed.load_from_checkpoint(plain_path, weights_only=False).hparams.width == 4
