"""audit() lists everything a read may construct or call, and trusted= checks that same list.

A file can make a read run the reading program's code in several ways: the classes it names
(dataclasses, enums, named tuples, ConfiguredModels), their field functions, handlers from outside
zarchive (registered by the program or an installed package) and loaders registered for ZANJ formats
(`zarchive.compat.zanj`). Each is declared by its node's schema while the read is planned; audit()
shows that list and trusted= refuses anything in it that it does not name, before anything is built.

The property test reads every golden example, every hostile corpus file, files that name the code
above, foreign files and a DCP directory in a child process (tests/audit_trace.py) that watches
which of the program's classes and functions really run, and checks they are among what audit()
listed; that audit() itself runs none of them, and a read with trusted=[] none either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import audit_fixtures
import pytest
from audit_fixtures import BUILT, Budget, Money, Point, PointHandler, money_check, money_load, twice
from rewrite import rewrite

import zarchive
from zarchive.cli import main as cli_main
from zarchive.engine.typeref import class_tag, code_tag

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
EXAMPLES = ROOT / "spec" / "examples"
CORPUS = TESTS / "hostile" / "corpus"


@pytest.fixture
def installed() -> Iterator[None]:
    audit_fixtures.install()
    BUILT.clear()
    yield
    audit_fixtures.uninstall()


@pytest.fixture
def files(tmp_path: Path, installed: None) -> dict[str, Path]:
    return {p.name: p for p in audit_fixtures.write_files(tmp_path / "files")}


# --- what a file picks of the program's code is listed, and refused unless trusted ----------------
def test_a_zanj_custom_node_lists_its_loader(files: dict[str, Path]) -> None:
    path = files["custom.zanj"]
    load = code_tag(money_load)
    assert zarchive.audit(path) == {load: ["price", "l/0"]}
    with pytest.raises(zarchive.UntrustedTypeError, match=load) as info:
        zarchive.read(path, trusted=[])
    assert info.value.path == "price" and BUILT == []  # refused by the plan: the loader never ran
    back = zarchive.read(path, trusted=[money_load])  # a function, or its tag
    assert back == {"price": Money(250, "EUR"), "l": [Money(1, "USD")]}
    assert zarchive.read(path, trusted=[load])["price"] == Money(250, "EUR")


def test_a_loader_chosen_by_its_check_lists_every_check(files: dict[str, Path], tmp_path: Path) -> None:
    """Without a format the value names, any registered loader's check may pick it: each is listed."""

    def drop_format(manifest: dict[str, Any]) -> None:
        manifest["root"]["price"]["value"].pop("__muutils_format__")

    path = rewrite(files["custom.zanj"], tmp_path / "checked.zarc", manifest_edit=drop_format)
    found = zarchive.audit(path)
    assert found[code_tag(money_check)] == ["price"] and code_tag(money_load) in found
    with pytest.raises(zarchive.UntrustedTypeError, match="check"):
        zarchive.read(path, trusted=[money_load])
    assert BUILT == []


def test_a_real_zanj_format_loader_and_field_functions_are_listed(files: dict[str, Path]) -> None:
    path = files["real.zanj"]
    assert zarchive.audit(path) == {
        code_tag(money_load): ["m"],
        class_tag(Budget): ["b"],
        code_tag(twice): ["b/limit"],
    }
    with pytest.raises(zarchive.UntrustedTypeError, match="money_load"):
        zarchive.read(path, trusted=[Budget])  # the class brings its field functions, not the loader
    assert BUILT == []
    back = zarchive.read(path, trusted=[Budget, money_load])
    assert back["m"] == Money(7, "GBP") and back["b"] == Budget(limit=3)


def test_a_handler_from_outside_zarchive_is_listed_and_trusted_by_class(files: dict[str, Path]) -> None:
    path = files["handler.zarc"]
    assert zarchive.audit(path) == {class_tag(PointHandler): ["p", "q/0"]}
    with pytest.raises(zarchive.UntrustedTypeError, match="audit_fixtures.point"):
        zarchive.read(path, trusted=[])
    assert BUILT == []
    assert zarchive.read(path, trusted=[PointHandler]) == {"p": Point(1, 2), "q": [Point(3, 4)]}
    with zarchive.open(path, trusted=[]) as arc:  # browsing calls nothing
        assert arc.keys("") == ["p", "q"]


def test_a_handler_from_an_installed_packages_entry_point_is_listed_and_refused(
    files: dict[str, Path], tmp_path: Path
) -> None:
    """The same handler, found through the `zarchive.handlers` entry point of an installed package."""
    from zarchive.engine.registry import ENTRY_POINT_GROUP, reload_entry_points

    zarchive.unregister_handler(PointHandler.name)
    dist = tmp_path / "site" / "pointplugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pointplugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n{PointHandler.name} = audit_fixtures:PointHandler\n"
    )
    sys.path.insert(0, str(dist.parent))
    reload_entry_points()
    try:
        path = files["handler.zarc"]
        assert zarchive.audit(path) == {class_tag(PointHandler): ["p", "q/0"]}
        with pytest.raises(zarchive.UntrustedTypeError, match=class_tag(PointHandler)):
            zarchive.read(path, trusted=[])
        assert BUILT == []
        assert zarchive.read(path, trusted=[class_tag(PointHandler)])["p"] == Point(1, 2)
    finally:
        sys.path.remove(str(dist.parent))
        reload_entry_points()


def test_the_read_calls_only_what_its_plan_listed(files: dict[str, Path]) -> None:
    """A loader registered after the plan was made is not called: construction picks among the
    functions the plan listed (and trusted= checked) only."""
    from zarchive.compat.zanj import LoaderHandler, register_loader_handler

    path = files["custom.zanj"]
    calls: list[str] = []
    with zarchive.open(path, trusted=[money_load]) as arc:
        plan = arc.plan("price")
        register_loader_handler(
            LoaderHandler(check=lambda *a: True, load=lambda *a: calls.append("late"), uid="Money", source_pckg="t")
        )
        with pytest.raises(zarchive.ZArchiveError):
            arc._construct(plan, arc.node("price"), "price", None, None, None)
    assert calls == []


def test_audit_lists_the_exports(capsys: pytest.CaptureFixture[str]) -> None:
    path = EXAMPLES / "exports_model.zarc"
    found = zarchive.audit(path)
    assert found.exports == {  # type: ignore[attr-defined]
        "onnx": {"member": "exports/model.onnx", "kind": "onnx", "runs": found.exports["onnx"]["runs"]},  # type: ignore[attr-defined]
        "torchscript": {
            "member": "exports/model.torchscript.pt",
            "kind": "torchscript",
            "runs": found.exports["torchscript"]["runs"],  # type: ignore[attr-defined]
        },
    }
    assert "no Python code" in found.exports["onnx"]["runs"]  # type: ignore[attr-defined]
    assert "torch.jit:load" in found.exports["torchscript"]["runs"]  # type: ignore[attr-defined]
    with zarchive.open(path) as arc:
        assert arc.audit("config").exports == {}  # (the exports belong to the whole archive)
    assert cli_main(["audit", str(path)]) == 0
    assert (
        "export torchscript (exports/model.torchscript.pt): opening it runs torch.jit:load" in capsys.readouterr().out
    )
    assert cli_main(["audit", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["$exports"]["onnx"]["member"] == "exports/model.onnx"


# --- the property: what a read runs is a subset of what audit() listed -----------------------------
def _traced(paths: list[str], out: Path) -> dict[str, dict[str, Any]]:
    """audit_trace.py's record of each file, in children under an address-space limit; a file that
    kills or hangs its child is recorded as such and the rest go on in a new child."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS), str(EXAMPLES)])}
    results: dict[str, dict[str, Any]] = {}
    todo = list(paths)
    while todo:
        log = out / f"trace-{len(results)}.jsonl"
        proc = subprocess.run(
            [sys.executable, str(TESTS / "audit_trace.py"), str(log), *todo],
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if log.exists():
            for line in log.read_text().splitlines():
                rec = json.loads(line)
                results[rec["file"]] = rec
        todo = [p for p in todo if p not in results]
        if todo:
            results[todo[0]] = {"file": todo[0], "died": proc.returncode, "stderr": proc.stderr[-2000:]}
            todo = todo[1:]
    return results


def _unaccounted(ran: list[list[str]], listed: dict[str, Any]) -> list[list[str]]:
    return [tags for tags in ran if not any(t in listed for t in tags)]


def test_a_read_runs_only_what_audit_listed(files: dict[str, Path], tmp_path: Path) -> None:
    paths = sorted(str(p) for p in EXAMPLES.glob("*.zarc"))
    paths += sorted(str(p) for p in CORPUS.glob("*.zarc"))
    paths += [str(p) for p in files.values()] + [str(EXAMPLES / "dcp_sharded")]
    results = _traced(paths, tmp_path)
    problems = []
    for path in paths:
        rec = results[path]
        name = os.path.relpath(path, ROOT) if path.startswith(str(ROOT)) else os.path.basename(path)
        if "died" in rec:
            problems.append(f"{name}: the child died (exit {rec['died']}): {rec['stderr'][-300:]}")
            continue
        if rec["audit_ran"]:
            problems.append(f"{name}: audit() ran {rec['audit_ran']}")
        if rec["audit_error"] is not None and rec["read_ran"]:
            problems.append(f"{name}: audit() refused ({rec['audit_error']}), the read ran {rec['read_ran']}")
        missing = _unaccounted(rec["read_ran"], rec["audit"])
        if missing:
            problems.append(f"{name}: the read ran {missing}, which audit() did not list ({sorted(rec['audit'])})")
        if rec["untrusted_ran"]:
            problems.append(f"{name}: a read with trusted=[] ran {rec['untrusted_ran']}")
        if rec["trusted_error"] == "UntrustedTypeError":
            problems.append(f"{name}: a read trusting all audit() listed was refused")
    assert not problems, "\n".join(problems)
    # the check sees real construction: the files that name the program's code did run it
    ran = {t for p in files.values() for tags in results[str(p)]["read_ran"] for t in tags}
    assert {code_tag(money_load), class_tag(Budget), code_tag(twice), class_tag(PointHandler)} <= ran
    golden = {t for p in EXAMPLES.glob("*.zarc") for tags in results[str(p)]["read_ran"] for t in tags}
    assert "golden_models:TinyNet" in golden and "golden_models:Point" in golden
