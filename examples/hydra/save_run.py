"""Save a tiny model together with its Hydra config, with the ZArchive the config describes.

    python examples/hydra/save_run.py
    python examples/hydra/save_run.py zarchive.compress=9 run_name=exp2 hydra.run.dir=.

The config is saved as a plain dict (interpolations resolved), so reading the archive needs neither
Hydra nor omegaconf; `OmegaConf.create(obj["config"])` makes it a config again.
"""

from __future__ import annotations

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

import zarchive


@hydra.main(config_path=".", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    za: zarchive.ZArchive = instantiate(cfg.zarchive)
    torch.manual_seed(cfg.seed)
    model = torch.nn.Linear(cfg.model.in_features, cfg.model.out_features)
    path = za.save({"config": cfg, "state_dict": model.state_dict()}, cfg.out)
    print(f"wrote {path} with {za!r}")


if __name__ == "__main__":
    main()
