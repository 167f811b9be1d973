"""The viewer's URLs, independent of the HTTP server: `Routes.handle(raw_path)` checks the token and
the path, and answers (status, content type, body). Every URL starts with the token; after it:

    /                         the archives (one archive: its page)
    /a/N/                     archive N: metadata, configs, audit, exports, the searchable tree
    /a/N/verify               the same, with every checksum checked
    /a/N/node?path=P&page=K   the value at object path P (a tensor's statistics, a table's rows, ...)
    /diff                     what changed between archives 0 and 1 (two archives only)
    /api/...                  the same data as JSON: /api/archives, /api/a/N/{tree,meta,audit,exports,
                              configs,verify}, /api/a/N/node?path=P&page=K, /api/diff

Archives are named by number, values by object path, looked up in the archive's tree: no URL names a
file. A path with '..', '.', a backslash or an encoded '.', '/' or '\\' is refused (400) before any
lookup; a wrong or missing token is 403.
"""

from __future__ import annotations

import json
import re
import secrets
import urllib.parse
from collections.abc import Callable
from typing import Any

from ..errors import MemberNotFoundError, ZArchiveError
from . import describe, pages
from .sources import BadObjectPath, Sources

Response = tuple[int, str, bytes]
HTML = "text/html; charset=utf-8"
JSON = "application/json"
_ENCODED = re.compile(r"%(2e|2f|5c|00)", re.IGNORECASE)


class NotFound(Exception):
    """No such page (404)."""


class LiveLinks:
    """Links of the live viewer: absolute paths under the token."""

    def __init__(self, prefix: str, count: int, diff: bool) -> None:
        self.prefix, self.count, self.has_diff = prefix, count, diff

    def home(self) -> str:
        return f"{self.prefix}/"

    def archive(self, index: int) -> str:
        return f"{self.prefix}/a/{index}/"

    def node(self, index: int, path: str, page: int = 0) -> str | None:
        query = urllib.parse.urlencode({"path": path, **({"page": page} if page else {})})
        return f"{self.prefix}/a/{index}/node?{query}"

    def verify(self, index: int) -> str | None:
        return f"{self.prefix}/a/{index}/verify"

    def diff(self) -> str | None:
        return f"{self.prefix}/diff" if self.has_diff and self.count == 2 else None


class Routes:
    def __init__(self, sources: Sources, token: str | None = None, *, diff: Callable[[Sources], dict[str, Any]] | None = None,
                 diff_page: Callable[[dict[str, Any], Any], str] | None = None) -> None:  # fmt: skip
        self.sources = sources
        self.token = token or secrets.token_urlsafe(24)
        self.diff_data, self.diff_page = diff, diff_page
        self.links = LiveLinks(f"/{self.token}", len(sources.items), diff is not None)

    @property
    def labels(self) -> list[str]:
        return [s.label for s in self.sources.items]

    def handle(self, raw: str) -> Response:
        """Answer a GET of `raw` (the request's path and query, as sent)."""
        path, _, query = raw.partition("?")
        parts = path.split("/")
        if len(parts) < 2 or not secrets.compare_digest(parts[1].encode(), self.token.encode()):
            return 403, "text/plain; charset=utf-8", b"403 forbidden: this URL lacks the viewer's token\n"
        rest = "/" + "/".join(parts[2:])
        api = rest.startswith("/api/")
        try:
            if _ENCODED.search(path) or "\\" in path or any(p in (".", "..") for p in parts):
                raise BadObjectPath("a URL of the viewer names no file: no '..', '.', '\\' or encoded separators")
            args = {k: v[-1] for k, v in urllib.parse.parse_qs(query, keep_blank_values=True).items()}
            if api:
                return 200, JSON, json.dumps(self._api(rest[4:], args), ensure_ascii=False, allow_nan=False).encode()
            return 200, HTML, self._page(rest, args).encode()
        except BadObjectPath as e:
            return self._error(400, str(e), api)
        except (NotFound, MemberNotFoundError) as e:
            return self._error(404, str(e) or "no such page", api)
        except ZArchiveError as e:
            return self._error(422, f"{type(e).__name__}: {e}", api)
        except MemoryError:
            return self._error(507, "not enough memory to read it", api)
        except Exception as e:  # noqa: BLE001  # a bug: say so briefly, keep serving
            return self._error(500, f"unexpected {type(e).__name__}: {str(e)[:300]}", api)

    def _error(self, status: int, message: str, api: bool) -> Response:
        if api:
            return status, JSON, json.dumps({"error": message, "status": status}).encode()
        body = pages.layout(f"error {status}", pages.error_body(status, message), self.links, self._safe_labels())
        return status, HTML, body.encode()

    def _safe_labels(self) -> list[str]:
        return [s.label for s in self.sources.items]

    # --- JSON -------------------------------------------------------------------------------------
    def _api(self, rest: str, args: dict[str, str]) -> Any:
        if rest == "/archives":
            return [{"index": s.index, "label": s.label} for s in self.sources.items]
        if rest == "/diff":
            if self.diff_data is None or len(self.sources.items) != 2:
                raise NotFound("a diff needs two archives")
            return self.diff_data(self.sources)
        m = re.fullmatch(r"/a/([0-9]{1,6})/(tree|meta|audit|exports|configs|verify|node)", rest)
        if not m:
            raise NotFound(f"no such page: {rest[:100]}")
        source = self.sources.get(m.group(1))
        what = m.group(2)
        if what == "node":
            return describe.value(source, args.get("path", ""), _page_number(args))
        fn = {"tree": describe.tree, "meta": describe.meta, "audit": describe.audit, "exports": describe.exports,
              "configs": describe.configs, "verify": describe.checksums}[what]  # fmt: skip
        return fn(source)

    # --- HTML -------------------------------------------------------------------------------------
    def _page(self, rest: str, args: dict[str, str]) -> str:
        if rest in ("/", ""):
            if len(self.sources.items) == 1:
                return self._archive(0, verify=False)
            errors = [self._open_error(s) for s in self.sources.items]
            return pages.layout(
                "zarchive view", pages.index_body(self.labels, errors, self.links), self.links, self.labels
            )
        if rest == "/diff":
            if self.diff_data is None or self.diff_page is None or len(self.sources.items) != 2:
                raise NotFound("a diff needs two archives")
            body = self.diff_page(self.diff_data(self.sources), self.links)
            return pages.layout("diff", body, self.links, self.labels)
        m = re.fullmatch(r"/a/([0-9]{1,6})/(|verify|node)", rest)
        if not m:
            raise NotFound(f"no such page: {rest[:100]}")
        index = int(self.sources.get(m.group(1)).index)
        if m.group(2) == "node":
            source = self.sources.items[index]
            v = describe.value(source, args.get("path", ""), _page_number(args))
            body = pages.value_body(index, source.label, v, self.links)
            return pages.layout(f"/{v['path']} - {source.label}", body, self.links, self.labels)
        return self._archive(index, verify=m.group(2) == "verify")

    def _archive(self, index: int, *, verify: bool) -> str:
        source = self.sources.items[index]
        data = archive_data(source, verify=verify)
        return pages.layout(source.label, pages.archive_body(index, data, self.links), self.links, self.labels)

    @staticmethod
    def _open_error(source: Any) -> str | None:
        try:
            source.open()
        except ZArchiveError as e:
            return f"{type(e).__name__}: {e}"
        return None


def archive_data(source: Any, *, verify: bool) -> dict[str, Any]:
    """What an archive's overview shows (the tree, metadata, configs, audit, exports, and, if asked
    for, the checksums)."""
    return {"tree": describe.tree(source), "meta": describe.meta(source), "configs": describe.configs(source),
            "audit": describe.audit(source), "exports": describe.exports(source),
            "checks": describe.checksums(source) if verify else None}  # fmt: skip


def _page_number(args: dict[str, str]) -> int:
    text = args.get("page", "0") or "0"
    if not text.isdigit() or len(text) > 9:
        raise BadObjectPath(f"page must be a number, not {text[:20]!r}")
    return int(text)


__all__ = ["LiveLinks", "NotFound", "Routes", "archive_data"]
