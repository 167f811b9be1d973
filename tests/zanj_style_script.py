"""A script written for ZANJ, in ZANJ's idioms (tests/test_compat_zanj_dropin.py runs it as it is,
with the real `zanj`, and with its imports changed to `zarchive.compat.zanj`).

    python zanj_style_script.py DIR both    # save everything to DIR and read it back
    python zanj_style_script.py DIR write   # only save
    python zanj_style_script.py DIR read    # only read what `write` saved (possibly another ZANJ)

Prints "ALL OK" at the end; any failed check raises.
"""

import os
import sys
import warnings
import zipfile

import numpy as np
import torch
from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field
from muutils.json_serialize.json_serialize import SerializerHandler
from zanj import ZANJ
from zanj.loading import LoaderHandler, register_loader_handler
from zanj.torchutil import (
    ConfigMismatchException,
    ConfiguredModel,
    assert_model_cfg_equality,
    assert_model_exact_equality,
    get_module_device,
    num_params,
    set_config_class,
)

warnings.filterwarnings("ignore", category=DeprecationWarning, message="__array__ implementation")


@serializable_dataclass
class MLPConfig(SerializableDataclass):
    d_in: int = serializable_field(default=4)
    d_hidden: int = serializable_field(default=300)
    d_out: int = serializable_field(default=3)


@set_config_class(MLPConfig)
class MLP(ConfiguredModel[MLPConfig]):
    def __init__(self, config: MLPConfig):
        super().__init__(config)
        self.fc1 = torch.nn.Linear(config.d_in, config.d_hidden)
        self.fc2 = torch.nn.Linear(config.d_hidden, config.d_out)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


LOADED_THROUGH_WRAPPER = []


@set_config_class(MLPConfig)
class WrappedMLP(ConfiguredModel[MLPConfig]):
    """Uses ZANJ's hook to see the weights as they are loaded."""

    def __init__(self, config: MLPConfig):
        super().__init__(config)
        self.fc1 = torch.nn.Linear(config.d_in, config.d_out)

    def _load_state_dict_wrapper(self, state_dict, **kwargs):
        LOADED_THROUGH_WRAPPER.append(sorted(state_dict))
        return self.load_state_dict(state_dict)


class Point:
    """A type of our own, taught to ZANJ with a serializer and a loader."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


POINT_SERIALIZER = SerializerHandler(
    check=lambda self, obj, path: isinstance(obj, Point),
    serialize_func=lambda self, obj, path: {"__muutils_format__": "Point", "x": obj.x, "y": obj.y},
    uid="Point",
    desc="points as x and y",
)
register_loader_handler(
    LoaderHandler(
        check=lambda json_item, path=None, z=None: (
            isinstance(json_item, dict) and json_item.get("__muutils_format__") == "Point"
        ),
        load=lambda json_item, path=None, z=None: Point(json_item["x"], json_item["y"]),
        uid="Point",
        source_pckg="zanj_style_script",
        desc="points",
    )
)


def make_data():
    torch.manual_seed(0)
    return {
        "embeddings": np.linspace(0, 1, 600, dtype=np.float32).reshape(200, 3),
        "small": np.arange(5),
        "config": MLPConfig(d_hidden=7),
        "where": Point(1, 2),
        "losses": [0.5 / (i + 1) for i in range(300)],
        "name": "run-1",
    }


def make_model():
    torch.manual_seed(0)
    model = MLP(MLPConfig())
    model.training_records = {"loss": [1.0, 0.5, 0.25], "epochs": 3}
    return model


def write(d):
    z = ZANJ(compress=zipfile.ZIP_DEFLATED, handlers_pre=(POINT_SERIALIZER,))
    path = z.save(make_data(), os.path.join(d, "data"))
    assert path.endswith(".zanj") and os.path.isfile(path), path
    make_model().save(os.path.join(d, "model.zanj"))
    torch.manual_seed(1)
    WrappedMLP(MLPConfig(d_out=2)).save(os.path.join(d, "wrapped.zanj"))
    ZANJ(compress=False).save({"stored": np.arange(10)}, os.path.join(d, "stored.zanj"))


def read(d):
    z = ZANJ()
    data = z.read(os.path.join(d, "data.zanj"))
    expected = make_data()
    assert np.array_equal(data["embeddings"], expected["embeddings"])
    assert list(np.asarray(data["small"])) == [0, 1, 2, 3, 4]
    assert data["config"] == MLPConfig(d_hidden=7)
    assert data["where"] == Point(1, 2)
    assert list(data["losses"]) == expected["losses"]
    assert data["name"] == "run-1"

    model = MLP.read(os.path.join(d, "model.zanj"))
    assert isinstance(model, MLP)
    assert_model_exact_equality(model, make_model())
    assert model.training_records == {"loss": [1.0, 0.5, 0.25], "epochs": 3}
    x = torch.randn(2, 4)
    assert torch.equal(model(x), make_model()(x))
    again = ZANJ().read(os.path.join(d, "model.zanj"))
    assert isinstance(again, MLP) and again.training_records["epochs"] == 3

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old_way = MLP.load_file(os.path.join(d, "model.zanj"))
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert_model_cfg_equality(old_way, model)

    LOADED_THROUGH_WRAPPER.clear()
    wrapped = WrappedMLP.read(os.path.join(d, "wrapped.zanj"))
    assert LOADED_THROUGH_WRAPPER == [["fc1.bias", "fc1.weight"]], LOADED_THROUGH_WRAPPER
    assert wrapped.fc1.weight.shape == (2, 4)

    assert list(ZANJ().read(os.path.join(d, "stored.zanj"))["stored"]) == list(range(10))

    try:
        ZANJ().read(os.path.join(d, "no-such-file.zanj"))
    except FileNotFoundError:
        pass
    else:
        raise AssertionError("reading a missing file must raise FileNotFoundError")


def check_utilities():
    model = make_model()
    same, device = get_module_device(model)
    assert same and device == torch.device("cpu")
    expected = 4 * 300 + 300 + 300 * 3 + 3
    assert num_params(model) == expected == model.num_params()
    model.fc2.weight.requires_grad_(False)
    assert num_params(model) == expected - 900
    assert num_params(model, only_trainable=False) == expected
    try:
        assert_model_cfg_equality(make_model(), MLP(MLPConfig(d_out=5)))
    except ConfigMismatchException as e:
        assert isinstance(e, ValueError)
        assert e.diff == {"d_out": {"self": 3, "other": 5}}, e.diff
    else:
        raise AssertionError("different configs must raise ConfigMismatchException")

    class NoConfig(ConfiguredModel[MLPConfig]):
        pass

    try:
        NoConfig(MLPConfig())
    except NotImplementedError:
        pass
    else:
        raise AssertionError("a ConfiguredModel without a config class must raise NotImplementedError")


if __name__ == "__main__":
    folder, mode = sys.argv[1], sys.argv[2]
    if mode in ("write", "both"):
        write(folder)
    if mode in ("read", "both"):
        read(folder)
    check_utilities()
    print("ALL OK")
