"""omegaconf (Hydra) configs, saved as the plain dicts and lists they hold.

A DictConfig or ListConfig is written exactly as `OmegaConf.to_container(cfg, resolve=True)` would be:
interpolations are resolved (the values the run actually used), missing values stay the string "???",
structured configs become dicts. It reads back as a plain dict or list, so any reader, with or without
omegaconf, gets the same value; `OmegaConf.create(value)` turns it into a config again. An
interpolation that cannot be resolved is a SaveError naming its object path.

omegaconf is never imported here: a config object can only exist once omegaconf is loaded.
"""

from __future__ import annotations

import sys
from typing import Any

from ..engine.context import LoadContext, Node, SaveContext
from ..nodes.classes import OmegaConfSchema
from .base import Handler


def _omegaconf() -> Any:
    return sys.modules.get("omegaconf")


def is_config(obj: Any) -> bool:
    oc = _omegaconf()
    return oc is not None and isinstance(obj, (oc.DictConfig, oc.ListConfig))


def to_plain(obj: Any) -> Any:
    """A config as plain Python containers; anything else unchanged."""
    if not is_config(obj):
        return obj
    oc = _omegaconf()
    return oc.OmegaConf.to_container(obj, resolve=True, throw_on_missing=False)


class OmegaConfHandler(OmegaConfSchema, Handler):
    """DictConfig and ListConfig, saved as their resolved plain containers."""

    name = "omegaconf"

    def accepts(self, cls: type) -> bool:
        oc = _omegaconf()
        return oc is not None and isinstance(cls, type) and issubclass(cls, (oc.DictConfig, oc.ListConfig))

    def save(self, obj: Any, ctx: SaveContext) -> Node:
        oc = _omegaconf()
        try:
            plain = to_plain(obj)
        except oc.errors.OmegaConfBaseException as e:  # an unresolvable interpolation, a missing resolver
            raise ctx.error(
                f"the omegaconf config cannot be resolved ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                "configs are saved with their interpolations resolved"
            ) from None
        return ctx.save(plain)

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any:
        raise ctx.error("'omegaconf' is not a node type: configs are stored as plain dicts and lists")
