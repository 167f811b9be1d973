"""Nothing outside the archive is read: an ONNX export that refers to another file (external data, in
any place a tensor can be; an execution provider's context node; session settings in its metadata) is
refused by `arc.onnx_session()` with UnsafeArchiveError naming the member, before onnxruntime is
imported or a session made. TorchScript exports stay behind `trusted=True`.

The archives are crafted from real ONNX models (onnx.helper, `onnx.save_model(...,
save_as_external_data=True)`) packed by the hostile-corpus builder; the reads run in a child process
whose working directory holds a planted `.aws/credentials`.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from hostile.cases_exports import ONNX, TS, TS_BYTES, entry
from hostile.craft import pack
from hostile.make_corpus import base
from onnx import TensorProto, helper, numpy_helper

import zarchive
from zarchive.deploy.onnx_check import check_self_contained, external_references

ROOT = Path(__file__).resolve().parent.parent
SECRET = b"[default]\naws_secret_access_key=PLANTED-SECRET-0123456789abcdef\n"
SECRET = SECRET + b"#" * (-len(SECRET) % 4)  # a whole number of float32s
N = len(SECRET) // 4
LIMIT_S = 120


def _model(graph: onnx.GraphProto, **kw: object) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], **kw)
    m.ir_version = 8
    return m


def _external(t: onnx.TensorProto, location: str = ".aws/credentials") -> onnx.TensorProto:
    """`t` with its values moved out to `location` (as onnx's external-data writer records it)."""
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(len(SECRET)))):
        e = t.external_data.add()
        e.key, e.value = key, value
    return t


def _weights() -> onnx.TensorProto:
    return numpy_helper.from_array(np.zeros(N, dtype=np.float32), "w")


def _add_model() -> onnx.ModelProto:
    """output = input + w (w: N float32s), a self-contained model."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [N])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [N])
    return _model(helper.make_graph([helper.make_node("Add", ["input", "w"], ["output"])], "g", [x], [y], [_weights()]))


def _saved_with_external_data(tmp: Path) -> bytes:
    """A real model written by onnx.save_model(save_as_external_data=True): its weights in a side
    file named `.aws/credentials` (the name is the attacker's choice); the ONNX file's bytes only."""
    folder = tmp / "export"
    (folder / ".aws").mkdir(parents=True)
    onnx.save_model(
        _add_model(),
        str(folder / "model.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=".aws/credentials",
        size_threshold=0,
    )
    data = (folder / "model.onnx").read_bytes()
    assert external_references(onnx.load_model_from_string(data))  # the writer really put it outside
    return data


def _in_attribute() -> bytes:
    """A Constant node whose `value` attribute (a TensorProto in an AttributeProto) is external."""
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [N])
    node = helper.make_node("Constant", [], ["output"], value=_external(_weights()))
    return _model(helper.make_graph([node], "g", [], [y])).SerializeToString()


def _in_subgraph() -> bytes:
    """An If whose then-branch (a graph in an attribute) has an external initializer."""
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [N])
    branch = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["output"])], "then", [], [y], [_external(_weights())]
    )
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["output"], value=_weights())], "else", [], [y]
    )  # fmt: skip
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    node = helper.make_node("If", ["cond"], ["output"], then_branch=branch, else_branch=other)
    return _model(helper.make_graph([node], "g", [cond], [y])).SerializeToString()


def _sparse_initializer() -> bytes:
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [N])
    values = _external(numpy_helper.from_array(np.zeros(N, dtype=np.float32), "w_values"))
    indices = numpy_helper.from_array(np.arange(N, dtype=np.int64), "w_indices")
    sparse = helper.make_sparse_tensor(values, indices, [N])
    graph = helper.make_graph([helper.make_node("Identity", ["w_values"], ["output"])], "g", [], [y])
    graph.sparse_initializer.append(sparse)
    return _model(graph).SerializeToString()


def _in_function() -> bytes:
    """A model-local function whose body holds a Constant with an external tensor."""
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [N])
    body = helper.make_node("Constant", [], ["out"], value=_external(_weights()))
    fn = helper.make_function("local", "Leak", [], ["out"], [body], [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("Leak", [], ["output"], domain="local")], "g", [], [y])
    m = _model(graph, functions=[fn])
    m.opset_import.append(helper.make_opsetid("local", 1))
    return m.SerializeToString()


def _ep_context() -> bytes:
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [N])
    node = helper.make_node(
        "EPContext", [], ["output"], domain="com.microsoft", embed_mode=0, ep_cache_context=".aws/credentials"
    )
    return _model(helper.make_graph([node], "g", [], [y])).SerializeToString()


def _ort_config() -> bytes:
    m = _add_model()
    helper.set_model_props(m, {"ort_config": json.dumps({"session_options": {"enable_profiling": True}})})
    return m.SerializeToString()


def _location_only() -> bytes:
    """external_data entries with data_location left DEFAULT: still a reference to a file."""
    m = _add_model()
    t = m.graph.initializer[0]
    e = t.external_data.add()
    e.key, e.value = "location", ".aws/credentials"
    return m.SerializeToString()


HOSTILE: dict[str, Callable[[], bytes]] = {
    "attribute": _in_attribute,
    "subgraph": _in_subgraph,
    "sparse_initializer": _sparse_initializer,
    "function": _in_function,
    "ep_context": _ep_context,
    "ort_config": _ort_config,
    "location_only": _location_only,
}
WHERE = {
    "attribute": "attribute[0]('value').t('w')",
    "subgraph": "('then_branch').g('then').initializer[0]('w')",
    "sparse_initializer": "sparse_initializer[0].values('w_values')",
    "function": "functions[0]('Leak')",
    "ep_context": "EPContext",
    "ort_config": "ort_config",
    "location_only": "initializer[0]('w')",
}


def _archive(onnx_bytes: bytes, path: Path, torchscript: bool = False) -> Path:
    """A valid archive (the hostile corpus's base) whose ONNX export is `onnx_bytes`."""
    p = base()
    p.manifest["format_version"] = p.meta["format_version"] = "1.3"
    node = {"$type": "exports", "onnx": entry(ONNX, onnx_bytes, inputs=["input"], outputs=["output"])}
    p.members[ONNX] = onnx_bytes
    if torchscript:
        node["torchscript"] = entry(TS, TS_BYTES)
        p.members[TS] = TS_BYTES
    p.manifest["exports"] = node
    path.write_bytes(pack(p))
    return path


def _plant(cwd: Path, fifo: bool = False) -> Path:
    (cwd / ".aws").mkdir(parents=True, exist_ok=True)
    planted = cwd / ".aws" / "credentials"
    if fifo:
        os.mkfifo(planted)  # opening it to read would block: a read of it hangs the child
    else:
        planted.write_bytes(SECRET)
    return planted


def _session_in_child(archive: Path, cwd: Path) -> dict[str, object]:
    """Open `archive` and ask for its ONNX session in a child process run in `cwd`."""
    code = textwrap.dedent(
        f"""
        import json, sys
        import numpy as np
        import zarchive
        out = {{}}
        with zarchive.open({str(archive)!r}) as arc:
            try:
                s = arc.onnx_session(providers=["CPUExecutionProvider"])
                (y,) = s.run(None, {{"input": np.zeros({N}, dtype=np.float32)}})
                out = {{"error": None, "output": y.tobytes().hex()}}
            except zarchive.ZArchiveError as e:
                out = {{"error": type(e).__name__, "message": str(e), "member": e.member}}
        out["onnxruntime_imported"] = "onnxruntime" in sys.modules
        print(json.dumps(out))
        """
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            check=False,
            capture_output=True,
            text=True,
            cwd=cwd,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            timeout=LIMIT_S,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30)),
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the child hung: something opened the planted FIFO (a file outside the archive)")
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_external_data_written_by_onnx_is_refused_and_the_planted_file_never_read(tmp_path: Path) -> None:
    archive = _archive(_saved_with_external_data(tmp_path), tmp_path / "x.zarc")
    assert zarchive.verify(archive)  # a sound archive: the refusal is about the export's content
    for fifo in (False, True):
        cwd = tmp_path / ("cwd_fifo" if fifo else "cwd")
        _plant(cwd, fifo=fifo)
        result = _session_in_child(archive, cwd)
        assert result["error"] == "UnsafeArchiveError", result
        assert result["member"] == ONNX
        assert ".aws/credentials" in str(result["message"]) and "not self-contained" in str(result["message"])
        assert result["onnxruntime_imported"] is False  # refused before onnxruntime was asked anything
        assert SECRET.hex() not in json.dumps(result)


@pytest.mark.parametrize("case", list(HOSTILE))
def test_every_place_of_an_external_reference_is_refused(tmp_path: Path, case: str) -> None:
    data = HOSTILE[case]()
    with pytest.raises(zarchive.UnsafeArchiveError, match="not self-contained") as caught:
        check_self_contained(data, member=ONNX)
    assert caught.value.member == ONNX
    assert WHERE[case] in caught.value.message, caught.value.message
    archive = _archive(data, tmp_path / "x.zarc")
    with zarchive.open(archive) as arc, pytest.raises(zarchive.UnsafeArchiveError) as opened:
        arc.onnx_session(providers=["CPUExecutionProvider"])
    assert opened.value.member == ONNX


def test_planted_file_in_a_subgraph_is_never_read(tmp_path: Path) -> None:
    archive = _archive(_in_subgraph(), tmp_path / "x.zarc")
    cwd = tmp_path / "cwd"
    _plant(cwd, fifo=True)
    result = _session_in_child(archive, cwd)
    assert result["error"] == "UnsafeArchiveError" and result["onnxruntime_imported"] is False, result


def test_a_self_contained_export_still_runs(tmp_path: Path) -> None:
    m = _add_model()
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.arange(N, dtype=np.float32), "w"))
    archive = _archive(m.SerializeToString(), tmp_path / "ok.zarc")
    with zarchive.open(archive) as arc:
        (y,) = arc.onnx_session(providers=["CPUExecutionProvider"]).run(None, {"input": np.ones(N, dtype=np.float32)})
    np.testing.assert_array_equal(y, np.arange(N, dtype=np.float32) + 1)


def test_not_an_onnx_model_is_a_format_error(tmp_path: Path) -> None:
    archive = _archive(b"\xff" * 64, tmp_path / "bad.zarc")
    with zarchive.open(archive) as arc, pytest.raises(zarchive.FormatError) as caught:
        arc.onnx_session()
    assert caught.value.member == ONNX


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    out, n = bytearray([number << 3 | 2]), len(payload)
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + payload


def test_deep_nesting_is_refused_without_recursion() -> None:
    # graph.node(1) -> attribute(5) -> g(6) -> graph ...: 1,000 subgraphs deep, 6 KB (onnx.helper cannot build it)
    graph = b""
    for _ in range(1000):
        graph = _field(1, _field(5, _field(6, graph)))
    data = _field(7, graph)
    with pytest.raises(zarchive.FormatError) as caught:
        check_self_contained(data, member=ONNX)
    assert caught.value.member == ONNX


def test_torchscript_export_stays_behind_trusted(tmp_path: Path) -> None:
    m = _add_model()
    archive = _archive(m.SerializeToString(), tmp_path / "ts.zarc", torchscript=True)
    with zarchive.open(archive) as arc:
        for trusted in (False, "yes", 1, None):
            with pytest.raises(zarchive.UnsafeArchiveError, match="trusted=True") as caught:
                arc.load_torchscript(trusted=trusted)  # type: ignore[arg-type]
            assert caught.value.member == TS
        with pytest.raises(zarchive.UnsafeArchiveError):
            arc.load_torchscript()
