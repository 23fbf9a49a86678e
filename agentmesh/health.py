"""True health: a process is SERVING only while its own checks pass.

Each role registers *checks* (plain callables returning ``None`` when fine or a
short reason when not) through :class:`agentmesh.service.ServiceContext`: its
databases, its required peers, its own writer (the audit log). A
:class:`HealthMonitor` thread runs them about once a second and flips the
standard gRPC health status of every service of the process at once; the
reasons travel with each health answer that is not SERVING as the trailing
metadata ``agentmesh-health-reason``, which ``agentmesh status`` prints. When
the cause goes away the next round puts the process back to SERVING. Nothing
here runs on the path of an RPC.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

log = logging.getLogger(__name__)

Check = Callable[[], "str | None"]
"""A health check: None when fine, else why not (one line)."""

REASON_KEY = "agentmesh-health-reason"
"""Trailing metadata of a health answer that is not SERVING: the failing checks, ``; ``-separated."""

DEFAULT_INTERVAL_S = 1.0
MAX_REASON_CHARS = 600

_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _printable(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """ASCII without control characters (a gRPC metadata value), at most ``limit`` characters."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in text.encode("ascii", "backslashreplace").decode())
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."


class HealthServicer(health.HealthServicer):  # type: ignore[misc]
    """gRPC health whose answers that are not SERVING carry the reason in trailing metadata."""

    def __init__(self) -> None:
        super().__init__()
        self.reason = ""

    def Check(self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext) -> Any:  # noqa: N802
        response = super().Check(request, context)
        reason = self.reason
        if reason and response.status != _SERVING:
            context.set_trailing_metadata(((REASON_KEY, reason),))
        return response


def add_to_server(server: grpc.Server, service_names: Sequence[str]) -> HealthServicer:
    """Registers health (every service NOT_SERVING until the monitor says otherwise) and reflection (v1, v1alpha)."""
    from agentmesh import transport
    servicer = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    for name in ("", *service_names):
        servicer.set(name, _NOT_SERVING)
    transport.add_reflection(server, service_names)
    return servicer


@dataclass
class _Registered:
    name: str
    check: Check
    tolerate: int
    failures: int = 0


class HealthMonitor:
    """Runs the registered checks every ``interval_s`` on a thread of its own and sets the health status."""

    def __init__(self, servicer: HealthServicer, service_names: Sequence[str], *,
                 interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self._servicer = servicer
        self._names = ("", *service_names)
        self._interval = interval_s
        self._checks: list[_Registered] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._serving: bool | None = None
        self.reasons: list[str] = []

    def add(self, name: str, check: Check, *, tolerate: int = 0) -> None:
        """Adds a check; ``tolerate`` consecutive failures are ignored (for probes over the network)."""
        self._checks.append(_Registered(name, check, tolerate))

    @property
    def checks(self) -> list[str]:
        """The names of the registered checks."""
        return [c.name for c in self._checks]

    def run_once(self) -> list[str]:
        """Runs every check now, sets the status; returns the reasons (empty: SERVING)."""
        reasons = []
        for c in self._checks:
            try:
                reason = c.check()
            except Exception as err:  # noqa: BLE001 - a broken check is a failing one
                reason = f"check raised {err!r}"
            if reason is None:
                c.failures = 0
                continue
            c.failures += 1
            if c.failures > c.tolerate:
                reasons.append(f"{c.name}: {reason}")
        if not self._stop.is_set():
            self._apply(reasons)
        return reasons

    def _apply(self, reasons: list[str]) -> None:
        serving = not reasons
        text = _printable("; ".join(reasons))
        self._servicer.reason = text
        self.reasons = reasons
        if serving != self._serving:
            for name in self._names:
                self._servicer.set(name, _SERVING if serving else _NOT_SERVING)
            if serving:
                log.log(logging.INFO if self._serving is None else logging.WARNING, "health: SERVING")
            else:
                log.warning("health: NOT_SERVING: %s", text)
            self._serving = serving
        elif not serving and text != getattr(self, "_logged", ""):
            log.warning("health: NOT_SERVING: %s", text)
        self._logged = text

    def start(self) -> None:
        """Runs the checks once now (so the first answer is already true), then every interval."""
        self.run_once()
        self._thread = threading.Thread(target=self._loop, name="health-monitor", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.run_once()

    def stop(self) -> None:
        """Stops the thread and reports NOT_SERVING (stopping) from now on."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._servicer.reason = "stopping"
        for name in self._names:
            self._servicer.set(name, _NOT_SERVING)


# --- checks -------------------------------------------------------------------------------------

def sqlite_check(path: Path) -> Check:
    """The SQLite file at ``path`` is there, is a database with tables, and can take a write lock.

    Opens a fresh connection each time (never creating the file), so a file that
    was removed, emptied, overwritten or made read-only is seen as such. A lock
    held by another writer counts as usable.
    """
    uri = f"file:{urllib.parse.quote(str(path))}?mode=rw"

    def check() -> str | None:
        if not path.is_file():
            return f"{path} is missing"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=0.2, isolation_level=None)
        except sqlite3.Error as err:
            return f"cannot open {path}: {err}"
        try:
            tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
            if not tables:
                return f"{path} holds no tables"
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) and "busy" not in str(err):
                    raise
        except sqlite3.Error as err:
            return f"{path}: {err}"
        finally:
            conn.close()
        return None

    return check


def probe(channel: grpc.Channel, timeout_s: float) -> tuple[str, str]:
    """Asks a process's health over ``channel``: (status name or ``UNREACHABLE (CODE)``, its reason)."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        response, call = stub.Check.with_call(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
    except grpc.RpcError as err:
        code = err.code() if hasattr(err, "code") else None
        return f"UNREACHABLE ({code.name if code is not None else 'ERROR'})", ""
    reason = ""
    for key, value in call.trailing_metadata() or ():
        if key == REASON_KEY:
            reason = value if isinstance(value, str) else value.decode("ascii", "replace")
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)), reason


def peer_check(channel: Callable[[], grpc.Channel], timeout_s: float = 1.0) -> Check:
    """A required peer answers health SERVING over the channel its callers use."""

    def check() -> str | None:
        status, reason = probe(channel(), timeout_s)
        if status == "SERVING":
            return None
        return f"{status} ({reason})" if reason else status

    return check

