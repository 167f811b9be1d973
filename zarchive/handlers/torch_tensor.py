"""torch tensors and parameters, stored in `.safetensors` members.

Tensors are grouped, not stored one member each: every tensor under the same top-level key of the
saved object (e.g. all of `model/...`) lands in a `.safetensors` member named after that key, keyed by
the rest of its object path; a group of more than MEMBER_ENTRIES tensors fills several members
(`model.safetensors`, `model~2.safetensors`, ...), so fetching one tensor parses one bounded header.
Tensors that share storage are stored once: identical views point at one entry; different views of
one storage point at one raw-bytes entry plus their own offset/shape/stride, and come back sharing
memory again. Reading maps uncompressed data from the file without copying.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ..container.archive_writer import HEADER_LABEL, CompressHint, Part
from ..container.byte_groups import CODEC as BYTE_GROUPS_CODEC
from ..container.npy import check_shape
from ..container.safetensors_layout import MAX_HEADER_BYTES, TensorSlot, header_length, layout, parse_header
from ..container.shapes import shape_problem
from ..context import LoadContext, Node, SaveContext
from ..errors import DeviceError, FormatError, SaveError
from ..nodes.arrays import TensorSchema
from ..objpath import join_path
from .base import Handler
from .torch_device import fill_on_device, uses_pinned_path
from .torch_types import ST_CODE, ST_TORCH, dtype_from_name, dtype_name, place

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


def _storage_key(t: torch.Tensor) -> tuple[Any, int] | None:
    """Which storage `t` views: (device, address of the storage's first byte). The address comes from
    the tensor's own (data_ptr less its offset): one storage object fewer per tensor."""
    if t.numel() == 0:
        return None
    device = t.device
    if device.type == "meta":
        return None
    return (device, int(t.data_ptr() - t.storage_offset() * t.element_size()))


class _TensorTable:
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
        if same_view:
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
        entry = _Entry(key, base, "U8", (storage.nbytes(),), _is_floating(t0.dtype), storage.nbytes())
        entry.width = _group_width(t0.dtype)
        group.entries.append(entry)
        for s in batch:
            t = s.tensor
            s.node["key"] = key
            s.node["view"] = {"storage_offset": t.storage_offset(), "stride": list(t.stride())}
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


class TensorHandler(TensorSchema, Handler):
    name = "torch.Tensor"

    def accepts(self, cls: type) -> bool:
        return issubclass(cls, torch.Tensor)

    def save(self, t: torch.Tensor, ctx: SaveContext) -> Node:
        if t.layout != torch.strided:
            raise ctx.error(f"{t.layout} tensors cannot be saved; convert with .to_dense()")
        if t.is_quantized or t.is_nested:
            raise ctx.error("quantized and nested tensors cannot be saved")
        device = t.device  # (this runs once per tensor: each attribute read here costs a torch call)
        if device.type == "meta":
            raise ctx.error("meta tensors have no data to save")
        shape = t.shape
        if len(shape) > 8 or t.numel() > 1 << 40:  # (the exact test only where it could fail)
            problem = shape_problem(tuple(shape))
            if problem is not None:
                text = str(list(shape))
                raise ctx.error(
                    f"a tensor of shape {text[:77] + '...' if len(text) > 80 else text} cannot be saved: {problem}"
                )
        node: dict[str, Any] = {
            "$type": self.name,
            "$ref": None,
            "key": None,
            "dtype": dtype_name(t.dtype),
            "shape": list(shape),
            "device": str(device),
        }
        if type(t) is not torch.Tensor and isinstance(t, torch.nn.Parameter):  # (a slow isinstance)
            node["parameter"] = True
        if t.requires_grad:
            node["requires_grad"] = True
        if t.is_conj() or t.is_neg():  # lazy conjugate/negative views: store the values they show
            t = t.resolve_conj().resolve_neg()
        ctx.state("torch.tensors", lambda: _TensorTable(ctx)).add(t, node)
        return node

    def load(self, node: dict[str, Any], ctx: LoadContext) -> torch.Tensor:
        # This runs once per tensor (5,000 times for a 5,000-tensor state dict): keep it lean.
        dtype = dtype_from_name(node.get("dtype"), ctx)
        shape = check_shape(node.get("shape"))
        view = node.get("view")
        parameter, requires_grad = node.get("parameter") is True, node.get("requires_grad") is True
        memo: dict[tuple[Any, ...], torch.Tensor] = ctx.state("torch.memo", dict)
        memo_key = (
            node.get("$ref"),
            node.get("key"),
            None if view is None else repr(view),
            dtype,
            shape,
            parameter,
            requires_grad,
        )
        t = memo.get(memo_key)
        if t is not None:
            return t
        saved_device = node.get("device", "cpu")
        device = None if ctx.map_location is None else place(saved_device, ctx)
        if device is not None and device.type == "meta":
            t = torch.empty(shape, dtype=dtype, device="meta")
        else:
            t = self._read(node, dtype, shape, view, ctx, device)
            if device is not None and t.device != device:
                t = _to_device(t, device, node, ctx)
        if ctx.dtype is not None and t.is_floating_point():
            t = t.to(ctx.dtype)
        if parameter:
            t = torch.nn.Parameter(t, requires_grad=requires_grad)
        elif requires_grad and (t.is_floating_point() or t.is_complex()):
            t.requires_grad_(True)
        memo[memo_key] = t
        return t

    def load_into(self, node: dict[str, Any], ctx: LoadContext, out: Any) -> bool:
        """Read the stored bytes straight into `out` where it is a contiguous CPU tensor of the
        node's dtype and shape (on a CUDA device: through pinned host memory, torch_device), and the
        node is a whole stored tensor (not a view of a shared storage) read without map_location or
        dtype."""
        on_gpu = isinstance(out, torch.Tensor) and uses_pinned_path(out.device)
        if (
            not isinstance(out, torch.Tensor)
            or (out.device.type != "cpu" and not on_gpu)
            or not out.is_contiguous()
            or "view" in node
            or ctx.map_location is not None
            or ctx.dtype is not None
        ):
            return False
        dtype = dtype_from_name(node.get("dtype"), ctx)
        shape = check_shape(node.get("shape"))
        if out.dtype != dtype or tuple(out.shape) != shape:
            return False
        name, key = node.get("$ref"), node.get("key")
        if not isinstance(key, str) or not isinstance(name, str):
            return False  # (load() names what is wrong)
        slot = _find_slot(name, key, ctx)
        _check_slot(slot, dtype, shape, name, key, ctx)
        if slot.end - slot.begin != out.numel() * out.element_size():
            raise FormatError(f"the member's slot of {key!r} has the wrong size", member=name, path=ctx.path_str)
        flat = out.detach().view(-1).view(torch.uint8)
        if on_gpu:
            fill_on_device(flat, lambda buf: ctx.member_range_into(name, slot.begin, slot.key, buf))
        elif out.numel():
            ctx.member_range_into(name, slot.begin, slot.key, flat.numpy().data)
        return True

    def _read(
        self,
        node: dict[str, Any],
        dtype: torch.dtype,
        shape: tuple[int, ...],
        view: Any,
        ctx: LoadContext,
        device: torch.device | None = None,
    ) -> torch.Tensor:
        name, key = node.get("$ref"), node.get("key")
        if not isinstance(key, str):
            raise ctx.error("tensor node lacks its 'key' in the member")
        if not isinstance(name, str):
            raise ctx.error("'$ref' must be a member name")
        slot = _find_slot(name, key, ctx)
        base = _slot_tensor(name, slot, ctx)
        if device is not None and base.device != device:
            # move the stored bytes once, then view them there, so that views still share memory
            moved: dict[tuple[str, str, str], torch.Tensor] = ctx.state("torch.moved", dict)
            where = (name, key, str(device))
            if where not in moved:
                moved[where] = _to_device(base, device, node, ctx)
            base = moved[where]
        if view is None:
            raw = _check_slot(slot, dtype, shape, name, key, ctx)
            return base.view(dtype).view(shape) if raw else base  # (base already has the slot's shape)
        if not isinstance(view, dict) or slot.dtype != "U8":
            raise ctx.error("bad tensor view")
        offset, stride = view.get("storage_offset"), view.get("stride")
        if type(offset) is not int or not isinstance(stride, list) or len(stride) != len(shape):
            raise ctx.error("bad tensor view")
        if base.numel() % dtype.itemsize:
            raise ctx.error("shared storage size is not a multiple of the element size")
        try:
            return base.view(dtype).as_strided(shape, stride, offset)
        except RuntimeError as e:
            raise ctx.error(f"tensor view outside its storage: {e}") from None


def _check_slot(
    slot: TensorSlot, dtype: torch.dtype, shape: tuple[int, ...], name: str, key: str, ctx: LoadContext
) -> bool:
    """Check that the member's slot holds the manifest's whole tensor; whether it is stored as raw
    bytes (U8: dtypes safetensors has no code for) rather than in its own dtype."""
    st_code, raw = ST_CODE.get(dtype, ("U8", True))
    nbytes = math.prod(shape) * dtype.itemsize
    if slot.dtype != st_code or (not raw and slot.shape != shape) or (raw and slot.shape != (nbytes,)):
        raise FormatError(
            f"the member stores {key!r} as {slot.dtype}{list(slot.shape)}, the manifest says "
            f"{dtype_name(dtype)}{list(shape)}",
            member=name,
            path=ctx.path_str,
        )
    return raw


def _to_device(t: torch.Tensor, device: torch.device, node: dict[str, Any], ctx: LoadContext) -> torch.Tensor:
    try:
        return t.to(device)
    except (RuntimeError, AssertionError) as e:  # AssertionError: "Torch not compiled with CUDA enabled"
        raise DeviceError(
            f"cannot place a tensor saved on {node.get('device', 'cpu')!r} on {device}: {e}; pass map_location "
            "(e.g. 'cpu' or {'cuda:0': 'cpu'})",
            path=ctx.path_str,
        ) from None


def _find_slot(name: Any, key: str, ctx: LoadContext) -> TensorSlot:
    """Where tensor `key` lies in member `name`, from the member's own header (parsed and checked
    once per opened archive, so lazily fetching one tensor after another does not parse it again)."""
    slots = ctx.archive.parsed.get(("safetensors", name)) if isinstance(name, str) else None
    if slots is None:
        slots = _member_slots(name, ctx)
    slot = slots.get(key)
    if slot is None:
        raise FormatError(f"tensor {key!r} is not in the member", member=name, path=ctx.path_str)
    return slot


def _member_slots(name: Any, ctx: LoadContext) -> dict[str, TensorSlot]:
    """The parsed, checked header of a safetensors member; parsed once per opened archive."""
    entry = ctx.member_entry(name)
    size = entry["size"]
    if entry["codec"] in ("none", BYTE_GROUPS_CODEC):  # the header alone (chunks: the chunks holding it)
        # 8 bytes, not the whole member (a remote file would fetch it all)
        hlen = header_length(ctx.archive.member_prefix(name, 8, path=ctx.path_str), size, member=name)
        head = ctx.archive.header_range(name, hlen, path=ctx.path_str)
    else:  # the header must tile the declared size before the whole member is decompressed
        hlen = header_length(ctx.archive.member_prefix(name, 8, path=ctx.path_str), size, member=name)
        parse_header(memoryview(ctx.archive.member_prefix(name, hlen, path=ctx.path_str)), size, member=name)
        head = ctx.member_bytes(name, shared=True)
    slots = parse_header(head, size, member=name)
    ctx.archive.parsed[("safetensors", name)] = slots
    return slots


def _slot_tensor(name: str, slot: TensorSlot, ctx: LoadContext) -> torch.Tensor:
    """The slot's bytes as a flat tensor of its stored dtype, over the mapped file where possible."""
    data = ctx.member_range(name, slot.begin, slot.end, slot.key)
    st_dtype = ST_TORCH[slot.dtype]
    if data.nbytes == 0:
        return torch.empty(slot.shape, dtype=st_dtype)
    flat = torch.frombuffer(data, dtype=st_dtype)  # ctx.member_range gives writable bytes: no warning
    return flat if len(slot.shape) == 1 else flat.view(slot.shape)
