"""An opened archive of any file format: browsing its object tree through the node schemas of its
handler set, and loading single values in two phases (a plan, then construction) without loading
the rest. zarchive.engine.lazy.LazyArchive (a zarchive) and the foreign formats' archives build on it."""

from __future__ import annotations

import html
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from ..container.archive_reader import ArchiveReader
from ..container.budget import ReadBudget
from ..container.decode_ahead import DecodeAhead
from ..errors import FormatError, UnknownTypeError
from ..nodes.base import SchemaSource
from ..options import Settings
from ..weights_hash import archive_digests, combine
from .audit_report import AuditReport
from .browse import TreeBrowser
from .context import HandlerSource, LoadContext
from .gcpause import gc_paused
from .objpath import split_path
from .plan import MemberReader, Plan, Planner, ReadPolicy

if TYPE_CHECKING:
    from typing import Self

_NODE_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError)


class FileReader(MemberReader, Protocol):
    """The opened file under an archive: its members, a progress hook, and closing it."""

    on_read: Callable[[str, int], None] | None

    def close(self) -> None: ...


class ReadHandlers(SchemaSource, HandlerSource, Protocol):
    """The handler set of a read: node schemas for the plan, handlers for construction."""


class PlannedArchive(TreeBrowser):
    """What every opened archive shares, whatever the file format: browsing the object tree through
    the node schemas of its handler set, and loading in two phases: a plan of the subtree (see
    zarchive.engine.plan: checked, classes resolved and trusted, limits applied, nothing constructed), then
    construction (zarchive.engine.context.LoadContext). A subclass supplies the file (its MemberReader and
    handler set) and what is particular to its format (`_root_node`, `manifest`, `members`, ...)."""

    def __init__(
        self,
        reader: FileReader,
        registry: ReadHandlers,
        settings: Settings,
        policy: ReadPolicy | None = None,
    ) -> None:
        self._reader = reader
        self._registry = registry
        self._settings = settings
        self._policy = policy if policy is not None else ReadPolicy()
        self._closed = False

    @property
    def read_budget(self) -> ReadBudget | None:
        """The open file's read budget (max_read_bytes), for work done beside a read (the weights hash)."""
        budget = getattr(self._reader, "budget", None)
        return budget if isinstance(budget, ReadBudget) else None

    @property
    def policy(self) -> ReadPolicy:
        """What reads from this archive may construct and read (trusted=, unresolved=, tensors=, limits)."""
        return self._policy

    @property
    def on_read(self) -> Callable[[str, int], None] | None:
        """Called with (member, bytes) for every member read (progress bars)."""
        return self._reader.on_read

    @on_read.setter
    def on_read(self, fn: Callable[[str, int], None] | None) -> None:
        self._reader.on_read = fn

    # --- browsing ---
    def _schema(self, tag: Any) -> Any:
        schema = self._registry.schema_for(tag)
        if schema is None:
            raise UnknownTypeError(f"no handler named {str(tag)[:100]!r}")
        return schema

    def _tag(self, node: dict[str, Any]) -> Any:
        try:
            return self._registry.tag_of(node)
        except ValueError as e:
            raise FormatError(str(e)) from None

    def children(self, node: Any) -> dict[str, Any] | None:
        if isinstance(node, list):
            return {str(i): v for i, v in enumerate(node)}
        if isinstance(node, dict):
            tag = self._tag(node)
            if tag is None:
                return dict(node)
            handler = self._schema(tag)
            try:
                return handler.children(node)
            except _NODE_ERRORS as e:  # a malformed node must not escape as a bare KeyError
                raise FormatError(f"malformed {str(tag)[:60]!r} node: {type(e).__name__}: {e}") from None
        return None

    def child(self, node: Any, key: str) -> Any:
        tag = self._tag(node) if isinstance(node, dict) else None
        if tag is None:
            return super().child(node, key)
        try:  # the schema may find one child without building its siblings (a 5,000-row table)
            return self._schema(tag).child(node, key)
        except _NODE_ERRORS as e:
            raise FormatError(f"malformed {str(tag)[:60]!r} node: {type(e).__name__}: {e}") from None

    def summary(self, path: str = "") -> str:
        """One line about the value at `path`."""
        try:
            return self.describe(self.node(path))
        except FormatError as e:
            raise FormatError(e.message, path=path) from None

    def describe(self, node: Any) -> str:
        """One line about a manifest node (its type and what it holds), without loading it."""
        tag = self._tag(node) if isinstance(node, dict) else None
        if tag is not None:
            try:
                return str(self._schema(tag).summary(node))
            except _NODE_ERRORS as e:
                raise FormatError(f"malformed node: {type(e).__name__}: {e}") from None
        return type(node).__name__ if not isinstance(node, dict) else "dict"

    def model_tag(self, path: str = "") -> str | None:
        """The class tag of the ConfiguredModel at `path`, or None (each file format says how)."""
        raise NotImplementedError

    def is_tensor(self, node: Any) -> bool:
        """Whether a manifest node reads as one tensor (its node type says so: NodeSchema.tensor)."""
        tag = self._tag(node) if isinstance(node, dict) else None
        return tag is not None and bool(getattr(self._schema(tag), "tensor", False))

    # --- weights ---
    def tensor_digests(self, objpath: str = "") -> dict[str, bytes]:
        """SHA-256 of each tensor at or below `objpath` (of a model there: of its state dict), by
        object path relative to it; each tensor is fetched alone (spec/weights-hash.md)."""
        self._check_open()
        return archive_digests(self, objpath)

    def weights_hash(self, objpath: str = "") -> str:
        """The hex SHA-256 over the names, dtypes, shapes and bytes of every tensor at or below
        `objpath` (of a model there: of its state dict), equal for equal weights whatever the file's
        layout; computed from the stored tensors without building the model (spec/weights-hash.md)."""
        return combine(self.tensor_digests(objpath))

    # --- planning ---
    def plan(self, path: str = "", *, root_class: type | None = None) -> Plan:
        """Phase one of loading `path`: what it would construct and read, checked against this
        archive's read policy (trusted classes, limits); nothing is constructed."""
        self._check_open()
        return self._plan_node(self.node(path), path, root_class)

    def _plan_node(self, node: Any, path: str, root_class: type | None) -> Plan:
        policy = self._policy if root_class is None else self._policy.with_root_class(root_class)
        with gc_paused():
            return Planner(self._registry, self._reader, policy).run(node, split_path(path))

    def audit(self, path: str = "") -> AuditReport:
        """Every class and callable ('module:QualName') that loading `path` would construct or call,
        with the object paths where each occurs: the list `trusted=` checks (see zarchive.engine.audit_report).
        Reads the manifest (and .jsonl members that hold nodes) only; works where the classes cannot be
        imported, calls nothing, and refuses no class."""
        self._check_open()
        with gc_paused():
            planner = Planner(self._registry, self._reader, self._policy, audit=True)
            return AuditReport(planner.run(self.node(path), split_path(path)).classes)

    # --- loading ---
    def get(
        self, path: str = "", *, map_location: Any = None, dtype: Any = None, root_class: type | None = None
    ) -> Any:
        """Load the value at `path`, reading only the members it needs. `root_class`: build the class
        node at `path` as this class (ConfiguredModel.read), which is then trusted."""
        return self._get(path, map_location=map_location, dtype=dtype, root_class=root_class)

    def _get(self, path: str, *, map_location: Any, dtype: Any, root_class: type | None, ahead: bool = False) -> Any:
        """get(); `ahead`: decompress the planned compressed members on worker threads (a full read)."""
        self._check_open()
        node = self.node(path)  # (looked up once, for the plan and the construction)
        plan = self._plan_node(node, path, root_class)
        reader = self._reader
        decoding = DecodeAhead(reader, list(plan.members)) if ahead and isinstance(reader, ArchiveReader) else None
        try:
            return self._construct(plan, node, path, map_location, dtype, root_class, whole=ahead)
        finally:
            if decoding is not None:
                decoding.close()

    def _construct(
        self,
        plan: Plan,
        node: Any,
        path: str,
        map_location: Any,
        dtype: Any,
        root_class: type | None,
        *,
        whole: bool = False,
    ) -> Any:
        policy = self._policy if root_class is None else self._policy.with_root_class(root_class)
        ctx = LoadContext(
            self._registry,
            self._reader,
            self._settings,
            plan=plan,
            policy=policy,
            map_location=map_location,
            dtype=dtype,
            whole=whole,
        )
        ctx.path = split_path(path)
        with gc_paused(keep=True):  # (the value goes to the caller)
            return ctx.load(node)

    def load_into(self, path: str, out: Any, *, node: Any = None) -> Any:
        """Load the tensor at `path` into `out` (a tensor of its dtype and shape) and return `out`.
        Where `out` is a contiguous CPU tensor, the stored bytes are read and checked straight into
        its memory: no second copy, no memory beside it (loading weights into a model's parameters,
        or a sharded checkpoint into the tensors DCP gives); a contiguous CUDA tensor is filled from
        pinned host memory they are read into. Otherwise the tensor is loaded, then copied in. A FormatError when the archive holds something else at `path`.
        `node`: the manifest node at `path` where the caller has it (not looked up again)."""
        self._check_open()
        if node is None:
            node = self.node(path)
        with gc_paused():
            plan = Planner(self._registry, self._reader, self._policy).run(node, split_path(path))
        ctx = LoadContext(self._registry, self._reader, self._settings, plan=plan, policy=self._policy)
        ctx.path = split_path(path)
        with gc_paused():
            if ctx.load_into(node, out):
                return out
            value = ctx.load(node)
        same = getattr(value, "shape", None) == getattr(out, "shape", ()) and getattr(value, "dtype", 0) == getattr(
            out, "dtype", None
        )
        if not same or not hasattr(out, "copy_"):
            raise FormatError(
                f"the archive holds {self.describe(node)} at this path, not a tensor like `out` "
                f"({getattr(out, 'dtype', type(out).__name__)}{list(getattr(out, 'shape', []))})",
                path=path,
            )
        out.copy_(value)
        return out

    def __getitem__(self, path: str) -> Any:
        return self.get(path)

    def load_node(
        self, node: Any, path: str = "", *, map_location: Any = None, dtype: Any = None, whole: bool = False
    ) -> Any:
        """Plan and construct a manifest node given by the caller (e.g. one edited by a tool) against
        this archive's members, as if it stood at `path`. `whole=True`: read it as a full read does
        (tensors found by their members' headers, which are parsed and checked; a fetch of one value
        finds them by their checksum entries), for tools that describe what reading the file gives."""
        self._check_open()
        with gc_paused():
            plan = Planner(self._registry, self._reader, self._policy).run(node, split_path(path))
            ctx = LoadContext(
                self._registry,
                self._reader,
                self._settings,
                plan=plan,
                policy=self._policy,
                map_location=map_location,
                dtype=dtype,
                whole=whole,
            )
            ctx.path = split_path(path)
            return ctx.load(node)

    def load(self, *, map_location: Any = None, dtype: Any = None, root_class: type | None = None) -> Any:
        """Everything, the same as read()."""
        self._check_open()
        return self.get("", map_location=map_location, dtype=dtype, root_class=root_class)

    # --- lifetime ---
    def close(self) -> None:
        """Release the file. Values already loaded stay valid; loading more is an error."""
        self._closed = True
        self._reader.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:  # the reader's views are gone: a read would see no bytes, not damaged ones
            raise ValueError("the archive is closed: open it again to load more values")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _repr_html_(self) -> str:
        """The object tree as nested HTML lists, for notebooks."""

        def render(node: Any, depth: int) -> str:
            kids = self.children(node) if depth < 8 else None
            label = (
                self.describe(node)
                if isinstance(node, dict) and self._tag(node) is not None
                else (type(node).__name__ if isinstance(node, (dict, list)) else repr(node)[:80])
            )
            if not kids:
                return html.escape(label)
            items = list(kids.items())[:50]
            inner = "".join(f"<li><b>{html.escape(k)}</b>: {render(v, depth + 1)}</li>" for k, v in items)
            more = f"<li>... {len(kids) - 50} more</li>" if len(kids) > 50 else ""
            return f"{html.escape(label)}<ul>{inner}{more}</ul>"

        return f"<div class='zarchive'>{render(self._root_node(), 0)}</div>"


__all__ = ["FileReader", "PlannedArchive", "ReadHandlers"]
