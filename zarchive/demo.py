"""The demo behind `make demo` (`python -m zarchive.demo`): train a tiny model, save it with its config
and a table of metrics, show what the archive holds, read it back and check it gives the same outputs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile

import numpy as np
import pandas as pd
import torch
from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field

import zarchive
from zarchive.torchutil import ConfiguredModel, set_config_class


@serializable_dataclass
class MLPConfig(SerializableDataclass):
    """Everything needed to rebuild the model: this is what the archive stores next to the weights."""

    # (muutils 0.9 needs serializable_field(default=...) for a default to take effect)
    n_in: int = serializable_field(default=4)
    n_hidden: int = serializable_field(default=32)
    n_out: int = serializable_field(default=3)
    dropout: float = serializable_field(default=0.1)
    activation: str = serializable_field(default="gelu")


@set_config_class(MLPConfig)
class TinyMLP(ConfiguredModel[MLPConfig]):
    def __init__(self, config: MLPConfig) -> None:
        super().__init__(config)
        act = {"gelu": torch.nn.GELU, "relu": torch.nn.ReLU}[config.activation]
        self.net = torch.nn.Sequential(
            torch.nn.Linear(config.n_in, config.n_hidden),
            act(),
            torch.nn.Dropout(config.dropout),
            torch.nn.Linear(config.n_hidden, config.n_out),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def train(steps: int = 200, seed: int = 0) -> tuple[TinyMLP, pd.DataFrame]:
    """A few hundred steps on a synthetic 3-class problem; returns the model and its metrics."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(3, 4)) * 2
    labels = rng.integers(0, 3, size=600)
    x = torch.tensor(centers[labels] + rng.normal(size=(600, 4)), dtype=torch.float32)
    y = torch.tensor(labels)
    model = TinyMLP(MLPConfig())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    rows = []
    for step in range(steps):
        idx = torch.randint(0, 600, (64,))
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == steps - 1:
            with torch.no_grad():
                acc = (model(x).argmax(1) == y).float().mean().item()
            rows.append(
                {
                    "step": step,
                    "loss": loss.item(),
                    "accuracy": acc,
                    "time": pd.Timestamp("2026-01-01") + pd.Timedelta(seconds=step),
                }
            )
    model.eval()
    return model, pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=None, help="where to write the archive (default: a temp dir)")
    args = parser.parse_args(argv)
    out = args.out or os.path.join(tempfile.mkdtemp(prefix="zarchive-demo-"), "run.zarc")

    model, metrics = train()
    run = {"model": model, "metrics": metrics, "notes": "tiny MLP on 3 gaussian blobs", "epochs": 1}
    path = zarchive.save(run, out)
    print(f"saved {path} ({os.path.getsize(path):,} bytes)\n")

    print("== the zip listing (unzip -l) ==")
    try:
        print(subprocess.run(["unzip", "-l", path], capture_output=True, text=True, check=True).stdout)
    except (OSError, subprocess.CalledProcessError):
        with zarchive.open(path) as arc:
            for name, info in arc.members.items():
                print(f"{info['size']:>10}  {name}")
    with zarchive.open(path) as arc:
        print("== manifest.json (the readable object tree) ==")
        import json

        print(json.dumps(arc.manifest, indent=1)[:3000])
        print("\n== lazy access: one tensor, without loading the rest ==")
        w = arc["model/state_dict/net.0.weight"]
        print(f"model/state_dict/net.0.weight: {tuple(w.shape)} {w.dtype}")

    back = zarchive.read(path)
    x = torch.randn(16, 4)
    with torch.no_grad():
        same = torch.equal(model(x), back["model"](x))
    pd.testing.assert_frame_equal(metrics, back["metrics"], check_exact=True)
    print(f"\nread back: {type(back['model']).__name__}, config {back['model'].config}")
    print(f"outputs identical: {same}; metrics identical: True; last accuracy {metrics['accuracy'].iloc[-1]:.3f}")

    alone = model.save(os.path.join(os.path.dirname(path), "model.zarc"))
    again = TinyMLP.read(alone)
    with torch.no_grad():
        same_alone = torch.equal(model(x), again(x))
    print(f"TinyMLP.read({os.path.basename(alone)!r}): outputs identical: {same_alone}")
    return 0 if same and same_alone else 1


if __name__ == "__main__":
    from zarchive.demo import main as _main  # run the importable module's classes, not __main__'s

    raise SystemExit(_main())
