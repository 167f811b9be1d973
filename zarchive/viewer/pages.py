"""The viewer's HTML: one function per page, from the dicts of `describe`, with every text escaped.
Links come from a `Links` object, so the same pages serve the live viewer (URLs under its token) and
the static page (anchors within one file). Styles and the tree's search box are inline; nothing is
fetched from anywhere."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any, Protocol

from ..cli.common import human_size
from . import svg

CSS = """
body{font-family:sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#23395d;color:#fff;padding:8px 16px}
header a{color:#fff;margin-right:16px}
main{padding:12px 20px}
section{background:#fff;border:1px solid #ddd;border-radius:4px;margin:12px 0;padding:8px 14px}
table{border-collapse:collapse;font-size:13px}
td,th{border-bottom:1px solid #eee;padding:2px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0}
.num{text-align:right;font-variant-numeric:tabular-nums}
.kind{color:#666;font-size:12px}
.error{color:#a00;font-weight:bold}
input[readonly]{background:#f4f4f4;border:1px solid #ccc}
code{background:#f0f0f0;padding:0 3px}
.row{display:flex;gap:14px;flex-wrap:wrap;align-items:flex-start}
.row>section,.row>.column>section{margin-top:0}
.tree td:first-child{white-space:nowrap}
"""

SEARCH_JS = """
function zfilter(box){var q=box.value.toLowerCase();var rows=document.querySelectorAll('tr.node');
for(var i=0;i<rows.length;i++){var r=rows[i];r.style.display=(!q||r.getAttribute('data-path').toLowerCase().indexOf(q)>=0||r.getAttribute('data-text').toLowerCase().indexOf(q)>=0)?'':'none';}}
"""


class Links(Protocol):
    def home(self) -> str: ...
    def archive(self, index: int) -> str: ...
    def node(self, index: int, path: str, page: int = 0) -> str | None: ...
    def verify(self, index: int) -> str | None: ...
    def diff(self) -> str | None: ...


def e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def layout(title: str, body: str, links: Links, labels: Sequence[str] = ()) -> str:
    nav = [f'<a href="{e(links.home())}">zarchive view</a>']
    nav += [f'<a href="{e(links.archive(i))}">{e(label)}</a>' for i, label in enumerate(labels)]
    diff = links.diff()
    if diff and len(labels) == 2:
        nav.append(f'<a id="diff-link" href="{e(diff)}">diff</a>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(title)}</title><style>{CSS}</style><script>{SEARCH_JS}</script></head>"
        f"<body><header>{''.join(nav)}</header><main>{body}</main></body></html>"
    )


def error_body(status: int, message: str) -> str:
    return f'<section><h1>Error {status}</h1><p class="error" id="error">{e(message)}</p></section>'


def _shape(shape: Any) -> str:
    return "" if shape is None else "[" + ", ".join(str(s) for s in shape) + "]"


def tree_section(index: int, tree: dict[str, Any], links: Links) -> str:
    rows = []
    for n in tree["nodes"]:
        href = links.node(index, n["path"])
        name = e(n["key"] if n["path"] else "/")
        cell = f'<a href="{e(href)}">{name}</a>' if href else name
        pad = 14 * n["depth"]
        rows.append(
            f'<tr class="node" data-path="/{e(n["path"])}" data-text="{e(n["text"])}"><td style="padding-left:{pad}px">'
            f'{cell}</td><td class="kind">{e(n["kind"])}</td><td>{e(n["dtype"] or "")}</td><td>{e(_shape(n["shape"]))}</td>'
            f'<td>{e(n["text"])}</td><td>{e(n["member"] or "")}</td></tr>'
        )  # fmt: skip
    more = f"<p>... and {tree['more']:,} more nodes not listed</p>" if tree["more"] else ""
    return (
        '<section id="tree"><h2>Object tree</h2>'
        '<p><input id="search" type="search" placeholder="search paths and types" oninput="zfilter(this)"></p>'
        '<table class="tree"><tr><th>path</th><th>kind</th><th>dtype</th><th>shape</th><th>what</th><th>member</th></tr>'
        + "".join(rows) + "</table>" + more + "</section>"
    )  # fmt: skip


def fields_form(fields: list[dict[str, Any]]) -> str:
    out = ['<table class="form">']
    for f in fields:
        name = e(f["name"])
        if "fields" in f:
            out.append(f"<tr><td>{name}</td><td><fieldset><legend>{e(f.get('type', ''))}</legend>"
                       f"{fields_form(f['fields'])}</fieldset></td></tr>")  # fmt: skip
        else:
            v = f["value"] if "value" in f else f.get("text", "")
            shown = json.dumps(v) if not isinstance(v, str) or "value" not in f else v
            out.append(f'<tr><td><label>{name}</label></td><td><input readonly name="{name}" value="{e(shown)}" '
                       f'size="{min(60, max(8, len(shown) + 2))}"></td></tr>')  # fmt: skip
    out.append("</table>")
    return "".join(out)


def configs_section(configs: list[dict[str, Any]], index: int, links: Links) -> str:
    if not configs:
        return ""
    parts = ['<section id="configs"><h2>Configs</h2>']
    for c in configs:
        href = links.node(index, c["path"])
        title = f'<a href="{e(href)}">/{e(c["path"])}</a>' if href else f"/{e(c['path'])}"
        parts.append(f'<h3>{title} <span class="kind">{e(c["type"])}</span></h3>{fields_form(c["fields"])}')
    return "".join(parts) + "</section>"


def meta_section(meta: dict[str, Any], checks: dict[str, Any] | None, verify_link: str | None) -> str:
    rows = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in meta["rows"])
    if checks is None:
        status = f'<a id="verify" href="{e(verify_link)}">check every checksum</a>' if verify_link else "not checked"
    elif checks["intact"]:
        status = '<span id="checksums">intact: every member matches its checksums</span>'
    else:
        status = (
            '<span id="checksums" class="error">damaged: '
            + e("; ".join(f"{m}: {p}" for m, p in checks["problems"]))
            + "</span>"
        )
    rows += f"<tr><th>checksums</th><td>{status}</td></tr>"
    members = "".join(
        f"<tr><td>{e(m['name'])}</td><td>{e(m['codec'])}</td><td class=\"num\">{e(human_size(m['stored_size']))}</td>"
        f"<td class=\"num\">{e(human_size(m['size']))}</td><td>{e(m['crc32'] or '')}</td></tr>"
        for m in meta["members"]
    )  # fmt: skip
    return (
        f'<section id="metadata"><h2>Metadata</h2><table>{rows}</table>'
        f"<details><summary>members ({len(meta['members'])})</summary><table><tr><th>member</th><th>codec</th>"
        f"<th>stored</th><th>original</th><th>crc32</th></tr>{members}</table></details></section>"
    )


def audit_section(audit: dict[str, Any]) -> str:
    classes = audit["classes"]
    if classes:
        rows = "".join(f"<tr><td><code>{e(tag)}</code></td><td>{e(', '.join('/' + p for p in paths[:20]))}</td></tr>"
                       for tag, paths in classes.items())  # fmt: skip
        body = f"<table><tr><th>class</th><th>at</th></tr>{rows}</table>"
    else:
        body = "<p>no classes: reading builds only built-in types</p>"
    ex = "".join(f"<li>export {e(n)} ({e(v.get('member', ''))}): opening it runs {e(v.get('runs', ''))}</li>"
                 for n, v in audit["exports"].items())  # fmt: skip
    return (f'<section id="audit"><h2>Audit: the classes reading would build</h2>{body}'
            f"{f'<ul>{ex}</ul>' if ex else ''}</section>")  # fmt: skip


def exports_section(exports: dict[str, Any]) -> str:
    if not exports:
        return ""
    rows = []
    for name, x in exports.items():

        def get(key: str, x: dict[str, Any] = x) -> str:
            v = x.get(key)
            return (
                ""
                if v is None
                else (
                    ", ".join(map(str, v)) if isinstance(v, list) else json.dumps(v) if isinstance(v, dict) else str(v)
                )
            )

        rows.append(f"<tr><td>{e(name)}</td><td>{e(get('member'))}</td><td>{e(get('exporter'))}</td><td>{e(get('opset'))}</td>"
                    f"<td>{e(get('inputs'))}</td><td>{e(get('outputs'))}</td><td>{e(get('dynamic_axes'))}</td>"
                    f"<td class=\"num\">{e(human_size(x.get('size') if type(x.get('size')) is int else None))}</td></tr>")  # fmt: skip
    return ('<section id="exports"><h2>Exports</h2><table><tr><th>name</th><th>member</th><th>exporter</th><th>opset</th>'
            "<th>inputs</th><th>outputs</th><th>dynamic axes</th><th>size</th></tr>" + "".join(rows) + "</table></section>")  # fmt: skip


def archive_body(index: int, data: dict[str, Any], links: Links) -> str:
    """The archive's overview: metadata, configs, audit, exports, and the searchable tree."""
    return (
        f'<h1>{e(data["tree"]["label"])} <span class="kind">{e(data["tree"]["format"])}</span></h1>'
        + meta_section(data["meta"], data.get("checks"), links.verify(index))
        + configs_section(data["configs"], index, links)
        + audit_section(data["audit"])
        + exports_section(data["exports"])
        + tree_section(index, data["tree"], links)
    )


def _stat_rows(s: dict[str, Any]) -> str:
    keys = [("dtype", s["dtype"]), ("shape", _shape(s["shape"])), ("strides", _shape(s["strides"])),
            ("storage offset", s["storage_offset"]), ("elements", f"{s['numel']:,}"), ("contiguous", s["contiguous"])]  # fmt: skip
    if s["computed"]:
        keys += [("min", s["min"]), ("max", s["max"]), ("mean", s["mean"]), ("std", s["std"]), ("NaN", s["nan"]),
                 ("+Inf", s["posinf"]), ("-Inf", s["neginf"]), ("zeros", s["zeros"])]  # fmt: skip
        if s["true"] is not None:
            keys.append(("true", s["true"]))
    if s["note"]:
        keys.append(("note", s["note"]))
    return "".join(f'<tr><th>{e(k)}</th><td class="num" id="stat-{e(k.replace(" ", "-"))}">{e("" if v is None else v)}</td></tr>'
                   for k, v in keys)  # fmt: skip


def value_body(index: int, label: str, v: dict[str, Any], links: Links) -> str:
    """One value's page, by kind."""
    head = (f"<h1>/{e(v['path'])} <span class=\"kind\">{e(v['kind'])}</span></h1>"
            f"<p>{e(v['text'])} <span class=\"kind\">in {e(label)}</span></p>")  # fmt: skip
    kind = v["kind"]
    if kind == "tensor":
        s = v["stats"]
        shared = ""
        if v.get("shared_with"):
            items = "".join(
                f'<li><a href="{e(links.node(index, p) or "#")}">/{e(p)}</a></li>' for p in v["shared_with"]
            )
            shared = f'<p>shares its stored bytes with:</p><ul id="shared">{items}</ul>'
        hist = s.get("histogram")
        plot = svg.histogram(hist["edges"], hist["counts"], label=f"histogram of /{v['path']}") if hist else ""
        heat = v.get("heat")
        heat_html = ""
        if heat:
            where = "".join(f"[{i}]" for i in heat["index"])
            rs, cs = heat["row_step"], heat["col_step"]
            sampled = "every value" if rs == cs == 1 else f"every {rs}. row and every {cs}. column"
            heat_html = (f"<h2>Heat map</h2><p>{e('slice ' + where if where else 'the tensor')}: "
                         f"{heat['rows']} x {heat['cols']}, {sampled}</p>"
                         + svg.heat_map(heat["values"], label=f"heat map of /{v['path']}"))  # fmt: skip
        return (head + f'<div class="row"><section id="stats"><h2>Statistics</h2><table>{_stat_rows(s)}</table>{shared}</section>'
                f'<div class="column"><section id="histogram"><h2>Histogram</h2>{plot or "<p>no histogram</p>"}</section>'
                f'<section id="heat">{heat_html or "<p>no heat map: fewer than 2 dimensions</p>"}</section></div></div>')  # fmt: skip
    if kind == "table":
        return head + table_sections(index, v, links)
    if kind == "config":
        return head + f'<section id="config"><h2>Fields</h2>{fields_form(v["fields"])}</section>'
    if kind == "container":
        rows = "".join(f'<tr><td><a href="{e(links.node(index, c["path"]) or "#")}">{e(c["key"])}</a></td><td>{e(c["text"])}</td></tr>'
                       for c in v.get("children", []))  # fmt: skip
        more = f"<p>... {v['more_children']:,} more</p>" if v.get("more_children") else ""
        return head + f'<section id="children"><table>{rows}</table>{more}</section>'
    return head + f'<section id="value"><pre>{e(v.get("repr", ""))}</pre></section>'


def table_sections(index: int, v: dict[str, Any], links: Links) -> str:
    t, r = v["table"], v["rows"]
    cols = "".join(f"<tr><td>{e(c['name'])}</td><td>{e(c['dtype'])}</td><td class=\"num\">{c['nulls']:,}</td></tr>"
                   for c in t["columns"])  # fmt: skip
    plot = svg.line_plot(v["series"], label=f"numeric columns of /{v['path']}") if v.get("series") else ""
    header = "".join(f"<th>{e(c['name'])}</th>" for c in t["columns"])
    body = "".join(f"<tr><td>{e(i)}</td>" + "".join(f"<td>{e(x)}</td>" for x in row) + "</tr>"
                   for i, row in zip(r["index"], r["rows"]))  # fmt: skip
    nav = []
    for label, page in (("previous", r["page"] - 1), ("next", r["page"] + 1)):
        href = links.node(index, v["path"], page) if 0 <= page < r["pages"] else None
        if href:
            nav.append(f'<a id="{label}-page" href="{e(href)}">{label}</a>')
    pager = f"<p>rows {r['start']:,} to {r['start'] + len(r['rows']):,} of {r['total']:,} (page {r['page'] + 1} of {r['pages']}) {' '.join(nav)}</p>"
    return (f'<div class="row"><section id="columns"><h2>Columns</h2><p>{e(t["library"])} {e(t["type"])}: {t["rows"]:,} rows</p>'
            f"<table><tr><th>column</th><th>dtype</th><th>nulls</th></tr>{cols}</table></section>"
            f'<section id="plot"><h2>Numeric columns</h2>{plot or "<p>no numeric columns</p>"}</section></div>'
            f'<section id="rows"><h2>Rows</h2>{pager}<table class="rows"><tr><th></th>{header}</tr>{body}</table></section>')  # fmt: skip


def index_body(labels: Sequence[str], errors: Sequence[str | None], links: Links) -> str:
    items = []
    for i, label in enumerate(labels):
        err = f' <span class="error">{e(errors[i])}</span>' if errors[i] else ""
        items.append(f'<li><a href="{e(links.archive(i))}">{e(label)}</a>{err}</li>')
    diff = links.diff()
    extra = f'<p><a href="{e(diff)}">what changed between them</a></p>' if diff and len(labels) == 2 else ""
    return f"<h1>Archives</h1><ul>{''.join(items)}</ul>{extra}"


__all__ = ["Links", "archive_body", "error_body", "index_body", "layout", "value_body"]
