"""Classes stored in the frozen example archives of spec/examples (by their tags, "golden_models:...").

These classes are part of those archives' contract: the archives read back only while the classes
keep their names, their fields and their layers. Never rename, remove or change them; add new ones
for new examples instead. spec/examples/make_examples.py builds the examples from them, and
tests/test_spec.py imports this module so the tags resolve.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
from typing import NamedTuple

import numpy as np
import torch
from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field

import zarchive
from zarchive.torchutil import ConfiguredModel, set_config_class


class Color(enum.Enum):
    RED = 1
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Perm(enum.Flag):
    R = 4
    W = 2
    X = 1


class Pair(NamedTuple):
    left: int
    right: str = "r"


Span = collections.namedtuple("Span", ["start", "stop"])


@dataclasses.dataclass
class Point:
    x: float
    y: float


@dataclasses.dataclass(frozen=True)
class Record:
    step: int
    loss: float
    where: Point
    tags: tuple[str, ...] = ()
    note: str = dataclasses.field(default="", init=False)


@serializable_dataclass
class TrainConfig(SerializableDataclass):
    """A muutils dataclass with an array, a nested dataclass, an enum kept by name, and a field that
    is not saved."""

    name: str = serializable_field(default="run")
    lr: float = serializable_field(default=1e-3)
    layers: list[int] = serializable_field(default_factory=lambda: [4, 8])
    weights: np.ndarray = serializable_field(default_factory=lambda: np.zeros(3, dtype=np.float32))
    start: Point = serializable_field(default_factory=lambda: Point(0.0, 0.0))
    color: Color = serializable_field(
        default=Color.RED, serialization_fn=lambda c: c.name, deserialize_fn=lambda s: Color[s]
    )
    scratch: int = serializable_field(default=0, init=False, serialize=False)


@serializable_dataclass
class NetConfig(SerializableDataclass):
    d_in: int = serializable_field(default=4)
    d_hidden: int = serializable_field(default=8)
    n_classes: int = serializable_field(default=3)
    dropout: float = serializable_field(default=0.1)


@set_config_class(NetConfig)
class TinyNet(ConfiguredModel[NetConfig]):
    """Linear, LayerNorm and BatchNorm layers: parameters, buffers and per-module versions."""

    def __init__(self, config: NetConfig) -> None:
        super().__init__(config)
        self.fc1 = torch.nn.Linear(config.d_in, config.d_hidden)
        self.norm = torch.nn.LayerNorm(config.d_hidden)
        self.bn = torch.nn.BatchNorm1d(config.d_hidden)
        self.drop = torch.nn.Dropout(config.dropout)
        self.fc2 = torch.nn.Linear(config.d_hidden, config.n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(self.bn(self.norm(torch.relu(self.fc1(x))))))


@set_config_class(NetConfig)
class TiedNet(ConfiguredModel[NetConfig]):
    """What a state dict does not hold: tied weights, a non-persistent buffer, a tensor kept as a plain
    attribute, and a submodule whose train/eval flag differs from the model's."""

    def __init__(self, config: NetConfig) -> None:
        super().__init__(config)
        self.embed = torch.nn.Embedding(config.n_classes, config.d_hidden)
        self.head = torch.nn.Linear(config.d_hidden, config.n_classes, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("positions", torch.arange(config.d_in, dtype=torch.int64), persistent=False)
        self.scale = torch.full((config.d_hidden,), 0.5)
        self.drop = torch.nn.Dropout(config.dropout)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.embed(idx) * self.scale))


@dataclasses.dataclass
class GoldenRenamedPoint:
    """Registered under a name of its own, which the archive records instead of its module path."""

    x: int
    y: int = 0


zarchive.register_class(GoldenRenamedPoint, name="golden.renamed:Point")
