"""`zarchive.staging`: the host buffer that background saves copy into (implemented in
zarchive.saving.staging): `staging_buffer().clear()` frees it."""

from __future__ import annotations

from .saving.staging import Lease, StagingBuffer, staging_buffer

__all__ = ["Lease", "StagingBuffer", "staging_buffer"]
