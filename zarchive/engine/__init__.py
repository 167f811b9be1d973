"""The engine: the handler contract's context, the registry of handlers, the planned read (plan), the
opened archive (lazy, browse), class tags (typeref) and object paths, the results of verify and
audit, and the small rules every front end shares (format version, generic objects, classes that
live in `__main__`). Internal: the public names are re-exported by `zarchive`."""
