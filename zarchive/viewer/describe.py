"""What each viewer page shows, as JSON-ready dicts, read from one `Source`: the object tree (kinds,
dtypes, shapes, sizes, members), the metadata, `audit()`, the exports, and one value (a tensor's
statistics and heat map, a table's columns and rows, a config's fields, a container's children,
anything else as short text). The tree, configs, metadata and audit come from the manifest alone; a
tensor or table is read (lazily, under the archive's read budget) when its page is asked for, and what
is computed from it is cached."""

from __future__ import annotations

import json
import math
from typing import Any

from ..cli.common import MAX_WALK_DEPTH, children, describe, human_size
from ..inspection.stats import heat_map, is_array, tensor_stats
from . import tables
from .sources import Source, check_objpath

MAX_TREE_NODES = 20_000  # the tree lists at most this many nodes (it says how many more there are)
MAX_TEXT = 4000  # a value shown as text is cut here
TENSOR_TAGS = frozenset({"torch.Tensor", "numpy.ndarray", "foreign.tensor", "foreign.ndarray", "numpy.scalar"})
TABLE_TAGS = frozenset({"pandas.DataFrame", "pandas.Series", "polars.DataFrame", "polars.Series"})
CONFIG_TAGS = frozenset({"dataclass", "namedtuple"})  # (a ConfiguredModel is a container: config, weights)


def tag_of(node: Any) -> str | None:
    if isinstance(node, dict):
        tag = node.get("$type", node.get("__muutils_format__"))
        return tag if isinstance(tag, str) else None
    return None


def kind_of(arc: Any, node: Any, kids: dict[str, Any] | None) -> str:
    """tensor, table, config, container or value: what the node's page shows."""
    tag = tag_of(node) or ""
    base = tag.split(":")[0]
    if base in TENSOR_TAGS or _is_tensor(arc, node):
        return "tensor"
    if base in TABLE_TAGS or "DataFrame" in base or base.endswith(("Table", ".Series")):
        return "table"
    if base in CONFIG_TAGS:
        return "config"
    return "container" if kids else "value"


def _is_tensor(arc: Any, node: Any) -> bool:
    try:
        return bool(arc.is_tensor(node))
    except Exception:  # noqa: BLE001  # a hostile node of any shape: just not a tensor
        return False


def _shape(node: Any) -> list[int] | None:
    shape = node.get("shape") if isinstance(node, dict) else None
    if isinstance(shape, list) and len(shape) <= 64 and all(type(s) is int for s in shape):
        return shape
    return None


def _dtype(node: Any) -> str | None:
    dtype = node.get("dtype") if isinstance(node, dict) else None
    return dtype[:40] if isinstance(dtype, str) else None


def _member(node: Any) -> str | None:
    ref = node.get("$ref") if isinstance(node, dict) else None
    return ref[:200] if isinstance(ref, str) else None


def tree(source: Source) -> dict[str, Any]:
    """{label, format, nodes: [{path, key, depth, kind, text, dtype, shape, member, children}], more}:
    the object tree, depth first, at most MAX_TREE_NODES nodes (`more` counts those left out)."""

    def walk(arc: Any) -> dict[str, Any]:
        rows: list[dict[str, Any]] = []
        stack: list[tuple[str, str, Any, int]] = [("", "/", arc.node(""), 0)]
        more = 0
        while stack:
            path, key, node, depth = stack.pop()
            if len(rows) >= MAX_TREE_NODES:
                more += 1
                continue
            kids = children(arc, node) if depth < MAX_WALK_DEPTH else None
            rows.append({"path": path, "key": key, "depth": depth, "kind": kind_of(arc, node, kids),
                         "text": describe(arc, node)[:300], "dtype": _dtype(node), "shape": _shape(node),
                         "member": _member(node), "children": len(kids) if kids else 0})  # fmt: skip
            for k, child in reversed(list((kids or {}).items())):
                stack.append((f"{path}/{_escape(k)}".lstrip("/"), k, child, depth + 1))
        return {"label": source.label, "format": getattr(arc, "format", "zarchive"), "nodes": rows, "more": more}

    return source.cached(("tree",), walk)


def _escape(key: str) -> str:
    from ..engine.objpath import escape

    return escape(key)


def meta(source: Source) -> dict[str, Any]:
    """{label, format, format_version, rows: [[key, text]], members: [...], totals}."""

    def build(arc: Any) -> dict[str, Any]:
        m = arc.meta if isinstance(arc.meta, dict) else {}
        env = m.get("environment") if isinstance(m.get("environment"), dict) else {}
        comp = m.get("compression") if isinstance(m.get("compression"), dict) else {}
        rows: list[list[str]] = [
            ["format", f"{getattr(arc, 'format', m.get('format'))} {m.get('format_version', '')}".strip()]
        ]
        for key, label in (("library_version", "written by zarchive"), ("created_utc", "created")):
            if key in m:
                rows.append([label, _short(m[key])])
        if env:
            rows.append(
                ["python", _short(f"{env.get('python')} ({env.get('implementation')}) on {env.get('platform')}")]
            )
            pk: dict[str, Any] = env["packages"] if isinstance(env.get("packages"), dict) else {}
            rows.append(["packages", _short(", ".join(f"{k} {v}" for k, v in pk.items() if v) or "-")])
        if comp:
            level = f" level {comp.get('level')}" if comp.get("level") is not None else ""
            rows.append(["compression", _short(f"{comp.get('codec', 'none')}{level}")])
        for key in sorted(k for k in m if k not in ("format", "format_version", "library_version", "created_utc",
                                                     "environment", "compression", "members")):  # fmt: skip
            rows.append([str(key)[:100], _short(m[key])])
        members: list[dict[str, Any]] = []
        entries = arc.members if isinstance(arc.members, dict) else {}
        for name, e in list(entries.items())[:5000]:
            e = e if isinstance(e, dict) else {}
            members.append({"name": str(name)[:300], "codec": _short(e.get("codec", "none"), 20),
                            "size": _int(e.get("size")), "stored_size": _int(e.get("stored_size")),
                            "crc32": e.get("crc32") if isinstance(e.get("crc32"), str) else None})  # fmt: skip
        size = sum(x["size"] or 0 for x in members)
        stored = sum(x["stored_size"] or 0 for x in members)
        rows.append(["members", f"{len(entries)}, {human_size(stored)} stored, {human_size(size)} original"])
        return {"label": source.label, "rows": rows, "members": members}

    return source.cached(("meta",), build)


def checksums(source: Source) -> dict[str, Any]:
    """{checked, intact, problems: [[member, message]]}: every member against its checksums (reads
    every member once, streamed; asked for explicitly, not on every page)."""

    def run(arc: Any) -> dict[str, Any]:
        problems = [[_short(p[0], 300), _short(p[1] if len(p) > 1 else "", 500)] for p in arc.verify()]
        return {"checked": True, "intact": not problems, "problems": problems}

    return source.cached(("verify",), run)


def audit(source: Source) -> dict[str, Any]:
    """{classes: {tag: [object paths]}, exports: {name: {member, kind, runs}}}: what reading would build."""

    def run(arc: Any) -> dict[str, Any]:
        found = arc.audit("")
        classes = {str(k)[:300]: [str(p)[:300] for p in v[:200]] for k, v in found.items()}
        ex = getattr(found, "exports", {}) or {}
        return {
            "classes": classes,
            "exports": {str(k): {kk: _short(vv) for kk, vv in v.items()} for k, v in ex.items()},
        }

    return source.cached(("audit",), run)


def exports(source: Source) -> dict[str, Any]:
    """{name: {member, size, exporter, opset, inputs, outputs, dynamic_axes, ...}} (JSON as stored)."""

    def run(arc: Any) -> dict[str, Any]:
        found = getattr(arc, "exports", {}) or {}
        return {str(k)[:100]: _jsonable(v) for k, v in found.items()}

    return source.cached(("exports",), run)


def value(source: Source, objpath: str, page: int = 0) -> dict[str, Any]:
    """One value's page: {path, kind, text, ...} plus, by kind: `stats` and `heat` (tensor), `table`,
    `rows` and `series` (table), `fields` (config), `children` (container), `repr` (value)."""
    path = check_objpath(objpath)
    node = source.node(path)
    info = source.use(lambda arc: _node_info(arc, node, path))
    kind = info["kind"]
    if kind == "container":
        return info
    if kind == "config":
        info["fields"] = config_fields(node)
        return info
    loaded = source.cached(("value", path), lambda arc: _load(arc, path))
    if loaded["kind"] == "tensor":
        info.update(kind="tensor", stats=loaded["stats"], heat=loaded["heat"])
    elif loaded["kind"] == "table":
        info.update(kind="table", table=loaded["table"], series=loaded["series"])
        # a page of rows reads the table again (tables are not kept: only what is shown is cached)
        info["rows"] = source.cached(("rows", path, str(page)), lambda arc: tables.rows(arc.get(path), page))
    else:
        info.update(kind="value", repr=loaded["repr"])
    return info


def _node_info(arc: Any, node: Any, path: str) -> dict[str, Any]:
    kids = children(arc, node)
    info: dict[str, Any] = {"label": "", "path": path, "kind": kind_of(arc, node, kids), "text": describe(arc, node)[:300],
                            "dtype": _dtype(node), "shape": _shape(node), "member": _member(node)}  # fmt: skip
    if kids:
        info["children"] = [{"key": str(k)[:300], "path": f"{path}/{_escape(k)}".lstrip("/"),
                             "text": describe(arc, c)[:300]} for k, c in list(kids.items())[:2000]]  # fmt: skip
        info["more_children"] = max(0, len(kids) - 2000)
    view = node.get("view") if isinstance(node, dict) else None
    if isinstance(view, dict):
        info["view"] = _jsonable(view)
    info["shared_with"] = _sharing(arc, node, path) if info["kind"] == "tensor" else []
    return info


def _sharing(arc: Any, node: Any, path: str) -> list[str]:
    """Other object paths whose tensors use the same stored bytes (the same member and key)."""
    if not isinstance(node, dict) or not isinstance(node.get("$ref"), str):
        return []
    mine = (node.get("$ref"), str(node.get("key")))
    found = []
    stack: list[tuple[str, Any, int]] = [("", arc.node(""), 0)]
    seen = 0
    while stack and seen < MAX_TREE_NODES:
        p, n, depth = stack.pop()
        seen += 1
        if p != path and isinstance(n, dict) and (n.get("$ref"), str(n.get("key"))) == mine and _is_tensor(arc, n):
            found.append(p)
        kids = children(arc, n) if depth < MAX_WALK_DEPTH else None
        for k, c in (kids or {}).items():
            stack.append((f"{p}/{_escape(k)}".lstrip("/"), c, depth + 1))
    return sorted(found)[:50]


def _load(arc: Any, path: str) -> dict[str, Any]:
    v = arc.get(path)
    if is_array(v):
        heat = heat_map(v)
        return {"kind": "tensor", "stats": tensor_stats(v).as_json(), "heat": heat.__dict__ if heat else None}
    if tables.is_table(v):
        return {"kind": "table", "table": tables.summary(v), "series": tables.numeric_series(v)}
    from ..cli.cat import render

    try:
        text = "\n".join(render(v, 20))
    except ValueError:
        text = f"<{type(v).__name__}>"
    return {"kind": "value", "repr": text[:MAX_TEXT]}


def config_fields(node: Any, depth: int = 0) -> list[dict[str, Any]]:
    """A config's fields from its manifest node, for a read-only form: [{name, value | fields | text}]."""
    fields = node.get("fields") if isinstance(node, dict) else None
    if not isinstance(fields, dict) and isinstance(node, dict) and isinstance(node.get("config"), dict):
        return config_fields(node["config"], depth)
    if not isinstance(fields, dict):
        return []
    out: list[dict[str, Any]] = []
    for name, v in list(fields.items())[:500]:
        entry: dict[str, Any] = {"name": str(name)[:200]}
        if isinstance(v, (str, int, float, bool)) or v is None:
            entry["value"] = v if not isinstance(v, (str, int)) or len(str(v)) < 1000 else _short(v)
        elif isinstance(v, dict) and tag_of(v) in CONFIG_TAGS and depth < 8:
            entry["fields"] = config_fields(v, depth + 1)
            entry["type"] = str(v.get("class", tag_of(v)))[:200]
        else:
            entry["text"] = _short(v)
        out.append(entry)
    return out


def configs(source: Source) -> list[dict[str, Any]]:
    """Every config node of the tree (dataclasses, named tuples, model configs): [{path, type, fields}]."""

    def find(arc: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for row in tree(source)["nodes"]:
            if row["kind"] == "config" and len(out) < 50:
                node = arc.node(row["path"])
                out.append({"path": row["path"], "type": str(node.get("class", tag_of(node)))[:200],
                            "fields": config_fields(node)})  # fmt: skip
        return out

    return source.cached(("configs",), find)


def _int(x: Any) -> int | None:
    return x if type(x) is int else None


def _short(x: Any, limit: int = 500) -> str:
    text = x if isinstance(x, str) else json.dumps(_jsonable(x), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _jsonable(x: Any, depth: int = 0) -> Any:
    """A JSON-safe copy (no NaN, bounded depth and size) of manifest data."""
    if depth > 20:
        return "..."
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    if isinstance(x, int) and not isinstance(x, bool) and x.bit_length() > 64:
        return f"<int of {x.bit_length()} bits>"
    if isinstance(x, dict):
        return {str(k)[:200]: _jsonable(v, depth + 1) for k, v in list(x.items())[:200]}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in list(x)[:200]]
    if isinstance(x, str):
        return x[:2000]
    return x if x is None or isinstance(x, (bool, int)) else str(x)[:200]


__all__ = ["audit", "checksums", "config_fields", "configs", "exports", "meta", "tree", "value"]
