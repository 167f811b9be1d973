"""How the tensors of one save are laid out into `.safetensors` members.

Every tensor under the same top-level key of the saved object (e.g. all of `model/...`) lands in a
member named after that key, keyed by the rest of its object path; a group of more than
MEMBER_ENTRIES tensors fills several members (`model.safetensors`, `model~2.safetensors`, ...), so
fetching one tensor parses one bounded header. Tensors that share storage are stored once: identical
views point at one entry; different views of one storage point at one raw-bytes entry plus their own
offset/shape/stride (the manifest node's "view"). The tensor handler (torch_tensor) makes the nodes;
this module fills in their "$ref" and "key" once the whole object has been walked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..container.archive_writer import HEADER_LABEL, CompressHint, Part
from ..container.safetensors_layout import MAX_HEADER_BYTES, layout
from ..engine.context import SaveContext
from ..engine.objpath import join_path
from ..errors import SaveError
from .torch_types import ST_CODE

ROOT_GROUP_MEMBER = "tensors"
# Entries per member. A lazy fetch parses its member's whole header in Python (~2 us an entry), so
# 5,000 small tensors in one member cost ~11 ms before the first byte; in members of 256, ~0.6 ms.
MEMBER_ENTRIES = 256
_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_NUMPY_DTYPES = frozenset({
    torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8,
    torch.uint8, torch.bool, torch.complex64, torch.complex128,
})  # fmt: skip


@dataclass
class _Saved:
    tensor: torch.Tensor
    path: list[str]
    node: dict[str, Any]


@dataclass
class _Entry:
    """One entry of a safetensors member: a tensor's contiguous values, or a raw storage."""

    key: str
    source: torch.Tensor  # what to write (contiguous at write time)
    st_code: str
    shape: tuple[int, ...]
    floating: bool = False  # float/complex data: kept uncompressed so it can be mapped (or compress_weights)
    nbytes: int = 0
    width: int = 1  # byte-group width under compress_weights (byte_groups): a float component's size
    nodes: list[dict[str, Any]] = field(default_factory=list)  # the manifest nodes that read it


@dataclass
class _Group:
    name_hint: list[str]
    entries: list[_Entry] = field(default_factory=list)
    keys: set[str] = field(default_factory=lambda: {"__metadata__", HEADER_LABEL})  # taken by the format

    def unique_key(self, key: str) -> str:
        """`key`, or `key~2`, `key~3`...: two object paths can read alike (dict keys 1 and '1'), and
        a safetensors header must not hold a key twice. An escaped path never contains '~2'."""
        candidate, n = key, 2
        while candidate in self.keys:
            candidate, n = f"{key}~{n}", n + 1
        self.keys.add(candidate)
        return candidate


def _as_bytes(t: torch.Tensor) -> memoryview:
    """The tensor's bytes (CPU, contiguous) as a flat memoryview, without copying where possible."""
    t = t.detach()
    if t.device.type == "cpu" and t.dtype in _NUMPY_DTYPES and t.numel() and t.is_contiguous():
        # flat first: numpy 1.x holds at most 32 dimensions, a tensor up to 64 (same bytes either way)
        view = memoryview(t.reshape(-1).numpy())  # type: ignore[arg-type]  # numpy's stubs: no __buffer__ before 3.12
        if view.c_contiguous:
            return view.cast("B")
    if t.numel() == 0:
        return memoryview(b"")
    return memoryview(_flat_bytes(t.cpu()).numpy())  # type: ignore[arg-type]  # (as above)


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """The bytes of a non-empty tensor as a flat contiguous uint8 tensor on its own device."""
    if not t.is_contiguous():
        # copy as same-sized integers: bit-exact, and works for dtypes torch cannot copy (int1..7, bits8)
        carrier = _SAME_SIZE_INT.get(t.element_size())
        t = (t.view(carrier) if carrier is not None and t.dtype != carrier else t).contiguous()
    flat = t.reshape(-1)
    if flat.stride(0) != 1:  # one element can carry any stride and still count as contiguous
        flat = flat.as_strided((flat.numel(),), (1,))
    return flat if flat.dtype == torch.uint8 else flat.view(torch.uint8)


def _source_bytes(t: torch.Tensor) -> memoryview | torch.Tensor:
    """A host tensor's bytes as `_as_bytes` gives them; an accelerator's as a flat uint8 tensor left
    on its device (a capture copies it into pinned memory, see MemberPlan.sources)."""
    t = t.detach()
    if t.device.type == "cpu" or t.numel() == 0:
        return _as_bytes(t)
    return _flat_bytes(t)


def _utf8_key(key: str) -> str:
    """`key` as text a safetensors header can hold (UTF-8): a lone surrogate from a dict key becomes
    its escape, `\\udXXX` (the entry key is only a label; the manifest node names it, and
    `_Group.unique_key` keeps it unique)."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return key.encode("utf-8", "backslashreplace").decode("utf-8")
    return key


def _is_floating(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def _group_width(dtype: torch.dtype) -> int:
    """Bytes of one float component (a complex number has two), or 1: see byte_groups."""
    if dtype.is_complex:
        return dtype.itemsize // 2
    return dtype.itemsize if dtype.is_floating_point else 1


def _dense_not_in_order(t: torch.Tensor) -> bool:
    """Whether `t`'s elements fill one block of memory without gaps or overlaps, but not in C order
    (channels_last, a transpose): then its memory order is what torch.save keeps, and so is kept here."""
    if t.is_contiguous() or t.numel() <= 1:
        return False
    expected = 1
    for stride, size in sorted((st, n) for st, n in zip(t.stride(), t.shape, strict=True) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _storage_key(t: torch.Tensor) -> tuple[Any, int] | None:
    """Which storage `t` views: (device, address of the storage's first byte). The address comes from
    the tensor's own (data_ptr less its offset): one storage object fewer per tensor."""
    if t.numel() == 0:
        return None
    device = t.device
    if device.type == "meta":
        return None
    return (device, int(t.data_ptr() - t.storage_offset() * t.element_size()))


def _repeats_storage(t: torch.Tensor) -> bool:
    """Whether `t`'s values take more bytes than its whole storage (a broadcast view, zero or
    overlapping strides): it is stored as its storage plus a view, never written out expanded."""
    if t.numel() == 0 or t.device.type == "meta":
        return False
    return t.numel() * t.element_size() > t.untyped_storage().nbytes()


class TensorTable:
    """Collects every tensor of one save, then lays them out into members at finalize time."""

    def __init__(self, ctx: SaveContext) -> None:
        self.ctx = ctx
        self.saved: list[_Saved] = []
        ctx.on_finalize(self.finalize)

    def add(self, t: torch.Tensor, node: dict[str, Any]) -> None:
        self.saved.append(_Saved(t, list(self.ctx.path), node))

    def finalize(self) -> None:
        groups: dict[str, _Group] = {}
        by_storage: dict[tuple[str, int], list[_Saved]] = {}
        singles: list[list[_Saved]] = []
        for s in self.saved:
            key = _storage_key(s.tensor)
            if key is None:
                singles.append([s])
            else:
                by_storage.setdefault(key, []).append(s)
        for batch in [*singles, *by_storage.values()]:
            self._place(batch, groups)
        for group in groups.values():
            self._plan_members(group)

    def _group_of(self, s: _Saved, groups: dict[str, _Group]) -> tuple[_Group, str]:
        if len(s.path) >= 2:
            gname, rest = s.path[0], s.path[1:]
        else:
            gname, rest = "", s.path or ["tensor"]
        group = groups.get(gname)
        if group is None:
            group = groups[gname] = _Group(name_hint=[gname] if gname else [ROOT_GROUP_MEMBER])
        return group, _utf8_key(join_path(rest))

    def _place(self, batch: list[_Saved], groups: dict[str, _Group]) -> None:
        first = batch[0]
        group, key = self._group_of(first, groups)
        key = group.unique_key(key)
        t0 = first.tensor
        same_view = len(batch) == 1 or all(
            s.tensor.dtype == t0.dtype
            and s.tensor.shape == t0.shape
            and s.tensor.stride() == t0.stride()
            and s.tensor.storage_offset() == t0.storage_offset()
            for s in batch
        )
        if same_view and _dense_not_in_order(t0):  # channels_last, a transpose: keep its memory order
            itemsize = t0.element_size()
            span = torch.empty(0, dtype=torch.uint8, device=t0.device).set_(
                t0.untyped_storage(), t0.storage_offset() * itemsize, (t0.numel() * itemsize,), (1,)
            )
            self._place_view(batch, group, key, span, storage_offset=0)
            return
        if same_view and not _repeats_storage(t0):
            st_code, raw = ST_CODE.get(t0.dtype, ("U8", True))
            shape = (t0.numel() * t0.element_size(),) if raw else tuple(t0.shape)
            entry = _Entry(key, t0, st_code, shape, _is_floating(t0.dtype), t0.numel() * t0.element_size())
            entry.width = _group_width(t0.dtype)
            group.entries.append(entry)
            for s in batch:
                s.node["key"] = key
                entry.nodes.append(s.node)
            return
        storage = t0.untyped_storage()
        base = torch.empty(0, dtype=torch.uint8, device=t0.device).set_(storage)
        self._place_view(batch, group, key, base, storage_offset=None)

    def _place_view(
        self, batch: list[_Saved], group: _Group, key: str, data: torch.Tensor, *, storage_offset: int | None
    ) -> None:
        """One U8 entry holding `data` (bytes), each tensor of `batch` a view of it: at its own storage
        offset (`storage_offset=None`: `data` is the whole storage), or at `storage_offset`."""
        t0 = batch[0].tensor
        nbytes = data.numel()
        entry = _Entry(key, data, "U8", (nbytes,), _is_floating(t0.dtype), nbytes)
        entry.width = _group_width(t0.dtype)
        group.entries.append(entry)
        for s in batch:
            t = s.tensor
            offset = t.storage_offset() if storage_offset is None else storage_offset
            s.node["key"] = key
            s.node["view"] = {"storage_offset": offset, "stride": list(t.stride())}
            entry.nodes.append(s.node)

    def _plan_members(self, group: _Group) -> None:
        """One member per MEMBER_ENTRIES entries of the group, in saving order (all share the hint:
        the first member is `K.safetensors`, the next `K~2.safetensors`, ...)."""
        for i in range(0, len(group.entries), MEMBER_ENTRIES):
            self._plan_member(group.entries[i : i + MEMBER_ENTRIES], group.name_hint)

    def _plan_member(self, entries: list[_Entry], name_hint: list[str]) -> None:
        head, slots = layout([(e.key, e.st_code, e.shape) for e in entries])
        if len(head) - 8 > MAX_HEADER_BYTES:  # keys (object paths) that long: the header is unreadable
            longest = max(entries, key=lambda e: len(e.key)).key
            raise SaveError(
                f"the tensors' names make a .safetensors header of {len(head) - 8:,} bytes, over the "
                f"{MAX_HEADER_BYTES:,} a reader (and the safetensors library) accepts; the longest is "
                f"{len(longest):,} characters: use shorter keys",
                path=join_path(name_hint) if name_hint != [ROOT_GROUP_MEMBER] else "",
            )
        by_key = {e.key: e for e in entries}

        def parts() -> list[Part]:
            out: list[Part] = [(HEADER_LABEL, memoryview(head))]
            out += [(slot.key, _as_bytes(by_key[slot.key].source)) for slot in slots]
            return out

        # Weights (floating data) stay uncompressed: mapping them beats any ratio zstd gets on them,
        # unless compress_weights asks for them byte-grouped (each entry by its float's size).
        floating = sum(e.nbytes for e in entries if e.floating)
        total = sum(e.nbytes for e in entries)
        hint: CompressHint = "weights" if floating * 2 >= total and total else "try"
        plan = self.ctx.add_member("safetensors", parts, compress=hint, hint=name_hint)
        plan.widths = [1] + [by_key[slot.key].width for slot in slots]
        if any(e.source.device.type not in ("cpu", "meta") for e in entries):

            def sources() -> list[tuple[str | None, Any]]:
                out: list[tuple[str | None, Any]] = [(HEADER_LABEL, memoryview(head))]
                return out + [(slot.key, _source_bytes(by_key[slot.key].source)) for slot in slots]

            plan.sources = sources
        for e in entries:
            for node in e.nodes:
                node["$ref"] = plan.base_name
                plan.nodes.append(node)
