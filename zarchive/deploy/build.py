"""Making a save's exports: each one exported, run on the example inputs, compared with the model
(see compare.py), and turned into a member and an entry of the manifest's `exports` node."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from ..container.archive_writer import MemberPlan, iter_parts
from ..errors import ExportWarning, SaveError
from ..nodes.exports import EXPORT_MEMBERS, ExportsSchema
from . import ExportErrors, check_arguments, first_line
from .compare import Comparison, OutputError, compare, flatten_outputs, to_numpy
from .dynamic_axes import Axes, resolve, second_inputs


def _inputs(example_inputs: Any) -> tuple[torch.Tensor, ...]:
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    if not args or not all(isinstance(a, torch.Tensor) for a in args):
        raise SaveError("example_inputs must be a tensor or a tuple of tensors (the model's positional inputs)")
    return args


def _names(prefix: str, n: int) -> list[str]:
    return [prefix] if n == 1 else [f"{prefix}_{i}" for i in range(n)]


class _Exporting:
    """One save's exports of `model` on `args`, the model in eval mode meanwhile."""

    def __init__(self, model: torch.nn.Module, args: tuple[torch.Tensor, ...], axes: Axes | None = None) -> None:
        self.model, self.args = model, args
        try:
            with torch.no_grad():
                outputs = model(*args)
        except Exception as e:  # whatever the model's forward raises
            raise SaveError(f"the model fails on example_inputs ({first_line(e)}): nothing to export") from e
        try:
            self.want = [to_numpy(t) for t in flatten_outputs(outputs)]
        except OutputError as e:
            raise SaveError(f"cannot export the model: {e}") from None
        self.input_names = _names("input", len(args))
        self.output_names = _names("output", len(self.want))
        self.axes = resolve(axes, args, self.input_names, self.output_names, [w.ndim for w in self.want])

    def onnx(self) -> tuple[bytes, dict[str, Any]]:
        from .onnx_export import export_onnx, run_onnx

        made = export_onnx(self.model, self.args, self.input_names, self.output_names, self.axes)
        check = compare(self.want, run_onnx(made.data, self.input_names, self.args))
        check = self._at_a_second_size(made.data, check, run_onnx)
        return made.data, self._entry(
            "onnx", made.data, made.exporter, made.opset, made.inputs, made.outputs, made.dynamic_axes, check,
            made.warnings,
        )  # fmt: skip

    def _at_a_second_size(self, data: bytes, first: Comparison, run: Any) -> Comparison:
        """The ONNX export checked again with every free axis of the inputs at another size (its
        dynamic axes must really be free); the larger differences of the two checks are recorded."""
        second = second_inputs(self.axes, self.input_names, self.args)
        if second is None or first.problem is not None:
            return first
        args, sizes = second
        said = ", ".join(f"{dim} {n}" for dim, n in sizes.items())
        try:
            with torch.no_grad():
                want = [to_numpy(t) for t in flatten_outputs(self.model(*args))]
        except Exception as e:  # whatever the model's forward raises
            raise SaveError(
                f"the model fails on example_inputs resized along its dynamic axes ({said}): {first_line(e)}; "
                "choose dynamic_axes the model accepts at other sizes"
            ) from e
        try:
            got = run(data, self.input_names, args)
        except Exception as e:  # onnxruntime's own errors: the export does not take that size
            raise SaveError(
                f"the 'onnx' export does not run with its dynamic axes at another size ({said}): {first_line(e)}"
            ) from e
        again = compare(want, got)
        if again.problem is not None:
            raise SaveError(f"the 'onnx' export disagrees with the model at another size ({said}): {again.problem}")
        return Comparison(
            max(first.max_abs_diff, again.max_abs_diff), max(first.max_rel_diff, again.max_rel_diff), None
        )

    def torchscript(self) -> tuple[bytes, dict[str, Any]]:
        from .torchscript_export import export_torchscript, run_torchscript

        made = export_torchscript(self.model, self.args)
        got = [to_numpy(t) for t in flatten_outputs(run_torchscript(made.data, self.args))]
        check = compare(self.want, got)
        return made.data, self._entry(
            "torchscript", made.data, made.exporter, None, made.inputs, self.output_names, None, check, made.warnings
        )

    def _entry(
        self, name: str, data: bytes, exporter: str, opset: int | None, inputs: list[str], outputs: list[str],
        axes: dict[str, dict[str, str]] | None, check: Comparison, notes: list[str],
    ) -> dict[str, Any]:  # fmt: skip
        if check.problem is not None:
            raise SaveError(f"the {name!r} export disagrees with the model on example_inputs: {check.problem}")
        return {
            "member": EXPORT_MEMBERS[name],
            "size": len(data),
            "exporter": exporter,
            "torch": str(torch.__version__),
            "opset": opset,
            "inputs": inputs,
            "outputs": outputs,
            "dynamic_axes": axes,
            **check.record(),
            "warnings": notes,
        }


def build_exports(
    model: Any,
    export: Sequence[str] | str,
    example_inputs: Any,
    export_errors: ExportErrors,
    dynamic_axes: Axes | None = None,
) -> tuple[dict[str, Any] | None, list[MemberPlan]]:
    """The `exports` node (None when no export was kept) and its members. Each export that fails or
    disagrees beyond the tolerance raises SaveError naming it, or with export_errors="warn" is left
    out with an ExportWarning."""
    names = check_arguments(export, example_inputs, export_errors)
    if not names:
        return None, []
    if not isinstance(model, torch.nn.Module):
        raise SaveError(f"export= needs a torch.nn.Module to export, not a {type(model).__qualname__}")
    args = _inputs(example_inputs)
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        job = _Exporting(model, args, dynamic_axes)
        node: dict[str, Any] = {"$type": ExportsSchema.name}
        members: list[MemberPlan] = []
        for name in names:
            try:
                data, entry = job.onnx() if name == "onnx" else job.torchscript()
            except Exception as e:  # noqa: BLE001 - the exporters raise anything: reported as the export's failure
                error = e if isinstance(e, SaveError) else SaveError(f"the {name!r} export failed: {first_line(e)}")
                if export_errors == "raise":
                    raise error from (None if error is e else e)
                warnings.warn(f"{error.message}; saved without it", ExportWarning, stacklevel=4)
                continue
            node[name] = entry
            members.append(MemberPlan(EXPORT_MEMBERS[name], functools.partial(iter_parts, data), compress="never"))
    finally:
        for m, training in modes.items():
            m.training = training
    return (node if members else None), members
