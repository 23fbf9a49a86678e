"""The mesh's date: what business rules measure "already ended" by.

A permit whose validity window ended before today must not be recommended; a
specialist compares with :func:`mesh_today`, never with a date a request or a
data file brings. ``MeshConfig.today`` (``AGENTMESH_TODAY``) fixes the date for
demos and tests whose data is dated (the demo world is dated 2026-11-30);
unset, it is the host's UTC date. Security clocks — certificate and grant
validity, assertion and confirmation expiry, leases — always use the real time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from agentmesh.config import MeshConfig

__all__ = ["mesh_today", "utc_today"]


def utc_today() -> dt.date:
    """The host's date in UTC."""
    return dt.datetime.now(dt.UTC).date()


def mesh_today(config: MeshConfig) -> Callable[[], dt.date]:
    """The mesh's date: ``config.today`` when set, else the host's UTC date (read at each call)."""
    fixed = config.today
    if fixed is not None:
        return lambda: fixed
    return utc_today
