"""Test helper: classes named exactly like those in models_a, with other fields and layers."""

from __future__ import annotations

import dataclasses

import torch
from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field

from zarchive.torchutil import ConfiguredModel, set_config_class


@serializable_dataclass
class Config(SerializableDataclass):
    width: int = serializable_field(default=3)
    depth: int = serializable_field(default=1)


@dataclasses.dataclass
class Record:
    name: str
    values: list[float]


@set_config_class(Config)
class Model(ConfiguredModel[Config]):
    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.blocks = torch.nn.Sequential(*[torch.nn.Linear(config.width, config.width) for _ in range(config.depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)
