"""The restricted pickle reader (zarchive.formats.foreign.restricted_pickle with torch.save's rules): plain
data round-trips from real pickles of every protocol; every global outside the allow-list and every
opcode that constructs objects is refused before anything runs; work and memory stay bounded."""

from __future__ import annotations

import math
import os
import pickle
import struct
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarchive.errors import FormatError, RefusedPickleError, UnsafeArchiveError
from zarchive.formats.foreign.restricted_pickle import read_pickle
from zarchive.formats.foreign.torch_pickle import TorchRules

PROTOCOLS = range(2, pickle.HIGHEST_PROTOCOL + 1)


def read(data: bytes) -> Any:
    return read_pickle(data, TorchRules("data.pkl"), member="data.pkl")[0]


def same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN and types compared too."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.complex_numbers(allow_nan=False)
)
hashable = st.none() | st.booleans() | st.integers() | st.text(max_size=10) | st.binary(max_size=10)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(hashable, inner, max_size=5)
        | st.builds(OrderedDict, st.dictionaries(st.text(max_size=5), inner, max_size=4))
        | st.sets(hashable, max_size=5)
        | st.frozensets(hashable, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None)
@given(value=values, protocol=st.sampled_from(list(PROTOCOLS)))
def test_plain_values_round_trip(value: Any, protocol: int) -> None:
    assert same(read(pickle.dumps(value, protocol=protocol)), value)


def test_shared_references_stay_shared() -> None:
    inner = [1, 2]
    got = read(pickle.dumps({"a": inner, "b": inner}, protocol=2))
    assert got["a"] is got["b"] and got["a"] == [1, 2]


class Payload:
    """A class whose unpickling would run code: a file marker appears if it ever does."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


class Plain:
    def __init__(self) -> None:
        self.x = 1


@pytest.mark.parametrize("protocol", list(range(pickle.HIGHEST_PROTOCOL + 1)))
def test_reduce_payload_is_refused_and_never_runs(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    data = pickle.dumps({"w": [1.0], "evil": Payload(str(marker))}, protocol=protocol)
    with pytest.raises((RefusedPickleError, FormatError)) as info:
        read(data)
    if protocol >= 2:  # (protocols 0 and 1 use text opcodes this reader does not take at all)
        assert isinstance(info.value, RefusedPickleError)
        assert "system" in str(info.value) and "nothing was run" in str(info.value)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_arbitrary_classes_are_refused(protocol: int) -> None:
    with pytest.raises(RefusedPickleError, match="Plain"):
        read(pickle.dumps(Plain(), protocol=protocol))


@pytest.mark.parametrize(
    "module,name",
    [
        ("builtins", "eval"),
        ("builtins", "getattr"),
        ("__builtin__", "__import__"),
        ("os", "system"),
        ("subprocess", "Popen"),
        ("torch", "load"),
        ("torch.nn.modules.linear", "Linear"),
        ("torch._utils", "_rebuild_qtensor"),
        ("torch._tensor", "_rebuild_from_type_v2"),
        ("collections", "defaultdict"),
        ("copyreg", "_reconstructor"),
        ("numpy.core.multiarray", "_reconstruct"),
    ],
)
def test_globals_outside_the_allow_list_are_refused(module: str, name: str) -> None:
    data = b"\x80\x02c" + module.encode() + b"\n" + name.encode() + b"\n)R."
    with pytest.raises(RefusedPickleError, match=name):
        read(data)


@pytest.mark.parametrize(
    "opcode,name",
    [(b"\x81", "NEWOBJ"), (b"\x92", "NEWOBJ_EX"), (b"o", "OBJ"), (b"\x82\x01", "EXT1"), (b"\x97", "NEXT_BUFFER")],
)
def test_constructing_opcodes_are_refused(opcode: bytes, name: str) -> None:
    with pytest.raises(RefusedPickleError, match=name):
        read(b"\x80\x04(" + opcode + b".")


def test_text_persistent_ids_are_refused() -> None:
    with pytest.raises(RefusedPickleError, match="PERSID"):
        read(b"\x80\x02Pstorage\n.")


def test_persistent_ids_must_be_storages() -> None:
    with pytest.raises(RefusedPickleError, match="not a storage"):
        read(b"\x80\x02X\x03\x00\x00\x00abcQ.")


def _timed(data: bytes, error: type[Exception], match: str) -> float:
    start = time.perf_counter()
    with pytest.raises(error, match=match):
        read(data)
    return time.perf_counter() - start


def test_deep_nesting_is_refused_without_recursion() -> None:
    n = 200_000
    assert _timed(b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b".", FormatError, "nested more than") < 10


def test_nesting_at_the_limit_reads() -> None:
    n = 200
    got = read(b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b".")
    depth = 0
    while got:
        got, depth = got[0], depth + 1
    assert depth == n - 1


def test_shared_reference_bombs_are_cut_off() -> None:
    out = bytearray(b"\x80\x02]r" + struct.pack("<I", 0))
    for i in range(1, 64):
        get = b"j" + struct.pack("<I", i - 1)
        out += b"0](" + get + get + b"er" + struct.pack("<I", i)
    assert _timed(bytes(out) + b".", UnsafeArchiveError, "shared references") < 30


def test_declared_lengths_are_checked_before_allocating() -> None:
    for op, fmt in ((b"\x8d", "<Q"), (b"\x8e", "<Q"), (b"X", "<I"), (b"B", "<I"), (b"\x96", "<Q")):
        with pytest.raises(FormatError, match="past its end"):
            read(b"\x80\x04" + op + struct.pack(fmt, (1 << 62) if fmt == "<Q" else 0xFFFFFFF0) + b"x.")


def test_memo_is_sparse() -> None:
    """A PUT at index 2**32-1 costs one entry, not a table of four billion."""
    assert read(b"\x80\x02]r\xff\xff\xff\xff0j\xff\xff\xff\xff.") == []
    with pytest.raises(FormatError, match="never stored"):
        read(b"\x80\x02j\x05\x00\x00\x00.")


def test_big_ints_are_capped() -> None:
    assert read(pickle.dumps(2**30000, protocol=2)) == 2**30000
    with pytest.raises(UnsafeArchiveError, match="pickled int"):
        read(pickle.dumps(2**40000, protocol=2))


def test_cycles_are_refused() -> None:
    lst: list[Any] = []
    lst.append(lst)
    with pytest.raises(FormatError, match="contain themselves"):
        read(pickle.dumps(lst, protocol=2))
    d: dict[str, Any] = {}
    d["self"] = [d]
    with pytest.raises(FormatError, match="contain themselves"):
        read(pickle.dumps(d, protocol=4))


@pytest.mark.parametrize(
    "data,match",
    [
        (b"", "without a STOP"),
        (b"\x80\x02}", "without a STOP"),
        (b"\x80\x02.", "empty stack"),
        (b"\x80\x02}}.", "values left"),
        (b"\x80\x02u.", "no MARK"),
        (b"\x80\x02]K\x01s.", "empty stack|not a dict"),
        (b"\x80\x02}]K\x01s.", "not hashable"),
        (b"\x80\x02\xff.", "unknown or unsupported"),
        (b"\x80\x09.", "protocol 9"),
        (b"\x80\x02X\x02\x00\x00\x00\xff\xfe.", "not valid UTF-8"),
    ],
)
def test_malformed_pickles_raise_format_errors(data: bytes, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        read(data)


def test_the_count_along_every_path_is_computed_not_walked() -> None:
    """A graph of 60 shared levels counts 3 * 2**60 - 1 values along its paths: refused after touching ~60."""
    from zarchive.formats.foreign.value_graph import walk_bounded

    level: list[object] = ["x"]
    for _ in range(60):
        level = [level, level]
    seen: list[object] = []

    class Spy(list):  # type: ignore[type-arg]
        def __iter__(self):  # type: ignore[no-untyped-def]
            seen.append(self)
            return super().__iter__()

    with pytest.raises(UnsafeArchiveError, match="shared references"):
        walk_bounded(Spy([level]), member="m")
    assert len(seen) <= 2
    diamond: list[object] = [["a", "b"]] * 3  # one shared list of 2 reached 3 times: 1 + 3 * 3 values
    assert walk_bounded(diamond, member="m") == 10
    assert walk_bounded(level, member="m", max_visits=1 << 70) == 3 * 2**60 - 1  # C(0) = 2, C(k) = 1 + 2 C(k - 1)


def test_a_shared_value_is_as_deep_as_its_deepest_path() -> None:
    from zarchive.formats.foreign.value_graph import MAX_DEPTH, walk_bounded

    chain: list[object] = []
    for _ in range(MAX_DEPTH - 10):
        chain = [chain]
    deep: list[object] = [chain]
    for _ in range(20):
        deep = [deep]
    with pytest.raises(FormatError, match="nested more than"):
        walk_bounded([chain, deep], member="m")  # `chain` is finished first, shallow; then met 21 levels down
    walk_bounded([chain, chain], member="m")
    loop: list[object] = []
    loop.append([loop])
    with pytest.raises(FormatError, match="contain themselves"):
        walk_bounded(loop, member="m")
