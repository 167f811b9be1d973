"""The read policy made from open()'s and read()'s arguments: checked, and shared where it can be."""

from __future__ import annotations

from typing import Any

import pytest

import zarchive
from zarchive.engine.read_policy import ReadPolicy


def test_a_policy_without_trusted_classes_is_made_once_per_setting() -> None:
    a = ReadPolicy.make(max_read_bytes=10_000)
    assert ReadPolicy.make(max_read_bytes=10_000) is a  # (immutable: opening for one tensor makes no new one)
    assert ReadPolicy.make(max_read_bytes=10_001) is not a
    assert ReadPolicy.make(tensors="numpy", max_read_bytes=10_000).tensors == "numpy"
    trusting = ReadPolicy.make(trusted=[zarchive.ZArchive])
    assert trusting is not ReadPolicy.make(trusted=[zarchive.ZArchive]) and trusting.trusted


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_nodes": True}, ValueError),  # (a bool is no count, even where 1 was asked for before)
        ({"max_nodes": 0}, ValueError),
        ({"max_read_bytes": [1]}, ValueError),
        ({"max_read_bytes": -1}, ValueError),
        ({"unresolved": "ignore"}, ValueError),
        ({"tensors": ["torch"]}, ValueError),
    ],
)
def test_bad_settings_are_refused_every_time(kwargs: dict[str, Any], error: type[Exception]) -> None:
    ReadPolicy.make(max_nodes=1)
    for _ in range(2):
        with pytest.raises(error):
            ReadPolicy.make(**kwargs)
