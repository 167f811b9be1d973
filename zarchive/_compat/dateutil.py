"""dateutil internals: the IANA key of a `dateutil.tz.tzfile` zone, which dateutil keeps only in the
private `_filename` attribute (the path or key the zone was loaded from).

Probe (see the package docstring for the rule), "dateutil.tzfile_key": `dateutil.tz.gettz("UTC")`
(or "Europe/Paris") is a `tzfile` whose `_filename` is a string naming that key. Fallback: None, so
a pandas value in such a zone is refused with a clear SaveError (the public API has no key to save),
as it already was when the attribute was missing.
"""

from __future__ import annotations

from typing import Any

from . import Probe


def _check() -> bool | None:
    from dateutil import tz

    zone = tz.gettz("Europe/Paris") or tz.gettz("UTC")
    name = getattr(zone, "_filename", None)
    if type(zone).__name__ != "tzfile" or not isinstance(name, str):
        return None
    return True if name.rstrip("/").endswith(("Europe/Paris", "UTC")) else None


_KEY = Probe("dateutil.tzfile_key", _check)


def tzfile_key(zone: Any) -> str | None:
    """The file name or key a dateutil `tzfile` was loaded from, or None when it cannot be had."""
    if _KEY.get() is None:
        return None
    name = getattr(zone, "_filename", None)
    return name if isinstance(name, str) else None


__all__ = ["tzfile_key"]
