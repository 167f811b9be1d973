"""Code of a reading program that files can make a read run: a class saved through a ZANJ serializer
and read back by a registered loader, a SerializableDataclass with field functions, and a handler
registered from outside zarchive. Used by tests/test_audit_complete.py and its traced child process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from muutils.json_serialize import SerializableDataclass, serializable_dataclass, serializable_field

import zarchive
from zarchive.handlers.base import Handler

BUILT: list[str] = []  # what the reading program's code built or ran, in order


class Money:
    def __init__(self, cents: int, currency: str) -> None:
        BUILT.append("Money")
        self.cents, self.currency = cents, currency

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and (self.cents, self.currency) == (other.cents, other.currency)


def money_check(item: Any, path: Any = None, zanj: Any = None) -> bool:
    BUILT.append("money_check")
    return isinstance(item, dict) and item.get("__muutils_format__") == "Money"


def money_load(item: Any, path: Any = None, zanj: Any = None) -> Money:
    BUILT.append("money_load")
    return Money(int(item["cents"]), str(item["currency"]))


def money_serializer() -> Any:
    from muutils.json_serialize.json_serialize import SerializerHandler

    return SerializerHandler(
        check=lambda self, obj, path: isinstance(obj, Money),
        serialize_func=lambda self, obj, path: {
            "__muutils_format__": "Money",
            "cents": obj.cents,
            "currency": obj.currency,
        },
        uid="Money",
        desc="money",
    )


def twice(x: Any) -> Any:
    BUILT.append("twice")
    return x


@serializable_dataclass
class Budget(SerializableDataclass):
    limit: int = serializable_field(default=1, deserialize_fn=twice)
    name: str = serializable_field(default="b")


class Point:
    def __init__(self, x: int, y: int) -> None:
        BUILT.append("Point")
        self.x, self.y = x, y

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


class PointHandler(Handler):
    """A handler from outside zarchive (as a plugin or the program would register it)."""

    name = "audit_fixtures.point"

    def accepts(self, cls: type) -> bool:
        return cls is Point

    def save(self, obj: Point, ctx: Any) -> Any:
        return {"$type": self.name, "xy": [obj.x, obj.y]}

    def load(self, node: dict[str, Any], ctx: Any) -> Point:
        BUILT.append("PointHandler.load")
        x, y = node["xy"]
        return Point(int(x), int(y))


def install() -> None:
    """Register the loader and the handler (process-wide, as a program would)."""
    from zarchive.compat.zanj import LoaderHandler, register_loader_handler

    register_loader_handler(LoaderHandler(check=money_check, load=money_load, uid="Money", source_pckg="tests"))
    zarchive.register_handler(PointHandler(), overwrite=True)


def uninstall() -> None:
    from zarchive.compat.zanj.loading import LOADER_MAP
    from zarchive.formats.zanj.format_loaders import unregister_format_loader

    LOADER_MAP.pop("Money", None)
    unregister_format_loader("Money")
    zarchive.unregister_handler(PointHandler.name)


def write_files(out: Path) -> list[Path]:
    """One file of each kind that makes a read run the code above, and foreign files (which name no
    code): a .zarc with "zanj.custom" nodes, a real ZANJ file with a custom format and a
    SerializableDataclass, a .zarc with a third-party handler's nodes, a .pt, a .safetensors, a .npz."""
    import torch
    from safetensors.torch import save_file

    from zarchive.compat.zanj import ZANJ

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    z = ZANJ(handlers_pre=(money_serializer(),))
    paths.append(Path(z.save({"price": Money(250, "EUR"), "l": [Money(1, "USD")]}, out / "custom.zanj")))
    import zanj as real_zanj

    real = real_zanj.ZANJ(handlers_pre=(money_serializer(),))
    paths.append(Path(real.save({"m": Money(7, "GBP"), "b": Budget(limit=3)}, str(out / "real.zanj"))))
    zarchive.save({"p": Point(1, 2), "q": [Point(3, 4)]}, out / "handler.zarc")
    paths.append(out / "handler.zarc")
    sd = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.zeros(3)}
    torch.save(sd, out / "weights.pt")
    save_file(sd, str(out / "weights.safetensors"))
    np.savez(out / "arrays.npz", a=np.arange(4), b=np.ones((2, 2)))
    paths += [out / "weights.pt", out / "weights.safetensors", out / "arrays.npz"]
    BUILT.clear()
    return paths
