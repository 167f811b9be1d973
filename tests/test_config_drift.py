"""Config drift: reading a dataclass whose class changed since the file was written. A field the class
gained takes its default, and a recorded value that does not match its field's annotation is kept;
both are reported per error_mode (a warning naming the field, and the default or the annotation;
FieldMismatchError with "except"; the "zarchive" logger with "log"; nothing with "ignore"). Also for
.zanj files the real zanj writes."""

from __future__ import annotations

import dataclasses
import logging
import typing
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Optional

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field

import zarchive
from zarchive.engine.annotation_check import describe_hint, fits
from zarchive.errors import FieldMismatchError
from zarchive.torchutil import ConfiguredModel, set_config_class

TAG = "drift_tests:Config"


@dataclasses.dataclass
class ConfigV1:
    n_layers: int = 2
    name: str = "base"


@dataclasses.dataclass
class ConfigV2:  # gained two fields with defaults
    n_layers: int = 2
    name: str = "base"
    dropout: float = 0.1
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ConfigV3:  # n_layers became a list of widths
    n_layers: list[int] = dataclasses.field(default_factory=lambda: [4])
    name: str = "base"


@pytest.fixture
def saved_v1(tmp_path: Path) -> Iterator[Path]:
    zarchive.register_class(ConfigV1, name=TAG, overwrite=True)
    path = tmp_path / "v1.zarc"
    zarchive.save({"config": ConfigV1(n_layers=3, name="run")}, path)
    yield path
    zarchive.unregister_class(TAG)


def _read_as(cls: type, path: Path, **settings: Any) -> Any:
    zarchive.register_class(cls, name=TAG, overwrite=True)
    return zarchive.read(path, **settings)["config"]


def test_gained_fields_warn_naming_field_and_default(saved_v1: Path) -> None:
    with pytest.warns(UserWarning) as caught:
        back = _read_as(ConfigV2, saved_v1)
    assert back == ConfigV2(n_layers=3, name="run", dropout=0.1, tags=[])
    messages = [str(w.message) for w in caught]
    assert any("has no field 'dropout'" in m and "takes its default 0.1" in m for m in messages), messages
    assert any("has no field 'tags'" in m and "takes its default list()" in m for m in messages), messages
    assert all("at object path '/config'" in m for m in messages)


def test_gained_fields_per_error_mode(saved_v1: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(FieldMismatchError, match="has no field 'dropout'.*default 0.1.*error_mode='except'"):
        _read_as(ConfigV2, saved_v1, error_mode="except")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _read_as(ConfigV2, saved_v1, error_mode="ignore").dropout == 0.1
        with caplog.at_level(logging.WARNING, logger="zarchive"):
            assert _read_as(ConfigV2, saved_v1, error_mode="log").name == "run"
    assert any("has no field 'dropout'" in r.getMessage() for r in caplog.records)


def test_a_value_that_does_not_match_its_annotation_warns(saved_v1: Path) -> None:
    with pytest.warns(UserWarning, match=r"n_layers=3 \(int\), which does not match the annotation list\[int\]") as w:
        back = _read_as(ConfigV3, saved_v1)
    assert back.n_layers == 3  # kept as read
    assert "ConfigV3.n_layers" in str(w[0].message) and "at object path '/config/n_layers'" in str(w[0].message)
    with pytest.raises(FieldMismatchError, match="does not match the annotation"):
        _read_as(ConfigV3, saved_v1, error_mode="except")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _read_as(ConfigV3, saved_v1, error_mode="ignore").n_layers == 3


@dataclasses.dataclass
class Typed:
    a: int = 0
    b: float = 0.0
    c: Optional[int] = None  # noqa: UP045 - the typing spelling is what is tested
    d: tuple[int, ...] = ()
    e: dict[str, float] = dataclasses.field(default_factory=dict)
    f: Literal["x", "y"] = "x"
    g: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(2))
    h: torch.Tensor = dataclasses.field(default_factory=lambda: torch.zeros(2))
    i: int | str = 0
    j: Any = None
    k: bool = False
    m: tuple[int, str] = (1, "a")


def test_matching_values_do_not_warn(tmp_path: Path) -> None:
    value = Typed(
        a=np.int64(3),  # type: ignore[arg-type]
        b=np.float32(0.5),  # type: ignore[arg-type]
        c=None,
        d=(1, 2),
        e={"x": 1},
        f="y",
        i="s",
        j=object.__name__,
        k=True,
        m=(2, "b"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = zarchive.read(zarchive.save({"t": value}, tmp_path / "t.zarc"))["t"]
    assert back.d == (1, 2) and back.f == "y"


HINTS: list[Any] = [
    int,
    float,
    str,
    bool,
    bytes,
    complex,
    Optional[int],  # noqa: UP045
    int | None,
    list[int],
    dict[str, float],
    tuple[int, str],
    tuple[int, ...],
    set[int],
    frozenset[str],
    Literal["a", "b", 3],
    list[dict[str, int | None]],
]


@settings(max_examples=25, deadline=None)
@given(data=st.data(), hint=st.sampled_from(HINTS))
def test_values_of_a_type_fit_its_annotation(data: st.DataObject, hint: Any) -> None:
    value = data.draw(st.from_type(hint))
    assert fits(value, hint), (value, describe_hint(hint))


@settings(max_examples=25, deadline=None)
@given(text=st.text(min_size=1), hint=st.sampled_from([int, float, list[int], dict[str, int], tuple[int], bool]))
def test_text_does_not_fit_other_annotations(text: str, hint: Any) -> None:
    assert not fits(text, hint)
    assert not fits([text], list[int]) and not fits({"k": text}, dict[str, int])


def test_undecidable_annotations_count_as_matches() -> None:
    T = typing.TypeVar("T")
    assert fits(1, T) and fits(1, "SomeForwardRef") and fits(1, typing.Any)
    assert fits(3, float) and not fits(0.5, int) and not fits(1, bool) and fits(np.bool_(True), bool)


def _sdc(name: str, **fields: Any) -> type:
    """A muutils SerializableDataclass named `name` with int fields (name -> default)."""
    defaults = {k: serializable_field(default=v) for k, v in fields.items()}
    cls = type(name, (SerializableDataclass,), {"__annotations__": dict.fromkeys(fields, int), **defaults})
    return serializable_dataclass(cls)


def test_zanj_files_report_drift_too(tmp_path: Path) -> None:
    zanj = pytest.importorskip("zanj")
    old = _sdc("DriftZ", width=3)
    path = zanj.ZANJ().save({"cfg": old(width=5)}, str(tmp_path / "old"))
    grown = _sdc("DriftZ", width=3, depth=2)
    with pytest.warns(UserWarning, match="has no field 'depth'.*takes its default 2"):
        back = zarchive.read(path, trusted=[grown])["cfg"]
    assert type(back) is grown and (back.width, back.depth) == (5, 2)
    retyped = serializable_dataclass(
        type(
            "DriftZ",
            (SerializableDataclass,),
            {"__annotations__": {"width": str}, "width": serializable_field(default="w")},
        )
    )
    with pytest.raises(FieldMismatchError, match=r"width=5 \(int\), which does not match the annotation str"):
        zarchive.read(path, trusted=[retyped], error_mode="except")


def test_model_config_drift_warns_and_builds(tmp_path: Path) -> None:
    @set_config_class(ConfigV1)
    class DriftNet(ConfiguredModel[ConfigV1]):
        def __init__(self, config: ConfigV1) -> None:
            super().__init__(config)
            self.fc = torch.nn.Linear(config.n_layers, 1)

    tag = "drift_tests:DriftNet"
    zarchive.register_class(DriftNet, name=tag, overwrite=True)
    zarchive.register_class(ConfigV1, name=TAG, overwrite=True)
    try:
        path = DriftNet(ConfigV1(n_layers=3)).save(tmp_path / "m.zarc")

        @set_config_class(ConfigV2)
        class DriftNetV2(ConfiguredModel[ConfigV2]):
            def __init__(self, config: ConfigV2) -> None:
                super().__init__(config)
                self.fc = torch.nn.Linear(config.n_layers, 1)

        zarchive.register_class(DriftNetV2, name=tag, overwrite=True)
        zarchive.register_class(ConfigV2, name=TAG, overwrite=True)
        with pytest.warns(UserWarning, match="has no field 'dropout'"):
            model = zarchive.read(path)
        assert isinstance(model, DriftNetV2) and model.config.dropout == 0.1
    finally:
        zarchive.unregister_class(tag)
        zarchive.unregister_class(TAG)
