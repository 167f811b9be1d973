"""The handler contract as a test a third-party handler runs against itself.

    from zarchive.testing import check_handler

    def test_fraction_handler_keeps_the_contract(tmp_path):
        check_handler(FractionHandler(), [Fraction(1, 3), Fraction(-2, 7)], tmp_path=tmp_path)

What is checked, in order (the first broken promise raises HandlerContractError naming it):
1. `name` is a non-empty string without surrounding blanks, `version` an int of at least 1;
2. `accepts(cls)` answers a bool for any class (builtins, zarchive's own, each example's), and True
   for each example's class;
3. each example, saved through a ZArchive that has the handler first (`handlers_pre`), is written as
   a node whose "$type" is the handler's name (unless `plain=True`: the handler writes plain JSON),
   whose `summary` is a non-empty string and whose `children` are None or a dict;
4. each example reads back equal (`equal(original, loaded)`, by default `==` and the same type) by
   `read`, `read(lazy=False)` and `open(...)[key]`, saved at the top and nested in a dict;
5. the handler trusts nothing in a node: loading the node with each field removed or replaced by
   junk (None, -1, 2**70, "", [], {}, a member name that does not exist, ...) and loading nodes with
   no fields or fields of the wrong types raises a ZArchiveError or returns a value, never another
   exception (files come from strangers: a KeyError or TypeError from deep inside a handler is a
   crash for the reader).
Nothing here needs pytest; every file is written under `tmp_path` (a fresh temporary folder if none).
"""

from __future__ import annotations

import enum
import os
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..api import ZArchive
from ..errors import ZArchiveError
from ..handlers.base import Handler

__all__ = ["JUNK_VALUES", "PROBE_CLASSES", "HandlerContractError", "check_handler"]

# What a field of a node from a hostile file may hold instead of what the handler wrote.
JUNK_VALUES: tuple[Any, ...] = (
    None, True, -1, 2**70, 1.5, "", "x", "nan", [], [-1], [[]], {}, {"$type": "int"}, "a.npy",
)  # fmt: skip

# Classes every handler is asked about: accepts() must answer a bool for each.
PROBE_CLASSES: tuple[type, ...] = (
    int, bool, str, bytes, float, type(None), object, type, list, dict, tuple, set, frozenset, complex,
    Exception, enum.Enum, ZArchive, Path,
)  # fmt: skip


class HandlerContractError(AssertionError):
    """A handler broke a promise of the handler contract (the message says which, and for what)."""


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and bool(a == b)


@contextmanager
def _folder(tmp_path: str | os.PathLike[str] | None) -> Iterator[Path]:
    if tmp_path is not None:
        yield Path(tmp_path)
        return
    with tempfile.TemporaryDirectory(prefix="zarchive-contract-") as d:
        yield Path(d)


def _fail(handler: Handler, what: str) -> HandlerContractError:
    return HandlerContractError(f"handler {handler.name!r} ({type(handler).__qualname__}): {what}")


def check_handler(
    handler: Handler,
    examples: Iterable[Any],
    *,
    tmp_path: str | os.PathLike[str] | None = None,
    equal: Callable[[Any, Any], bool | None] | None = None,
    plain: bool = False,
    probe_classes: Iterable[type] = (),
) -> None:
    """Check that `handler` keeps the handler contract on `examples` (objects it saves); see the
    module's docstring for the list. `equal(original, loaded)` compares a round trip: it returns a
    bool, or None after asserting by itself (e.g. pandas.testing); by default the types must be the
    same and `==` true. `plain`: the handler writes plain JSON values rather than nodes of its own.
    `probe_classes`: more classes to ask `accepts` about. Raises HandlerContractError."""
    examples = list(examples)
    if not examples:
        raise _fail(handler, "check_handler needs at least one example object")
    _check_identity(handler)
    _check_accepts(handler, examples, [*PROBE_CLASSES, *probe_classes])
    za = ZArchive(handlers_pre=(handler,), durable=False)
    compare = equal or _same
    with _folder(tmp_path) as folder:
        for n, obj in enumerate(examples):
            top, nested = folder / f"contract-{n}.zarc", folder / f"contract-nested-{n}.zarc"
            za.save(obj, top)
            za.save({"item": obj}, nested)
            node = _check_node(handler, za, nested, plain, n)
            for route, back in _round_trips(za, top, nested):
                verdict = compare(obj, back)
                if verdict is False:
                    raise _fail(
                        handler, f"example {n} ({type(obj).__qualname__}) read back by {route} differs: {back!r}"
                    )
            if not plain:
                _check_distrust(handler, za, nested, node, n)


def _check_identity(handler: Handler) -> None:
    if not isinstance(handler, Handler):
        raise HandlerContractError(f"{handler!r} is not a zarchive.Handler")
    name = getattr(handler, "name", None)
    if not isinstance(name, str) or not name or name != name.strip():
        raise _fail(handler, f"`name` must be a non-empty string without surrounding blanks, not {name!r}")
    version = getattr(handler, "version", None)
    if type(version) is not int or version < 1:
        raise _fail(handler, f"`version` must be an int of at least 1, not {version!r}")


def _check_accepts(handler: Handler, examples: list[Any], probes: list[type]) -> None:
    for cls in [*probes, *(type(x) for x in examples)]:
        try:
            answer = handler.accepts(cls)
        except Exception as e:  # the contract: an answer, never an exception
            raise _fail(handler, f"accepts({cls.__qualname__}) raised {type(e).__name__}: {e}") from e
        if type(answer) is not bool:
            raise _fail(handler, f"accepts({cls.__qualname__}) returned {answer!r}, not a bool")
    for obj in examples:
        if not handler.accepts(type(obj)):
            raise _fail(handler, f"accepts({type(obj).__qualname__}) is False for an example it is given")


def _check_node(handler: Handler, za: ZArchive, nested: Path, plain: bool, n: int) -> Any:
    with za.open(nested) as arc:
        node = arc.node("item")
    if plain:
        return node
    if not isinstance(node, dict) or node.get("$type") != handler.name:
        raise _fail(handler, f"example {n} was saved as {str(node)[:200]}, not as a node whose '$type' is its name")
    summary = handler.summary(node)
    if not isinstance(summary, str) or not summary:
        raise _fail(handler, f"summary() of its node is {summary!r}, not a non-empty string")
    kids = handler.children(node)
    if kids is not None and not isinstance(kids, dict):
        raise _fail(handler, f"children() of its node is a {type(kids).__name__}, not None or a dict")
    return node


def _round_trips(za: ZArchive, top: Path, nested: Path) -> Iterator[tuple[str, Any]]:
    yield "read", za.read(top)
    yield "read(lazy=False)", za.read(top, lazy=False)
    with za.open(nested) as arc:
        yield "open(...)['item']", arc["item"]


def _check_distrust(handler: Handler, za: ZArchive, path: Path, node: dict[str, Any], n: int) -> None:
    fields = [k for k in node if k != "$type"]
    bad: list[tuple[str, Any]] = [
        ("a node with no fields", {"$type": handler.name}),
        (
            "a node whose fields have the wrong types",
            {"$type": handler.name, "$ref": 5, "dtype": [], "shape": "x", "items": 3, "value": {}, "class": 7},
        ),
        ("a node naming a member that does not exist", {"$type": handler.name, "$ref": "no-such-member.npy"}),
    ]
    for key in fields:
        bad.append((f"the field {key!r} removed", {k: v for k, v in node.items() if k != key}))
        bad += [(f"the field {key!r} replaced by {junk!r}", {**node, key: junk}) for junk in JUNK_VALUES]
    with za.open(path) as arc, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # error_mode="warn" reports some junk as mismatches
        for what, broken in bad:
            try:
                arc.load_node(broken, "item")
            except ZArchiveError:
                pass
            except Exception as e:  # the promise: a ZArchiveError or a value
                raise _fail(
                    handler,
                    f"loading example {n}'s node with {what} raised {type(e).__name__}: {e} (raise a ZArchiveError, e.g. ctx.error(...))",
                ) from e
