"""One saver of tests/test_store.py's concurrency tests, run as its own process.

    python store_worker.py ROOT VERSION SEED READY GO

Builds a model from SEED, writes READY, waits for GO to exist (so the savers start together), saves
it to the store at ROOT as VERSION and prints `saved <weights hash>` or `exists <weights hash>`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

import zarchive
from zarchive.store.files import VersionExists
from zarchive.weights_hash import state_dict_hash

sys.path.insert(0, str(Path(__file__).parent))
from models_a import Config, Model


def main() -> None:
    root, version, seed, ready, go = sys.argv[1:6]
    torch.manual_seed(int(seed))
    model = Model(Config(d_hidden=64, n_layers=4))
    store = zarchive.ModelStore(root)
    Path(ready).touch()
    deadline = time.monotonic() + 60
    while not Path(go).exists():
        if time.monotonic() > deadline:
            raise SystemExit("never told to go")
        time.sleep(0.005)
    h = state_dict_hash(model.state_dict())
    try:
        store.save(model, version, metrics={"seed": int(seed)})
    except VersionExists:
        print(f"exists {h}")
        return
    print(f"saved {h}")


if __name__ == "__main__":
    main()
