"""Every input kind x every entry point, under one address-space limit and one time limit per cell
(issue 24, item 8): the safety promises hold wherever a file comes in, not only in the .zarc reader.

Kinds (tests/hostile/kinds.py): .zarc, torch .pt, .safetensors, .npy, .npz, .zanj, a DCP checkpoint
directory, a model store folder, a .zarc with exports. Entry points (tests/hostile/cells.py):
`zarchive.read`, `zarchive.open` + fetch of every leaf, `audit`, `verify`, the weights hash, the
diff of a file with itself, and the commands `ls`, `show`, `cat`, `hash`, `verify`, `audit`,
`convert`, `extract`, `neutral`, `diff`, `view --html`, `store ls`/`show` where they apply, and `convert`
of a DCP checkpoint from a URL (the directory copied into fsspec's memory filesystem: `cli_convert_remote`). Each cell runs in a child forked by tests/hostile/worker.py with its address space
capped at MEM_MB over what it starts with, and killed after its time limit.

(a) the valid base of each kind works through every entry point;
(b) each hostile case (tests/hostile/foreign_craft.py: the findings of issue 24 and the four earlier
    ones) is refused with its ZArchiveError (the CLI: exit status 2 and one line on stderr naming the
    file) or read within the budget, as the case states per entry point.

Cell ids read `kind-entrypoint-case`, e.g. `pt-cli_cat-zero_stride`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostile.cells import DIFF, ENTRIES, EXTRA, SMALL_CONVERT
from hostile.foreign_craft import BUDGET, CASES, SKIP, WORKS, Hostile, Outcome, lists, tampered
from hostile.kinds import KINDS, LEAF, write_base
from hostile.worker import Worker

import zarchive

MEM_MB = 3072  # the address-space limit of every cell, over what the child starts with
SECONDS = 60  # the time limit of a cell (a case may ask for less: its finding was about time)
ROOT = Path(__file__).resolve().parent.parent
REPORT: dict[str, dict[str, Any]] = {}  # cell id -> its reply (ZARCHIVE_MATRIX_REPORT=FILE writes them)

# --- the cells ------------------------------------------------------------------------------------------
BASE_EXTRA = {"zarc": ("read_dtype", "read_small_budget", "read_untrusted", "cli_convert_small"),
              "pt": ("read_dtype", "read_small_budget", "read_untrusted", "cli_convert_small")}  # fmt: skip
BASE_OUTCOME = {("exports", "audit"): lists("onnx|export"), ("exports", "cli_audit"): lists("onnx|export")}


def base_cells() -> list[tuple[str, str, Outcome]]:
    return [
        (kind, entry, BASE_OUTCOME.get((kind, entry), WORKS))
        for kind in KINDS
        for entry in ENTRIES[kind] + BASE_EXTRA.get(kind, ())
    ]


def hostile_cells() -> list[tuple[Hostile, str, Outcome]]:
    out = []
    for case in CASES:
        entries = [e for e in ENTRIES[case.kind] + tuple(e for e in EXTRA if e in case.entries)]
        if case.only is not None:
            entries = [e for e in dict.fromkeys([*entries, *case.only]) if e in case.only]
        for entry in entries:
            outcome = case.entries.get(entry, case.outcome)
            if entry in DIFF and entry not in case.entries:
                outcome = for_diff(outcome)
            if outcome is not SKIP:
                out.append((case, entry, outcome))
    return out


def for_diff(outcome: Outcome) -> Outcome:
    """A diff or the viewer builds no value that is not a tensor (it describes manifest nodes), so a case refused where
    a value is built may be refused by diff or compared within the limits; never a crash or a raw error."""
    if outcome is SKIP or outcome.error is None:
        return outcome
    return Outcome("*", ok=True, peak_mb=outcome.peak_mb)


BASE_CELLS = base_cells()
HOSTILE_CELLS = hostile_cells()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every base and every hostile input, built once: {"base-<kind>" or "<kind>-<case>": path}."""
    root = tmp_path_factory.mktemp("matrix")
    built = {f"base-{kind}": write_base(kind, root / "base" / kind) for kind in KINDS}
    for case in CASES:
        built[f"{case.kind}-{case.name}"] = case.build(root / case.kind / case.name)
    return built


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    yield Worker.get()
    if os.environ.get("ZARCHIVE_MATRIX_REPORT"):  # every cell's time, peak memory and outcome, for people
        Path(os.environ["ZARCHIVE_MATRIX_REPORT"]).write_text(json.dumps(REPORT, indent=1, default=str))


def run(worker: Worker, path: Path, leaf: str, entry: str, tmp: Path, *, seconds: float, **req: Any) -> dict[str, Any]:
    reply = worker.call(
        op="cell", entry=entry, path=str(path), leaf=leaf, tmp=str(tmp), mem_mb=MEM_MB, timeout=seconds, **req
    )
    REPORT[os.environ.get("PYTEST_CURRENT_TEST", entry).split("::")[-1].split(" ")[0]] = reply
    assert not reply.get("timeout"), f"{entry} took more than {seconds:.0f} s: {reply}"
    assert reply.get("signal") is None, f"{entry} was killed by signal {reply.get('signal')}: {reply}"
    return reply


def judge(reply: dict[str, Any], outcome: Outcome, entry: str, path: Path) -> None:
    """Assert that a cell's reply is what `outcome` asks for."""
    if outcome.peak_mb is not None:
        assert reply.get("peak_mb", 0) <= outcome.peak_mb, (
            f"used {reply.get('peak_mb'):.0f} MB, over {outcome.peak_mb}: {reply}"
        )
    if entry.startswith("cli_"):
        judge_cli(reply, outcome, entry, path)
        return
    if reply["ok"]:
        assert outcome.error is None or outcome.ok, f"expected {outcome.describe()}, it read: {reply}"
        if outcome.lists:
            text = str(reply.get("value"))
            assert reply.get("value") and re.search(outcome.match, text), (
                f"audit lists nothing /{outcome.match}/: {text}"
            )
        if entry == "verify" and outcome.error is None:
            assert reply["value"] == [], f"verify found problems in a valid file: {reply['value']}"
        return
    what = f"{reply.get('exc')}: {reply.get('msg')}"
    assert reply.get("zarchive_error"), f"not a ZArchiveError: {what}"
    assert outcome.error is not None, f"expected it to work: {what}"
    if outcome.error != "*":
        assert reply["exc"] in outcome.error.split("|"), f"expected {outcome.describe()}, got {what}"
    assert re.search(outcome.match, reply["msg"]), f"expected {outcome.describe()}, got {what}"


def judge_cli(reply: dict[str, Any], outcome: Outcome, entry: str, path: Path) -> None:
    assert reply.get("ok"), f"the command raised {reply.get('exc')}: {reply.get('msg')}"
    rc, err = reply["rc"], reply["stderr"]
    lines = [line for line in err.splitlines() if line.strip()]
    success = (0, 1) if entry == "cli_verify" and outcome.error is not None else (0,)
    if rc in success:
        assert outcome.error is None or outcome.ok, f"expected {outcome.describe()}, exit {rc}: {err}{reply['stdout']}"
        if outcome.lists:
            assert re.search(outcome.match, reply["stdout"]), f"lists nothing /{outcome.match}/: {reply['stdout']}"
        if entry == "cli_convert_small":
            assert reply["written"] <= SMALL_CONVERT * 2, f"wrote {reply['written']} bytes past --max-bytes"
        return
    assert outcome.error is not None, f"expected it to work, exit {rc}: {err}"
    assert rc == 2, f"exit status {rc} (expected 2): {err}"
    assert len(lines) == 1, f"{len(lines)} lines on stderr (expected one): {err}"
    assert path.name in lines[0], f"the line does not name the file: {lines[0]}"
    if outcome.error != "*" and outcome.match:
        assert re.search(outcome.match, lines[0]), f"expected /{outcome.match}/: {lines[0]}"


# --- (a) the valid base of every kind ----------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "entry", "outcome"), BASE_CELLS, ids=[f"{k}-{e}-base" for k, e, _ in BASE_CELLS])
def test_base_works(
    inputs: dict[str, Path], worker: Worker, tmp_path: Path, kind: str, entry: str, outcome: Outcome
) -> None:
    path = inputs[f"base-{kind}"]
    reply = run(worker, path, LEAF[kind], entry, tmp_path, seconds=SECONDS)
    judge(reply, outcome, entry, path)
    if entry == "onnx_session":
        assert reply["value"] == [1.0, 2.0, 3.0, 4.0]


# --- (b) every hostile case --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("case", "entry", "outcome"), HOSTILE_CELLS, ids=[f"{c.kind}-{e}-{c.name}" for c, e, _ in HOSTILE_CELLS]
)
def test_hostile_cell(
    inputs: dict[str, Path], worker: Worker, tmp_path: Path, case: Hostile, entry: str, outcome: Outcome
) -> None:
    path = inputs[f"{case.kind}-{case.name}"]
    reply = run(worker, path, case.leaf, entry, tmp_path, seconds=case.seconds, setup=case.setup, cwd=str(path.parent))
    judge(reply, outcome, entry, path)
    if entry == "onnx_session" and reply["ok"]:
        assert max(reply["value"]) < 1e5, f"the model's output holds the planted file's bytes: {reply['value']}"
    if entry == "read_untrusted":
        assert reply.get("loader_called") is None, "read(trusted=[]) ran the registered ZANJ loader"


def test_inputs_are_small(inputs: dict[str, Path]) -> None:
    """Every input is crafted small (the bombs compress gigabytes into a few MB at most)."""
    sizes = {name: sum(p.stat().st_size for p in (path.rglob("*") if path.is_dir() else [path]) if p.is_file())
             for name, path in inputs.items()}  # fmt: skip
    big = {name: size for name, size in sizes.items() if size >= 4 << 20}
    assert not big and sum(sizes.values()) < 16 << 20, (big, sum(sizes.values()))


def test_every_case_applies_somewhere() -> None:
    """Each finding is a case of the matrix, every kind has a base, every case has cells."""
    assert {c.kind for c in CASES} <= set(KINDS)
    assert all(any(c is case for c, _, _ in HOSTILE_CELLS) for case in CASES)
    assert len(CASES) >= 18 and BUDGET.ok


# --- the weights hash means the same on every kind ------------------------------------------------------
@pytest.mark.parametrize("kind", ["pt", "safetensors"])
def test_weights_hash_of_a_foreign_file(inputs: dict[str, Path], tmp_path: Path, kind: str) -> None:
    """The hash of a .pt / .safetensors state dict is that of the same state dict in a .zarc, and changes
    with a byte of tensor data (issue 24: every .pt and .safetensors hashed as the empty state dict)."""
    with zarchive.open(inputs["base-zarc"]) as arc:
        want = arc.weights_hash("model")
    with zarchive.open(inputs[f"base-{kind}"]) as arc:
        got = arc.weights_hash()
    with zarchive.open(tampered(kind, tmp_path)) as arc:
        other = arc.weights_hash()
    assert got == want, f"{kind}: {got} != {want} (the .zarc's)"
    assert other != got, f"{kind}: a changed tensor byte leaves the hash at {got}"


# --- the command line in real processes (the cells above run main() in forked children) ------------------
REAL_CLI = [("base-zarc", ["ls"], 0), ("base-pt", ["hash"], 0), ("pt-deep_tuple_key", ["show"], 2),
            ("zarc-torch_size_2_70", ["cat", "size"], 2)]  # fmt: skip


@pytest.mark.parametrize(("name", "args", "status"), REAL_CLI, ids=[f"{n}-{a[0]}" for n, a, _ in REAL_CLI])
def test_command_line_in_a_real_process(inputs: dict[str, Path], name: str, args: list[str], status: int) -> None:
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (12 << 30, 12 << 30))  # torch maps several GiB it never touches

    path = inputs[name]
    done = subprocess.run(
        [sys.executable, "-m", "zarchive", args[0], str(path), *args[1:]],
        capture_output=True, text=True, timeout=120, check=False, preexec_fn=limit,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(path.parent),
    )  # fmt: skip
    assert done.returncode == status, done.stderr
    if status == 2:
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and path.name in lines[0], done.stderr
