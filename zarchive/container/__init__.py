"""The zip container and its member formats. Knows nothing of Python objects."""
