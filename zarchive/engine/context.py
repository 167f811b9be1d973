"""The save and load contexts a handler talks to.

A context carries what one save or one read needs and nothing global: the current object path (for
member names and error messages), the members being planned, per-run scratch state for handlers
(memo tables so shared objects are stored once), and access to the archive being read.
A new context is made for every save and every read, so handlers are reentrant.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from ..container.archive_reader import ArchiveReader
from ..container.archive_writer import RESERVED_NAMES, CompressHint, MemberPlan, Part
from ..container.byte_groups import CODEC as BYTE_GROUPS_CODEC
from ..container.names import collision_key, fit_stem, sanitize_component
from ..errors import FormatError, SaveError, UntrustedTypeError, VersionError, ZArchiveError
from ..options import ErrorMode, Settings
from .objpath import join_path
from .plan import MemberReader, Plan, ReadPolicy, file_version
from .protocol import FORMAT_MAJOR, FORMAT_MINOR, FORMAT_VERSION
from .save_hints import save_hint
from .typeref import code_tag, is_zarchive_code

Node = Any  # a JSON value: the manifest form of one object


class Saver(Protocol):
    """A handler as a save sees it."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> int: ...
    def save(self, obj: Any, ctx: SaveContext) -> Node: ...


class Loader(Protocol):
    """A handler as a read sees it."""

    def load(self, node: dict[str, Any], ctx: LoadContext) -> Any: ...


class HandlerSource(Protocol):
    """Where contexts find handlers (zarchive.engine.registry.HandlerRegistry; for reading a ZANJ file,
    zarchive.formats.zanj.handlers.ZanjHandlers)."""

    def for_object(self, obj: Any) -> Saver | None: ...
    def tag_of(self, node: dict[str, Any]) -> Any: ...
    def for_tag(self, tag: Any, *, path: str | None = None, tensors: str = "torch") -> Loader: ...


T = TypeVar("T")
MAX_DEPTH = 200


class SaveContext:
    """State of one save: object path, planned members, handler scratch space."""

    def __init__(
        self, registry: HandlerSource, settings: Settings, *, on_member: Callable[[MemberPlan], None] | None = None
    ) -> None:
        self.registry = registry
        self.settings = settings
        self._on_member = on_member  # called with each member as it is planned (compress_early)
        self.path: list[str] = []
        self.members: list[MemberPlan] = []
        self._name_keys: set[str] = {collision_key(n) for n in RESERVED_NAMES}
        self._active: set[int] = set()
        self._depth = 0
        self._state: dict[str, Any] = {}
        self._finalizers: list[Callable[[], None]] = []

    @property
    def path_str(self) -> str:
        return join_path(self.path)

    def error(self, message: str) -> SaveError:
        return SaveError(message, path=self.path_str)

    def save(self, obj: Any, key: str | int | None = None) -> Node:
        """The manifest node for `obj`, saved at child `key` of the current path."""
        if key is not None:
            self.path.append(str(key))
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:  # counted per node, as the reader counts (plan.Planner.visit)
                raise self.error(f"objects nested more than {MAX_DEPTH} levels deep")
            handler = self.registry.for_object(obj)
            if handler is None:
                raise self.error(
                    f"no handler can save an object of type {type(obj).__module__}.{type(obj).__qualname__} "
                    f"({save_hint(obj) or 'register a handler for it, or convert it to a supported type'})"
                )
            oid = id(obj)
            if oid in self._active:
                raise self.error("the object contains itself (a reference cycle cannot be saved)")
            self._active.add(oid)
            try:
                node = handler.save(obj, self)
                if handler.version != 1 and type(node) is dict and node.get("$type") == handler.name:
                    node["$version"] = handler.version  # a reader with an older handler refuses it
                return node
            except ZArchiveError:
                raise
            except Exception as e:  # a handler's own failure: say where it happened
                raise SaveError(f"{handler.name} handler failed: {type(e).__name__}: {e}", path=self.path_str) from e
            finally:
                self._active.discard(oid)
        finally:
            self._depth -= 1
            if key is not None:
                self.path.pop()

    def member_name(self, ext: str, hint: Iterable[str] | None = None) -> str:
        """A unique member name that follows the object path: 'a/b/c.<ext>'."""
        parts = [sanitize_component(p) for p in (self.path if hint is None else hint)]
        stem = fit_stem("/".join(parts) if parts else "root")
        name = f"{stem}.{ext}"
        n = 2
        while collision_key(name) in self._name_keys:
            name = f"{stem}~{n}.{ext}"
            n += 1
        self._name_keys.add(collision_key(name))
        return name

    def add_member(
        self,
        ext: str,
        parts: Callable[[], Iterable[Part]],
        *,
        compress: CompressHint = "try",
        hint: Iterable[str] | None = None,
    ) -> MemberPlan:
        """Plan a member; its bytes are produced by `parts()` when the archive is written, or as soon
        as it is planned where `on_member` takes them then (compress_early): `parts()` must give the
        same bytes whenever it is called during the save."""
        plan = MemberPlan(base_name=self.member_name(ext, hint), parts=parts, compress=compress)
        self.members.append(plan)
        if self._on_member is not None:
            self._on_member(plan)
        return plan

    def ref_node(self, plan: MemberPlan, type_name: str, **fields: Any) -> dict[str, Any]:
        """A manifest node pointing at `plan`; '$ref' is filled in once the codec is chosen."""
        node: dict[str, Any] = {"$type": type_name, "$ref": plan.base_name}
        node.update(fields)
        plan.nodes.append(node)
        return node

    def state(self, key: str, factory: Callable[[], T]) -> T:
        """Per-save scratch space for handlers (e.g. a memo of shared objects)."""
        if key not in self._state:
            self._state[key] = factory()
        return self._state[key]

    def on_finalize(self, fn: Callable[[], None]) -> None:
        """Run `fn` once the whole tree is walked (e.g. to group tensors into members)."""
        self._finalizers.append(fn)

    def finalize(self) -> None:
        for fn in self._finalizers:
            fn()
        self._finalizers.clear()


class LoadContext:
    """State of one read (phase two: construction, from a plan made by plan.Planner): the file's
    members (`reader`; `archive` where it is a .zarc), the object path, the classes the plan
    resolved, handler scratch space, reading options."""

    def __init__(
        self,
        registry: HandlerSource,
        archive: MemberReader,
        settings: Settings,
        *,
        plan: Plan | None = None,
        policy: ReadPolicy | None = None,
        map_location: Any = None,
        dtype: Any = None,
        whole: bool = False,
    ) -> None:
        self.registry = registry
        self.reader = archive
        # a full read (it reads every member whole): tensors are found by their members' headers,
        # which it checks; a fetch of one value finds them by their checksum entries (tensor_slots)
        self.whole = whole
        self.settings = settings
        self.plan = plan if plan is not None else Plan()
        self.policy = policy if policy is not None else ReadPolicy()
        self.map_location = map_location
        self.dtype = dtype
        major, minor = file_version(archive)
        self._newer = major == FORMAT_MAJOR and minor > FORMAT_MINOR
        self._depth = 0
        self.path: list[str] = []
        self._state: dict[str, Any] = {}
        self._owned: dict[tuple[str, int, int], memoryview] = {}
        self._mapping: Any = None  # this load's own copy-on-write mapping of the file, made on first use

    @property
    def path_str(self) -> str:
        return join_path(self.path)

    @property
    def archive(self) -> ArchiveReader:
        """The .zarc being read, for the handlers of zarchive's own node types (member ranges,
        parsed headers, the mapping)."""
        if not isinstance(self.reader, ArchiveReader):
            raise self.error(f"a .zarc node type in a {type(self.reader).__name__} file")
        return self.reader

    def error(
        self, message: str, *, member: str | None = None, cls: type[ZArchiveError] = FormatError
    ) -> ZArchiveError:
        return cls(message, path=self.path_str, member=member)

    @property
    def tensors(self) -> str:
        """ "torch", or "numpy" when tensors are read as numpy arrays (torch is then not imported)."""
        return self.policy.tensors

    def resolve_class(self, tag: Any, kind: str) -> type | None:
        """The class the plan resolved `tag` to (None: read it as a GenericObject)."""
        try:
            return self.plan.resolved[(tag, kind)]
        except (KeyError, TypeError):
            raise self.error(f"the class {str(tag)[:200]!r} was not planned for this read") from None

    def planned_code(self, code: Any) -> bool:
        """Whether the plan of this read listed `code` (a class or callable of the reading program
        that the file picks: see Planner.use_code), so trusted= has checked it."""
        return code_tag(code) in self.plan.classes

    def check_code(self, code: Any, what: str) -> None:
        """Refuse to call `code` (UntrustedTypeError) unless the plan of this read listed it."""
        if not self.planned_code(code):
            raise UntrustedTypeError(
                f"reading this would call {what}, {code_tag(code)!r}, which the plan of this read did not list "
                "(read it again: audit() and trusted= see only what the plan lists)",
                path=self.path_str,
            )

    def load(self, node: Node, key: str | int | None = None) -> Any:
        """The object a manifest node describes, loaded at child `key` of the current path."""
        if key is not None:
            self.path.append(str(key))
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise self.error(f"manifest nested more than {MAX_DEPTH} levels deep")
            if isinstance(node, (str, bool, int, float)) or node is None:
                return node
            if isinstance(node, list):
                return [self.load(item, i) for i, item in enumerate(node)]
            if isinstance(node, dict):
                try:
                    tag = self.registry.tag_of(node)
                except ValueError as e:
                    raise self.error(str(e)) from None
                if tag is None:
                    return {k: self.load(v, k) for k, v in node.items()}
                try:
                    handler = self.registry.for_tag(tag, tensors=self.policy.tensors)
                    if not is_zarchive_code(type(handler)):  # code the file picks: only as planned
                        self.check_code(type(handler), f"the handler of {str(tag)[:100]!r} nodes")
                    return handler.load(node, self)
                except ZArchiveError as e:
                    if type(e) is FormatError and self._newer:
                        raise VersionError(
                            f"{str(tag)[:100]!r} node in a shape this reader does not know ({e.message}); the file is "
                            f"a newer format than {FORMAT_VERSION}: upgrade zarchive to read it",
                            path=e.path if e.path is not None else self.path_str,
                            member=e.member,
                        ) from e
                    if e.path is None:  # errors from below name no path: add it here, once, on the way out
                        raise type(e)(e.message, path=self.path_str, member=e.member) from e
                    raise
                except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as e:
                    raise FormatError(
                        f"malformed {tag!r} node: {type(e).__name__}: {str(e)[:200]}", path=self.path_str
                    ) from e
            raise self.error(f"unexpected JSON value of type {type(node).__name__}")
        finally:
            self._depth -= 1
            if key is not None:
                self.path.pop()

    def load_into(self, node: Node, out: Any) -> bool:
        """Fill `out` with the value of `node` (a tagged node) in place, where its handler can
        (Handler.load_into); False where it cannot."""
        if not isinstance(node, dict):
            return False
        try:
            tag = self.registry.tag_of(node)
        except ValueError as e:
            raise self.error(str(e)) from None
        if tag is None:
            return False
        try:
            handler = self.registry.for_tag(tag, tensors=self.policy.tensors)
            if not is_zarchive_code(type(handler)):
                self.check_code(type(handler), f"the handler of {str(tag)[:100]!r} nodes")
            fill = getattr(handler, "load_into", None)
            return bool(fill(node, self, out)) if fill is not None else False  # (ZANJ's loaders have none)
        except ZArchiveError as e:
            if e.path is None:
                raise type(e)(e.message, path=self.path_str, member=e.member) from e
            raise

    def mismatch(self, message: str) -> None:
        """A recoverable problem: raise, warn, log (logger "zarchive") or ignore it per error_mode."""
        mode = self.settings.error_mode
        if mode is ErrorMode.EXCEPT:
            from ..errors import FieldMismatchError

            raise FieldMismatchError(message + " (error_mode='except')", path=self.path_str)
        if mode is ErrorMode.WARN:
            warnings.warn(f"{message} (at object path '/{self.path_str}')", stacklevel=3)
        elif mode is ErrorMode.LOG:
            logging.getLogger("zarchive").warning("%s (at object path '/%s')", message, self.path_str)

    def member_bytes(self, name: Any, *, expected_size: int | None = None, shared: bool = False) -> memoryview:
        """A member's decoded, verified bytes, writable and this load's own (see `_own`); with
        `shared=True`, a view that may be shared with other loads, for bytes that are only parsed."""
        name = self._member(name)
        data = self.reader.member_bytes(name, path=self.path_str, expected_size=expected_size)
        return data if shared else self._own(name, 0, data, whole_member=True)

    def member_range(self, name: Any, begin: int, end: int, label: str) -> memoryview:
        """Bytes [begin, end) of a member, verified by entry `label`; writable and this load's own."""
        name = self._member(name)
        archive = self.archive
        via = self._private_mapping() if archive.source.mapped and hasattr(archive.source, "private_copy") else None
        mine = via is not None  # (then uncompressed bytes come from this load's own mapping: no second view)
        return archive.member_range(
            name, begin, end, label, own=lambda data: self._own(name, begin, data, mine=mine), via=via
        )

    def member_range_into(self, name: Any, begin: int, label: str, out: memoryview) -> None:
        """Fill `out` with bytes [begin, begin + len(out)) of a member, verified by entry `label`."""
        self.archive.member_range_into(self._member(name), begin, label, out, path=self.path_str)

    def _own(
        self, name: str, begin: int, data: memoryview, *, whole_member: bool = False, mine: bool = False
    ) -> memoryview:
        """`data` as bytes that belong to this load: values built on them may be written to without
        changing what a later load from the same open archive sees (or what verify() checks). Within
        this load, the same range gives the same buffer, so tensors that shared storage still do.
        A full read takes a decompressed member the plan names once from the reader rather than copy
        it (`whole_member`: `data` is all of it); a later load decodes it again. `mine`: uncompressed
        bytes in `data` were read through this load's own private mapping (`_private_mapping`)."""
        if not isinstance(self.reader, ArchiveReader):
            return data  # other readers (ZANJ's) give every read bytes of its own
        key = (name, begin, data.nbytes)
        owned = self._owned.get(key)
        if owned is not None:
            return owned
        source = self.archive.source
        codec = self.archive.member_entry(name)["codec"]
        if codec == BYTE_GROUPS_CODEC:
            owned = data  # decoded afresh for this caller (see ArchiveReader.member_range)
        elif codec != "none" and whole_member and self._taken(name, data):
            owned = data
        elif codec != "none":
            owned = memoryview(bytearray(data))  # the reader keeps decoded members for later loads
        elif mine:
            owned = data
        elif getattr(source, "mapped", False) and hasattr(source, "private_copy"):
            owned = self._private_mapping().view(self.archive.zip.members[name].data_offset + begin, data.nbytes)
        elif getattr(source, "mapped", False):
            owned = memoryview(bytearray(data))
        else:
            owned = data  # an unmapped source reads every range into a new buffer
        self._owned[key] = owned
        return owned

    def _taken(self, name: str, data: memoryview) -> bool:
        """Whether this load took decoded member `name` (`data`, all of it) from the reader's cache: in
        a full read, where the plan names the member once and the bytes are writable."""
        if not (self.whole and self.plan.uses.get(name) == 1 and not data.readonly):
            return False
        if data.nbytes != self.archive.member_entry(name)["size"]:
            return False
        self.archive.forget(name)
        return True

    def _private_mapping(self) -> Any:
        """This load's own copy-on-write mapping of the file (a mapped source's private_copy), made
        on first use."""
        if self._mapping is None:
            self._mapping = self.archive.source.private_copy()  # type: ignore[attr-defined]  # (mapped sources have it)
        return self._mapping

    def member_entry(self, name: Any) -> dict[str, Any]:
        return self.reader.member_entry(self._member(name), path=self.path_str)

    def _member(self, name: Any) -> str:
        if not isinstance(name, str):
            raise self.error(f"'$ref' must be a member name, not {type(name).__name__}")
        return name

    def state(self, key: str, factory: Callable[[], T]) -> T:
        if key not in self._state:
            self._state[key] = factory()
        return self._state[key]
