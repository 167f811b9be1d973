"""Worker threads follow the cores this process may run on (its CPU affinity, as `taskset` or a
container's cpuset sets it), not the machine's count: on one allowed core, decoding ahead, checking
and prefetching members, hashing weights and staging a save run on the calling thread alone.

Each case runs in a child process (the affinity and the cores learned from it are per process): the
public worker counts are read, and the threads each job starts are counted while it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")

CHILD = r"""
import json, os, sys, threading
from pathlib import Path

if sys.argv[1] == "one":
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import numpy as np
import torch

import zarchive
from zarchive.container.archive_reader import ArchiveReader
from zarchive.container.decode_ahead import DecodeAhead, decode_workers
from zarchive.container.parallel_verify import Prefetch, start_verifying, verify_workers
from zarchive.container.source import open_local
from zarchive.saving.staging import copy_workers
from zarchive.weights_hash import archive_digests, hash_workers

tmp = Path(sys.argv[2])


def threads(prefix):
    return sum(t.name.startswith(prefix) for t in threading.enumerate())


found = {"counts": [decode_workers(), verify_workers(), copy_workers(), hash_workers()]}

# decoding compressed members ahead of a full read
packed = tmp / "packed.zarc"
zarchive.save({f"c{i}": (np.arange(300_000) % (i + 3)).astype(np.int8) for i in range(3)}, packed, durable=False)  # (.zst)
reader = ArchiveReader(open_local(str(packed), mmap=True))
names = sorted(n for n in reader.metadata["members"] if n.endswith(".zst"))
assert len(names) == 3, names
ahead = DecodeAhead(reader, names, min_bytes=0)
found["decode"] = threads("zarchive-decode")
ahead.close()
reader.close()

# checking (mapped file) and prefetching (read file) uncompressed members: 3 x 8 MiB
plain = tmp / "plain.zarc"
zarchive.save({f"w{i}": np.full(1 << 20, i, dtype=np.float64) for i in range(3)}, plain, compress=False, durable=False)
reader = ArchiveReader(open_local(str(plain), mmap=True))
pending = start_verifying(reader)
found["verify"] = threads("zarchive-verify")
pending.wait()
reader.close()
source = open_local(str(plain))
reader = ArchiveReader(source)
prefetch = Prefetch(reader, source)
found["read"] = threads("zarchive-read")
prefetch.finish()
prefetch.close()
reader.close()

# the weights hash: threads counted while it fetches each tensor
weights = tmp / "weights.zarc"
zarchive.save({f"t{i}": torch.full((1000,), float(i)) for i in range(6)}, weights, durable=False)
seen = []


class Counting:
    def __init__(self, arc):
        self.arc = arc

    def node(self, path=""):
        return self.arc.node(path)

    def children(self, node):
        return self.arc.children(node)

    def is_tensor(self, node):
        return self.arc.is_tensor(node)

    def model_tag(self, path=""):
        return self.arc.model_tag(path)

    def get(self, path=""):
        seen.append(threads("zarchive-hash"))
        return self.arc.get(path)


with zarchive.open(weights) as arc:
    assert len(archive_digests(Counting(arc))) == 6
found["hash"] = max(seen)

# staging a save_async of 72 MiB (a capture of 64 MiB or more copies on several threads)
zarchive.save_async({"big": np.ones(9 << 20, dtype=np.float64)}, tmp / "staged.zarc", durable=False).result()
found["stage"] = threads("zarchive-stage")
print(json.dumps(found))
"""


def _child(cores: str, tmp: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, cores, str(tmp)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


JOBS = ["decode", "verify", "read", "hash", "stage"]


def test_on_one_core_every_job_runs_on_the_calling_thread(tmp_path: Path) -> None:
    found = _child("one", tmp_path)
    assert found["counts"] == [1, 1, 1, 1], found
    assert {job: found[job] for job in JOBS} == dict.fromkeys(JOBS, 0), found


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_with_several_cores_every_job_starts_workers(tmp_path: Path) -> None:
    """The same child on every core this test may use: each job does start threads (so the test above
    sees what it would see if a count ignored the affinity)."""
    found = _child("all", tmp_path)
    assert all(n >= 2 for n in found["counts"]), found
    assert all(found[job] >= 1 for job in JOBS), found
