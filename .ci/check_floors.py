"""Check the dependency floors: every `name>=X` in pyproject.toml's dependencies has the pin `name==X`
in requirements-floors.txt (any other pin there must replace one of requirements-ci.txt's), and, with
--installed, that the running interpreter has exactly those versions (a local label such as +cpu aside).

With --constraints PATH, also write the constraints .venv-floors is installed with: the pins of
requirements-floors.txt, then requirements-ci.txt's for every package requirements-floors.txt does not
pin (so the test extras resolve in one pass there too).

Run by `make test-floors` before it installs .venv-floors, and in it before the test suite."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQ = re.compile(r"^([A-Za-z0-9_.-]+)\s*(>=|==)\s*([0-9][0-9A-Za-z.]*(?:\+[0-9A-Za-z.]+)?)\s*$")


def release(v: str) -> tuple[int, ...]:
    """'1.26' and '1.26.0' alike: the numeric release with trailing zeros dropped (local label cut)."""
    parts = [int(p) for p in v.split("+")[0].split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def parse(lines: list[str], op: str, where: str) -> dict[str, str]:
    out = {}
    for line in lines:
        line = line.split("#")[0].split(";")[0].strip()
        if not line:
            continue
        m = REQ.match(line)
        if m is None or m.group(2) != op:
            sys.exit(f"{where}: {line!r} is not of the form name{op}version")
        out[m.group(1).lower().replace("_", "-")] = m.group(3)
    return out


def pin_lines(path: Path) -> list[str]:
    """The requirement lines of a requirements file, comments cut."""
    return [ln.split("#")[0].strip() for ln in path.read_text().splitlines() if ln.split("#")[0].strip()]


def name_of(line: str) -> str:
    """'Foo_Bar==1.0; marker' -> 'foo-bar'."""
    return re.split(r"[=<>!~;\[ ]", line, maxsplit=1)[0].strip().lower().replace("_", "-")


def write_constraints(floors_lines: list[str], ci_lines: list[str], out: Path) -> None:
    """The floors' pins, then requirements-ci.txt's for every package they do not name."""
    floored = set(parse(floors_lines, "==", "requirements-floors.txt"))
    kept = [ln for ln in ci_lines if name_of(ln) not in floored]
    out.write_text("\n".join(floors_lines + kept) + "\n")


def main() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = parse(deps, ">=", "pyproject.toml dependencies")
    floors_lines = pin_lines(ROOT / "requirements-floors.txt")
    ci_lines = pin_lines(ROOT / "requirements-ci.txt")
    pins = parse(floors_lines, "==", "requirements-floors.txt")
    problems = []
    if missing := sorted(set(floors) - set(pins)):
        problems.append(f"no floor pinned in requirements-floors.txt for {missing}")
    ci_names = {name_of(ln) for ln in ci_lines}
    if stray := sorted(set(pins) - set(floors) - ci_names):
        problems.append(f"requirements-floors.txt pins {stray}: neither a dependency nor in requirements-ci.txt")
    for name in sorted(set(floors) & set(pins)):
        if release(floors[name]) != release(pins[name]):
            problems.append(f"{name}: pyproject says >={floors[name]} but requirements-floors.txt pins {pins[name]}")
    if "--installed" in sys.argv[1:]:
        for name, pin in sorted(pins.items()):
            have = version(name)
            if release(have) != release(pin):
                problems.append(f"{name}: {have} is installed, not the pin {pin}")
            else:
                print(f"{'floor' if name in floors else 'beside the floors'} {name}=={have}")
    if problems:
        sys.exit("dependency floors out of step:\n  " + "\n  ".join(problems))
    if "--constraints" in sys.argv[1:]:
        write_constraints(floors_lines, ci_lines, Path(sys.argv[sys.argv.index("--constraints") + 1]))


if __name__ == "__main__":
    main()
