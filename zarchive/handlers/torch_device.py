"""Stored tensor bytes onto a CUDA device through pinned host memory.

Reading a tensor for a GPU (`map_location="cuda"`, or `load_into` a GPU tensor) the plain way reads
it into fresh pageable memory, then copies that to the device, which the driver does through its own
pinned staging buffer: two host copies and the page faults of fresh memory. Here the stored bytes are
read (and their checksum checked) straight into a pinned block from torch's caching host allocator,
and copied to the device asynchronously: the read of the next tensor overlaps this one's transfer,
and the block returns to torch's cache once its copy is done (torch records the copy's event), so a
full read reuses a few blocks instead of pinning new memory for every tensor.

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


def read_to_device(nbytes: int, device: torch.device, read_into: ReadInto) -> torch.Tensor:
    """The `nbytes` stored bytes as a flat uint8 tensor on `device`."""
    out = torch.empty(nbytes, dtype=torch.uint8, device=device)
    fill_on_device(out, read_into)
    return out


def fill_on_device(out: torch.Tensor, read_into: ReadInto) -> None:
    """Fill `out` (a flat uint8 tensor on a CUDA device) with the stored bytes."""
    if out.numel() == 0:
        return
    host = torch.empty(out.numel(), dtype=torch.uint8, pin_memory=True)
    read_into(host.numpy().data)
    out.copy_(host, non_blocking=True)
