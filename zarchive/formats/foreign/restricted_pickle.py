"""A restricted pickle reader: a small interpreter of pickle opcodes that builds plain data only.

It never calls `pickle.load` or an Unpickler and never imports or looks up anything by a name read
from the file. A GLOBAL / STACK_GLOBAL opcode yields a `Global` (just the name); what a REDUCE of a
global builds, and which globals may appear at all, is decided by the caller's `Rules` (see
foreign.torch_pickle for what torch.save files need). Objects are built from the opcodes that make
containers and scalars; every opcode that would construct an arbitrary class (INST, OBJ, NEWOBJ,
NEWOBJ_EX, BUILD on anything but what the rules allow, extension registry codes, out-of-band
buffers) is refused with RefusedPickleError before anything runs. The reader's state (input,
stack, memo) is foreign.pickle_machine; what each opcode does and costs, and the loop, is
foreign.pickle_opcodes.

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

from typing import Any, NamedTuple

from ...errors import FormatError, UnsafeArchiveError
from .pickle_machine import PickleMachine
from .pickle_opcodes import run
from .pickle_rules import Rules
from .value_graph import visit_cap, walk_bounded


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
    reader = PickleMachine(buf, rules, member, max_bytes)
    try:
        value = run(reader)
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
