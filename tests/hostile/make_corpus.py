"""Generate the hostile-file corpus: `python tests/hostile/make_corpus.py [OUT_DIR]`.

Every file is built at byte level by `craft` (never by zarchive's writer), so the corpus is
byte-identical on every run and every machine; `tests/test_hostile.py` checks that the committed files
are what this script makes, and that reading each one raises the ZArchiveError subclass listed here
with a message naming the problem. `corpus/INDEX.json` lists the same expectations for people and
other tools. Files stay small on disk: the zip bombs are RLE zstd frames (1 GiB in 32 KiB).

A case whose damage must get past the integrity layer (to reach the manifest, .npy or .safetensors
checks) is packed with every size and CRC recomputed; only the layer under test lies.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hostile.cases_arrow import arrow_cases
from hostile.cases_bounded import bounded_cases
from hostile.cases_chunks import chunk_cases
from hostile.cases_columns import column_cases, dict_cases
from hostile.cases_exports import export_cases
from hostile.cases_foreign import foreign_cases
from hostile.cases_member import member_cases
from hostile.cases_zip import zip_cases
from hostile.craft import (
    MANIFEST,
    METADATA,
    Parts,
    ZEntry,
    pack,
)
from hostile.formats import npy_bytes, safetensors_bytes

CORPUS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


@dataclass(frozen=True)
class Case:
    name: str  # file name without .zarc
    build: Callable[[], bytes]
    error: str | None  # a zarchive exception class name ("A|B" for either); None: must load
    match: str  # a regex the message must match
    # "read": every read raises. "partial": the damage is in a checksum entry, which only a partial
    # read of that entry (open(...)["t"]) and verify() consult; a full read checks whole members.
    when: str = "read"


CASES: list[Case] = []


def case(
    name: str, error: str | None, match: str = "", when: str = "read"
) -> Callable[[Callable[[], bytes]], Callable[[], bytes]]:
    def register(fn: Callable[[], bytes]) -> Callable[[], bytes]:
        CASES.append(Case(name, fn, error, match, when))
        return fn

    return register


# --- the valid archive every case starts from --------------------------------------------------------
ARR = np.arange(40, dtype="<f8")
LIST = list(range(40))
TENSOR = np.arange(16, dtype="<f4")
BLOB = bytes(range(256))
JSONL = "".join(f"{i}\n" for i in LIST).encode()


def expected_valid() -> dict[str, Any]:
    """What `valid.zarc` loads to (the tensor as a numpy array, for comparison)."""
    return {"arr": ARR, "lst": LIST, "t": TENSOR.reshape(4, 4), "blob": BLOB, "name": "ok"}


def base() -> Parts:
    st, st_entries = safetensors_bytes([("t", "F32", [4, 4], TENSOR.tobytes())])
    root = {
        "arr": {"$type": "numpy.ndarray", "$ref": "arr.npy", "dtype": "<f8", "shape": [40]},
        "lst": {"$type": "list", "$ref": "lst.jsonl.zst", "length": len(LIST), "nbytes": len(JSONL), "items": "plain"},
        "t": {
            "$type": "torch.Tensor",
            "$ref": "tensors.safetensors",
            "key": "t",
            "dtype": "float32",
            "shape": [4, 4],
            "device": "cpu",
        },
        "blob": {"$type": "bytes", "$ref": "blob.bin", "nbytes": len(BLOB)},
        "name": "ok",
    }
    members = {
        "arr.npy": npy_bytes("<f8", ARR.shape, ARR.tobytes()),
        "lst.jsonl.zst": JSONL,
        "tensors.safetensors": st,
        "blob.bin": BLOB,
    }
    return Parts(
        {"format": "zarchive", "format_version": "1.0", "root": root}, members, {"tensors.safetensors": st_entries}
    )


def with_root(root: Any, members: dict[str, bytes] | None = None, **kw: Any) -> bytes:
    """A valid archive around a different root node (and members), checksums all true."""
    p = Parts({"format": "zarchive", "format_version": "1.0", "root": root}, members or {})
    return pack(p, **kw)


def edit_meta(fn: Callable[[dict[str, Any]], None]) -> Callable[[], bytes]:
    return lambda: pack(base(), meta_edit=fn)


def valid_entries() -> list[ZEntry]:
    """The valid archive's zip entries, for cases that damage the zip layer only."""
    import io
    import zipfile

    data = pack(base())
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [ZEntry(n, z.read(n), align=1 if n.endswith(".json") else 64) for n in z.namelist()]


case("valid", None)(lambda: pack(base()))

# --- not a zip at all ---------------------------------------------------------------------------------
case("empty", "NotAZipError", "empty")(lambda: b"")
case("text", "NotAZipError", "not a zip archive")(lambda: b"just some text, not an archive\n")
case("git_lfs_pointer", "NotAZipError", "git-LFS pointer")(
    lambda: (
        b"version https://git-lfs.github.com/spec/v1\n"
        b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n"
    )
)
case("html_error_page", "NotAZipError", "HTML")(
    lambda: b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head><body>Not Found</body></html>\n"
)
case("gzip", "NotAZipError", "not a zip archive")(lambda: b"\x1f\x8b\x08\x00" + bytes(40))
case("truncated_half", "NotAZipError", "truncated")(lambda: pack(base())[: len(pack(base())) // 2])
case("truncated_last_byte", "NotAZipError", "")(lambda: pack(base())[:-1])
case("appended_junk", "NotAZipError", "end-of-directory|does not end where")(lambda: pack(base()) + b"JUNK" * 8)
case("prepended_script", "NotAZipError", "not a zip archive")(lambda: b"#!/bin/sh\nexit 0\n" + pack(base()))

# --- manifest and metadata ----------------------------------------------------------------------------
case("no_manifest", "FormatError", "no 'manifest.json'")(lambda: pack(base(), omit=(MANIFEST,)))
case("no_metadata", "FormatError", "no 'metadata.json'")(lambda: pack(base(), omit=(METADATA,)))
case("manifest_latin1", "FormatError", "not valid UTF-8")(
    lambda: pack(base(), manifest_bytes='{"root": "caf\u00e9"}'.encode("latin1"))
)
case("manifest_nan", "FormatError", "NaN")(lambda: pack(base(), manifest_bytes=b'{"root": NaN}'))
case("manifest_infinity", "FormatError", "Infinity")(lambda: pack(base(), manifest_bytes=b'{"root": -Infinity}'))
case("manifest_duplicate_keys", "FormatError", "duplicate key 'root'")(
    lambda: pack(base(), manifest_bytes=b'{"root": 1, "root": 2}')
)
case("manifest_nested_100k", "FormatError", "nested too deeply")(
    lambda: pack(base(), manifest_bytes=b'{"root": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
)
case("manifest_huge_float", "FormatError", "overflows")(lambda: pack(base(), manifest_bytes=b'{"root": 1e999}'))
case("manifest_huge_int", "FormatError", "limit")(
    lambda: pack(base(), manifest_bytes=b'{"root": ' + b"9" * 5000 + b"}")
)
case("manifest_bom", "FormatError", "BOM")(lambda: pack(base(), manifest_bytes=b'\xef\xbb\xbf{"root": 1}'))
case("manifest_not_object", "FormatError", "no 'root'")(lambda: pack(base(), manifest_bytes=b"[1, 2]"))
case("manifest_nested_300", "FormatError", "nested more than")(
    lambda: pack(base(), manifest_bytes=b'{"root": ' + b"[" * 300 + b"]" * 300 + b"}")
)
case("metadata_duplicate_keys", "FormatError", "duplicate key 'format'")(
    lambda: pack(base(), meta_bytes=b'{"format": "zarchive", "format": "zarchive"}')
)
case("metadata_not_utf8", "FormatError", "not valid UTF-8")(lambda: pack(base(), meta_bytes=b'{"format": "\xff"}'))
case("metadata_wrong_format", "FormatError", "does not describe a zarchive")(
    edit_meta(lambda m: m.update(format="zanj"))
)
case("version_newer_major", "VersionError", "format version 2.0")(edit_meta(lambda m: m.update(format_version="2.0")))
case("version_garbage", "FormatError", "bad format_version")(edit_meta(lambda m: m.update(format_version="1")))
case("metadata_no_members", "FormatError", "no 'members' table")(edit_meta(lambda m: m.pop("members")))
case("member_not_in_metadata", "UnsafeArchiveError", "not listed in the metadata")(
    edit_meta(lambda m: m["members"].pop("blob.bin"))
)
case("metadata_lists_missing_member", "FormatError", "does not have")(
    edit_meta(lambda m: m["members"].update({"ghost.npy": dict(m["members"]["blob.bin"])}))
)
case("metadata_lists_itself", "FormatError", "lists itself")(edit_meta(lambda m: m["members"].update({METADATA: {}})))
case("metadata_stored_size_lies", "IntegrityError", "stored bytes")(
    edit_meta(lambda m: m["members"]["blob.bin"].update(stored_size=10))
)
case("metadata_size_lies", "IntegrityError", "size and stored_size differ")(
    edit_meta(lambda m: m["members"]["blob.bin"].update(size=10))
)
case("metadata_crc_lies", "IntegrityError", "disagree on the CRC")(
    edit_meta(lambda m: m["members"]["blob.bin"].update(crc32="00000000"))
)
case("metadata_unknown_codec", "FormatError", "unknown codec 'gzip'")(
    edit_meta(lambda m: m["members"]["blob.bin"].update(codec="gzip"))
)
case("metadata_zstd_without_suffix", "FormatError", "must end in .zst")(
    edit_meta(lambda m: m["members"]["blob.bin"].update(codec="zstd"))
)
case("metadata_negative_size", "FormatError", "bad 'size'")(
    edit_meta(lambda m: m["members"]["lst.jsonl.zst"].update(size=-1))
)
case("entry_crc_lies", "IntegrityError", "entry 't' do(es)? not match", when="partial")(
    edit_meta(lambda m: m["members"]["tensors.safetensors"]["entries"]["t"].update(crc32="00000000"))
)
case("entry_outside_member", "FormatError", "bad checksum entry 't'", when="partial")(
    edit_meta(lambda m: m["members"]["tensors.safetensors"]["entries"]["t"].update(offset=10**9))
)
case("entry_is_null", "FormatError", "bad checksum entry 't'", when="partial")(
    edit_meta(lambda m: m["members"]["tensors.safetensors"]["entries"].update(t=None))
)
case("content_crc_lies", "IntegrityError", "decompressed bytes do not match")(
    edit_meta(lambda m: m["members"]["lst.jsonl.zst"].update(content_crc32="00000000"))
)

# --- $ref -----------------------------------------------------------------------------------------------
_BAD_REFS = {
    "ref_missing": ("nope.npy", "MemberNotFoundError", "does not have"),
    "ref_manifest": (MANIFEST, "MemberNotFoundError", "not a data member"),
    "ref_metadata": (METADATA, "MemberNotFoundError", "not a data member"),
    "ref_url": ("https://example.com/arr.npy", "MemberNotFoundError", "does not have"),
    "ref_absolute": ("/etc/passwd", "MemberNotFoundError", "does not have"),
    "ref_traversal": ("../arr.npy", "MemberNotFoundError", "does not have"),
    "ref_not_a_string": (["arr.npy"], "FormatError", "must be a member name"),
}
for _case, (_ref, _err, _match) in _BAD_REFS.items():

    def _bad_ref(r: Any = _ref) -> bytes:
        p = base()
        p.manifest["root"]["blob"]["$ref"] = r
        return pack(p)

    case(_case, _err, _match)(_bad_ref)


def _nodes_list(refs: list[str], nbytes_of: dict[str, int]) -> bytes:
    return "".join(
        json.dumps({"$type": "list", "$ref": r, "length": 2, "nbytes": nbytes_of.get(r, 0), "items": "nodes"}) + "\n"
        for r in refs
    ).encode()


@case("ref_cycle", "FormatError", "point at members")
def _ref_cycle() -> bytes:
    # a list member whose only item is a list node pointing back at that same member
    body = json.dumps({"$type": "list", "$ref": "loop.jsonl", "length": 1, "nbytes": 0, "items": "nodes"})
    size = len(body) + 1
    while True:  # the item states the member's own size, which depends on how many digits it has
        text = body.replace('"nbytes": 0', f'"nbytes": {size}') + "\n"
        if len(text) == size:
            break
        size = len(text)
    root = {"$type": "list", "$ref": "loop.jsonl", "length": 1, "nbytes": size, "items": "nodes"}
    return with_root(root, {"loop.jsonl": text.encode()})


@case("ref_shared_list_bomb", "FormatError", "point at members")
def _ref_bomb() -> bytes:
    # 40 list members, each holding two references to the next: 2**40 loads if nothing stops it
    members: dict[str, bytes] = {"l40.jsonl": b"0\n0\n"}
    for i in range(39, -1, -1):
        nxt = f"l{i + 1}.jsonl"
        members[f"l{i}.jsonl"] = _nodes_list([nxt, nxt], {nxt: len(members[nxt])})
    root = {"$type": "list", "$ref": "l0.jsonl", "length": 2, "nbytes": len(members["l0.jsonl"]), "items": "nodes"}
    return with_root(root, dict(reversed(list(members.items()))))


# --- handlers and classes -------------------------------------------------------------------------------
case("unknown_handler", "UnknownTypeError", "no handler named 'evil.Pickle'")(
    lambda: with_root({"$type": "evil.Pickle", "payload": "x"})
)
case("class_not_imported", "UnknownTypeError", "not imported")(
    lambda: with_root({"$type": "enum", "class": "zarchive_hostile_trap:Evil", "name": "A"})
)
case("class_is_a_function", "UnknownTypeError", "not a Enum class")(
    lambda: with_root({"$type": "enum", "class": "os:system", "name": "A"})
)
case("class_is_popen", "UnknownTypeError", "not a Enum class")(
    lambda: with_root({"$type": "enum", "class": "subprocess:Popen", "name": "A"})
)
case("class_dunder_walk", "UnknownTypeError", "")(
    lambda: with_root({"$type": "enum", "class": "enum:Enum.__subclasses__", "name": "A"})
)


def _model(cls: str, width: int) -> Callable[[], bytes]:
    """A 4x4 weight in the archive, under a config asking for width x width (tests/hostile/models.py)."""

    def build() -> bytes:
        p = base()
        weight = p.manifest["root"]["t"]
        p.manifest["root"] = {
            "$type": "torch.ConfiguredModel",
            "class": f"hostile.models:{cls}",
            "config": {"$type": "dataclass", "class": "hostile.models:WideConfig", "fields": {"width": width}},
            "state_dict": {"fc.weight": weight},
            "training": False,
        }
        return pack(p)

    return build


case("inline_strings_of_gigabytes", "UnsafeArchiveError", "over max_read_bytes")(
    lambda: with_root({"$type": "numpy.ndarray", "dtype": "|S2147483647", "shape": [3], "data": ["a", "b", "c"]})
)
case("model_config_asks_terabytes", "ConfigMismatchError", "do not fit|does not match")(_model("Wide", 10**6))
case("model_real_build_asks_terabytes", "UnsafeArchiveError", "asked for more than")(_model("WideNoMeta", 10**6))
case("dollar_keys_without_type", "FormatError", "no '\\$type'")(lambda: with_root({"$ref": "x", "a": 1}))

CASES += [Case(*c) for c in zip_cases(base, valid_entries)]
CASES += [Case(*c) for c in member_cases(base, with_root)]
CASES += [Case(*c) for c in export_cases(base)]  # format 1.3 exports (tests/hostile/cases_exports.py)
CASES += [Case(*c) for c in column_cases()]  # format 1.3 text columns (tests/hostile/cases_columns.py)
CASES += [Case(*c) for c in dict_cases()]  # format 1.4 text columns with a dictionary (cases_columns.py)
CASES += [Case(*c) for c in arrow_cases()]  # format 1.5 Arrow arrays (tests/hostile/cases_arrow.py)
CASES += [Case(*c) for c in chunk_cases(base)]

# --- work bounds (tests/hostile/cases_bounded.py; tests/test_bounded.py) ---------------------------------
CASES += [Case(*c) for c in bounded_cases(base, with_root)]

# --- foreign files recognised by their bytes (tests/hostile/cases_foreign.py) -----------------------------
CASES += [Case(*c) for c in foreign_cases()]


def write_corpus(dest: str = CORPUS_DIR) -> list[str]:
    """Write every case into `dest` (removing stale .zarc files); return the file names."""
    os.makedirs(dest, exist_ok=True)
    names = []
    for c in CASES:
        fname = c.name + ".zarc"
        with open(os.path.join(dest, fname), "wb") as f:
            f.write(c.build())
        names.append(fname)
    for stale in set(os.listdir(dest)) - set(names) - {"INDEX.json"}:
        if stale.endswith(".zarc"):
            os.remove(os.path.join(dest, stale))
    index = {
        c.name + ".zarc": {"error": c.error, "match": c.match} | ({"when": c.when} if c.when != "read" else {})
        for c in CASES
    }
    with open(os.path.join(dest, "INDEX.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write("\n")
    return names


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else CORPUS_DIR
    written = write_corpus(out)
    total = sum(os.path.getsize(os.path.join(out, n)) for n in written)
    print(f"wrote {len(written)} files, {total} bytes, to {out}")
