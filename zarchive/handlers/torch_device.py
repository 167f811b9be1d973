"""Stored tensor bytes into a CUDA tensor the caller has (`load_into`), through pinned host memory.

Filling a GPU tensor the plain way loads the tensor into fresh pageable memory and copies that to the
device, which the driver does through its own pinned staging buffer: two host copies and the page
faults of fresh memory. Here the stored bytes are read (and their checksum checked) straight into a
pinned block from torch's caching host allocator and copied to the device asynchronously, so the
read of the next tensor overlaps this one's transfer; the block returns to torch's cache once its
copy is done (torch records the copy's event), and a model's worth of loads reuses a few blocks.
Measured on an H200 (benchmarks/gpu_read.py, 2026-11-27): filling the "big" state dict's GPU tensors
took 0.161 s this way against 0.210 s loading then copying. Full reads with map_location="cuda" keep
their parallel read-and-check on the host and move each tensor after: the same path for them was no
faster for plain members (0.154 s against 0.158 s) and slower for compressed ones, which lost their
decoding ahead on every core (0.256 s against 0.193 s).

The copies are ordered on the current stream like any torch operation: work queued on that stream
sees the values; another stream must synchronize first, as with `tensor.to("cuda", non_blocking=True)`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

ReadInto = Callable[[memoryview], None]  # reads the stored bytes into the given buffer (and checks them)


def uses_pinned_path(device: torch.device | None) -> bool:
    """Whether tensors for `device` go through pinned memory: a CUDA device with CUDA usable here."""
    return device is not None and device.type == "cuda" and torch.cuda.is_available()


def fill_on_device(out: torch.Tensor, read_into: ReadInto) -> None:
    """Fill `out` (a flat uint8 tensor on a CUDA device) with the stored bytes."""
    if out.numel() == 0:
        return
    host = torch.empty(out.numel(), dtype=torch.uint8, pin_memory=True)
    read_into(host.numpy().data)
    out.copy_(host, non_blocking=True)
