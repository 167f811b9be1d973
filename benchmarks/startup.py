"""Start-up cost: wall time of `import zarchive` and of `python -m zarchive --help`, and the memory
`import zarchive` leaves behind, in fresh processes (medians of N runs).

    .venv/bin/python benchmarks/startup.py                  # this checkout
    .venv/bin/python benchmarks/startup.py --against DIR    # and another checkout (e.g. an older commit
                                                            # from `git worktree add /tmp/old <commit>`)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
RSS = "import resource, sys, zarchive; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)"
HEAVY = "import sys, zarchive; print(' '.join(m for m in ('torch', 'pandas', 'muutils', 'numpy') if m in sys.modules))"


def _run(root: Path, args: list[str]) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, *args], env=env, cwd="/", capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, out.stdout.strip()


def measure(root: Path, reps: int) -> dict[str, str]:
    imp = statistics.median(_run(root, ["-c", "import zarchive"])[0] for _ in range(reps))
    helps = statistics.median(_run(root, ["-m", "zarchive", "--help"])[0] for _ in range(reps))
    return {
        "import zarchive s": f"{imp:.3f}",
        "zarchive --help s": f"{helps:.3f}",
        "RSS after import MB": _run(root, ["-c", RSS])[1],
        "imported by it": _run(root, ["-c", HEAVY])[1] or "-",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, help="another checkout to measure in the same run")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    rows = {"this checkout": measure(HERE, args.reps)}
    if args.against is not None:
        rows[str(args.against)] = measure(args.against.resolve(), args.reps)
    cols = list(next(iter(rows.values())))
    print("| checkout | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(row[c] for c in cols) + " |")


if __name__ == "__main__":
    main()
