"""The benchmark workloads: deterministic data shaped like real ML work, and a way to touch every byte.

Every builder is seeded, so a probe subprocess can rebuild exactly the data the parent measured.
Weights are random normals (like a freshly initialised model): float32 weights do not compress, which
is the realistic case for trained models too.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

SEED = 1234


@dataclass(frozen=True)
class GPTShape:
    """The dimensions of a GPT-2-like model (defaults: GPT-2 small, ~124M parameters)."""

    vocab: int = 50257
    n_ctx: int = 1024
    n_embd: int = 768
    n_layer: int = 12


def gpt2_shapes(cfg: GPTShape) -> list[tuple[str, tuple[int, ...]]]:
    """(key, shape) of a GPT-2 state dict, in the Hugging Face layout (Conv1D weights are in x out)."""
    e = cfg.n_embd
    out: list[tuple[str, tuple[int, ...]]] = [("wte.weight", (cfg.vocab, e)), ("wpe.weight", (cfg.n_ctx, e))]
    for i in range(cfg.n_layer):
        p = f"h.{i}."
        out += [
            (p + "ln_1.weight", (e,)), (p + "ln_1.bias", (e,)),
            (p + "attn.c_attn.weight", (e, 3 * e)), (p + "attn.c_attn.bias", (3 * e,)),
            (p + "attn.c_proj.weight", (e, e)), (p + "attn.c_proj.bias", (e,)),
            (p + "ln_2.weight", (e,)), (p + "ln_2.bias", (e,)),
            (p + "mlp.c_fc.weight", (e, 4 * e)), (p + "mlp.c_fc.bias", (4 * e,)),
            (p + "mlp.c_proj.weight", (4 * e, e)), (p + "mlp.c_proj.bias", (e,)),
        ]  # fmt: skip
    out += [("ln_f.weight", (e,)), ("ln_f.bias", (e,))]
    return out


def gpt2_state_dict(cfg: GPTShape, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(SEED)
    sd: dict[str, torch.Tensor] = {}
    for key, shape in gpt2_shapes(cfg):
        t = torch.empty(shape, dtype=torch.float32)
        if key.endswith(("ln_1.weight", "ln_2.weight")) or key == "ln_f.weight":
            t.fill_(1.0)
        else:
            t.normal_(0.0, 0.02, generator=gen)
        sd[key] = t if dtype == torch.float32 else t.to(dtype)
    return sd


def many_small(count: int) -> dict[str, torch.Tensor]:
    """`count` float32 tensors of 1-4 KB (256-1024 elements), like a big optimizer-state or probe dump."""
    gen = torch.Generator().manual_seed(SEED)
    sizes = torch.randint(256, 1025, (count,), generator=gen).tolist()
    return {f"group{i // 100:03d}.param{i % 100:02d}": torch.randn(n, generator=gen) for i, n in enumerate(sizes)}


def table(rows: int, distinct_names: bool = False, text: str = "python"):  # -> pandas.DataFrame
    """A DataFrame with one column of each common kind: int64, float64, str, categorical, datetime, bool.
    `name` repeats (about 200,000 distinct values), or with `distinct_names` has a different value in
    every row.

    `text`: how pandas 3 holds the `str` column. "python" (Python str objects) is what `dtype="str"`
    gives where pyarrow is not installed, as with a plain install of zarchive: the table of issue 27's
    measurements (pickle then reads 1M strings back one object at a time). "pyarrow" is what it gives
    where pyarrow is installed (the `bench` extra installs it for the Arrow peers): the text lives in
    Arrow buffers, which pickle writes and reads raw. Naming the storage keeps each workload the same
    whatever else the environment has."""
    import pandas as pd

    rng = np.random.default_rng(SEED)
    names = np.char.add("user_", rng.integers(0, 200_000, rows).astype("U6"))
    if distinct_names:
        names = np.char.add("user_", np.random.default_rng(SEED + 1).permutation(rows).astype("U12"))
    cities = np.array(["Berlin", "Lagos", "Lima", "Osaka", "Pune", "Quito", "Tunis", "Oslo"])
    start = np.datetime64("2024-01-01T00:00:00", "ns")
    stamps = start + np.sort(rng.integers(0, 365 * 86400, rows)).astype("timedelta64[s]")
    return pd.DataFrame(
        {
            "id": np.arange(rows, dtype=np.int64) * 7 + rng.integers(0, 7, rows),
            "score": rng.normal(0.0, 1.0, rows),
            "name": pd.array(names, dtype=pd.StringDtype(text, na_value=np.nan)),  # (= dtype="str")
            "city": pd.Categorical.from_codes(rng.integers(0, len(cities), rows), categories=cities),
            "when": stamps.astype("datetime64[ns]"),
            "flag": rng.random(rows) < 0.3,
        }
    )


# --- the configured model ---------------------------------------------------------------------------


def build_configured_model(cfg: GPTShape) -> Any:
    """A zarchive.torchutil.ConfiguredModel with the same parameters as `gpt2_state_dict(cfg)`.

    Raises (ImportError, TypeError, ...) when zarchive cannot make one yet; the caller reports it."""
    from configured_model import make_model

    return make_model(cfg)


# --- touching every byte ----------------------------------------------------------------------------


def _touch_bytes(b: np.ndarray) -> int:
    """Sum a flat uint8 array as int64 words, on one thread: a parallel reduction on a busy 2-core
    machine stalls at its barrier whenever a core is taken, which made touch times swing 10x."""
    n8 = b.size // 8 * 8
    head = b[:n8]
    total = int(head.view(np.int64).sum()) if n8 and head.ctypes.data % 8 == 0 else int(head.sum(dtype=np.int64))
    return total + int(b[n8:].sum(dtype=np.int64))


def _touch_tensor(t: torch.Tensor) -> int:
    flat = t.detach().reshape(-1)
    if flat.numel() == 0:
        return 0
    with warnings.catch_warnings():  # tensors over read-only buffers are only read here
        warnings.simplefilter("ignore", UserWarning)
        return _touch_bytes(flat.view(torch.uint8).numpy())


def _touch_array(a: np.ndarray) -> int:
    if a.dtype.hasobject:
        return sum(len(str(x)) for x in a.reshape(-1))
    return _touch_bytes(np.ascontiguousarray(a).reshape(-1).view(np.uint8))


def touch(obj: Any) -> int:
    """Read every byte of a loaded result (faulting in every mapped page); returns a checksum-ish int."""
    if isinstance(obj, torch.Tensor):
        return _touch_tensor(obj)
    if isinstance(obj, np.ndarray):
        return _touch_array(obj)
    if isinstance(obj, torch.nn.Module):
        return sum(_touch_tensor(t) for t in obj.state_dict().values())
    if isinstance(obj, dict):
        return sum(touch(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(touch(v) for v in obj)
    if type(obj).__module__.startswith("polars"):  # polars holds every value in memory once read
        return int(obj.estimated_size())
    if type(obj).__name__ == "DataFrame":
        return _touch_frame(obj)
    if hasattr(obj, "files") and hasattr(obj, "__getitem__"):  # an NpzFile still open
        return sum(touch(obj[k]) for k in obj.files)
    return 0


def _touch_frame(df: Any) -> int:
    import pandas as pd

    total = 0
    for name in df.columns:
        col = df[name]
        if isinstance(col.dtype, pd.CategoricalDtype):
            total += _touch_array(col.cat.codes.to_numpy()) + len(col.cat.categories)
        elif col.dtype.kind in "biufcmM":
            total += _touch_array(col.to_numpy())
        else:
            total += int(col.str.len().sum())
    total += _touch_array(df.index.to_numpy())
    return total


def nbytes(obj: Any) -> int:
    """Bytes of payload in a workload (tensor/array data; frame memory with strings counted deep)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, torch.nn.Module):
        return sum(nbytes(t) for t in obj.state_dict().values())
    if isinstance(obj, dict):
        return sum(nbytes(v) for v in obj.values())
    if type(obj).__module__.startswith("polars"):
        return int(obj.estimated_size())
    if type(obj).__name__ == "DataFrame":
        return int(obj.memory_usage(deep=True).sum())
    return 0


# --- the workload table -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # "state_dict", "table" (pandas), "polars" or "model"
    build: Callable[[], Any]
    lazy_key: str | None  # a mid-sized tensor for one-tensor reads
    description: str
    zanj_timeout: float = 90.0
    shape: GPTShape | None = None  # the model dimensions, for workloads that are models
    fresh_key: str | None = None  # the tensor of the "fresh open + tensor" row


def workloads(quick: bool = False) -> dict[str, Workload]:
    cfg = GPTShape(n_layer=4) if quick else GPTShape()
    small = 2000 if quick else 5000
    rows = 200_000 if quick else 1_000_000
    log_rows = 50_000 if quick else 200_000
    nparams = sum(int(np.prod(s)) for _, s in gpt2_shapes(cfg))
    gpt = f"GPT-2-small-shaped state dict, {cfg.n_layer} blocks, {nparams / 1e6:.1f}M params"
    mid = "h.1.attn.c_proj.weight"  # 768x768: 2.4 MB in float32
    fc = "h.0.mlp.c_fc.weight"  # 768x3072: 9.4 MB in float32
    small_key = f"group{small // 200:03d}.param50"
    items = [
        Workload("big", "state_dict", lambda: gpt2_state_dict(cfg), mid, f"{gpt}, float32", 75.0, fresh_key=fc),
        Workload("big-bf16", "state_dict", lambda: gpt2_state_dict(cfg, torch.bfloat16), mid, f"{gpt}, bfloat16",
                 fresh_key=fc),
        Workload("many-small", "state_dict", lambda: many_small(small), small_key,
                 f"{small} float32 tensors of 1-4 KB", 60.0, fresh_key=small_key),
        Workload("table", "table", lambda: table(rows), None,
                 f"DataFrame {rows:,} x 6 (int64, float64, str, category, datetime64, bool); str held as "
                 "Python strings, as pandas 3 holds it without pyarrow", 60.0),
        Workload("table-arrow", "table", lambda: table(rows, text="pyarrow"), None,
                 f"DataFrame {rows:,} x 6 as in table, str held in Arrow buffers, as pandas 3 holds it where pyarrow "
                 "is installed", 60.0),
        Workload("polars-logs", "polars", lambda: polars_logs(log_rows), None,
                 f"polars DataFrame {log_rows:,} x 19, like service logs (tz datetimes, categoricals, an Enum, "
                 "repetitive text, nulls, lists, a struct)", 60.0),
        Workload("configured-model", "model", lambda: build_configured_model(cfg), None,
                 f"ConfiguredModel wrapping the 'big' {gpt.split(', ', 1)[1]}", shape=cfg),
    ]  # fmt: skip
    return {w.name: w for w in items}


# --- the realistic polars frame ---------------------------------------------------------------------


def pa_list(offsets: np.ndarray, values: Any, valid: np.ndarray | None) -> Any:
    """A pyarrow large_list array of `values` cut at `offsets`, missing where `valid` is false."""
    import pyarrow as pa

    mask = None if valid is None else pa.array(~valid)
    return pa.LargeListArray.from_arrays(pa.array(offsets), values, mask=mask)


def polars_logs(rows: int):  # -> polars.DataFrame
    """A polars DataFrame shaped like service logs, 19 columns: tz-aware timestamps, categoricals and an
    Enum, repetitive text (hosts, paths, templated messages) beside unique request ids, nullable
    numbers, lists of tags and of ints, and a struct; values repeat as real logs do."""
    import polars as pl

    rng = np.random.default_rng(SEED)
    services = np.array(
        [f"svc-{name}" for name in ["auth", "billing", "search", "cart", "feed", "mail", "media", "geo", "ads", "chat"]]
    )
    hosts = np.array([f"host-{i:03d}.{dc}" for i in range(60) for dc in ("eu-west-1", "us-east-2")])
    paths = np.array([f"/api/v{v}/{r}/{a}" for v in (1, 2) for r in ("users", "orders", "items", "carts", "search")
                      for a in ("list", "get", "create", "update", "delete", "export", "import", "stats")])  # fmt: skip
    status = np.array([200, 200, 200, 200, 201, 204, 301, 304, 400, 401, 403, 404, 404, 500, 502, 503], np.int16)
    tags = ["cache-hit", "cache-miss", "retry", "slow", "auth", "beta", "mobile", "web"]
    start = np.datetime64("2025-03-01T00:00:00", "us")
    ts = start + np.cumsum(rng.integers(0, 2_000, rows)).astype("timedelta64[us]")
    svc = rng.integers(0, len(services), rows)
    path = rng.integers(0, len(paths), rows)
    code = status[rng.integers(0, len(status), rows)]
    latency = np.round(rng.lognormal(3.0, 0.5, rows))
    tag_pool = pl.Series(tags)
    ntags = rng.integers(0, 4, rows)
    tag_offsets = np.concatenate([[0], np.cumsum(ntags)]).astype(np.int64)
    tag_values = tag_pool.gather(rng.integers(0, len(tags), int(ntags.sum())))
    tag_lists = pl.Series(pa_list(tag_offsets, tag_values.to_arrow(), None))
    trace_len = rng.integers(0, 5, rows)
    trace_offsets = np.concatenate([[0], np.cumsum(trace_len)]).astype(np.int64)
    trace_vals = pl.Series(rng.integers(0, 50, int(trace_len.sum())).astype(np.int32))
    traces = pl.Series(pa_list(trace_offsets, trace_vals.to_arrow(), trace_len != 4))
    missing = rng.random(rows)
    levels = np.where(code >= 500, "ERROR", np.where(code >= 400, "WARN", np.where(missing < 0.1, "DEBUG", "INFO")))
    messages = np.char.add(np.char.add(np.char.add("handled ", paths[path]), " status="), code.astype(str))
    return pl.DataFrame(
        {
            "ts": pl.Series(ts).dt.replace_time_zone("UTC"),
            "ts_local": pl.Series(ts).dt.cast_time_unit("ms").dt.replace_time_zone("UTC").dt.convert_time_zone("Europe/Berlin"),
            "level": pl.Series(levels).cast(pl.Categorical),
            "service": pl.Series(services[svc]).cast(pl.Categorical),
            "host": hosts[rng.integers(0, len(hosts), rows)],
            "region": pl.Series(np.array(["eu", "us", "ap", "sa", "af"])[svc % 5]).cast(pl.Enum(["eu", "us", "ap", "sa", "af"])),
            "request_id": np.char.add("req-", (np.arange(rows) + 7_340_000).astype("U9")),
            "user_id": pl.Series(rng.integers(1, 2_000, rows)).set(pl.Series(missing < 0.2), None),
            "status": code,
            "latency_ms": pl.Series(latency).set(pl.Series(missing > 0.97), None),
            "bytes": (code.astype(np.int64) % 7 + path % 11) * 512,
            "path": paths[path],
            "message": messages,
            "tags": tag_lists,
            "retries": pl.Series(rng.integers(0, 3, rows).astype(np.int8)).set(pl.Series(missing > 0.9), None),
            "ok": code < 400,
            "client": pl.DataFrame({
                "agent": np.array(["curl/8", "python-requests/2", "Mozilla/5.0", "okhttp/4"])[svc % 4],
                "version": np.array(["1.0.3", "1.1.0", "2.0.0-beta"])[path % 3],
                "debug": missing < 0.05,
            }).to_struct(),
            "trace": traces,
            "session_start": pl.Series(ts - np.timedelta64(3_600_000_000, "us")).dt.cast_time_unit("ns")
            .dt.replace_time_zone("UTC").dt.convert_time_zone("America/New_York")
            .set(pl.Series(missing < 0.3), None),
        }
    )  # fmt: skip
