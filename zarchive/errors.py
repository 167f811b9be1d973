"""The exception tree of zarchive.

Every failure to read or write an archive raises a subclass of `ZArchiveError`. Each error carries the
archive member (`member`) and the object path (`path`, slash-separated, "" for the root) it concerns,
and its message names both, so a user sees *what* failed and *where* without a debugger.
Subclasses also inherit the builtin exception a caller would naturally catch.
"""

from __future__ import annotations


class ZArchiveError(Exception):
    """Base class of every error zarchive raises about an archive or an object."""

    def __init__(self, message: str, *, path: str | None = None, member: str | None = None) -> None:
        self.message = message
        self.path = path
        self.member = member
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.path is not None:
            where.append(f"at object path {_show_path(self.path)}")
        if self.member is not None:
            where.append(f"in member {self.member!r}")
        return f"{self.message} ({', '.join(where)})" if where else self.message

    def __reduce__(self):  # keep exceptions picklable for multiprocessing users
        return (_rebuild, (type(self), self.message, self.path, self.member))


def _rebuild(cls: type[ZArchiveError], message: str, path: str | None, member: str | None) -> ZArchiveError:
    return cls(message, path=path, member=member)


def _show_path(path: str) -> str:
    return "'/'" if path == "" else repr("/" + path)


class SaveError(ZArchiveError, TypeError):
    """An object cannot be saved: no handler accepts it, or its contents are not serializable."""


class FormatError(ZArchiveError, ValueError):
    """The file is not a valid zarchive: bad zip structure, manifest, metadata or member layout."""


class NotAZipError(FormatError):
    """The file is not a zip at all (empty, truncated, an LFS pointer, an HTML page...)."""


class UnsafeArchiveError(FormatError):
    """The archive asks for something a reader must refuse: traversal, bombs, pickles, limits."""


class IntegrityError(FormatError):
    """A member's bytes do not match the checksum or size recorded for them."""


class VersionError(FormatError):
    """The archive uses a format version or a node type newer than this reader: a newer major version
    (refused at open), or, in a file of a newer minor version, a node type or node shape this reader
    does not know. Upgrade zarchive (or the package providing a custom handler) to read it."""


class UnknownTypeError(ZArchiveError, LookupError):
    """A manifest node names a handler or class this reader does not know or does not trust."""


class UntrustedTypeError(UnknownTypeError):
    """The archive names a class outside the `trusted=` set given to the read (refused before anything
    is constructed)."""


class MemberNotFoundError(ZArchiveError, KeyError):
    """A member or object path that was asked for is not in the archive."""

    def __str__(self) -> str:  # KeyError would repr() the message otherwise
        return self._render()


class ArchiveNotFoundError(ZArchiveError, FileNotFoundError):
    """There is no file (or fsspec object) at the path a read, open or verify was given. Also a
    FileNotFoundError, as the OS would say for it."""

    def __str__(self) -> str:  # OSError would render (errno, strerror) otherwise
        return self._render()


class ConfigMismatchError(ZArchiveError, TypeError):
    """An archive holds a model or config of a different class than the one asked to read it."""


class FieldMismatchError(ZArchiveError, ValueError):
    """A dataclass in the archive has fields its current class lacks, or lacks required ones."""


class DeviceError(ZArchiveError, RuntimeError):
    """A tensor cannot be placed on the device asked for (e.g. CUDA on a machine without it)."""


class UnsupportedDtypeError(ZArchiveError, TypeError):
    """A tensor's dtype cannot be read as the kind of array asked for (e.g. bfloat16 as a numpy array
    without the ml_dtypes package, or a sub-byte integer dtype numpy has no type for)."""


class ExportWarning(UserWarning):
    """An export asked of a save (`export=`) failed or disagreed with the model, and the save went on
    without it because `export_errors="warn"`."""


class RefusedPickleError(UnsafeArchiveError):
    """A torch.save file's pickle names something zarchive's restricted reader does not build (any
    class or function beyond tensors, parameters, dtypes, devices, sizes and plain containers, the
    set `torch.load(weights_only=True)` accepts for weights): refused before anything runs."""
