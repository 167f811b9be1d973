"""What `audit()` returns: every class and callable a read would construct or call, and the exports.

The mapping is the plan's one list (zarchive.engine.plan.Plan.classes): tag ('module:QualName') -> the object
paths where the read constructs or calls it. It holds the classes the file names (dataclasses, named
tuples, enums, ConfiguredModels and their configs), the functions their fields run (muutils'
deserialize_fn / loading_fn, trusted with their class), defaultdict factories (builtins only),
handlers from outside zarchive (registered by the program or by an installed package's entry point)
and the loaders registered for ZANJ formats. `trusted=` checks the same list, before anything is built.

`exports` lists the model exports an archive carries beside its object tree (format 1.3). A read
never opens them; each entry says what opening it runs.
"""

from __future__ import annotations

from typing import Any

# what opening each export runs, and how it is opened
EXPORT_RUNS = {
    "onnx": "onnxruntime:InferenceSession (arc.onnx_session()): the graph's operators, no Python code",
    "torchscript": "torch.jit:load (arc.load_torchscript(trusted=True)): code stored in the file; refused "
    "without trusted=True",
}


class AuditReport(dict[str, list[str]]):
    """{tag: object paths} of what a read constructs or calls (a dict, as audit() always returned),
    with `exports`: export name -> {"member", "kind", "runs"} (empty where there are none)."""

    exports: dict[str, dict[str, str]]

    def __init__(self, found: dict[str, list[str]], exports: dict[str, dict[str, str]] | None = None) -> None:
        super().__init__(found)
        self.exports = exports or {}

    def as_json(self) -> dict[str, Any]:
        """The mapping, and the exports (where there are any) under "$exports" (no tag starts with "$")."""
        out: dict[str, Any] = dict(self)
        if self.exports:
            out["$exports"] = self.exports
        return out


def export_audit(entries: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The exports' part of an audit, from the checked entries of the manifest's `exports` section."""
    return {
        name: {"member": str(entry.get("member")), "kind": name, "runs": EXPORT_RUNS.get(name, "unknown")}
        for name, entry in entries.items()
    }


__all__ = ["EXPORT_RUNS", "AuditReport", "export_audit"]
