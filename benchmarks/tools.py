"""The tools being compared, each reduced to the same verbs: save, read everything, read one tensor.

A Tool's `save` writes durably (the file and its directory are fsync'd, as zarchive does by default),
so save times compare like with like. Read variants (zarchive with verification off, torch.load with
mmap=True) read the file another tool wrote (`file_of`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from compressed import compressed_tools
from workloads import Workload, touch

ZARCHIVE = "zarchive"
TABLE_ZSTD_LEVEL = 9


@dataclass(frozen=True)
class Tool:
    name: str
    ext: str
    save: Callable[[Any, str], None] | None = None
    read: Callable[[str], Any] | None = None
    lazy: Callable[[str, str], Any] | None = None  # (path, key) -> one tensor
    file_of: str | None = None  # the tool whose file this one reads
    out_of_process: bool = False  # measured in a time-limited subprocess (zanj)
    note: str = ""

    @property
    def is_zarchive(self) -> bool:
        return self.name.startswith(ZARCHIVE)

    @property
    def writer(self) -> str:
        return self.file_of or self.name


def fsync_path(path: str) -> None:
    """Make a file written by someone else durable, as zarchive's save does: the file, then its folder."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _durable(fn: Callable[[Any, str], None]) -> Callable[[Any, str], None]:
    def save(obj: Any, path: str) -> None:
        fn(obj, path)
        fsync_path(path)

    return save


# --- zarchive ---------------------------------------------------------------------------------------


def _zarchive_tools(w: Workload) -> list[Tool]:
    import zarchive

    def saver(**settings: Any) -> Callable[[Any, str], None]:
        za = zarchive.ZArchive(**settings)
        return lambda obj, path: za.save(obj, path)

    def reader(**settings: Any) -> Callable[[str], Any]:
        za = zarchive.ZArchive(**settings)
        return lambda path: za.read(path)

    def lazy(**settings: Any) -> Callable[[str, str], Any]:
        za = zarchive.ZArchive(**settings)

        def one(path: str, key: str) -> Any:
            with za.open(path) as arc:
                return arc[key]

        return one

    tools = [
        Tool(
            ZARCHIVE,
            ".zarc",
            saver(),
            reader(),
            lazy(),
            note="defaults: compress=True (zstd 3), verify on, mmap=False (values are copies of their own)",
        ),
        Tool(f"{ZARCHIVE} verify=off", ".zarc", None, reader(verify=False), lazy(verify=False), file_of=ZARCHIVE),
        Tool(
            f"{ZARCHIVE} mmap",
            ".zarc",
            None,
            reader(mmap=True),
            lazy(mmap=True),
            file_of=ZARCHIVE,
            note="mmap=True: zero-copy views of the file (not safe against truncation by another process)",
        ),
        Tool(
            f"{ZARCHIVE} mmap verify=off",
            ".zarc",
            None,
            reader(mmap=True, verify=False),
            lazy(mmap=True, verify=False),
            file_of=ZARCHIVE,
        ),
        Tool(f"{ZARCHIVE} compress=off", ".zarc", saver(compress=False), reader(), None),
    ]
    if w.kind in ("table", "polars"):
        level = TABLE_ZSTD_LEVEL
        tools.append(Tool(f"{ZARCHIVE} zstd={level}", ".zarc", saver(compress=level), reader(), None))
    return tools


# --- peers ------------------------------------------------------------------------------------------


def _state_dict(obj: Any) -> dict[str, torch.Tensor]:
    return obj.state_dict() if isinstance(obj, torch.nn.Module) else obj


def _safetensors_tools(w: Workload) -> list[Tool]:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    def one(path: str, key: str) -> torch.Tensor:
        with safe_open(path, framework="pt") as f:
            return f.get_tensor(key)

    tools = [
        Tool(
            "safetensors",
            ".safetensors",
            _durable(lambda o, p: save_file(_state_dict(o), p)),
            load_file,
            one,
            note="save_file + fsync / load_file / safe_open().get_tensor",
        ),
    ]
    if w.kind == "model" and w.shape is not None:
        shape = w.shape

        def read_into_model(path: str) -> Any:
            from configured_model import make_plain, to_config

            model = make_plain(to_config(shape))
            model.load_state_dict(load_file(path))
            return model

        tools.append(
            Tool(
                "safetensors+init",
                ".safetensors",
                None,
                read_into_model,
                None,
                file_of="safetensors",
                note="build the model from its config, then load_state_dict(load_file())",
            )
        )
    return tools


def _torch_tools(w: Workload) -> list[Tool]:
    def save(obj: Any, path: str) -> None:
        torch.save(_state_dict(obj), path)

    def one(path: str, key: str) -> torch.Tensor:
        return torch.load(path, mmap=True, weights_only=True)[key]

    return [
        Tool(
            "torch",
            ".pt",
            _durable(save),
            lambda p: torch.load(p, weights_only=True),
            None,
            note="torch.save + fsync / torch.load(weights_only=True)",
        ),
        Tool(
            "torch mmap",
            ".pt",
            None,
            lambda p: torch.load(p, mmap=True, weights_only=True),
            one,
            file_of="torch",
            note="torch.load(mmap=True, weights_only=True)",
        ),
    ]


def _numpy_tools(w: Workload) -> list[Tool]:
    def save(obj: dict[str, torch.Tensor], path: str) -> None:
        np.savez(path, **{k: v.numpy() for k, v in obj.items()})

    def read(path: str) -> dict[str, np.ndarray]:
        with np.load(path) as f:
            return {k: f[k] for k in f.files}

    def one(path: str, key: str) -> np.ndarray:
        with np.load(path) as f:
            return f[key]

    return [Tool("np.savez", ".npz", _durable(save), read, one, note="tensors as numpy arrays")]


def _pickle_tools(w: Workload) -> list[Tool]:
    import pandas as pd

    return [
        Tool(
            "pickle",
            ".pkl",
            _durable(lambda o, p: o.to_pickle(p)),
            pd.read_pickle,
            None,
            note="DataFrame.to_pickle + fsync / pd.read_pickle",
        )
    ]


_ARROW_FILES = (("arrow-ipc-zstd", ".arrow"), ("parquet", ".parquet"))  # the two peers' names and files
_Peer = tuple[Callable[[Any, str], None], Callable[[str], Any], str]  # write, read, note


def _arrow_file_tools(w: Workload) -> list[Tool]:
    """Arrow IPC with zstd (the Feather v2 file) and Parquet, as pandas and polars users write tables:
    each library's own writer and reader of the two files (_ARROW_FILES)."""
    peers: tuple[_Peer, _Peer]
    if w.kind == "polars":
        import polars as pl

        peers = (
            (lambda o, p: o.write_ipc(p, compression="zstd"), pl.read_ipc, 'write_ipc(compression="zstd") + fsync / pl.read_ipc'),
            (lambda o, p: o.write_parquet(p), pl.read_parquet, "write_parquet (zstd, polars' default) + fsync / pl.read_parquet"),
        )  # fmt: skip
    else:
        import pandas as pd

        peers = (
            (lambda o, p: o.to_feather(p, compression="zstd"), pd.read_feather,
             'to_feather(compression="zstd") (Arrow IPC) + fsync / pd.read_feather'),
            (lambda o, p: o.to_parquet(p), pd.read_parquet, "to_parquet (pyarrow, snappy) + fsync / pd.read_parquet"),
        )  # fmt: skip
    return [
        Tool(name, ext, _durable(write), read, None, note=note)
        for (name, ext), (write, read, note) in zip(_ARROW_FILES, peers)
    ]


def zanj_read(path: str) -> Any:
    from zanj import ZANJ

    return ZANJ().read(path)


def zanj_save(obj: Any, path: str) -> None:
    from zanj import ZANJ

    ZANJ().save(obj, path)
    fsync_path(path)


ZANJ_TOOL = Tool(
    "zanj",
    ".zanj",
    zanj_save,
    zanj_read,
    None,
    out_of_process=True,
    note="one run only, in a time-limited subprocess (it is slow)",
)


def tools_for(w: Workload) -> list[Tool]:
    """Every tool that takes part in a workload, zarchive variants first."""
    tools = _zarchive_tools(w)
    if w.kind in ("state_dict", "model"):
        tools += _safetensors_tools(w) + _torch_tools(w)
    if w.kind == "state_dict":
        tools += _numpy_tools(w)
    if w.kind == "table":
        tools += _pickle_tools(w)
    if w.kind in ("table", "polars"):
        tools += _arrow_file_tools(w)
    if w.kind not in ("model", "polars"):  # zanj has its own ConfiguredModel, not ours; no polars
        tools.append(ZANJ_TOOL)
    if w.kind != "polars":
        tools += [Tool(**spec) for spec in compressed_tools(w)]  # benchmarks/compressed.py
    return tools


def unsupported(tool: Tool, w: Workload, obj: Any) -> str | None:
    """Why a tool cannot take part in a workload with this data (None: it can)."""
    if tool.name == "np.savez" and isinstance(obj, dict) and any(v.dtype == torch.bfloat16 for v in obj.values()):
        return "numpy has no bfloat16"
    return None


def by_name(w: Workload, name: str) -> Tool:
    for t in tools_for(w):
        if t.name == name:
            return t
    raise KeyError(f"no tool {name!r} for workload {w.name!r}")


def read_and_touch(tool: Tool, path: str) -> tuple[Any, int]:
    assert tool.read is not None
    obj = tool.read(path)
    return obj, touch(obj)
