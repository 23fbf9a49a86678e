"""Agent registry: manifests from files, lifecycle status in SQLite (PRD §7, §8, §57, §63).

Each agent is declared by one manifest named after it, ``supervisor_svc/agents/<agent_id>.yaml``
(the format: :mod:`agentmesh.agent_manifest`).

Everything is validated when the registry starts; a bad file stops it with an
error naming the file, the field and the line. Status changes are persisted
per agent id (with history) and override the manifest's ``status`` on every
later start, so a kill switch (§63) survives restarts and upgrades. Status is
read from the database on every lookup, so DISABLED takes effect at once for
new tasks, also in other supervisor replicas sharing the database.

A specialisation is not an authority: nothing here grants an agent anything.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmesh import agent_manifest, database
from agentmesh.agent_manifest import AGENT_ID_PATTERN, AgentManifest, definition
from agentmesh.v1 import common_pb2
from agentmesh.vocabulary import LifecycleStatus
from supervisor_svc.errors import (
    AgentDependencyError,
    AgentManifestError,
    AgentNotActive,
    AgentNotFound,
    RequestInvalid,
)
from supervisor_svc.lifecycle import check_transition

__all__ = [
    "AGENT_ID_PATTERN",
    "AgentEntry",
    "AgentManifest",
    "AgentRegistry",
    "DependencyChecker",
    "LifecycleStatus",
    "StatusChange",
    "default_agents_dir",
    "load_manifests",
    "manifest_from_data",
    "parse_manifest",
]

DependencyChecker = Callable[[str], object]
"""Validates one declared dependency such as ``"training.getStatus@^2.0"``.

Returns anything when satisfied; raises when not. An exception's ``reason``
attribute, if any, is kept as :attr:`AgentDependencyError.cause_reason`. The
lead passes the capability registry's semver check here.
"""


def status_from_proto(value: int) -> LifecycleStatus:
    """A lifecycle status from its ``common_pb2`` number.

    Raises:
        RequestInvalid: ``STATUS_INVALID`` (field ``status``) for UNSPECIFIED or an unknown number.
    """
    try:
        return LifecycleStatus.from_proto(value)
    except ValueError:
        raise RequestInvalid("status must be a real lifecycle status", reason="STATUS_INVALID",
                             field="status") from None


@dataclass(frozen=True)
class AgentEntry:
    """A registered agent with its current lifecycle status."""

    manifest: AgentManifest
    status: LifecycleStatus
    status_reason: str
    """Why the status was last changed ("" when it is the manifest's)."""
    changed_by: str
    changed_at: str
    """RFC 3339 UTC time of the last change ("" when it is the manifest's)."""

    @property
    def agent_id(self) -> str:
        """The agent's id."""
        return self.manifest.agent_id

    @property
    def active(self) -> bool:
        """Only ACTIVE agents are discovered and receive new tasks."""
        return self.status is LifecycleStatus.ACTIVE

    def to_proto(self) -> common_pb2.AgentDefinition:
        """The ``AgentDefinition`` message, with the current status."""
        return definition(self.manifest, self.status)


@dataclass(frozen=True)
class StatusChange:
    """One recorded lifecycle change."""

    agent_id: str
    old_status: LifecycleStatus
    new_status: LifecycleStatus
    reason: str
    changed_by: str
    changed_at: str


def _change(row: sqlite3.Row) -> StatusChange:
    return StatusChange(row["agent_id"], LifecycleStatus(row["old_status"]), LifecycleStatus(row["new_status"]),
                        row["reason"], row["changed_by"], row["changed_at"])


def default_agents_dir() -> Path:
    """The manifests shipped with the supervisor."""
    return Path(__file__).with_name("agents")


def parse_manifest(path: Path) -> AgentManifest:
    """One manifest file (:func:`agentmesh.agent_manifest.parse_manifest`).

    Raises:
        AgentManifestError: naming the file, the field and the line.
    """
    return agent_manifest.parse_manifest(path, error=AgentManifestError)


def manifest_from_data(data: Any, source: str) -> AgentManifest:
    """A manifest given as plain data, e.g. from ``RegisterAgentVersion``
    (:func:`agentmesh.agent_manifest.manifest_from_data`).

    Raises:
        AgentManifestError: naming the field (``line`` is None).
    """
    return agent_manifest.manifest_from_data(data, source, error=AgentManifestError)


def load_manifests(agents_dir: Path) -> builtins.list[AgentManifest]:
    """Every manifest of a directory, references between them checked
    (:func:`agentmesh.agent_manifest.load_manifests`).

    Raises:
        AgentManifestError: a bad file, a duplicate agent id, an unknown delegation target,
            or a directory without manifests.
    """
    return agent_manifest.load_manifests(agents_dir, error=AgentManifestError)


# --- the registry ----------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_status (
    agent_id   TEXT PRIMARY KEY,
    status     TEXT NOT NULL,
    reason     TEXT NOT NULL,
    changed_by TEXT NOT NULL,
    changed_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS agent_status_history (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id   TEXT NOT NULL,
    old_status TEXT NOT NULL,
    new_status TEXT NOT NULL,
    reason     TEXT NOT NULL,
    changed_by TEXT NOT NULL,
    changed_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS agent_status_history_agent ON agent_status_history (agent_id, seq);
"""

_MAX_REASON_CHARS = 1000


def _utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def _format_time(moment: _dt.datetime) -> str:
    return moment.astimezone(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AgentRegistry:
    """The official list of agents (PRD §8), with persisted lifecycle status.

    Thread-safe: one SQLite connection guarded by a lock.
    """

    def __init__(
        self,
        db_path: str | Path,
        agents_dir: Path | None = None,
        *,
        dependency_checker: DependencyChecker | None = None,
        clock: Callable[[], _dt.datetime] = _utc_now,
    ) -> None:
        """Load and validate the manifests, open the status database, check dependencies.

        Args:
            db_path: SQLite file for status and history (created if missing); ``":memory:"`` for tests.
            agents_dir: Manifest directory; defaults to :func:`default_agents_dir`.
            dependency_checker: Validates each declared capability dependency; none means unchecked.
            clock: Source of the time recorded with status changes.

        Raises:
            AgentManifestError: a manifest is invalid.
            AgentDependencyError: a declared dependency is not satisfied (an incompatible
                release is blocked, PRD §59).
        """
        self._manifests = {m.agent_id: m for m in load_manifests(agents_dir or default_agents_dir())}
        self._checker = dependency_checker
        self._clock = clock
        self._active_versions: Callable[[], dict[str, AgentManifest]] | None = None
        self._lock = threading.Lock()
        self._db = database.sqlite_connection(db_path, timeout_s=5.0)
        self._db.row_factory = sqlite3.Row
        self._db.executescript(_SCHEMA)
        self._writes = 0
        """Transactions this connection committed (``PRAGMA data_version`` counts only the others')."""
        self._read: tuple[tuple[int, int], dict[str, sqlite3.Row], dict[str, builtins.list[sqlite3.Row]]] | None = None
        self.check_dependencies()

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> AgentRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads

    def _stored(self) -> tuple[dict[str, sqlite3.Row], dict[str, builtins.list[sqlite3.Row]]]:
        """The stored statuses and histories by agent, read again only when the file changed: every task
        dispatch asks for its agent, and the file changes only when an operator moves one."""
        with self._lock:
            stamp = (int(self._db.execute("PRAGMA data_version").fetchone()[0]), self._writes)
            if self._read is None or self._read[0] != stamp:
                statuses = {r["agent_id"]: r for r in self._db.execute("SELECT * FROM agent_status").fetchall()}
                histories: dict[str, builtins.list[sqlite3.Row]] = {}
                for r in self._db.execute("SELECT * FROM agent_status_history ORDER BY seq").fetchall():
                    histories.setdefault(r["agent_id"], []).append(r)
                self._read = (stamp, statuses, histories)
            return self._read[1], self._read[2]

    def _row(self, agent_id: str) -> sqlite3.Row | None:
        return self._stored()[0].get(agent_id)

    def _entry(self, manifest: AgentManifest, row: sqlite3.Row | None) -> AgentEntry:
        if row is None:
            return AgentEntry(manifest, manifest.status, "", "", "")
        return AgentEntry(manifest, LifecycleStatus(row["status"]), row["reason"], row["changed_by"], row["changed_at"])

    def attach_versions(self, active: Callable[[], dict[str, AgentManifest]]) -> None:
        """Serve registered versions: ``active()`` maps an agent id to its ACTIVE registered version's manifest.

        Such a version replaces the shipped manifest of its agent (which the promotion
        deprecated), or adds an agent that ships with no manifest (see
        :mod:`supervisor_svc.onboarding`).
        """
        self._active_versions = active

    def _overlay(self) -> dict[str, AgentManifest]:
        return self._active_versions() if self._active_versions is not None else {}

    def shipped(self) -> builtins.list[AgentEntry]:
        """The versions shipped as manifest files, with their status, ordered by agent id."""
        rows = self._stored()[0]
        return [self._entry(m, rows.get(k)) for k, m in sorted(self._manifests.items())]

    def shipped_histories(
        self, agent_id: str | None = None
    ) -> builtins.list[tuple[AgentEntry, builtins.list[StatusChange]]]:
        """:meth:`shipped` (of one agent), each with its :meth:`history`, from one read of the file: the
        router asks on every task dispatch."""
        rows, histories = self._stored()
        return [(self._entry(m, rows.get(k)), [_change(r) for r in histories.get(k, [])])
                for k, m in sorted(self._manifests.items()) if agent_id is None or k == agent_id]

    def list(self) -> builtins.list[AgentEntry]:
        """Every registered agent with its current status, ordered by agent id.

        An agent with an ACTIVE registered version is that version.
        """
        entries = {e.agent_id: e for e in self.shipped()}
        for agent_id, manifest in self._overlay().items():
            entries[agent_id] = AgentEntry(manifest, LifecycleStatus.ACTIVE, "", "", "")
        return [entries[k] for k in sorted(entries)]

    def get(self, agent_id: str) -> AgentEntry:
        """One agent with its current status (its ACTIVE registered version, if it has one).

        Raises:
            AgentNotFound: no such agent (field ``agent_id``).
        """
        registered = self._overlay().get(agent_id)
        if registered is not None:
            return AgentEntry(registered, LifecycleStatus.ACTIVE, "", "", "")
        manifest = self._manifests.get(agent_id)
        if manifest is None:
            raise AgentNotFound(f"no agent {agent_id!r} is registered", field="agent_id")
        return self._entry(manifest, self._row(agent_id))

    def ensure_active(self, agent_id: str) -> AgentEntry:
        """The agent, if it may take a new task now; call right before dispatching one.

        Raises:
            AgentNotFound: no such agent.
            AgentNotActive: ``AGENT_DISABLED``, ``AGENT_RETIRED`` or ``AGENT_NOT_ACTIVE``.
        """
        entry = self.get(agent_id)
        if entry.active:
            return entry
        reason = {
            LifecycleStatus.DISABLED: "AGENT_DISABLED",
            LifecycleStatus.RETIRED: "AGENT_RETIRED",
        }.get(entry.status, "AGENT_NOT_ACTIVE")
        raise AgentNotActive(
            f"agent {agent_id!r} is {entry.status.value} and takes no new tasks",
            agent_id=agent_id, status=entry.status.value, reason=reason,
        )

    def history(self, agent_id: str) -> builtins.list[StatusChange]:
        """Every recorded status change of an agent, oldest first.

        Raises:
            AgentNotFound: no such agent.
        """
        self.get(agent_id)
        return [_change(r) for r in self._stored()[1].get(agent_id, [])]

    # -- dependencies

    def _check_agent(self, manifest: AgentManifest) -> None:
        if self._checker is None:
            return
        for i, dep in enumerate(manifest.dependencies.capabilities):
            try:
                self._checker(dep)
            except Exception as exc:  # any failure of the checker means "not satisfied" (fail closed)
                cause = getattr(exc, "reason", None)
                raise AgentDependencyError(
                    f"agent {manifest.agent_id!r} ({manifest.source}) declares {dep!r}, which is not "
                    f"satisfied: {getattr(exc, 'message', None) or exc}",
                    agent_id=manifest.agent_id, dependency=dep, file=manifest.source,
                    field=f"dependencies.capabilities[{i}]",
                    cause_reason=cause if isinstance(cause, str) else None,
                ) from exc

    def check_dependencies(self) -> None:
        """Check every agent's declared capability dependencies with the checker.

        Raises:
            AgentDependencyError: the first unsatisfied dependency, naming agent, file and field.
        """
        for manifest in self._manifests.values():
            self._check_agent(manifest)

    # -- writes

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            self._writes += 1

    def set_status(self, agent_id: str, status: LifecycleStatus | str, reason: str, by: str) -> AgentEntry:
        """Change an agent's lifecycle status, persisted with history (operators only — the caller checks).

        Setting the current status again changes nothing and records nothing.
        Activating re-checks the agent's dependencies, so an incompatible agent
        cannot be switched on.

        Raises:
            AgentNotFound: no such agent.
            RequestInvalid: ``STATUS_INVALID`` (field ``status``), ``REASON_REQUIRED`` /
                ``REASON_TOO_LONG`` (field ``reason``), ``ACTOR_REQUIRED`` (field ``by``).
            TransitionNotAllowed: not an edge of the lifecycle (:mod:`supervisor_svc.lifecycle`), e.g.
                DRAFT -> ACTIVE or leaving RETIRED; ``field`` is ``status``.
            AgentDependencyError: activating an agent whose dependencies are unmet.
        """
        try:
            new = LifecycleStatus(status)
        except ValueError:
            raise RequestInvalid(
                f"{status!r} is not a lifecycle status", reason="STATUS_INVALID", field="status"
            ) from None
        reason = reason.strip()
        if not reason:
            raise RequestInvalid("a reason is required for a status change", reason="REASON_REQUIRED", field="reason")
        if len(reason) > _MAX_REASON_CHARS:
            raise RequestInvalid(
                f"the reason is longer than {_MAX_REASON_CHARS} characters", reason="REASON_TOO_LONG", field="reason"
            )
        if not by.strip():
            raise RequestInvalid("the acting identity is required", reason="ACTOR_REQUIRED", field="by")
        manifest = self._manifests.get(agent_id)
        if manifest is None:
            raise AgentNotFound(f"no agent {agent_id!r} is shipped with a manifest", field="agent_id")
        if new is LifecycleStatus.ACTIVE:
            self._check_agent(manifest)
        with self._transaction() as db:
            row = db.execute("SELECT status FROM agent_status WHERE agent_id = ?", (agent_id,)).fetchone()
            old = LifecycleStatus(row["status"]) if row is not None else manifest.status
            if old != new:
                came = db.execute(
                    "SELECT old_status FROM agent_status_history WHERE agent_id = ? AND new_status = 'DISABLED' "
                    "ORDER BY seq DESC LIMIT 1", (agent_id,)).fetchone()
                check_transition(old, new, field="status", what=f"agent {agent_id!r}",
                                 disabled_from=LifecycleStatus(came["old_status"]) if came is not None else None)
                at = _format_time(self._clock())
                db.execute(
                    "INSERT INTO agent_status (agent_id, status, reason, changed_by, changed_at) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT(agent_id) DO UPDATE SET status = excluded.status, "
                    "reason = excluded.reason, changed_by = excluded.changed_by, changed_at = excluded.changed_at",
                    (agent_id, new.value, reason, by, at),
                )
                db.execute(
                    "INSERT INTO agent_status_history (agent_id, old_status, new_status, reason, changed_by, "
                    "changed_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (agent_id, old.value, new.value, reason, by, at),
                )
        return self._entry(manifest, self._row(agent_id))
