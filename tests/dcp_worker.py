"""Run under `torchrun` by tests/test_dcp_dist.py: a small transformer sharded with FSDP2 on CPU
(gloo), its optimizer state from get_state_dict, saved and loaded through zarchive.dcp and through
DCP's own FileSystemWriter/Reader in the same run.

    torchrun --nproc-per-node=2 tests/dcp_worker.py save OUT
    torchrun --nproc-per-node=N tests/dcp_worker.py load OUT      (N: any world size)
    torchrun --nproc-per-node=2 tests/dcp_worker.py kill OUT RANK

With ZARCHIVE_DCP_DEVICE=cuda the model lives on the GPUs (one per rank) and the process group is
NCCL's (gloo beside it for CPU tensors); loads then fill GPU shards from any checkpoint.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import signal
import sys
import threading
import time
import warnings
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import zarchive
from zarchive.dcp import ZArchiveReader, ZArchiveWriter

warnings.filterwarnings("ignore")
DEVICE = os.environ.get("ZARCHIVE_DCP_DEVICE", "cpu")


@dataclasses.dataclass
class RunConfig:  # a config dataclass in the state dict: saved by the handler chain, not torch.save
    lr: float = 1e-2
    layers: int = 2
    name: str = "tiny"


class Tiny(nn.Module):
    def __init__(self, vocab: int = 61, dim: int = 24, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=40, dropout=0.0, batch_first=True)
            for _ in range(layers)
        )
        self.head = nn.Linear(dim, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def build(steps: int, seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The sharded model and its optimizer after `steps` training steps (the same on every world size)."""
    torch.manual_seed(seed)
    model = Tiny().to(DEVICE)
    mesh = init_device_mesh(DEVICE, (dist.get_world_size(),))
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(steps):
        train_step(model, optim, step)
    return model, optim


def train_step(model: nn.Module, optim: torch.optim.Optimizer, step: int) -> None:
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randint(0, 61, (4, 7), generator=g).to(DEVICE)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    optim.step()
    optim.zero_grad()


def state(model: nn.Module, optim: torch.optim.Optimizer, step: int) -> dict[str, Any]:
    msd, osd = get_state_dict(model, optim)
    return {"model": msd, "optim": osd, "step": step, "config": RunConfig(), "rng": torch.arange(5) * step}


def full(value: Any) -> Any:
    """The value with every DTensor gathered (a collective: every rank calls it in the same order)."""
    if isinstance(value, DTensor):
        return value.full_tensor()
    if isinstance(value, dict):
        return {k: full(v) for k, v in value.items()}
    if isinstance(value, list):
        return [full(v) for v in value]
    return value


def same(a: Any, b: Any, where: str, problems: list[str]) -> None:
    """Bitwise equality of nested state dicts (tensors compared as bytes)."""
    if isinstance(a, DTensor) or isinstance(b, DTensor):
        a, b = (x.to_local() if isinstance(x, DTensor) else x for x in (a, b))
    if isinstance(a, torch.Tensor):
        ok = isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        a, b = a.detach().cpu(), b.detach().cpu() if isinstance(b, torch.Tensor) else b  # GPU runs compare on the host
        ok = ok and torch.equal(
            a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)
        )
        if not ok:
            problems.append(f"{where}: tensors differ")
    elif isinstance(a, dict):
        if not isinstance(b, dict) or set(a) != set(b):
            problems.append(f"{where}: keys differ")
            return
        for k in a:
            same(a[k], b[k], f"{where}/{k}", problems)
    elif isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            problems.append(f"{where}: lists differ")
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}/{i}", problems)
    elif a != b:
        problems.append(f"{where}: {a!r} != {b!r}")


def report(out: str, name: str, data: dict[str, Any]) -> None:
    with open(os.path.join(out, f"{name}-rank{dist.get_rank()}.json"), "w") as f:
        json.dump(data, f)


def do_save(out: str) -> None:
    model, optim = build(steps=2)
    sd = state(model, optim, step=2)
    ref = full(sd)
    if dist.get_rank() == 0:
        zarchive.save(ref, os.path.join(out, "reference.zarc"))  # the whole state dict, one process's view
    t0 = time.perf_counter()
    dcp.save(sd, storage_writer=ZArchiveWriter(os.path.join(out, "zarc")))
    t1 = time.perf_counter()
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(os.path.join(out, "fs")))
    t2 = time.perf_counter()
    # async: on a process group of its own, while training goes on
    pg = dist.new_group(backend="gloo")
    pending = dcp.async_save(sd, storage_writer=ZArchiveWriter(os.path.join(out, "async")), process_group=pg)
    train_step(model, optim, 2)  # changes every parameter while the save is under way
    result = pending.result() if hasattr(pending, "result") else pending.upload_completion.result()
    del result
    report(out, "save", {"zarc_s": t1 - t0, "fs_s": t2 - t1})


def do_load(out: str) -> None:
    problems: list[str] = []
    loaded = {}
    for name, reader in (("zarc", ZArchiveReader), ("fs", dcp.FileSystemReader), ("async", ZArchiveReader)):
        model, optim = build(steps=1, seed=1)  # other values, and optimizer state to load into
        sd = state(model, optim, step=0)
        sd["config"] = RunConfig(lr=0.0, layers=0, name="")
        dcp.load(sd, storage_reader=reader(os.path.join(out, name)))
        set_state_dict(model, optim, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        loaded[name] = sd
        if name != "fs":
            after = state(model, optim, step=sd["step"])  # what the model and optimizer now hold
            after["config"], after["rng"] = sd["config"], sd["rng"]
            same(after, sd, f"{name} after set_state_dict", problems)
    same(loaded["zarc"], loaded["fs"], "zarc vs FileSystemReader", problems)
    same(loaded["async"], loaded["zarc"], "async_save vs save", problems)
    ref = zarchive.read(os.path.join(out, "reference.zarc"), trusted=[RunConfig])
    same(full(loaded["zarc"]), ref, "zarc vs reference", problems)
    control: list[str] = []  # the comparison can fail: the state before loading differs from the saved one
    same(full(state(*build(steps=1, seed=1), step=0)), ref, "control", control)
    if not any("tensors differ" in p for p in control):
        problems.append(f"the comparison found no difference where there is one: {control}")
    on = "" if DEVICE == "cpu" else f"-{DEVICE}"
    report(out, f"load{dist.get_world_size()}{on}", {"problems": problems, "device": str(after_device(loaded))})


def after_device(loaded: dict[str, Any]) -> torch.device:
    return next(iter(loaded["zarc"]["model"].values())).device


def do_kill(out: str, victim: int) -> None:
    """Save v1 (committed), then save v2 with rank `victim` killed while writing its shard."""
    model, optim = build(steps=1)
    target = os.path.join(out, "killed")
    dcp.save(state(model, optim, step=1), storage_writer=ZArchiveWriter(target))
    if dist.get_rank() == 0:
        zarchive.save(full(state(model, optim, step=1)), os.path.join(out, "v1.zarc"))
    else:
        full(state(model, optim, step=1))
    dist.barrier()
    train_step(model, optim, 1)
    sd = state(model, optim, step=2)
    sd[f"only-on-rank{dist.get_rank()}"] = torch.randn(1 << 20)  # 4 MiB more for every shard to write
    if dist.get_rank() == victim:
        writing = os.path.join(target, f".shard-*-{victim:05d}.zarc.*.zarc-tmp")
        written = os.path.join(target, f"shard-*-{victim:05d}.zarc")
        before = set(glob.glob(written))

        def kill_when_writing() -> None:  # while its shard is written (or, at the latest, right after)
            while not glob.glob(writing) and set(glob.glob(written)) == before:
                time.sleep(0.001)
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=kill_when_writing, daemon=True).start()
    dcp.save(sd, storage_writer=ZArchiveWriter(target))
    report(out, "kill-survived", {})  # not reached by the victim


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    if DEVICE == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("cpu:gloo,cuda:nccl" if DEVICE == "cuda" else "gloo")
    try:
        if mode == "save":
            do_save(out)
        elif mode == "load":
            do_load(out)
        elif mode == "kill":
            do_kill(out, int(sys.argv[3]))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    # skip interpreter teardown: torch's C++ threads sometimes abort there on exit ("terminate called
    # without an active exception", about one run in ten on this machine), after all work is done
    os._exit(0)


if __name__ == "__main__":
    from tests.dcp_worker import main as imported_main  # classes saved are then tests.dcp_worker:..., not __main__:...

    imported_main()
