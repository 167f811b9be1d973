"""`zarchive view`: a local, read-only web viewer for archives and checkpoints, and a static page.

- `sources`: opening what the user named (any input `zarchive.open` reads, or a model store's version)
  and looking up object paths in its tree, one lock per archive;
- `describe`: what each page shows, as JSON-ready dicts (the tree, metadata, audit, exports, a value);
- `tables`: column dtypes, null counts and pages of rows of pandas, polars and pyarrow tables;
- `svg`: the plots (histogram, heat map, line plot, bar chart), drawn as inline SVG;
- `pages`: the HTML of each page; `diffpage`: the diff page (zarchive.inspection.diff);
- `routes`: the URLs (token, traversal checks, errors as pages); `server`: the HTTP server;
- `static`: the self-contained page of `--html`.
"""

from __future__ import annotations

__all__: list[str] = []
