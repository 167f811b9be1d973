"""The format's name and version, and the rule for changing it.

FORMAT_VERSION is "MAJOR.MINOR".
- MINOR goes up when the format gains something an older reader can ignore or will refuse with a
  VersionError naming it: a new node type, a new shape of an existing node type, a new optional
  field. Every node type's schema says (as `since`) the version that gave it its current shape.
  A reader given a newer-minor file reads it when it uses nothing the reader does not know, and
  otherwise raises VersionError for the node it does not know, never a plain FormatError about the
  node's shape and never a wrong value (zarchive.engine.plan, spec/reading.md section 4).
- MAJOR goes up when an existing file would be read differently. Readers refuse a newer MAJOR with
  VersionError when the file is opened; every release keeps reading every older version (see
  spec/examples and tests/test_spec.py).
"""

FORMAT_NAME = "zarchive"
FORMAT_MAJOR = 1
FORMAT_MINOR = 6
FORMAT_VERSION = f"{FORMAT_MAJOR}.{FORMAT_MINOR}"
