"""`zarchive ls`, `show` and `meta`: what an archive holds, read from its manifest and metadata only."""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections import defaultdict
from typing import Any

from ..engine.objpath import join_path, split_path
from ..errors import MemberNotFoundError
from .common import (
    EXIT_OK,
    CliError,
    RefWalker,
    children,
    describe,
    human_size,
    is_zanj,
    open_archive,
    show_path,
    size_text,
    tree_glyphs,
)

MAX_TREE_DEPTH = 200  # deeper levels are elided: the tree is drawn recursively
_SPECIAL = {"manifest.json": "(object tree)", "metadata.json": "(metadata)",
            "__zanj__.json": "(object tree)", "__zanj_meta__.json": "(metadata)",
            "index.zarc": "(index of a sharded checkpoint)"}  # fmt: skip


def _root(arc: Any) -> Any:
    return arc.node("")


def _node(arc: Any, objpath: str) -> Any:
    try:
        return arc.node(objpath)
    except MemberNotFoundError as e:
        raise CliError(f"no object at path {show_path(objpath.strip('/'))}: {e}") from None


def _member_table(arc: Any) -> dict[str, dict[str, Any]]:
    """Every member of the zip with codec and sizes (metadata.json too, which lists the others)."""
    table = dict(arc.members)
    if (
        getattr(arc, "format", "zarchive") == "zarchive"
    ):  # (ZANJ, foreign files, a sharded checkpoint: no metadata.json)
        size = arc.member_size("metadata.json")
        table["metadata.json"] = {"codec": "none", "size": size, "stored_size": size}
    return table


def _holdings(arc: Any) -> dict[str, dict[str, Any]]:
    """member -> {"paths": [object paths], "tensors": number of distinct tensors stored in it}.

    A member found at a node and again below it (a tensor table and its rows) is listed at the
    deepest: a path is dropped when another find of the same member lies in its subtree, which in
    the walk's depth-first numbering is the next find after it (sorted), if any is."""
    walker = RefWalker(arc)
    finds: dict[str, dict[str, int]] = {}  # member -> object path -> its node's number, in finding order
    keys: dict[str, set[Any]] = defaultdict(set)
    for ref, path, node, pre in walker.walk(_root(arc)):
        finds.setdefault(ref, {}).setdefault(path, pre)
        if ref.endswith((".safetensors", ".safetensors.zst")) and node.get("$type") == "torch.Tensor":
            key = node.get("key")  # (a tensor table is found too, as a node with a $ref: not a tensor)
            keys[ref].add(key if isinstance(key, str) else repr(key)[:200])  # any JSON in a hostile file
    out: dict[str, dict[str, Any]] = {}
    for ref, by_path in finds.items():
        ordered = sorted(by_path.items(), key=lambda item: item[1])
        above = {p for (p, pre), (_, nxt) in itertools.pairwise(ordered) if pre < nxt <= walker.post[pre]}
        paths = [p for p in by_path if p not in above]
        out[ref] = {"paths": paths, "tensors": len(keys[ref]) if ref in keys else None}
    return out


_EXPORTS = {
    "onnx": "ONNX export: the graph with its own copy of the weights",
    "torchscript": "TorchScript export: code with its own copy of the weights (loaded only with trusted=True)",
}


def _exported(arc: Any) -> dict[str, str]:
    """member -> export name ("onnx", "torchscript"), for a zarchive with exports (format 1.3)."""
    return {e["member"]: name for name, e in getattr(arc, "exports", {}).items()}


def _holds_text(name: str, held: dict[str, Any] | None, long: bool, export: str | None = None) -> list[str]:
    if name in _SPECIAL:
        return [_SPECIAL[name]]
    if export is not None:
        return [_EXPORTS.get(export, f"{export} export")]
    if not held:
        return ["(not referenced by the object tree)"]
    paths = [show_path(p) for p in held["paths"]]
    n = held["tensors"]
    head = f"{n} tensor{'s' if n != 1 else ''}: " if n is not None else ""
    if long or len(paths) <= 2:
        return [head + paths[0], *paths[1:]] if long else [head + ", ".join(paths)]
    return [f"{head}{', '.join(paths[:2])}, ... (+{len(paths) - 2} more)"]


def cmd_ls(args: Any) -> int:
    with open_archive(args.path) as arc:
        table = _member_table(arc)
        held = _holdings(arc)
        exported = _exported(arc)
    if args.json:
        rows = [
            {"member": n, "codec": e.get("codec"), "stored_size": e.get("stored_size"), "size": e.get("size"),
             "object_paths": (held.get(n) or {}).get("paths", []), "tensors": (held.get(n) or {}).get("tensors"),
             "export": exported.get(n)}
            for n, e in table.items()
        ]  # fmt: skip
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return EXIT_OK
    width = min(max([len(n) for n in table] + [6]), 60)
    print(f"{'MEMBER':<{width}}  {'CODEC':<7} {'STORED':>10} {'ORIGINAL':>10}  HOLDS")
    for name, e in table.items():
        lines = _holds_text(name, held.get(name), args.long, exported.get(name))
        stored, size = size_text(e.get("stored_size"), args.bytes), size_text(e.get("size"), args.bytes)
        print(f"{name:<{width}}  {e.get('codec', '?'):<7} {stored:>10} {size:>10}  {lines[0]}")
        for extra in lines[1:]:
            print(f"{'':<{width}}  {'':<7} {'':>10} {'':>10}    {extra}")
    total_stored = sum(e.get("stored_size") or 0 for e in table.values())
    total_size = sum(e.get("size") or 0 for e in table.values())
    print(f"{len(table)} members, {human_size(total_stored)} stored, {human_size(total_size)} original")
    return EXIT_OK


def cmd_show(args: Any) -> int:
    objpath = args.objpath or ""
    with open_archive(args.path) as arc:
        node = _node(arc, objpath)
        if args.json:
            print(json.dumps(node if objpath.strip("/") else (arc.manifest), indent=2, ensure_ascii=False))
            return EXIT_OK
        label = show_path(join_path(split_path(objpath)))
        depth = MAX_TREE_DEPTH if args.depth is None else min(args.depth, MAX_TREE_DEPTH)
        lines = _tree(arc, node, label, depth, args.max_items)
        if not objpath.strip("/"):
            lines += _export_lines(getattr(arc, "exports", {}))
        for line in lines:
            print(line)
    return EXIT_OK


def _export_lines(exports: dict[str, dict[str, Any]]) -> list[str]:
    """Under the tree of the whole archive: the model's exports, which stand beside the object tree."""
    if not exports:
        return []
    out = ["exports (beside the object tree; `zarchive extract` unpacks them, arc.export_bytes(name) reads one):"]
    for name, e in exports.items():
        opset = f", opset {e['opset']}" if isinstance(e.get("opset"), int) else ""
        out.append(f"  {name}  {e.get('member')} ({human_size(e.get('size'))}{opset}): {_EXPORTS.get(name, 'export')}")
    return out


def _tree(arc: Any, root: Any, label: str, max_depth: int, max_items: int) -> list[str]:
    branch, last, pipe, blank = tree_glyphs()
    out = [f"{label}  {describe(arc, root)}"]

    def walk(node: Any, prefix: str, depth: int) -> None:
        kids = children(arc, node)
        if not kids:
            return
        if depth >= max_depth:
            n = len(kids)
            out.append(f"{prefix}{last}... {n} {'child' if n == 1 else 'children'} (raise --depth to see them)")
            return
        items = list(kids.items())
        shown = items[:max_items]
        for i, (key, child) in enumerate(shown):
            end = i == len(shown) - 1 and len(items) <= max_items
            out.append(f"{prefix}{last if end else branch}{key}  {describe(arc, child)}")
            walk(child, prefix + (blank if end else pipe), depth + 1)
        if len(items) > max_items:
            out.append(f"{prefix}{last}... {len(items) - max_items} more (raise --max-items to see them)")

    walk(root, "", 0)
    return out


def cmd_meta(args: Any) -> int:
    with open_archive(args.path) as arc:
        meta, table = arc.meta, _member_table(arc)
        zanj, fmt = is_zanj(arc), getattr(arc, "format", "zarchive")
    if args.json:
        print(json.dumps(meta, indent=2, ensure_ascii=False))
        return EXIT_OK
    if zanj or fmt == "zarchive":
        rows = _zanj_meta_rows(meta) if zanj else _meta_rows(meta)
    else:  # a torch.save, safetensors or numpy file: what it says about itself
        rows = [(str(k), str(v)[:200]) for k, v in meta.items()]
    entries = [_object(e) for e in table.values()]
    stored = sum(_count(e.get("stored_size")) for e in entries)
    size = sum(_count(e.get("size")) for e in entries)
    packed = sum(1 for e in entries if e.get("codec") not in (None, "none"))
    rows.append(("members", f"{len(table)} ({packed} compressed)"))
    ratio = f", {stored / size:.0%} of original" if size else ""
    rows.append(("size", f"{human_size(stored)} stored, {human_size(size)} original{ratio}"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key + ':':<{width + 1}}  {value}")
    return EXIT_OK


def _count(value: Any) -> int:
    return value if type(value) is int else 0


def _object(value: Any) -> dict[str, Any]:
    """A metadata field that should be an object (a hostile file may put any JSON there)."""
    return value if isinstance(value, dict) else {}


def _meta_rows(meta: dict[str, Any]) -> list[tuple[str, str]]:
    env = _object(meta.get("environment"))
    comp = _object(meta.get("compression"))
    settings = _object(meta.get("settings"))
    rows = [
        ("format", f"{meta.get('format')} {meta.get('format_version')}"),
        ("written by", f"zarchive {meta.get('library_version')}"),
        ("created", str(meta.get("created_utc"))),
    ]
    if env:
        rows.append(("python", f"{env.get('python')} ({env.get('implementation')}) on {env.get('platform')}"))
        packages = _object(env.get("packages"))
        rows.append(("packages", ", ".join(f"{k} {v}" for k, v in packages.items() if v) or "-"))
    if comp.get("codec") == "zstd":
        rows.append(("compression", f"zstd level {comp.get('level')}"))
    else:
        rows.append(("compression", str(comp.get("codec", "none"))))
    thresholds = {k: v for k, v in settings.items() if k != "custom"}
    if thresholds:
        rows.append(("settings", ", ".join(f"{k}={v}" for k, v in thresholds.items())))
    if settings.get("custom") is not None:
        rows.append(("custom", json.dumps(settings["custom"], ensure_ascii=False)[:500]))
    for key in sorted(set(meta) - {"format", "format_version", "library_version", "created_utc", "environment",
                                   "compression", "settings", "members"}):  # fmt: skip
        rows.append((key, json.dumps(meta[key], ensure_ascii=False)[:500]))
    return rows


def _zanj_meta_rows(meta: dict[str, Any]) -> list[tuple[str, str]]:
    cfg = meta.get("zanj_cfg") or {}
    sysinfo = meta.get("sysinfo") or {}
    stamp = meta.get("timestamp")
    created = (
        dt.datetime.fromtimestamp(stamp, dt.UTC).isoformat(timespec="seconds")
        if isinstance(stamp, (int, float)) and 0 <= stamp < 1e11
        else str(stamp)
    )
    rows = [("format", "ZANJ (read with zarchive's ZANJ reader)"), ("created", created)]
    python = sysinfo.get("python") if isinstance(sysinfo, dict) else None
    if isinstance(python, dict) and python.get("version"):
        rows.append(("python", str(python.get("version")).split()[0]))
    torch_info = sysinfo.get("pytorch") if isinstance(sysinfo, dict) else None
    if isinstance(torch_info, dict) and torch_info.get("torch.__version__"):
        rows.append(("torch", str(torch_info["torch.__version__"])))
    if cfg:
        keys = ("error_mode", "array_mode", "external_array_threshold", "external_list_threshold", "compress")
        rows.append(("settings", ", ".join(f"{k}={cfg.get(k)}" for k in keys if k in cfg)))
    externals = meta.get("externals_info")
    if isinstance(externals, dict):
        rows.append(("externals", f"{len(externals)} (.npy arrays and .jsonl lists/tables)"))
    return rows


def cmd_audit(args: Any) -> int:
    """Every class the archive would construct or call when read, with its object paths."""
    with open_archive(args.path) as arc:
        found = arc.audit(join_path(split_path(args.objpath)))
    exports = getattr(found, "exports", {})
    if args.json:
        print(json.dumps(found.as_json() if hasattr(found, "as_json") else found, indent=2))
        return EXIT_OK
    if not found:
        print("no classes: reading builds only built-in types")
    for tag, paths in found.items():
        shown = ", ".join(show_path(p) for p in paths[:8]) + (f" and {len(paths) - 8} more" if len(paths) > 8 else "")
        print(f"{tag}\n    at {shown}")
    for name, entry in exports.items():  # beside the object tree: a read never opens them
        print(f"export {name} ({entry['member']}): opening it runs {entry['runs']}")
    return EXIT_OK
