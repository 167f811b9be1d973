"""The values stored in the example archives (make_examples.py), built without randomness.

Also used by tests/test_spec.py to make fresh archives whose manifests are checked against the
schemas. The classes come from tests/golden_models.py (tests must import them to read the archives).
"""

from __future__ import annotations

import datetime as dt
import decimal
import pathlib
import random
import struct
import uuid
import zoneinfo
from collections import OrderedDict, defaultdict
from pathlib import Path
from typing import Any

import golden_models as gm
import numpy as np
import pandas as pd
import torch

import zarchive


def noise(n: int, seed: int) -> np.ndarray:
    """`n` random-looking float32 in [0, 1) from SplitMix64 (same bits on every platform and version)."""
    x = (np.arange(n, dtype=np.uint64) + np.uint64(seed)) * np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return ((x >> np.uint64(40)).astype(np.float32) / np.float32(1 << 24)).astype(np.float32)


def fill_deterministic(model: torch.nn.Module) -> torch.nn.Module:
    """Give every floating parameter and buffer fixed values (module init draws random numbers)."""
    with torch.no_grad():
        for i, t in enumerate([*model.parameters(), *model.buffers()]):
            if t.is_floating_point():
                t.copy_(torch.from_numpy(noise(t.numel(), 1000 * i)).reshape(t.shape) - 0.5)
    return model


def _nan(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def json_values() -> dict[str, Any]:
    return {
        "text": "hello",
        "unicode": "h\u00e9llo \u2713 \U0001d11e",
        "empty": "",
        "true": True,
        "false": False,
        "none": None,
        "ints": [0, 1, -1, 2**53, -(2**53), 123456789],
        "floats": [0.0, -0.0, 1.5, 1e-07, 1e300, -2.5e-300, 0.1],
        "nested": {"list": [[1, [2, []]], {}], "dict": {"a": {"b": {"c": [None]}}}},
        "key/with~odd chars": 1,
    }


def python_types() -> dict[str, Any]:
    sd_like: OrderedDict[str, Any] = OrderedDict([("w", 1), ("b", 2)])
    sd_like._metadata = {"": {"version": 1}}  # type: ignore[attr-defined]
    return {
        "big_int": 2**64 + 1,
        "neg_big_int": -(2**70),
        "nan": float("nan"),
        "nan_payload": _nan(0x7FF8000000000001),
        "neg_nan": _nan(0xFFF8000000000000),
        "inf": float("inf"),
        "neg_inf": float("-inf"),
        "long_strings": ["a", "b", "c", "d", "e\nf"],
        "long_scalars": [1, 2.5, None, True, "x"],
        "long_nodes": [1, (2, 3), {4}, 2**60, float("nan"), [5, 6]],
        "long_with_member": [np.arange(257, dtype=np.uint8), 1, 2, 3, 4],
        "tuple": (1, "two", 3.0),
        "long_tuple": tuple(range(10)),
        "empty_tuple": (),
        "nested_tuple": ((1, 2), ((3,),)),
        "set": {3, 1, 2},
        "frozenset": frozenset({"b", "a"}),
        "mixed_set": {1, "a", (2, 3)},
        "empty_set": set(),
        "int_keys": {1: "a", 2: "b"},
        "tuple_keys": {(1, "a"): 1, (2, "b"): 2},
        "dollar_keys": {"$type": "not a node", "$ref": 1},
        "mixed_keys": {None: 1, True: 2, 1.5: 3, float("inf"): 4, 2**60: 5, "s": 6},
        "ordered": OrderedDict([("b", 1), ("a", 2)]),
        "ordered_int_keys": OrderedDict([(2, "x"), (1, "y")]),
        "defaultdict": defaultdict(list, {"a": [1]}),
        "defaultdict_none": defaultdict(None, {1: 2}),
        "state_dict_like": sd_like,
        "bytes": b"\x00\x01binary\xff",
        "empty_bytes": b"",
        "bytearray": bytearray(b"abc"),
        "long_bytes": bytes(range(256)) * 16 + b"!",
        "long_bytearray": bytearray(noise(1025, 7).tobytes()[:4097]),
        "complex": 1 + 2j,
        "complex_special": complex(float("inf"), float("nan")),
        "datetime_naive": dt.datetime(2024, 2, 29, 13, 45, 30, 123456),
        "datetime_zone": dt.datetime(2024, 10, 27, 2, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"), fold=1),
        "datetime_utc": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
        "datetime_offset": dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
        "datetime_offset_named": dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-5), "EST")),
        "date": dt.date(1999, 12, 31),
        "time": dt.time(23, 59, 59, 999999),
        "time_tz": dt.time(8, 0, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
        "timedelta": dt.timedelta(days=-1, seconds=5, microseconds=7),
        "paths": [
            pathlib.PurePosixPath("a/b.txt"),
            pathlib.PureWindowsPath("C:\\data\\x.csv"),
            pathlib.PosixPath("/tmp/x"),
        ],
        "enum": gm.Color.GREEN,
        "int_enum": gm.Level.HIGH,
        "flag": gm.Perm.R | gm.Perm.W,
        "flag_single": gm.Perm.X,
        "decimal": decimal.Decimal("3.14159265358979323846264338327950288"),
        "decimal_snan": decimal.Decimal("-sNaN"),
        "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    }


def _object_array(items: list[Any], shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    for i, x in enumerate(items):
        out[i] = x
    return out.reshape(shape)


def numpy_arrays() -> dict[str, Any]:
    shared = np.arange(260, dtype=np.uint8)
    return {
        "int64": np.arange(6, dtype=np.int64).reshape(2, 3),
        "uint64_big": np.array([2**64 - 1, 0], dtype=np.uint64),
        "bool": np.array([True, False]),
        "int32_big_endian": np.array([1, -2, 3], dtype=">i4"),
        "float32": np.array([0.5, -1.25], dtype=np.float32),
        "float16": np.array([1.5, 65504], dtype=np.float16),
        "float64_nonfinite": np.array([1.0, np.nan, np.inf, -np.inf]),
        "complex128": np.array([1 + 2j, -0.5j]),
        "datetime64": np.array(["2024-01-01T00:00:00.000000001", "NaT"], dtype="M8[ns]"),
        "timedelta64": np.array([1, -2], dtype="m8[s]"),
        "unicode": np.array(["a", "h\u00e9llo"]),
        "bytes": np.array([b"ab", b"c"]),
        "fortran_inline": np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)),
        "empty": np.zeros((2, 0, 3), dtype=np.float32),
        "zero_d": np.array(7.5),
        "object": _object_array([1, "two", None, (3, 4)], (4,)),
        "object_2d": _object_array([1.5, [1], {"a": 1}, np.float32(2)], (2, 2)),
        "npy_float32": noise(260, 1),
        "npy_int32": np.arange(300, dtype=np.int32),
        "npy_fortran": np.asfortranarray(np.arange(300, dtype=np.int16).reshape(15, 20)),
        "npy_big_endian": np.arange(300, dtype=">u2"),
        "shared_a": shared,
        "shared_b": shared,
        "scalars": {
            "f32": np.float32(1.5),
            "f64_nan": np.float64("nan"),
            "i64": np.int64(-3),
            "u64": np.uint64(2**64 - 1),
            "bool": np.bool_(True),
            "c64": np.complex64(1 - 1j),
            "str": np.str_("h\u00e9llo"),
            "bytes": np.bytes_(b"ab"),
            "dt64": np.datetime64("2024-01-01", "D"),
            "td64": np.timedelta64(5, "ms"),
        },
        "dtypes": [np.dtype("<f4"), np.dtype(">i2"), np.dtype("M8[ns]"), np.dtype("U3"), np.dtype(object)],
    }


def torch_tensors() -> dict[str, Any]:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    small = torch.arange(6, dtype=torch.float64).reshape(2, 3) - 2.5
    return {
        "weights": {
            "f32": torch.from_numpy(noise(256, 2)).reshape(16, 16),
            "f64": small,
            "f16": small.to(torch.float16),
            "bf16": small.to(torch.bfloat16),
            "i64": torch.arange(5, dtype=torch.int64) - 2,
            "i32": torch.arange(5, dtype=torch.int32) * -7,
            "i16": torch.arange(5, dtype=torch.int16),
            "i8": torch.arange(5, dtype=torch.int8) - 3,
            "u8": torch.arange(5, dtype=torch.uint8) * 50,
            "u16": torch.arange(3, dtype=torch.int32).to(torch.uint16),
            "u32": torch.arange(3, dtype=torch.int64).to(torch.uint32),
            "u64": torch.arange(3, dtype=torch.int64).to(torch.uint64),
            "bool": torch.tensor([True, False, True]),
            "c64": torch.complex(small.float(), -small.float()),
        },
        "raw_bytes": {
            "complex128": torch.complex(small, small * 2),
            "float8_e4m3fn": small.to(torch.float8_e4m3fn),
            "float8_e5m2": small.to(torch.float8_e5m2),
        },
        "views": {"base": base, "row": base[1], "column": base[:, 2], "transposed": base.t(), "again": base},
        "param": torch.nn.Parameter(torch.ones(3)),
        "param_frozen": torch.nn.Parameter(torch.zeros(2), requires_grad=False),
        "requires_grad": torch.zeros(2, requires_grad=True),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 3),
        "noncontiguous": torch.arange(12, dtype=torch.int16).reshape(3, 4).t(),
        "device": torch.device("cuda:1"),
        "dtype": torch.bfloat16,
        "size": torch.Size([2, 3]),
    }


def tensor_root() -> torch.Tensor:
    return torch.arange(8, dtype=torch.float32).reshape(2, 4)


def pandas_values() -> dict[str, Any]:
    n = 6
    rows = pd.MultiIndex.from_arrays([["a", "a", "b", "b", "c", "c"], [1, 2, 1, 2, 1, 2]], names=["group", "rep"])
    frame = pd.DataFrame(
        {
            "int": np.arange(n, dtype=np.int64),
            "float": np.linspace(0.0, 1.0, n),
            "str": pd.array(["x", "y", None, "z", "w\u00e9", "v"], dtype="str"),
            "string": pd.array(["p", None, "q", "r", "s", "t"], dtype="string"),
            "object": pd.array([1, "a", None, 2.5, (1, 2), np.nan], dtype=object),
            "category": pd.Categorical(
                ["lo", "hi", "lo", "mid", "hi", "lo"], categories=["lo", "mid", "hi"], ordered=True
            ),
            "nullable_int": pd.array([1, None, 3, 4, None, 6], dtype="Int64"),
            "nullable_bool": pd.array([True, False, None, True, True, False], dtype="boolean"),
            "datetime": pd.date_range("2024-01-01", periods=n, freq="D"),
            "datetime_tz": pd.date_range("2024-03-30", periods=n, freq="12h", tz="Europe/Paris"),
            "timedelta": pd.to_timedelta(np.arange(n), unit="s"),
            "period": pd.period_range("2024-01", periods=n, freq="M"),
        },
        index=rows,
    )
    frame.attrs = {"source": "make_examples"}
    wide = pd.DataFrame(
        np.arange(8, dtype=np.float32).reshape(2, 4),
        columns=pd.MultiIndex.from_product([["x", "y"], [0, 1]]),
        index=pd.Index(["r1", "r2"], name="row"),
    )
    return {
        "frame": frame,
        "wide": wide,
        "series": pd.Series([1.5, 2.5, np.nan], index=pd.Index([10, 20, 30], name="k"), name="s"),
        "indexes": {
            "range": pd.RangeIndex(2, 20, 3, name="r"),
            "datetime": pd.date_range("2024-01-01", periods=3, freq="h", name="t"),
            "timedelta": pd.timedelta_range("1s", periods=3, freq="s"),
            "categorical": pd.CategoricalIndex(["a", "b", "a"]),
            "period": pd.period_range("2024Q1", periods=3, freq="Q"),
            "object": pd.Index([1, "a", None], dtype=object),
        },
        "scalars": [
            pd.Timestamp("2024-01-01 12:00:00.000000001"),
            pd.Timestamp("2024-06-01 12:00", tz="Europe/Paris"),
            pd.Timedelta("1 days 00:00:01.5"),
            pd.Period("2024-05", freq="M"),
            pd.NaT,
            pd.NA,
        ],
    }


def pandas_more() -> dict[str, Any]:
    """Layouts the main frame does not use: duplicate and empty labels, flags, object text with NaN,
    arrays saved on their own, a dateutil fixed-offset zone, Series attrs."""
    import dateutil.tz

    frame = pd.DataFrame([[1, 2.5, "x"], [3, 4.5, "y"]], columns=["a", "a", ""])
    strict = pd.DataFrame({"k": [1, 2]}).set_flags(allows_duplicate_labels=False)
    series = pd.Series(["p", np.nan, "q"], dtype=object, name=("tuple", "name"))
    series.attrs = {"unit": "m"}
    offset = dateutil.tz.tzoffset("XST", 3600)
    return {
        "duplicate_labels": frame,
        "strict_flags": strict,
        "object_text_nan": series,
        "object_text_none": pd.Series(["a", None, "b"], dtype=object),
        "numpy_layout": pd.array([1, 2, 3], dtype=np.dtype("int64")),
        "naive_datetime_array": pd.array(np.array(["2024-01-01", "NaT"], dtype="M8[ns]")),
        "nullable_float": pd.array([0.5, None], dtype="Float32"),
        "zone_dateutil": pd.Series(pd.to_datetime(["2024-01-01 00:00", None]).tz_localize(offset)),
        "timestamp_dateutil": pd.Timestamp("2024-01-01 12:00", tz=offset),
        "empty_frame": pd.DataFrame({"x": pd.Series([], dtype="float64"), "s": pd.Series([], dtype="string")}),
    }


def configured_model_nested() -> dict[str, Any]:
    return {"model": tiny_net(), "step": 3}


def registered_class() -> dict[str, Any]:
    return {"point": gm.GoldenRenamedPoint(1, 2), "points": [gm.GoldenRenamedPoint(3)]}


def dataclasses_values() -> dict[str, Any]:
    return {
        "config": gm.TrainConfig(
            name="golden",
            lr=3e-4,
            layers=[2, 4, 8],
            weights=np.arange(300, dtype=np.float32) / 7,
            start=gm.Point(1.0, -2.0),
            color=gm.Color.GREEN,
        ),
        "record": gm.Record(step=3, loss=0.25, where=gm.Point(0.5, 0.5), tags=("a", "b")),
        "pair": gm.Pair(1),
        "span": gm.Span(start=0, stop=10),
        "records": [gm.Point(float(i), -float(i)) for i in range(3)],
    }


def tiny_net() -> gm.TinyNet:
    model = fill_deterministic(gm.TinyNet(gm.NetConfig()))
    with torch.no_grad():
        model.bn.num_batches_tracked.fill_(7)
    return model


def exports_input() -> torch.Tensor:
    """The example input the `exports_model` example's exports were checked on."""
    return torch.linspace(-2.0, 2.0, 8).reshape(2, 4)


def write_exports(model: gm.TinyNet, path: Path, settings: dict[str, Any]) -> None:
    zarchive.save(model, path, export=("onnx", "torchscript"), example_inputs=(exports_input(),), **settings)


def records_model() -> gm.TinyNet:
    """Format 1.3: a ConfiguredModel with training_records (losses and a step count, as ZANJ users
    keep them)."""
    model = tiny_net()
    model.training_records = {"loss": [0.75, 0.5, 0.25], "steps": 300, "best": {"epoch": 2, "acc": 0.875}}
    return model


def tied_net() -> gm.TiedNet:
    model = fill_deterministic(gm.TiedNet(gm.NetConfig(d_in=5, d_hidden=6, n_classes=4)))
    model.drop.eval()
    return model


def checkpoint_parts() -> dict[str, Any]:
    model = fill_deterministic(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.125)
    optimizer.step()
    scheduler.step()
    metrics = pd.DataFrame({"epoch": [0, 1], "loss": [0.75, 0.5]})
    return {"model": model, "optimizer": optimizer, "scheduler": scheduler, "epoch": 1, "metrics": metrics}


def write_checkpoint(parts: dict[str, Any], path: Path, settings: dict[str, Any]) -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    zarchive.save_checkpoint(
        path,
        parts["model"],
        parts["optimizer"],
        parts["scheduler"],
        za=zarchive.ZArchive(**settings),
        epoch=parts["epoch"],
        metrics=parts["metrics"],
    )


ALL = {
    "json_values": json_values,
    "python_types": python_types,
    "numpy_arrays": numpy_arrays,
    "torch_tensors": torch_tensors,
    "tensor_root": tensor_root,
    "pandas_values": pandas_values,
    "dataclasses_values": dataclasses_values,
    "pandas_more": pandas_more,
    "configured_model_nested": configured_model_nested,
    "registered_class": registered_class,
    "tiny_net": tiny_net,
    "tied_net": tied_net,
}


def tensor_tables() -> dict[str, Any]:
    """Format 1.1 tensor tables: a plain dict of 70 tensors of several dtypes, a model's state dict
    (an OrderedDict with per-module versions and a tied weight, so one row names another key), and
    a nested dict (rows record their member key); a 63-tensor dict stays one node per tensor."""
    dtypes = [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool, torch.float16, torch.complex128]
    flat = {
        f"t{i}": torch.arange(i % 7 + 1, dtype=torch.float64).reshape(-1, 1).mul(i - 30).to(dtypes[i % 7])
        for i in range(70)
    }
    model = fill_deterministic(torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(33)]))
    state = model.state_dict()
    state["32.weight"] = state["0.weight"]  # tied: one object under two names (it reads back so)
    small = {f"s{i}": torch.full((2,), float(i)) for i in range(63)}
    return {"flat": flat, "model": state, "run": {"weights": flat}, "small": small}


def tensor_tables_split() -> dict[str, Any]:
    """Format 1.2: tensor groups of more than 256 entries fill several members, and a dict's tensor
    table becomes a list of tables. A 280-tensor state dict whose last weight is tied to the first
    (that row points back into the first member), and 300 int64 tensors (compressed members)."""
    model = fill_deterministic(torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(140)]))
    state = model.state_dict()
    state["139.weight"] = state["0.weight"]
    counts = {f"c{i}": torch.full((16,), i - 150, dtype=torch.int64) for i in range(300)}
    return {"model": state, "counts": counts}


def small_members() -> dict[str, Any]:
    """Format 1.6: uncompressed .safetensors members of at most 1 MiB record no checksum entries (they
    are checked whole). A 300-tensor state dict of float32 tensors of 2 to 48 values (two members,
    a tensor table split over them) beside a tensor that is not in a table (member tensors.safetensors)
    and int64 counts that compress (their member is zstd, which never has entries)."""
    model = fill_deterministic(torch.nn.Sequential(*[torch.nn.Linear(4, 2 + i % 6) for i in range(150)]))
    counts = torch.arange(64, dtype=torch.int64).repeat(8)
    return {"model": model.state_dict(), "lone": torch.linspace(-1.0, 1.0, 33), "counts": counts}


def columns_text() -> dict[str, Any]:
    """Format 1.3: text columns in Arrow's string layout ("utf8": offsets, a UTF-8 data member, a
    validity array where values are missing): str with NaN, string with NA, an object column of str
    with None, non-ASCII text, empty strings, a column with no missing value, a Series on its own."""
    words = ["alpha", "Grüße", "日本語", "", "emoji 🎉", 'say "hi"', "new\nline", "\x00nul"]
    text = [f"{words[i % len(words)]}{i}" if i % 7 else "" for i in range(12)]
    with_missing = [None if i % 5 == 0 else t for i, t in enumerate(text)]
    frame = pd.DataFrame(
        {
            "str": pd.array(with_missing, dtype="str"),
            "string": pd.array(with_missing, dtype="string"),
            "object": pd.Series(with_missing, dtype=object),
            "full": pd.array(text, dtype="str"),
            "n": np.arange(12, dtype=np.int64),
        }
    )
    return {"frame": frame, "series": pd.Series(pd.array(text[::-1], dtype="string"), name="rev")}


def columns_dict() -> dict[str, Any]:
    """Format 1.4: text columns that repeat values, stored with a dictionary ("dict": the distinct
    values in Arrow's string layout plus integer codes, -1 where missing): str with NaN, string with
    NA, object columns with None and with NaN, non-ASCII and empty strings, a repeated text index, and
    a Series of 300 distinct values over 600 rows (int16 codes)."""
    words = ["alpha", "Grüße", "日本語", "", "emoji 🎉", 'say "hi"', "new\nline", "\x00nul"]
    text = [words[(i * 3) % len(words)] for i in range(40)]
    with_missing = [None if i % 9 == 4 else t for i, t in enumerate(text)]
    index = pd.Index([f"row{i % 4}" for i in range(40)], dtype="str", name="group")
    frame = pd.DataFrame(
        {
            "str": pd.array(with_missing, dtype="str"),
            "string": pd.array(with_missing, dtype="string"),
            "object": pd.Series(with_missing, dtype=object, index=index),
            "object_nan": pd.Series([np.nan if t is None else t for t in with_missing], dtype=object, index=index),
            "n": np.arange(40, dtype=np.int64),
        },
        index=index,
    )
    wide = pd.Series(pd.array([f"key {i % 300}" for i in range(600)], dtype="string"), name="wide")
    return {"frame": frame, "wide": wide}


def columns_polars() -> dict[str, Any]:
    """Format 1.3: polars DataFrame and Series (spec/polars.md), one column of each supported dtype,
    nulls in each, text in Arrow's string layout (long columns) and inline (short ones)."""
    import datetime as dt

    import polars as pl

    def rep(values: list[Any], n: int = 8) -> list[Any]:
        return (values * n)[:n]

    frame = pl.DataFrame(
        [
            pl.Series("i8", rep([-128, None, 127]), dtype=pl.Int8),
            pl.Series("u64", rep([2**64 - 1, None, 0]), dtype=pl.UInt64),
            pl.Series("f32", rep([1.5, None, float("-inf")]), dtype=pl.Float32),
            pl.Series("f64", rep([-0.0, None, 1e300]), dtype=pl.Float64),
            pl.Series("bool", rep([True, None, False]), dtype=pl.Boolean),
            pl.Series("str", rep(["Grüße 🎉", None, ""]), dtype=pl.String),
            pl.Series("cat", rep(["x", None, "y"]), dtype=pl.Categorical),
            pl.Series("enum", rep(["b", None, "a"]), dtype=pl.Enum(["a", "b", "c"])),
            pl.Series("date", rep([dt.date(2024, 2, 29), None, dt.date(1969, 12, 31)]), dtype=pl.Date),
            pl.Series("time", rep([dt.time(1, 2, 3, 4), None, dt.time(23, 59)]), dtype=pl.Time),
            pl.Series("dt_tz", rep([dt.datetime(2024, 3, 31, 2, 30), None, dt.datetime(1900, 1, 1)]),
                      dtype=pl.Datetime("ns", "Europe/Paris")),
            pl.Series("dt", rep([dt.datetime(2024, 1, 1, 0, 0, 0, 1000), None, dt.datetime(1970, 1, 1)]),
                      dtype=pl.Datetime("ms")),
            pl.Series("dur", rep([dt.timedelta(days=-3), None, dt.timedelta(microseconds=1)]), dtype=pl.Duration("us")),
            pl.Series("list", rep([[1, None], [], None]), dtype=pl.List(pl.Int32)),
            pl.Series("struct", rep([{"a": 1, "b": "x"}, None, {"a": None, "b": "y"}]),
                      dtype=pl.Struct({"a": pl.Int64, "b": pl.String})),
            pl.Series("null", [None] * 8, dtype=pl.Null),
        ]
    )  # fmt: skip
    return {"frame": frame, "text": pl.Series("text", rep(["alpha", None, "日本語", ""], 40), dtype=pl.String)}


def _weights(n: int, seed: int) -> torch.Tensor:
    """`n` float32 weights spread like a trained layer's (|w| mostly below 0.05), from noise()."""
    u = torch.from_numpy(noise(n, seed)).double()
    return ((u - 0.5) * 0.1 * (u - 0.5).abs().add(0.05)).float()


def _random_floats(n: int, seed: int) -> torch.Tensor:
    """float32 of random bits (SplitMix64 as in noise(); bit 30 cleared: finite, exponents below 128):
    byte planes that barely compress."""
    x = (np.arange(n, dtype=np.uint64) + np.uint64(seed)) * np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    bits = (x >> np.uint64(32)).astype(np.uint32) & np.uint32(0xBFFFFFFF)
    return torch.from_numpy(bits.view(np.float32).copy())


def compressed_weights() -> dict[str, Any]:
    """Format 1.3: float tensors and arrays stored byte-grouped in chunks (codec bgzstd), saved with
    compress_weights=True: bfloat16, float16, float32, float32 holding bfloat16 values, float64,
    complex64 beside an int64 tensor in one member; 40 small tensors sharing a chunk; a tensor of
    2.4 MB filling two chunks; a float32 numpy array (.npy.bgz); and a float32 tensor of noise whose
    sample does not shrink enough, which stays uncompressed."""
    w = _weights(4096, 7)
    layers = {
        "bf16": w.bfloat16().reshape(64, 64),
        "f16": w.half().reshape(64, 64),
        "f32": w.reshape(64, 64),
        "f32_from_bf16": w.bfloat16().float().reshape(64, 64),
        "f64": w.double()[:1024],
        "c64": torch.complex(w[:512], w[512:1024]),
        "steps": torch.arange(300, dtype=torch.int64),
    }
    small = {f"p{i}": _weights(100, 100 + i) for i in range(40)}
    return {
        "layers": layers,
        "small": small,
        "big": {"ramp": torch.arange(600_000, dtype=torch.float32).div(1024.0).floor()},
        "array": _weights(5000, 11).numpy(),
        "noise": {"raw": _random_floats(4096, 99)},
    }


def compressed_checkpoint_parts() -> dict[str, Any]:
    """A save_checkpoint(compress_weights=True) of a small MLP and its Adam state after two steps."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(_weights(p.numel(), 500 + i).reshape(p.shape))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for step in range(2):
        for i, p in enumerate(model.parameters()):
            p.grad = _weights(p.numel(), 700 + 10 * step + i).reshape(p.shape)
        optimizer.step()
    return {"model": model, "optimizer": optimizer, "epoch": 2}


def write_compressed_checkpoint(parts: dict[str, Any], path: Path, settings: dict[str, Any]) -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    zarchive.save_checkpoint(
        path, parts["model"], parts["optimizer"], za=zarchive.ZArchive(**settings), epoch=parts["epoch"]
    )


def class_facts() -> dict[str, Any]:
    """Format 1.5: what a reader without the classes needs, recorded by the writer: Enum members with
    their plain values beside their names (Enum, IntEnum, a Flag member), Flag combinations with their
    member names (one of two members, and the empty one), and two models with their modules,
    parameters (requires_grad) and buffers (persistent, and not)."""
    return {
        "enums": [gm.Color.GREEN, gm.Color.RED, gm.Level.HIGH, gm.Perm.X, gm.Perm.R | gm.Perm.W, gm.Perm(0)],
        "tied": tied_net(),
        "tiny": tiny_net(),
    }


def columns_arrow() -> dict[str, Any]:
    """Format 1.5: columns in Arrow's buffer layout (`arrow.array`, spec/pandas.md 5.4): a pandas frame of
    ArrowDtype columns (int64, bool, double with NaN, large_string, string, a zoned timestamp,
    a list, a struct, a dictionary; every one with a missing value) on an ArrowDtype index, and a polars
    frame (String, Categorical, Enum, a zoned Datetime, List, Struct, Int16 with nulls)."""
    import datetime as dt

    import polars as pl
    import pyarrow as pa

    def rep(values: list[Any], n: int = 12) -> list[Any]:
        return (values * n)[:n]

    def col(values: list[Any], t: Any) -> Any:
        return pd.array(rep(values), dtype=pd.ArrowDtype(t))

    frame = pd.DataFrame(
        {
            "int": col([-(2**63), None, 7], pa.int64()),
            "bool": col([True, None, False], pa.bool_()),
            "double": col([1.5, None, float("nan")], pa.float64()),
            "large_string": col(["Grüße 🎉", None, ""], pa.large_string()),
            "string": col(["a", "b", None], pa.string()),
            "when": col([dt.datetime(2024, 3, 31, 1, 30, tzinfo=dt.UTC), None, dt.datetime(1900, 1, 1, tzinfo=dt.UTC)],
                        pa.timestamp("us", tz="Europe/Paris")),
            "list": col([[1, None], [], None], pa.list_(pa.int32())),
            "struct": col([{"a": 1, "b": "x"}, None, {"a": None, "b": "y"}],
                          pa.struct([("a", pa.int64()), ("b", pa.string())])),
            "dictionary": pd.Series(pa.array(rep(["red", None, "blue", "red"])).dictionary_encode(),
                                    dtype=pd.ArrowDtype(pa.dictionary(pa.int32(), pa.string()))).array,
        },
        index=pd.Index(range(12), dtype=pd.ArrowDtype(pa.int32())),
    )  # fmt: skip
    polars_frame = pl.DataFrame(
        [
            pl.Series("str", rep(["Grüße 🎉", None, ""]), dtype=pl.String),
            pl.Series("cat", rep(["x", None, "y"]), dtype=pl.Categorical),
            pl.Series("enum", rep(["b", None, "a"]), dtype=pl.Enum(["a", "b", "c"])),
            pl.Series("dt_tz", rep([dt.datetime(2024, 3, 31, 2, 30), None, dt.datetime(1900, 1, 1)]),
                      dtype=pl.Datetime("us", "Asia/Tokyo")),
            pl.Series("list", rep([["p", None], [], None]), dtype=pl.List(pl.String)),
            pl.Series("struct", rep([{"a": 1.5, "b": True}, None, {"a": None, "b": None}]),
                      dtype=pl.Struct({"a": pl.Float64, "b": pl.Boolean})),
            pl.Series("i16", rep([-1, None, 300]), dtype=pl.Int16),
        ]
    )  # fmt: skip
    return {"frame": frame, "polars": polars_frame}
