"""Both halves of the checkpoint proof test, run as separate processes by tests/test_checkpoint.py.

    python checkpoint_resume_worker.py straight OUT N M   # N+M steps straight; and N, checkpoint, M more
    python checkpoint_resume_worker.py resume   OUT N M   # a fresh process: load the checkpoint, M steps

Training draws from every kind of generator: torch's global one (data, dropout), numpy's global one,
Python's `random`, and the run's own np.random.Generator, torch.Generator and random.Random. The
model uses Adam (amsgrad, weight decay), a OneCycleLR scheduler (which also changes Adam's betas) and
a CPU GradScaler whose scale grows during the run. Final states go to OUT/<name>.zarc.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import zarchive

N_IN, N_HID, N_OUT, BATCH = 12, 32, 3, 16


@dataclass
class Run:
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    sched: Any
    scaler: torch.amp.GradScaler
    generators: dict[str, Any]
    total_steps: int
    step: int = 0
    metrics: list[dict[str, Any]] = field(default_factory=list)


def setup(seed: int, total_steps: int) -> Run:
    """A fresh run; every generator seeded from `seed`."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(N_IN, N_HID), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(N_HID, N_OUT)
    )
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), weight_decay=1e-4, amsgrad=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=total_steps)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=25)
    generators = {
        "data": np.random.default_rng(seed + 1),
        "labels": torch.Generator().manual_seed(seed + 2),
        "noise": random.Random(seed + 3),
    }
    return Run(model, opt, sched, scaler, generators, total_steps)


def train(run: Run, steps: int) -> None:
    g = run.generators
    for _ in range(steps):
        x = torch.randn(BATCH, N_IN) + torch.from_numpy(np.random.standard_normal((BATCH, N_IN)).astype(np.float32))
        x = x * torch.from_numpy(g["data"].uniform(0.5, 1.5, size=(1, N_IN)).astype(np.float32))
        x = x + (random.random() - 0.5) * 0.1 + g["noise"].gauss(0.0, 0.01)
        y = torch.randint(0, N_OUT, (BATCH,), generator=g["labels"])
        run.model.train()
        loss = F.cross_entropy(run.model(x), y)
        run.opt.zero_grad(set_to_none=True)
        run.scaler.scale(loss).backward()
        run.scaler.step(run.opt)
        run.scaler.update()
        run.sched.step()
        run.step += 1
        run.metrics.append({"step": run.step, "loss": loss.item(), "lr": run.sched.get_last_lr()[0]})


def final_state(run: Run) -> dict[str, Any]:
    return {
        "model": run.model.state_dict(),
        "optimizer": run.opt.state_dict(),
        "scheduler": run.sched.state_dict(),
        "scaler": run.scaler.state_dict(),
        "step": run.step,
        "metrics": run.metrics,
        "next_draws": [torch.rand(3), np.random.random(3), random.random()],
    }


def straight(out: Path, n: int, m: int) -> None:
    run = setup(0, n + m)
    train(run, n + m)
    zarchive.save(final_state(run), out / "straight.zarc")

    run = setup(0, n + m)
    train(run, n)
    zarchive.save_checkpoint(
        out / "ckpt.zarc", run.model, run.opt, run.sched, run.scaler,
        generators=run.generators, step=run.step, metrics=run.metrics,
    )  # fmt: skip
    train(run, m)
    zarchive.save(final_state(run), out / "interrupted.zarc")


def resume(out: Path, n: int, m: int, *, restore_rng: bool) -> Run:
    run = setup(12345, n + m)  # different seeds: whatever matches must come from the checkpoint
    rest = zarchive.load_checkpoint(
        out / "ckpt.zarc", run.model, run.opt, run.sched, run.scaler,
        generators=run.generators, restore_rng=restore_rng,
    )  # fmt: skip
    run.step, run.metrics = rest["step"], rest["metrics"]
    train(run, m)
    return run


def main(argv: list[str]) -> None:
    mode, out, n, m = argv[0], Path(argv[1]), int(argv[2]), int(argv[3])
    torch.set_num_threads(1)  # the same reduction order in every process
    if mode == "straight":
        straight(out, n, m)
    elif mode == "resume":
        zarchive.save(final_state(resume(out, n, m, restore_rng=True)), out / "resumed.zarc")
        zarchive.save(final_state(resume(out, n, m, restore_rng=False)), out / "resumed_no_rng.zarc")
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
