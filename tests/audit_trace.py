"""What a read really runs of the reading program's code, observed with sys.setprofile.

`Trace` records every call that goes from library code (the standard library, installed packages,
zarchive) into other code (the program's modules, tests, classes and functions they define, and code
Python generates for them: dataclass and named tuple methods). Each such call is recorded as the tags
that would account for it in an audit: a construction (`__new__`, `__init__`, `__post_init__`, a
classmethod) as its class's "module:QualName"; a method of an object the program already had as the
method's tag or its class's; a function as its own tag. Calls on objects the read built itself (a
model's methods called by torch) and calls from the program's code to more of it are not
transitions: they are the work of what was built.

Run as a script, it is the child process of tests/test_audit_complete.py: for each file given, it
traces `zarchive.audit`, a full read, a read with trusted=[] and one trusting what audit listed,
and writes one JSON line per file (under an address-space limit, a time limit per file).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import sysconfig
from types import CodeType, FrameType
from typing import Any, Self

import zarchive

_ROOTS = tuple(
    {os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {os.path.dirname(os.path.realpath(zarchive.__file__)) + os.sep}
)
_REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
PROGRAM_ROOTS = tuple(os.path.join(_REPO, d) + os.sep for d in ("tests", "spec"))
CONSTRUCT = frozenset({"__new__", "__init__", "__post_init__"})


def is_library_module(name: str) -> bool:
    top = name.partition(".")[0]
    if top in sys.stdlib_module_names or top in ("builtins", "zarchive"):
        return True
    module = sys.modules.get(name) or sys.modules.get(top)
    file = getattr(module, "__file__", None) or ""
    return os.path.realpath(file).startswith(_ROOTS) if file else False


class Trace:
    """Calls from library code into the program's code while active (see the module docstring)."""

    def __init__(self) -> None:
        self.found: list[tuple[str, ...]] = []  # each: tags any one of which accounts for the call
        self._lib: dict[CodeType, bool] = {}
        self._owners: dict[tuple[CodeType, type], type | None] = {}
        self._built: set[int] = set()
        self._keep: list[Any] = []  # objects whose ids are in _built stay alive while tracing

    def __enter__(self) -> Self:
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)
        self._keep.clear()

    def _is_library(self, code: CodeType, frame: FrameType) -> bool:
        lib = self._lib.get(code)
        if lib is None:
            name = code.co_filename
            if name.startswith("<frozen"):
                lib = True
            elif name.startswith("<"):  # generated (dataclass, named tuple): whose module's globals
                lib = is_library_module(str(frame.f_globals.get("__name__", "")))
            else:
                lib = os.path.realpath(name).startswith(_ROOTS)
            self._lib[code] = lib
        return lib

    def _owner(self, code: CodeType, first: Any) -> type | None:
        """The class whose method `code` is, for a call whose first argument is `first`."""
        cand = first if isinstance(first, type) else type(first)
        key = (code, cand)
        if key not in self._owners:
            found = None
            for klass in cand.__mro__:
                for value in vars(klass).values():
                    fn = getattr(value, "__func__", getattr(value, "fget", value))
                    if getattr(fn, "__code__", None) is code:
                        found = cand
                        break
                if found is not None:
                    break
            self._owners[key] = found
        return self._owners[key]

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if self._is_library(code, frame) or code.co_name == "__del__":
            return
        first = frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None
        owner = self._owner(code, first) if code.co_argcount else None
        if owner is not None and is_library_module(owner.__module__):
            return  # a library class's generated method (a library dataclass's __init__)
        if owner is not None and not isinstance(first, type) and code.co_name in CONSTRUCT:
            self._built.add(id(first))
            self._keep.append(first)
        caller = frame.f_back
        if caller is not None and not self._is_library(caller.f_code, caller):
            return  # the program's code calling more of it: the work of what was built or called
        if code.co_name == "<module>" and not _program_file(frame.f_globals.get("__file__")):
            return  # code a library runs as a module (torch's lazy imports, named tuples it makes, annotations)
        fn_tag = f"{frame.f_globals.get('__name__')}:{code.co_qualname}"
        if owner is None:
            self.found.append((fn_tag,))
        elif isinstance(first, type) or code.co_name in CONSTRUCT:
            self.found.append(_class_tags(owner))
        elif id(first) not in self._built:  # a method of an object the program had (a bound loader)
            self.found.append((fn_tag, *_class_tags(owner)))


def _program_file(file: Any) -> bool:
    """A module file of the program under test (this repository's tests and examples)."""
    return isinstance(file, str) and os.path.realpath(file).startswith(PROGRAM_ROOTS)


def _class_tags(cls: type) -> tuple[str, ...]:
    """The tags a file may name `cls` by: its own, and the names it is registered under."""
    from zarchive.engine.typeref import class_tag, registered_classes

    return (class_tag(cls), *(name for name, c in registered_classes().items() if c is cls))


def _run(fn: Any) -> tuple[list[list[str]], str | None]:
    """What `fn()` ran of the program's code, and the class of the exception it raised (if any)."""
    err = None
    with Trace() as t:
        try:
            fn()
        except zarchive.ZArchiveError as e:
            err = type(e).__name__
        except Exception as e:  # noqa: BLE001 - reported: other tests hold the read to ZArchiveErrors
            err = f"!{type(e).__name__}"
    return sorted({tuple(x) for x in t.found}, key=str), err  # type: ignore[return-value]


def check_file(path: str) -> dict[str, Any]:
    rec: dict[str, Any] = {"file": path}
    found: dict[str, list[str]] = {}

    def audit() -> None:
        found.update(zarchive.audit(path))

    rec["audit_ran"], rec["audit_error"] = _run(audit)
    rec["audit"] = found
    rec["read_ran"], rec["read_error"] = _run(lambda: zarchive.read(path))
    rec["untrusted_ran"], rec["untrusted_error"] = _run(lambda: zarchive.read(path, trusted=[]))
    tags = [t for t in found if t.count(":") == 1]
    rec["trusted_ran"], rec["trusted_error"] = _run(lambda: zarchive.read(path, trusted=tags))
    return rec


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def main(out: str, files: list[str]) -> None:
    import audit_fixtures
    import golden_models  # noqa: F401 - the classes the golden examples name, as their program imports them
    import hostile.models  # noqa: F401 - the classes some corpus files name
    import torch  # noqa: F401

    audit_fixtures.install()
    limit = _status_kb("VmSize") * 1024 + (3 << 30)  # 3 GiB beyond what the imports took
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    with open(out, "a") as f:
        for path in files:
            signal.alarm(120)  # a file that hangs ends the process (the parent goes on with the next)
            rec = check_file(path)
            signal.alarm(0)
            f.write(json.dumps(rec) + "\n")
            f.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
