"""Test helper: a config, a record and a model, each named like those in models_b (same names,
different modules), so reading must tell them apart by module."""

from __future__ import annotations

import dataclasses
import itertools

import torch
from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field

from zarchive.torchutil import ConfiguredModel, set_config_class


@serializable_dataclass
class Config(SerializableDataclass):
    d_in: int = serializable_field(default=4)
    d_hidden: int = serializable_field(default=8)
    n_layers: int = serializable_field(default=2)
    act: str = serializable_field(default="relu")
    lr: float = serializable_field(default=1e-3)
    tags: list[str] = serializable_field(default_factory=list)


@dataclasses.dataclass
class Record:
    step: int
    loss: float


@set_config_class(Config)
class Model(ConfiguredModel[Config]):
    def __init__(self, config: Config) -> None:
        super().__init__(config)
        dims = [config.d_in] + [config.d_hidden] * config.n_layers
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in itertools.pairwise(dims))
        self.out = torch.nn.Linear(config.d_hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.out(x)


@set_config_class(Config)
class LM(ConfiguredModel[Config]):
    """Normal-distributed initialisation everywhere (Embedding, nn.init, torch.randn), in-place
    value changes, and no out-of-place arithmetic (see zarchive/handlers/torch_model.py)."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.embed = torch.nn.Embedding(16, config.d_hidden)
        self.proj = torch.nn.Linear(config.d_hidden, config.d_hidden)
        torch.nn.init.trunc_normal_(self.proj.weight, std=0.02)
        torch.nn.init.xavier_normal_(self.proj.weight)
        self.pos = torch.nn.Parameter(torch.randn(4, config.d_hidden))
        self.noise = torch.nn.Parameter(torch.randn_like(self.pos))
        self.norm = torch.nn.LayerNorm(config.d_hidden)
        with torch.no_grad():
            self.noise.mul_(0.1)  # in-place changes of values are fine too
            self.embed.weight[0] = 0.0

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.norm(self.proj(self.embed(idx) + self.pos[: idx.shape[-1]] + self.noise[: idx.shape[-1]]))
