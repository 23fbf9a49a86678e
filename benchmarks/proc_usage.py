"""What a process has spent so far, read from /proc: the benchmarks' one reader of it."""

from __future__ import annotations

import os
from typing import NamedTuple


class Usage(NamedTuple):
    """What a process spent so far: CPU seconds (user + system), of which system, and the
    context switches of its live threads (voluntary: a thread waited, e.g. handing work to
    another thread or waiting for the GIL; involuntary: the scheduler took the core)."""

    cpu_s: float = 0.0
    system_s: float = 0.0
    voluntary: float = 0
    involuntary: float = 0


def usage(pid: int) -> Usage:
    """A process's :class:`Usage` (all zero if it is gone)."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return Usage()
    switches = {"voluntary_ctxt_switches": 0, "nonvoluntary_ctxt_switches": 0}
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as fh:
                for line in fh:
                    key, _, value = line.partition(":")
                    if key in switches:
                        switches[key] += int(value)
        except OSError:
            continue  # the thread ended meanwhile
    user, system = int(fields[11]), int(fields[12])
    return Usage((user + system) / tick, system / tick,
                 switches["voluntary_ctxt_switches"], switches["nonvoluntary_ctxt_switches"])
