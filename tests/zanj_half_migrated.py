"""A model module of a project half-way from ZANJ to zarchive: its model still derives from the real
`zanj.torchutil.ConfiguredModel`. Imported by tests/test_zanj_migration.py and by `zarchive convert
--import zanj_half_migrated` in a subprocess."""

from __future__ import annotations

import torch
from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field
from zanj.torchutil import ConfiguredModel, set_config_class


@serializable_dataclass
class HalfConfig(SerializableDataclass):
    n_in: int = serializable_field(default=4)
    n_out: int = serializable_field(default=3)


@set_config_class(HalfConfig)
class HalfModel(ConfiguredModel[HalfConfig]):
    def __init__(self, zanj_model_config: HalfConfig) -> None:
        super().__init__(zanj_model_config)
        cfg = zanj_model_config
        self.fc = torch.nn.Linear(cfg.n_in, cfg.n_out)
