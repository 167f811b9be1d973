#!/usr/bin/env python
"""Writes `<name>.generic.json` for every example archive and checkpoint directory: its class-free neutral form
(../neutral.md), what `zarchive neutral <name>.zarc` prints, byte for byte.

    python spec/examples/make_generic.py           # write the files that do not exist yet
    python spec/examples/make_generic.py --check   # exit 1 if any file differs from what zarchive prints

Unlike `<name>.neutral.json` (make_neutral.py), nothing here needs the examples' classes: the form is
defined from the file alone, so another implementation can reproduce every file without Python. A
`.uncompressed.zarc` variant reads to the same form as its compressed twin and has no file of its own.
tests/test_neutral_form.py re-derives every file and compares.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from zarchive.neutral import canonical_json, neutral_form_of


def examples() -> list[Path]:
    """Every example that has a form of its own: the archives (not the `.uncompressed` twins) and the
    sharded checkpoint directories (`dcp_sharded/`, whose form is `dcp_sharded.generic.json`)."""
    archives = [p for p in HERE.glob("*.zarc") if not p.name.endswith(".uncompressed.zarc")]
    folders = [p for p in HERE.iterdir() if p.is_dir() and (p / "index.zarc").is_file()]
    return sorted(archives + folders)


def form_path(example: Path) -> Path:
    return example.with_name(example.name.removesuffix(".zarc") + ".generic.json")


def main(argv: list[str]) -> int:
    check = "--check" in argv
    bad = 0
    for archive in examples():
        text = canonical_json(neutral_form_of(archive))
        target = form_path(archive)
        if check:
            if not target.exists() or target.read_text(encoding="ascii") != text:
                print(f"differs: {target.name}")
                bad += 1
        elif not target.exists():
            target.write_text(text, encoding="ascii")
            print(f"wrote {target.name}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
