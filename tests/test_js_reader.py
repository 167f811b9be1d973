"""The JavaScript reader (js/, written from spec/ alone) against zarchive on archives written fresh:
state dicts, models with configs, pandas and polars tables, checkpoints, compressed weights and a
sharded (DCP) checkpoint. `node js/bin/zarc-neutral.js FILE` must print exactly what
`zarchive neutral FILE` prints, and `node js/bin/zarc-hash.js FILE` what `zarchive hash FILE`
prints. The JavaScript reader's own tests (`node --test js/test/`) run here too, so CI runs them.

Skipped (with the reason) where node or js/node_modules (`npm ci --prefix js`) is missing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections import OrderedDict
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import zarchive
from zarchive.neutral import canonical_json, neutral_form_of

torch = pytest.importorskip("torch")

from zarchive.torchutil import ConfiguredModel, set_config_class

ROOT = Path(__file__).resolve().parents[1]
JS = ROOT / "js"
NODE = shutil.which("node")
# hostile inputs reach the JS reader: run it under an address-space and time limit
LIMIT = ["prlimit", "--as=3000000000"] if shutil.which("prlimit") else []

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not installed (the JavaScript reader needs Node 20)"),
    pytest.mark.skipif(
        not (JS / "node_modules" / "fzstd").is_dir(),
        reason="js/node_modules is missing: run `npm ci --prefix js` first",
    ),
]


def node(script: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LIMIT, str(NODE), str(JS / "bin" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def python_neutral(path: Path) -> str:
    return canonical_json(neutral_form_of(path))


def assert_same(path: Path) -> None:
    got = node("zarc-neutral.js", str(path))
    assert got.returncode == 0, got.stderr
    assert got.stdout == python_neutral(path)


# --- what the archives hold ---
@dataclasses.dataclass
class NetConfig:
    d_in: int
    d_hidden: int
    name: str = "net"
    dropout: float = 0.1


@set_config_class(NetConfig)
class Net(ConfiguredModel[NetConfig]):
    def __init__(self, config: NetConfig) -> None:
        super().__init__(config)
        self.fc1 = torch.nn.Linear(config.d_in, config.d_hidden)
        self.norm = torch.nn.BatchNorm1d(config.d_hidden)
        self.fc2 = torch.nn.Linear(config.d_hidden, 2)


def state_dict() -> Any:
    g = torch.Generator().manual_seed(0)
    return OrderedDict(
        [
            ("w", torch.randn(4, 8, generator=g)),
            ("b", torch.zeros(8, dtype=torch.bfloat16)),
            ("steps", torch.arange(5, dtype=torch.int64)),
            ("mask", torch.tensor([True, False, True])),
            ("half", torch.randn(3, 3, generator=g).half()),
            ("scalar", torch.tensor(2.5)),
            ("empty", torch.zeros(0, 3)),
            ("cplx", torch.randn(2, 2, dtype=torch.complex64, generator=g)),
        ]
    )


def big_state_dict() -> Any:
    """70 plain tensors (a tensor table, spec 5.4) with a tied pair and a transposed view."""
    g = torch.Generator().manual_seed(1)
    sd = {f"layer{i}.weight": torch.randn(3, 5, generator=g) for i in range(70)}
    base = torch.randn(6, 4, generator=g)
    return {"table": sd, "views": {"base": base, "t": base.t(), "half": base[:3], "same": base}}


def model() -> Any:
    torch.manual_seed(0)
    m = Net(NetConfig(d_in=5, d_hidden=7))
    m.eval()
    m.fc2.train()
    return m


def pandas_frame() -> Any:
    df = pd.DataFrame(
        {
            "int": np.arange(6, dtype=np.int64),
            "float": np.linspace(0, 1, 6),
            "text": ["a", "bb", None, "é", "a", "a"],
            "cat": pd.Categorical(["x", "y", "x", "x", "y", "x"], ordered=True),
            "nullable": pd.array([1, None, 3, 4, None, 6], dtype="Int64"),
            "when": pd.date_range("2024-01-01", periods=6, freq="D", tz="Europe/Paris"),
            "repeat": pd.array(["one", "two"] * 3, dtype="string"),
        },
        index=pd.Index(list("abcdef"), name="key"),
    )
    df.attrs = {"source": "test"}
    return {
        "frame": df,
        "series": pd.Series([1.5, None, 3.0], name=("a", 1)),
        "ts": pd.Timestamp("2024-05-01 12:00", tz="UTC"),
    }


def polars_frame() -> Any:
    pl = pytest.importorskip("polars")
    return pl.DataFrame(
        {
            "i": [1, 2, None, 4],
            "f": [0.5, None, 1.5, 2.0],
            "s": ["a", None, "ccc", "é"],
            "l": [[1, 2], [], None, [3]],
            "st": [{"x": 1, "y": "a"}, {"x": 2, "y": None}, None, {"x": 4, "y": "d"}],
            "d": [dt.date(2024, 1, i) for i in range(1, 5)],
        }
    )


def pandas_arrow_frame() -> Any:
    """pandas ArrowDtype columns (stored as `arrow.array` nodes, format 1.5), nulls in each."""
    pa = pytest.importorskip("pyarrow")
    when = pa.array([0, None, 1_700_000_000_000_000, -5], pa.timestamp("us", tz="Europe/Paris"))
    cols = {
        "int": pa.array([1, None, -(2**62), 4], pa.int64()),
        "when": when,
        "offset": pa.array([1, 2, None, 3], pa.timestamp("ms", tz="+01:00")),
        "text": pa.array(["a", None, "é🎉", ""], pa.large_string()),
        "list": pa.array([[1, 2], [], None, [None, 3]], pa.list_(pa.int32())),
        "struct": pa.array(
            [{"x": 1, "y": "a"}, None, {"x": None, "y": "c"}, {"x": 4, "y": None}],
            pa.struct([("x", pa.int16()), ("y", pa.string())]),
        ),
        "dict": pa.array(["p", None, "q", "p"]).dictionary_encode(),
        "decimal": pa.array([None, Decimal("123.45"), Decimal("-0.01"), -Decimal(10**20)], pa.decimal128(24, 2)),
        "flag": pa.array([True, None, False, True]),
        "binary": pa.array([b"\x00\xff", None, b"", b"z"], pa.binary()),
    }
    df = pd.DataFrame({k: pd.arrays.ArrowExtensionArray(v) for k, v in cols.items()})
    sliced = pd.Series(pd.arrays.ArrowExtensionArray(pa.array([None, "x", "yy", None, "zzz"]).slice(1, 3)))
    return {"frame": df, "sliced": sliced}


def polars_arrow_frame() -> Any:
    pytest.importorskip("pyarrow")
    pl = pytest.importorskip("polars")
    return pl.DataFrame(
        {
            "u8": pl.Series([1, None, 255], dtype=pl.UInt8),
            "f32": pl.Series([0.5, float("nan"), None], dtype=pl.Float32),
            "cat": pl.Series(["a", None, "b"], dtype=pl.Categorical),
            "enum": pl.Series(["lo", "hi", None], dtype=pl.Enum(["lo", "hi"])),
            "ts": pl.Series([dt.datetime(2024, 1, 1), None, dt.datetime(1969, 12, 31)]).dt.replace_time_zone(
                "Asia/Tokyo"
            ),
            "dur": pl.Series([dt.timedelta(seconds=1), None, dt.timedelta(0)]),
            "time": pl.Series([dt.time(1, 2, 3), None, dt.time(0)]),
            "nested": [[{"a": [1, None]}], None, []],
            "null": pl.Series([None, None, None], dtype=pl.Null),
        }
    )


def python_values() -> Any:
    return {
        "ints": [1, 2**70, -(2**60)],
        "floats": [1.5, float("nan"), float("-inf"), -0.0, 1e-7],
        "tuple": (1, "two", (3.0,)),
        "set": {1, 2, 3},
        "keys": {1: "a", (2, "b"): "c", None: 1, 2.5: 2},
        "bytes": bytes(range(256)) * 20,
        "when": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        "array": np.arange(300, dtype=">i4").reshape(30, 10),
        "fortran": np.asfortranarray(np.arange(600, dtype=np.float32).reshape(20, 30)),
        "texts": np.array(["a", "bc"]),
        "long": list(range(400)),
        "config": NetConfig(d_in=1, d_hidden=2),
    }


def save(value: Any, path: Path, **settings: Any) -> Path:
    zarchive.save(value, path, **settings)
    return path


CASES: dict[str, Callable[[Path], Path]] = {
    "state_dict": lambda p: save(state_dict(), p),
    "state_dict_uncompressed": lambda p: save(state_dict(), p, compress=False),
    "tensor_table_and_views": lambda p: save(big_state_dict(), p),
    "model_with_config": lambda p: save(model(), p),
    "model_nested": lambda p: save({"model": model(), "epoch": 3}, p),
    "pandas": lambda p: save(pandas_frame(), p, external_list_threshold=2, external_array_threshold=4),
    "polars": lambda p: save(polars_frame(), p, external_array_threshold=2),
    "pandas_arrow": lambda p: save(pandas_arrow_frame(), p, external_array_threshold=3),
    "polars_arrow": lambda p: save(polars_arrow_frame(), p, external_array_threshold=2),
    "python_values": lambda p: save(python_values(), p, external_list_threshold=8),
    "compressed_weights": lambda p: save(
        {
            "w": torch.randn(600, 300).bfloat16(),
            "x": torch.randn(256, 256),
            "n": np.linspace(0, 1, 5000, dtype=np.float32),
        },
        p,
        compress_weights=True,
    ),
}


def checkpoint(p: Path) -> Path:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    net(torch.randn(3, 4)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    zarchive.save_checkpoint(p, net, opt, sched, epoch=2, metrics=pd.DataFrame({"loss": [1.0, 0.5]}))
    return p


def compressed_checkpoint(p: Path) -> Path:
    torch.manual_seed(1)
    net = torch.nn.Linear(64, 64)
    opt = torch.optim.Adam(net.parameters())
    net(torch.randn(2, 64)).sum().backward()
    opt.step()
    zarchive.save_checkpoint(p, net, opt, compress_weights=True)
    return p


CASES["checkpoint"] = checkpoint
CASES["compressed_checkpoint"] = compressed_checkpoint


@pytest.mark.parametrize("case", sorted(CASES), ids=sorted(CASES))
def test_js_neutral_form_equals_zarchive_neutral(case: str, tmp_path: Path) -> None:
    path = CASES[case](tmp_path / f"{case}.zarc")
    assert_same(path)


@pytest.mark.parametrize("case", ["state_dict", "tensor_table_and_views", "model_with_config", "compressed_weights"])
def test_js_weights_hash_equals_zarchive_hash(case: str, tmp_path: Path) -> None:
    path = CASES[case](tmp_path / f"{case}.zarc")
    got = node("zarc-hash.js", str(path))
    assert got.returncode == 0, got.stderr
    with zarchive.open(path) as arc:
        assert got.stdout.strip() == arc.weights_hash()


def test_js_refuses_a_damaged_fresh_archive(tmp_path: Path) -> None:
    path = save(state_dict(), tmp_path / "sd.zarc", compress=False)
    data = bytearray(path.read_bytes())
    at = data.index(b"__metadata__") + 200  # inside the tensors' data of the safetensors member
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    got = node("zarc-neutral.js", str(path))
    assert got.returncode == 2
    assert got.stdout == ""
    assert got.stderr.startswith("zarc-neutral: error: IntegrityError")


def tensor_sha(t: Any) -> str:
    t = t.detach().contiguous().cpu()
    raw = t.view(torch.uint8) if t.dtype != torch.bool else t.to(torch.uint8)
    return hashlib.sha256(raw.numpy().tobytes()).hexdigest()


def test_js_reads_a_fresh_sharded_checkpoint(tmp_path: Path) -> None:
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    from zarchive.dcp import ZArchiveWriter

    torch.manual_seed(0)
    state: dict[str, Any] = {
        "model": {"w": torch.randn(5, 3), "b": torch.arange(4, dtype=torch.bfloat16)},
        "step": 7,
        "hp": {"lr": 0.5, "names": ["a", "b"]},
    }
    dcp.save(state, storage_writer=ZArchiveWriter(tmp_path / "ckpt"), no_dist=True)
    got = subprocess.run(
        [*LIMIT, str(NODE), str(JS / "bin" / "zarc-dcp.js"), str(tmp_path / "ckpt")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert got.returncode == 0, got.stderr
    read = json.loads(got.stdout)
    for name, t in state["model"].items():
        want = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "sha256": tensor_sha(t)}
        assert read["model"][name] == want
    assert read["step"] == 7
    assert read["hp"] == {"lr": 0.5, "names": ["a", "b"]}
    assert_same(tmp_path / "ckpt")  # the directory's class-free form (spec/neutral.md section 8)


def test_node_tests_pass() -> None:
    """`node --test js/test/`: the golden examples, every checksum kind, the hostile corpus, DCP."""
    got = subprocess.run(
        [*LIMIT, "timeout", "600", str(NODE), "--test", "js/test/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=660,
        check=False,
    )
    assert got.returncode == 0, got.stdout[-6000:] + got.stderr[-2000:]
    assert "# fail 0" in got.stdout


PY_CORPUS = """
import json, pathlib, sys
from zarchive.neutral import canonical_json, neutral_form_of
out = {}
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.zarc")):
    try:
        out[f.name] = canonical_json(neutral_form_of(f))
    except Exception as e:  # the refusals are compared, by kind
        out[f.name] = "refused: " + type(e).__name__
json.dump(out, sys.stdout)
"""

JS_CORPUS = """
import { readFileSync, readdirSync } from "node:fs";
import { neutralText } from "./js/src/index.js";
const dir = process.argv[1];
const out = {};
for (const f of readdirSync(dir).filter((f) => f.endsWith(".zarc")).sort()) {
  try { out[f] = neutralText(new Uint8Array(readFileSync(`${dir}/${f}`))); }
  catch (e) { if (!e.name || e.constructor.name === "Error" || e instanceof TypeError || e instanceof RangeError) throw e; out[f] = "refused: " + e.name; }
}
process.stdout.write(JSON.stringify(out));
"""


def test_js_and_zarchive_neutral_agree_on_the_hostile_corpus() -> None:
    """Every file of the hostile corpus: refused by both (a crash of the JS reader fails), or read
    to the same form. Both run in child processes under an address-space and time limit."""
    corpus = str(ROOT / "tests" / "hostile" / "corpus")
    py = subprocess.run(
        [*LIMIT, "timeout", "600", sys.executable, "-c", PY_CORPUS, corpus],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=660,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    js = subprocess.run(
        [*LIMIT, "timeout", "600", str(NODE), "--input-type=module", "-e", JS_CORPUS, corpus],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=660,
        check=True,
    )
    want, got = json.loads(py.stdout), json.loads(js.stdout)
    assert want.keys() == got.keys()
    differ = [f for f in want if want[f].startswith("refused") != got[f].startswith("refused")]
    differ += [f for f in want if not want[f].startswith("refused") and want[f] != got[f]]
    assert not differ, {f: (want[f][:80], got[f][:80]) for f in differ}


def test_arrow_form_hides_what_the_writer_may_choose(tmp_path: Path) -> None:
    """Keys beyond the Arrow type grammar, a validity bitmap's padding bits and an all-present bitmap
    stored where `null` could be do not show (spec/neutral.md 5.1), in zarchive's form and the JS one."""
    pa = pytest.importorskip("pyarrow")
    from hostile.craft import pack, unpack

    frame = pd.DataFrame({"x": pd.arrays.ArrowExtensionArray(pa.array([1, None, 3], pa.int64()))})
    src = save(frame, tmp_path / "src.zarc")
    plain = python_neutral(src)
    parts = unpack(src.read_bytes())
    array = parts.manifest["root"]["data"][0]["array"]
    array["type"]["note"] = 1.5  # a writer's extra key: never in the form (a float would not print)
    validity = array["buffers"][0]
    assert validity["data"] == [0b101]
    validity["data"] = [0b11110101]  # bits 3..7 lie past the 3 values
    edited = tmp_path / "edited.zarc"
    edited.write_bytes(pack(parts))
    assert python_neutral(edited) == plain
    assert_same(edited)
    parts.manifest["root"]["data"][0]["array"]["buffers"][0]["data"] = [0b100]  # 2 missing, null_count 1
    wrong = tmp_path / "wrong.zarc"
    wrong.write_bytes(pack(parts))
    got = node("zarc-neutral.js", str(wrong))
    assert got.returncode == 2 and got.stdout == "" and "marks 2 values missing" in got.stderr, got.stderr
    with pytest.raises(zarchive.errors.FormatError, match="marks 2 values missing"):
        python_neutral(wrong)


def test_arrow_form_of_an_all_present_bitmap_is_null(tmp_path: Path) -> None:
    """No value missing: a stored bitmap of set bits reads as the absent one does."""
    pa = pytest.importorskip("pyarrow")
    from hostile.craft import pack, unpack

    frame = pd.DataFrame({"x": pd.arrays.ArrowExtensionArray(pa.array([1, 2, 3], pa.int64()))})
    src = save(frame, tmp_path / "src.zarc")
    parts = unpack(src.read_bytes())
    buffers = parts.manifest["root"]["data"][0]["array"]["buffers"]
    assert buffers[0] is None
    buffers[0] = {"$type": "numpy.ndarray", "dtype": "|u1", "shape": [1], "data": [0b111]}
    edited = tmp_path / "edited.zarc"
    edited.write_bytes(pack(parts))
    assert python_neutral(edited) == python_neutral(src)
    assert_same(edited)
