"""`zarchive view --html out.html PATH [PATH2]`: one self-contained page (no network reference: styles,
data and plots inline) with each archive's overview and the pages of its first values (tensors,
tables, configs), linked by anchors within the page; with two archives, what changed between them."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

from ..errors import ZArchiveError
from . import describe, pages
from .routes import archive_data
from .sources import Sources

MAX_VALUES = 200  # value pages included per archive (the tree lists every node; later ones are not linked)


class StaticLinks:
    """Anchors within the one page; values without a section of their own get no link."""

    def __init__(self, diff: bool) -> None:
        self.ids: dict[tuple[int, str], str] = {}
        self.has_diff = diff

    def home(self) -> str:
        return "#top"

    def archive(self, index: int) -> str:
        return f"#a{index}"

    def node(self, index: int, path: str, page: int = 0) -> str | None:
        anchor = self.ids.get((index, path))
        return f"#{anchor}" if anchor and page == 0 else None

    def verify(self, index: int) -> str | None:
        return None

    def diff(self) -> str | None:
        return "#diff" if self.has_diff else None


def render(sources: Sources, *, verify: bool = True, diff: Callable[[Sources], dict[str, Any]] | None = None,
           diff_page: Callable[[dict[str, Any], Any], str] | None = None) -> str:  # fmt: skip
    """The whole page as text (every archive must open; a value that cannot be read says why)."""
    with_diff = diff is not None and diff_page is not None and len(sources.items) == 2
    links = StaticLinks(with_diff)
    chosen: list[list[str]] = []
    for source in sources.items:
        rows = describe.tree(source)["nodes"]
        paths = [r["path"] for r in rows if r["kind"] in ("tensor", "table", "config")][:MAX_VALUES]
        for n, path in enumerate(paths):
            links.ids[(source.index, path)] = f"a{source.index}-v{n}"
        chosen.append(paths)
    parts = ['<div id="top"></div>']
    for source, paths in zip(sources.items, chosen):
        data = archive_data(source, verify=verify)
        parts.append(f'<div class="archive" id="a{source.index}">{pages.archive_body(source.index, data, links)}</div>')
        for path in paths:
            try:
                body = pages.value_body(source.index, source.label, describe.value(source, path), links)
            except ZArchiveError as e:
                body = f"<h1>/{pages.e(path)}</h1>" + pages.error_body(422, f"{type(e).__name__}: {e}")
            parts.append(f'<div class="value" id="{links.ids[(source.index, path)]}">{body}</div>')
    if with_diff and diff is not None and diff_page is not None:
        parts.append(f'<div id="diff">{diff_page(diff(sources), links)}</div>')
    title = " vs ".join(s.label for s in sources.items)
    return pages.layout(title, "".join(parts), links, [s.label for s in sources.items])


def write(path: str, text: str) -> None:
    """Write the page atomically (a failed write leaves what was there)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".zarchive-view-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


__all__ = ["MAX_VALUES", "StaticLinks", "render", "write"]
