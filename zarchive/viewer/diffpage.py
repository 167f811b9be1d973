"""The viewer's diff page: what changed between archives 0 and 1 (zarchive.inspection.diff), as a
per-layer bar chart of the relative change ||a-b||/||a||, a table of every tensor, the other values,
and the metadata side by side."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from . import svg
from .pages import Links, e
from .sources import Sources, resolve_input

MAX_BARS = 400  # tensors drawn in the bar chart (in path order; the table lists every one)


def diff_data(sources: Sources, *, rtol: float = 0.0, atol: float = 0.0) -> dict[str, Any]:
    """`diff_archives(a, b, rtol=rtol, atol=atol).to_json()` for the viewer's two inputs (computed
    once per tolerance, then cached). rtol, atol: as `zarchive diff` takes them (`zarchive view
    --rtol/--atol`): a tensor counts as changed when max |a-b| > atol and ||a-b||/||a|| > rtol."""
    from ..inspection.diff import diff_archives

    a, b = sources.items

    def run(_: Any) -> dict[str, Any]:
        with b.lock:
            ta, tb = resolve_input(a.path)[0], resolve_input(b.path)[0]
            return diff_archives(ta, tb, rtol=rtol, atol=atol, labels=(a.label, b.label)).to_json()

    return a.cached(("diff", repr(float(rtol)), repr(float(atol))), run)


def with_tolerance(rtol: float, atol: float) -> Callable[[Sources], dict[str, Any]]:
    """diff_data at a tolerance, as the viewer's routes and static page call it (one argument)."""
    return functools.partial(diff_data, rtol=rtol, atol=atol)


def _cell(x: Any) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, list):
        return "[" + ", ".join(map(str, x)) + "]"
    text = x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)
    return text if len(text) <= 300 else text[:297] + "..."


def diff_body(d: dict[str, Any], links: Links) -> str:
    counts = ", ".join(f"{n} {status}" for status, n in d["counts"].items() if n)
    rtol, atol = d.get("rtol") or 0.0, d.get("atol") or 0.0
    tolerance = f" (rtol={rtol:g}, atol={atol:g})" if rtol or atol else ""
    verdict = "changed" if d["changed"] else "no change" + (" beyond the tolerance" if tolerance else "")
    head = (f"<h1>What changed: {e(d['a'])} &rarr; {e(d['b'])}</h1>"
            f"<p id=\"diff-summary\">{e(verdict + tolerance)}{e(': ' + counts) if counts else ''}</p>")  # fmt: skip
    bars = [(t["path"], t["relative_change"]) for t in d["tensors"] if t["relative_change"] is not None][:MAX_BARS]
    chart = svg.bar_chart(bars, label="relative change per tensor") if bars else "<p>no tensors compared by value</p>"
    rows = "".join(
        f'<tr class="t-{e(t["status"])}"><td>{_path_link(links, t)}</td><td>{e(_status(t))}</td>'
        f"<td>{e(_cell(t['shape_a']))}</td><td>{e(_cell(t['shape_b']))}</td><td>{e(_cell(t['dtype_a']))}</td>"
        f"<td>{e(_cell(t['dtype_b']))}</td><td class=\"num\">{e(_cell(t['relative_change']))}</td>"
        f"<td class=\"num\">{e(_cell(t['max_abs_diff']))}</td></tr>"
        for t in d["tensors"]
    )  # fmt: skip
    values = "".join(
        f"<tr><td>/{e(v['path'])}</td><td>{e(v['status'])}</td><td>{e(_cell(v['a']))}</td><td>{e(_cell(v['b']))}</td></tr>"
        for v in d["values"] if v["status"] != "same"
    )  # fmt: skip
    tables = "".join(
        f"<tr><td>/{e(t['path'])}</td><td>{e(t['part'])}</td><td>{e(t['status'])}</td><td>{e(_cell(t['a']))}</td>"
        f"<td>{e(_cell(t['b']))}</td><td>{e(t['detail'])}</td></tr>"
        for t in d.get("tables", ()) if t["status"] != "same"
    )  # fmt: skip
    meta = "".join(
        f"<tr><td>{e(m['key'])}</td><td>{e(_cell(m['a']))}</td><td>{e(_cell(m['b']))}</td><td>{'' if m['same'] else 'differs'}</td></tr>"
        for m in d["metadata"]
    )  # fmt: skip
    return (
        head
        + f'<section id="diff-chart"><h2>Relative change per tensor, ||a-b|| / ||a||</h2>{chart}</section>'
        + '<section id="diff-tensors"><h2>Tensors</h2><table><tr><th>path</th><th>status</th><th>shape a</th>'
        + f"<th>shape b</th><th>dtype a</th><th>dtype b</th><th>relative change</th><th>max |a-b|</th></tr>{rows}</table></section>"
        + f'<section id="diff-values"><h2>Other values that changed</h2><table><tr><th>path</th><th>status</th><th>a</th><th>b</th></tr>{values}</table></section>'
        + '<section id="diff-tables"><h2>Tables: row index, column labels, dtypes that changed</h2><table><tr><th>path</th>'
        + f"<th>part</th><th>status</th><th>a</th><th>b</th><th>difference</th></tr>{tables}</table></section>"
        + f'<section id="diff-meta"><h2>Metadata</h2><table><tr><th>key</th><th>a</th><th>b</th><th></th></tr>{meta}</table></section>'
    )  # fmt: skip


def _status(t: dict[str, Any]) -> str:
    """A tensor's status, "changed (within tolerance)" where its change is within rtol/atol."""
    return "changed (within tolerance)" if t["status"] == "changed" and t.get("changed") is False else t["status"]


def _path_link(links: Links, t: dict[str, Any]) -> str:
    index = 1 if t["status"] == "added" else 0
    href = links.node(index, t["path"])
    return f'<a href="{e(href)}">/{e(t["path"])}</a>' if href else f"/{e(t['path'])}"


__all__ = ["diff_body", "diff_data", "with_tolerance"]
