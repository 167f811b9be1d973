"""Tests that authors of handlers and readers outside zarchive run against their own code.

`check_handler(handler, examples)` holds a handler to the handler contract (zarchive.Handler): the
same checks every built-in handler passes in zarchive's own test suite.
"""

from __future__ import annotations

from .handler_contract import JUNK_VALUES, PROBE_CLASSES, HandlerContractError, check_handler

__all__ = ["JUNK_VALUES", "PROBE_CLASSES", "HandlerContractError", "check_handler"]
