"""Exact round-trips of torch tensors: every dtype torch can create on CPU, views, parameters, shared
storage and tied weights, map_location and dtype casting, and a real module's state dict."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarchive
from zarchive.handlers.torch_types import DTYPES, ST_CODE

QUANTIZED = ("qint", "quint")


def random_tensor(dtype: torch.dtype, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """Random bit patterns of `dtype` (NaNs with payloads, subnormals, every byte value)."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    itemsize = torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * itemsize,), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(shape)


def _creatable() -> list[Any]:
    """Every dtype zarchive knows by name; those torch cannot create on CPU are skipped, saying why."""
    params = []
    for name, dtype in sorted(DTYPES.items()):
        marks = []
        if name.startswith(QUANTIZED):
            marks.append(pytest.mark.skip(reason=f"{name} is quantized: refused (test_quantized_dtypes_are_refused)"))
        else:
            try:
                random_tensor(dtype, (2, 3))
            except (RuntimeError, NotImplementedError, TypeError) as e:
                reason = str(e).splitlines()[0][:100]
                marks.append(pytest.mark.skip(reason=f"torch cannot create a CPU tensor of {name}: {reason}"))
        params.append(pytest.param(dtype, id=name, marks=marks))
    return params


CREATABLE = _creatable()


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("dtype", CREATABLE)
def test_every_dtype_round_trips_bitwise(dtype: torch.dtype, check_roundtrip) -> None:
    t = random_tensor(dtype, (7, 9))
    views = {
        "full": t,
        "transposed": t.T,
        "step": t[::2],
        "column": t[:, 3],
        "0-d": t[2, 5],
        "empty": t[:0],
        "empty-2d": torch.empty((0, 3), dtype=dtype),
    }
    for back in check_roundtrip(views):
        for name, v in back.items():
            assert v.is_contiguous() or name in ("transposed", "step", "column"), name


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_views_of_one_storage_still_share_after_loading(compress: bool, tmp_path) -> None:
    base = torch.arange(24, dtype=torch.float32)
    obj = {
        "first": base[:10],
        "grid": base[4:].view(4, 5),
        "t": base.view(4, 6).T,
        "every3": base[::3],
        "bits": base[2:].view(torch.int32),  # another dtype over the same bytes
    }
    path = tmp_path / "v.zarc"
    zarchive.save(obj, path, compress=compress)
    loaded = [zarchive.read(path), zarchive.read(path, lazy=False)]
    with zarchive.open(path) as arc:
        loaded.append(arc[""])
    for back in loaded:
        for k, v in obj.items():
            assert torch.equal(back[k], v) and back[k].stride() == v.stride(), k
        ptrs = {v.untyped_storage().data_ptr() for v in back.values()}
        assert len(ptrs) == 1
        back["first"][6] = -1.0  # base[6]: grid[0, 2], t[0, 1], every3[2]
        assert back["grid"][0, 2] == -1 and back["t"][0, 1] == -1 and back["every3"][2] == -1
        assert back["bits"][4] == torch.tensor(-1.0).view(torch.int32)


def test_same_tensor_twice_is_one_object_stored_once(tmp_path) -> None:
    w = torch.randn(5, 5)
    path = tmp_path / "s.zarc"
    zarchive.save({"a": w, "b": w, "nested": {"c": w}}, path, compress=False)
    with zarchive.open(path) as arc:
        root = arc.manifest["root"]
        assert root["a"]["key"] == root["b"]["key"] == root["nested"]["c"]["key"]
        assert "view" not in root["a"]
    back = zarchive.read(path)
    assert back["a"] is back["b"] is back["nested"]["c"]
    assert torch.equal(back["a"], w)


class TiedLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(11, 8)
        self.conv = torch.nn.Conv1d(8, 8, 3, padding=1)
        self.norm = torch.nn.BatchNorm1d(8)
        self.head = torch.nn.Linear(8, 11, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.register_buffer("scale", torch.tensor(0.5, dtype=torch.float64))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids).transpose(1, 2)
        x = self.norm(self.conv(x)).transpose(1, 2)
        return self.head(x) * self.scale


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_state_dict_of_a_real_module_loads_strictly_with_identical_outputs(compress: bool, tmp_path) -> None:
    torch.manual_seed(0)
    model = TiedLM()
    model.train()
    model(torch.randint(0, 11, (4, 7)))  # update BatchNorm running stats
    model.eval()
    sd = model.state_dict()
    path = tmp_path / "sd.zarc"
    zarchive.save({"model": sd}, path, compress=compress)
    back = zarchive.read(path)["model"]
    assert type(back) is OrderedDict and list(back) == list(sd)
    assert back._metadata == sd._metadata  # type: ignore[attr-defined]
    for k in sd:
        assert back[k].dtype == sd[k].dtype and torch.equal(back[k], sd[k]), k
    assert back["emb.weight"].untyped_storage().data_ptr() == back["head.weight"].untyped_storage().data_ptr()
    fresh = TiedLM()
    fresh.load_state_dict(back, strict=True)
    fresh.eval()
    ids = torch.randint(0, 11, (3, 5))
    with torch.no_grad():
        assert torch.equal(fresh(ids), model(ids))


def test_tied_parameters_of_a_module_stay_tied(tmp_path) -> None:
    model = TiedLM()
    path = tmp_path / "p.zarc"
    params = dict(model.named_parameters(remove_duplicate=False))
    zarchive.save(params, path)
    back = zarchive.read(path)
    assert back["emb.weight"] is back["head.weight"]
    assert isinstance(back["emb.weight"], torch.nn.Parameter) and back["emb.weight"].requires_grad


@pytest.mark.parametrize("requires_grad", [True, False])
def test_parameter_stays_a_parameter(requires_grad: bool, check_roundtrip) -> None:
    p = torch.nn.Parameter(torch.randn(3, 4), requires_grad=requires_grad)
    for back in check_roundtrip({"p": p}):
        assert type(back["p"]) is torch.nn.Parameter
        assert back["p"].requires_grad is requires_grad


def test_requires_grad_is_kept_on_plain_tensors(check_roundtrip) -> None:
    t = torch.randn(4, requires_grad=True)
    for back in check_roundtrip({"t": t, "no": torch.randn(2)}):
        assert type(back["t"]) is torch.Tensor and back["t"].requires_grad and back["t"].is_leaf
        assert not back["no"].requires_grad


def test_non_leaf_tensor_is_saved_by_value(check_roundtrip) -> None:
    x = torch.randn(3, requires_grad=True)
    y = x * 2
    (back, *_) = check_roundtrip(y)
    assert back.is_leaf and back.requires_grad


def test_conjugate_and_negative_views_store_the_values_they_show(tmp_path) -> None:
    """torch's lazy conj()/neg views share their base's storage with a flag: the stored values are
    the resolved ones, and the base beside its conjugate view keeps its own values."""
    x = torch.randn(3, dtype=torch.complex64)
    value = {"x": x, "conj": x.conj(), "neg": torch.ones(2)._neg_view(), "p": torch.nn.Parameter(x.conj())}
    zarchive.save(value, tmp_path / "c.zarc")
    got = zarchive.read(tmp_path / "c.zarc")
    for k, v in value.items():
        want = v.detach().resolve_conj().resolve_neg()
        assert torch.equal(got[k].detach(), want) and not got[k].is_conj() and not got[k].is_neg(), k
    assert isinstance(got["p"], torch.nn.Parameter)


@pytest.mark.parametrize(
    "map_location",
    [None, "cpu", torch.device("cpu"), {"cpu": "cpu"}, "saved"],
    ids=["None", "cpu-str", "cpu-device", "dict", "saved"],
)
def test_map_location_to_cpu(map_location: Any, tmp_path) -> None:
    obj = {"w": torch.randn(3, 3), "p": torch.nn.Parameter(torch.randn(2)), "i": torch.arange(5)}
    path = tmp_path / "m.zarc"
    zarchive.save(obj, path)
    back = zarchive.read(path, map_location=map_location)
    for k, v in obj.items():
        assert back[k].device.type == "cpu" and torch.equal(back[k], v)
    assert type(back["p"]) is torch.nn.Parameter


@pytest.mark.parametrize("map_location", ["meta", torch.device("meta"), {"cpu": "meta"}], ids=["str", "device", "dict"])
def test_map_location_meta_gives_shapes_and_dtypes_only(map_location: Any, tmp_path) -> None:
    base = torch.arange(12.0)
    obj = {
        "w": torch.randn(3, 4, dtype=torch.bfloat16),
        "v": base[2:].view(2, 5),
        "p": torch.nn.Parameter(torch.ones(2)),
    }
    path = tmp_path / "m.zarc"
    zarchive.save(obj, path)
    back = zarchive.read(path, map_location=map_location)
    with zarchive.open(path) as arc:
        one = arc.get("w", map_location=map_location)
    for k, v in obj.items():
        assert back[k].device.type == "meta", k
        assert back[k].shape == v.shape and back[k].dtype == v.dtype, k
    assert one.device.type == "meta" and one.shape == (3, 4)
    assert type(back["p"]) is torch.nn.Parameter


def test_map_location_dict_leaves_unmapped_devices_alone(tmp_path) -> None:
    path = tmp_path / "m.zarc"
    zarchive.save({"w": torch.ones(2)}, path)
    back = zarchive.read(path, map_location={"cuda:0": "cpu"})
    assert back["w"].device.type == "cpu"


def test_bad_map_location_is_a_format_error(tmp_path) -> None:
    path = tmp_path / "m.zarc"
    zarchive.save({"w": torch.ones(2)}, path)
    with pytest.raises(zarchive.ZArchiveError, match="device"):
        zarchive.read(path, map_location="no-such-device")


def test_dtype_casts_floating_tensors_only(tmp_path) -> None:
    obj = {
        "f32": torch.randn(3),
        "f64": torch.randn(3, dtype=torch.float64),
        "bf16": torch.randn(3).bfloat16(),
        "i64": torch.arange(3),
        "u8": torch.arange(3, dtype=torch.uint8),
        "bool": torch.tensor([True, False]),
        "c64": torch.randn(3, dtype=torch.complex64),
        "p": torch.nn.Parameter(torch.randn(2)),
    }
    path = tmp_path / "d.zarc"
    zarchive.save(obj, path)
    back = zarchive.read(path, dtype=torch.float16)
    for k in ("f32", "f64", "bf16", "p"):
        assert back[k].dtype == torch.float16, k
        assert torch.equal(back[k], obj[k].detach().to(torch.float16)), k
    for k in ("i64", "u8", "bool", "c64"):
        assert back[k].dtype == obj[k].dtype and torch.equal(back[k], obj[k]), k
    assert type(back["p"]) is torch.nn.Parameter and back["p"].requires_grad


def test_long_list_of_tensors(check_roundtrip) -> None:
    """Tensor nodes are completed at finalize time, after a .jsonl member would have been encoded."""
    tensors = [torch.full((3,), float(i)) for i in range(300)]
    check_roundtrip(tensors)
    check_roundtrip({"xs": tensors[:10], "ys": tuple(tensors[:10])}, external_list_threshold=3)


def test_tensors_are_grouped_by_top_level_key(tmp_path) -> None:
    path = tmp_path / "g.zarc"
    zarchive.save(
        {"model": {"a": torch.randn(64, 64), "b": torch.randn(64)}, "opt": {"m": torch.randn(64, 64)}},
        path,
        compress=False,
    )
    with zarchive.open(path) as arc:
        assert sorted(arc.members) == ["manifest.json", "model.safetensors", "opt.safetensors"]
        assert arc.manifest["root"]["model"]["a"]["key"] == "a"


def test_loaded_tensors_are_writable_and_do_not_touch_the_file(tmp_path) -> None:
    path = tmp_path / "w.zarc"
    w = torch.randn(64, 64)
    zarchive.save({"w": w}, path, compress=False)
    before = path.read_bytes()
    back = zarchive.read(path)
    back["w"].add_(1.0)
    assert path.read_bytes() == before
    assert torch.equal(zarchive.read(path)["w"], w)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: torch.empty(3, device="meta"), "meta"),
        (lambda: torch.randn(4, 4).to_sparse(), "sparse|to_dense"),
        (lambda: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8), "quantized"),
    ],
    ids=["meta", "sparse", "quantized"],
)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_unsaveable_tensors_are_refused_with_their_path(make: Any, match: str, tmp_path) -> None:
    with pytest.raises(zarchive.SaveError, match=match) as info:
        zarchive.save({"layer": {"w": make()}}, tmp_path / "x.zarc")
    assert info.value.path == "layer/w"


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("dtype", [d for n, d in DTYPES.items() if n.startswith(QUANTIZED)], ids=str)
def test_quantized_dtypes_are_refused(dtype: torch.dtype, tmp_path) -> None:
    with pytest.raises(zarchive.SaveError, match="quantized"):
        zarchive.save({"q": torch.empty(0, dtype=dtype)}, tmp_path / "q.zarc")


def test_every_safetensors_code_matches_the_dtype_size() -> None:
    from zarchive.container.safetensors_layout import ITEMSIZE

    for dtype, (code, raw) in ST_CODE.items():
        assert not raw and ITEMSIZE[code] == torch.empty(0, dtype=dtype).element_size(), dtype


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
def test_cuda_tensors_and_map_location(tmp_path) -> None:
    base = torch.arange(24.0, device="cuda")
    obj = {
        "w": torch.randn(4, 4, device="cuda"),
        "p": torch.nn.Parameter(torch.randn(3, device="cuda")),
        "first": base[:10],
        "grid": base[4:].view(4, 5),
        "host": torch.ones(2),
    }
    path = tmp_path / "cuda.zarc"
    zarchive.save(obj, path)
    with zarchive.open(path) as arc:
        assert arc.manifest["root"]["w"]["device"] == "cuda:0" and arc.manifest["root"]["host"]["device"] == "cpu"

    def check(back: dict[str, Any], device: dict[str, str]) -> None:
        for k, v in obj.items():
            assert back[k].device.type == device[k], k
            assert torch.equal(back[k].cpu(), v.detach().cpu()), k
        assert type(back["p"]) is torch.nn.Parameter and back["p"].requires_grad

    everywhere_cpu = {k: "cpu" for k in obj}
    check(zarchive.read(path), everywhere_cpu)
    check(zarchive.read(path, map_location={"cuda:0": "cpu"}), everywhere_cpu)
    check(zarchive.read(path, map_location={"cuda": "cpu"}), everywhere_cpu)
    check(zarchive.read(path, map_location="cuda"), {k: "cuda" for k in obj})
    saved = zarchive.read(path, map_location="saved")
    check(saved, {**{k: "cuda" for k in obj}, "host": "cpu"})
    assert saved["first"].untyped_storage().data_ptr() == saved["grid"].untyped_storage().data_ptr()
    saved["first"][6] = -1
    assert saved["grid"][0, 2] == -1


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_tensor_paths_that_read_alike_or_clash_with_format_names(compress: bool, check_roundtrip) -> None:
    """Dict keys 1 and '1' give the same object path; '__metadata__' and '$header' are names the
    safetensors header and the checksum table use themselves."""
    obj = {
        "m": {1: torch.ones(3), "1": torch.zeros(3), "__metadata__": torch.full((2,), 5.0), "$header": torch.arange(4)},
        "n": {"a/b": torch.ones(2), "a": {"b": torch.zeros(2)}, "~": torch.ones(1), "~0": torch.zeros(1)},
    }
    check_roundtrip(obj, compress=compress)


_KEYS = st.sampled_from([0, 1, "1", "a", "a/b", "~", "~2", "", "$header", "__metadata__", (1, "a"), "1,a"])
_TENSOR_DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.uint16, torch.float8_e5m2]


@st.composite
def _tensor_leaves(draw: st.DrawFn) -> Any:
    dtype = draw(st.sampled_from(_TENSOR_DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    t = random_tensor(dtype, shape, seed=draw(st.integers(0, 1000)))
    how = draw(st.sampled_from(["plain", "param", "transposed", "step"]))
    if how == "param" and dtype.is_floating_point:
        return torch.nn.Parameter(t)
    if how == "transposed" and t.ndim >= 2:
        return t.transpose(0, 1)
    if how == "step" and t.ndim >= 1:
        return t[::2]
    return t


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    obj=st.recursive(
        _tensor_leaves() | st.integers(-3, 3),
        lambda kids: st.dictionaries(_KEYS, kids, max_size=4) | st.lists(kids, max_size=3),
        max_leaves=12,
    ),
    compress=st.booleans(),
)
def test_nested_tensors_round_trip(obj: Any, compress: bool, check_roundtrip) -> None:
    check_roundtrip({"model": obj, "other": obj}, compress=compress)


# --- memory formats: what torch.save keeps, kept ---
@pytest.mark.parametrize("compress_weights", [False, True], ids=["plain", "compressed-weights"])
def test_channels_last_and_transposed_tensors_keep_their_strides(tmp_path, compress_weights: bool) -> None:
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8)).to(memory_format=torch.channels_last)
    sd = dict(conv.state_dict())
    sd["transposed"] = torch.randn(6, 5)[1:5].t()  # dense in memory, not in C order, inside a larger storage
    sd["slice"] = torch.randn(6, 5)[:, 1:3]  # not dense: stored as its values, as before
    path = tmp_path / "cl.zarc"
    zarchive.save(sd, path, compress_weights=compress_weights)
    for back in (zarchive.read(path), zarchive.read(path, lazy=False), zarchive.read(path, mmap=True)):
        for name, t in sd.items():
            assert torch.equal(back[name], t), name
            if name != "slice":
                assert back[name].stride() == t.stride(), (name, back[name].stride(), t.stride())
        assert back["0.weight"].is_contiguous(memory_format=torch.channels_last)
    with zarchive.open(path) as arc:
        assert arc["0.weight"].stride() == sd["0.weight"].stride()
        assert arc.node("transposed")["view"] == {"storage_offset": 0, "stride": [1, 5]}
        assert "view" not in arc.node("slice")
    reloaded = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
    reloaded.load_state_dict({k: v for k, v in zarchive.read(path).items() if k not in ("transposed", "slice")})


def test_a_channels_last_state_dict_reads_as_torch_load_keeps_it(tmp_path) -> None:
    model = torch.nn.Conv2d(4, 16, 3).to(memory_format=torch.channels_last)
    torch.save(model.state_dict(), tmp_path / "m.pt")
    zarchive.save(model.state_dict(), tmp_path / "m.zarc")
    theirs = torch.load(tmp_path / "m.pt", weights_only=True)
    ours = zarchive.read(tmp_path / "m.zarc")
    assert {k: v.stride() for k, v in ours.items()} == {k: v.stride() for k, v in theirs.items()}
