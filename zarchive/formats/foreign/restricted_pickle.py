"""A restricted pickle reader: a small interpreter of pickle opcodes that builds plain data only.

It never calls `pickle.load` or an Unpickler and never imports or looks up anything by a name read
from the file. A GLOBAL / STACK_GLOBAL opcode yields a `Global` (just the name); what a REDUCE of a
global builds, and which globals may appear at all, is decided by the caller's `Rules` (see
foreign.torch_pickle for what torch.save files need). Objects are built from the opcodes that make
containers and scalars; every opcode that would construct an arbitrary class (INST, OBJ, NEWOBJ,
NEWOBJ_EX, BUILD on anything but what the rules allow, extension registry codes, out-of-band
buffers) is refused with RefusedPickleError before anything runs.

Work and memory are bounded: every opcode consumes at least one byte of input, so the work is linear
in the pickle's size; lengths declared by an opcode are checked against the bytes left before
anything is allocated; the memo is a dict (a PUT to index 2**32-1 costs one entry); big ints are
capped. foreign.pickle_gate charges every value at its size in memory before it is built (refused
past the caller's limit, the read budget) and refuses nesting past MAX_DEPTH while values are built,
before anything hashes them; the pickle's own bytes are read in place, never copied whole. The
finished graph is checked by foreign.value_graph (exact depth, cycles, and values counted along every
path, capped in proportion to the pickle's size, so shared references cannot multiply unbounded).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from ...errors import FormatError, RefusedPickleError, UnsafeArchiveError
from .pickle_gate import BuildGate, bytes_size, copy_bound, str_size
from .pickle_rules import Global, Rules
from .value_graph import visit_cap, walk_bounded

MAX_LONG_BYTES = 4096  # an int of more than 32,768 bits is not a weight file's


_STRUCTS = {fmt: struct.Struct(fmt) for fmt in ("<B", "<H", "<i", "<I", "<Q")}


def refuse(message: str, member: str | None) -> RefusedPickleError:
    return RefusedPickleError(message, member=member)


class _Reader:
    def __init__(self, data: bytes | bytearray, rules: Rules, member: str | None, max_bytes: int | None = None) -> None:
        self.data = data
        self.view = memoryview(data)
        self.gate = BuildGate(max_bytes, member)  # what the values built so far take, and how deep they nest
        self.pos = 0
        self.rules = rules
        self.member = member
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: dict[int, Any] = {}

    # --- input ---
    def take(self, n: int) -> memoryview:
        """The next n bytes, in place (not copied)."""
        if n < 0 or self.pos + n > len(self.data):
            raise FormatError(
                f"the pickle declares {n:,} bytes at offset {self.pos}, past its end ({len(self.data):,} bytes): "
                "truncated or damaged",
                member=self.member,
            )
        out = self.view[self.pos : self.pos + n]
        self.pos += n
        return out

    def string(self, n: int) -> str:
        """The next n bytes decoded as UTF-8, charged at the str's size before decoding."""
        begin, end = self.pos, self.pos + n
        if n < 0 or end > len(self.data):
            self.take(n)  # (raises: past the end)
        gate = self.gate
        gate.spent += str_size(self.data, begin, end)
        if gate.spent > gate.limit:
            raise gate.refusal()
        self.pos = end
        try:
            return str(self.view[begin:end], "utf-8")
        except UnicodeDecodeError:
            raise FormatError("a pickled string is not valid UTF-8", member=self.member) from None

    def binary(self, n: int, cls: type) -> Any:
        """The next n bytes as a bytes or bytearray object of their own, charged before copying."""
        if n < 0 or self.pos + n > len(self.data):
            self.take(n)  # (raises: past the end)
        self.gate.charge(bytes_size(n, mutable=cls is bytearray))
        return cls(self.take(n))

    def u(self, fmt: str) -> int:
        s = _STRUCTS[fmt]
        end = self.pos + s.size
        if end > len(self.data):
            self.take(s.size)  # (raises: past the end)
        value = s.unpack_from(self.data, self.pos)[0]
        self.pos = end
        return int(value)

    def byte(self) -> int:
        if self.pos >= len(self.data):
            self.take(1)  # (raises: past the end)
        self.pos += 1
        return self.data[self.pos - 1]

    def line(self) -> bytes:
        end = self.data.find(b"\n", self.pos)
        if end < 0 or end - self.pos > 1024:
            raise FormatError("a text opcode's argument has no end of line", member=self.member)
        out = bytes(self.view[self.pos : end])
        self.pos = end + 1
        return out

    def text(self, raw: bytes | bytearray | memoryview) -> str:
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError:
            raise FormatError("a pickled string is not valid UTF-8", member=self.member) from None

    # --- the stack ---
    def pop(self) -> Any:
        if not self.stack or (self.marks and len(self.stack) <= self.marks[-1]):
            raise FormatError("the pickle pops from an empty stack", member=self.member)
        return self.stack.pop()  # (a MARK is a position in `marks`, never a value on the stack)

    def top(self) -> Any:
        if not self.stack or (self.marks and len(self.stack) <= self.marks[-1]):
            raise FormatError("the pickle reads an empty stack", member=self.member)
        return self.stack[-1]

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise FormatError("the pickle ends a group that no MARK began", member=self.member)
        at = self.marks.pop()
        items = self.stack[at:]
        del self.stack[at:]
        return items

    def push(self, v: Any) -> None:
        self.stack.append(v)

    def memo_get(self, i: int) -> Any:
        if i not in self.memo:
            raise FormatError(f"the pickle reads memo entry {i}, which it never stored", member=self.member)
        return self.memo[i]

    def long(self, raw: memoryview) -> int:
        if len(raw) > MAX_LONG_BYTES:
            raise UnsafeArchiveError(
                f"a pickled int of {len(raw):,} bytes (at most {MAX_LONG_BYTES:,})", member=self.member
            )
        self.gate.charge(len(raw))
        return int.from_bytes(raw, "little", signed=True)

    # --- the loop ---
    def run(self) -> Any:
        ops, costs, gate = _OP_TABLE, _COST_TABLE, self.gate
        data = self.data
        end, limit = len(data), gate.limit
        while self.pos < end:
            code = data[self.pos]
            self.pos += 1
            gate.spent += costs[code]
            if gate.spent > limit:
                raise gate.refusal()
            op = ops[code]
            if op is None:
                name = _REFUSED.get(code)
                if name is not None:
                    raise refuse(f"the pickle uses opcode {name}, which can construct arbitrary objects", self.member)
                raise FormatError(f"unknown or unsupported pickle opcode 0x{code:02x}", member=self.member)
            if op is _stop:
                result = self.pop()
                if self.stack or self.marks:
                    raise FormatError("the pickle stops with values left on its stack", member=self.member)
                return result
            op(self)
        raise FormatError("the pickle ends without a STOP opcode (truncated)", member=self.member)


# --- opcodes: each takes the reader; the table maps opcode byte -> function ---
def _stop(r: _Reader) -> None:  # (handled in the loop)
    return None


def _setitems(r: _Reader, d: Any, items: list[Any]) -> None:
    if not isinstance(d, dict):
        raise FormatError("SETITEM(S) on a value that is not a dict", member=r.member)
    if len(items) % 2:
        raise FormatError("SETITEMS with an odd number of values", member=r.member)
    r.gate.grow(d, items)  # (before any key is hashed)
    for i in range(0, len(items), 2):
        key = items[i]
        try:
            d[key] = items[i + 1]
        except TypeError:
            raise FormatError(f"a dict key of type {type(key).__name__} is not hashable", member=r.member) from None


def _appends(r: _Reader, lst: Any, items: list[Any]) -> None:
    if not isinstance(lst, list):
        raise FormatError("APPEND(S) on a value that is not a list", member=r.member)
    r.gate.grow(lst, items)
    lst.extend(items)


def _additems(r: _Reader) -> None:
    items = r.pop_mark()
    s = r.top()
    if not isinstance(s, set):
        raise FormatError("ADDITEMS on a value that is not a set", member=r.member)
    r.gate.grow(s, items)  # (before any item is hashed)
    try:
        s.update(items)
    except TypeError:
        raise FormatError("a set item is not hashable", member=r.member) from None


def _frozenset(r: _Reader) -> None:
    items = r.pop_mark()
    depth = r.gate.holding(items)  # (before any item is hashed)
    try:
        r.push(r.gate.made(frozenset(items), depth))
    except TypeError:
        raise FormatError("a frozenset item is not hashable", member=r.member) from None


def _global(r: _Reader, module: str, name: str) -> None:
    r.push(r.rules.global_value(Global(module, name)))


def _stack_global(r: _Reader) -> None:
    name, module = r.pop(), r.pop()
    if not isinstance(module, str) or not isinstance(name, str):
        raise FormatError("STACK_GLOBAL needs two strings", member=r.member)
    _global(r, module, name)


def _reduce(r: _Reader) -> None:
    args = r.pop()
    func = r.pop()
    if not isinstance(args, tuple):
        raise FormatError("REDUCE needs a tuple of arguments", member=r.member)
    r.gate.fits(copy_bound(args))  # what the call may copy from its arguments, before it runs
    r.push(r.gate.called(r.rules.reduce(func, args)))


def _build(r: _Reader) -> None:
    state = r.pop()
    obj = r.pop()
    value = r.rules.build(obj, state)
    r.gate.deepen(value, r.gate.depth(state))  # (it now holds what `state` holds: a state dict's _metadata)
    r.push(value)


def _float(r: _Reader) -> None:
    r.push(struct.unpack(">d", r.take(8))[0])


def _binunicode(n_fmt: str) -> Callable[[_Reader], None]:
    return lambda r: r.push(r.string(r.u(n_fmt)))


def _binbytes(n_fmt: str, cls: type = bytes) -> Callable[[_Reader], None]:
    return lambda r: r.push(r.binary(r.u(n_fmt), cls))


def _tuple_n(n: int) -> Callable[[_Reader], None]:
    def op(r: _Reader) -> None:
        stack = r.stack
        if len(stack) - n < (r.marks[-1] if r.marks else 0):
            for _ in range(n):
                r.pop()  # (one of these raises: fewer than n values above the last mark)
        items = stack[-n:]
        del stack[-n:]
        stack.append(r.gate.tuple_of(items))  # (refused before a tuple deeper than MAX_DEPTH exists to be hashed)

    return op


def _put(n_fmt: str) -> Callable[[_Reader], None]:
    def op(r: _Reader) -> None:
        r.memo[r.u(n_fmt)] = r.top()

    return op


def _get(n_fmt: str) -> Callable[[_Reader], None]:
    return lambda r: r.push(r.memo_get(r.u(n_fmt)))


def _memoize(r: _Reader) -> None:
    r.memo[len(r.memo)] = r.top()


def _proto(r: _Reader) -> None:
    v = r.take(1)[0]
    if v > 5:
        raise FormatError(f"pickle protocol {v} is newer than this reader knows", member=r.member)


def _frame(r: _Reader) -> None:
    n = r.u("<Q")
    if r.pos + n > len(r.data):
        raise FormatError("a pickle frame runs past the end of the data", member=r.member)


def _binpersid(r: _Reader) -> None:
    r.push(r.rules.persistent(r.pop()))


def _pop_mark(r: _Reader) -> None:
    r.pop_mark()


def _mark(r: _Reader) -> None:
    r.marks.append(len(r.stack))


def _setitem(r: _Reader) -> None:
    v, k = r.pop(), r.pop()
    _setitems(r, r.top(), [k, v])


def _setitems_op(r: _Reader) -> None:
    items = r.pop_mark()
    _setitems(r, r.top(), items)


def _append(r: _Reader) -> None:
    v = r.pop()
    _appends(r, r.top(), [v])


def _appends_op(r: _Reader) -> None:
    items = r.pop_mark()
    _appends(r, r.top(), items)


def _dict_op(r: _Reader) -> None:
    items = r.pop_mark()
    d: dict[Any, Any] = r.gate.made({}, 1)
    _setitems(r, d, items)
    r.push(d)


def _list_op(r: _Reader) -> None:
    r.push(r.gate.list_of(r.pop_mark()))


_OPS: dict[int, Callable[[_Reader], None]] = {
    0x80: _proto,  # PROTO
    0x95: _frame,  # FRAME
    ord("."): _stop,
    ord("("): _mark,
    ord("0"): lambda r: r.pop(),  # POP
    ord("1"): _pop_mark,
    ord("2"): lambda r: r.push(r.top()),  # DUP
    ord("N"): lambda r: r.push(None),
    0x88: lambda r: r.push(True),  # NEWTRUE
    0x89: lambda r: r.push(False),  # NEWFALSE
    ord("J"): lambda r: r.push(r.u("<i")),  # BININT
    ord("K"): lambda r: r.stack.append(r.byte()),  # BININT1
    ord("M"): lambda r: r.push(r.u("<H")),  # BININT2
    0x8A: lambda r: r.push(r.long(r.take(r.u("<B")))),  # LONG1
    0x8B: lambda r: r.push(r.long(r.take(r.u("<i")))),  # LONG4
    ord("G"): _float,  # BINFLOAT
    ord("X"): _binunicode("<I"),  # BINUNICODE
    0x8C: _binunicode("<B"),  # SHORT_BINUNICODE
    0x8D: _binunicode("<Q"),  # BINUNICODE8
    ord("C"): _binbytes("<B"),  # SHORT_BINBYTES
    ord("B"): _binbytes("<I"),  # BINBYTES
    0x8E: _binbytes("<Q"),  # BINBYTES8
    0x96: _binbytes("<Q", bytearray),  # BYTEARRAY8
    ord(")"): lambda r: r.stack.append(()),  # EMPTY_TUPLE (recorded by the gate once)
    ord("t"): lambda r: r.push(r.gate.tuple_of(r.pop_mark())),  # TUPLE
    0x85: _tuple_n(1),
    0x86: _tuple_n(2),
    0x87: _tuple_n(3),
    ord("]"): lambda r: r.push(r.gate.made([], 1)),  # EMPTY_LIST
    ord("l"): _list_op,  # LIST
    ord("}"): lambda r: r.push(r.gate.made({}, 1)),  # EMPTY_DICT
    ord("d"): _dict_op,  # DICT
    0x8F: lambda r: r.push(r.gate.made(set(), 1)),  # EMPTY_SET
    0x90: _additems,  # ADDITEMS
    0x91: _frozenset,  # FROZENSET
    ord("a"): _append,
    ord("e"): _appends_op,
    ord("s"): _setitem,
    ord("u"): _setitems_op,
    ord("q"): lambda r: r.memo.__setitem__(r.byte(), r.top()),  # BINPUT
    ord("r"): _put("<I"),  # LONG_BINPUT
    0x94: _memoize,  # MEMOIZE
    ord("h"): lambda r: r.stack.append(r.memo_get(r.byte())),  # BINGET
    ord("j"): _get("<I"),  # LONG_BINGET
    ord("c"): lambda r: _global(r, r.text(r.line()), r.text(r.line())),  # GLOBAL
    0x93: _stack_global,  # STACK_GLOBAL
    ord("R"): _reduce,
    ord("b"): _build,
    ord("Q"): _binpersid,  # BINPERSID
}

# An upper estimate of the memory each opcode's value takes, as CPython 3.11 builds them (measured with
# tracemalloc on 100,000 repeats: an empty set 296 bytes an opcode byte, dict 144, list 136, tuple 79,
# small int 39); strings, bytes and big ints add their size (pickle_gate, charged before building).
# A container opcode adds what the depth gate keeps for it (an entry of its table, ~100 bytes).
_OP_COST = 96
_TRACKED = 112
_COSTS = {
    0x8F: 320 + _TRACKED, 0x91: 320 + _TRACKED, 0x90: 320, ord("}"): 192 + _TRACKED, ord("d"): 192 + _TRACKED,
    ord("]"): 160 + _TRACKED, ord("l"): 160 + _TRACKED, ord(")"): _OP_COST + _TRACKED, ord("t"): _OP_COST + _TRACKED,
    0x85: _OP_COST + _TRACKED, 0x86: _OP_COST + _TRACKED, 0x87: _OP_COST + _TRACKED, ord("R"): _OP_COST + _TRACKED,
    ord("b"): 320,
}  # fmt: skip

# the same, indexed by opcode byte (the loop's lookups)
_OP_TABLE: list[Callable[[_Reader], None] | None] = [_OPS.get(code) for code in range(256)]
_COST_TABLE = [_COSTS.get(code, _OP_COST) for code in range(256)]

# opcodes that construct objects by class or from registries: never run
_REFUSED = {
    ord("i"): "INST",
    ord("o"): "OBJ",
    0x81: "NEWOBJ",
    0x92: "NEWOBJ_EX",
    0x82: "EXT1",
    0x83: "EXT2",
    0x84: "EXT4",
    ord("P"): "PERSID",
    0x97: "NEXT_BUFFER",
    0x98: "READONLY_BUFFER",
}


class Unpickled(NamedTuple):
    value: Any  # what the pickle describes
    nbytes: int  # an upper estimate of the memory its values take
    visits: int  # its values counted along every path (what a walk that follows every reference visits)


def read_pickle(
    data: bytes | bytearray | memoryview,
    rules: Rules,
    *,
    member: str | None = None,
    max_visits: int | None = None,
    max_bytes: int | None = None,
) -> Unpickled:
    """The value a pickle describes, built only through `rules` (never running code from the data),
    with an upper estimate of the memory it takes (refused once that passes `max_bytes`) and its count
    of values along every path (refused past `max_visits`, by default value_graph.visit_cap of the
    pickle's size). `data` is read in place (a memoryview is copied once)."""
    buf = bytes(data) if isinstance(data, memoryview) else data
    reader = _Reader(buf, rules, member, max_bytes)
    try:
        value = reader.run()
        reader.gate.forget()
        visits = walk_bounded(
            value, member=member, max_visits=visit_cap(len(buf)) if max_visits is None else max_visits
        )
    except RecursionError:  # (nothing here recurses; kept so no bare error escapes)
        raise FormatError("the pickle nests too deeply", member=member) from None
    except MemoryError:  # (the process's own limit is lower than the read budget)
        raise UnsafeArchiveError(
            "the process ran out of memory while building the pickle's values (lower max_read_bytes)", member=member
        ) from None
    return Unpickled(value, reader.gate.spent, visits)
