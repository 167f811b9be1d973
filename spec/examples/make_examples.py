#!/usr/bin/env python
"""Writes the example archives of spec/examples: small, deterministic, each with its expected digest.

    python spec/examples/make_examples.py           # write the examples that do not exist yet
    python spec/examples/make_examples.py --check   # rebuild every example in a temporary folder and
                                                    # compare it (its value, then its layout) with the committed one
    python spec/examples/make_examples.py --out DIR # write every example into DIR (never into spec/)

The committed archives are frozen once released (README.md): this script never overwrites one. To
show something new, add a new example under a new name. `--check` rebuilds every example and fails
where today's writer and reader give back another value than the committed example's; it also lists
where today's content differs from the committed archive (manifests and member bytes, apart from what
moves without changing what an archive holds: the format version, settings added since, zstd's
framing, exported models; see _comparable). Such a difference is not a bug in itself: what must never
change is how the committed files *read*, which tests/test_spec.py checks.

For every `<name>.zarc` the script writes `<name>.expected.json`: the SHA-256 of the archive file, its
members, and `describe()` (tests/golden_digest.py) of the value read back from it. Before writing
that, it checks the value read back describes exactly as the value saved.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests"))

import example_builders as builders
import zstandard
from golden_digest import describe

import zarchive

VARIANTS: dict[str, dict[str, Any]] = {"": {"compress": True}, ".uncompressed": {"compress": False}}


@dataclass(frozen=True)
class Example:
    name: str
    about: str
    build: Callable[[], Any]
    settings: dict[str, Any] = field(default_factory=dict)
    variants: tuple[str, ...] = ("", ".uncompressed")
    write: Callable[[Any, Path, dict[str, Any]], None] | None = None  # default: zarchive.save
    roundtrip_exact: bool = True  # whether the value read back must describe as the value saved


EXAMPLES: tuple[Example, ...] = (
    Example("json_values", "plain JSON only: strings, numbers, booleans, null, nested lists and dicts",
            builders.json_values, variants=("",)),
    Example("python_types", "every typed node of section 5.1: big ints, non-finite floats, .jsonl lists, tuples, "
            "sets, dict nodes, bytes (.bin), complex, dates and times, paths, enums, Decimal, UUID",
            builders.python_types, settings={"external_list_threshold": 4}),
    Example("numpy_arrays", "numpy arrays inline (data, base64, object items, Fortran order) and as .npy members, "
            "a shared array, numpy scalars and dtypes", builders.numpy_arrays),
    Example("torch_tensors", "tensors of every safetensors dtype code and raw-byte dtypes (complex128, float8), "
            "shared views, Parameters, requires_grad, empty and 0-d tensors, torch.device/dtype/Size",
            builders.torch_tensors),
    Example("tensor_root", "a tensor as the root value (member tensors.safetensors, key 'tensor')",
            builders.tensor_root),
    Example("pandas_frame", "a DataFrame with numeric, string, object, categorical, nullable, datetime, "
            "zone-aware, timedelta and period columns and a MultiIndex; a Series, Index kinds, pandas scalars",
            builders.pandas_values, settings={"external_array_threshold": 4, "external_list_threshold": 4}),
    Example("dataclasses", "a muutils SerializableDataclass, plain and frozen dataclasses, named tuples",
            builders.dataclasses_values),
    Example("configured_model", "a ConfiguredModel (built on the meta device when read)", builders.tiny_net),
    Example("configured_model_extras", "a ConfiguredModel with tied weights, a non-persistent buffer, a tensor "
            "attribute and a submodule in eval mode (built for real when read)", builders.tied_net),
    Example("pandas_more", "pandas layouts beyond pandas_frame: duplicate and empty column labels, flags, object "
            "text with NaN or None, pandas arrays saved on their own, dateutil zones, Series attrs, empty columns",
            builders.pandas_more, settings={"external_list_threshold": 1}),
    Example("configured_model_nested", "a ConfiguredModel inside a dict (weights in model.safetensors)",
            builders.configured_model_nested),
    Example("registered_class", "a dataclass registered under a name of its own (class tag 'golden.renamed:Point')",
            builders.registered_class, variants=("",)),
    Example("checkpoint", "zarchive.save_checkpoint: model state dict, Adam state after one step, StepLR, "
            "seeded RNG states, epoch and a metrics DataFrame", builders.checkpoint_parts,
            write=builders.write_checkpoint, roundtrip_exact=False),
    Example("tensor_tables", "format 1.1: dicts of 64 or more plain tensors as tensor tables (a plain dict of mixed "
            "dtypes, a state dict with per-module versions and a tied weight, a nested dict) and a 63-tensor dict "
            "that keeps one node per tensor", builders.tensor_tables),
    Example("tensor_tables_split", "format 1.2: tensor groups of more than 256 tensors split over several "
            "members, with a list of tensor tables (a 280-tensor state dict with a weight tied across the split, "
            "300 int64 tensors in compressed members)", builders.tensor_tables_split),
    Example("exports_model", "format 1.3: the configured_model's TinyNet with its ONNX and TorchScript exports "
            "(uncompressed members exports/model.onnx and exports/model.torchscript.pt, the manifest's 'exports')",
            builders.tiny_net, variants=("",), write=builders.write_exports),
    Example("zanj_records_model", "format 1.3: a ConfiguredModel with training_records (losses, a step count, "
            "a dict)", builders.records_model),
    Example("columns_text", "format 1.3: text columns in Arrow's string layout (offsets, a UTF-8 data member, a "
            "validity array): str, string and object text with missing values, non-ASCII and empty strings, a "
            "Series", builders.columns_text, settings={"external_list_threshold": 4}),
    Example("columns_polars", "format 1.3: a polars DataFrame with a column of each supported dtype (ints, floats, "
            "Boolean, String, Categorical, Enum, Date, Time, Datetime with a zone, Duration, List, Struct, Null) with "
            "nulls, and a polars Series of text in Arrow's string layout", builders.columns_polars,
            settings={"external_list_threshold": 4}),
    Example("compressed_weights", "format 1.3: compress_weights=True: float tensors of every width, a tensor of "
            "two chunks, small tensors sharing a chunk and a numpy array stored byte-grouped in chunks (codec "
            "bgzstd, section 4.6); float noise that does not pay stays uncompressed",
            builders.compressed_weights, settings={"compress_weights": True}, variants=("",)),
    Example("compressed_checkpoint", "format 1.3: save_checkpoint with compress_weights=True: model weights and "
            "Adam moments in bgzstd members", builders.compressed_checkpoint_parts,
            settings={"compress_weights": True}, variants=("",), write=builders.write_compressed_checkpoint,
            roundtrip_exact=False),
    Example("columns_dict", "format 1.4: text columns that repeat values stored with a dictionary (the distinct "
            "values in Arrow's string layout plus int8/int16 codes, -1 where missing): str, string and object text "
            "with missing values, non-ASCII and empty strings, a text index, a Series", builders.columns_dict,
            settings={"external_list_threshold": 4}),
    Example("class_facts", "format 1.5: what a reader without the classes needs, in the file: Enum members with "
            "their values, Flag combinations with their member names, models with their modules, parameters "
            "(requires_grad) and buffers", builders.class_facts),
    Example("columns_arrow", "format 1.5: columns in Arrow's buffer layout (arrow.array: validity bitmaps, offsets, "
            "values, child arrays, dictionaries): pandas ArrowDtype columns (int64, bool, double, "
            "large_string, string, a zoned timestamp, list, struct, dictionary) with missing values on an ArrowDtype "
            "index, and a polars frame (String, Categorical, Enum, zoned Datetime, List, Struct, Int16)",
            builders.columns_arrow, settings={"external_array_threshold": 4}),
    Example("small_members", "format 1.6: uncompressed .safetensors members of at most 1 MiB without checksum "
            "entries (checked whole): a 300-tensor state dict in two members, a tensor outside a table, int64 "
            "counts", builders.small_members),
)  # fmt: skip


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_example(ex: Example, variant: str, out_dir: Path) -> Path:
    """Write one archive and its expected digest; return the archive's path."""
    path = out_dir / f"{ex.name}{variant}.zarc"
    obj = ex.build()
    settings = {**ex.settings, **VARIANTS[variant], "durable": False}
    if ex.write is not None:
        ex.write(obj, path, settings)
    else:
        zarchive.save(obj, path, **settings)
    value = describe(zarchive.read(path))
    if ex.roundtrip_exact:
        saved = describe(obj)
        if saved != value:
            raise SystemExit(
                f"{path.name}: the value read back differs from the value saved:\n"
                f"saved: {json.dumps(saved)[:3000]}\nread:  {json.dumps(value)[:3000]}"
            )
    with zarchive.open(path) as arc:
        members = {name: entry["codec"] for name, entry in arc.members.items()}
    expected = {
        "archive": path.name,
        "sha256": file_sha256(path),
        "about": ex.about,
        "members": members,
        "value": value,
    }
    path.with_suffix(".expected.json").write_text(pretty_json(expected) + "\n", encoding="utf-8")
    return path


def pretty_json(value: Any, indent: str = "") -> str:
    """Indented JSON that keeps every value fitting in 100 columns on one line (short, readable files)."""
    flat = json.dumps(value, ensure_ascii=False)
    if len(indent) + len(flat) <= 100 or not isinstance(value, (dict, list)) or not value:
        return flat
    inner = indent + " "
    if isinstance(value, dict):
        body = [
            f"{inner}{json.dumps(k, ensure_ascii=False)}: {pretty_json(v, inner).lstrip()}" for k, v in value.items()
        ]
        return "{\n" + ",\n".join(body) + "\n" + indent + "}"
    body = [inner + pretty_json(v, inner).lstrip() for v in value]
    return "[\n" + ",\n".join(body) + "\n" + indent + "]"


def all_names() -> list[tuple[Example, str]]:
    return [(ex, v) for ex in EXAMPLES for v in ex.variants]


def _comparable(path: Path, settings: set[str] | None = None) -> dict[str, Any]:
    """What today's writer must reproduce of an archive: every member's content, leaving out what
    changes without changing what the archive holds. Left out: the metadata's time, versions and
    environment; the format version (it rises with every format change, also for archives that use
    nothing new); settings added since `settings` (the committed archive's) were recorded; the stored
    bytes of zstd members (their content is compared decompressed: framing moves with the zstd build)
    and the crc of manifest.json, which carries the format version. Exported models (exports/) are
    compared by name: their bytes come from torch's exporters, which change with torch."""
    with zipfile.ZipFile(path) as z:
        raw = {info.filename: z.read(info) for info in z.infolist()}
    out: dict[str, Any] = {}
    for name, data in raw.items():
        if name.startswith("exports/"):
            out[name] = "(exported model)"
        elif name.endswith(".zst"):
            out[name] = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        elif name == "manifest.json":
            manifest = json.loads(data)
            manifest.pop("format_version", None)
            out[name] = manifest
        else:
            out[name] = data
    meta = json.loads(raw["metadata.json"])
    for key in ("created_utc", "library_version", "environment", "format_version"):
        meta.pop(key, None)
    if settings is not None and isinstance(meta.get("settings"), dict):
        meta["settings"] = {k: v for k, v in meta["settings"].items() if k in settings}
    for name, entry in (meta.get("members") or {}).items():
        if isinstance(entry, dict) and (entry.get("codec") not in (None, "none") or name == "manifest.json"):
            entry.pop("crc32", None)
            entry.pop("stored_size", None)
    out["metadata.json"] = meta
    return out


def _settings_of(path: Path) -> set[str]:
    with zipfile.ZipFile(path) as z:
        settings = json.loads(z.read("metadata.json")).get("settings")
    return set(settings) if isinstance(settings, dict) else set()


def check(committed: Path) -> int:
    """Rebuild every example. Fails (1) where the value today's writer and reader give back differs
    from the committed example's value, or an example is missing; reports, without failing, where
    today's content differs from the committed archive's (the layout has moved on since it was
    frozen: .jsonl text columns became .utf8 ones, say)."""
    problems = 0
    with tempfile.TemporaryDirectory() as tmp:
        for ex, variant in all_names():
            name = f"{ex.name}{variant}.zarc"
            if not (committed / name).exists():
                print(f"{name}: not committed yet (run without --check to write it)")
                problems += 1
                continue
            path = write_example(ex, variant, Path(tmp))
            now = json.loads(path.with_suffix(".expected.json").read_text(encoding="utf-8"))
            then = json.loads((committed / name).with_suffix(".expected.json").read_text(encoding="utf-8"))
            if now["value"] != then["value"]:
                print(f"{name}: FAIL: today's writer and reader give back another value than the committed example")
                problems += 1
                continue
            fresh = _comparable(path, _settings_of(committed / name))
            old = _comparable(committed / name)
            differ = sorted(k for k in fresh.keys() | old.keys() if fresh.get(k) != old.get(k))
            if differ:
                print(f"{name}: same value; the layout moved on in {', '.join(differ)}")
            else:
                print(f"{name}: same")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare today's output with the committed archives")
    parser.add_argument("--out", type=Path, help="write every example into this folder instead")
    args = parser.parse_args(argv)
    if args.check:
        return check(HERE)
    if args.out is not None:
        if args.out.resolve() == HERE:
            parser.error("--out must not be spec/examples: the committed archives are frozen")
        args.out.mkdir(parents=True, exist_ok=True)
        for ex, variant in all_names():
            print("wrote", write_example(ex, variant, args.out))
        return 0
    for ex, variant in all_names():
        name = f"{ex.name}{variant}.zarc"
        if (HERE / name).exists():
            print(f"{name}: frozen, left as it is")
        else:
            print("wrote", write_example(ex, variant, HERE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
