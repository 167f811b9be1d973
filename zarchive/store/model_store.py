"""ModelStore: versioned releases of ConfiguredModels in one folder (or fsspec URL), one `.zarc` per
semantic version, each with its config, weights, metrics, description, tags, torch version and the
hash of its weights.

    store = zarchive.ModelStore("models/")
    store.save(model, "1.0.0", metrics={"acc": 0.91}, description="first release", tags=("prod",))
    store.versions()          # VersionInfo rows, oldest first (semantic-version order)
    model = store.load()      # the latest version, rebuilt from its config, weights hash checked
    store.diff("1.0.0", "1.1.0")

A version file is an ordinary archive of the model (`zarchive.read` and `Model.read` open it); the
store's record is in its metadata (spec/store.md). Files are committed whole and never replace an
existing version unless asked to (see zarchive.store.files).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..api import ZArchive
from ..engine.browse import OpenedArchive
from ..errors import FormatError, IntegrityError, MemberNotFoundError, ZArchiveError
from ..options import CompressArg
from .diff import VersionDiff, compare, read_side
from .files import SUFFIX, StoreFiles, VersionExists
from .record import RECORD_KEY, VersionInfo, make_record, read_record, version_info
from .semver import Version


class ModelStore:
    """Versions of models under `root` (a folder, created if missing, or an fsspec URL).

    compress: as for ZArchive (weights stay uncompressed unless compression pays);
    storage_options: for URLs, passed to fsspec; durable: fsync each new version before save returns.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        compress: CompressArg = True,
        storage_options: Mapping[str, Any] | None = None,
        durable: bool = True,
    ) -> None:
        self._files = StoreFiles(root, storage_options)
        self._compress = compress
        self._durable = durable

    @property
    def root(self) -> str:
        return self._files.root

    def __repr__(self) -> str:
        return f"ModelStore({self.root!r})"

    def path(self, version: str) -> str:
        """The path (or URL) of a version's file, which exists or not."""
        return self._files.target(str(Version.parse(version)) + SUFFIX)

    # --- saving ---
    def save(
        self,
        model: Any,
        version: str,
        *,
        metrics: Mapping[str, Any] | None = None,
        description: str = "",
        tags: Iterable[str] = (),
        export: Iterable[str] = (),
        example_inputs: Any = None,
        overwrite: bool = False,
    ) -> VersionInfo:
        """Save `model` (a ConfiguredModel) as `version` (a semantic version such as '1.2.0'); return
        its row. An existing version is never replaced unless `overwrite=True` (VersionExists, a
        SaveError); `export` and `example_inputs` go to the archive's save (exported graphs)."""
        import torch

        from ..models.configured import ConfiguredModelBase
        from ..weights_hash import state_dict_hash

        v = Version.parse(version)
        if not isinstance(model, ConfiguredModelBase):
            raise TypeError(
                f"a ModelStore keeps ConfiguredModels (rebuilt from their config on load), not {type(model).__name__}"
            )
        name = str(v) + SUFFIX
        if not overwrite and self._files.exists(name):  # early, before any work (the commit checks again)
            raise self._files.exists_error(name)
        record = make_record(
            v,
            metrics=metrics,
            description=description,
            tags=tags,
            torch_version=torch.__version__,
            weights_hash=state_dict_hash(model.state_dict()),
        )
        za = ZArchive(compress=self._compress, custom_settings={RECORD_KEY: record}, durable=self._durable)
        extra: dict[str, Any] = {}
        exports = tuple(export)
        if exports:
            extra["export"] = exports
        if example_inputs is not None:
            extra["example_inputs"] = example_inputs

        def write(path: str) -> None:
            za.save(model, path, **extra)

        self._files.commit(name, write, overwrite=overwrite, durable=self._durable)
        return self.info(str(v))

    # --- listing ---
    def versions(self) -> list[VersionInfo]:
        """Every version, oldest first in semantic-version order. A file that cannot be read raises
        (naming the version): a damaged version is never listed as if it were whole."""
        return [self._info(v) for v in self._versions()]

    def version_names(self) -> list[str]:
        """The versions' names only, oldest first, without opening any file."""
        return [str(v) for v in self._versions()]

    def _versions(self) -> list[Version]:
        found = []
        for name in self._files.names():
            try:
                found.append(Version.parse(name[: -len(SUFFIX)]))
            except ValueError:
                continue  # not a version file: the store leaves other files alone
        return sorted(found)

    def latest(self) -> VersionInfo:
        """The row of the highest version (pre-releases sort before their release)."""
        return self._info(self._latest())

    def _latest(self) -> Version:
        versions = self._versions()
        if not versions:
            raise MemberNotFoundError(f"the store {self.root!r} has no versions yet")
        return versions[-1]

    def info(self, version: str) -> VersionInfo:
        """The row of one version."""
        return self._info(self._resolve(version))

    def _resolve(self, version: str) -> Version:
        if version == "latest":
            return self._latest()
        v = Version.parse(version)
        if not self._files.exists(str(v) + SUFFIX):
            known = ", ".join(self.version_names()[-10:]) or "none"
            raise MemberNotFoundError(f"no version {v} in the store {self.root!r} (versions: {known})")
        return v

    def _info(self, v: Version) -> VersionInfo:
        name = str(v) + SUFFIX
        with self._open(v) as arc:
            record = read_record(arc.meta, "the file")
            if record["version"] != str(v):
                raise FormatError(
                    f"the file records version {record['version'][:100]!r}: "
                    "the file was renamed or copied in by hand; save it again under its version"
                )
            exports = getattr(arc, "exports", None)
            return version_info(record, size=self._files.size(name), exports=exports)

    @contextmanager
    def _open(self, v: Version) -> Iterator[OpenedArchive]:
        """The version's archive, with any error reading it naming the version and its file."""
        target = self._files.target(str(v) + SUFFIX)
        try:
            opts = self._files.storage_options or None
            with ZArchive().open(target, storage_options=opts) as arc:
                yield arc
        except ZArchiveError as e:
            raise type(e)(f"version {v} ({target}): {e.message}", path=e.path, member=e.member) from None

    # --- loading ---
    def load(self, version: str = "latest", map_location: Any = None, verify_hash: bool = True) -> Any:
        """The model saved as `version` ("latest": the highest), rebuilt from its config (its class
        must be importable or registered; see zarchive.read). verify_hash: recompute the weights
        hash from the file first and raise IntegrityError if it differs from the recorded one."""
        from ..models.configured import ConfiguredModelBase
        from ..models.read import read_model

        v = self._resolve(version)
        with self._open(v) as arc:
            record = read_record(arc.meta, "the file")
            if verify_hash:
                found = arc.weights_hash()
                if found != record["weights_hash"]:
                    raise IntegrityError(
                        f"the weights hash of the file ({found}) differs from the one recorded when "
                        f"it was saved ({record['weights_hash']}): the file was changed or damaged since; do "
                        "not use it (save the version again from a good copy)"
                    )
            return read_model(arc, ConfiguredModelBase, map_location=map_location)

    # --- comparing ---
    def diff(self, v1: str, v2: str) -> VersionDiff:
        """What changed from `v1` to `v2`: config fields, tensors (added, removed, changed by their
        own hash) and metrics. Reads configs from the manifests and hashes tensors one at a time;
        builds no model."""
        sides = []
        for v in (self._resolve(v1), self._resolve(v2)):
            with self._open(v) as arc:
                sides.append(read_side(str(v), arc, read_record(arc.meta, "the file")))
        return compare(*sides)


__all__ = ["ModelStore", "VersionExists", "VersionInfo"]
