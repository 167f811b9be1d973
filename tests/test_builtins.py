"""Exact round-trips of JSON values, Python containers, standard-library value types, numpy scalars and
dtypes, and torch's small value types (device, dtype, Size), alone and nested (hypothesis)."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import json
import math
import pathlib
import struct
import uuid
import zoneinfo
from collections import OrderedDict, defaultdict
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import zarchive


class Color(enum.Enum):
    RED = "red"
    BLUE = 2


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 10


class Perm(enum.Flag):
    R = 4
    W = 2
    X = 1


NY = zoneinfo.ZoneInfo("America/New_York")
LONG = 300  # above the default external_list_threshold (256)

CASES: dict[str, Any] = {
    # JSON scalars
    "str-unicode": "héllo wörld ✓ 𝄞 日本",
    "str-newlines": 'line1\nline2\r\n\ttab "quoted" \\ back\x00nul',
    "str-empty": "",
    "str-dollar": "$type",
    "int-zero": 0,
    "int-2**53": 2**53,
    "int-2**53+1": 2**53 + 1,
    "int-2**100": 2**100,
    "int--2**64": -(2**64),
    "int-huge": 7**500,
    "float": 0.1,
    "float-tiny": 5e-324,
    "float-max": 1.7976931348623157e308,
    "float-nan": float("nan"),
    "float-nan-payload": struct.unpack("<d", bytes.fromhex("0100000000f8ff7f"))[0],
    "float-neg-nan": -float("nan"),
    "float-inf": float("inf"),
    "float--inf": float("-inf"),
    "float--0.0": -0.0,
    "bool-true": True,
    "bool-false": False,
    "none": None,
    # containers
    "list-empty": [],
    "list-short": [1, "a", None, 2.5, True],
    "list-long-ints": list(range(LONG)),
    "list-long-strs": [f"s{i}\n" for i in range(LONG)],
    "list-long-mixed": [i if i % 3 else (i, float("nan"), {"k": -0.0}) for i in range(LONG)],
    "list-long-nested-lists": [[i, [i]] for i in range(LONG)],
    "tuple-empty": (),
    "tuple": (1, "two", (3.0, None)),
    "tuple-long": tuple(range(LONG)),
    "tuple-long-of-tuples": tuple((i, str(i)) for i in range(LONG)),
    "dict-empty": {},
    "dict-plain": {"a": 1, "b": [1, 2], "c": {"d": None}},
    "dict-int-keys": {3: "c", 1: "a", 2: "b"},
    "dict-big-int-keys": {2**70: 1, -(2**70): 2},
    "dict-tuple-keys": {(1, 2): "a", ("x", (3,)): "b"},
    "dict-mixed-keys": {1: "int", "1": "str", (1,): "tuple", None: "none", 1.5: "float", False: "bool"},
    "dict-dollar-keys": {"$type": "not a node", "$ref": "nope", "a": 1},
    "dict-frozenset-key": {frozenset({1, 2}): 3},
    "dict-order": {"z": 1, "a": 2, "m": 3},
    "ordereddict": OrderedDict([("b", 1), ("a", 2)]),
    "ordereddict-int-keys": OrderedDict([(2, "b"), (1, "a")]),
    "defaultdict-list": defaultdict(list, {"a": [1]}),
    "defaultdict-none": defaultdict(None, {1: 2}),
    "defaultdict-int": defaultdict(int, {"x": 3}),
    "set": {3, 1, 2},
    "set-mixed": {1, "a", (2, 3), None},
    "set-empty": set(),
    "frozenset": frozenset({"a", "b"}),
    "set-of-frozensets": {frozenset({1}), frozenset({2, 3})},
    "bytes-empty": b"",
    "bytes": b"\x00\xff binary \n",
    "bytes-large": bytes(range(256)) * 20,
    "bytearray": bytearray(b"abc"),
    "bytearray-large": bytearray(b"x" * 5000),
    "complex": 1.5 - 2j,
    "complex-nan-inf": complex(float("nan"), float("-inf")),
    "complex--0": complex(-0.0, -0.0),
    # date and time
    "datetime-naive": dt.datetime(2024, 2, 29, 23, 59, 58, 123456),
    "datetime-utc": dt.datetime(2020, 1, 1, 12, tzinfo=dt.UTC),
    "datetime-zoneinfo": dt.datetime(2023, 7, 1, 9, 30, tzinfo=NY),
    "datetime-fold": dt.datetime(2021, 11, 7, 1, 30, tzinfo=NY, fold=1),
    "datetime-fold-naive": dt.datetime(2021, 11, 7, 1, 30, fold=1),
    "datetime-fixed-offset": dt.datetime(2020, 5, 5, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
    "datetime-named-offset": dt.datetime(2020, 5, 5, tzinfo=dt.timezone(-dt.timedelta(hours=3), "BRT")),
    "datetime-min": dt.datetime.min,
    "datetime-max": dt.datetime.max,
    "date": dt.date(1999, 12, 31),
    "time": dt.time(13, 14, 15, 16),
    "time-tz": dt.time(1, 2, tzinfo=dt.timezone(dt.timedelta(seconds=-3600))),
    "timedelta": dt.timedelta(days=-3, seconds=5, microseconds=7),
    "timedelta-max": dt.timedelta.max,
    # paths, enums, decimal, uuid
    "path": pathlib.Path("some/dir/file.txt"),
    "path-absolute": pathlib.Path("/abs/ünï"),
    "pureposixpath": pathlib.PurePosixPath("/a/b"),
    "purewindowspath": pathlib.PureWindowsPath(r"C:\Users\x"),
    "enum": Color.RED,
    "enum-int-value": Color.BLUE,
    "intenum": Level.HIGH,
    "flag": Perm.R,
    "flag-combined": Perm.R | Perm.W,
    "flag-empty": Perm(0),
    "decimal": decimal.Decimal("1.10"),
    "decimal-exp": decimal.Decimal("-1.2345678901234567890123456789E-400"),
    "decimal-nan": decimal.Decimal("NaN"),
    "decimal-snan": decimal.Decimal("-sNaN123"),
    "decimal-inf": decimal.Decimal("-Infinity"),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    # numpy dtypes, torch value types
    "np.dtype-f8": np.dtype("float64"),
    "np.dtype->f8": np.dtype(">f8"),
    "np.dtype-U5": np.dtype("U5"),
    "np.dtype-S3": np.dtype("S3"),
    "np.dtype-M8[ns]": np.dtype("M8[ns]"),
    "np.dtype-object": np.dtype(object),
    "np.dtype-bool": np.dtype(bool),
    "torch.device-cpu": torch.device("cpu"),
    "torch.device-cuda:1": torch.device("cuda", 1),
    "torch.device-meta": torch.device("meta"),
    "torch.dtype-bfloat16": torch.bfloat16,
    "torch.dtype-float8": torch.float8_e4m3fn,
    "torch.dtype-int64": torch.int64,
    "torch.Size": torch.Size([2, 3, 0]),
    "torch.Size-empty": torch.Size([]),
}


@pytest.mark.parametrize("obj", list(CASES.values()), ids=list(CASES))
def test_value_round_trips_exactly(obj: Any, check_roundtrip) -> None:
    check_roundtrip(obj)


def test_all_cases_nested_in_one_archive(check_roundtrip) -> None:
    """Everything at once: members from many handlers in one archive, under dict/list/tuple parents."""
    check_roundtrip({"dict": dict(CASES), "list": list(CASES.values()), "tuple": tuple(CASES.values())})


NUMPY_SCALAR_DTYPES = [
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "longdouble", "complex64", "complex128", "clongdouble", "bool",
    ">i4", ">f8", "M8[ns]", "M8[D]", "M8[s]", "m8[us]", "m8[h]", "U6", "S4",
]  # fmt: skip


def _scalar_examples(dtype: np.dtype) -> list[np.generic]:
    kind = dtype.kind
    if kind in "iu":
        info = np.iinfo(dtype)
        vals: list[Any] = [info.min, info.max, 0]
    elif kind == "f":
        vals = [np.finfo(dtype).max, np.finfo(dtype).tiny, -0.0, np.nan, -np.inf, 1 / 3]
    elif kind == "c":
        vals = [complex(1 / 3, -0.0), complex(np.nan, np.inf)]
    elif kind == "b":
        vals = [True, False]
    elif kind in "mM":
        return [np.array(12345, dtype="i8").view(dtype)[()], np.array("NaT", dtype=dtype)[()]]
    elif kind == "U":
        vals = ["héllo", ""]
    else:
        vals = [b"ab\x00c", b""]
    return [np.array(v, dtype=dtype)[()] for v in vals]


@pytest.mark.parametrize("dtype", NUMPY_SCALAR_DTYPES)
def test_numpy_scalars_keep_type_and_bits(dtype: str, check_roundtrip) -> None:
    examples = _scalar_examples(np.dtype(dtype))
    assert all(isinstance(x, np.generic) for x in examples)
    check_roundtrip(examples)


def test_numpy_scalar_is_not_a_python_float(check_roundtrip) -> None:
    (back, *_) = check_roundtrip(np.float32(1.5))
    assert type(back) is np.float32 and not isinstance(back, float)


def test_long_list_goes_to_a_jsonl_member(tmp_path) -> None:
    path = tmp_path / "l.zarc"
    zarchive.save({"short": list(range(5)), "long": list(range(LONG))}, path)
    with zarchive.open(path) as arc:
        assert isinstance(arc.manifest["root"]["short"], list)
        node = arc.manifest["root"]["long"]
        assert node["$type"] == "list" and node["length"] == LONG
        assert node["$ref"].startswith("long.jsonl")
        assert arc["long"] == list(range(LONG))


def test_external_list_threshold_is_respected(tmp_path) -> None:
    path = tmp_path / "l.zarc"
    zarchive.save({"a": [1, 2, 3]}, path, external_list_threshold=2)
    with zarchive.open(path) as arc:
        assert arc.manifest["root"]["a"]["$type"] == "list"
        assert arc["a"] == [1, 2, 3]


def test_plain_json_stays_plain_in_the_manifest(tmp_path) -> None:
    """Values JSON can say exactly appear as themselves, so the manifest is readable without zarchive."""
    obj = {"s": "x", "i": 2**53, "f": -0.0, "b": True, "n": None, "l": [1, [2]], "d": {"k": "v"}}
    path = tmp_path / "p.zarc"
    zarchive.save(obj, path)
    with zarchive.open(path) as arc:
        assert arc.manifest["root"] == obj
        assert math.copysign(1, arc.manifest["root"]["f"]) == -1


def test_special_floats_are_not_bare_json_tokens(tmp_path) -> None:
    path = tmp_path / "f.zarc"
    zarchive.save([float("nan"), float("inf"), 2**64], path)
    with zarchive.open(path) as arc:
        text = json.dumps(arc.manifest)
    assert "NaN" not in text and "Infinity" not in text


class _CustomTz(dt.tzinfo):
    def utcoffset(self, d: Any) -> dt.timedelta:
        return dt.timedelta(hours=1)


@pytest.mark.parametrize(
    "obj",
    [object(), lambda: 1, defaultdict(lambda: 1), dt.datetime(2020, 1, 1, tzinfo=_CustomTz()), np.zeros(2, "V3")[0]],
    ids=["object", "lambda", "defaultdict-lambda", "custom-tzinfo", "numpy-void-scalar"],
)
def test_unsupported_values_raise_save_error_with_path(obj: Any, tmp_path) -> None:
    with pytest.raises(zarchive.SaveError) as info:
        zarchive.save({"outer": [1, obj]}, tmp_path / "x.zarc")
    assert info.value.path == "outer/1"
    assert "'/outer/1'" in str(info.value)
    assert not (tmp_path / "x.zarc").exists()


def test_reference_cycle_is_a_save_error(tmp_path) -> None:
    a: list[Any] = [1]
    a.append(a)
    with pytest.raises(zarchive.SaveError, match="cycle"):
        zarchive.save(a, tmp_path / "c.zarc")


# --- hypothesis: nested structures with every kind of leaf ---

_floats = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
_numpy_scalars = st.sampled_from(
    ["i1", "u2", "i8", "u8", "f2", "f4", "f8", "c8", "c16", "?", "M8[us]", "m8[s]"]
).flatmap(lambda d: hnp.from_dtype(np.dtype(d)).map(lambda v, d=d: np.array(v, dtype=d)[()]))
_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**130), max_value=2**130),
    _floats,
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
    st.binary(max_size=12),
    st.complex_numbers(allow_nan=True, allow_infinity=True),
    st.datetimes(timezones=st.none() | st.just(dt.UTC) | st.timezones()),
    st.dates(),
    st.times(),
    st.timedeltas(),
    st.decimals(allow_nan=True, allow_infinity=True, places=None),
    st.uuids(),
    st.sampled_from([Color.RED, Color.BLUE, Level.LOW, Perm.W, Perm.R | Perm.X]),
    st.sampled_from([pathlib.PurePosixPath("a/b"), pathlib.Path("x.txt"), pathlib.PureWindowsPath("C:/y")]),
    _numpy_scalars,
    st.sampled_from(
        [np.dtype("f4"), np.dtype(">i8"), np.dtype("U3"), torch.float16, torch.device("cpu"), torch.Size([1, 2])]
    ),
)
_keys = st.one_of(
    st.text(max_size=6),
    st.text(max_size=4).map(lambda s: "$" + s),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.tuples(st.integers(-5, 5), st.text(max_size=3)),
    st.none(),
)
_hashables = st.one_of(
    st.integers(), st.text(max_size=5), st.tuples(st.integers(), st.booleans()), st.binary(max_size=4)
)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=5),
        st.lists(children, max_size=5).map(tuple),
        st.dictionaries(st.text(max_size=6), children, max_size=5),
        st.dictionaries(_keys, children, max_size=5),
        st.dictionaries(_keys, children, max_size=4).map(OrderedDict),
        st.dictionaries(st.integers(), children, max_size=4).map(lambda d: defaultdict(list, d)),
        st.sets(_hashables, max_size=5),
        st.frozensets(_hashables, max_size=5),
    )


NESTED = st.recursive(_leaves, _containers, max_leaves=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(obj=NESTED)
def test_nested_structures_round_trip(obj: Any, check_roundtrip) -> None:
    check_roundtrip(obj)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(NESTED, max_size=40), threshold=st.integers(0, 8))
def test_nested_structures_round_trip_through_jsonl_members(items: list[Any], threshold: int, check_roundtrip) -> None:
    """A low external_list_threshold sends most lists to .jsonl members, whose items are nodes."""
    check_roundtrip({"items": items, "as_tuple": tuple(items)}, external_list_threshold=threshold)
