"""What a newcomer meets: error messages that name the file and say what to do instead, verify()'s
result, member counts that agree, `from zarchive import *`, dtype names in listings, and the warning
for a dataclass field the class gained."""

from __future__ import annotations

import builtins
import dataclasses
import os
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zarchive
from zarchive.cli import main as cli_main
from zarchive.engine.dtype_text import numpy_dtype_name

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


# --- keywords from torch habits and typos ---


@pytest.mark.parametrize("fn", ["read", "open"])
def test_weights_only_is_reported_as_the_functions_own_with_what_zarchive_does_and_mmap_works(
    tmp_path: Path, fn: str
) -> None:
    path = zarchive.save({"a": 1}, tmp_path / "a.zarc")
    with pytest.raises(TypeError) as info:
        getattr(zarchive, fn)(path, weights_only=True)
    msg = str(info.value)
    assert msg.startswith(f"{fn}() got an unexpected keyword argument 'weights_only'")
    assert "ZArchive.__init__" not in msg and "never runs code" in msg and "trusted=" in msg
    # torch.load(mmap=True) means what zarchive's mmap setting means (zero-copy views of the file)
    opened = getattr(zarchive, fn)(path, mmap=True)
    assert (opened.load() if fn == "open" else opened) == {"a": 1}
    if fn == "open":
        opened.close()


def test_a_misspelt_keyword_names_the_function_and_the_likely_one(tmp_path: Path) -> None:
    path = zarchive.save({"a": 1}, tmp_path / "a.zarc")
    with pytest.raises(TypeError, match=r"^read\(\) got an unexpected keyword argument 'map_locaton'.*'map_location'"):
        zarchive.read(path, map_locaton="cpu")
    with pytest.raises(TypeError, match=r"^save\(\) got an unexpected keyword argument 'compres'.*'compress'"):
        zarchive.save({"a": 1}, tmp_path / "b.zarc", compres=False)
    with pytest.raises(TypeError, match=r"^save\(\) got an unexpected keyword argument 'map_location'"):
        zarchive.save({"a": 1}, tmp_path / "b.zarc", map_location="cpu")
    # settings of ZArchive still pass through the module functions
    assert zarchive.read(path, verify=False, max_nodes=100) == {"a": 1}


# --- saving where one cannot ---


def _refuse_temp_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a read-only directory does to a save, also when the tests run as root."""

    def refuse(*args: Any, dir: str | None = None, prefix: str = "", suffix: str = "", **kw: Any) -> Any:
        raise PermissionError(13, "Permission denied", os.path.join(dir or ".", prefix + "x1y2z3" + suffix))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)


def test_saving_into_a_read_only_directory_names_the_target_and_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "ro" / "run.zarc"
    target.parent.mkdir()
    src = _good_archive(tmp_path)
    _refuse_temp_files(monkeypatch)
    with pytest.raises(PermissionError) as info:
        zarchive.save({"a": 1}, target)
    msg = str(info.value)
    assert repr(str(target)) in msg and "is not writable" in msg and str(target.parent) in msg
    assert ".zarc-tmp" not in msg and "x1y2z3" not in msg
    assert cli_main(["convert", str(src), str(tmp_path / "ro" / "out.safetensors")]) != 0


def test_the_cli_names_the_target_of_a_refused_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _good_archive(tmp_path)
    (tmp_path / "ro").mkdir()
    _refuse_temp_files(monkeypatch)
    for dst in ("out.safetensors", "out.zarc"):
        assert cli_main(["convert", str(src), str(tmp_path / "ro" / dst)]) != 0
        err = capsys.readouterr().err
        assert dst in err and "is not writable" in err and "x1y2z3" not in err, err


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_really_read_only_directory(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(PermissionError, match="is not writable"):
            zarchive.save({"a": 1}, ro / "run.zarc")
    finally:
        ro.chmod(0o755)


# --- files that are not archives ---


@pytest.mark.parametrize("command", ["ls", "show", "meta", "verify", "audit", "cat", "extract", "convert"])
def test_cli_errors_for_a_file_that_is_not_a_zip_name_the_file(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "notes.zarc"
    bad.write_text("hello, I am a text file\n")
    extra = {"cat": ["x"], "extract": [str(tmp_path / "out")], "convert": [str(tmp_path / "o.safetensors")]}
    assert cli_main([command, str(bad), *extra.get(command, [])]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "not a zip" in err, err
    assert err.count(str(bad)) == 1, err


# --- verify(): truthy when intact, and the counts agree ---


def _good_archive(tmp_path: Path) -> Path:
    import torch

    return Path(
        zarchive.save(
            {"w": torch.arange(600.0).reshape(20, 30), "a": np.arange(1000, dtype=np.int16), "n": 1},
            tmp_path / "good.zarc",
            compress=False,
        )
    )


def _flip_inside(path: Path, member: str) -> None:
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(member)
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        n, m = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
        pos = info.header_offset + 30 + n + m + info.file_size // 2
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ 0x40]))


def test_verify_result_is_truthy_when_intact_and_keeps_the_list(tmp_path: Path) -> None:
    path = _good_archive(tmp_path)
    members = len(zipfile.ZipFile(path).namelist())
    for result in (zarchive.verify(path), zarchive.open(path).verify()):
        assert isinstance(result, zarchive.VerifyResult)
        assert result and result.ok and result == [] and len(result) == 0 and list(result) == []
        assert result.members == members
        assert repr(result) == f"VerifyResult(OK: {members} members intact)"

    _flip_inside(path, "a.npy")
    result = zarchive.verify(path)
    assert not result and not result.ok
    assert len(result) == 1 and result[0][0] == "a.npy" and [m for m, _ in result] == ["a.npy"]
    assert result == [("a.npy", result[0][1])]  # old callers compared with a list of tuples
    member, problem = result[0]
    assert member == "a.npy" and "CRC" in problem
    assert repr(result).startswith("VerifyResult(DAMAGED: 1 problem(s) in 1 of") and "a.npy" in repr(result)
    assert result.damaged_members == ["a.npy"]


def test_ls_verify_and_repr_count_the_same_members(tmp_path: Path) -> None:
    path = _good_archive(tmp_path)
    in_zip = len(zipfile.ZipFile(path).namelist())  # what `unzip -l` counts, the JSON members too
    with zarchive.open(path) as arc:
        assert repr(arc).startswith(f"<zarchive {in_zip} members,")
    run = [sys.executable, "-m", "zarchive"]
    ls = subprocess.run([*run, "ls", str(path)], capture_output=True, text=True, env=_env(), check=True).stdout
    assert ls.splitlines()[-1].startswith(f"{in_zip} members,")
    ok = subprocess.run([*run, "verify", str(path)], capture_output=True, text=True, env=_env(), check=True).stdout
    assert ok.strip() == f"OK {path}: {in_zip} members intact"


# --- the namespace ---


def test_star_import_does_not_shadow_the_builtin_open() -> None:
    namespace: dict[str, Any] = {}
    exec("from zarchive import *", namespace)  # noqa: S102  # the very statement under test
    assert "open" not in namespace and namespace["read"] is zarchive.read
    assert "open" not in zarchive.__all__ and callable(zarchive.open) and zarchive.open is not builtins.open
    assert all(hasattr(zarchive, name) for name in zarchive.__all__)


# --- dtypes as a person reads them ---


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("<i2", "int16"),
        ("<i8", "int64"),
        ("|u1", "uint8"),
        ("<f4", "float32"),
        ("<c16", "complex128"),
        ("|b1", "bool"),
        ("<M8[ns]", "datetime64[ns]"),
        ("<m8[s]", "timedelta64[s]"),
        ("<U5", "U5"),
        ("|S3", "S3"),
        ("object", "object"),
    ],
)
def test_numpy_dtype_names(text: str, name: str) -> None:
    native = "<" if sys.byteorder == "little" else ">"
    assert numpy_dtype_name(text.replace("<", native)) == name


def test_show_prints_dtype_names_and_byte_order_only_where_not_native(tmp_path: Path) -> None:
    foreign = ">" if sys.byteorder == "little" else "<"
    arrays = {"small": np.arange(1000, dtype=np.int16), "big": np.zeros(300, dtype=np.dtype("int64").newbyteorder())}
    path = zarchive.save(arrays, tmp_path / "d.zarc")
    out = subprocess.run(
        [sys.executable, "-m", "zarchive", "show", str(path)], capture_output=True, text=True, env=_env(), check=True
    ).stdout
    assert "ndarray int16 [1000]" in out and "<i2" not in out
    order = "big-endian" if foreign == ">" else "little-endian"
    assert f"ndarray int64 {order} [300]" in out


# --- a dataclass that gained a field ---


@dataclasses.dataclass
class Gains:
    lr: float = 0.1


def test_a_field_the_class_gained_warns_naming_field_and_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = zarchive.save({"config": Gains(0.5)}, tmp_path / "g.zarc")

    @dataclasses.dataclass
    class Gains2:
        lr: float = 0.1
        warmup: int = 100
        tags: list[str] = dataclasses.field(default_factory=list)

    Gains2.__qualname__, Gains2.__name__ = Gains.__qualname__, Gains.__name__
    monkeypatch.setattr(sys.modules[__name__], "Gains", Gains2)
    with pytest.warns(UserWarning) as record:
        got = zarchive.read(path)
    assert got["config"] == Gains2(lr=0.5)
    messages = [str(w.message) for w in record]
    assert any("'warmup'" in m and "default 100" in m and "/config" in m for m in messages), messages
    assert any("'tags'" in m and "default list()" in m for m in messages), messages

    with pytest.raises(zarchive.FieldMismatchError, match="'warmup'"):
        zarchive.read(path, error_mode="except")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert zarchive.read(path, error_mode="ignore")["config"] == Gains2(lr=0.5)


def test_verify_result_is_not_mistaken_for_an_empty_list_by_json(tmp_path: Path) -> None:
    import json

    path = _good_archive(tmp_path)
    _flip_inside(path, "a.npy")
    result = zarchive.verify(path)
    with pytest.raises(TypeError):  # never silently written as [] (a falsy list subclass would be)
        json.dumps(result, indent=1)
    assert json.loads(json.dumps(list(result), indent=1))[0][0] == "a.npy"
    assert result.problems == list(result) and result[:1] == [result[0]]


# --- what a newcomer meets first ---


@pytest.mark.parametrize("call", ["read", "open", "verify"])
def test_a_missing_file_is_a_file_not_found_error_naming_it(tmp_path: Path, call: str) -> None:
    missing = tmp_path / "nope.zarc"
    with pytest.raises(FileNotFoundError) as info:
        getattr(zarchive, call)(missing)
    assert isinstance(info.value, zarchive.ArchiveNotFoundError) and isinstance(info.value, zarchive.ZArchiveError)
    assert str(missing) in str(info.value)


def test_not_a_zip_from_the_api_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "notes.zarc"
    bad.write_text("hello, I am a text file\n")
    with pytest.raises(zarchive.NotAZipError) as info:
        zarchive.read(bad)
    assert str(bad) in str(info.value) and "not a zip" in str(info.value)


def test_swapped_save_arguments_are_recognised(tmp_path: Path) -> None:
    with pytest.raises(zarchive.SaveError, match="arguments look swapped.*object first") as info:
        zarchive.save(str(tmp_path / "out.zarc"), {"a": 1})  # type: ignore[arg-type]
    assert isinstance(info.value, TypeError)
    assert not (tmp_path / "out.zarc").exists()
    with pytest.raises(zarchive.SaveError, match="file_path must be a path"):
        zarchive.save({"a": 1}, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "code",
    [lambda x: x, print, os.path.join, pytest, (i for i in range(3))],
    ids=["lambda", "builtin", "function", "module", "generator"],
)
def test_code_is_refused_as_code_not_as_a_missing_handler(tmp_path: Path, code: object) -> None:
    with pytest.raises(zarchive.SaveError, match="is code, and zarchive stores data, never code") as info:
        zarchive.save({"f": code}, tmp_path / "f.zarc")
    assert "register a handler" not in str(info.value) and info.value.path == "f"
