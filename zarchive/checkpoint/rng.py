"""Random-number-generator states for checkpoints: capture every one, restore every one.

A run resumes bit for bit only if every generator it draws from continues where it stopped: Python's
`random`, numpy's global (legacy) generator, torch's CPU generator, each CUDA device's generator, and
the generator objects the program made itself (`np.random.Generator`, `torch.Generator`,
`random.Random`, ...). States are kept in their native forms (tuples of ints, a uint32 array, dicts
with 128-bit ints, uint8 tensors), which the archive stores exactly, so they also read back with a plain
`zarchive.read`.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ..errors import FormatError, MemberNotFoundError

# random.Random, np.random.Generator, np.random.BitGenerator, np.random.RandomState or torch.Generator
GeneratorLike = Any


def capture_rng(generators: Mapping[str, GeneratorLike] | None = None) -> dict[str, Any]:
    """The current states of the global generators (and of `generators`), without touching them."""
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    # Only when CUDA is in use: asking for the states would otherwise start CUDA just to save them.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = list(torch.cuda.get_rng_state_all())
    if generators:
        states["generators"] = {_name(k): generator_state(g, k) for k, g in generators.items()}
    return states


def _name(key: Any) -> str:
    if not isinstance(key, str) or not key or key.startswith("$"):
        raise TypeError(f"generator names must be non-empty strings not starting with '$', not {key!r}")
    return key


def generator_state(g: GeneratorLike, name: str = "") -> Any:
    """The state of one generator object, in the form its own setter takes back."""
    if isinstance(g, np.random.Generator):
        return g.bit_generator.state
    if isinstance(g, np.random.BitGenerator):
        return g.state
    if isinstance(g, np.random.RandomState):
        return g.get_state()
    if isinstance(g, torch.Generator):
        return g.get_state()
    if isinstance(g, random.Random):
        return g.getstate()
    raise TypeError(
        f"generator {name!r} is a {type(g).__qualname__}: expected random.Random, np.random.Generator, "
        "np.random.BitGenerator, np.random.RandomState or torch.Generator"
    )


def set_generator_state(g: GeneratorLike, state: Any, path: str) -> None:
    """Put `state` back into generator `g`; a FormatError at `path` if it is not a state of g's kind."""
    try:
        if isinstance(g, np.random.Generator):
            g.bit_generator.state = state
        elif isinstance(g, np.random.BitGenerator):
            g.state = state
        elif isinstance(g, np.random.RandomState):
            g.set_state(state)
        elif isinstance(g, torch.Generator):
            g.set_state(_byte_tensor(state, path))
        elif isinstance(g, random.Random):
            g.setstate(state)
        else:
            raise TypeError(f"cannot restore a {type(g).__qualname__}")
    except (TypeError, ValueError, RuntimeError, KeyError, IndexError) as e:
        raise FormatError(
            f"the saved state does not fit the live {type(g).__qualname__}: {type(e).__name__}: {str(e)[:200]}",
            path=path,
        ) from e


def _byte_tensor(state: Any, path: str) -> torch.Tensor:
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.dim() != 1:
        raise FormatError("a torch generator state must be a 1-d uint8 tensor", path=path)
    return state.detach().to("cpu").contiguous()


def restore_rng(states: Any, generators: Mapping[str, GeneratorLike] | None = None, *, path: str = "rng") -> None:
    """Set every generator recorded in `states` (as capture_rng made it) back to its saved state."""
    if not isinstance(states, dict):
        raise FormatError("the RNG states must be a dict", path=path)
    for key, setter in (("python", random.setstate), ("numpy", np.random.set_state)):
        if key in states:
            _call(setter, states[key], f"{path}/{key}")
    if "torch" in states:
        _call(torch.set_rng_state, _byte_tensor(states["torch"], f"{path}/torch"), f"{path}/torch")
    if "cuda" in states:
        _restore_cuda(states["cuda"], f"{path}/cuda")
    if generators:
        saved = states.get("generators")
        saved = saved if isinstance(saved, dict) else {}
        for name, g in generators.items():
            if name not in saved:
                raise MemberNotFoundError(
                    f"the checkpoint has no state for generator {name!r}", path=f"{path}/generators"
                )
            set_generator_state(g, saved[name], f"{path}/generators/{name}")


def _call(setter: Any, state: Any, path: str) -> None:
    try:
        setter(state)
    except (TypeError, ValueError, RuntimeError, KeyError, IndexError) as e:
        raise FormatError(f"cannot restore this RNG state: {type(e).__name__}: {str(e)[:200]}", path=path) from e


def _restore_cuda(states: Any, path: str) -> None:
    if not isinstance(states, list):
        raise FormatError("CUDA RNG states must be a list (one per device)", path=path)
    if not torch.cuda.is_available():
        warnings.warn(
            f"the checkpoint holds CUDA RNG states for {len(states)} device(s) but CUDA is not available: "
            "they were not restored (pass restore_rng=False to silence this)",
            stacklevel=3,
        )
        return
    count = torch.cuda.device_count()
    if count != len(states):
        warnings.warn(
            f"the checkpoint holds CUDA RNG states for {len(states)} device(s), this machine has {count}: "
            f"restoring the first {min(count, len(states))}",
            stacklevel=3,
        )
    for i, state in enumerate(states[:count]):
        _call(lambda s, i=i: torch.cuda.set_rng_state(s, i), _byte_tensor(state, f"{path}/{i}"), f"{path}/{i}")
