"""zarchive.compat.zanj: code written for ZANJ runs after replacing `zanj` by `zarchive.compat.zanj`
in its imports. The ZANJ-style script (tests/zanj_style_script.py) runs as a real subprocess with the
real `zanj` (so it is ZANJ's idiom), with its imports changed, and reading what the real `zanj` wrote.
The rest checks the mapping of ZANJ's arguments, its torchutil helpers and its loader API."""

from __future__ import annotations

import inspect
import logging
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field
from muutils.json_serialize.json_serialize import SerializerHandler
from rewrite import rewrite

import zarchive
from zarchive.compat.zanj import ZANJ, zip_method_to_compress
from zarchive.compat.zanj.loading import LOADER_MAP, LoaderHandler, load_item_recursive, register_loader_handler
from zarchive.compat.zanj.torchutil import (
    ConfigMismatchException,
    ConfiguredModel,
    assert_model_cfg_equality,
    assert_model_exact_equality,
    get_module_device,
    num_params,
    set_config_class,
)
from zarchive.errors import ConfigMismatchError, FieldMismatchError, FormatError, SaveError, UnknownTypeError
from zarchive.formats.zanj.format_loaders import unregister_format_loader

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "zanj_style_script.py"
REPO = HERE.parent

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation:DeprecationWarning", "ignore::zarchive.engine.main_classes.ClassLocationWarning"
)


def _real_zanj() -> Any:
    return pytest.importorskip("zanj")


def _with_compat_imports(text: str) -> str:
    """The one-line change a ZANJ user makes: `zanj` -> `zarchive.compat.zanj` in the imports."""
    changed = re.sub(r"^(from|import) zanj\b", r"\1 zarchive.compat.zanj", text, flags=re.MULTILINE)
    assert changed != text and "from zanj" not in changed
    return changed


def _run(script: Path, *args: str, without_zanj: bool = False) -> subprocess.CompletedProcess[str]:
    """Run `script` in a fresh interpreter; `without_zanj`: as if the zanj package were not installed."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, str(script), *args]
    if without_zanj:
        runner = (
            "import runpy, sys; sys.modules['zanj'] = None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')"
        )
        command = [sys.executable, "-c", runner, str(script), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)


@pytest.fixture(scope="module")
def compat_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("script") / "zanj_style_script_compat.py"
    path.write_text(_with_compat_imports(SCRIPT.read_text()))
    return path


# --- the ZANJ-style script, as a real program ------------------------------------------------------
def test_the_script_is_zanj_code_it_runs_with_the_real_zanj(tmp_path: Path) -> None:
    _real_zanj()
    done = _run(SCRIPT, str(tmp_path), "both")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ALL OK")
    with zipfile.ZipFile(tmp_path / "model.zanj") as z:  # the real ZANJ's format
        assert "__zanj__.json" in z.namelist()


def test_the_script_runs_with_its_imports_changed(tmp_path: Path, compat_script: Path) -> None:
    done = _run(compat_script, str(tmp_path), "both", without_zanj=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ALL OK")
    assert "import zanj" not in compat_script.read_text()
    for name in ("data.zanj", "model.zanj", "wrapped.zanj", "stored.zanj"):  # ZANJ's names, zarchive's format
        with zarchive.open(tmp_path / name) as arc:
            assert arc.manifest["format"] == "zarchive"
    assert not zarchive.formats.zanj.is_zanj_file(tmp_path / "model.zanj")


def test_the_changed_script_reads_what_the_real_zanj_wrote(tmp_path: Path, compat_script: Path) -> None:
    _real_zanj()
    wrote = _run(SCRIPT, str(tmp_path), "write")
    assert wrote.returncode == 0, wrote.stderr[-3000:]
    assert zarchive.formats.zanj.is_zanj_file(tmp_path / "model.zanj")
    done = _run(compat_script, str(tmp_path), "read", without_zanj=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ALL OK")


# --- the constructor --------------------------------------------------------------------------------
def test_constructor_has_zanjs_parameters_order_and_defaults() -> None:
    zanj = _real_zanj()
    theirs = inspect.signature(zanj.ZANJ.__init__).parameters
    ours = inspect.signature(ZANJ.__init__).parameters
    names = [n for n in theirs if n != "self"]
    assert [n for n in ours if n in names] == names  # every one of ZANJ's parameters, in ZANJ's order
    for name in ("internal_array_mode", "external_array_threshold", "external_list_threshold", "compress"):
        assert ours[name].default == theirs[name].default, name
    assert ours["custom_settings"].default is None and tuple(ours["handlers_pre"].default) == ()
    z = ZANJ()
    assert z.error_mode.value == "except" == str(theirs["error_mode"].default.value)
    assert z.compress == zipfile.ZIP_DEFLATED == zanj.ZANJ().compress
    assert z.array_mode == "array_list_meta" and z.custom_settings == {}
    assert isinstance(z, zarchive.ZArchive)


def test_zanjs_default_handlers_are_accepted_and_do_nothing_more(tmp_path: Path) -> None:
    _real_zanj()
    from zanj.serializing import DEFAULT_SERIALIZER_HANDLERS_ZANJ

    z = ZANJ(handlers_default=DEFAULT_SERIALIZER_HANDLERS_ZANJ)
    assert z.registry.serializers == ()
    path = z.save({"a": np.arange(300), "t": (1, 2)}, tmp_path / "x")
    back = z.read(path)
    assert back["t"] == (1, 2) and np.array_equal(back["a"], np.arange(300))


@pytest.mark.parametrize(
    ("method", "compressed"),
    [(zipfile.ZIP_STORED, False), (zipfile.ZIP_DEFLATED, True), (zipfile.ZIP_BZIP2, True), (zipfile.ZIP_LZMA, True)],
)
def test_compress_takes_zip_methods(tmp_path: Path, method: int, compressed: bool) -> None:
    z = ZANJ(compress=method)
    assert z.compress == method
    path = z.save({"ids": np.zeros(50_000, dtype=np.int8)}, tmp_path / "c")  # (int8: zstd, not byte-grouped)
    with zarchive.open(path) as arc:
        codecs = {entry["codec"] for name, entry in arc.members.items() if name.startswith("ids")}
    assert codecs == ({"zstd"} if compressed else {"none"})


def test_compress_refuses_what_is_not_a_zip_method() -> None:
    with pytest.raises(ValueError, match="not a zip compression method"):
        ZANJ(compress=3)
    with pytest.raises(TypeError, match="compress"):
        zip_method_to_compress(1.5)
    assert ZANJ(compress="zstd:5").settings.compress_level == 5  # zarchive's own spelling passes through


def test_internal_array_mode_is_checked_and_every_mode_reads_back_arrays(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="internal_array_mode"):
        ZANJ(internal_array_mode="pickle")
    for mode in ("list", "array_list_meta", "array_hex_meta", "array_b64_meta", "external", "zero_dim"):
        z = ZANJ(internal_array_mode=mode)
        back = z.read(z.save({"a": np.arange(6, dtype=np.int16).reshape(2, 3)}, tmp_path / mode))
        assert back["a"].dtype == np.int16 and back["a"].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_save_appends_the_suffix_and_read_raises_file_not_found(tmp_path: Path) -> None:
    z = ZANJ()
    assert z.save([1], tmp_path / "a") == str(tmp_path / "a.zanj")
    assert z.save([2], str(tmp_path / "b.zanj")) == str(tmp_path / "b.zanj")
    assert z.save([3], tmp_path / "sub" / "c.zip") == str(tmp_path / "sub" / "c.zip.zanj")  # folders made
    assert z.read(tmp_path / "a.zanj") == [1]
    with pytest.raises(FileNotFoundError, match="file not found"):
        z.read(tmp_path / "missing.zanj")
    with pytest.raises(FileNotFoundError, match="not a file"):
        z.read(tmp_path)


def test_external_array_threshold_counts_like_zanj(tmp_path: Path) -> None:
    """ZANJ moves an array to its own member when size >= threshold: so does zarchive."""
    zanj = _real_zanj()
    arrays = {"below": np.arange(9.0), "at": np.arange(10.0), "above": np.arange(11.0)}
    real = zanj.ZANJ(external_array_threshold=10).save(arrays, str(tmp_path / "real"))
    with zipfile.ZipFile(real) as z:
        theirs = {n.split(".")[0] for n in z.namelist() if n.endswith(".npy")}
    ours = ZANJ(external_array_threshold=10).save(arrays, tmp_path / "ours")
    with zarchive.open(ours) as arc:
        root = arc.manifest["root"]
        members = {k for k, v in root.items() if "$ref" in v}
    assert theirs == members == {"at", "above"}
    assert zarchive.read(ours)["at"].tolist() == list(range(10))


def test_error_mode_except_by_default_and_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = zarchive.save({"c": DriftOld()}, tmp_path / "d.zarc")
    zarchive.register_class(DriftNew, name=zarchive.engine.typeref.class_tag(DriftOld), overwrite=True)
    try:
        with pytest.raises(FieldMismatchError, match="has no field 'extra'.*takes its default 7"):
            ZANJ().read(path)
        with caplog.at_level(logging.WARNING, logger="zarchive"):
            back = ZANJ(error_mode="log").read(path)
        assert back["c"] == DriftNew(a=1, extra=7)
        assert any("has no field 'extra'" in r.getMessage() for r in caplog.records)
    finally:
        zarchive.unregister_class(zarchive.engine.typeref.class_tag(DriftOld))


@serializable_dataclass
class DriftOld(SerializableDataclass):
    a: int = serializable_field(default=1)


@serializable_dataclass
class DriftNew(SerializableDataclass):
    a: int = serializable_field(default=1)
    extra: int = serializable_field(default=7)


# --- models -------------------------------------------------------------------------------------------
@serializable_dataclass
class DropCfg(SerializableDataclass):
    d_in: int = serializable_field(default=3)
    d_out: int = serializable_field(default=2)


@set_config_class(DropCfg)
class DropNet(ConfiguredModel[DropCfg]):
    def __init__(self, cfg: DropCfg) -> None:
        super().__init__(cfg)
        self.fc = torch.nn.Linear(cfg.d_in, cfg.d_out)


@set_config_class(DropCfg)
class KeyRenamingNet(ConfiguredModel[DropCfg]):
    """Loads weights saved under an old name through ZANJ's hook."""

    def __init__(self, cfg: DropCfg) -> None:
        super().__init__(cfg)
        self.linear = torch.nn.Linear(cfg.d_in, cfg.d_out)

    def _load_state_dict_wrapper(self, state_dict: dict[str, torch.Tensor], **kwargs: Any) -> Any:
        renamed = {k.replace("fc.", "linear."): v for k, v in state_dict.items()}
        return self.load_state_dict(renamed, **kwargs)


def test_model_save_read_serialize_load(tmp_path: Path) -> None:
    model = DropNet(DropCfg())
    model.training_records = {"loss": [0.5, 0.25]}
    path = model.save(tmp_path / "m")
    assert path.endswith("m.zanj")
    back = DropNet.read(path)
    assert_model_exact_equality(model, back)
    assert back.training_records == {"loss": [0.5, 0.25]}
    assert back.zanj_model_config is back.config
    with pytest.deprecated_call():
        assert_model_exact_equality(model, DropNet.load_file(path))
    with pytest.raises(FileNotFoundError):
        DropNet.read(tmp_path / "nope.zanj")
    with pytest.raises(ConfigMismatchError):
        KeyRenamingNet.read(path)  # another class: refused, not returned as the wrong thing

    form = model.serialize()
    assert form["__muutils_format__"] == "DropNet" and form["meta"]["num_params"] == 8
    assert form["zanj_model_config"]["d_in"] == 3 and form["training_records"] == {"loss": [0.5, 0.25]}
    saved = ZANJ().save(form, tmp_path / "form")
    again = DropNet.load(ZANJ().read(saved), ())
    assert_model_exact_equality(model, again)
    assert again.training_records == {"loss": [0.5, 0.25]}


def test_load_state_dict_wrapper_is_honoured_with_custom_settings(tmp_path: Path) -> None:
    path = DropNet(DropCfg()).save(tmp_path / "old")
    tag = zarchive.engine.typeref.class_tag(DropNet)
    zarchive.register_class(KeyRenamingNet, name=tag, overwrite=True)
    try:
        back = ZANJ().read(path)
        assert isinstance(back, KeyRenamingNet)
        assert torch.equal(back.linear.weight, DropNet.read(path).fc.weight)
        with pytest.raises(ConfigMismatchError, match="_load_state_dict_wrapper failed"):
            ZANJ(custom_settings={"_load_state_dict_wrapper": {"bogus": 1}}).read(path)
    finally:
        zarchive.unregister_class(tag)


def test_torchutil_helpers() -> None:
    model = DropNet(DropCfg())
    assert get_module_device(model) == (True, torch.device("cpu"))
    assert get_module_device(torch.nn.ReLU()) == (False, {})
    mixed = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2, device="meta"))
    same, devices = get_module_device(mixed)
    assert not same and isinstance(devices, dict) and devices["1.weight"] == torch.device("meta")
    tied = torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False), torch.nn.Linear(4, 4, bias=False))
    tied[1].weight = tied[0].weight
    assert num_params(tied) == 16
    with pytest.raises(ConfigMismatchException) as info:
        assert_model_cfg_equality(model, DropNet(DropCfg(d_out=4)))
    assert isinstance(info.value, ValueError) and info.value.diff == {"d_out": {"self": 2, "other": 4}}
    assert str(info.value).endswith(": {'d_out': {'self': 2, 'other': 4}}")
    other = DropNet(DropCfg())
    with pytest.raises(AssertionError, match="2 / 2 state dict elements don't match"):
        assert_model_exact_equality(model, other)


def test_a_model_without_config_class_raises_not_implemented() -> None:
    class Undeclared(ConfiguredModel[DropCfg]):
        pass

    with pytest.raises(NotImplementedError, match="set_config_class"):
        Undeclared(DropCfg())


# --- the loader API -----------------------------------------------------------------------------------
class Money:
    def __init__(self, cents: int, currency: str) -> None:
        self.cents, self.currency = cents, currency

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and (self.cents, self.currency) == (other.cents, other.currency)


MONEY_SERIALIZER = SerializerHandler(
    check=lambda self, obj, path: isinstance(obj, Money),
    serialize_func=lambda self, obj, path: {
        "__muutils_format__": "Money",
        "cents": obj.cents,
        "currency": obj.currency,
        "history": np.arange(300) * obj.cents,  # an array inside: a member of its own
    },
    uid="Money",
    desc="money",
)


@pytest.fixture
def money_loader() -> Any:
    register_loader_handler(
        LoaderHandler(
            check=lambda item, path=None, z=None: isinstance(item, dict) and item.get("__muutils_format__") == "Money",
            load=lambda item, path=None, z=None: Money(item["cents"], item["currency"]),
            uid="Money",
            source_pckg="tests",
        )
    )
    yield
    LOADER_MAP.pop("Money", None)
    unregister_format_loader("Money")


def test_serializer_and_loader_handlers_round_trip(tmp_path: Path, money_loader: None) -> None:
    z = ZANJ(handlers_pre=(MONEY_SERIALIZER,))
    path = z.save({"price": Money(250, "EUR"), "prices": [Money(1, "USD")]}, tmp_path / "money")
    with zarchive.open(path) as arc:
        node = arc.manifest["root"]["price"]
        assert node["$type"] == "zanj.custom" and node["uid"] == "Money"
        assert "$ref" in node["value"]["history"]  # the array went to a member
    back = zarchive.read(path)  # a plain zarchive read once the compat module is imported
    assert back == {"price": Money(250, "EUR"), "prices": [Money(1, "USD")]}


def test_custom_node_without_loader(tmp_path: Path) -> None:
    z = ZANJ(handlers_pre=(MONEY_SERIALIZER,))
    path = z.save({"price": Money(3, "EUR")}, tmp_path / "money")
    with pytest.raises(UnknownTypeError, match="register_loader_handler"):
        z.read(path)
    raw = zarchive.read(path, unresolved="generic")["price"]
    assert raw["cents"] == 3 and raw["__muutils_format__"] == "Money"


def test_malformed_custom_nodes_are_format_errors(tmp_path: Path, money_loader: None) -> None:
    path = ZANJ(compress=False, handlers_pre=(MONEY_SERIALIZER,)).save({"price": Money(3, "EUR")}, tmp_path / "m")
    assert zarchive.read(path) == {"price": Money(3, "EUR")}
    edits: list[Any] = [
        lambda node: node.update(uid=5),
        lambda node: node.pop("uid"),
        lambda node: node.pop("value"),
    ]
    for i, edit in enumerate(edits):
        bad = rewrite(
            Path(path), tmp_path / f"bad{i}.zarc", manifest_edit=lambda m, edit=edit: edit(m["root"]["price"])
        )
        with pytest.raises(FormatError, match="zanj.custom"):
            zarchive.read(bad)


def test_real_zanj_custom_formats_read_through_registered_loaders(tmp_path: Path, money_loader: None) -> None:
    zanj = _real_zanj()
    real_serializer = SerializerHandler(
        check=lambda self, obj, path: isinstance(obj, Money),
        serialize_func=lambda self, obj, path: {
            "__muutils_format__": "Money",
            "cents": obj.cents,
            "currency": obj.currency,
        },
        uid="Money",
        desc="money",
    )
    path = zanj.ZANJ(handlers_pre=(real_serializer,)).save({"m": Money(7, "GBP")}, str(tmp_path / "real"))
    assert zarchive.read(path) == {"m": Money(7, "GBP")}
    assert ZANJ().read(path) == {"m": Money(7, "GBP")}
    LOADER_MAP.pop("Money", None)
    unregister_format_loader("Money")
    with pytest.raises(UnknownTypeError, match="register its loader"):
        zarchive.read(path)


def test_load_item_recursive_leaves_read_values_alone(money_loader: None) -> None:
    arr = np.arange(3)
    out = load_item_recursive({"a": arr, "m": {"__muutils_format__": "Money", "cents": 1, "currency": "X"}, "l": [1]})
    assert out["a"] is arr and out["m"] == Money(1, "X") and out["l"] == [1]


def test_no_pickling_fallback(tmp_path: Path) -> None:
    class Opaque:
        pass

    for mode in ("except", "warn", "ignore"):
        with pytest.raises(SaveError, match="no handler can save"):
            ZANJ(error_mode=mode).save({"x": Opaque()}, tmp_path / "o")
    assert not (tmp_path / "o.zanj").exists()


def test_muutils_dataclasses_need_no_zanj_module(tmp_path: Path) -> None:
    """muutils registers each serializable_dataclass with an importable `zanj` module's loader API;
    with `zanj` not importable at all, a ZANJ user's code on the compat module still reads them."""
    script = tmp_path / "no_zanj.py"
    script.write_text(
        "import sys\n"
        "sys.modules['zanj'] = None  # as if zanj were not installed\n"
        "from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field\n"
        "from zarchive.compat.zanj import ZANJ\n"
        "@serializable_dataclass\n"
        "class Cfg(SerializableDataclass):\n"
        "    n: int = serializable_field(default=3)\n"
        "z = ZANJ()\n"
        f"back = z.read(z.save({{'cfg': Cfg(n=5)}}, {str(tmp_path / 'c')!r}))\n"
        "assert back['cfg'] == Cfg(n=5), back\n"
        "assert 'zanj' not in sys.modules or sys.modules['zanj'] is None\n"
        "print('OK')\n"
    )
    done = _run(script)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "OK"


def test_import_is_light() -> None:
    code = "import sys, zarchive.compat.zanj; print('torch' in sys.modules, 'pandas' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert done.stdout.split() == ["False", "False"], done.stderr


def test_documented_differences_in_what_gets_a_member(tmp_path: Path) -> None:
    """README: tensors always get a member (ZANJ inlines small ones); a list goes to a member past
    external_list_threshold items (ZANJ: at it); tuples come back as tuples (ZANJ: lists)."""
    zanj = _real_zanj()
    value = {"t": torch.ones(3), "at": list(range(8)), "past": list(range(9)), "tu": (1, 2)}
    real = zanj.ZANJ(external_list_threshold=8).save(value, str(tmp_path / "real"))
    with zipfile.ZipFile(real) as z:
        values = sorted(n for n in z.namelist() if "/" not in n and not n.startswith("__"))  # (not its metadata)
    assert values == ["at.jsonl", "past.jsonl"]
    assert zanj.ZANJ().read(real)["tu"] == [1, 2]
    ours = ZANJ(external_list_threshold=8).save(value, tmp_path / "ours")
    with zarchive.open(ours) as arc:
        members = sorted(n for n in arc.members if n not in ("manifest.json", "metadata.json"))
    assert len(members) == 2 and members[0].startswith("past.jsonl") and ".safetensors" in members[1], members
    back = zarchive.read(ours)
    assert back["tu"] == (1, 2) and torch.equal(back["t"], torch.ones(3))


def test_float_arrays_stay_uncompressed(tmp_path: Path) -> None:
    data = {"array": np.random.default_rng(0).random((100, 100))}
    on, off = ZANJ(compress=True).save(data, tmp_path / "on"), ZANJ(compress=False).save(data, tmp_path / "off")
    with zarchive.open(on) as arc:
        assert {e["codec"] for n, e in arc.members.items() if n.startswith("array")} == {"none"}
    assert os.path.getsize(on) >= os.path.getsize(off) - 512  # no smaller: the floats are stored as they are
    assert np.array_equal(zarchive.read(on)["array"], data["array"])


def test_model_read_of_its_serialize_dict(tmp_path: Path) -> None:
    model = DropNet(DropCfg())
    path = ZANJ().save(model.serialize(), tmp_path / "as_dict")
    assert isinstance(ZANJ().read(path), dict)
    back = DropNet.read(path)
    assert type(back) is DropNet
    assert_model_exact_equality(model, back)
    with pytest.raises(ConfigMismatchError):
        KeyRenamingNet.read(path)  # the dict names another class
