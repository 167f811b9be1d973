"""Bounded reads: a hostile file costs what its size says, and never crashes the reader.

- Work: every parser does work linear in its input (header dimensions, checksum entries, node nesting,
  CLI listings). Each test runs the same code on inputs of two sizes and compares counts of the work
  done, never wall times: Python line events inside zarchive (sys.settrace, deterministic for a given
  input once the code is warm), `RefWalker.steps`, `ArchiveReader.verified_bytes`.
- Exceptions: deep nesting of every node type, ints past Python's digit limit, anything read from the
  hostile corpus raises a ZArchiveError; the CLI exits 0, 1 or 2 on every corpus file, never 3.
- State: reading files leaves no per-process cache larger than before (enum pseudo-members above all).
"""

from __future__ import annotations

import contextlib
import enum
import io
import json
import os
import re
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import hostile.models  # noqa: F401 - classes some corpus files name
import numpy as np
import pytest
import torch
from hostile.cases_bounded import NESTING, jsonl_of_nodes, manifest_around, many_dims_header, nested_text
from hostile.craft import pack
from hostile.formats import safetensors_bytes
from hostile.make_corpus import CASES, CORPUS_DIR, base, with_root

import zarchive
from zarchive import cli
from zarchive.cli.common import RefWalker
from zarchive.container.safetensors_layout import forget_parsed_headers, parse_header
from zarchive.container.shapes import check_shape
from zarchive.engine import registry, typeref
from zarchive.handlers import meta_build, torch_model

PACKAGE_DIR = os.path.dirname(os.path.abspath(zarchive.__file__))


# --- counting work ------------------------------------------------------------------------------------------
def count_lines(fn: Callable[[], Any]) -> int:
    """Lines of zarchive's own code executed by fn() (its exceptions are swallowed): a measure of the
    Python-level work, the same on every run for the same input."""
    count = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return local

    def global_trace(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename.startswith(PACKAGE_DIR) else None

    old = sys.gettrace()
    sys.settrace(global_trace)
    try:
        with contextlib.suppress(zarchive.ZArchiveError):
            fn()
    finally:
        sys.settrace(old)
    return count


def work_at_two_sizes(make: Callable[[int], Callable[[], Any]], small: int) -> tuple[int, int]:
    """Lines run for inputs of size `small` and 2 x `small` (each warmed up first)."""
    counts = []
    for n in (small, 2 * small):
        fn = make(n)
        count_lines(fn)  # warm: first calls import modules, fill per-class caches
        counts.append(count_lines(fn))
    return counts[0], counts[1]


def assert_linear(small: int, large: int, slack: float = 0.15) -> None:
    """Twice the input costs at most (2 + slack) times the work (a quadratic parser costs 4 times)."""
    assert large <= (2 + slack) * small, f"work grew {large / small:.2f}x for twice the input ({small} -> {large})"


def quiet_main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


# --- header dimensions --------------------------------------------------------------------------------------
def _st_head(header: bytes) -> memoryview:
    return memoryview(struct.pack("<Q", len(header)) + header)


def test_safetensors_dimensions_are_refused_before_any_work_per_dimension() -> None:
    """400,000 dimensions took 10 s (a product growing with each); now refused on the count alone:
    the same work for 1,000 and 400,000 dimensions. (An entry is checked when it is first looked up:
    fetching one tensor does not check the member's other entries.)"""
    counts = []
    for dims in (1000, 400_000):
        head = _st_head(many_dims_header(dims))
        with pytest.raises(zarchive.FormatError, match=f"{dims} dimensions"):
            parse_header(head, len(head) + 4, member="m")["t"]
        counts.append(
            count_lines(lambda h=head: (forget_parsed_headers(), parse_header(h, len(h) + 4, member="m")["t"]))
        )
    assert counts[1] <= counts[0] + 10  # (the same steps but for remembering a small header: none per dimension)
    head = _st_head(json.dumps({"t": {"dtype": "U8", "shape": [2**62 + 1, 0], "data_offsets": [0, 0]}}).encode())
    with pytest.raises(zarchive.FormatError, match="bad shape"):
        parse_header(head, len(head), member="m")["t"]


def test_safetensors_header_work_is_linear_in_its_tensors() -> None:
    def make(n: int) -> Callable[[], Any]:
        tensors = [(f"t{i}", "F32", [2, 2], bytes(16)) for i in range(n)]
        st, _ = safetensors_bytes(tensors)
        head = memoryview(st)
        return lambda: parse_header(head, len(st), member="m")

    assert_linear(*work_at_two_sizes(make, 500))


def test_shapes_are_refused_on_their_length_first() -> None:
    with pytest.raises(zarchive.FormatError, match="at most 64"):
        check_shape(["not a size"] * 1_000_000)
    with pytest.raises(zarchive.FormatError, match="bad dimension of 4301 bits"):
        check_shape([1 << 4300])  # (its decimal form would pass Python's digit limit)
    assert check_shape([2**62, 0]) == (2**62, 0)


# --- checksum entries ---------------------------------------------------------------------------------------
def _overlapping(n: int) -> bytes:
    p = base()
    size = len(p.members["tensors.safetensors"])
    p.entries["tensors.safetensors"].update({f"o{i}": (0, size) for i in range(n)})
    return pack(p)


def _verify(path: Path) -> tuple[list[tuple[str, str]], int, int]:
    """verify()'s problems, the bytes it ran through a CRC and the members' total size."""
    with zarchive.open(path) as arc:
        problems = arc.verify()
        reader = arc._reader
        total = sum(info.size for info in reader.zip.members.values())
        return problems, reader.verified_bytes, total


@pytest.mark.parametrize("n", [1000, 2000])
def test_overlapping_checksum_entries_are_refused_not_checked(tmp_path: Path, n: int) -> None:
    """Thousands of entries each covering the whole member made verify quadratic: now refused, and
    verify's work stays within the members' size whatever the metadata says."""
    path = tmp_path / "x.zarc"
    path.write_bytes(_overlapping(n))
    problems, checked, total = _verify(path)
    assert problems == [("tensors.safetensors", "checksum entries overlap")]
    assert checked <= 2 * total
    with zarchive.open(path, lazy=True) as arc, pytest.raises(zarchive.FormatError, match="checksum entries overlap"):
        arc["t"]  # a fetch finds its tensor by the entries: refused as verify refuses them, before reading
    got = zarchive.read(path)  # a full read goes by the member's header, which tiles
    assert torch.equal(got["t"], torch.arange(16, dtype=torch.float32).reshape(4, 4))


def test_verify_work_is_linear_in_the_entries(tmp_path: Path) -> None:
    """A legitimate member of many tensors: every entry checked, each byte at most twice overall. (Tensors
    of 1 KiB: the first 64 KiB of a file are read at open, and members inside them cost fewer steps to
    check, which would hide a small file's work.)"""
    for n in (300, 600):
        path = tmp_path / f"{n}.zarc"
        zarchive.save({f"t{i}": torch.full((256,), float(i)) for i in range(n)}, path, compress=False)
        problems, checked, total = _verify(path)
        assert problems == [] and checked <= 2 * total
    assert_linear(*work_at_two_sizes(lambda n: lambda: zarchive.verify(tmp_path / f"{n}.zarc"), 300))


# --- the CLI's listings -------------------------------------------------------------------------------------
def test_ls_of_one_tensor_held_many_times_is_linear(tmp_path: Path) -> None:
    """`zarchive ls` of 20,000 repeated arrays took 96 s (a path list searched per reference)."""
    t = torch.arange(100.0)
    for n in (1000, 2000):
        zarchive.save([t] * n, tmp_path / f"{n}.zarc")
    steps = []
    for n in (1000, 2000):
        with zarchive.open(tmp_path / f"{n}.zarc") as arc:
            walker = RefWalker(arc)
            found = list(walker.walk(arc.node("")))
            steps.append(walker.steps)
        assert len({f.path for f in found}) == n
    assert_linear(*steps)
    for argv in (["ls"], ["ls", "-l"], ["ls", "--json"], ["verify"], ["show"], ["audit"]):
        small, large = work_at_two_sizes(lambda n, a=argv: lambda: quiet_main([*a, str(tmp_path / f"{n}.zarc")]), 1000)
        assert_linear(small, large)
    code, out, _ = quiet_main(["ls", str(tmp_path / "2000.zarc")])
    assert code == 0 and "1 tensor: /0, /1, ... (+1998 more)" in out


@pytest.mark.parametrize("kind", ["dict_items_value", "dict", "tuple", "list"])
def test_ls_work_is_linear_in_nesting(tmp_path: Path, kind: str) -> None:
    """Each container is looked at once: a chain of nodes ending in a member reference costs its
    length, not its length squared (each level used to rescan everything below it)."""
    leaf = '{"$type":"bytes","$ref":"b.bin","nbytes":1}'

    def make(n: int) -> Callable[[], Any]:
        path = tmp_path / f"{kind}{n}.zarc"
        path.write_bytes(with_root(None, {"b.bin": b"x"}, manifest_bytes=manifest_around(nested_text(kind, n, leaf))))
        return lambda: quiet_main(["ls", str(path)])

    assert_linear(*work_at_two_sizes(make, 45))
    code, out, _ = quiet_main(["ls", str(tmp_path / f"{kind}90.zarc")])
    assert code == 0 and "b.bin" in out


def test_ls_lists_a_tables_own_members_at_the_table(tmp_path: Path) -> None:
    import pandas as pd

    df = pd.DataFrame({"a": np.arange(500.0), "b": np.arange(500)}, index=pd.RangeIndex(500) * 3)
    zarchive.save({"df": df}, tmp_path / "df.zarc", compress=False)
    code, out, _ = quiet_main(["ls", "--json", str(tmp_path / "df.zarc")])
    rows = {r["member"]: r["object_paths"] for r in json.loads(out)}
    assert code == 0 and rows["df/a.npy"] == ["df/a"] and rows["df/b.npy"] == ["df/b"]
    assert all(paths == ["df"] for m, paths in rows.items() if "index" in m)


# --- ZANJ external lists ------------------------------------------------------------------------------------
def _zanj_list_bomb(path: Path, levels: int) -> Path:
    """Each external list's .jsonl holds two external lists naming the next member: 2**levels visits."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("__zanj__.json", json.dumps({"__muutils_format__": "list:external", "$ref": "l0.jsonl"}))
        z.writestr("__zanj_meta__.json", json.dumps({"zanj_cfg": {}, "sysinfo": {}, "timestamp": 0}))
        for i in range(levels):
            item = json.dumps({"__muutils_format__": "list:external", "$ref": f"l{i + 1}.jsonl"})
            z.writestr(f"l{i}.jsonl", f"{item}\n{item}\n")
        z.writestr(f"l{levels}.jsonl", "0\n0\n")
    return path


def test_zanj_external_lists_are_followed_once(tmp_path: Path) -> None:
    """The ZANJ reader followed `$ref`s inside .jsonl lines exponentially (16 levels: 6 s, 40: forever)."""
    for levels in (8, 40):
        path = _zanj_list_bomb(tmp_path / f"{levels}.zanj", levels)
        for fn in (lambda p=path: zarchive.read(p), lambda p=path: zarchive.audit(p)):
            with pytest.raises(zarchive.FormatError, match="reaches the nodes stored in a member twice"):
                fn()
        assert quiet_main(["audit", str(path)])[0] == 2
    # each level is one step deeper, and the planner spells the object path (up to MAX_DEPTH=200
    # components) for each member it checks: up to twice the depth then costs a little over twice the
    # work (2.3x here); following both items of every level cost 2**20 times as much
    small, large = work_at_two_sizes(lambda n: lambda: zarchive.read(_zanj_list_bomb(tmp_path / "w.zanj", n)), 20)
    assert_linear(small, large, slack=0.6)


# --- nesting of every node type -----------------------------------------------------------------------------
@pytest.mark.parametrize("levels", [300, 600, 5000])
@pytest.mark.parametrize("where", ["manifest", "jsonl"])
@pytest.mark.parametrize("kind", sorted(NESTING))
def test_deep_nesting_of_every_node_type_is_a_format_error(tmp_path: Path, kind: str, where: str, levels: int) -> None:
    """600 nested tuples passed the depth limit (RecursionError); every node type that nests, in the
    manifest or in a .jsonl line, is now refused as a FormatError, also by the CLI (exit 2)."""
    text = nested_text(kind, levels)
    path = tmp_path / "deep.zarc"
    if where == "manifest":
        path.write_bytes(with_root(None, manifest_bytes=manifest_around(text)))
    else:
        path.write_bytes(with_root(*jsonl_of_nodes(text)))
    for lazy in (True, False):
        with pytest.raises(zarchive.FormatError, match="nested"):
            zarchive.read(path, lazy=lazy)
    with pytest.raises(zarchive.FormatError, match="nested"):
        zarchive.audit(path)
    for argv in (["cat", str(path), "0"], ["ls", str(path)], ["show", str(path)], ["verify", str(path)]):
        code, _, err = quiet_main(argv)
        assert code in (0, 1, 2) and "unexpected" not in err, (argv, err)


def test_nesting_is_bounded_under_a_raised_recursion_limit(tmp_path: Path) -> None:
    """With the interpreter's recursion limit raised, the JSON parser's depth is still bounded (by
    MAX_JSON_DEPTH, not by how deep the C stack happens to reach)."""
    path = tmp_path / "deep.zarc"
    path.write_bytes(with_root(None, manifest_bytes=manifest_around(nested_text("list", 100_000))))
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(200_000)
    try:
        with pytest.raises(zarchive.FormatError, match="more than 1000 levels"):
            zarchive.read(path)
    finally:
        sys.setrecursionlimit(old)


def test_zanj_nesting_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.zanj"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("__zanj__.json", "[" * 300 + "]" * 300)
        z.writestr("__zanj_meta__.json", "{}")
    with pytest.raises(zarchive.FormatError, match="nested"):
        zarchive.read(path)


# --- ints past Python's digit limit --------------------------------------------------------------------------
def test_long_ints_read_as_errors_or_print_in_hex(tmp_path: Path) -> None:
    limit = sys.get_int_max_str_digits()
    path = tmp_path / "num.zarc"
    path.write_bytes(with_root(None, manifest_bytes=manifest_around("7" * (limit + 1))))
    with pytest.raises(zarchive.FormatError, match="limit"):
        zarchive.read(path)
    path.write_bytes(with_root({"x": {"$type": "int", "hex": "0x" + "f" * ((1 << 20) + 1)}}))
    with pytest.raises(zarchive.FormatError, match="longer than the limit"):
        zarchive.read(path)
    big = 7**20000  # 16,900 decimal digits: saved as hex, read back whole
    zarchive.save({"big": big, "rows": [(big, i) for i in range(300)], "neg": -big}, path)
    assert zarchive.read(path)["rows"][5] == (big, 5)
    code, out, err = quiet_main(["cat", str(path), "big"])
    assert code == 0 and out.splitlines()[1] == hex(big), err
    code, out, err = quiet_main(["cat", str(path), "neg"])
    assert code == 0 and out.splitlines()[1] == hex(-big), err
    code, out, err = quiet_main(["cat", str(path), "rows"])
    assert code == 0 and "(int of 56,148 bits)" in out, err


# --- no state that grows with the files read ----------------------------------------------------------------
class Perm(enum.IntFlag):
    R = 4
    W = 2
    X = 1


class Color(enum.Flag):
    RED = 1
    GREEN = 2
    BLUE = 4


def _enum_file(path: Path, cls: type, value: Any) -> Path:
    path.write_bytes(with_root({"$type": "enum", "class": typeref.class_tag(cls), "value": value}))
    return path


def test_reading_flag_combinations_leaves_the_class_cache_alone(tmp_path: Path) -> None:
    """`RegexFlag(value)` (and `A | B`) cache a pseudo-member per new value in the class, for good
    (Python 3.11: measured below), and RegexFlag (boundary KEEP) takes any int: each read of a new
    value grew a process-wide table. Reads now leave it as it was."""
    cache = re.RegexFlag._value2member_map_
    probe = next(v for v in range(1, 512) if v not in cache)
    before = len(cache)
    assert re.RegexFlag(probe) is not None and len(cache) == before + 1  # what Python itself does
    del cache[probe]
    sizes = {len(re.RegexFlag._value2member_map_), len(Perm._value2member_map_)}
    for value in range(1, 512):
        got = zarchive.read(_enum_file(tmp_path / "f.zarc", re.RegexFlag, value))
        assert got == value and type(got) is re.RegexFlag
    for value in range(8):
        got = zarchive.read(_enum_file(tmp_path / "p.zarc", Perm, value))
        assert (
            got == value
            and type(got) is Perm
            and [m.name for m in Perm if m in got] == [m.name for m in Perm if m.value & value]
        )
    assert {len(re.RegexFlag._value2member_map_), len(Perm._value2member_map_)} == sizes
    for value in (1 << 9, 1 << 100, -1, "x"):  # bits no member has: a mismatch, nothing cached
        with pytest.raises(zarchive.FieldMismatchError, match="no combination of members"):
            zarchive.read(_enum_file(tmp_path / "bad.zarc", re.RegexFlag, value), error_mode="except")
    assert {len(re.RegexFlag._value2member_map_), len(Perm._value2member_map_)} == sizes
    # a pure Flag compares by identity, so its combinations stay cached: one entry per combination
    first = zarchive.read(_enum_file(tmp_path / "c.zarc", Color, 5))
    size = len(Color._value2member_map_)
    for _ in range(3):
        again = zarchive.read(_enum_file(tmp_path / "c.zarc", Color, 5))
        assert again is first and again == Color.RED | Color.BLUE
    assert len(Color._value2member_map_) == size


def _process_tables() -> dict[str, int]:
    """Sizes of the per-process tables reading could touch."""
    return {
        "RegexFlag members": len(re.RegexFlag._value2member_map_),
        "meta_build._KIND": len(meta_build._KIND),
        "torch_model._REAL_BUILD": len(torch_model._REAL_BUILD),
        "registry._loaded": len(registry._loaded),
        "typeref._registered": len(typeref._registered),
        "sys.modules": len(sys.modules),
    }


def test_reading_many_files_leaves_no_growing_state(tmp_path: Path) -> None:
    """Every corpus file (hostile and valid) read, verified and listed, twice: the second pass leaves
    every per-process table exactly as the first left it, and so do files of new enum values."""

    def one_pass(tag: int) -> None:
        for case in CASES:
            path = os.path.join(CORPUS_DIR, case.name + ".zarc")
            for fn in (zarchive.read, zarchive.verify, zarchive.audit):
                with contextlib.suppress(zarchive.ZArchiveError):
                    fn(path)
            quiet_main(["ls", path])
        for value in range(1 + 256 * tag, 200 + 256 * tag):  # new values in the second pass
            zarchive.read(_enum_file(tmp_path / f"e{tag}.zarc", re.RegexFlag, value))

    one_pass(0)
    after_first = _process_tables()
    one_pass(1)
    assert _process_tables() == after_first


# --- the CLI over the hostile corpus ------------------------------------------------------------------------
def _commands(path: str, out: Path) -> Iterator[list[str]]:
    yield ["ls", path]
    yield ["ls", "-l", "--json", path]
    yield ["show", path]
    yield ["show", "--json", path, "arr"]
    yield ["meta", path]
    yield ["meta", "--json", path]
    for objpath in ("", "arr", "t", "lst", "0"):
        yield ["cat", path, objpath]
    yield ["audit", path]
    yield ["verify", path]
    yield ["extract", "-f", path, str(out / "x")]
    yield ["convert", "-f", path, str(out / "c.safetensors")]
    yield ["convert", "-f", path, str(out / "c.zarc")]


CORPUS_FILES = sorted(c.name for c in CASES)


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_every_cli_command_on_every_corpus_file_exits_0_1_or_2(tmp_path: Path, name: str) -> None:
    """`ls`, `show`, `meta`, `cat`, `audit`, `verify`, `extract`, `convert`: exit 0, 1 or 2 on every
    hostile file, with a one-line error and never a traceback ('unexpected': exit 3)."""
    path = os.path.join(CORPUS_DIR, name + ".zarc")
    for argv in _commands(path, tmp_path):
        code, _, err = quiet_main(argv)
        assert code in (0, 1, 2), (argv, code, err)
        assert "Traceback" not in err and "error: unexpected " not in err, (
            argv,
            err,
        )  # (the CLI on a non-ZArchiveError)
        if code == 2:
            assert err.startswith(f"zarchive {argv[0]}: error: "), (argv, err)


def test_the_cli_in_real_processes_on_hostile_files(tmp_path: Path) -> None:
    names = ["bounded_st_header_20k_dims", "bounded_nested_tuple_600", "bounded_entries_overlap", "ref_cycle"]
    zanj = _zanj_list_bomb(tmp_path / "bomb.zanj", 30)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([os.path.dirname(PACKAGE_DIR), os.environ.get("PYTHONPATH", "")]),
    }
    procs = []
    for name in names:
        path = os.path.join(CORPUS_DIR, name + ".zarc")
        for argv in (["verify", path], ["cat", path, "t"], ["ls", path]):
            procs.append((argv, subprocess.Popen([sys.executable, "-m", "zarchive", *argv], env=env, text=True,
                                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)))  # fmt: skip
    procs.append((["audit", str(zanj)], subprocess.Popen([sys.executable, "-m", "zarchive", "audit", str(zanj)],
                                                         env=env, text=True, stdout=subprocess.PIPE,
                                                         stderr=subprocess.PIPE)))  # fmt: skip
    for argv, proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode in (0, 1, 2), (argv, proc.returncode, err)
        assert "Traceback" not in err and "error: unexpected " not in err, (
            argv,
            err,
        )  # (the CLI on a non-ZArchiveError)
    by_argv = {tuple(a): p.returncode for a, p in procs}
    assert by_argv[("verify", os.path.join(CORPUS_DIR, "bounded_entries_overlap.zarc"))] == 1
    assert by_argv[("audit", str(zanj))] == 2
