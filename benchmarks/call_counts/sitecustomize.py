"""A probe that counts every Python function call in every process of a benchmark's mesh (never used by the product).

``bench_analysis.py --call-counts`` puts this directory on the mesh processes' ``PYTHONPATH``, so Python imports
it at start-up. It does nothing unless ``AGENTMESH_CALL_COUNTS_DIR`` is set; then every thread counts the Python
functions it calls (by code object) and the built-in functions it calls (``c_call`` events), each thread in a
table of its own, so no count is lost to another thread. Counting makes every call several times slower: the
counts say how much work a process does, never how long it takes.

On ``SIGUSR2`` the process writes its counts so far to ``<dir>/<pid>.json``
(``{"seq": n, "calls": [[file, first line, name, calls], ...]}``, ``file`` ``"C"`` for a built-in), so the
benchmark can take the difference of two snapshots around its analyses.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import Any

_DIR = os.environ.get("AGENTMESH_CALL_COUNTS_DIR")


def _install() -> None:
    assert _DIR is not None
    tables: list[dict[Any, int]] = []

    def counter() -> Any:
        table: dict[Any, int] = {}
        tables.append(table)  # list.append is atomic: a thread's table is never lost

        def count(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                code = frame.f_code
                table[code] = table.get(code, 0) + 1
            elif event == "c_call":
                table[arg] = table.get(arg, 0) + 1

        return count

    def first(frame: Any, event: str, arg: Any) -> None:
        # A new thread's first event: from here on it counts into its own table.
        sys.setprofile(counter())

    threading.setprofile(first)
    sys.setprofile(counter())
    seq = [0]

    def snapshot(*_: object) -> None:
        mine = sys.getprofile()
        sys.setprofile(None)  # the snapshot's own calls are not counted
        try:
            seq[0] += 1
            totals: dict[tuple[str, int, str], int] = {}
            for table in list(tables):
                for key, n in table.copy().items():
                    if hasattr(key, "co_filename"):
                        name = (key.co_filename, key.co_firstlineno, key.co_qualname)
                    else:
                        name = ("C", 0, getattr(key, "__qualname__", None) or repr(key))
                    totals[name] = totals.get(name, 0) + n
            path = os.path.join(_DIR, f"{os.getpid()}.json")
            with open(path + ".tmp", "w") as out:
                json.dump({"seq": seq[0], "calls": [[*k, n] for k, n in totals.items()]}, out)
            os.replace(path + ".tmp", path)
        finally:
            sys.setprofile(mine)

    signal.signal(signal.SIGUSR2, snapshot)
    # Only a process that says it is probed gets the signal (its default action would end any other).
    with open(os.path.join(_DIR, f"{os.getpid()}.ready"), "w"):
        pass


if _DIR:
    _install()
