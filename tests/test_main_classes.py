"""Classes from notebooks and scripts (`__main__`) and from inside functions: saving warns once with
the fix; another process reading resolves a same-named class in its own `__main__` and says so, and
otherwise names the fix and the generic read. Every save and read here is a real separate process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import zarchive
from zarchive.engine.main_classes import ClassLocationWarning

REPO = Path(__file__).resolve().parents[1]

CLASSES = """
import dataclasses, enum, typing, sys, warnings
import torch
import zarchive
from zarchive.torchutil import ConfiguredModel, set_config_class

@dataclasses.dataclass
class RunConfig:
    lr: float = 0.1
    layers: int = 2

class Mode(enum.Enum):
    TRAIN = "train"

class Pair(typing.NamedTuple):
    a: int
    b: str = "x"

@set_config_class(RunConfig)
class Net(ConfiguredModel[RunConfig]):
    def __init__(self, config):
        super().__init__(config)
        self.fc = torch.nn.Linear(config.layers, 1)
"""

SAVE = (
    CLASSES
    + """
torch.manual_seed(0)
run = {"config": RunConfig(lr=0.5), "mode": Mode.TRAIN, "pair": Pair(1), "model": Net(RunConfig(layers=3)),
       "more": [RunConfig(), RunConfig()]}
zarchive.save(run, sys.argv[1])
zarchive.save(run, sys.argv[1])  # a second save of the same classes: no second warning
back = zarchive.read(sys.argv[1])  # the same process reads its own classes: nothing to say
assert back["config"] == RunConfig(lr=0.5) and back["mode"] is Mode.TRAIN and back["pair"] == Pair(1)
print("SAVED")
"""
)

READ_SAME_NAMES = (
    CLASSES
    + """
back = zarchive.read(sys.argv[1])
again = zarchive.read(sys.argv[1])  # said once per class
assert type(back["config"]) is RunConfig and back["config"].lr == 0.5
assert back["mode"] is Mode.TRAIN and back["pair"] == Pair(1, "x") and isinstance(back["model"], Net)
assert back["model"].fc.weight.shape == (1, 3)
print("READ")
"""
)

READ_WITHOUT = """
import sys, zarchive
try:
    zarchive.read(sys.argv[1])
except zarchive.UnknownTypeError as e:
    print("ERROR:", e)
generic = zarchive.read(sys.argv[1], unresolved="generic")
print("GENERIC:", generic["config"].tag, generic["config"].lr)
"""


def _python(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = cwd / f"script_{abs(hash(code))}.py"
    script.write_text(textwrap.dedent(code))
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "default"}
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "ClassLocationWarning" in line]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("main")
    path = folder / "run.zarc"
    done = _python(SAVE, str(path), cwd=folder)
    assert "SAVED" in done.stdout
    return path, done.stderr


def test_saving_main_classes_warns_once_per_class_with_the_fix(saved: tuple[Path, str]) -> None:
    _, stderr = saved
    found = _warnings(stderr)
    tags = ["__main__:RunConfig", "__main__:Mode", "__main__:Pair", "__main__:Net"]
    for tag in tags:
        assert sum(f"class '{tag}'" in line for line in found) == 1, (tag, found)
    assert len(found) == len(tags)
    first = next(line for line in found if "__main__:RunConfig" in line)
    assert "defined in __main__ (a script or notebook)" in first
    assert "zarchive.register_class(RunConfig, name='yourproject:RunConfig')" in first
    assert "unresolved='generic'" in first
    assert "script_" in first  # the warning points at the user's save, not into zarchive


def test_reader_with_the_same_names_in_its_main_reads_and_says_so(saved: tuple[Path, str], tmp_path: Path) -> None:
    path, _ = saved
    done = _python(READ_SAME_NAMES, str(path), cwd=tmp_path)
    assert "READ" in done.stdout
    found = _warnings(done.stderr)
    assert len(found) == 4, found  # one per class, the second read says nothing more
    line = next(x for x in found if "'__main__:RunConfig'" in x)
    assert "this program's __main__ defines" in line and "register_class(RunConfig, name='__main__:RunConfig')" in line


def test_reader_without_the_classes_gets_the_fix_and_the_generic_read(saved: tuple[Path, str], tmp_path: Path) -> None:
    path, _ = saved
    done = _python(READ_WITHOUT, str(path), cwd=tmp_path)
    error = next(line for line in done.stdout.splitlines() if line.startswith("ERROR:"))
    assert "was defined in the __main__ of the program that saved the file" in error
    assert "register_class(YourClass, name='__main__:" in error
    assert "unresolved='generic'" in error
    assert "GENERIC: __main__:RunConfig 0.5" in done.stdout


LOCAL = """
import dataclasses, sys, zarchive

def make():
    @dataclasses.dataclass
    class Local:
        n: int = 1
    return Local

Local = make()
zarchive.save({"x": Local(4)}, sys.argv[1])
assert zarchive.read(sys.argv[1]) == {"x": Local(4)}  # the process that saved the class finds it again
Named = make()
zarchive.register_class(Named, name="myproject:Local")
zarchive.save({"x": Named(5)}, sys.argv[2])  # registered under a stable name: no warning
print("SAVED")
"""

READ_LOCAL = """
import dataclasses, sys, zarchive
try:
    zarchive.read(sys.argv[1])
except zarchive.UnknownTypeError as e:
    print("ERROR:", e)

@dataclasses.dataclass
class Anything:
    n: int = 0

zarchive.register_class(Anything, name="myproject:Local")
print("NAMED:", zarchive.read(sys.argv[2]))
"""


def test_function_local_classes(tmp_path: Path) -> None:
    first, second = tmp_path / "local.zarc", tmp_path / "named.zarc"
    done = _python(LOCAL, str(first), str(second), cwd=tmp_path)
    found = _warnings(done.stderr)
    assert len(found) == 1, found
    assert "defined inside a function" in found[0] and "make.<locals>.Local" in found[0]
    read = _python(READ_LOCAL, str(first), str(second), cwd=tmp_path)
    error = next(line for line in read.stdout.splitlines() if line.startswith("ERROR:"))
    assert "was defined inside a function" in error and "register_class(YourClass, name=" in error
    assert "unresolved='generic'" in error
    assert "NAMED: {'x': Anything(n=5)}" in read.stdout


def test_classes_in_modules_do_not_warn(tmp_path: Path) -> None:
    from golden_models import Point  # a class in an importable module

    with warnings.catch_warnings():
        warnings.simplefilter("error", ClassLocationWarning)
        zarchive.save({"p": Point(1.0, 2.0)}, tmp_path / "p.zarc")
        assert zarchive.read(tmp_path / "p.zarc")["p"] == Point(1.0, 2.0)
