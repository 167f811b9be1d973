"""ONNX exports with dynamic axes chosen per input (`dynamic_axes=`): a BERT-like model exported at
sequence length 16 runs at 24 in onnxruntime, each export is checked at a second size of its free
axes when it is saved, and wrong or unsatisfiable dynamic_axes are refused naming the input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import dataclasses

import zarchive
from zarchive.torchutil import ConfiguredModel, set_config_class


@dataclasses.dataclass
class EncoderConfig:
    vocab: int = 50


@set_config_class(EncoderConfig)
class TinyEncoder(ConfiguredModel[EncoderConfig]):
    """Token ids (batch, sequence) -> one vector per token, through a transformer encoder layer."""

    def __init__(self, config: EncoderConfig | None = None) -> None:
        super().__init__(config or EncoderConfig())
        self.embed = torch.nn.Embedding(self.config.vocab, 16)
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True, dropout=0.0)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.layer(self.embed(ids))


def _ids(batch: int, seq: int) -> torch.Tensor:
    return torch.randint(0, 50, (batch, seq), generator=torch.Generator().manual_seed(batch * 100 + seq))


AXES = {"input": {0: "batch", 1: "sequence"}, "output": {0: "batch", 1: "sequence"}}


def test_a_sequence_axis_is_free_and_checked_at_a_second_size(tmp_path: Path) -> None:
    model = TinyEncoder().eval()
    path = tmp_path / "enc.zarc"
    zarchive.ZArchive().save(model, path, export=("onnx",), example_inputs=(_ids(2, 16),), dynamic_axes=AXES)
    with zarchive.open(path) as arc:
        entry = arc.exports["onnx"]
        assert entry["dynamic_axes"]["input"] == {"0": "batch", "1": "sequence"}
        session = arc.onnx_session()
        for batch, seq in ((3, 24), (1, 5)):
            ids = _ids(batch, seq)
            (got,) = session.run(None, {"input": ids.numpy()})
            with torch.no_grad():
                want = model(ids).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_by_default_only_the_batch_axis_is_free(tmp_path: Path) -> None:
    model = TinyEncoder().eval()
    path = tmp_path / "enc.zarc"
    zarchive.ZArchive().save(model, path, export=("onnx",), example_inputs=(_ids(2, 16),))
    with zarchive.open(path) as arc:
        assert arc.exports["onnx"]["dynamic_axes"]["input"] == {"0": "batch"}
        with pytest.raises(Exception, match="(?i)dimension|shape"):
            arc.onnx_session().run(None, {"input": _ids(2, 24).numpy()})


@pytest.mark.parametrize(
    ("axes", "error", "says"),
    [
        (
            {"ids": {1: "sequence"}},
            zarchive.SaveError,
            "not an input or output of the export: they are 'input', 'output'",
        ),
        ({"input": {2: "x"}}, zarchive.SaveError, "names axis 2, but it has 2 dimensions"),
        ({"input": {"1": "sequence"}}, ValueError, "is not a non-negative int"),
        ({"input": {1: "not a name"}}, ValueError, "is not an identifier"),
        ([("input", {0: "b"})], TypeError, "must map input/output names"),
    ],
    ids=["unknown-name", "axis-out-of-range", "axis-as-text", "bad-dimension-name", "not-a-mapping"],
)
def test_wrong_dynamic_axes_are_refused_before_anything_is_written(tmp_path: Path, axes, error, says) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "enc.zarc"
    with pytest.raises(error, match=says):
        zarchive.ZArchive().save(
            TinyEncoder().eval(), path, export=("onnx",), example_inputs=(_ids(2, 16),), dynamic_axes=axes
        )
    assert not path.exists()


def test_dynamic_axes_need_an_onnx_export(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="applies to an ONNX export"):
        zarchive.ZArchive().save(TinyEncoder().eval(), tmp_path / "x.zarc", dynamic_axes=AXES)


@dataclasses.dataclass
class FixedConfig:
    length: int = 16


@set_config_class(FixedConfig)
class FixedLength(ConfiguredModel[FixedConfig]):
    """A model whose sequence length is fixed by a weight: its sequence axis cannot be free."""

    def __init__(self, config: FixedConfig | None = None) -> None:
        super().__init__(config or FixedConfig())
        self.mix = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mix(x.transpose(1, 2))


def test_an_axis_the_model_cannot_free_is_refused_at_save_time(tmp_path: Path) -> None:
    x = torch.randn(2, 16, 3)
    with pytest.raises(zarchive.SaveError, match=r"dynamic axes|another size") as info:
        zarchive.ZArchive().save(
            FixedLength().eval(), tmp_path / "f.zarc", export=("onnx",), example_inputs=(x,),
            dynamic_axes={"input": {0: "batch", 1: "length"}},
        )  # fmt: skip
    assert "length 15" in str(info.value)
    assert not (tmp_path / "f.zarc").exists()
