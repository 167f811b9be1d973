"""The allocation gate: one memory budget per read, what opening and reading a file may allocate, known
before allocating. Every entry point (the `.zarc` reader, foreign files, ZANJ files, DCP directories,
the CLI's commands) charges what it builds from file data here, *before* building it, at its
in-memory size: `charge` for what stays for the life of the open file (parsed JSON, a pickle's
values), `check_plan` for what one read plans, `fits`/`nbytes` for sizes computed from declared
shapes (overflow-safe, absurd dimensions refused).

The budget (`max_read_bytes`; by default 1 GiB plus 16 times the file's size) is charged with:

- the JSON the reader parses (the manifest, the metadata, `.jsonl` members), at an upper estimate of
  the Python objects parsing builds, taken from the text before parsing it (`json_memory_estimate`);
- what phase one of a read plans (plan.Plan.nbytes: decoded members, each once; members read into
  memory; inline data), checked by the planner against what is left.

Mapped members (`mmap=True`) cost nothing: they are the file. The writer checks what it writes against
the same rule (write_check), so every file a default save writes, a default read accepts.
"""

from __future__ import annotations

from ..errors import FormatError, UnsafeArchiveError

__all__ = [
    "DEFAULT_READ_BYTES_BASE",
    "DEFAULT_READ_BYTES_PER_FILE_BYTE",
    "MAX_DIMENSION",
    "ReadBudget",
    "default_read_budget",
    "holds_json",
    "json_memory_estimate",
    "json_memory_floor",
    "shape_nbytes",
]

# A 10 GB model read into memory costs its 10 GB (under 16 x 10 GB); its manifest a few MB of
# objects; a compressed table decodes to a few times its file. A 133 KB archive declaring 4 GB of
# decompressed members, or a 48 MB manifest of empty lists (2.5 GB of objects), does not fit.
DEFAULT_READ_BYTES_BASE = 1 << 30
DEFAULT_READ_BYTES_PER_FILE_BYTE = 16

# Bytes of Python objects per JSON token, as CPython 3.11-3.14 builds them (64-bit; measured with
# tracemalloc on 8 MB texts of one repeated value: `[],` 23x its text, `{"a":0},` 26x, `[[]],` 32x,
# `"ab",` 14x, `1.5,` 10x). Each figure is a little over what was measured, so the estimate bounds
# the real cost for every text tried; texts of long strings and numbers cost about their length.
_PER_TEXT_BYTE = 4
_PER_LIST = 80  # `[`: a list object and its pointer array
_PER_OBJECT = 200  # `{`: a dict with its key table
_PER_COMMA = 32  # `,`: another pointer, and a small int or float object
_PER_QUOTE = 32  # `"`: half a str object (two quotes a string)
_PIECE = 1 << 20
_NOT_COUNTED = bytes(c for c in range(256) if c not in b'[{,\n"')  # every byte but the five counted


def json_memory_estimate(data: bytes | bytearray | memoryview | str) -> int:
    """An upper estimate of the memory that parsing the JSON text `data` builds, counted per token
    kind in C (linear in the text, nothing parsed; big texts in 1 MiB pieces, never copied whole)."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    view = memoryview(data).cast("B")
    counts = [0, 0, 0, 0]
    for at in range(0, view.nbytes, _PIECE):
        piece = bytes(view[at : at + _PIECE]).translate(None, _NOT_COUNTED)  # (one pass keeps what is counted)
        counts[0] += piece.count(b"[")
        counts[1] += piece.count(b"{")
        counts[2] += piece.count(b",") + piece.count(b"\n")  # (.jsonl lines are joined by commas)
        counts[3] += piece.count(b'"')
    lists, objects, commas, quotes = counts
    return (
        _PER_TEXT_BYTE * view.nbytes
        + _PER_LIST * lists
        + _PER_OBJECT * objects
        + _PER_COMMA * commas
        + _PER_QUOTE * quotes
    )


def json_memory_floor(text_bytes: int) -> int:
    """The least that parsing `text_bytes` bytes of JSON text is charged (json_memory_estimate never
    gives less): known from a declared size, before the text is decompressed."""
    return _PER_TEXT_BYTE * text_bytes


JSON_SUFFIXES = (".json", ".jsonl", ".json.zst", ".jsonl.zst")


def holds_json(member: str) -> bool:
    """Whether a member is JSON text a reader parses (by its name, as the spec assigns them)."""
    return member.endswith(JSON_SUFFIXES)


# No real dimension comes near this (2**48 elements of one byte is 256 TiB); a declared shape past it
# is refused as malformed before anything multiplies it.
MAX_DIMENSION = 1 << 48


def shape_nbytes(
    shape: object, itemsize: int, *, what: str = "a shape", member: str | None = None, path: str | None = None
) -> int:
    """The bytes a dense array of `shape` and `itemsize` takes, from a declared shape: every dimension
    an int in [0, MAX_DIMENSION] (else FormatError naming `what`), the product in Python ints (no
    overflow)."""
    try:
        dims = [d for d in shape]  # type: ignore[attr-defined]
    except TypeError:
        raise FormatError(f"{what} is not a list of dimensions: {str(shape)[:80]}", member=member, path=path) from None
    n = itemsize
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= MAX_DIMENSION:
            shown = f"of {d.bit_length()} bits" if isinstance(d, int) and d.bit_length() > 64 else str(d)[:40]
            raise FormatError(f"{what} has an impossible dimension {shown}", member=member, path=path)
        n *= d
    return n


def default_read_budget(file_size: int) -> int:
    """What reading a file of `file_size` bytes may allocate when max_read_bytes is not given."""
    return DEFAULT_READ_BYTES_BASE + DEFAULT_READ_BYTES_PER_FILE_BYTE * file_size


class ReadBudget:
    """The budget of one open file: its limit, and the JSON already parsed (charged once a member)."""

    def __init__(self, max_read_bytes: int | None, file_size: int) -> None:
        self.explicit = max_read_bytes is not None
        self.limit = max_read_bytes if max_read_bytes is not None else default_read_budget(file_size)
        self.json_bytes = 0
        self._charged: set[str] = set()

    @property
    def setting(self) -> str:
        """The limit as the user sets it, for messages."""
        default = "" if self.explicit else " (the default: 1 GiB + 16 x the file's size)"
        return f"max_read_bytes={self.limit:,}{default}"

    def refusal(self, what: str, *, member: str | None = None, path: str | None = None) -> UnsafeArchiveError:
        return UnsafeArchiveError(
            f"{what}, over {self.setting} (raise it with ZArchive(max_read_bytes=...) if you trust the file)",
            member=member,
            path=path,
        )

    def charge_json(self, data: bytes | bytearray | memoryview | str, *, member: str) -> None:
        """Charge the parse of member `member`'s JSON text, before it is parsed (once a member)."""
        if member in self._charged:
            return
        cost = json_memory_estimate(data)
        if self.json_bytes + cost > self.limit:
            spent = f" ({self.json_bytes + cost:,} with the JSON parsed before it)" if self.json_bytes else ""
            raise self.refusal(f"parsing this JSON allocates up to {cost:,} bytes{spent}", member=member)
        self.json_bytes += cost
        self._charged.add(member)

    def charge(self, cost: int, what: str, *, member: str | None = None, path: str | None = None) -> None:
        """Charge `cost` bytes that a read builds from file data and keeps for the life of the open
        file (a pickle's values, a ZANJ table, an assembled DCP tensor), after checking that they fit:
        refused before anything is allocated."""
        if self.json_bytes + cost > self.limit:
            raise self.refusal(f"{what} allocates up to {cost:,} bytes", member=member, path=path)
        self.json_bytes += cost

    def fits(self, cost: int, what: str, *, member: str | None = None, path: str | None = None) -> None:
        """Refuse `cost` bytes that one step of a read is about to allocate and give back when it ends
        (a cast, a materialised view, a decompressed member checked and dropped), without charging
        them: they must fit beside what the open file already holds."""
        if self.json_bytes + cost > self.limit:
            raise self.refusal(f"{what} allocates {cost:,} bytes", member=member, path=path)

    @property
    def left(self) -> int:
        """What the budget still allows."""
        return max(0, self.limit - self.json_bytes)

    def check_plan(self, planned: int, *, path: str | None = None) -> None:
        """Refuse a read that plans to allocate `planned` bytes beyond the JSON already parsed."""
        if planned + self.json_bytes > self.limit:
            spent = f" ({planned + self.json_bytes:,} with the JSON parsed to open it)" if self.json_bytes else ""
            raise self.refusal(f"reading this allocates {planned:,} bytes{spent}", path=path)
