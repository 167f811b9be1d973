"""Model classes that corpus files name (imported by the tests, as a user's training code would be):
their configs in the corpus ask for far more than the archive holds."""

from __future__ import annotations

import dataclasses

import torch

from zarchive.torchutil import ConfiguredModel, set_config_class


@dataclasses.dataclass
class WideConfig:
    width: int = 4


@set_config_class(WideConfig)
class Wide(ConfiguredModel[WideConfig]):
    def __init__(self, config: WideConfig) -> None:
        super().__init__(config)
        self.fc = torch.nn.Linear(config.width, config.width, bias=False)


@set_config_class(WideConfig)
class WideNoMeta(ConfiguredModel[WideConfig]):
    """Cannot be built on the meta device (its __init__ reads a value), so reading builds it for real."""

    def __init__(self, config: WideConfig) -> None:
        super().__init__(config)
        self.fc = torch.nn.Linear(config.width, config.width, bias=False)
        self.checked = bool(self.fc.weight.isfinite().all().item())
