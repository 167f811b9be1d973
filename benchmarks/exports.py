"""Saving a model with its exports, against the hand-written glue it replaces.

    .venv/bin/python benchmarks/exports.py [--reps 5]

For a small CNN (Conv2d, ReLU, MaxPool, Linear on 1x28x28) and an MLP (784-512-512-10), the median
wall time of:
- `zarchive` plain: `zarchive.save(model, p)` (config and weights, no exports);
- `zarchive` exports: `zarchive.save(model, p, export=("onnx", "torchscript"), example_inputs=(x,))`
  (both exports made, run on `x` and compared with the model);
- glue: `torch.save(state_dict)` + `torch.onnx.export(dynamo=True, external_data=False)` +
  `torch.jit.script` + `torch.jit.save`, three files, nothing checked;
and the bytes each writes. Durable saves off on both sides (no fsync): the time is the exporters'.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import zarchive
from zarchive.torchutil import ConfiguredModel, set_config_class


@dataclass
class CNNConfig:
    channels: int = 8


@set_config_class(CNNConfig)
class BenchCNN(ConfiguredModel[CNNConfig]):
    def __init__(self, config: CNNConfig) -> None:
        super().__init__(config)
        self.conv = torch.nn.Conv2d(1, config.channels, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(config.channels * 14 * 14, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(torch.relu(self.conv(x))).flatten(1))


@dataclass
class MLPConfig:
    hidden: int = 512


@set_config_class(MLPConfig)
class BenchMLP(ConfiguredModel[MLPConfig]):
    def __init__(self, config: MLPConfig) -> None:
        super().__init__(config)
        h = config.hidden
        self.net = torch.nn.Sequential(
            torch.nn.Linear(784, h), torch.nn.ReLU(), torch.nn.Linear(h, h), torch.nn.ReLU(), torch.nn.Linear(h, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _glue(model: torch.nn.Module, x: torch.Tensor, folder: str) -> int:
    torch.save(model.state_dict(), os.path.join(folder, "weights.pt"))
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model.eval(), (x,), dynamo=True, external_data=False, verbose=False)
        assert program is not None
        program.save(os.path.join(folder, "model.onnx"), external_data=False)
        torch.jit.save(torch.jit.script(model), os.path.join(folder, "model.pt"))
    return sum(os.path.getsize(os.path.join(folder, n)) for n in ("weights.pt", "model.onnx", "model.pt"))


def _timed(fn: Callable[[], int], reps: int) -> tuple[float, int]:
    fn()  # warm: the exporters import and compile on first use
    times = []
    size = 0
    for _ in range(reps):
        start = time.perf_counter()
        size = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    cases = {
        "cnn": (BenchCNN(CNNConfig()), torch.randn(2, 1, 28, 28)),
        "mlp": (BenchMLP(MLPConfig()), torch.randn(2, 784)),
    }
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, median of {args.reps}")
    print()
    print(
        "| model | weights | zarchive plain s | zarchive exports s | glue s | exports / glue | zarchive exports bytes | glue bytes |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (model, x) in cases.items():
            path = os.path.join(tmp, f"{name}.zarc")

            def plain(model: torch.nn.Module = model, path: str = path) -> int:
                zarchive.save(model, path, durable=False)
                return os.path.getsize(path)

            def exports(model: torch.nn.Module = model, x: torch.Tensor = x, path: str = path) -> int:
                zarchive.save(model, path, export=("onnx", "torchscript"), example_inputs=(x,), durable=False)
                return os.path.getsize(path)

            t_plain, _ = _timed(plain, args.reps)
            t_exp, size_exp = _timed(exports, args.reps)
            t_glue, size_glue = _timed(lambda model=model, x=x: _glue(model, x, tmp), args.reps)
            weights = sum(p.numel() * p.element_size() for p in model.parameters())
            print(
                f"| {name} | {weights:,} B | {t_plain:.3f} | {t_exp:.2f} | {t_glue:.2f} | {t_exp / t_glue:.2f} | "
                f"{size_exp:,} | {size_glue:,} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
