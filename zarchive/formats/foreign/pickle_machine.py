"""The state of the restricted pickle reader (foreign.restricted_pickle) while it runs: the pickle's
bytes, read in place and charged to the build gate (foreign.pickle_gate) before anything is
decoded or copied; the stack, its marks and the memo, each refusing what a well-formed pickle never
does (popping past a mark, reading a memo entry never stored) with a FormatError. What each opcode
does with this state is foreign.pickle_opcodes.
"""

from __future__ import annotations

import struct
from typing import Any

from ...errors import FormatError, UnsafeArchiveError
from .pickle_gate import BuildGate, bytes_size, str_size
from .pickle_rules import Rules

MAX_LONG_BYTES = 4096  # an int of more than 32,768 bits is not a weight file's


_STRUCTS = {fmt: struct.Struct(fmt) for fmt in ("<B", "<H", "<i", "<I", "<Q")}


class PickleMachine:
    """One pickle being read: its input, stack, marks and memo (see the module docstring)."""

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
