"""The format's name and version, and the rule for changing it.

FORMAT_VERSION is "MAJOR.MINOR".
- MINOR goes up when the format gains something an older reader can safely ignore or will reject with
  a clear UnknownTypeError (a new handler tag, a new optional metadata field). Old files stay valid.
- MAJOR goes up when an existing file would be read differently. Readers refuse a newer MAJOR with
  VersionError; every release keeps reading every older version (see spec/examples and tests/golden).
"""

FORMAT_NAME = "zarchive"
FORMAT_MAJOR = 1
FORMAT_MINOR = 2
FORMAT_VERSION = f"{FORMAT_MAJOR}.{FORMAT_MINOR}"
