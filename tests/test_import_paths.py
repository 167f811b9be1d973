"""Every import path the documentation shows keeps working after the package was laid out by role
(docs/, README.md and spec/ name these; each is imported as written there)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTED = [
    ("zarchive", ["save", "read", "open", "audit", "verify", "save_async", "ZArchive", "ArchiveNotFoundError"]),
    ("zarchive.torchutil", ["ConfiguredModel", "set_config_class"]),
    ("zarchive.checkpoint", ["save_checkpoint", "load_checkpoint", "save_checkpoint_async"]),
    ("zarchive.inspection.diff", ["diff_archives", "ArchiveDiff"]),
    ("zarchive.store", ["ModelStore", "VersionExists", "VersionInfo"]),
    ("zarchive.convert", ["convert", "conversion_kind", "ConvertReport"]),
    ("zarchive.staging", ["staging_buffer"]),
    ("zarchive.weights_hash", ["state_dict_hash"]),
    ("zarchive.errors", ["ZArchiveError", "UnsafeArchiveError"]),
    ("zarchive.testing", ["check_handler", "HandlerContractError"]),
    ("zarchive.dcp", ["ZArchiveReader", "ZArchiveWriter"]),
    ("zarchive.dcp.index", []),
    ("zarchive.lightning", ["ZArchiveCheckpointIO", "AsyncZArchiveCheckpointIO", "load_from_checkpoint"]),
    ("zarchive.compat.zanj", ["ZANJ"]),
    ("zarchive.compat.zanj.torchutil", ["ConfiguredModel", "set_config_class"]),
    ("zarchive.compat.zanj.loading", ["LoaderHandler", "register_loader_handler"]),
    ("zarchive.compat.zanj.consts", ["_FORMAT_KEY"]),
    ("zarchive.demo", ["MLPConfig", "TinyMLP"]),
]


@pytest.mark.parametrize(("module", "names"), DOCUMENTED, ids=[m for m, _ in DOCUMENTED])
def test_a_documented_import_path_works(module: str, names: list[str]) -> None:
    if module == "zarchive.lightning":
        pytest.importorskip("lightning")
    imported = importlib.import_module(module)
    for name in names:
        assert getattr(imported, name, None) is not None, f"{module}.{name}"


def test_every_module_path_the_docs_name_is_listed_here() -> None:
    """A new `from zarchive.X import` in the docs joins DOCUMENTED, so it stays tested."""
    texts = [p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "spec").glob("*.md")]]
    named = set()
    for text in texts:
        named |= set(re.findall(r"from (zarchive(?:\.\w+)*) import", text))
        named |= set(re.findall(r"import (zarchive(?:\.\w+)+)", text))
    assert named <= {m for m, _ in DOCUMENTED}, sorted(named - {m for m, _ in DOCUMENTED})


def test_the_top_of_the_package_is_small() -> None:
    top = sorted(p.name for p in (ROOT / "zarchive").glob("*.py"))
    assert len(top) <= 12, top


def test_the_staging_path_and_its_home_are_one_module_state() -> None:
    code = "import zarchive.staging as a, zarchive.saving.staging as b; print(a.staging_buffer() is b.staging_buffer())"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT, check=True
    )
    assert done.stdout.strip() == "True"
