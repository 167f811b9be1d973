"""The `.safetensors` member format: an 8-byte little-endian header length, a JSON header, then the
tensors' bytes back to back (the safetensors rule: no gaps, no overlaps).

zarchive writes this layout itself so tensors stream from their own memory into the file. The header
is padded with spaces so the data section starts at a multiple of 64 bytes; tensors whose size is a
multiple of 64 bytes come first (each stays 64-byte aligned), the rest follow by decreasing element
size, so every tensor is at least aligned to its element size and can be mapped without a copy.
"""

from __future__ import annotations

import itertools
import json
import math
import operator
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from ..errors import FormatError, UnsafeArchiveError
from .jsontext import loads_strict
from .shapes import MAX_DIM, MAX_DIMS

ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E5M2FNUZ": 1, "F8_E4M3FNUZ": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8, "C64": 8,
}  # fmt: skip
MAX_HEADER_BYTES = 100_000_000  # the limit the safetensors library itself applies
DATA_ALIGN = 64


class TensorSlot(NamedTuple):
    key: str
    dtype: str  # a safetensors dtype code
    shape: tuple[int, ...]
    begin: int  # offsets from the start of the member
    end: int


def layout(entries: list[tuple[str, str, tuple[int, ...]]]) -> tuple[bytes, list[TensorSlot]]:
    """Header bytes and the slots (in data order) for (key, dtype code, shape) entries."""
    sized = [(k, d, s, math.prod(s) * ITEMSIZE[d]) for k, d, s in entries]
    ordered = [e for e in sized if e[3] % DATA_ALIGN == 0]
    ordered += sorted((e for e in sized if e[3] % DATA_ALIGN), key=lambda e: -ITEMSIZE[e[1]])
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    rel: list[tuple[str, str, tuple[int, ...], int, int]] = []
    for key, dtype, shape, nbytes in ordered:
        header[key] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        rel.append((key, dtype, shape, offset, offset + nbytes))
        offset += nbytes
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-(8 + len(text))) % DATA_ALIGN)
    head = struct.pack("<Q", len(text)) + text
    base = len(head)
    return head, [TensorSlot(k, d, s, base + b, base + e) for k, d, s, b, e in rel]


def header_length(first8: bytes | memoryview, member_size: int, *, member: str) -> int:
    """Bytes taken by the length prefix and the JSON header, checked against the member size."""
    if member_size < 8 or len(first8) < 8:
        raise FormatError("truncated .safetensors member", member=member)
    n = struct.unpack("<Q", bytes(first8[:8]))[0]
    if n > MAX_HEADER_BYTES or 8 + n > member_size:
        raise UnsafeArchiveError(f".safetensors header length {n} does not fit the member", member=member)
    return 8 + n


def parse_header(head: memoryview, member_size: int, *, member: str) -> Mapping[str, TensorSlot]:
    """Slots of a safetensors member (`head`: its first header_length() bytes), key -> TensorSlot,
    after checking that they tile the member's data exactly; each entry's dtype, shape and size are
    checked before its slot is returned (where the header is in data order, as zarchive writes it:
    when the slot is first looked up). The last few headers parsed are remembered by their bytes
    (the slots are a function of the header's bytes and the member's size alone), so opening the
    same file again, or another checkpoint of the same model, does not parse and check it again
    (`forget_parsed_headers` empties that memory)."""
    base = header_length(head, member_size, member=member)
    if len(head) < base:
        raise FormatError("truncated .safetensors header", member=member)
    key = (bytes(head[:base]) if base <= _REMEMBER_UP_TO else b"", member_size)  # (no copy of huge ones)
    with _parsed_lock:
        known = _parsed.get(key) if key[0] else None
        if known is not None:
            _parsed.move_to_end(key)
            return _for_member(known, member)
    slots = _parse_header(head, base, member_size, member=member)
    if key[0]:
        with _parsed_lock:
            _parsed[key] = slots
            while len(_parsed) > _REMEMBER:
                _parsed.popitem(last=False)
    return _for_member(slots, member)


def _for_member(slots: Mapping[str, TensorSlot], member: str) -> Mapping[str, TensorSlot]:
    return slots.named(member) if isinstance(slots, HeaderSlots) else dict(slots)


def forget_parsed_headers() -> None:
    """Empty the memory of parsed headers (parse_header): the next open of a file parses its headers
    as a fresh process would (the benchmarks' fresh opens)."""
    with _parsed_lock:
        _parsed.clear()


_REMEMBER = 16  # headers remembered (each up to _REMEMBER_UP_TO bytes)
_REMEMBER_UP_TO = 1 << 20
_parsed: OrderedDict[tuple[bytes, int], Mapping[str, TensorSlot]] = OrderedDict()
_parsed_lock = threading.Lock()


def _parse_header(head: memoryview, base: int, member_size: int, *, member: str) -> Mapping[str, TensorSlot]:
    header = _loads_header(head[8:base], member=member)
    fast = _tiled_in_order(header, base, member_size, member)
    if fast is not None:
        return fast
    slots: dict[str, TensorSlot] = {}
    in_order, pos = True, base
    for key, info in header.items():
        if key == "__metadata__":
            continue
        slot = _slot(key, info, base, member)
        if slot.begin != pos:
            in_order = False
        pos = slot.end
        slots[key] = slot
    if not in_order:  # a header listed out of data order (other writers): check the tiling sorted
        pos = base
        for slot in sorted(slots.values(), key=lambda s: (s.begin, s.end)):
            if slot.begin != pos:
                raise FormatError("tensor data has gaps or overlaps", member=member)
            pos = slot.end
    if pos != member_size:
        raise FormatError("tensor data does not fill the member exactly", member=member)
    return slots


def _slot(key: str, info: Any, base: int, member: str) -> TensorSlot:
    """One header entry, checked: a known dtype, a shape of at most MAX_DIMS ints, and offsets that
    hold exactly its bytes (`base`: where the data section starts in the member)."""
    try:
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
    except (TypeError, KeyError, ValueError):
        raise FormatError(f"bad .safetensors entry {key!r}", member=member) from None
    nbytes = ITEMSIZE.get(dtype) if type(dtype) is str else None
    if nbytes is None:
        raise FormatError(f"unknown safetensors dtype {dtype!r} for {key!r}", member=member)
    if type(shape) is not list or type(begin) is not int or type(end) is not int or begin < 0:
        raise FormatError(f"bad shape or offsets for {key!r}", member=member)
    if len(shape) > MAX_DIMS:  # refused before any work per dimension (the product grows with each)
        raise FormatError(f"shape of {key!r} has {len(shape)} dimensions (at most {MAX_DIMS})", member=member)
    for dim in shape:
        if type(dim) is not int or not 0 <= dim <= MAX_DIM:
            raise FormatError(f"bad shape or offsets for {key!r}", member=member)
        nbytes *= dim
    if end - begin != nbytes:
        raise FormatError(f"offsets of {key!r} disagree with its shape and dtype", member=member)
    return TensorSlot(key, dtype, tuple(shape), base + begin, base + end)


_OFFSETS = operator.itemgetter("data_offsets")


def _tiled_in_order(header: dict[str, Any], base: int, member_size: int, member: str) -> HeaderSlots | None:
    """The slots of a header whose entries are listed in data order and tile the data section
    exactly (as every zarchive writer writes them), checked at C speed with no Python work per
    entry; each entry's dtype and shape are checked when its slot is first asked for. None for any
    other header (out of order, malformed, or not tiling): the entry-by-entry check says what is wrong."""
    entries = {k: v for k, v in header.items() if k != "__metadata__"} if "__metadata__" in header else header
    if not entries:
        return None
    try:
        offsets = list(map(_OFFSETS, entries.values()))
    except (TypeError, KeyError, IndexError):
        return None
    if set(map(type, offsets)) != {list} or set(map(len, offsets)) != {2}:
        return None
    flat = list(itertools.chain.from_iterable(offsets))
    if set(map(type, flat)) != {int}:
        return None
    begins, ends = flat[0::2], flat[1::2]
    if begins[0] != 0 or begins[1:] != ends[:-1] or base + ends[-1] != member_size:
        return None
    if not all(map(operator.le, begins, ends)):
        return None
    return HeaderSlots(entries, base, member)


class HeaderSlots(Mapping[str, TensorSlot]):
    """The slots of a safetensors header whose tiling is checked: key -> TensorSlot, each entry made
    and checked (its dtype, shape and size) when it is first looked up, so that fetching one tensor
    of a member does not check the other 255. Read-only; safe to share between threads."""

    def __init__(
        self, entries: dict[str, Any], base: int, member: str, made: dict[str, TensorSlot] | None = None
    ) -> None:
        self._entries = entries
        self._base = base
        self._member = member  # what errors name
        self._made: dict[str, TensorSlot] = {} if made is None else made  # (slots checked so far)

    def named(self, member: str) -> HeaderSlots:
        """The same slots, for member `member` (what errors name): the same header in another file."""
        return HeaderSlots(self._entries, self._base, member, self._made)

    def __getitem__(self, key: str) -> TensorSlot:
        slot = self._made.get(key)
        if slot is None:
            info = self._entries[key]  # (KeyError for a key the header lacks)
            slot = _slot(key, info, self._base, self._member)
            self._made[key] = slot
        return slot

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def _loads_header(raw: memoryview, *, member: str) -> dict[str, Any]:
    """The header as a dict, rejecting duplicate keys like loads_strict but faster on big headers.

    The C parser runs without per-object hooks; a dropped duplicate is then detected by counting: in
    valid JSON every ':' outside strings ends a key and every '{' outside strings opens an object, so
    if the text has exactly as many of each as the parsed header has keys and objects, nothing was
    dropped (nor did any string contain one). Any other header goes through the strict parser."""
    try:
        text = bytes(raw).decode("utf-8")
        header = _DECODER.decode(text)
    except (UnicodeDecodeError, ValueError, RecursionError, MemoryError):
        header = None  # the strict parser says what is wrong
    if type(header) is dict:
        values = list(header.values())
        if set(map(type, values)) <= {dict}:  # the usual case: count in C
            objects, keys = 1 + len(values), len(values) + sum(map(len, values))
        else:
            objects, keys = 1, len(values)
            for info in values:
                if type(info) is dict:
                    objects += 1
                    keys += len(info)
        if text.count("{") == objects and text.count(":") == keys:
            return header
    header = loads_strict(raw, member=member)
    if not isinstance(header, dict):
        raise FormatError(".safetensors header is not a JSON object", member=member)
    return header


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-standard JSON token {token!r}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)  # built once (json.loads(text, ...) builds one a call)
