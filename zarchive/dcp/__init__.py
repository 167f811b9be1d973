"""Sharded checkpoints through torch.distributed.checkpoint (DCP), stored as `.zarc` archives.

    import torch.distributed.checkpoint as dcp
    from zarchive.dcp import ZArchiveReader, ZArchiveWriter
    dcp.save(state_dict, storage_writer=ZArchiveWriter("ckpt/"))
    dcp.load(state_dict, storage_reader=ZArchiveReader("ckpt/"))
    with zarchive.open("ckpt/") as arc: w = arc["model/layers.0.weight"]   # one view of every shard

The checkpoint may also be a folder on an object store: `ZArchiveWriter("s3://bucket/ckpt",
storage_options={...})`, `ZArchiveReader(...)` and `zarchive.open("s3://bucket/ckpt/")` alike
(dcp.location). The layout (one shard per rank, a JSON index written last) and the commit, with and
without a rename, are in spec/distributed.md. The writer and reader import torch;
`zarchive.dcp.index` and `zarchive.dcp.view` do not.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ZArchiveReader", "ZArchiveWriter"]


def __getattr__(name: str) -> Any:
    # imported on first use: the view (zarchive.open on a directory) needs neither torch nor DCP
    if name == "ZArchiveWriter":
        from .writer import ZArchiveWriter

        return ZArchiveWriter
    if name == "ZArchiveReader":
        from .reader import ZArchiveReader

        return ZArchiveReader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
