"""Check the dependency floors: every `name>=X` in pyproject.toml's dependencies has the pin `name==X`
in requirements-floors.txt (and nothing else is pinned there), and, with --installed, that the
running interpreter has exactly those versions (a local label such as +cpu aside).

Run by `make test-floors` in its own virtual environment before the test suite."""

from __future__ import annotations

import re
import sys
from importlib.metadata import version
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
REQ = re.compile(r"^([A-Za-z0-9_.-]+)\s*(>=|==)\s*([0-9][0-9A-Za-z.]*)\s*$")


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


def main() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = parse(deps, ">=", "pyproject.toml dependencies")
    pins = parse((ROOT / "requirements-floors.txt").read_text().splitlines(), "==", "requirements-floors.txt")
    problems = []
    if set(floors) != set(pins):
        problems.append(f"packages differ: pyproject {sorted(floors)} vs floors file {sorted(pins)}")
    for name in sorted(set(floors) & set(pins)):
        if release(floors[name]) != release(pins[name]):
            problems.append(f"{name}: pyproject says >={floors[name]} but requirements-floors.txt pins {pins[name]}")
    if "--installed" in sys.argv[1:]:
        for name, pin in sorted(pins.items()):
            have = version(name)
            if release(have) != release(pin):
                problems.append(f"{name}: {have} is installed, not the floor {pin}")
            else:
                print(f"floor {name}=={have}")
    if problems:
        sys.exit("dependency floors out of step:\n  " + "\n  ".join(problems))


if __name__ == "__main__":
    main()
