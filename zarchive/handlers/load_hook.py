"""ZANJ's `_load_state_dict_wrapper` hook: how a ConfiguredModel class (or the reading ZArchive's
custom_settings) takes over putting the archive's weights into the freshly built model.

A class that overrides `_load_state_dict_wrapper`, or a read whose custom_settings hold
"_load_state_dict_wrapper" keyword arguments, is built for real and given the state dict through
that method; the model then follows the weights to the device they were placed on (map_location).
Without either, handlers.torch_model assigns the weights itself (on the meta device, no copy).
"""

from __future__ import annotations

from typing import Any

import torch

from ..engine.context import LoadContext
from ..errors import ConfigMismatchError
from ..models.configured import ConfiguredModelBase


def overrides_wrapper(cls: type[Any]) -> bool:
    """Whether the class loads its weights through an `_load_state_dict_wrapper` of its own."""
    own = getattr(cls, "_load_state_dict_wrapper", None)
    return own is not None and own is not getattr(ConfiguredModelBase, "_load_state_dict_wrapper", None)


def wrapper_settings(ctx: LoadContext) -> dict[str, Any] | None:
    """The keyword arguments custom_settings["_load_state_dict_wrapper"] gives the hook (None: none)."""
    custom = ctx.settings.custom_settings
    kwargs = custom.get("_load_state_dict_wrapper") if isinstance(custom, dict) else None
    if kwargs is None:
        return None
    if not (isinstance(kwargs, dict) and all(isinstance(k, str) for k in kwargs)):
        raise ConfigMismatchError(
            'the ZArchive\'s custom_settings["_load_state_dict_wrapper"] must be a dict of keyword arguments',
            path=ctx.path_str,
        )
    return kwargs


def load_through_wrapper(
    model: Any, sd: dict[str, Any], kwargs: dict[str, Any], cls: type[Any], ctx: LoadContext
) -> Any:
    """The weights put in by the model's own `_load_state_dict_wrapper(sd, **kwargs)`."""
    try:
        model._load_state_dict_wrapper(sd, **kwargs)  # noqa: SLF001 - the hook a model class defines (ZANJ's name)
    except Exception as e:
        raise ConfigMismatchError(
            f"{cls.__qualname__}._load_state_dict_wrapper failed on the archive's weights: "
            f"{type(e).__name__}: {str(e)[:2000]}",
            path="/".join([p for p in (ctx.path_str, "state_dict") if p]),
        ) from e
    devices = {t.device for t in sd.values() if isinstance(t, torch.Tensor)}
    if len(devices) == 1:  # the weights were placed (map_location): the model follows them
        (device,) = devices
        if device.type != "meta":
            model = model.to(device)
    return model


__all__ = ["load_through_wrapper", "overrides_wrapper", "wrapper_settings"]
