"""The model store: versions of a ConfiguredModel in a folder or under a URL (model_store), their
records (record), files (files), differences (diff) and semantic versions (semver)."""

from __future__ import annotations

from .model_store import ModelStore, VersionExists, VersionInfo

__all__ = ["ModelStore", "VersionExists", "VersionInfo"]
