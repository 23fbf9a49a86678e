"""Kill switches persisted in SQLite, with the history of every change (PRD §63, §64).

One row per (scope, target) holds the current state; every change also
appends a row to the history, with who changed it and why, so an operator
can always answer "who stopped this, and when?". The file lives under the
mesh home (``MeshHome.data``), so switches survive a restart.

The engine is fed with :meth:`KillSwitchStore.active`, the keys of the
switches in force (``"platform"``, ``"tenant:acme"``, ``"agent:training-agent"``,
``"capability:training.external.update"``).
"""

from __future__ import annotations

import builtins
import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from agentmesh.database import sqlite_connection
from policy_svc.errors import InvalidRequestError, KillSwitchStoreError
from policy_svc.model import KillSwitch, KillSwitchChange, KillSwitchScope, kill_switch_key

__all__ = ["KillSwitchStore", "MAX_REASON_LENGTH", "MAX_TARGET_LENGTH"]

MAX_TARGET_LENGTH = 256
MAX_REASON_LENGTH = 2000

_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS kill_switches (
    scope      TEXT    NOT NULL,
    target     TEXT    NOT NULL,
    enabled    INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    reason     TEXT    NOT NULL,
    changed_by TEXT    NOT NULL,
    changed_at TEXT    NOT NULL,
    PRIMARY KEY (scope, target)
);
CREATE TABLE IF NOT EXISTS kill_switch_history (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    scope      TEXT    NOT NULL,
    target     TEXT    NOT NULL,
    enabled    INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    reason     TEXT    NOT NULL,
    changed_by TEXT    NOT NULL,
    changed_at TEXT    NOT NULL
);
"""


def _utc_now() -> datetime:
    return datetime.now(UTC)


class KillSwitchStore:
    """The kill switches of one mesh, in one SQLite file.

    Thread-safe: one connection guarded by a lock. Several processes may open
    the same file; :meth:`active` notices their commits (``PRAGMA
    data_version``), so a cached answer is never stale.
    """

    def __init__(self, path: str | Path, *, clock: Callable[[], datetime] = _utc_now) -> None:
        """Opens (creating if needed) the store at ``path``.

        Args:
            path: the SQLite file, e.g. ``MeshHome.data / "policy.db"``. Its
                directory is created if missing.
            clock: returns the current time, timezone-aware; for tests.

        Raises:
            KillSwitchStoreError: the file cannot be opened or initialised.
        """
        self._path = Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        # Cache of active() and the data_version it was read at.
        self._active: frozenset[str] | None = None
        self._active_version: int | None = None
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE),
            # so the current row and its history row are written atomically.
            self._conn = sqlite_connection(self._path, timeout_s=5.0)
            self._conn.executescript(_SCHEMA)
            self._conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
        except (OSError, sqlite3.Error) as exc:
            raise KillSwitchStoreError(
                f"cannot open kill switch store {self._path}: {exc}",
                metadata={"path": str(self._path)},
            ) from exc

    @property
    def path(self) -> Path:
        """The SQLite file."""
        return self._path

    def set(
        self,
        scope: KillSwitchScope,
        target: str,
        *,
        enabled: bool,
        reason: str,
        changed_by: str,
    ) -> KillSwitch:
        """Turns a switch on (``enabled=True``: the target is stopped) or off.

        Args:
            scope: AGENT, CAPABILITY, TENANT or PLATFORM.
            target: agent id, capability id or tenant id; ``""`` for PLATFORM.
            enabled: the new state.
            reason: why; required, recorded in the history.
            changed_by: who; the operator's identity (SPIFFE id).

        Returns:
            The switch as now stored.

        Raises:
            InvalidRequestError: a field is missing or invalid (names it).
            KillSwitchStoreError: the database write failed; nothing changed.
        """
        _validate(scope, target, reason, changed_by)
        if not isinstance(enabled, bool):
            raise InvalidRequestError.invalid("enabled", "must be a boolean")
        switch = KillSwitch(
            scope=scope,
            target=target,
            enabled=enabled,
            reason=reason.strip(),
            changed_by=changed_by.strip(),
            changed_at=self._clock().astimezone(UTC),
        )
        row = (
            switch.scope.value,
            switch.target,
            int(switch.enabled),
            switch.reason,
            switch.changed_by,
            switch.changed_at.isoformat(),
        )
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    self._conn.execute(
                        "INSERT INTO kill_switches"
                        " (scope, target, enabled, reason, changed_by, changed_at)"
                        " VALUES (?, ?, ?, ?, ?, ?)"
                        " ON CONFLICT (scope, target) DO UPDATE SET"
                        " enabled = excluded.enabled, reason = excluded.reason,"
                        " changed_by = excluded.changed_by, changed_at = excluded.changed_at",
                        row,
                    )
                    self._conn.execute(
                        "INSERT INTO kill_switch_history"
                        " (scope, target, enabled, reason, changed_by, changed_at)"
                        " VALUES (?, ?, ?, ?, ?, ?)",
                        row,
                    )
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise KillSwitchStoreError(f"cannot record kill switch change: {exc}") from exc
            finally:
                # Our own commits do not move our connection's data_version.
                self._active = None
        return switch

    def active(self) -> frozenset[str]:
        """Keys of the switches in force, for ``PolicyEngine.authorize``.

        Raises:
            KillSwitchStoreError: the database cannot be read. Callers must
                not decide without the switches: no decision, no ALLOW.
        """
        with self._lock:
            try:
                version = self._conn.execute("PRAGMA data_version").fetchone()[0]
                if self._active is None or version != self._active_version:
                    rows = self._conn.execute("SELECT scope, target FROM kill_switches WHERE enabled = 1").fetchall()
                    self._active = frozenset(kill_switch_key(KillSwitchScope(scope), target) for scope, target in rows)
                    self._active_version = int(version)
                return self._active
            except (sqlite3.Error, ValueError) as exc:
                self._active = None
                raise KillSwitchStoreError(f"cannot read kill switches: {exc}") from exc

    def list(self, *, include_disabled: bool = False) -> builtins.list[KillSwitch]:
        """The switches, in force only unless ``include_disabled``; sorted by scope, target."""
        query = "SELECT scope, target, enabled, reason, changed_by, changed_at FROM kill_switches"
        if not include_disabled:
            query += " WHERE enabled = 1"
        rows = self._query(query + " ORDER BY scope, target", ())
        return [
            KillSwitch(
                scope=KillSwitchScope(scope),
                target=target,
                enabled=bool(enabled),
                reason=reason,
                changed_by=changed_by,
                changed_at=datetime.fromisoformat(changed_at),
            )
            for scope, target, enabled, reason, changed_by, changed_at in rows
        ]

    def history(
        self, scope: KillSwitchScope | None = None, target: str | None = None
    ) -> builtins.list[KillSwitchChange]:
        """Every recorded change, oldest first; optionally of one scope and target."""
        query = "SELECT seq, scope, target, enabled, reason, changed_by, changed_at FROM kill_switch_history"
        clauses: builtins.list[str] = []
        params: builtins.list[str] = []
        if scope is not None:
            clauses.append("scope = ?")
            params.append(scope.value)
        if target is not None:
            clauses.append("target = ?")
            params.append(target)
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        rows = self._query(query + " ORDER BY seq", tuple(params))
        return [
            KillSwitchChange(
                seq=seq,
                scope=KillSwitchScope(scope_name),
                target=row_target,
                enabled=bool(enabled),
                reason=reason,
                changed_by=changed_by,
                changed_at=datetime.fromisoformat(changed_at),
            )
            for seq, scope_name, row_target, enabled, reason, changed_by, changed_at in rows
        ]

    def close(self) -> None:
        """Closes the database connection."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> KillSwitchStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _query(self, query: str, params: tuple[str, ...]) -> builtins.list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._conn.execute(query, params).fetchall()
            except sqlite3.Error as exc:
                raise KillSwitchStoreError(f"cannot read kill switches: {exc}") from exc


def _validate(scope: KillSwitchScope, target: str, reason: str, changed_by: str) -> None:
    if not isinstance(scope, KillSwitchScope):
        raise InvalidRequestError.invalid("scope", "not a kill switch scope")
    if scope is KillSwitchScope.UNSPECIFIED:
        raise InvalidRequestError.missing("scope")
    if scope is KillSwitchScope.PLATFORM:
        if target:
            raise InvalidRequestError.invalid("target", "must be empty for the PLATFORM scope")
    else:
        if not target:
            raise InvalidRequestError.missing("target")
        if len(target) > MAX_TARGET_LENGTH:
            raise InvalidRequestError.invalid("target", f"longer than {MAX_TARGET_LENGTH}")
        if target != target.strip() or not target.isprintable():
            # Stored keys must match request ids exactly; a stray space would
            # make a switch that silently never matches.
            raise InvalidRequestError.invalid("target", "must not contain whitespace at the ends or control characters")
    if not reason or not reason.strip():
        raise InvalidRequestError.missing("reason")
    if len(reason) > MAX_REASON_LENGTH:
        raise InvalidRequestError.invalid("reason", f"longer than {MAX_REASON_LENGTH}")
    if not changed_by or not changed_by.strip():
        raise InvalidRequestError.missing("changed_by")
