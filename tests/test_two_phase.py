"""Reading in two phases: the plan (audit, trusted classes, limits, versions) before anything is
constructed, and reading without the classes (GenericObject)."""

from __future__ import annotations

import dataclasses
import enum
import json
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
from rewrite import rewrite

import zarchive
from zarchive.engine.protocol import FORMAT_MAJOR, FORMAT_MINOR
from zarchive.engine.typeref import class_tag
from zarchive.torchutil import ConfiguredModel, set_config_class

BUILT: list[str] = []  # classes whose __init__/__post_init__ ran, in order


@dataclasses.dataclass
class Trusted:
    x: int = 0

    def __post_init__(self) -> None:
        BUILT.append("Trusted")


@dataclasses.dataclass
class Other:
    y: str = ""

    def __post_init__(self) -> None:
        BUILT.append("Other")


class Color(enum.Enum):
    RED = 1


class Pair(NamedTuple):
    a: int
    b: int


@dataclasses.dataclass
class WidthConfig:
    width: int = 4


@set_config_class(WidthConfig)
class Wide(ConfiguredModel[WidthConfig]):
    def __init__(self, config: WidthConfig) -> None:
        super().__init__(config)
        BUILT.append("Wide")
        self.fc = torch.nn.Linear(config.width, config.width, bias=False)


@set_config_class(WidthConfig)
class WideReadsValues(ConfiguredModel[WidthConfig]):
    """Cannot be built on meta (its __init__ reads a value), so reading builds it for real."""

    def __init__(self, config: WidthConfig) -> None:
        super().__init__(config)
        self.fc = torch.nn.Linear(config.width, config.width, bias=False)
        self.scale = float(self.fc.weight.abs().sum().item() * 0)  # a value: impossible on meta


@pytest.fixture(autouse=True)
def _clear() -> None:
    BUILT.clear()


def _mixed(tmp_path: Path) -> Path:
    path = tmp_path / "mixed.zarc"
    obj = {
        "t": Trusted(1),
        "o": [Other("a"), Other("b")],
        "color": Color.RED,
        "pair": Pair(1, 2),
        "counts": defaultdict(list, {"k": [1]}),
        "model": Wide(WidthConfig(3)),
    }
    zarchive.save(obj, path)
    BUILT.clear()
    return path


# --- audit ---
def test_audit_lists_every_class_with_its_object_paths(tmp_path: Path) -> None:
    path = _mixed(tmp_path)
    found = zarchive.audit(path)
    assert found == {
        class_tag(Trusted): ["t"],
        class_tag(Other): ["o/0", "o/1"],
        class_tag(Color): ["color"],
        class_tag(Pair): ["pair"],
        "builtins:list": ["counts"],
        class_tag(Wide): ["model"],
        class_tag(WidthConfig): ["model/config"],
    }
    assert BUILT == []  # nothing constructed
    with zarchive.open(path) as arc:
        assert arc.audit() == found
        assert arc.audit("o") == {class_tag(Other): ["o/0", "o/1"]}


def test_audit_works_where_the_classes_cannot_be_imported(tmp_path: Path) -> None:
    path = _mixed(tmp_path)
    code = "import json, sys, zarchive; print(json.dumps(zarchive.audit(sys.argv[1])))"
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    found = json.loads(out.stdout)
    assert found[class_tag(Wide)] == ["model"] and found[class_tag(Other)] == ["o/0", "o/1"]


def test_audit_lists_field_functions(tmp_path: Path) -> None:
    from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field

    @serializable_dataclass
    class WithLoader(SerializableDataclass):
        n: int = serializable_field(default=1, deserialize_fn=lambda v: v + 0)

    zarchive.register_class(WithLoader)
    try:
        zarchive.save({"w": WithLoader(2)}, tmp_path / "f.zarc")
        found = zarchive.audit(tmp_path / "f.zarc")
    finally:
        zarchive.unregister_class(WithLoader)
    fn_tags = [t for t in found if "<lambda>" in t]
    assert len(fn_tags) == 1 and found[fn_tags[0]] == ["w/n"]


# --- trusted= ---
def test_untrusted_class_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    path = _mixed(tmp_path)
    with pytest.raises(zarchive.UntrustedTypeError) as info:
        zarchive.read(path, trusted=[Trusted])
    assert class_tag(Other) in str(info.value) and info.value.path == "o/0"
    assert isinstance(info.value, zarchive.ZArchiveError)
    assert BUILT == []  # Trusted comes first in the file, and was not built either


def test_trusted_takes_classes_or_tags_and_builtins_are_always_trusted(tmp_path: Path) -> None:
    path = _mixed(tmp_path)
    everything = [Trusted, class_tag(Other), Color, Pair, Wide]  # Wide's declared config comes with it
    back = zarchive.read(path, trusted=everything)
    assert back["o"] == [Other("a"), Other("b")] and back["counts"] == {"k": [1]}
    zarchive.save({"a": [1, 2.5, "x"], "b": torch.arange(3)}, tmp_path / "plain.zarc")
    assert zarchive.read(tmp_path / "plain.zarc", trusted=[])["a"] == [1, 2.5, "x"]


def test_model_read_trusts_its_own_class(tmp_path: Path) -> None:
    Wide(WidthConfig(2)).save(tmp_path / "m.zarc")
    back = Wide.read(tmp_path / "m.zarc", trusted=())
    assert isinstance(back, Wide) and back.config == WidthConfig(2)


def test_a_dangerous_already_imported_class_is_listed_and_refusable(tmp_path: Path) -> None:
    """A file may name any dataclass that happens to be imported (here one of zarchive's own):
    audit shows it, trusted= refuses it."""
    zarchive.save({"x": 1}, tmp_path / "a.zarc", compress=False)

    def name_settings(manifest: dict[str, Any]) -> None:
        manifest["root"] = {"$type": "dataclass", "class": "zarchive.options:Settings", "fields": {"durable": False}}

    path = rewrite(tmp_path / "a.zarc", tmp_path / "b.zarc", name_settings)
    assert zarchive.audit(path) == {"zarchive.options:Settings": [""]}
    with pytest.raises(zarchive.UntrustedTypeError, match="zarchive.options:Settings"):
        zarchive.read(path, trusted=[Trusted])


# --- reading without the classes ---
_NOTEBOOK = """
import dataclasses, enum, typing, torch
from zarchive.torchutil import ConfiguredModel, set_config_class

@dataclasses.dataclass
class NbConfig:
    width: int = 3
    name: str = "nb"

class Mode(enum.Enum):
    FAST = "fast"

class Span(typing.NamedTuple):
    lo: int
    hi: int

@set_config_class(NbConfig)
class NbModel(ConfiguredModel[NbConfig]):
    def __init__(self, config):
        super().__init__(config)
        self.fc = torch.nn.Linear(config.width, 2)
"""


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """An archive written by another process whose classes this process does not have."""
    (tmp_path / "nbmodels.py").write_text(_NOTEBOOK)
    path = tmp_path / "foreign.zarc"
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(tmp_path)!r})
        import torch, zarchive, nbmodels as m
        torch.manual_seed(0)
        zarchive.save({{"model": m.NbModel(m.NbConfig(width=5)), "mode": m.Mode.FAST, "span": m.Span(1, 4)}},
                      {str(path)!r})
    """)
    subprocess.run([sys.executable, "-c", code], check=True)
    return path


def test_unresolved_class_error_says_how_to_fix_it(foreign: Path) -> None:
    with pytest.raises(zarchive.UnknownTypeError) as info:
        zarchive.read(foreign)
    text = str(info.value)
    assert "nbmodels:" in text and "register_class" in text and "unresolved='generic'" in text


def test_generic_read_gives_tags_fields_and_real_tensors(foreign: Path) -> None:
    back = zarchive.read(foreign, unresolved="generic")
    model = back["model"]
    assert isinstance(model, zarchive.GenericObject) and model.tag == "nbmodels:NbModel"
    assert model.kind == "ConfiguredModel" and model.training is True
    config = model.fields["config"]
    assert isinstance(config, zarchive.GenericObject) and config.tag == "nbmodels:NbConfig"
    assert config.fields == {"width": 5, "name": "nb"} and config.width == 5
    weight = model.fields["state_dict"]["fc.weight"]
    assert isinstance(weight, torch.Tensor) and weight.shape == (2, 5)
    # format 1.5 records a member's plain value beside its name, so a reader without the class has both
    assert back["mode"].tag == "nbmodels:Mode" and back["mode"].fields == {"name": "FAST", "value": "fast"}
    assert back["span"].tag == "nbmodels:Span" and back["span"].fields == {"lo": 1, "hi": 4}
    with zarchive.open(foreign, unresolved="generic") as arc:  # also for one value
        assert arc["model/config"] == config


def test_generic_read_of_a_model_whose_class_is_known_builds_the_model(foreign: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(tmp_path))
    try:
        import nbmodels  # type: ignore[import-not-found]

        back = zarchive.read(foreign, unresolved="generic")
        assert isinstance(back["model"], nbmodels.NbModel) and back["mode"] is nbmodels.Mode.FAST
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("nbmodels", None)


# --- models whose config asks for more than the archive holds ---
def _grown(tmp_path: Path, cls: type, width: int) -> Path:
    cls(WidthConfig(4)).save(tmp_path / "small.zarc", zarchive.ZArchive(compress=False))
    BUILT.clear()

    def grow(manifest: dict[str, Any]) -> None:
        manifest["root"]["config"]["fields"]["width"] = width

    return rewrite(tmp_path / "small.zarc", tmp_path / "grown.zarc", grow)


def test_weights_that_do_not_fit_the_meta_build_are_refused_without_a_real_build(tmp_path: Path) -> None:
    path = _grown(tmp_path, Wide, 300_000)  # 300000 x 300000 float32: 360 GB if built for real
    with pytest.raises(zarchive.ConfigMismatchError, match="do not fit|does not match"):
        zarchive.read(path)
    assert BUILT == ["Wide"]  # one build, on meta


def test_a_real_build_is_held_to_what_the_archive_holds(tmp_path: Path) -> None:
    path = _grown(tmp_path, WideReadsValues, 30_000)  # 3.6 GB of weights asked for by a 4x4 archive
    with pytest.raises(zarchive.UnsafeArchiveError, match="more than"):
        zarchive.read(path)
    back = zarchive.read(_grown(tmp_path, WideReadsValues, 4))
    assert isinstance(back, WideReadsValues)


# --- limits ---
def test_node_and_byte_limits_are_checked_in_the_plan(tmp_path: Path) -> None:
    path = tmp_path / "l.zarc"  # 800 KB of int64 zeros: a compressed member, decoded on reading
    obj = {"a": list(range(100)), "z": {"v": torch.zeros(100_000, dtype=torch.int64)}, "w": {"v": torch.ones(1000)}}
    zarchive.save(obj, path)  # (tensors under "z" and "w" go to members of their own)
    with pytest.raises(zarchive.UnsafeArchiveError, match="max_nodes=50"):
        zarchive.read(path, max_nodes=50)
    with pytest.raises(
        zarchive.UnsafeArchiveError,
        match=r"allocates 80[0-9],[0-9]{3} bytes .*over max_read_bytes=100,000",
    ):
        zarchive.read(path, max_read_bytes=100_000)
    with zarchive.open(path, max_read_bytes=100_000, mmap=True) as arc:  # mapped: float weights cost nothing
        assert arc.plan("w").nbytes == 0 and arc["w/v"].shape == (1000,)
    with zarchive.open(path, max_read_bytes=100_000) as arc:  # copied (the default): they cost their size
        assert arc.plan("w").nbytes == arc.members["w.safetensors"]["size"] and arc["w/v"].shape == (1000,)
    assert zarchive.read(path)["a"] == list(range(100))  # the default: 1 GiB + 16 x the file
    with zarchive.open(path, lazy=False) as arc:  # read into memory: every member costs its size
        assert arc.plan("w").nbytes == arc.members["w.safetensors"]["size"] > 4000
    with pytest.raises(ValueError, match="max_nodes"):
        zarchive.ZArchive(max_nodes=0)


# --- versions ---
def _newer(tmp_path: Path, edit: Any, minor: int = FORMAT_MINOR + 1, major: int = FORMAT_MAJOR) -> Path:
    src = tmp_path / "src.zarc"
    zarchive.save({"sd": {f"w{i}": torch.zeros(2) for i in range(70)}, "n": 1}, src, compress=False)
    version = f"{major}.{minor}"

    def manifest_edit(m: dict[str, Any]) -> None:
        m["format_version"] = version
        edit(m["root"])

    def meta_edit(meta: dict[str, Any]) -> None:
        meta["format_version"] = version

    return rewrite(src, tmp_path / f"v{version}.zarc", manifest_edit, meta_edit)


def test_a_newer_minor_file_that_uses_nothing_new_reads(tmp_path: Path) -> None:
    back = zarchive.read(_newer(tmp_path, lambda root: None))
    assert back["n"] == 1 and len(back["sd"]) == 70


def test_an_unknown_node_type_in_a_newer_minor_file_is_a_version_error(tmp_path: Path) -> None:
    def add(root: dict[str, Any]) -> None:
        root["new"] = {"$type": "torch.SparseTensor", "indices": []}

    with pytest.raises(zarchive.VersionError, match="torch.SparseTensor.*newer than this reader") as info:
        zarchive.read(_newer(tmp_path, add))
    assert info.value.path == "new"


def test_a_known_node_in_a_new_shape_in_a_newer_minor_file_is_a_version_error(tmp_path: Path) -> None:
    def reshape(root: dict[str, Any]) -> None:  # what a 1.1 reader met in 1.2 files: a new 'tensors' form
        root["sd"]["tensors"] = {"columns": {"name": [], "dtype": []}}

    path = _newer(tmp_path, reshape)
    with pytest.raises(zarchive.VersionError, match="'dict' node in a shape this reader does not know"):
        zarchive.read(path)
    with pytest.raises(zarchive.VersionError), zarchive.open(path) as arc:
        arc["sd"]
    same_version = _newer(tmp_path, reshape, minor=FORMAT_MINOR)
    with pytest.raises(zarchive.FormatError) as info:  # the same damage in a file of our version
        zarchive.read(same_version)
    assert type(info.value) is zarchive.FormatError


def test_a_newer_major_version_is_refused_at_open(tmp_path: Path) -> None:
    with pytest.raises(zarchive.VersionError, match="upgrade zarchive"):
        zarchive.open(_newer(tmp_path, lambda root: None, minor=0, major=FORMAT_MAJOR + 1))


def test_a_newer_handler_version_is_a_version_error(tmp_path: Path) -> None:
    def bump(root: dict[str, Any]) -> None:
        root["x"] = {"$type": "complex", "$version": 2, "real": 1.0, "imag": 0.0}

    with pytest.raises(zarchive.VersionError, match="handler version 2"):
        zarchive.read(_newer(tmp_path, bump, minor=FORMAT_MINOR))


# --- tensors as numpy, through the public API ---
def test_tensors_as_numpy_through_read_and_open(tmp_path: Path) -> None:
    import numpy as np

    Wide(WidthConfig(3)).save(tmp_path / "m.zarc")
    back = zarchive.read(tmp_path / "m.zarc", tensors="numpy")
    assert isinstance(back, zarchive.GenericObject) and back.kind == "ConfiguredModel"
    assert isinstance(back.config, WidthConfig)  # the config class is known here: built as itself
    assert isinstance(back.state_dict["fc.weight"], np.ndarray) and back.state_dict["fc.weight"].shape == (3, 3)
    with zarchive.open(tmp_path / "m.zarc", tensors="numpy") as arc:
        assert isinstance(arc["state_dict/fc.weight"], np.ndarray)
    with pytest.raises(ValueError, match="tensors must be"):
        zarchive.read(tmp_path / "m.zarc", tensors="jax")


def test_reading_tensors_as_numpy_does_not_import_torch(tmp_path: Path) -> None:
    zarchive.save({"w": torch.randn(4, 4), "n": torch.Size([2]), "d": torch.float16}, tmp_path / "t.zarc")
    code = (
        "import sys, zarchive; v = zarchive.read(sys.argv[1], tensors='numpy'); "
        "assert v['w'].shape == (4, 4) and v['n'] == (2,) and v['d'] == 'float16', v; "
        "assert 'torch' not in sys.modules and 'pandas' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "t.zarc")], check=True)


# --- handlers from installed packages (the zarchive.handlers entry-point group) ---
_PLUGIN = """
import fractions
from zarchive import Handler

class FractionHandler(Handler):
    name = "zfrac.Fraction"
    version = 2

    def accepts(self, cls):
        return cls is fractions.Fraction

    def save(self, obj, ctx):
        return {"$type": self.name, "n": obj.numerator, "d": obj.denominator}

    def load(self, node, ctx):
        return fractions.Fraction(node["n"], node["d"])

    def summary(self, node):
        return f"fraction {node.get('n')}/{node.get('d')}"
"""


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny package declaring a handler in the entry-point group, installed with pip into a folder."""
    src = tmp_path_factory.mktemp("zfrac_src")
    (src / "zfrac").mkdir()
    (src / "zfrac" / "__init__.py").write_text(_PLUGIN)
    (src / "pyproject.toml").write_text(
        textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "zfrac"
        version = "0.1"
        [project.entry-points."zarchive.handlers"]
        "zfrac.Fraction" = "zfrac:FractionHandler"
        """)
    )
    site = tmp_path_factory.mktemp("zfrac_site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(src),
        ],
        check=True,
    )
    return site


def test_a_handler_from_an_installed_package_works_without_registering(plugin_site: Path, tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import fractions, sys, zarchive
        path = sys.argv[1]
        zarchive.save({"f": fractions.Fraction(3, 7)}, path)
        with zarchive.open(path) as arc:
            assert arc.manifest["root"]["f"]["$version"] == 2, arc.manifest
            assert arc.summary("f") == "fraction 3/7"
        assert zarchive.read(path) == {"f": fractions.Fraction(3, 7)}
        print("ok")
    """)
    env = {**__import__("os").environ, "PYTHONPATH": str(plugin_site)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "f.zarc")], env=env, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    with pytest.raises(zarchive.UnknownTypeError, match="zfrac.Fraction.*install the package"):
        zarchive.read(tmp_path / "f.zarc")  # this process does not have the package


def test_every_node_type_says_which_format_version_gave_it_its_shape() -> None:
    from zarchive.engine.protocol import FORMAT_VERSION
    from zarchive.nodes import BUILTIN_SCHEMAS

    def parse(v: str) -> tuple[int, int]:
        major, minor = v.split(".")
        return int(major), int(minor)

    for tag, schema in BUILTIN_SCHEMAS.items():
        assert parse("1.0") <= parse(schema.since) <= parse(FORMAT_VERSION), tag
    assert BUILTIN_SCHEMAS["dict"].since == "1.2"  # tensor tables as lists


@pytest.mark.parametrize("kind", ["tuple", "dict", "list", "dataclass-like dict"])
def test_the_writer_refuses_exactly_the_nesting_the_reader_refuses(kind: str, tmp_path: Path) -> None:
    """Nesting is counted per manifest node by both sides (a tuple is two: itself and its items), so
    whatever saves reads back, and what the reader would refuse is refused at save time."""

    def nest(n: int) -> Any:
        x: Any = 0
        for _ in range(n):
            x = (x,) if kind == "tuple" else [x] if kind == "list" else {"a": x} if kind == "dict" else {1: x}
        return x

    saved = 0
    for n in range(60, 260, 7):
        try:
            zarchive.save(nest(n), tmp_path / "n.zarc")
        except zarchive.SaveError as e:
            assert "nested more than" in str(e)
            continue
        saved += 1
        assert zarchive.read(tmp_path / "n.zarc") == nest(n)
    assert saved  # some depths save, and every one that saves reads
