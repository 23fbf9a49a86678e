"""A probe of chosen functions' CPU time in every process of a benchmark's mesh (never used by the product).

``bench_analysis.py --function-cpu`` puts this directory on the mesh processes' ``PYTHONPATH``, so
Python imports it at start-up. It does nothing unless ``AGENTMESH_FUNCTION_CPU_DIR`` is set; then each
function named in ``AGENTMESH_FUNCTION_CPU`` (``module:attribute`` or ``module:Class.method``, comma
separated) is wrapped, once its module has run, to add its calls and their thread CPU time
(``time.thread_time_ns``: the calling thread's own CPU, not time spent waiting for a lock, the GIL
or a reply). A call made from inside an already measured call counts only in the outer one.

On ``SIGUSR2`` the process writes what it has counted so far to ``<dir>/<pid>.json``
(``{"seq": n, "functions": {"module:attribute": [calls, nanoseconds]}, "missing": [...]}``: the
targets it has not wrapped, their module not imported or without that name), so the benchmark can
take the difference of two snapshots around its timed window.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import signal
import sys
import threading
import time
from typing import Any

_DIR = os.environ.get("AGENTMESH_FUNCTION_CPU_DIR")
_TARGETS = [t.strip() for t in os.environ.get("AGENTMESH_FUNCTION_CPU", "").split(",") if t.strip()]


def _install() -> None:
    assert _DIR is not None
    counts: dict[str, list[int]] = {}
    lock = threading.Lock()
    inside = threading.local()
    pending: dict[str, list[str]] = {}
    absent: list[str] = []
    for target in _TARGETS:
        module, _, attribute = target.partition(":")
        pending.setdefault(module, []).append(attribute)

    def wrap(module: Any, attribute: str) -> None:
        owner = module
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        function = getattr(owner, name)
        key = f"{module.__name__}:{attribute}"
        counts.setdefault(key, [0, 0])

        def measured(*args: Any, **kwargs: Any) -> Any:
            if getattr(inside, "active", False):
                return function(*args, **kwargs)
            inside.active = True
            started = time.thread_time_ns()
            try:
                return function(*args, **kwargs)
            finally:
                spent = time.thread_time_ns() - started
                inside.active = False
                with lock:
                    entry = counts[key]
                    entry[0] += 1
                    entry[1] += spent

        setattr(owner, name, measured)

    class Loader(importlib.abc.Loader):
        def __init__(self, inner: importlib.abc.Loader) -> None:
            self._inner = inner

        def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
            return self._inner.create_module(spec)

        def exec_module(self, module: Any) -> None:
            self._inner.exec_module(module)
            for attribute in pending.pop(module.__name__, []):
                try:
                    wrap(module, attribute)
                except AttributeError:
                    absent.append(f"{module.__name__}:{attribute}")

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
            if fullname not in pending:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    if spec.loader is not None:
                        spec.loader = Loader(spec.loader)
                    return spec
            return None

    for name in [m for m in pending if m in sys.modules]:  # already imported (e.g. by site)
        for attribute in pending.pop(name):
            try:
                wrap(sys.modules[name], attribute)
            except AttributeError:
                absent.append(f"{name}:{attribute}")
    sys.meta_path.insert(0, Finder())
    seq = [0]

    def snapshot(*_: object) -> None:
        seq[0] += 1
        with lock:
            functions = {k: list(v) for k, v in counts.items()}
        path = os.path.join(_DIR, f"{os.getpid()}.json")
        with open(path + ".tmp", "w") as out:
            missing = [f"{m}:{a}" for m, attributes in pending.items() for a in attributes] + absent
            json.dump({"seq": seq[0], "functions": functions, "missing": missing}, out)
        os.replace(path + ".tmp", path)

    signal.signal(signal.SIGUSR2, snapshot)
    # Only a process that says it is probed gets the signal (its default action would end any other).
    with open(os.path.join(_DIR, f"{os.getpid()}.ready"), "w"):
        pass


if _DIR and _TARGETS:
    _install()
