"""Dataclasses (plain, frozen, kw_only, muutils SerializableDataclass with its field options) and named
tuples: exact round-trips, classes found without naming them, class evolution, lazy paths, errors."""

from __future__ import annotations

import collections
import dataclasses
import gc
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import models_a
import models_b
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field

import zarchive
from zarchive.engine.typeref import class_tag

TESTS_DIR = Path(__file__).parent


# --- classes under test (module level, so they resolve without registration) ---
@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


@dataclasses.dataclass(frozen=True)
class Frozen:
    name: str
    values: tuple[int, ...] = ()


@dataclasses.dataclass(kw_only=True)
class KwOnly:
    a: int
    b: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class WithComputed:
    n: int
    double: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.double = 2 * self.n


@dataclasses.dataclass
class Holder:
    arr: np.ndarray
    t: torch.Tensor
    items: list[Any] = dataclasses.field(default_factory=list)
    inner: Any = None


class Pair(NamedTuple):
    left: Any
    right: Any = None


Triple = collections.namedtuple("Triple", ["a", "b", "c"], defaults=[3])


@serializable_dataclass(frozen=True, kw_only=True)
class MuConfig(SerializableDataclass):
    n_layers: int = serializable_field(default=2)
    name: str = serializable_field(default="net")
    # saved as a string, read back as a dtype (muutils' serialization_fn / deserialize_fn)
    dtype: torch.dtype = serializable_field(
        default=torch.float32, serialization_fn=lambda d: str(d), deserialize_fn=lambda s: getattr(torch, s[6:])
    )
    # muutils' older loading_fn gets the dict of all loaded fields
    scale: float = serializable_field(
        default=1.0, serialization_fn=lambda x: x * 10, loading_fn=lambda d: d["scale"] / 10
    )
    # computed, never stored: its default comes back
    cache: dict[str, int] = serializable_field(default_factory=dict, init=False, serialize=False)
    # not an __init__ argument, but stored, and set back after construction
    note: str = serializable_field(default="unset", init=False)
    weights: np.ndarray = serializable_field(default_factory=lambda: np.zeros(3))


@serializable_dataclass
class MuOuter(SerializableDataclass):
    cfg: MuConfig = serializable_field(default_factory=MuConfig)
    history: list[Point] = serializable_field(default_factory=list)


def same(a: Any, b: Any, where: str = "/") -> None:
    """`b` equals `a` exactly: same classes down to the leaves, arrays and tensors bitwise."""
    assert type(a) is type(b), f"{where}: {type(b)} instead of {type(a)}"
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            if hasattr(a, f.name):
                same(getattr(a, f.name), getattr(b, f.name), f"{where}{f.name}/")
    elif isinstance(a, tuple) and hasattr(a, "_fields"):
        for name in a._fields:
            same(getattr(a, name), getattr(b, name), f"{where}{name}/")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), where
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            same(a[k], b[k], f"{where}{k}/")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}{i}/")
    else:
        assert a == b, f"{where}: {b!r} != {a!r}"


def roundtrip(obj: Any, path: Path, **settings: Any) -> Any:
    zarchive.save(obj, path, **settings)
    return zarchive.read(path, **settings)


@pytest.fixture
def registered():
    """Register classes for one test; every registration is undone afterwards."""
    tags: list[str] = []

    def reg(cls: type, name: str | None = None) -> type:
        tags.append(name or class_tag(cls))
        return zarchive.register_class(cls, name=name, overwrite=True)

    yield reg
    for t in tags:
        zarchive.unregister_class(t)


# --- round-trips ---
ROUNDTRIP_CASES = {
    "plain": Point(1.5, -2.0),
    "frozen": Frozen("f", (1, 2, 3)),
    "kw_only": KwOnly(a=3, b=[1, 2]),
    "init_false": WithComputed(7),
    "namedtuple": Pair(Point(1.0), [Pair(1, 2)]),
    "collections_namedtuple": Triple(1, "x", c=None),
    "muutils_nested": MuOuter(MuConfig(n_layers=5, dtype=torch.bfloat16, scale=0.25), [Point(1.0, 2.0)]),
    "in_containers": {"pts": [Point(0.0), Point(1.0, 1.0)], "pair": (Pair(1), Triple(1, 2))},
}


@pytest.mark.parametrize("obj", list(ROUNDTRIP_CASES.values()), ids=list(ROUNDTRIP_CASES))
def test_roundtrip_keeps_classes_and_values(obj: Any, tmp_path: Path) -> None:
    same(obj, roundtrip(obj, tmp_path / "a.zarc"))
    with zarchive.open(tmp_path / "a.zarc", lazy=False) as arc:
        same(obj, arc.load())


def test_namedtuple_is_not_a_plain_tuple(tmp_path: Path) -> None:
    back = roundtrip([Pair(1, 2), Triple(1, 2, 3), (1, 2)], tmp_path / "a.zarc")
    assert [type(x) for x in back] == [Pair, Triple, tuple]
    assert back[0].left == 1 and back[1].c == 3


def test_arrays_and_tensors_in_dataclass_become_members(tmp_path: Path) -> None:
    obj = Holder(np.arange(1000, dtype=np.int32), torch.randn(300), [np.ones(500)], Point(1.0))
    back = roundtrip(obj, tmp_path / "a.zarc")
    same(obj, back)
    with zarchive.open(tmp_path / "a.zarc") as arc:
        root = arc.manifest["root"]
        assert root["$type"] == "dataclass" and root["class"] == f"{__name__}:Holder"
        assert "$ref" in root["fields"]["arr"] and "$ref" in root["fields"]["t"]
        assert "$ref" in root["fields"]["items"][0]
        assert ".safetensors" in root["fields"]["t"]["$ref"] and ".npy" in root["fields"]["arr"]["$ref"]
        assert arc["t"].shape == (300,)
        assert arc.keys("inner") == ["x", "y"]
        assert arc["inner/x"] == 1.0


def test_muutils_field_options(tmp_path: Path) -> None:
    cfg = MuConfig(n_layers=3, dtype=torch.float16, scale=0.5, weights=np.arange(4.0))
    object.__setattr__(cfg, "note", "trained")  # an init=False field with a value of its own
    cfg.cache["k"] = 1  # serialize=False: not stored
    zarchive.save(cfg, tmp_path / "c.zarc")
    with zarchive.open(tmp_path / "c.zarc") as arc:
        fields = arc.manifest["root"]["fields"]
    assert "cache" not in fields
    assert fields["dtype"] == "torch.float16"  # serialization_fn applied
    assert fields["scale"] == 5.0
    assert fields["note"] == "trained"
    back = zarchive.read(tmp_path / "c.zarc")
    assert type(back) is MuConfig
    assert back.dtype is torch.float16 and back.scale == 0.5 and back.n_layers == 3
    assert back.cache == {} and back.note == "trained"
    np.testing.assert_array_equal(back.weights, np.arange(4.0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.n_layers = 1  # type: ignore[misc]


def test_muutils_serialize_is_not_used(tmp_path: Path) -> None:
    """muutils' .serialize() turns arrays into lists; here they stay arrays of their dtype."""
    cfg = MuConfig(weights=np.arange(6, dtype=np.int16).reshape(2, 3))
    back = roundtrip(cfg, tmp_path / "c.zarc")
    assert back.weights.dtype == np.int16 and back.weights.shape == (2, 3)


# --- finding the class ---
def test_same_class_names_in_two_modules(tmp_path: Path) -> None:
    objs = {"a": models_a.Config(d_in=7), "b": models_b.Config(width=9), "ra": models_a.Record(1, 0.5),
            "rb": models_b.Record("x", [1.0])}  # fmt: skip
    back = roundtrip(objs, tmp_path / "a.zarc")
    assert type(back["a"]) is models_a.Config and back["a"].d_in == 7
    assert type(back["b"]) is models_b.Config and back["b"].width == 9
    assert type(back["ra"]) is models_a.Record and type(back["rb"]) is models_b.Record
    same(objs, back)


def test_local_class_needs_registration(tmp_path: Path, registered) -> None:
    """A function-local class is found again only by the process that saved it (while the class
    lives); any other reader must register it (tests/test_main_classes.py: across processes)."""

    def make() -> type:
        @dataclasses.dataclass
        class Local:
            v: int

        return Local

    Local = make()
    zarchive.save({"obj": Local(1)}, tmp_path / "l.zarc")
    assert zarchive.read(tmp_path / "l.zarc") == {"obj": Local(1)}  # the saving process finds it again
    del Local
    gc.collect()
    with pytest.raises(zarchive.UnknownTypeError, match="register_class") as info:
        zarchive.read(tmp_path / "l.zarc")
    assert info.value.path == "obj"
    again = make()
    registered(again)
    assert zarchive.read(tmp_path / "l.zarc") == {"obj": again(1)}


def test_class_registered_under_a_name_is_saved_by_that_name(tmp_path: Path, registered) -> None:
    @dataclasses.dataclass
    class Local:
        v: int

    registered(Local, "my.project:Settings")
    zarchive.save(Local(2), tmp_path / "l.zarc")
    with zarchive.open(tmp_path / "l.zarc") as arc:
        assert arc.manifest["root"]["class"] == "my.project:Settings"
    assert zarchive.read(tmp_path / "l.zarc") == Local(2)


def test_tag_of_a_non_dataclass_is_refused(tmp_path: Path, registered) -> None:
    zarchive.save(Point(1.0), tmp_path / "p.zarc")

    class NotADataclass:
        def __init__(self, **kw: Any) -> None:
            raise AssertionError("must never be called")

    registered(NotADataclass, class_tag(Point))
    with pytest.raises(zarchive.UnknownTypeError, match="not a dataclass"):
        zarchive.read(tmp_path / "p.zarc")


def test_fresh_process_reads_only_imported_classes(tmp_path: Path) -> None:
    """Reading never imports: a fresh process must import the class's module first."""
    path = tmp_path / "a.zarc"
    zarchive.save({"cfg": models_a.Config(n_layers=4)}, path)
    script = textwrap.dedent(
        f"""
        import sys
        import zarchive
        sys.path.insert(0, {str(TESTS_DIR)!r})
        try:
            zarchive.read({str(path)!r})
        except zarchive.UnknownTypeError as e:
            print("refused:", e)
        assert "models_a" not in sys.modules, "reading imported the module"
        import models_a
        obj = zarchive.read({str(path)!r})
        print("read:", type(obj["cfg"]).__module__, obj["cfg"].n_layers)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "refused:" in out.stdout and "not imported" in out.stdout and "object path '/cfg'" in out.stdout
    assert "read: models_a 4" in out.stdout


# --- evolution ---
@dataclasses.dataclass
class V1:
    a: int
    old: str = "gone"


@dataclasses.dataclass
class V2:  # lost `old`, gained `new` with a default
    a: int
    new: list[int] = dataclasses.field(default_factory=lambda: [1])


@dataclasses.dataclass
class V3:  # gained a required field
    a: int
    needed: float


@pytest.mark.parametrize("mode", ["warn", "ignore", "except"])
def test_dropped_field_follows_error_mode(mode: str, tmp_path: Path, registered) -> None:
    zarchive.save({"v": V1(5, "x")}, tmp_path / "v.zarc")
    registered(V2, class_tag(V1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if mode == "except":
            with pytest.raises(zarchive.FieldMismatchError, match="'old'") as info:
                zarchive.read(tmp_path / "v.zarc", error_mode=mode)
            assert info.value.path == "v"
            return
        back = zarchive.read(tmp_path / "v.zarc", error_mode=mode)
    assert back == {"v": V2(5, [1])}
    messages = [str(w.message) for w in caught]
    if mode == "warn":
        assert any("'old'" in m and "dropped" in m and "/v" in m for m in messages), messages
    else:
        assert not any("'old'" in m for m in messages)


def test_missing_required_field_is_an_error(tmp_path: Path, registered) -> None:
    zarchive.save([V1(5)], tmp_path / "v.zarc")
    registered(V3, class_tag(V1))
    with pytest.raises(zarchive.FieldMismatchError, match="'needed'") as info:
        zarchive.read(tmp_path / "v.zarc", error_mode="ignore")
    assert info.value.path == "0"


def test_namedtuple_evolution(tmp_path: Path, registered) -> None:
    Old = collections.namedtuple("Old", ["a", "b"])
    New = collections.namedtuple("New", ["a", "c"], defaults=[9])
    registered(Old, "evo:NT")
    zarchive.save(Old(1, 2), tmp_path / "n.zarc")
    registered(New, "evo:NT")
    with pytest.warns(UserWarning, match="'b'"):
        assert zarchive.read(tmp_path / "n.zarc") == New(1, 9)
    Strict = collections.namedtuple("Strict", ["a", "d"])
    registered(Strict, "evo:NT")
    with pytest.raises(zarchive.FieldMismatchError, match="'d'"):
        zarchive.read(tmp_path / "n.zarc", error_mode="ignore")


# --- errors ---
@dataclasses.dataclass
class BadSave:
    v: Any = dataclasses.field(default=None)


def test_unsavable_field_names_its_path(tmp_path: Path) -> None:
    with pytest.raises(zarchive.SaveError) as info:
        zarchive.save({"cfg": BadSave(object())}, tmp_path / "x.zarc")
    assert info.value.path == "cfg/v"
    assert not (tmp_path / "x.zarc").exists()


@serializable_dataclass
class FailingFns(SerializableDataclass):
    v: int = serializable_field(default=1, serialization_fn=lambda x: 1 // (x - 1), deserialize_fn=lambda x: x)
    w: int = serializable_field(default=0, deserialize_fn=lambda x: int("not a number"))


def test_field_function_failures_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(zarchive.SaveError, match="serialization_fn of field 'v'") as info:
        zarchive.save({"f": FailingFns(v=1)}, tmp_path / "x.zarc")
    assert info.value.path == "f/v"
    zarchive.save({"f": FailingFns(v=2)}, tmp_path / "y.zarc")
    with pytest.raises(zarchive.FieldMismatchError, match="deserialize_fn of field 'w'") as info2:
        zarchive.read(tmp_path / "y.zarc")
    assert info2.value.path == "f/w"


@dataclasses.dataclass
class Validated:
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("n must be >= 0")


def test_constructor_rejecting_archive_values(tmp_path: Path) -> None:
    bad = Validated(1)
    bad.n = -1  # bypassed validation before saving; __post_init__ rejects it on reading
    zarchive.save({"v": bad}, tmp_path / "bad.zarc")
    with pytest.raises(zarchive.FieldMismatchError, match="n must be >= 0") as info:
        zarchive.read(tmp_path / "bad.zarc")
    assert info.value.path == "v"


def test_fields_must_be_an_object(tmp_path: Path) -> None:
    """A node whose 'fields' is not an object is a FormatError, not a crash."""
    zarchive.save(Point(1.0), tmp_path / "p.zarc")
    with zarchive.open(tmp_path / "p.zarc") as arc:
        with pytest.raises(zarchive.FormatError, match="'fields'"):
            arc.load_node({"$type": "dataclass", "class": class_tag(Point), "fields": [1, 2]})
        with pytest.raises(zarchive.UnknownTypeError, match="bad class name"):
            arc.load_node({"$type": "dataclass", "class": "os.system", "fields": {}})


# --- hypothesis: random nesting of dataclasses, named tuples, lists and dicts ---
_leaves = st.one_of(
    st.integers(-(2**60), 2**60),
    st.floats(allow_nan=False, width=64),
    st.text(max_size=8),
    st.none(),
    st.booleans(),
    st.builds(lambda n: np.arange(n, dtype=np.float32), st.integers(0, 300)),
    st.builds(lambda n: torch.arange(n, dtype=torch.int64), st.integers(0, 300)),
)


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=6), children, max_size=4),
        st.builds(Pair, children, children),
        st.builds(Triple, children, children, children),
        st.builds(Holder, st.just(np.zeros(2)), st.just(torch.ones(2)), st.lists(children, max_size=3), children),
        st.builds(lambda a, b: Frozen(str(a), (1,)), st.text(max_size=4), children),
        st.builds(lambda h: MuOuter(MuConfig(n_layers=h), []), st.integers(0, 9)),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(obj=st.recursive(_leaves, _extend, max_leaves=12))
def test_hypothesis_nested_roundtrip(obj: Any, tmp_path: Path) -> None:
    path = tmp_path / "h.zarc"
    back = roundtrip(obj, path, compress=False)
    same(obj, back)
    with zarchive.open(path) as arc:
        same(obj, arc.load())
