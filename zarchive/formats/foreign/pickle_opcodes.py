"""What each pickle opcode does to the restricted reader's state (foreign.pickle_machine), what it
costs in memory, which opcodes are refused outright, and the loop that runs a pickle through them.

The loop reads one opcode byte at a time, charges its cost to the build gate before running it,
and dispatches through a table of 256 entries: an opcode that constructs objects by class or from
registries (INST, OBJ, NEWOBJ, extension codes, out-of-band buffers...) is a RefusedPickleError, an
opcode this reader does not know a FormatError. Globals are names only (`Global`); what a REDUCE or
BUILD of one makes is the caller's `Rules`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from ...errors import FormatError, RefusedPickleError
from .pickle_gate import copy_bound
from .pickle_machine import PickleMachine
from .pickle_rules import Global


def refuse(message: str, member: str | None) -> RefusedPickleError:
    return RefusedPickleError(message, member=member)


def run(r: PickleMachine) -> Any:
    """The value the pickle in `r` describes (the opcodes up to its STOP)."""
    ops, costs, gate = _OP_TABLE, _COST_TABLE, r.gate
    data = r.data
    end, limit = len(data), gate.limit
    while r.pos < end:
        code = data[r.pos]
        r.pos += 1
        gate.spent += costs[code]
        if gate.spent > limit:
            raise gate.refusal()
        op = ops[code]
        if op is None:
            name = _REFUSED.get(code)
            if name is not None:
                raise refuse(f"the pickle uses opcode {name}, which can construct arbitrary objects", r.member)
            raise FormatError(f"unknown or unsupported pickle opcode 0x{code:02x}", member=r.member)
        if op is _stop:
            result = r.pop()
            if r.stack or r.marks:
                raise FormatError("the pickle stops with values left on its stack", member=r.member)
            return result
        op(r)
    raise FormatError("the pickle ends without a STOP opcode (truncated)", member=r.member)


# --- opcodes: each takes the reader; the table maps opcode byte -> function ---
def _stop(r: PickleMachine) -> None:  # (handled in the loop)
    return None


def _setitems(r: PickleMachine, d: Any, items: list[Any]) -> None:
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


def _appends(r: PickleMachine, lst: Any, items: list[Any]) -> None:
    if not isinstance(lst, list):
        raise FormatError("APPEND(S) on a value that is not a list", member=r.member)
    r.gate.grow(lst, items)
    lst.extend(items)


def _additems(r: PickleMachine) -> None:
    items = r.pop_mark()
    s = r.top()
    if not isinstance(s, set):
        raise FormatError("ADDITEMS on a value that is not a set", member=r.member)
    r.gate.grow(s, items)  # (before any item is hashed)
    try:
        s.update(items)
    except TypeError:
        raise FormatError("a set item is not hashable", member=r.member) from None


def _frozenset(r: PickleMachine) -> None:
    items = r.pop_mark()
    depth = r.gate.holding(items)  # (before any item is hashed)
    try:
        r.push(r.gate.made(frozenset(items), depth))
    except TypeError:
        raise FormatError("a frozenset item is not hashable", member=r.member) from None


def _global(r: PickleMachine, module: str, name: str) -> None:
    r.push(r.rules.global_value(Global(module, name)))


def _stack_global(r: PickleMachine) -> None:
    name, module = r.pop(), r.pop()
    if not isinstance(module, str) or not isinstance(name, str):
        raise FormatError("STACK_GLOBAL needs two strings", member=r.member)
    _global(r, module, name)


def _reduce(r: PickleMachine) -> None:
    args = r.pop()
    func = r.pop()
    if not isinstance(args, tuple):
        raise FormatError("REDUCE needs a tuple of arguments", member=r.member)
    r.gate.fits(copy_bound(args))  # what the call may copy from its arguments, before it runs
    r.push(r.gate.called(r.rules.reduce(func, args)))


def _build(r: PickleMachine) -> None:
    state = r.pop()
    obj = r.pop()
    value = r.rules.build(obj, state)
    r.gate.deepen(value, r.gate.depth(state))  # (it now holds what `state` holds: a state dict's _metadata)
    r.push(value)


def _float(r: PickleMachine) -> None:
    r.push(struct.unpack(">d", r.take(8))[0])


def _binunicode(n_fmt: str) -> Callable[[PickleMachine], None]:
    return lambda r: r.push(r.string(r.u(n_fmt)))


def _binbytes(n_fmt: str, cls: type = bytes) -> Callable[[PickleMachine], None]:
    return lambda r: r.push(r.binary(r.u(n_fmt), cls))


def _tuple_n(n: int) -> Callable[[PickleMachine], None]:
    def op(r: PickleMachine) -> None:
        stack = r.stack
        if len(stack) - n < (r.marks[-1] if r.marks else 0):
            for _ in range(n):
                r.pop()  # (one of these raises: fewer than n values above the last mark)
        items = stack[-n:]
        del stack[-n:]
        stack.append(r.gate.tuple_of(items))  # (refused before a tuple deeper than MAX_DEPTH exists to be hashed)

    return op


def _put(n_fmt: str) -> Callable[[PickleMachine], None]:
    def op(r: PickleMachine) -> None:
        r.memo[r.u(n_fmt)] = r.top()

    return op


def _get(n_fmt: str) -> Callable[[PickleMachine], None]:
    return lambda r: r.push(r.memo_get(r.u(n_fmt)))


def _memoize(r: PickleMachine) -> None:
    r.memo[len(r.memo)] = r.top()


def _proto(r: PickleMachine) -> None:
    v = r.take(1)[0]
    if v > 5:
        raise FormatError(f"pickle protocol {v} is newer than this reader knows", member=r.member)


def _frame(r: PickleMachine) -> None:
    n = r.u("<Q")
    if r.pos + n > len(r.data):
        raise FormatError("a pickle frame runs past the end of the data", member=r.member)


def _binpersid(r: PickleMachine) -> None:
    r.push(r.rules.persistent(r.pop()))


def _pop_mark(r: PickleMachine) -> None:
    r.pop_mark()


def _mark(r: PickleMachine) -> None:
    r.marks.append(len(r.stack))


def _setitem(r: PickleMachine) -> None:
    v, k = r.pop(), r.pop()
    _setitems(r, r.top(), [k, v])


def _setitems_op(r: PickleMachine) -> None:
    items = r.pop_mark()
    _setitems(r, r.top(), items)


def _append(r: PickleMachine) -> None:
    v = r.pop()
    _appends(r, r.top(), [v])


def _appends_op(r: PickleMachine) -> None:
    items = r.pop_mark()
    _appends(r, r.top(), items)


def _dict_op(r: PickleMachine) -> None:
    items = r.pop_mark()
    d: dict[Any, Any] = r.gate.made({}, 1)
    _setitems(r, d, items)
    r.push(d)


def _list_op(r: PickleMachine) -> None:
    r.push(r.gate.list_of(r.pop_mark()))


_OPS: dict[int, Callable[[PickleMachine], None]] = {
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
_OP_TABLE: list[Callable[[PickleMachine], None] | None] = [_OPS.get(code) for code in range(256)]
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
