"""Every built-in handler obeys the handler contract (see zarchive/handlers/base.py).

EXAMPLES holds one representative object per handler name. A handler added to default_handlers()
without an example here fails `test_every_handler_has_an_example`: add one when you add a handler.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import pathlib
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import polars as pl
import pytest
import torch
from conftest import assert_same

import zarchive
from zarchive.engine.registry import HandlerRegistry, default_handlers
from zarchive.handlers.base import Handler
from zarchive.testing import check_handler
from zarchive.torchutil import ConfiguredModel, set_config_class

HANDLERS: dict[str, Handler] = {h.name: h for h in default_handlers()}


class Mood(enum.Enum):
    CALM = "calm"


@dataclasses.dataclass
class Point:
    x: float
    y: list[int]


class Pair(NamedTuple):
    left: int
    right: str


@dataclasses.dataclass
class TinyConfig:
    width: int = 3


@set_config_class(TinyConfig)
class TinyModel(ConfiguredModel[TinyConfig]):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.fc = torch.nn.Linear(config.width, 2)


def _omegaconf_example() -> Any:
    omegaconf = pytest.importorskip("omegaconf")
    return omegaconf.OmegaConf.create({"lr": 0.1, "sizes": [1, 2], "name": "${sub.n}", "sub": {"n": "x"}})


def _check_omegaconf(obj: Any, back: Any) -> None:
    import omegaconf

    assert back == omegaconf.OmegaConf.to_container(obj, resolve=True) and type(back) is dict


def _check_model(obj: TinyModel, back: Any) -> None:
    assert type(back) is TinyModel and back.config == obj.config
    sd, bsd = obj.state_dict(), back.state_dict()
    assert list(sd) == list(bsd) and all(torch.equal(sd[k], bsd[k]) for k in sd)


def _check_pandas(obj: Any, back: Any) -> None:
    assert type(back) is type(obj)
    if isinstance(obj, pd.DataFrame):
        pd.testing.assert_frame_equal(back, obj, check_exact=True)
    elif isinstance(obj, pd.Series):
        pd.testing.assert_series_equal(back, obj, check_exact=True)
    elif isinstance(obj, pd.Index):
        pd.testing.assert_index_equal(back, obj, exact=True)
    else:
        pd.testing.assert_extension_array_equal(back, obj)


def _check_polars(obj: Any, back: Any) -> None:
    import polars.testing

    assert type(back) is type(obj)
    if isinstance(obj, pl.DataFrame):
        polars.testing.assert_frame_equal(back, obj, check_exact=True)
        assert back.schema == obj.schema
    else:
        polars.testing.assert_series_equal(back, obj, check_exact=True)
        assert back.dtype == obj.dtype


def _arrow_example() -> Any:
    import pyarrow as pa

    return pa.array([{"k": ["x", None]}, None, {"k": []}] * 100)


def _check_arrow(obj: Any, back: Any) -> None:
    assert type(back) is type(obj) and back.type == obj.type and back.equals(obj)


# name -> (make the example, compare (original, loaded); None means exact equality via `same`)
EXAMPLES: dict[str, tuple[Callable[[], Any], Callable[[Any, Any], None] | None]] = {
    "json": (lambda: "text ✓", None),
    "int": (lambda: 2**100, None),
    "float": (lambda: float("-inf"), None),
    "list": (lambda: list(range(300)), None),
    "dict": (lambda: {1: "a", (2, 3): "b"}, None),
    "omegaconf": (_omegaconf_example, _check_omegaconf),
    "torch.ConfiguredModel": (lambda: TinyModel(TinyConfig()), _check_model),
    "namedtuple": (lambda: Pair(1, "r"), None),
    "dataclass": (lambda: Point(0.5, [1, 2]), None),
    "tuple": (lambda: (1, "a", None), None),
    "set": (lambda: frozenset({1, 2}), None),
    "bytes": (lambda: b"\x00\x01", None),
    "complex": (lambda: 1 - 2j, None),
    "datetime": (lambda: dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=dt.UTC), None),
    "path": (lambda: pathlib.PurePosixPath("a/b"), None),
    "enum": (lambda: Mood.CALM, None),
    "text_value": (lambda: decimal.Decimal("0.10"), None),
    "numpy.ndarray": (lambda: np.arange(1000, dtype=">i4").reshape(10, 100), None),
    "numpy.scalar": (lambda: np.float16(0.25), None),
    "numpy.dtype": (lambda: np.dtype("<M8[ns]"), None),
    "pandas.DataFrame": (lambda: pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}), _check_pandas),
    "pandas.Series": (lambda: pd.Series([1.5, None], name="s"), _check_pandas),
    "pandas.Index": (lambda: pd.Index(["a", "b"], name="i"), _check_pandas),
    "pandas.array": (lambda: pd.array([1, None, 3], dtype="Int64"), _check_pandas),
    "pandas.scalar": (lambda: pd.Timestamp("2021-03-04 05:06:07.123456789", tz="UTC"), None),
    "polars.DataFrame": (lambda: pl.DataFrame({"a": [1, None], "b": ["x", None], "c": [[1.5], []]}), _check_polars),
    "polars.Series": (lambda: pl.Series("s", ["é", None, "z"] * 100, dtype=pl.Categorical), _check_polars),
    "arrow.array": (lambda: _arrow_example(), _check_arrow),
    "torch.Tensor": (lambda: torch.nn.Parameter(torch.randn(3, 4)), None),
    "torch.device": (lambda: torch.device("cpu"), None),
    "torch.dtype": (lambda: torch.bfloat16, None),
    "torch.Size": (lambda: torch.Size([4, 5]), None),
}

# handlers whose example is plain JSON in the manifest (no "$type" of their own)
PLAIN_OUTPUT = {"json", "omegaconf"}

PROBE_CLASSES: list[type] = [
    int, bool, str, bytes, float, type(None), object, type, list, dict, tuple, set,
    np.ndarray, np.float32, np.dtype, torch.Tensor, torch.nn.Parameter, torch.nn.Linear, torch.device,
    pd.DataFrame, pd.Series, pl.DataFrame, pl.Series, Mood, Point, Pair, TinyModel, Exception, enum.Enum, zarchive.ZArchive,
]  # fmt: skip


def test_handler_names_are_unique_and_non_empty() -> None:
    names = [h.name for h in default_handlers()]
    assert all(isinstance(n, str) and n and n == n.strip() for n in names)
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert all(isinstance(h, Handler) for h in default_handlers())


def test_every_handler_has_an_example() -> None:
    missing = sorted(set(HANDLERS) - set(EXAMPLES))
    assert not missing, f"add an example to EXAMPLES in {__file__} for: {missing}"
    stale = sorted(set(EXAMPLES) - set(HANDLERS))
    assert not stale, f"EXAMPLES names handlers that do not exist: {stale}"


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # 2**70 as a float16 scalar
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_builtin_handler_keeps_the_published_contract(name: str, tmp_path) -> None:
    """The contract third-party handlers are held to (zarchive.testing.check_handler), on every
    built-in handler: accepts() answers bools, nodes carry the name, round trips by every route, and
    every field of a real node removed or replaced by junk is a ZArchiveError or a value."""
    make, check = EXAMPLES[name]
    check_handler(
        HANDLERS[name],
        [make()],
        tmp_path=tmp_path,
        equal=check or assert_same,
        plain=name in PLAIN_OUTPUT,
        probe_classes=PROBE_CLASSES,
    )


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_is_dispatched_to_its_handler_and_round_trips(name: str, tmp_path, roundtrip, same) -> None:
    make, check = EXAMPLES[name]
    obj = make()
    handler = HANDLERS[name]
    assert handler.accepts(type(obj)) is True
    assert HandlerRegistry.build().for_object(obj) is handler, "an earlier handler takes the example"

    path = tmp_path / "one.zarc"
    zarchive.save({"x": obj}, path)
    with zarchive.open(path) as arc:
        node = arc.node("x")
        if name not in PLAIN_OUTPUT:
            assert isinstance(node, dict) and node.get("$type") == name, node
            assert isinstance(handler.summary(node), str) and handler.summary(node)
            kids = handler.children(node)
            assert kids is None or isinstance(kids, dict)
    for route, back in roundtrip(obj):
        if check is None:
            same(obj, back, f"[{route}] /")
        else:
            check(obj, back)
