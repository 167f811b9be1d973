"""The fast state-dict assignment used when reading a ConfiguredModel does exactly what
`load_state_dict(sd, assign=True)` does, and declines (touching nothing) whenever it could differ."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from zarchive.handlers.meta_build import building_on_meta
from zarchive.handlers.state_assign import assign_state_dict


class Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.block = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
        self.again = self.block  # one submodule under two names: its keys appear twice
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.frozen = nn.Parameter(torch.ones(3), requires_grad=False)


class _Buffered(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(2))


MODELS: dict[str, Callable[[], nn.Module]] = {
    "mlp": lambda: nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2)),
    "shared-tied-buffer-frozen": Shared,
    "gru": lambda: nn.GRU(3, 4, num_layers=2),
}


def fresh(make: Callable[[], nn.Module], *, meta: bool) -> nn.Module:
    torch.manual_seed(0)
    if not meta:
        return make()
    with building_on_meta():
        return make()


def layout(model: nn.Module) -> list[tuple[str, str, Any, Any, bool, bool, int]]:
    """Everything assignment can change: per name, kind, the object's identity group, dtype,
    requires_grad, whether it is a Parameter, and where its data lives."""
    first: dict[int, str] = {}
    out = []
    for kind, named in (
        ("p", model.named_parameters(remove_duplicate=False)),
        ("b", model.named_buffers(remove_duplicate=False)),
    ):
        for name, t in named:
            group = first.setdefault(id(t), name)
            out.append(
                (
                    kind + ":" + name,
                    group,
                    t.dtype,
                    tuple(t.shape),
                    t.requires_grad,
                    isinstance(t, nn.Parameter),
                    t.data_ptr(),
                )
            )
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_same_result_as_load_state_dict_assign(name: str) -> None:
    sd = fresh(MODELS[name], meta=False).state_dict()
    fast, slow = fresh(MODELS[name], meta=True), fresh(MODELS[name], meta=True)
    assert assign_state_dict(fast, sd)
    result = slow.load_state_dict(sd, assign=True)
    assert not result.missing_keys and not result.unexpected_keys
    assert layout(fast) == layout(slow)
    for (k, a), (_, b) in zip(fast.state_dict().items(), slow.state_dict().items()):
        assert torch.equal(a, b), k


def _decline_cases() -> dict[str, Callable[[], tuple[nn.Module, dict[str, Any]]]]:
    def with_sd(
        model: nn.Module, edit: Callable[[dict[str, Any]], None] = lambda sd: None
    ) -> tuple[nn.Module, dict[str, Any]]:
        sd = dict(model.state_dict())
        edit(sd)
        return model, sd

    def pre_hook() -> tuple[nn.Module, dict[str, Any]]:
        m = nn.Linear(2, 2)
        m._register_load_state_dict_pre_hook(lambda *a, **k: None)
        return with_sd(m)

    class Extra(nn.Linear):
        def get_extra_state(self) -> Any:
            return {"v": 1}

        def set_extra_state(self, state: Any) -> None:
            self.v = state

    class ZeroDim(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.tensor(2.0))

    return {
        "batchnorm-overrides-load": lambda: with_sd(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))),
        "load-pre-hook": pre_hook,
        "extra-state": lambda: with_sd(Extra(2, 2)),
        "missing-key": lambda: with_sd(nn.Linear(2, 2), lambda sd: sd.pop("bias")),
        "unexpected-key": lambda: with_sd(nn.Linear(2, 2), lambda sd: sd.update(extra=torch.ones(1))),
        "shape-differs": lambda: with_sd(nn.Linear(2, 2), lambda sd: sd.update(bias=torch.ones(3))),
        "not-a-tensor": lambda: with_sd(nn.Linear(2, 2), lambda sd: sd.update(bias=[1.0, 2.0])),
        "old-1-element-for-0-dim": lambda: with_sd(ZeroDim(), lambda sd: sd.update(scale=torch.ones(1))),
        "parameter-for-a-buffer": lambda: with_sd(_Buffered(), lambda sd: sd.update(b=nn.Parameter(torch.ones(2)))),
    }


@pytest.mark.parametrize("case", list(_decline_cases()))
def test_declines_and_leaves_the_model_alone(case: str) -> None:
    model, sd = _decline_cases()[case]()
    before = layout(model)
    assert not assign_state_dict(model, sd)
    assert layout(model) == before


def test_declines_under_global_registration_hooks_and_swap_tensors() -> None:
    model = nn.Linear(2, 2)
    sd = model.state_dict()
    handle = nn.modules.module.register_module_parameter_registration_hook(lambda m, n, p: None)
    try:
        assert not assign_state_dict(model, sd)
    finally:
        handle.remove()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        assert not assign_state_dict(model, sd)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
    assert assign_state_dict(model, sd)


@pytest.mark.parametrize("single_layer", [True, False])
def test_meta_build_skips_values_in_one_or_two_mode_layers(single_layer: bool) -> None:
    """Both ways of building on meta give a model of meta tensors; value-only in-place ops and
    torch.randn are skipped, shape changes still happen."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 4)
            self.noise = nn.Parameter(torch.randn(5, 2) * 0.02)
            w = torch.empty(2, 6)
            w.normal_()
            w.unsqueeze_(0)  # not a value change: runs
            self.register_buffer("w", w)

    with building_on_meta(single_layer=single_layer):
        m = M()
    assert all(t.is_meta for t in [*m.parameters(), *m.buffers()])
    assert m.w.shape == (1, 2, 6) and m.noise.shape == (5, 2) and m.lin.weight.shape == (4, 3)
    assert torch.empty(1).device.type == "cpu"  # the context is gone afterwards
