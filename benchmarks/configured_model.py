"""The model of the configured-model workload: GPT-2-small-shaped, wrapped in zarchive's ConfiguredModel.

Defined at module level so that a fresh reading process can import it (zarchive resolves only classes
that are already imported). If zarchive.torchutil is not there yet, `make_model` raises and the
workload is reported as n/a with that error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

try:
    from zarchive.torchutil import ConfiguredModel, set_config_class

    IMPORT_ERROR: str | None = None
except Exception as e:  # noqa: BLE001 - any failure means "not available yet"
    ConfiguredModel = None  # type: ignore[assignment,misc]
    IMPORT_ERROR = f"{type(e).__name__}: {e}"


@dataclass
class BenchGPTConfig:
    vocab: int = 50257
    n_ctx: int = 1024
    n_embd: int = 768
    n_layer: int = 12


class _Attn(nn.Module):
    def __init__(self, e: int) -> None:
        super().__init__()
        self.c_attn = nn.Linear(e, 3 * e)
        self.c_proj = nn.Linear(e, e)


class _MLP(nn.Module):
    def __init__(self, e: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(e, 4 * e)
        self.c_proj = nn.Linear(4 * e, e)


class _Block(nn.Module):
    def __init__(self, e: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(e)
        self.attn = _Attn(e)
        self.ln_2 = nn.LayerNorm(e)
        self.mlp = _MLP(e)


def _build_layers(module: nn.Module, cfg: BenchGPTConfig) -> None:
    module.wte = nn.Embedding(cfg.vocab, cfg.n_embd)
    module.wpe = nn.Embedding(cfg.n_ctx, cfg.n_embd)
    module.h = nn.ModuleList(_Block(cfg.n_embd) for _ in range(cfg.n_layer))
    module.ln_f = nn.LayerNorm(cfg.n_embd)


class PlainGPT(nn.Module):
    """The same layers without the wrapper: what a safetensors user rebuilds before load_state_dict."""

    def __init__(self, config: BenchGPTConfig) -> None:
        super().__init__()
        self.config = config
        _build_layers(self, config)


if ConfiguredModel is not None:

    @set_config_class(BenchGPTConfig)
    class BenchGPT(ConfiguredModel[BenchGPTConfig]):  # type: ignore[misc,valid-type]
        def __init__(self, config: BenchGPTConfig) -> None:
            super().__init__(config)
            _build_layers(self, config)

else:
    BenchGPT = None  # type: ignore[assignment,misc]


def to_config(shape: Any) -> BenchGPTConfig:
    return BenchGPTConfig(vocab=shape.vocab, n_ctx=shape.n_ctx, n_embd=shape.n_embd, n_layer=shape.n_layer)


def make_model(shape: Any) -> Any:
    """The configured model (seeded weights); raises RuntimeError when zarchive cannot make one yet."""
    if BenchGPT is None:
        raise RuntimeError(f"zarchive.torchutil.ConfiguredModel is not available ({IMPORT_ERROR})")
    torch.manual_seed(1234)
    return BenchGPT(to_config(shape))


def make_plain(config: BenchGPTConfig) -> PlainGPT:
    return PlainGPT(config)
