"""Compressed weights: zarchive's `compress_weights=True` against ZipNN and torch.save + zstd.

Two parts, both in `make bench` (run.py):
- tools for the state-dict and model workloads (their files' sizes land in the "file MB" column):
  `zarchive compress_weights`, `torch.save+zstd` (the seed's recipe: torch.save into a zstd stream)
  and `zipnn` (the safetensors bytes compressed by ZipNN, which groups bytes and Huffman-codes them);
- a codec table on four 32 MiB samples (bf16 weights, fp32 weights, fp32 holding bf16-rounded
  values, Adam second moments): ratio and compression/decompression speed of zstd-1, zarchive's
  byte-grouped chunks and ZipNN, on the same bytes in the same run, medians of several runs.

Standalone: `python benchmarks/compressed.py [--reps 5] [--mib 32]` prints the codec table.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from workloads import Workload

TOOL = "zarchive compress_weights"  # (report.TARGETS holds its targets)
TORCH_ZSTD_LEVEL = 3


def _durable(fn: Callable[[Any, str], None]) -> Callable[[Any, str], None]:
    """Save, then fsync the file and its folder (as tools.py does for every peer)."""

    def save(obj: Any, path: str) -> None:
        fn(obj, path)
        for target, flags in ((path, os.O_RDONLY), (os.path.dirname(os.path.abspath(path)), os.O_RDONLY)):
            fd = os.open(target, flags)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    return save


def _state_dict(obj: Any) -> dict[str, torch.Tensor]:
    return obj.state_dict() if isinstance(obj, torch.nn.Module) else obj


# --- the tools ----------------------------------------------------------------------------------------


def compressed_tools(w: Workload) -> list[dict[str, Any]]:
    """The compressed variant and peers of a workload, as tools.Tool keyword arguments (tools.py makes
    them Tools: this module does not import it, which imports this one)."""
    import zarchive

    za = zarchive.ZArchive(compress_weights=True)
    plain = zarchive.ZArchive()

    def one(path: str, key: str) -> Any:
        with plain.open(path) as arc:
            return arc[key]

    tools: list[dict[str, Any]] = [
        {
            "name": TOOL,
            "ext": ".zarc",
            "save": lambda o, p: za.save(o, p),
            "read": plain.read,
            "lazy": one,
            "note": "ZArchive(compress_weights=True) / ZArchive().read",
        }
    ]
    if w.kind in ("state_dict", "model"):
        tools += [
            {
                "name": "torch.save+zstd",
                "ext": ".pt.zst",
                "save": _durable(_torch_zstd_save),
                "read": _torch_zstd_read,
                "note": f"torch.save into a zstd stream (level {TORCH_ZSTD_LEVEL}, all cores) / decompress + torch.load",
            },
            {
                "name": "zipnn",
                "ext": ".safetensors.znn",
                "save": _durable(_zipnn_save),
                "read": _zipnn_read,
                "note": "safetensors bytes compressed by ZipNN 0.5 (byte grouping + Huffman, all cores) / decompress + load",
            },
        ]
    return tools


def _torch_zstd_save(obj: Any, path: str) -> None:
    import zstandard

    cctx = zstandard.ZstdCompressor(level=TORCH_ZSTD_LEVEL, threads=-1)
    with open(path, "wb") as f, cctx.stream_writer(f, closefd=False) as z:
        torch.save(_state_dict(obj), z)


def _torch_zstd_read(path: str) -> Any:
    import zstandard

    with open(path, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as z:
        data = z.read()
    return torch.load(io.BytesIO(data), weights_only=True)


def _dominant_dtype(sd: dict[str, torch.Tensor]) -> torch.dtype:
    sizes: dict[torch.dtype, int] = {}
    for t in sd.values():
        sizes[t.dtype] = sizes.get(t.dtype, 0) + t.numel() * t.element_size()
    return max(sizes, key=lambda d: sizes[d])


def _zipnn(dtype: torch.dtype) -> Any:
    from zipnn import ZipNN

    name = {torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(dtype, "float32")
    return ZipNN(input_format="byte", bytearray_dtype=name, threads=os.cpu_count() or 1)


def _zipnn_save(obj: Any, path: str) -> None:
    from safetensors.torch import save

    sd = _state_dict(obj)
    dtype = _dominant_dtype(sd)
    data = _zipnn(dtype).compress(save(sd))
    with open(path, "wb") as f:
        f.write(str(dtype).removeprefix("torch.").encode().ljust(16))
        f.write(data)


def _zipnn_read(path: str) -> Any:
    from safetensors.torch import load

    with open(path, "rb") as f:
        dtype = getattr(torch, f.read(16).decode().strip())
        data = f.read()
    return load(bytes(_zipnn(dtype).decompress(data)))


# --- the codec table ----------------------------------------------------------------------------------


def samples(mib: int = 32, seed: int = 1234) -> dict[str, tuple[np.ndarray, str]]:
    """name -> (the sample's bytes, its dtype name): the issue's four samples, `mib` MiB each."""
    g = torch.Generator().manual_seed(seed)
    n16, n32 = (mib << 20) // 2, (mib << 20) // 4
    bf16 = (torch.randn(n16, generator=g) * 0.02).bfloat16()
    fp32 = torch.randn(n32, generator=g) * 0.02
    fp32_bf16 = (torch.randn(n32, generator=g) * 0.02).bfloat16().float()
    # Adam's exp_avg_sq after 10 steps of gradients whose scale varies by row (as layers' do)
    rows = n32 // 1024
    scale = torch.exp(torch.empty(rows, 1).uniform_(-9, -3, generator=g))
    v = torch.zeros(rows, 1024)
    for _ in range(10):
        grad = torch.randn(rows, 1024, generator=g) * scale
        v.mul_(0.999).add_(grad.square(), alpha=0.001)
    out = {
        "bf16 weights (normal init)": (bf16, "bfloat16"),
        "fp32 weights": (fp32, "float32"),
        "fp32 holding bf16-rounded values": (fp32_bf16, "float32"),
        "Adam second moments (fp32)": (v.reshape(-1), "float32"),
    }
    return {k: (t.view(torch.uint8).numpy().copy(), d) for k, (t, d) in out.items()}


def _timed(fn: Callable[[], Any], reps: int, cpu: list[float] | None = None) -> tuple[float, Any]:
    """Median wall time of `fn` and its last result; the median CPU time of the process (all its
    threads) is appended to `cpu`: on a shared machine, wall time says what others left us."""
    times, cpus, result = [], [], None
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    if cpu is not None:
        cpu.append(statistics.median(cpus))
    return statistics.median(times), result


def _speeds(n: int, packed: int, ct: float, dt: float, cpu: list[float]) -> dict[str, float]:
    return {"ratio": n / packed, "c": n / ct, "d": n / dt, "c_cpu": n / cpu[0], "d_cpu": n / cpu[1]}


def _zstd1(data: np.ndarray, reps: int) -> dict[str, float]:
    import zstandard

    threads = os.cpu_count() or 1
    cctx = zstandard.ZstdCompressor(level=1, threads=threads)
    cpu: list[float] = []
    ct, z = _timed(lambda: cctx.compress(data.data), reps, cpu)
    dt, out = _timed(lambda: zstandard.ZstdDecompressor().decompress(z), reps, cpu)
    assert out == data.tobytes()
    return _speeds(data.nbytes, len(z), ct, dt, cpu)


def _bgzstd(data: np.ndarray, width: int, reps: int) -> dict[str, float]:
    from zarchive.container import byte_groups
    from zarchive.container.chunk_reader import ChunkedMember

    view = memoryview(data).cast("B")

    def compress() -> tuple[list[list[Any]], bytes]:
        rows, chunks = [], []
        for row, bufs in byte_groups.encode(byte_groups.pieces([("x", view, width)])):
            rows.append(row)
            chunks += [bytes(b) for b in bufs]
        return rows, b"".join(chunks)

    cpu: list[float] = []
    ct, (rows, stored) = _timed(compress, reps, cpu)
    entry = {"codec": byte_groups.CODEC, "size": data.nbytes, "stored_size": len(stored), "chunks": rows}
    member = ChunkedMember(
        "sample", byte_groups.parse_index(entry, member="sample"), lambda at, n: memoryview(stored)[at : at + n],
        verify=True,
    )  # fmt: skip
    dt, out = _timed(lambda: member.read(0, data.nbytes), reps, cpu)
    assert out == data.tobytes()
    return _speeds(data.nbytes, len(stored), ct, dt, cpu)


def _zipnn_codec(data: np.ndarray, dtype: str, reps: int) -> dict[str, float]:
    from zipnn import ZipNN

    z = ZipNN(input_format="byte", bytearray_dtype=dtype, threads=os.cpu_count() or 1)
    raw = data.tobytes()
    times, cpus, packed = [], [], b""
    for _ in range(reps):  # ZipNN rotates bits of its input in place (even of a bytes): a fresh copy each time
        fresh = bytearray(raw)
        c0, t0 = time.process_time(), time.perf_counter()
        packed = z.compress(fresh)
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    cpu = [statistics.median(cpus)]
    dt, out = _timed(lambda: z.decompress(packed), reps, cpu)
    assert bytes(out) == raw
    return _speeds(len(raw), len(packed), statistics.median(times), dt, cpu)


def run_samples(reps: int = 5, mib: int = 32) -> dict[str, Any]:
    """The codec table's numbers: sample -> codec -> ratio, c (compression B/s), d (decompression B/s)."""
    out: dict[str, Any] = {"reps": reps, "mib": mib, "cores": os.cpu_count(), "rows": {}}
    for name, (data, dtype) in samples(mib).items():
        width = 2 if dtype == "bfloat16" else 4
        row = out["rows"][name] = {"zstd-1": _zstd1(data, reps), "zarchive": _bgzstd(data, width, reps)}
        try:
            row["ZipNN"] = _zipnn_codec(data, dtype, reps)
        except ImportError:  # (the bench extra installs it)
            row["ZipNN"] = None
    return out


def _cell(c: dict[str, float]) -> str:
    return (
        f"{c['ratio']:.3f} / {c['c'] / 1e9:.2f} / {c['d'] / 1e9:.2f} [{c['c_cpu'] / 1e9:.2f} / {c['d_cpu'] / 1e9:.2f}]"
    )


def render_samples(res: dict[str, Any] | None) -> str:
    if not res:
        return ""
    lines = [
        "",
        f"## Compressed weights: codecs on {res['mib']} MiB samples",
        "",
        (
            f"Each cell: ratio / compression / decompression in GB/s of wall time on {res['cores']} cores, then "
            "[compression / decompression in GB per CPU-second, all threads counted: what the codec costs, whatever "
            f"else the machine runs]; medians of {res['reps']} runs, the same bytes for every codec. zstd-1: one "
            "frame, compressed on all cores. zarchive: `compress_weights=True`'s codec (byte-grouped chunks, zstd "
            "per plane). Targets (wall time): ratio >= ZipNN's - 3%, decompression >= 1.5 GB/s, compression >= "
            "0.8 GB/s."
        ),
        "",
        "| sample | zstd-1 | zarchive | ZipNN | zarchive ratio / ZipNN's | targets |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in res["rows"].items():
        z, ours, znn = row["zstd-1"], row["zarchive"], row["ZipNN"]
        if znn is None:
            lines.append(f"| {name} | {_cell(z)} | {_cell(ours)} | n/a (zipnn not installed) | n/a | n/a |")
            continue
        rel = ours["ratio"] / znn["ratio"]
        ok = rel >= 0.97 and ours["d"] >= 1.5e9 and ours["c"] >= 0.8e9
        cells = " | ".join(_cell(c) for c in (z, ours, znn))
        lines.append(f"| {name} | {cells} | {rel:.3f} | {'PASS' if ok else 'FAIL'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the compressed-weights codec table")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--mib", type=int, default=32)
    args = p.parse_args(argv)
    print(render_samples(run_samples(args.reps, args.mib)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
