"""Hostile-corpus cases about the manifest's `exports` section (format 1.3): entries that name members
the archive lacks, sizes that lie, members stored compressed or under other names, malformed entries.
The section is checked when the archive is opened, so every read refuses these files."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hostile.craft import Parts, pack

CaseTuple = tuple[str, Callable[[], bytes], str | None, str]

ONNX = "exports/model.onnx"
TS = "exports/model.torchscript.pt"
ONNX_BYTES = b"\x08\x07" + bytes(62)  # not a real ONNX file: nothing is parsed when the archive is read
TS_BYTES = b"PK\x03\x04" + bytes(60)


def entry(member: str, data: bytes, **fields: Any) -> dict[str, Any]:
    onnx = member == ONNX
    out = {
        "member": member, "size": len(data), "exporter": "torch.onnx.export(dynamo=True)" if onnx else "torch.jit.script",
        "torch": "2.0", "opset": 20 if onnx else None, "inputs": ["input"], "outputs": ["output"],
        "dynamic_axes": {"input": {"0": "batch"}} if onnx else None, "max_abs_diff": 0.0, "max_rel_diff": 0.0,
        "rtol": 0.001, "atol": 1e-05, "warnings": [],
    }  # fmt: skip
    out.update(fields)
    return out


def export_cases(base: Callable[[], Parts]) -> list[CaseTuple]:
    cases: list[CaseTuple] = []

    def case(name: str, error: str | None, match: str, build: Callable[[], bytes]) -> None:
        cases.append(("export_" + name, build, error, match))

    def with_exports(
        edit: Callable[[dict[str, Any]], None] | None = None,
        members: dict[str, bytes] | None = None,
        version: str = "1.3",
    ) -> Callable[[], bytes]:
        def build() -> bytes:
            p = base()
            p.manifest["format_version"] = p.meta["format_version"] = version
            node = {"$type": "exports", "onnx": entry(ONNX, ONNX_BYTES), "torchscript": entry(TS, TS_BYTES)}
            if edit is not None:
                edit(node)
            p.manifest["exports"] = node
            p.members.update(copy.deepcopy(members) if members is not None else {ONNX: ONNX_BYTES, TS: TS_BYTES})
            return pack(p)

        return build

    case("valid", None, "", with_exports())
    case("missing_member", "MemberNotFoundError", "does not have", with_exports(members={ONNX: ONNX_BYTES}))
    case("size_lies", "UnsafeArchiveError", "declares 64 bytes, the manifest needs 10", with_exports(
        lambda n: n["onnx"].update(size=10)))  # fmt: skip
    case("size_huge", "UnsafeArchiveError", "the manifest needs 1099511627776", with_exports(
        lambda n: n["torchscript"].update(size=1 << 40)))  # fmt: skip
    case("size_negative", "FormatError", "bad 'size'", with_exports(lambda n: n["onnx"].update(size=-1)))
    case("other_member", "FormatError", "must be the member 'exports/model.onnx'", with_exports(
        lambda n: n["onnx"].update(member="arr.npy", size=len(n["onnx"]["member"]))))  # fmt: skip
    case("names_manifest", "FormatError", "must be the member", with_exports(
        lambda n: n["torchscript"].update(member="manifest.json")))  # fmt: skip
    case("compressed", "FormatError", "must be the member", with_exports(
        lambda n: n["onnx"].update(member=ONNX + ".zst"), members={ONNX + ".zst": ONNX_BYTES, TS: TS_BYTES}))  # fmt: skip
    case("unknown_export", "FormatError", "unknown export 'tflite'", with_exports(
        lambda n: n.update(tflite=entry(ONNX, ONNX_BYTES))))  # fmt: skip
    case("unknown_export_newer", "VersionError", "upgrade zarchive", with_exports(
        lambda n: n.update(tflite=entry(ONNX, ONNX_BYTES)), version="1.9"))  # fmt: skip
    case("in_format_1_2", "FormatError", "it is format 1.3; the file says 1.2", with_exports(version="1.2"))
    case("not_a_node", "FormatError", "must be a node of type 'exports'", with_exports(lambda n: n.pop("$type")))
    case("entry_not_object", "FormatError", "entry must be an object", with_exports(
        lambda n: n.update(onnx=[ONNX])))  # fmt: skip
    case("bad_opset", "FormatError", "bad 'opset'", with_exports(lambda n: n["onnx"].update(opset="20")))
    case("bad_names", "FormatError", "'inputs' must be a list of strings", with_exports(
        lambda n: n["onnx"].update(inputs=[{"$type": "x"}])))  # fmt: skip
    case("bad_axes", "FormatError", "bad 'dynamic_axes'", with_exports(
        lambda n: n["onnx"].update(dynamic_axes={"input": {"x": 1}})))  # fmt: skip
    case("bad_diff", "FormatError", "'max_abs_diff' must be a non-negative number", with_exports(
        lambda n: n["onnx"].update(max_abs_diff=-1.0)))  # fmt: skip
    return cases
