"""No import circle inside zarchive/inspection/ (nor inside the viewer): every import, at module level,
inside a function or under TYPE_CHECKING, read from the source with ast, makes a graph without
cycles (a circle is how diff.py and diff_text.py once needed each other)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path) -> set[str]:
    """Every module `path` imports anywhere in its source (relative imports resolved; `from . import
    x` counted as the submodule x where there is one)."""
    here = _module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            module = node.module if node.level == 0 else ".".join(x for x in (base, node.module) if x)
            out.add(module or base)
            out.update(f"{module or base}.{alias.name}" for alias in node.names)
    return out


def _cycle(package: str, root: Path = ROOT) -> list[str] | None:
    folder = root / package.replace(".", "/")
    modules = {_module_name(p, root): p for p in folder.glob("*.py")}
    graph = {m: sorted(x for x in _imports(p, root) if x in modules and x != m) for m, p in modules.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in graph[m]:
            if state.get(n) == 1:
                return [*stack[stack.index(n) :], n]
            if n not in state and (found := visit(n)) is not None:
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)) is not None:
            return found
    return None


@pytest.mark.parametrize("package", ["zarchive.inspection", "zarchive.viewer", "zarchive.cli"])
def test_no_import_circle(package: str) -> None:
    assert _cycle(package) is None, " -> ".join(_cycle(package) or [])


def test_the_scan_sees_a_circle(tmp_path: Path) -> None:
    """The scan finds a circle made only of an in-function and a TYPE_CHECKING import."""
    pkg = tmp_path / "probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "one.py").write_text("def f():\n    from .two import g\n    return g\n")
    (pkg / "two.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .one import f\n")
    assert _cycle("probe", tmp_path) == ["probe.one", "probe.two", "probe.one"]
    (pkg / "two.py").write_text("import json\n")
    assert _cycle("probe", tmp_path) is None
