"""Run under `torchrun` by tests/test_dcp_remote_dist.py: the small FSDP2 transformer of
tests/dcp_worker.py (gloo on CPU) saved to and loaded from an S3 server through zarchive.dcp.
ZARCHIVE_S3_OPTIONS holds the s3fs options (JSON); URL is the checkpoints' folder on the server.

    torchrun --nproc-per-node=2 tests/dcp_remote_worker.py save OUT URL    (dcp.save and dcp.async_save)
    torchrun --nproc-per-node=N tests/dcp_remote_worker.py load OUT URL    (N: any world size)
    torchrun --nproc-per-node=2 tests/dcp_remote_worker.py kill OUT URL RANK

OUT is a local folder for the reference state dicts and the ranks' reports.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import warnings
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import set_state_dict

import zarchive
from tests.dcp_worker import RunConfig, build, full, report, same, state, train_step
from zarchive.dcp import ZArchiveReader, ZArchiveWriter

warnings.filterwarnings("ignore")
OPTIONS: dict[str, Any] = json.loads(os.environ.get("ZARCHIVE_S3_OPTIONS", "{}"))


def do_save(out: str, url: str) -> None:
    model, optim = build(steps=2)
    sd = state(model, optim, step=2)
    ref = full(sd)
    if dist.get_rank() == 0:
        zarchive.save(ref, os.path.join(out, "reference.zarc"))
    dcp.save(sd, storage_writer=ZArchiveWriter(f"{url}/sync", storage_options=OPTIONS))
    # async, on a process group of its own, while training goes on
    pg = dist.new_group(backend="gloo")
    pending = dcp.async_save(sd, storage_writer=ZArchiveWriter(f"{url}/async", storage_options=OPTIONS),
                             process_group=pg)  # fmt: skip
    train_step(model, optim, 2)  # changes every parameter while the save is under way
    result = pending.result() if hasattr(pending, "result") else pending.upload_completion.result()
    del result
    report(out, "save", {})


def do_load(out: str, url: str) -> None:
    problems: list[str] = []
    ref = zarchive.read(os.path.join(out, "reference.zarc"), trusted=[RunConfig])
    for name in ("sync", "async"):
        model, optim = build(steps=1, seed=1)  # other values to load into
        sd = state(model, optim, step=0)
        sd["config"] = RunConfig(lr=0.0, layers=0, name="")
        dcp.load(sd, storage_reader=ZArchiveReader(f"{url}/{name}", storage_options=OPTIONS))
        set_state_dict(model, optim, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        same(full(sd), ref, f"{name} vs reference", problems)
        after = state(model, optim, step=sd["step"])
        after["config"], after["rng"] = sd["config"], sd["rng"]
        same(full(after), ref, f"{name} after set_state_dict", problems)
    control: list[str] = []  # the comparison can fail: the state before loading differs from the saved one
    same(full(state(*build(steps=1, seed=1), step=0)), ref, "control", control)
    if not any("tensors differ" in p for p in control):
        problems.append(f"the comparison found no difference where there is one: {control}")
    report(out, f"load{dist.get_world_size()}", {"problems": problems})


def kill_at_upload(victim: int) -> None:
    """SIGKILL this process as it starts uploading, to the S3 server, its own shard (rank > 0: the
    other rank's shard may be there, the index is not) or the index (the coordinator: every shard is
    there, the index is not)."""
    import fsspec

    fs = fsspec.filesystem("s3", **OPTIONS)  # the (cached) instance ZArchiveWriter's uploads use
    fs.ls(URL.removeprefix("s3://").split("/")[0])  # connect, so that its client exists
    mine = "index.zarc" if victim == 0 else f"-{victim:05d}.zarc"

    def at_upload(params: dict[str, Any] | None = None, **_: Any) -> None:
        if str((params or {}).get("Key", "")).endswith(mine):
            os.kill(os.getpid(), signal.SIGKILL)

    for op in ("PutObject", "CreateMultipartUpload"):
        fs.s3.meta.events.register(f"before-parameter-build.s3.{op}", at_upload)


def do_kill(out: str, url: str, victim: int) -> None:
    """Save v1 (committed), then save v2 with rank `victim` killed as it uploads its file."""
    model, optim = build(steps=1)
    target = f"{url}/killed"
    dcp.save(state(model, optim, step=1), storage_writer=ZArchiveWriter(target, storage_options=OPTIONS))
    v1 = full(state(model, optim, step=1))
    if dist.get_rank() == 0:
        zarchive.save(v1, os.path.join(out, "v1.zarc"))
    dist.barrier()
    train_step(model, optim, 1)
    sd = state(model, optim, step=2)
    sd[f"only-on-rank{dist.get_rank()}"] = torch.randn(1 << 16)
    if dist.get_rank() == victim:
        kill_at_upload(victim)
    dcp.save(sd, storage_writer=ZArchiveWriter(target, storage_options=OPTIONS))
    report(out, "kill-survived", {})  # not reached by the victim


URL = ""


def main() -> None:
    global URL
    mode, out, URL = sys.argv[1], sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo")
    try:
        if mode == "save":
            do_save(out, URL)
        elif mode == "load":
            do_load(out, URL)
        elif mode == "kill":
            do_kill(out, URL, int(sys.argv[4]))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # (as tests/dcp_worker.py: skip interpreter teardown, after all work is done)


if __name__ == "__main__":
    from tests.dcp_remote_worker import main as imported_main  # classes saved are tests.dcp_worker:...

    imported_main()
