"""What the recorder fakes around a vLLM source tree, and nothing else.

vLLM's own Python runs unchanged. Three kinds of thing are replaced, each listed in the output
provenance: hardware queries (the platform object's capability, CPU arch, device name), compiled
extensions and custom-op namespaces (`vllm._C`, `torch.ops._C`, ...), and optional packages (a
package a platform "has" imports as an empty module; one it lacks is not found). Optional
packages whose Python decides something vLLM reads (humming's input-schema compatibility) run
for real where the platform has them, with only the device they would query simulated. A stub records
every call made into it, so the provenance can say whether the selection code reached it.
"""
from __future__ import annotations

import copy
import importlib.abc
import importlib.machinery
import sys
import types
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from workbench.errors import WorkbenchError


class Stub(types.ModuleType):
    """A module (or attribute of one) that stands in for code we cannot run here.

    Attribute access yields more stubs; a call is recorded in `CALLS` and yields a stub. It is
    falsy, so a feature probe such as `if ops.has_x():` reads "absent", never a fake "present".
    """

    CALLS: list[str] = []

    def __getattr__(self, name: str) -> "Stub":
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Stub(f"{self.__name__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> "Stub":
        Stub.CALLS.append(self.__name__)
        return Stub(f"{self.__name__}()")

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Iterator:
        return iter(())

    def __getitem__(self, key: Any) -> "Stub":
        return self

    def __or__(self, other: Any) -> "Stub":
        return self

    __ror__ = __or__

    def __mro_entries__(self, bases: tuple) -> tuple:
        # `class X(stubbed.Base)`: a plain class, subscriptable and keyword-tolerant.
        return (type(self.__name__.rsplit(".", 1)[-1], (), {
            "__class_getitem__": classmethod(lambda cls, item: cls),
            "__init__": lambda self, *a, **k: None,
            "__init_subclass__": classmethod(lambda cls, **k: None)}),)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves `Stub` modules for the names it holds: the always-stubbed ones (compiled
    extensions) and the optional packages the simulated platform has."""

    def __init__(self) -> None:
        self.stubbed: set[str] = set()
        self.present: set[str] = set()
        self.hidden: set[str] = set()  # real packages the simulated platform lacks

    def find_spec(self, name, path=None, target=None):
        if any(name == n or name.startswith(n + ".") for n in self.hidden):
            # as when it is not installed: `import humming` and vLLM's has_humming() fail
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        if any(name == n or name.startswith(n + ".") for n in self.stubbed | self.present):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return Stub(spec.name)

    def exec_module(self, module):
        module.__path__ = []


FINDER = _Finder()


class InstalledOptionalPackage(WorkbenchError):
    """An optional package the recorder simulates is really installed, so "absent" would lie."""


class MissingRealPackage(WorkbenchError):
    """A package the recorder runs for real (not as a stub) is not installed here."""


REAL: set[str] = set()  # optional packages imported for real where the platform has them


def install(stubbed: set[str], optional: set[str], real: set[str] = frozenset()) -> None:
    """Put the stub finder in front of the import system (once per process). The `real`
    optional packages are not stubbed: the platform that has one imports the installed package,
    the one that lacks it finds nothing."""
    import importlib.util
    REAL.update(real)
    if FINDER in sys.meta_path:  # installed before: the finder itself serves the present ones
        FINDER.stubbed |= stubbed
        return
    installed = sorted(n for n in set(optional) - REAL
                       if n not in sys.modules and importlib.util.find_spec(n))
    if installed:
        raise InstalledOptionalPackage(
            f"recorder: optional package(s) {installed} are installed in this environment; the "
            "recorder simulates their presence per platform, so run it where they are absent")
    FINDER.stubbed |= stubbed
    sys.meta_path.insert(0, FINDER)


def set_packages(optional: set[str], present: set[str]) -> None:
    """Which optional packages import: those in `present`; the rest of `optional` do not."""
    import importlib.util
    real_present = set(present) & REAL
    FINDER.hidden = set()
    missing = sorted(n for n in real_present if importlib.util.find_spec(n) is None)
    if missing:
        raise MissingRealPackage(
            f"recorder: {missing} must be installed to record a platform that has it (it runs "
            "for real): pip install the project's test or cuda extra")
    FINDER.present = (set(present) & set(optional)) - REAL
    _restore_real()
    FINDER.hidden = (set(optional) & REAL) - real_present
    for name in list(sys.modules):
        if any(name == n or name.startswith(n + ".") for n in FINDER.hidden):
            # kept aside, not dropped: importing a real package twice registers its torch ops twice
            _REAL_ASIDE[name] = sys.modules.pop(name)
        elif any(name == n or name.startswith(n + ".") for n in set(optional) - real_present):
            del sys.modules[name]


_REAL_ASIDE: dict[str, Any] = {}  # real packages' modules while a simulated platform lacks them


def _restore_real() -> None:
    for name, module in _REAL_ASIDE.items():
        sys.modules.setdefault(name, module)
    _REAL_ASIDE.clear()


def unhide() -> None:
    """Real packages import again: the simulated platform's absences last only while vLLM's
    code runs under it, never for the rest of the process."""
    FINDER.hidden = set()
    _restore_real()


class _OpNamespace:
    """`torch.ops.<ns>` with the simulated ops shown only when present; other ops are real
    (for aten) or absent (for a compiled extension's namespace)."""

    def __init__(self, name: str, real: Any, simulated: set[str], present: set[str]) -> None:
        self._name, self._real, self._simulated, self._present = name, real, simulated, present

    def __getattr__(self, op: str) -> Any:
        if op in self._present:
            real = getattr(self._real, op, None) if self._real is not None else None
            return real if real is not None else Stub(f"torch.ops.{self._name}.{op}")
        if op in self._simulated or self._real is None:
            raise AttributeError(f"'_OpNamespace' '{self._name}' object has no attribute '{op}'")
        return getattr(self._real, op)


@contextmanager
def torch_ops(simulated: set[str], present: set[str]) -> Iterator[None]:
    """Each `ns.op` in `simulated` resolves under `torch.ops` only when it is in `present`."""
    by_ns: dict[str, set[str]] = {}
    for name in simulated:
        ns, op = name.split(".", 1)
        by_ns.setdefault(ns, set()).add(op)
    spaces = {}
    for ns, ops in by_ns.items():
        real = getattr(torch.ops, ns) if ns == "aten" else None
        have = {p.split(".", 1)[1] for p in present if p.split(".", 1)[0] == ns}
        spaces[ns] = _OpNamespace(ns, real, ops, have)
    with op_namespaces(spaces):
        yield


@contextmanager
def op_namespaces(spaces: dict[str, Any]) -> Iterator[None]:
    """`torch.ops.<ns>` replaced by the given objects for the block, then put back as it was."""
    saved = {ns: torch.ops.__dict__.get(ns) for ns in spaces}
    for ns, obj in spaces.items():
        setattr(torch.ops, ns, obj)
    try:
        yield
    finally:
        for ns, value in saved.items():
            if value is None:
                torch.ops.__dict__.pop(ns, None)
            else:
                setattr(torch.ops, ns, value)


class Observer:
    """Reads a vLLM function's own locals as it returns (normally or by raising).

    vLLM's selection loop keeps its reasons in a local and returns only the kernel; reading the
    frame is how the recorder sees every reason without changing vLLM's code.
    """

    def __init__(self, fn: Callable, names: tuple[str, ...]) -> None:
        self.code = fn.__code__
        self.names = names
        self.calls: list[dict] = []

    def _profile(self, frame, event, arg):
        if frame.f_code is self.code:
            if event == "call":  # a copy: vLLM may change its config after the call
                self.calls.append({"args": {k: copy.copy(v) for k, v in frame.f_locals.items()}})
            elif event == "return":
                self.calls[-1].update({n: frame.f_locals.get(n) for n in self.names})
                self.calls[-1]["returned"] = arg  # None when it raised

    @contextmanager
    def watching(self) -> Iterator["Observer"]:
        self.calls = []
        previous = sys.getprofile()
        sys.setprofile(self._profile)
        try:
            yield self
        finally:
            sys.setprofile(previous)
