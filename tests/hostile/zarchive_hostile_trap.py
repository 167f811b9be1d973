"""A module no archive may make zarchive import: importing it leaves a mark (and defines the Enum an
archive in the corpus names). tests/test_hostile.py puts this folder on sys.path, so a reader that
imported class names from files would find it, and checks that the mark is never made."""

import enum
import os

os.environ["ZARCHIVE_TRAP_IMPORTED"] = "1"


class Evil(enum.Enum):
    A = 1
