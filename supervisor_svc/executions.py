"""Durable executions and review items (SQLite under the mesh home).

An execution is stored whole, as its protobuf, after every change (planned,
each task started / finished, decided), so a supervisor restart never loses
one: on start, executions still RUNNING are ended truthfully (see
:meth:`ExecutionStore.end_interrupted`).
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading
import uuid
from pathlib import Path

from agentmesh.v1 import supervisor_service_pb2 as pb

_SCHEMA = """
CREATE TABLE IF NOT EXISTS executions (
    execution_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    status INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS executions_status ON executions (status);
CREATE TABLE IF NOT EXISTS review_items (
    review_id TEXT PRIMARY KEY,
    execution_id TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    conflict BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS review_items_tenant ON review_items (tenant_id, status);
"""


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


class ExecutionStore:
    """Executions (whole protobufs) and review items, durable on every save."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=10.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode survives a crash of the process (the threat a
        # restart recovers from); only an OS crash can lose the last commits.
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def save(self, execution: pb.Execution) -> None:
        """Stores the execution as it is now."""
        body = execution.SerializeToString(deterministic=True)
        with self._lock:
            self._conn.execute(
                "INSERT INTO executions VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (execution_id) DO UPDATE SET"
                " status = excluded.status, updated_at = excluded.updated_at, body = excluded.body",
                (execution.execution_id, execution.tenant_id, execution.user_id, int(execution.status), _now(), body))

    def get(self, execution_id: str) -> pb.Execution | None:
        """The stored execution, or None."""
        with self._lock:
            row = self._conn.execute("SELECT body FROM executions WHERE execution_id = ?", (execution_id,)).fetchone()
        if row is None:
            return None
        execution = pb.Execution()
        execution.ParseFromString(row[0])
        return execution

    def running(self) -> list[pb.Execution]:
        """Executions still marked RUNNING."""
        with self._lock:
            rows = self._conn.execute("SELECT body FROM executions WHERE status = ?",
                                      (pb.EXECUTION_STATUS_RUNNING,)).fetchall()
        out = []
        for (body,) in rows:
            execution = pb.Execution()
            execution.ParseFromString(body)
            out.append(execution)
        return out

    def add_review(self, execution_id: str, tenant_id: str, conflict: pb.Conflict) -> str:
        """Persists a review item for a conflict; returns its id."""
        review_id = f"rev-{uuid.uuid4().hex[:12]}"
        with self._lock:
            self._conn.execute("INSERT INTO review_items VALUES (?, ?, ?, ?, ?, ?)",
                               (review_id, execution_id, tenant_id, "OPEN", _now(),
                                conflict.SerializeToString(deterministic=True)))
        return review_id

    def reviews(self, tenant_id: str) -> list[tuple[str, str, str, pb.Conflict]]:
        """(review_id, execution_id, status, conflict) of a tenant, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT review_id, execution_id, status, conflict FROM review_items WHERE tenant_id = ?"
                " ORDER BY created_at", (tenant_id,)).fetchall()
        out = []
        for review_id, execution_id, status, blob in rows:
            conflict = pb.Conflict()
            conflict.ParseFromString(blob)
            out.append((review_id, execution_id, status, conflict))
        return out

    def close(self) -> None:
        """Closes the database."""
        self._conn.close()
