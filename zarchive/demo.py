"""The demo behind `make demo` (`python -m zarchive.demo --out outputs/run.zarc`): train a tiny model,
save it with its config, its metrics, a table of its predictions and an array of embeddings, show what
the archive holds, read it back and check that everything comes back identical.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
import pandas as pd
import torch
from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field

import zarchive
from zarchive.cli import main as cli_main
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


def train(steps: int = 200, seed: int = 0) -> tuple[TinyMLP, pd.DataFrame, pd.DataFrame, np.ndarray]:
    """A few hundred steps on a synthetic 3-class problem; returns the model, its metrics, a table of
    its predictions and the hidden-layer embeddings of the data."""
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
    with torch.no_grad():
        probs = torch.softmax(model(x), dim=1)
        hidden = model.net[1](model.net[0](x))
    names = np.array(["red", "green", "blue"])
    predictions = pd.DataFrame(
        {
            "label": names[labels],
            "predicted": names[probs.argmax(1).numpy()],
            "confidence": probs.max(1).values.numpy(),
        }
    )
    return model, pd.DataFrame(rows), predictions, hidden.numpy()


def _bin_dir() -> str:
    """Where this Python's scripts (the `zarchive` command) are, as short as it can be said from here."""
    where = os.path.dirname(sys.executable)
    rel = os.path.relpath(where)
    return rel if not rel.startswith("..") else where


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=None, help="where to write the archive (default: a temp dir)")
    args = parser.parse_args(argv)
    out = args.out or os.path.join(tempfile.mkdtemp(prefix="zarchive-demo-"), "run.zarc")

    print("[1/4] training a tiny model (TinyMLP, 3 classes, 200 steps) ...", flush=True)
    model, metrics, predictions, embeddings = train()
    print(f"      accuracy {metrics['accuracy'].iloc[-1]:.3f}")
    run = {
        "model": model,
        "metrics": metrics,
        "predictions": predictions,
        "embeddings": embeddings,
        "notes": "tiny MLP on 3 gaussian blobs",
    }
    path = zarchive.save(run, out)
    print(f"[2/4] zarchive.save(run, {path!r}): {os.path.getsize(path):,} bytes; what it holds:\n", flush=True)

    print(f"$ zarchive show {path}")
    cli_main(["show", path])
    print(f"\n$ zarchive ls {path}      # the zip's members, like unzip -l")
    cli_main(["ls", path])

    back = zarchive.read(path)
    x = torch.randn(16, 4)
    with torch.no_grad():
        same = torch.equal(model(x), back["model"](x))
    pd.testing.assert_frame_equal(metrics, back["metrics"], check_exact=True)
    pd.testing.assert_frame_equal(predictions, back["predictions"], check_exact=True)
    np.testing.assert_array_equal(embeddings, back["embeddings"])
    print(f"\n[3/4] zarchive.read({path!r}):")
    print(f"      model: {type(back['model']).__name__}, config {back['model'].config}")
    print(f"      outputs identical: {same}; metrics, predictions and embeddings identical: True")

    alone = model.save(os.path.join(os.path.dirname(path), "model.zarc"))
    again = TinyMLP.read(alone)
    with torch.no_grad():
        same_alone = torch.equal(model(x), again(x))
    print(f"[4/4] model.save({alone!r}); TinyMLP.read(...): outputs identical: {same_alone}")

    bin_dir = _bin_dir()
    zc, py = os.path.join(bin_dir, "zarchive"), os.path.join(bin_dir, "python")
    tries = [
        (f"{zc} show {path} model", "one branch of the tree"),
        (f"{zc} cat {path} predictions", "a table's head (an array: its statistics)"),
        (f"{zc} verify {path}", "check every checksum"),
        (f"unzip -l {path}", "a plain zip: unzip, jq and zstd read it"),
        (f"unzip -p {path} manifest.json | jq .root.model.config", ""),
        (f"{py} -c \"import zarchive, zarchive.demo; print(zarchive.read('{path}')['model'])\"", ""),
    ]
    width = max(len(cmd) for cmd, note in tries if note)
    print(f"\nnext (the zarchive command is in {bin_dir}/; `source {bin_dir}/activate` puts it on your PATH):")
    for cmd, note in tries:
        print(f"  {cmd:<{width}}  # {note}" if note else f"  {cmd}")
    print("  then demo.ipynb (the same, step by step), README.md (a tour), and `make test` (the tests)")
    return 0 if same and same_alone else 1


if __name__ == "__main__":
    from zarchive.demo import main as _main  # run the importable module's classes, not __main__'s

    raise SystemExit(_main())
