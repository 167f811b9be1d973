"""Shared by the viewer's tests: sample archives, a live server in a thread, and GET with urllib."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import zarchive
from zarchive.viewer.diffpage import diff_body, with_tolerance
from zarchive.viewer.routes import Routes
from zarchive.viewer.server import ViewerServer
from zarchive.viewer.sources import Sources


@dataclasses.dataclass
class TrainConfig:
    lr: float = 0.01
    layers: int = 3
    name: str = "demo"


zarchive.register_class(TrainConfig, name="tests.viewer:TrainConfig")


def run_archive(path: Path, seed: int = 0, scale: float = 0.0) -> Path:
    """A training run: a model's state dict (tied and viewed tensors, bfloat16, float16, bool),
    a config, a metrics table with a NaN, a numpy array and a note."""
    g = torch.Generator().manual_seed(0)
    sd = {f"layers.{i}.weight": torch.randn(48, 32, generator=g) for i in range(4)}
    sd["layers.0.bias"] = torch.randn(48, generator=g)
    if scale:
        sd = {k: v + scale * (i + 1) * torch.randn(v.shape, generator=g) for i, (k, v) in enumerate(sd.items())}
    sd["tied"] = sd["layers.0.weight"]
    sd["view"] = sd["layers.0.weight"][:, 2:5]
    sd["half"] = torch.randn(10, 10, generator=g).half()
    sd["bf"] = torch.randn(3, 300, generator=g).bfloat16()
    sd["mask"] = torch.arange(7) % 2 == 0
    steps = np.arange(120)
    metrics = pd.DataFrame(
        {"step": steps, "loss": np.exp(-steps / 30) + 0.01 * np.sin(steps), "phase": ["train"] * 120}
    )
    metrics.loc[5, "loss"] = np.nan
    obj = {"model": sd, "config": TrainConfig(), "metrics": metrics, "arr": np.arange(12.0).reshape(3, 4),
           "notes": "<b>not bold</b>", "step": 100 + seed}  # fmt: skip
    zarchive.save(obj, path)
    return path


@contextlib.contextmanager
def serving(
    *paths: Path | str, token: str | None = None, rtol: float = 0.0, atol: float = 0.0
) -> Iterator[tuple[ViewerServer, Routes]]:
    """A viewer of `paths` in a thread (its diff page at rtol/atol, as `zarchive view --rtol/--atol`)."""
    sources = Sources([str(p) for p in paths])
    routes = Routes(sources, token, diff=with_tolerance(rtol, atol), diff_page=diff_body)
    server = ViewerServer(routes)
    start(server)
    try:
        yield server, routes
    finally:
        server.shutdown()
        server.server_close()
        sources.close()


def start(server: ViewerServer) -> threading.Thread:
    """Serve in a daemon thread, as `server.start_in_thread()` does, but look for `shutdown()` every 10 ms
    (that method: every 50 ms; serve_forever's default of 0.5 s made every shutdown wait about half a
    second, most of a small viewer test's time). test_viewer.py::test_start_in_thread_serves_until_shutdown
    covers that method."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    return thread


def get(url: str) -> tuple[int, str, dict[str, str]]:
    """(status, body, headers) of a GET; HTTP errors are answers too."""
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)
