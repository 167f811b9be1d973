"""A bound on the tensor memory that building a model may allocate.

When a ConfiguredModel cannot be built on the meta device, reading builds it for real from the
archive's config, and a config is data from the file: one asking a model for 30000 x 30000 layers
would make the reader allocate gigabytes for a 5 KB archive. Under `AllocationLimit(n)` every torch
constructor called from Python is charged its size before it runs (and other tensor-making calls
after), and the build stops with `AllocationExceeded` once more than `n` bytes were asked for.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# constructors whose first argument (or all positional arguments) is the size
_SIZED = {
    torch.empty, torch.zeros, torch.ones, torch.rand, torch.randn, torch.full, torch.empty_strided,
    torch.randint,
}  # fmt: skip

# other calls that make a new tensor of a size their arguments choose: charged once made
_MAKERS = {
    torch.arange, torch.linspace, torch.logspace, torch.eye, torch.tensor, torch.as_tensor, torch.randperm,
    torch.zeros_like, torch.ones_like, torch.empty_like, torch.full_like, torch.rand_like, torch.randn_like,
    torch.cat, torch.stack, torch.Tensor.new_empty, torch.Tensor.new_zeros, torch.Tensor.new_ones,
    torch.Tensor.new_full, torch.Tensor.repeat,
}  # fmt: skip


class AllocationExceeded(RuntimeError):
    pass


def _requested(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """Bytes a sized constructor call asks for (None when its size cannot be read from the call)."""
    if func is torch.randint:  # randint(high, size) or randint(low, high, size)
        size = kwargs.get("size", args[-1] if args else None)
    elif "size" in kwargs:
        size = kwargs["size"]
    elif args and isinstance(args[0], (tuple, list, torch.Size)):
        size = args[0]
    else:
        size = args if func is not torch.full else args[:1]
    try:
        dims: list[int] = [int(d) for d in size]  # type: ignore[union-attr]  # not iterable: TypeError
    except (TypeError, ValueError):
        return None
    numel = 1
    for d in dims:
        numel *= d
    dtype = kwargs.get("dtype")
    if not isinstance(dtype, torch.dtype):
        dtype = torch.int64 if func is torch.randint else torch.get_default_dtype()
    return max(numel, 0) * dtype.itemsize


class AllocationLimit(TorchFunctionMode):
    """Counts the bytes of tensors made while active; raises AllocationExceeded past `limit`."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.used = 0
        self.exceeded = False

    def _charge(self, n: int) -> None:
        self.used += n
        if self.used > self.limit:
            self.exceeded = True
            raise AllocationExceeded(f"more than {self.limit} bytes of tensors")

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _SIZED:
            n = _requested(func, tuple(args), kwargs)
            if n is not None:
                self._charge(n)
                return func(*args, **kwargs)
        out = func(*args, **kwargs)
        if func in _MAKERS and isinstance(out, torch.Tensor):
            self._charge(out.numel() * out.element_size())
        return out
