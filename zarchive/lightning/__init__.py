"""PyTorch Lightning checkpoints as zarchives: a CheckpointIO plugin.

    from zarchive.lightning import ZArchiveCheckpointIO
    trainer = Trainer(plugins=[ZArchiveCheckpointIO(compress="zstd")])   # or za=ZArchive(...)
    trainer.fit(model, ckpt_path="last")                                  # resumes from a zarchive

Every checkpoint Lightning writes (ModelCheckpoint, `trainer.save_checkpoint`) becomes a zarchive:
weights, optimizer and scheduler states, loop progress, callback states and hyperparameters, with no
pickle. Paths may be fsspec URLs (`storage_options=` here, or per save from Lightning). A few values
in a Lightning checkpoint are not data and are converted on the way in:

- `hparams_type` / `datamodule_hparams_type` (a class object, e.g. omegaconf's DictConfig) is stored
  as its "module:QualName" string; on loading, DictConfig/ListConfig come back as those classes and
  any other name stays a string (Lightning then uses its AttributeDict).
- Lightning's `AttributeDict` and `argparse.Namespace` become plain dicts.
- omegaconf configs become plain dicts and lists (interpolations resolved; see zarchive.handlers).
- A hyperparameter that zarchive cannot save (`save_hyperparameters()` of a module taking a
  `loss_fn: nn.Module`, a callable, an open file...) is left out of `hyper_parameters` with one warning
  naming it (per the ZArchive's `error_mode`: "except" raises instead, "log" logs, "ignore" says
  nothing), so training never stops for a checkpoint's sake; resuming works (Lightning does not read
  hyperparameters to resume), and `load_from_checkpoint(path, loss_fn=...)` passes the value again.
Anything else that zarchive cannot save raises SaveError naming its place in the checkpoint.

`LightningModule.load_from_checkpoint` reads with torch.load and cannot read a zarchive (it fails
with torch's "PytorchStreamReader failed locating file data.pkl"). Either call
`zarchive.lightning.load_from_checkpoint(MyModule, path)`, or put `ZArchiveCheckpoints` first among
the module's bases; then `MyModule.load_from_checkpoint(path)` reads zarchives (and still reads
torch.save checkpoints as before):

    class MyModule(ZArchiveCheckpoints, L.LightningModule): ...
    model = MyModule.load_from_checkpoint("checkpoints/last.ckpt")

Modules: checkpoint_io (the plugins), checkpoint_data (the conversions above, both ways),
from_checkpoint (load_from_checkpoint, ZArchiveCheckpoints, is_zarchive).
"""

from __future__ import annotations

from .checkpoint_data import from_saved, to_saveable
from .checkpoint_io import AsyncZArchiveCheckpointIO, ZArchiveCheckpointIO  # (an ImportError without Lightning)
from .from_checkpoint import ZArchiveCheckpoints, is_zarchive, load_from_checkpoint

__all__ = [
    "AsyncZArchiveCheckpointIO",
    "ZArchiveCheckpointIO",
    "ZArchiveCheckpoints",
    "from_saved",
    "is_zarchive",
    "load_from_checkpoint",
    "to_saveable",
]
