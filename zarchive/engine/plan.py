"""Phase one of every read: the plan. Nothing is constructed and no code named by the file runs.

The planner walks the manifest (and the `.jsonl` members whose lines are nodes) once, asks each
node's schema to check it, and collects what the read would do: every class it would construct or
call (by tag, with the object paths where each occurs), every member it would read and how many
bytes those hold, and how many nodes there are. Then, before anything is built:
- the limits are checked (`max_nodes`, `max_read_bytes`) against the figures the plan knows;
- every class is checked against `trusted=` (when given) and resolved, without importing anything,
  to a class or, with `unresolved="generic"`, to a GenericObject; so is every other callable of the
  reading program that the file picks by name (a handler from outside zarchive, a registered ZANJ
  loader: `use_code`). `Plan.classes` is the one list of both: audit() shows it, and construction
  calls no code that is not in it (LoadContext.check_code);
- a node this reader does not know, in a file of a newer minor format version, is a VersionError.
What the caller allows (trusted=, unresolved=, tensors=, the limits) is a ReadPolicy
(engine.read_policy). Phase two (context.LoadContext) constructs from the manifest as planned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..container import byte_groups
from ..container.budget import ReadBudget, json_memory_floor
from ..container.depth import MAX_DEPTH
from ..container.source import ByteSource
from ..errors import FormatError, UnknownTypeError, UnsafeArchiveError, UntrustedTypeError, VersionError, ZArchiveError
from ..nodes.base import NodeSchema, SchemaSource
from .objpath import join_path
from .protocol import FORMAT_MAJOR, FORMAT_MINOR, FORMAT_VERSION
from .read_policy import DEFAULT_MAX_NODES, ReadPolicy, TensorsAs, Unresolved
from .typeref import CLASS_KINDS, code_tag, is_zarchive_code, resolve_class


@dataclass
class Plan:
    """What one read will do: the classes (tag -> object paths), the members and their bytes."""

    classes: dict[str, list[str]] = field(default_factory=dict)  # classes and callables (see use_code)
    resolved: dict[tuple[str, str], type | None] = field(default_factory=dict)  # None: a GenericObject
    members: dict[str, int] = field(default_factory=dict)  # member -> bytes reading it allocates
    uses: dict[str, int] = field(default_factory=dict)  # member -> how many times the walk named it
    inline_bytes: int = 0
    nodes: int = 0

    @property
    def nbytes(self) -> int:
        """Bytes the read will allocate: members decoded (each once, however many nodes name it) or
        read from an unmapped source, plus inline data. Mapped uncompressed members cost nothing."""
        return sum(self.members.values()) + self.inline_bytes


class MemberReader(Protocol):
    """What a read needs of the file: its members (container.ArchiveReader for a .zarc,
    zanj.container.ZanjZip for a ZANJ file) and the zarchive format version it declares (a file of
    another format read through the same machinery declares "1.0": it has no newer node types)."""

    @property
    def format_version(self) -> str: ...
    @property
    def source(self) -> ByteSource: ...
    @property
    def budget(self) -> ReadBudget | None: ...
    def member_entry(self, name: str, *, path: str | None = None) -> dict[str, Any]: ...
    def member_bytes(self, name: str, *, path: str | None = None, expected_size: int | None = None) -> memoryview: ...


def file_version(reader: MemberReader) -> tuple[int, int]:
    major, _, minor = reader.format_version.partition(".")
    return int(major), int(minor)


class Planner:
    """Walks the manifest once; see the module docstring. `audit=True` collects classes without
    resolving or refusing any (for `zarchive.audit`)."""

    def __init__(
        self, registry: SchemaSource, reader: MemberReader, policy: ReadPolicy, *, audit: bool = False
    ) -> None:
        self.registry = registry
        self.reader = reader
        self.policy = policy
        self.audit = audit
        self.plan = Plan()
        self.path: list[str] = []
        self._depth = 0
        self._node_members: set[str] = set()  # members of nodes planned (see member_bytes)
        self._planned = 0  # plan.nbytes so far, kept as it grows (checked at each member and inline value)
        major, minor = file_version(reader)
        self.version = f"{major}.{minor}"
        self.newer = major == FORMAT_MAJOR and minor > FORMAT_MINOR
        self._mapped = reader.source.mapped
        # the open file's budget (made from the same setting, the JSON parsed to open it charged)
        self.budget = reader.budget or ReadBudget(policy.max_read_bytes, reader.source.size)

    @property
    def tensors(self) -> TensorsAs:
        return self.policy.tensors

    @property
    def path_str(self) -> str:
        return join_path(self.path)

    @property
    def given(self) -> dict[str, type]:
        """The classes the caller gave by class (trusted=, a root class), by tag: a file that names
        classes by bare name (ZANJ) may mean them."""
        return self.policy.given

    def run(self, node: Any, path: list[str]) -> Plan:
        self.path = list(path)
        self.visit(node)
        if not self.audit:
            self.budget.check_plan(self.plan.nbytes, path=self.path_str)
        return self.plan

    def error(self, message: str, *, member: str | None = None) -> FormatError:
        return FormatError(message, path=self.path_str, member=member)

    # --- walking ---
    def visit(self, node: Any, key: str | int | tuple[str | int, ...] | None = None) -> None:
        """Check one node and everything below it. `key`: its path component, or components (a tuple:
        an item of a list field visited on its own, as `("data", 2)`, one level deeper each)."""
        keys = () if key is None else key if isinstance(key, tuple) else (key,)
        self.path.extend(str(k) for k in keys)
        levels = max(1, len(keys))
        self._depth += levels
        try:
            if self._depth > MAX_DEPTH:
                raise self.error(f"manifest nested more than {MAX_DEPTH} levels deep")
            self.count_nodes(1)
            if isinstance(node, (str, bool, int, float)) or node is None:
                return
            if isinstance(node, list):
                for i, item in enumerate(node):
                    self.visit(item, i)
                return
            if not isinstance(node, dict):
                raise self.error(f"unexpected JSON value of type {type(node).__name__}")
            try:
                tag = self.registry.tag_of(node)
            except ValueError as e:
                raise self.error(str(e)) from None
            if tag is None:
                for k, v in node.items():
                    self.visit(v, k)
                return
            self._visit_typed(tag, node)
        finally:
            self._depth -= levels
            if keys:
                del self.path[-len(keys) :]

    def _visit_typed(self, tag: Any, node: dict[str, Any]) -> None:
        schema = self.registry.schema_for(tag)
        if schema is None:
            if self.newer:
                raise VersionError(
                    f"node type {str(tag)[:100]!r} is newer than this reader (the file is format {self.version}, "
                    f"this zarchive reads up to {FORMAT_VERSION}): upgrade zarchive to read it",
                    path=self.path_str,
                )
            raise UnknownTypeError(
                f"no handler named {str(tag)[:100]!r} (a custom handler this reader does not have: install the "
                "package that provides it, or pass it in handlers_pre)",
                path=self.path_str,
            )
        version = node.get("$version", 1)
        mine = getattr(schema, "version", 1)
        if type(version) is not int or version < 1:
            raise self.error(f"bad '$version' {str(version)[:20]!r}")
        if version > mine:
            raise VersionError(
                f"{tag!r} node of handler version {version}; this reader's handler is version {mine}: upgrade the "
                "package that provides it",
                path=self.path_str,
            )
        if not is_zarchive_code(type(schema)):  # a handler from outside zarchive is code the file picks
            self.use_code(type(schema), f"the handler of {str(tag)[:100]!r} nodes")
        self._plan_typed(tag, schema, node)

    def _plan_typed(self, tag: Any, schema: NodeSchema, node: dict[str, Any]) -> None:
        """`schema.plan(node)`, its failures as FormatErrors, or VersionErrors in a newer file."""
        try:
            try:
                schema.plan(node, self)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
                if isinstance(e, ZArchiveError):
                    raise
                raise self.error(f"malformed {str(tag)[:60]!r} node: {type(e).__name__}: {str(e)[:200]}") from None
        except ZArchiveError as e:
            if type(e) is FormatError and self.newer:
                since = getattr(schema, "since", "1.0")
                raise VersionError(
                    f"{tag!r} node in a shape this reader does not know ({e.message}; it reads {tag!r} nodes as "
                    f"format {since} defined them); the file is format {self.version}, this zarchive reads up to "
                    f"{FORMAT_VERSION}: upgrade zarchive to read it",
                    path=e.path if e.path is not None else self.path_str,
                    member=e.member,
                ) from e
            raise

    def run_section(self, key: str, schema: NodeSchema, node: Any) -> Plan:
        """Check a section of the manifest beside the root (format 1.3: `exports`, see
        nodes/exports.py) with its schema. Errors name the section instead of an object path."""
        self.path = []
        try:
            since = tuple(int(x) for x in schema.since.split("."))
            if file_version(self.reader) < since:
                raise self.error(f"it is format {schema.since}; the file says {self.version}")
            tag = node.get("$type") if isinstance(node, dict) else None
            if tag != schema.name:
                raise self.error(f"it must be a node of type {schema.name!r}")
            self.count_nodes(1)
            self._plan_typed(tag, schema, node)
        except ZArchiveError as e:
            where = f"in the manifest's {key!r} section: "
            raise type(e)(where + e.message, member=e.member) from None
        return self.plan

    def walk_fields(self, node: dict[str, Any]) -> None:
        """The default plan: every nested value of the node is a node (path: its JSON keys); '$ref' a member."""
        for k, v in node.items():
            if k == "$ref":
                self.member(v)
            elif not k.startswith("$") and isinstance(v, (dict, list)):
                self.visit(v, k)

    # --- what a node needs ---
    def member(self, name: Any, *, expected_size: int | None = None) -> dict[str, Any]:
        """Record that the read needs member `name`; its metadata entry."""
        if not isinstance(name, str):
            raise self.error(f"'$ref' must be a member name, not {type(name).__name__}")
        entry = self.reader.member_entry(name, path=self.path_str)
        if expected_size is not None and entry["size"] != expected_size:
            raise UnsafeArchiveError(
                f"the metadata declares {entry['size']} bytes, the manifest needs {expected_size}",
                member=name,
                path=self.path_str,
            )
        if entry.get("codec") == byte_groups.CODEC and name not in self.plan.members:
            # the chunk index must tile the member before a byte is decoded; decoded bytes count below
            byte_groups.parse_index(entry, member=name)
        self.plan.uses[name] = self.plan.uses.get(name, 0) + 1
        if name not in self.plan.members:
            cost = entry["size"] if entry.get("codec") != "none" or not self._mapped else 0
            self.plan.members[name] = cost
            self._planned += cost
            self._check_running(member=name)
        return entry

    def member_bytes(self, name: str, expected_size: int | None = None) -> memoryview:
        """A member's decoded bytes, for nodes stored in a member (a .jsonl list of nodes). Each such
        member is planned once: nodes in it that name it again, or name one member twice (a ZANJ
        file's external lists), would make the walk exponential in the file's size."""
        if name in self._node_members:
            raise self.error("the file reaches the nodes stored in a member twice", member=name)
        self._node_members.add(name)
        entry = self.member(name, expected_size=expected_size)
        if not self.audit:  # (the member's bytes and their parse, beside what the read plans so far)
            cost = self.plan.nbytes + json_memory_floor(entry["size"])
            self.budget.fits(cost, "planning the nodes stored in this member", member=name, path=self.path_str)
        return self.reader.member_bytes(name, path=self.path_str, expected_size=expected_size)

    def count_nodes(self, n: int) -> None:
        """Nodes a schema checks without visiting each (rows of a tensor table)."""
        self.plan.nodes += n
        if self.plan.nodes > self.policy.max_nodes:
            raise UnsafeArchiveError(
                f"the manifest has more than max_nodes={self.policy.max_nodes:,} nodes "
                "(raise it in ZArchive(max_nodes=...) if you trust the file)",
                path=self.path_str,
            )

    def inline_bytes(self, n: int) -> None:
        self.plan.inline_bytes += n
        self._planned += n
        self._check_running()

    def _check_running(self, *, member: str | None = None) -> None:
        """Refuse the read at the node whose member or inline data takes what the read planned past
        its budget (naming that node), not only once the whole manifest is walked."""
        if not self.audit and self._planned + self.budget.json_bytes > self.budget.limit:
            raise self.budget.refusal(
                f"reading this allocates {self._planned:,} bytes with what the read planned before it",
                member=member,
                path=self.path_str,
            )

    def callable_used(self, tag: str) -> None:
        """A function the read will call that the file does not choose freely (a defaultdict factory
        among the builtin types): listed by audit, always allowed."""
        self.plan.classes.setdefault(tag, []).append(self.path_str)

    def use_code(self, code: Any, what: str) -> None:
        """Reading the current node calls `code`, a class or callable of the reading program that the
        file picks by name (`what` says which: a handler from outside zarchive, a registered loader):
        listed under its tag (typeref.code_tag), and refused unless `trusted=` (when given) names it."""
        tag = code_tag(code)
        self.plan.classes.setdefault(tag, []).append(self.path_str)
        trusted = self.policy.trusted
        if not self.audit and trusted is not None and tag not in trusted:
            raise UntrustedTypeError(
                f"reading this calls {what}, {tag!r}, which is not in trusted= (add it, or read with "
                "zarchive.audit first to see every class and callable the read would run)",
                path=self.path_str,
            )

    def seed_class(self, tag: str, kind: str, cls: type) -> None:
        """`tag` is `cls`, known from a class already resolved (a model's declared config class):
        resolved without the registry and trusted with the class that declares it."""
        self.plan.resolved.setdefault((tag, kind), cls)

    def use_class(self, tag: Any, kind: str, *, found: type | UnknownTypeError | None = None) -> type | None:
        """The read constructs an object of the class named `tag` (a `kind` from typeref.CLASS_KINDS):
        the class, or None for a GenericObject. `found`: the class the caller already found for
        `tag`, or the error saying why it found none (a ZANJ file names classes by bare name, which
        zanj.classes matches); without it a 'module:QualName' tag is resolved here. Either way the
        class is checked against `trusted=` and `unresolved=` the same."""
        if not isinstance(tag, str):
            raise self.error(f"a {kind} node's 'class' must be a 'module:QualName' string")
        self.plan.classes.setdefault(tag, []).append(self.path_str)
        key = (tag, kind)
        if key in self.plan.resolved:
            cls = self.plan.resolved[key]
        else:
            cls = self._resolve(tag, kind, found)
            self.plan.resolved[key] = cls
        if cls is not None:
            for fn_tag, fname in field_functions(cls):
                self.plan.classes.setdefault(fn_tag, []).append(join_path([*self.path, fname]))
        return cls

    def _resolve(self, tag: str, kind: str, found: type | UnknownTypeError | None) -> type | None:
        what, accept = CLASS_KINDS[kind]
        given = self.policy.given.get(tag)

        def lookup() -> type:
            if isinstance(found, type):
                return found
            if found is not None:
                raise found
            return resolve_class(tag, accept, what=what, path=self.path_str)

        if self.audit:
            try:
                return given or lookup()
            except UnknownTypeError:
                return None
        trusted = self.policy.trusted
        if trusted is not None and tag not in trusted and given is None:
            raise UntrustedTypeError(
                f"the file names {what} class {tag!r}, which is not in trusted= (add it, or read with "
                "zarchive.audit first to see every class the file names)",
                path=self.path_str,
            )
        if given is not None:
            if found is None and not accept(given):  # (a caller that found the class judged it itself)
                raise UnknownTypeError(f"{tag!r} is not a {what} class", path=self.path_str)
            return given
        try:
            return lookup()
        except UnknownTypeError as e:
            if self.policy.unresolved == "generic":
                return None
            raise UnknownTypeError(
                f"{e.message}; or read it without the class: unresolved='generic' gives a zarchive.GenericObject",
                path=e.path,
            ) from None


def field_functions(cls: type) -> list[tuple[str, str]]:
    """(tag, field name) of the functions a dataclass's fields run on reading (muutils'
    deserialize_fn and loading_fn)."""
    if not dataclasses.is_dataclass(cls):
        return []
    out = []
    for f in dataclasses.fields(cls):
        for attr in ("deserialize_fn", "loading_fn"):
            fn: Callable[..., Any] | None = getattr(f, attr, None)
            if fn is not None:
                out.append((f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', '?')}", f.name))
    return out


__all__ = [  # with the read policy's names (engine.read_policy), which readers import from here
    "DEFAULT_MAX_NODES",
    "MAX_DEPTH",
    "MemberReader",
    "Plan",
    "Planner",
    "ReadPolicy",
    "TensorsAs",
    "Unresolved",
    "field_functions",
    "file_version",
]
