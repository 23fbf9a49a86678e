"""Internal systems of record: permits, workers (HR), occupational health, requirements, risks, checklists.

Everything lives in one SQLite file under the mesh home and every row carries
its ``tenant_id``. Isolation is by construction: the only read/write API is a
:class:`TenantScope`, obtained from :meth:`InternalStore.scope`, whose private
``_select`` / ``_update`` helpers prepend ``tenant_id = ?`` (bound to the
scope's tenant) to every ``WHERE``. No method takes a tenant argument, so no
call site can ask for another tenant's rows, and a record of another tenant is
indistinguishable from one that does not exist.

:class:`InternalBackend` implements the internal capabilities on top: each
handler takes an :class:`~capability_svc.invocation.InvocationContext` and the
validated input and returns the output document (with provenance, authority
OFFICIAL_RECORD). Mutations also return the record as it was before the
write (:class:`~capability_svc.invocation.PriorState`), have a verifier that
reads the effect back, and a compensator that puts the previous state back
when that read-back fails (PRD §73) and reads it back in turn.
"""

from __future__ import annotations

import datetime as _dt
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from capability_svc.errors import CapabilityNotFound, PreconditionFailed, not_found
from capability_svc.invocation import (
    CompensationResult,
    Execution,
    InvocationContext,
    PriorState,
    VerificationResult,
)
from capability_svc.provenance import Authority, Provenance, format_timestamp
from capability_svc.world import SIMULATED_FAILURES, LoadSummary, SimulatedFailure, World

__all__ = [
    "Clock",
    "InternalBackend",
    "InternalStore",
    "TenantScope",
    "risk_level",
]

Clock = Callable[[], _dt.datetime]
"""Returns the current time, timezone-aware. Injected so tests fix 'today'."""

_SCHEMA_VERSION = 3
_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    tenant_id TEXT PRIMARY KEY,
    name      TEXT NOT NULL,
    loaded_from TEXT NOT NULL,
    loaded_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS workers (
    tenant_id     TEXT NOT NULL REFERENCES tenants (tenant_id),
    worker_id     TEXT NOT NULL,
    name          TEXT NOT NULL,
    job_title     TEXT NOT NULL,
    company       TEXT NOT NULL,
    medical_notes TEXT,
    employment_status TEXT NOT NULL DEFAULT 'ACTIVE',
    PRIMARY KEY (tenant_id, worker_id)
);
CREATE TABLE IF NOT EXISTS medical_records (
    tenant_id      TEXT NOT NULL,
    worker_id      TEXT NOT NULL,
    exam_date      TEXT NOT NULL,
    valid_until    TEXT NOT NULL,
    fit_for        TEXT NOT NULL,
    unfit_for      TEXT NOT NULL,
    diagnosis      TEXT,
    clinical_notes TEXT,
    PRIMARY KEY (tenant_id, worker_id),
    FOREIGN KEY (tenant_id, worker_id) REFERENCES workers (tenant_id, worker_id)
);
CREATE TABLE IF NOT EXISTS permits (
    tenant_id      TEXT NOT NULL REFERENCES tenants (tenant_id),
    permit_id      TEXT NOT NULL,
    title          TEXT NOT NULL,
    description    TEXT NOT NULL,
    site           TEXT NOT NULL,
    work_type      TEXT NOT NULL,
    status         TEXT NOT NULL,
    valid_from     TEXT NOT NULL,
    valid_until    TEXT NOT NULL,
    requested_by   TEXT NOT NULL,
    released_at    TEXT,
    released_by    TEXT,
    release_reason TEXT,
    updated_at     TEXT,
    updated_by     TEXT,
    simulate_verification_failure TEXT
        CHECK (simulate_verification_failure IN ('lost_write', 'partial_write')),
    PRIMARY KEY (tenant_id, permit_id)
);
CREATE TABLE IF NOT EXISTS permit_workers (
    tenant_id TEXT NOT NULL,
    permit_id TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    position  INTEGER NOT NULL,
    role      TEXT NOT NULL,
    PRIMARY KEY (tenant_id, permit_id, worker_id),
    FOREIGN KEY (tenant_id, permit_id) REFERENCES permits (tenant_id, permit_id),
    FOREIGN KEY (tenant_id, worker_id) REFERENCES workers (tenant_id, worker_id)
);
CREATE TABLE IF NOT EXISTS permit_added_workers (
    tenant_id TEXT NOT NULL,
    permit_id TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    position  INTEGER NOT NULL,
    role      TEXT NOT NULL,
    added_on  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, permit_id, worker_id),
    FOREIGN KEY (tenant_id, permit_id) REFERENCES permits (tenant_id, permit_id),
    FOREIGN KEY (tenant_id, worker_id) REFERENCES workers (tenant_id, worker_id)
);
CREATE TABLE IF NOT EXISTS permit_requirements (
    tenant_id     TEXT NOT NULL,
    permit_id     TEXT NOT NULL,
    training_code TEXT NOT NULL,
    position      INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, permit_id, training_code),
    FOREIGN KEY (tenant_id, permit_id) REFERENCES permits (tenant_id, permit_id)
);
CREATE TABLE IF NOT EXISTS risks (
    tenant_id  TEXT NOT NULL,
    risk_id    TEXT NOT NULL,
    permit_id  TEXT NOT NULL,
    position   INTEGER NOT NULL,
    hazard     TEXT NOT NULL,
    severity   INTEGER NOT NULL,
    likelihood INTEGER NOT NULL,
    controls   TEXT NOT NULL,
    PRIMARY KEY (tenant_id, risk_id),
    FOREIGN KEY (tenant_id, permit_id) REFERENCES permits (tenant_id, permit_id)
);
CREATE TABLE IF NOT EXISTS checklists (
    tenant_id    TEXT NOT NULL,
    checklist_id TEXT NOT NULL,
    permit_id    TEXT NOT NULL,
    position     INTEGER NOT NULL,
    title        TEXT NOT NULL,
    PRIMARY KEY (tenant_id, checklist_id),
    FOREIGN KEY (tenant_id, permit_id) REFERENCES permits (tenant_id, permit_id)
);
CREATE TABLE IF NOT EXISTS checklist_items (
    tenant_id    TEXT NOT NULL,
    checklist_id TEXT NOT NULL,
    item_id      TEXT NOT NULL,
    position     INTEGER NOT NULL,
    requirement  TEXT NOT NULL,
    regulation   TEXT,
    status       TEXT NOT NULL,
    subject      TEXT,
    note         TEXT,
    PRIMARY KEY (tenant_id, checklist_id, item_id),
    FOREIGN KEY (tenant_id, checklist_id) REFERENCES checklists (tenant_id, checklist_id)
);
"""

# Child tables first: deleting a tenant's rows must respect foreign keys.
_TENANT_TABLES = (
    "checklist_items",
    "checklists",
    "risks",
    "permit_requirements",
    "permit_added_workers",
    "permit_workers",
    "permits",
    "medical_records",
    "workers",
    "tenants",
)


# Columns a mutation writes, so the ones its compensation may put back.
_RELEASE_COLUMNS = ("status", "released_at", "released_by", "release_reason", "updated_at", "updated_by")
_VALIDITY_COLUMNS = ("valid_until", "updated_at", "updated_by")
_RESTORABLE_PERMIT_COLUMNS = frozenset(_RELEASE_COLUMNS + _VALIDITY_COLUMNS)


def _utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a file of schema 1 (``simulate_lost_write`` flag) to schema 2 (a failure mode), and one of
    schema 2 to 3 (workers' employment status; the medical records table is created by the schema)."""
    worker_columns = {r["name"] for r in conn.execute("PRAGMA table_info(workers)")}
    if "employment_status" not in worker_columns:
        conn.execute("ALTER TABLE workers ADD COLUMN employment_status TEXT NOT NULL DEFAULT 'ACTIVE'")
    columns = {r["name"] for r in conn.execute("PRAGMA table_info(permits)")}
    if "simulate_verification_failure" in columns:
        return
    conn.execute(
        "ALTER TABLE permits ADD COLUMN simulate_verification_failure TEXT"
        " CHECK (simulate_verification_failure IN ('lost_write', 'partial_write'))"
    )
    if "simulate_lost_write" in columns:
        # The old column stays (SQLite keeps it, with its default) but is no longer read.
        conn.execute(
            "UPDATE permits SET simulate_verification_failure = 'lost_write'"
            " WHERE simulate_lost_write <> 0"
        )


class InternalStore:
    """The SQLite file of the internal systems. Thread-safe (a connection per thread, kept)."""

    def __init__(self, path: Path, *, clock: Clock = _utc_now):
        """Open (creating if needed) the database at ``path``.

        Args:
            path: SQLite file, normally ``<mesh home>/data/internal.db``.
            clock: Current time; tests pass a fixed one (the demo's today is 2026-11-30).
        """
        self.path = path
        self.clock = clock
        self._local = threading.local()
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            _migrate(conn)
            conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection (opened on its first use, then kept: no connect per query)."""
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=5.0)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA foreign_keys = ON")
            local.conn, local.depth = conn, 0
        local.depth += 1
        try:
            yield conn
        finally:
            local.depth -= 1
            if local.depth == 0 and conn.in_transaction:
                conn.execute("ROLLBACK")  # the outermost use never leaves a transaction open

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as conn:
            # IMMEDIATE takes the write lock up front, so a read-check-write
            # sequence (e.g. release only if PENDING_RELEASE) cannot interleave.
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    _RECORD_TABLES: Final = {"permit": ("permits", "permit_id"), "worker": ("workers", "worker_id")}

    def holds(self, resource_type: str) -> bool:
        """Whether records of this type live here (``permit``, ``worker``), so :meth:`owner_tenants` knows them."""
        return resource_type in self._RECORD_TABLES

    def owner_tenants(self, resource_type: str, resource_id: str) -> list[str]:
        """Which tenants hold a record with this id; for the policy's tenant-isolation check only.

        This is the one deliberately unscoped read: it returns tenant ids, never
        record data, so the policy engine can see (and audit) a cross-tenant
        attempt that the tenant-scoped reads would only report as "not found".
        An empty list for a type this store does not hold (see :meth:`holds`).
        """
        table = self._RECORD_TABLES.get(resource_type)
        if table is None:
            return []
        with self._connect() as conn:
            rows = conn.execute(
                f"SELECT tenant_id FROM {table[0]} WHERE {table[1]} = ? ORDER BY tenant_id", (resource_id,)
            ).fetchall()
        return [r["tenant_id"] for r in rows]

    def scope(self, tenant_id: str) -> TenantScope:
        """The only way to read or change records: everything confined to ``tenant_id``."""
        return TenantScope(self, tenant_id)

    def tenants(self) -> list[str]:
        """Ids of the loaded tenants (operator view, not tenant data)."""
        with self._connect() as conn:
            rows = conn.execute("SELECT tenant_id FROM tenants ORDER BY tenant_id").fetchall()
        return [r["tenant_id"] for r in rows]

    def replace_world(self, world: World, *, source: str) -> LoadSummary:
        """Replace every tenant named in ``world`` with its content, in one transaction.

        ``world`` must come from :func:`capability_svc.world.parse_world`, which
        has already checked ids and references; a database error still rolls
        everything back.
        """
        loaded_at = format_timestamp(self.clock())
        counts = {"workers": 0, "permits": 0, "risks": 0, "checklists": 0, "lms": 0}
        with self._transaction() as conn:
            for tenant in world.tenants:
                for table in _TENANT_TABLES:
                    conn.execute(f"DELETE FROM {table} WHERE tenant_id = ?", (tenant.id,))
                t = tenant.id
                conn.execute(
                    "INSERT INTO tenants (tenant_id, name, loaded_from, loaded_at)"
                    " VALUES (?, ?, ?, ?)",
                    (t, tenant.name, source, loaded_at),
                )
                conn.executemany(
                    "INSERT INTO workers"
                    " (tenant_id, worker_id, name, job_title, company, medical_notes, employment_status)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (t, w.id, w.name, w.job_title, w.company, w.medical_notes, w.employment_status)
                        for w in tenant.workers
                    ],
                )
                conn.executemany(
                    "INSERT INTO medical_records (tenant_id, worker_id, exam_date, valid_until, fit_for,"
                    " unfit_for, diagnosis, clinical_notes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (t, w.id, w.medical.exam_date.isoformat(), w.medical.valid_until.isoformat(),
                         json.dumps(w.medical.fit_for), json.dumps(w.medical.unfit_for), w.medical.diagnosis,
                         w.medical.clinical_notes)
                        for w in tenant.workers if w.medical is not None
                    ],
                )
                for p in tenant.permits:
                    conn.execute(
                        "INSERT INTO permits (tenant_id, permit_id, title, description, site,"
                        " work_type, status, valid_from, valid_until, requested_by, released_by,"
                        " simulate_verification_failure) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            t,
                            p.id,
                            p.title,
                            p.description,
                            p.site,
                            p.work_type,
                            p.status,
                            p.valid_from.isoformat(),
                            p.valid_until.isoformat(),
                            p.requested_by,
                            p.released_by,
                            p.simulate.verification_failure,
                        ),
                    )
                    conn.executemany(
                        "INSERT INTO permit_workers"
                        " (tenant_id, permit_id, worker_id, position, role) VALUES (?, ?, ?, ?, ?)",
                        [(t, p.id, w.id, i, w.role) for i, w in enumerate(p.workers)],
                    )
                    conn.executemany(
                        "INSERT INTO permit_added_workers"
                        " (tenant_id, permit_id, worker_id, position, role, added_on) VALUES (?, ?, ?, ?, ?, ?)",
                        [(t, p.id, w.id, i, w.role, w.added_on.isoformat()) for i, w in enumerate(p.added_workers)],
                    )
                    conn.executemany(
                        "INSERT INTO permit_requirements"
                        " (tenant_id, permit_id, training_code, position) VALUES (?, ?, ?, ?)",
                        [(t, p.id, code, i) for i, code in enumerate(p.required_trainings)],
                    )
                    conn.executemany(
                        "INSERT INTO risks (tenant_id, risk_id, permit_id, position, hazard,"
                        " severity, likelihood, controls) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [
                            (
                                t,
                                r.id,
                                p.id,
                                i,
                                r.hazard,
                                r.severity,
                                r.likelihood,
                                json.dumps([c.model_dump() for c in r.controls]),
                            )
                            for i, r in enumerate(p.risks)
                        ],
                    )
                    for i, c in enumerate(p.checklists):
                        conn.execute(
                            "INSERT INTO checklists"
                            " (tenant_id, checklist_id, permit_id, position, title)"
                            " VALUES (?, ?, ?, ?, ?)",
                            (t, c.id, p.id, i, c.title),
                        )
                        conn.executemany(
                            "INSERT INTO checklist_items (tenant_id, checklist_id, item_id,"
                            " position, requirement, regulation, status, subject, note)"
                            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            [
                                (
                                    t,
                                    c.id,
                                    it.id,
                                    j,
                                    it.requirement,
                                    it.regulation,
                                    it.status,
                                    it.subject,
                                    it.note,
                                )
                                for j, it in enumerate(c.items)
                            ],
                        )
                    counts["risks"] += len(p.risks)
                    counts["checklists"] += len(p.checklists)
                counts["workers"] += len(tenant.workers)
                counts["permits"] += len(tenant.permits)
                counts["lms"] += len(tenant.lms.workers)
        return LoadSummary(
            source=source,
            tenants=tuple(t.id for t in world.tenants),
            workers=counts["workers"],
            permits=counts["permits"],
            risks=counts["risks"],
            checklists=counts["checklists"],
            lms_workers=counts["lms"],
        )


# --- records ------------------------------------------------------------------


@dataclass(frozen=True)
class PermitRecord:
    """A permit row of one tenant."""

    permit_id: str
    title: str
    description: str
    site: str
    work_type: str
    status: str
    valid_from: str
    valid_until: str
    requested_by: str
    released_at: str | None
    released_by: str | None
    release_reason: str | None
    updated_at: str | None
    updated_by: str | None
    simulate_failure: SimulatedFailure | None
    """Test hook: how mutations of this permit fail verification, ``None`` normally."""


@dataclass(frozen=True)
class WorkerRecord:
    """A worker row of one tenant; ``medical_notes`` is sensitive."""

    worker_id: str
    name: str
    job_title: str
    company: str
    medical_notes: str | None
    employment_status: str = "ACTIVE"


@dataclass(frozen=True)
class MedicalEligibility:
    """What the occupational-health record says a worker may do. Deliberately without the diagnosis or the
    clinical notes: :meth:`TenantScope.medical_eligibility` never reads them."""

    exam_date: str
    valid_until: str
    fit_for: tuple[str, ...]
    unfit_for: tuple[str, ...]


@dataclass(frozen=True)
class AssignedWorker:
    """A worker on a permit, with the role they hold on it."""

    worker: WorkerRecord
    permit_role: str


def _permit(row: sqlite3.Row) -> PermitRecord:
    return PermitRecord(
        permit_id=row["permit_id"],
        title=row["title"],
        description=row["description"],
        site=row["site"],
        work_type=row["work_type"],
        status=row["status"],
        valid_from=row["valid_from"],
        valid_until=row["valid_until"],
        requested_by=row["requested_by"],
        released_at=row["released_at"],
        released_by=row["released_by"],
        release_reason=row["release_reason"],
        updated_at=row["updated_at"],
        updated_by=row["updated_by"],
        simulate_failure=row["simulate_verification_failure"],
    )


def _worker(row: sqlite3.Row) -> WorkerRecord:
    return WorkerRecord(
        worker_id=row["worker_id"],
        name=row["name"],
        job_title=row["job_title"],
        company=row["company"],
        medical_notes=row["medical_notes"],
        employment_status=row["employment_status"],
    )


class TenantScope:
    """Read and change the records of exactly one tenant.

    Every SQL statement is built by :meth:`_select` or :meth:`_update`, which
    put ``tenant_id = ?`` first in the ``WHERE`` clause and bind it to this
    scope's tenant; table and column names come only from constants in this
    module. A missing record and another tenant's record look the same.
    """

    def __init__(self, store: InternalStore, tenant_id: str):
        """Use :meth:`InternalStore.scope`."""
        if not tenant_id:
            # An empty tenant would match no rows, but it is always a caller
            # bug (an unverified context), so refuse it loudly.
            raise ValueError("a tenant scope needs a tenant id")
        self._store = store
        self._tenant = tenant_id

    @property
    def tenant_id(self) -> str:
        """The tenant this scope is confined to."""
        return self._tenant

    def _select(
        self,
        conn: sqlite3.Connection,
        table: str,
        where: str = "1 = 1",
        params: Sequence[Any] = (),
        order_by: str = "",
        limit: int | None = None,
    ) -> list[sqlite3.Row]:
        if table not in _TENANT_TABLES:
            raise ValueError(f"unknown table {table!r}")
        sql = f"SELECT * FROM {table} WHERE tenant_id = ? AND ({where})"
        if order_by:
            sql += f" ORDER BY {order_by}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return conn.execute(sql, (self._tenant, *params)).fetchall()

    def _update(
        self,
        conn: sqlite3.Connection,
        table: str,
        assignments: Mapping[str, Any],
        where: str,
        params: Sequence[Any],
    ) -> int:
        if table not in _TENANT_TABLES:
            raise ValueError(f"unknown table {table!r}")
        columns = ", ".join(f"{name} = ?" for name in assignments)
        sql = f"UPDATE {table} SET {columns} WHERE tenant_id = ? AND ({where})"
        cursor = conn.execute(sql, (*assignments.values(), self._tenant, *params))
        return int(cursor.rowcount)

    # -- reads --

    def get_permit(self, permit_id: str) -> PermitRecord | None:
        """The permit, or ``None`` if this tenant has no such permit."""
        with self._store._connect() as conn:
            rows = self._select(conn, "permits", "permit_id = ?", (permit_id,))
        return _permit(rows[0]) if rows else None

    def require_permit(self, permit_id: str) -> PermitRecord:
        """The permit, or :class:`ResourceNotFound` (same for other tenants' permits)."""
        permit = self.get_permit(permit_id)
        if permit is None:
            raise not_found(permit_id)
        return permit

    def permit_workers(self, permit_id: str) -> list[AssignedWorker]:
        """Workers assigned to the permit, in file order."""
        with self._store._connect() as conn:
            links = self._select(
                conn, "permit_workers", "permit_id = ?", (permit_id,), order_by="position"
            )
            out: list[AssignedWorker] = []
            for link in links:
                rows = self._select(conn, "workers", "worker_id = ?", (link["worker_id"],))
                if rows:
                    out.append(AssignedWorker(_worker(rows[0]), link["role"]))
        return out

    def permit_added_workers(self, permit_id: str) -> list[dict[str, str]]:
        """Workers added to the permit after its crew was planned: ``{worker_id, permit_role, added_on}``."""
        with self._store._connect() as conn:
            rows = self._select(
                conn, "permit_added_workers", "permit_id = ?", (permit_id,), order_by="position"
            )
        return [{"worker_id": r["worker_id"], "permit_role": r["role"], "added_on": r["added_on"]} for r in rows]

    def required_trainings(self, permit_id: str) -> list[str]:
        """Training codes the permit requires, in file order."""
        with self._store._connect() as conn:
            rows = self._select(
                conn, "permit_requirements", "permit_id = ?", (permit_id,), order_by="position"
            )
        return [r["training_code"] for r in rows]

    def get_worker(self, worker_id: str) -> WorkerRecord | None:
        """The worker, or ``None`` if this tenant has no such worker."""
        with self._store._connect() as conn:
            rows = self._select(conn, "workers", "worker_id = ?", (worker_id,))
        return _worker(rows[0]) if rows else None

    def medical_eligibility(self, worker_id: str) -> MedicalEligibility | None:
        """The worker's exam validity and the work types it covers; None without a record.

        Only those fields leave this method: the diagnosis and clinical notes stay in the store.
        """
        with self._store._connect() as conn:
            rows = self._select(conn, "medical_records", "worker_id = ?", (worker_id,))
        if not rows:
            return None
        row = rows[0]
        return MedicalEligibility(row["exam_date"], row["valid_until"], tuple(json.loads(row["fit_for"])),
                                  tuple(json.loads(row["unfit_for"])))

    def permits_of_worker(self, worker_id: str) -> list[str]:
        """Ids of the permits the worker is assigned to."""
        with self._store._connect() as conn:
            rows = self._select(
                conn, "permit_workers", "worker_id = ?", (worker_id,), order_by="permit_id"
            )
        return [r["permit_id"] for r in rows]

    def search_permits(
        self,
        *,
        status: str | None = None,
        site: str | None = None,
        worker_id: str | None = None,
        valid_on: str | None = None,
        limit: int = 20,
    ) -> tuple[list[PermitRecord], bool]:
        """Permits matching every given filter, by id; and whether more exist past ``limit``."""
        clauses: list[str] = []
        params: list[Any] = []
        if status is not None:
            clauses.append("status = ?")
            params.append(status)
        if site is not None:
            clauses.append("site = ?")
            params.append(site)
        if valid_on is not None:
            clauses.append("valid_from <= ? AND valid_until >= ?")
            params += [valid_on, valid_on]
        with self._store._connect() as conn:
            if worker_id is not None:
                # Two scoped queries rather than a sub-select, so the tenant
                # condition never has to be repeated by hand inside SQL text.
                ids = [
                    r["permit_id"]
                    for r in self._select(conn, "permit_workers", "worker_id = ?", (worker_id,))
                ]
                if not ids:
                    return [], False
                clauses.append(f"permit_id IN ({', '.join('?' for _ in ids)})")
                params += ids
            rows = self._select(
                conn,
                "permits",
                " AND ".join(clauses) or "1 = 1",
                params,
                order_by="permit_id",
                limit=limit + 1,
            )
        return [_permit(r) for r in rows[:limit]], len(rows) > limit

    def risks(self, permit_id: str) -> list[sqlite3.Row]:
        """Risk register rows of the permit, in file order."""
        with self._store._connect() as conn:
            return self._select(conn, "risks", "permit_id = ?", (permit_id,), order_by="position")

    def checklists(self, permit_id: str) -> list[tuple[sqlite3.Row, list[sqlite3.Row]]]:
        """Checklists of the permit with their items, in file order."""
        with self._store._connect() as conn:
            lists = self._select(
                conn, "checklists", "permit_id = ?", (permit_id,), order_by="position"
            )
            return [
                (
                    cl,
                    self._select(
                        conn,
                        "checklist_items",
                        "checklist_id = ?",
                        (cl["checklist_id"],),
                        order_by="position",
                    ),
                )
                for cl in lists
            ]

    # -- writes --

    def release_permit(
        self, permit_id: str, *, actor: str, reason: str, today: _dt.date, at: str
    ) -> tuple[PermitRecord, bool]:
        """Move a PENDING_RELEASE permit inside its validity window to RELEASED.

        Returns:
            The permit as it was before, and whether the write was applied in
            full (``False`` only for a permit flagged to simulate a failure:
            ``lost_write`` applies nothing, ``partial_write`` sets the status
            and reason but loses ``released_at`` / ``released_by``).

        Raises:
            ResourceNotFound: no such permit in this tenant.
            PreconditionFailed: ``PERMIT_ALREADY_RELEASED``, ``PERMIT_NOT_RELEASABLE``,
                ``PERMIT_EXPIRED`` or ``PERMIT_NOT_YET_VALID``.
        """
        with self._store._transaction() as conn:
            rows = self._select(conn, "permits", "permit_id = ?", (permit_id,))
            if not rows:
                raise not_found(permit_id)
            before = _permit(rows[0])
            if before.status == "RELEASED":
                raise PreconditionFailed(
                    f"permit {permit_id!r} is already released",
                    reason="PERMIT_ALREADY_RELEASED",
                    field="permit_id",
                )
            if before.status != "PENDING_RELEASE":
                raise PreconditionFailed(
                    f"permit {permit_id!r} is {before.status}; only PENDING_RELEASE can be released",
                    reason="PERMIT_NOT_RELEASABLE",
                    field="permit_id",
                )
            day = today.isoformat()
            if before.valid_until < day:
                raise PreconditionFailed(
                    f"permit {permit_id!r} expired on {before.valid_until}",
                    reason="PERMIT_EXPIRED",
                    field="permit_id",
                )
            if before.valid_from > day:
                raise PreconditionFailed(
                    f"permit {permit_id!r} is not valid before {before.valid_from}",
                    reason="PERMIT_NOT_YET_VALID",
                    field="permit_id",
                )
            mode = before.simulate_failure
            if mode == "lost_write":
                return before, False
            changes: dict[str, Any] = {
                "status": "RELEASED",
                "released_at": at,
                "released_by": actor,
                "release_reason": reason,
                "updated_at": at,
                "updated_by": actor,
            }
            if mode == "partial_write":
                # Half the write lands: the status flips, who and when are lost.
                del changes["released_at"], changes["released_by"]
            self._update(
                conn, "permits", changes, "permit_id = ? AND status = 'PENDING_RELEASE'", (permit_id,)
            )
        return before, mode is None

    def update_validity(
        self, permit_id: str, *, valid_until: str, actor: str, today: _dt.date, at: str
    ) -> tuple[PermitRecord, bool]:
        """Set a permit's ``valid_until``.

        Returns:
            The permit as it was before, and whether the write was applied in
            full (``lost_write`` applies nothing; ``partial_write`` stamps
            ``updated_at`` / ``updated_by`` but loses ``valid_until``).

        Raises:
            ResourceNotFound: no such permit in this tenant.
            PreconditionFailed: ``PERMIT_CLOSED``, ``VALIDITY_BEFORE_START`` or
                ``VALIDITY_IN_PAST``.
        """
        with self._store._transaction() as conn:
            rows = self._select(conn, "permits", "permit_id = ?", (permit_id,))
            if not rows:
                raise not_found(permit_id)
            before = _permit(rows[0])
            if before.status in ("CLOSED", "CANCELLED"):
                raise PreconditionFailed(
                    f"permit {permit_id!r} is {before.status}; its validity cannot change",
                    reason="PERMIT_CLOSED",
                    field="permit_id",
                )
            if valid_until < before.valid_from:
                raise PreconditionFailed(
                    f"valid_until {valid_until} is before valid_from {before.valid_from}",
                    reason="VALIDITY_BEFORE_START",
                    field="valid_until",
                )
            if valid_until < today.isoformat():
                raise PreconditionFailed(
                    f"valid_until {valid_until} is in the past",
                    reason="VALIDITY_IN_PAST",
                    field="valid_until",
                )
            mode = before.simulate_failure
            if mode == "lost_write":
                return before, False
            changes: dict[str, Any] = {"valid_until": valid_until, "updated_at": at, "updated_by": actor}
            if mode == "partial_write":
                # The change is stamped as made, but the new date itself is lost.
                del changes["valid_until"]
            self._update(conn, "permits", changes, "permit_id = ?", (permit_id,))
        return before, mode is None

    def restore_permit(
        self, permit_id: str, before: Mapping[str, Any], written: Mapping[str, Any]
    ) -> str:
        """Put a permit's fields back to ``before``, undoing what one call ``written``.

        Conditional: the permit is changed only if every field still holds
        either its value from before or the value this call wrote (the write
        landed wholly, in part, or not at all). A third value means another
        write changed the permit since; that is not this call's to undo, so
        nothing is touched.

        Args:
            permit_id: The permit.
            before: Column → value before the call (columns from this module only).
            written: Column → value the call wrote.

        Returns:
            ``RESTORED``, ``ALREADY_IN_PREVIOUS_STATE`` (nothing written),
            ``CHANGED_BY_ANOTHER_WRITE`` or ``RESOURCE_MISSING``.
        """
        columns = list(before)
        unknown = set(columns) - _RESTORABLE_PERMIT_COLUMNS
        if unknown:
            raise ValueError(f"not restorable: {sorted(unknown)}")
        with self._store._transaction() as conn:
            rows = self._select(conn, "permits", "permit_id = ?", (permit_id,))
            if not rows:
                return "RESOURCE_MISSING"
            current = {c: rows[0][c] for c in columns}
            if current == dict(before):
                return "ALREADY_IN_PREVIOUS_STATE"
            if any(current[c] not in (before[c], written.get(c, before[c])) for c in columns):
                return "CHANGED_BY_ANOTHER_WRITE"
            # The condition repeats the state just read: the update lands on
            # exactly that state or not at all.
            same = " AND ".join(f"{c} IS ?" for c in columns)
            changed = self._update(
                conn, "permits", dict(before), f"permit_id = ? AND {same}", (permit_id, *current.values())
            )
        return "RESTORED" if changed else "CHANGED_BY_ANOTHER_WRITE"

    def set_simulated_verification_failure(
        self, permit_id: str, enabled: bool | SimulatedFailure
    ) -> None:
        """Test hook: make mutations of ``permit_id`` fail their read-back verification.

        Args:
            permit_id: The permit.
            enabled: As ``simulate.verification_failure`` in a world file:
                ``False`` (off), ``True`` or ``"lost_write"`` (acknowledged, not
                applied), ``"partial_write"`` (applied in part).

        Raises:
            ResourceNotFound: no such permit in this tenant.
            ValueError: an unknown mode.
        """
        mode: SimulatedFailure | None = "lost_write" if enabled is True else (enabled or None)
        if mode is not None and mode not in SIMULATED_FAILURES:
            raise ValueError(f"unknown simulated failure {enabled!r}; one of {SIMULATED_FAILURES}")
        with self._store._transaction() as conn:
            changed = self._update(
                conn,
                "permits",
                {"simulate_verification_failure": mode},
                "permit_id = ?",
                (permit_id,),
            )
        if changed == 0:
            raise not_found(permit_id)


# --- capability handlers -------------------------------------------------------


def risk_level(score: int) -> str:
    """Level of a severity x likelihood score: LOW <=4, MEDIUM <=9, HIGH <=16, else CRITICAL."""
    if score <= 4:
        return "LOW"
    if score <= 9:
        return "MEDIUM"
    if score <= 16:
        return "HIGH"
    return "CRITICAL"


Handler = Callable[[TenantScope, InvocationContext, Mapping[str, Any]], dict[str, Any]]
"""A read: scope, context, validated input → output."""
Mutation = Callable[[TenantScope, InvocationContext, Mapping[str, Any]], Execution]
"""A write: like a read, but also returns the state it replaced."""
Verifier = Callable[[TenantScope, Mapping[str, Any], Mapping[str, Any]], VerificationResult]
"""scope, input, output → whether the effect is visible."""
Compensator = Callable[[TenantScope, Mapping[str, Any], Mapping[str, Any], PriorState], CompensationResult]
"""scope, input, output, state before → whether the previous state is back (read back)."""


def _prior(permit: PermitRecord, columns: Sequence[str]) -> PriorState:
    return PriorState("permit", permit.permit_id, {c: getattr(permit, c) for c in columns})


def _restore(
    scope: TenantScope, before: PriorState, written: Mapping[str, Any], key: Sequence[str]
) -> CompensationResult:
    """Restore ``before`` (conditionally, see :meth:`TenantScope.restore_permit`), then read it back."""
    if before.resource_type != "permit":
        return CompensationResult(False, "NO_PRIOR_STATE")
    reason = scope.restore_permit(before.resource_id, before.fields, written)
    permit = scope.get_permit(before.resource_id)
    if permit is None:
        return CompensationResult(False, "RESOURCE_MISSING")
    observed = {c: getattr(permit, c) for c in before.fields}
    if reason not in ("RESTORED", "ALREADY_IN_PREVIOUS_STATE"):
        return CompensationResult(False, reason, observed=observed)
    if observed != before.fields:
        # Claimed restored, but the read-back says otherwise: that is a failure.
        return CompensationResult(False, "RESTORE_NOT_VISIBLE", observed=observed)
    return CompensationResult(True, reason, {k: observed[k] for k in key}, observed)


class InternalBackend:
    """Handlers of the internal capabilities over an :class:`InternalStore`."""

    def __init__(self, store: InternalStore, *, today: Callable[[], _dt.date] | None = None):
        """Bind the handlers to ``store`` (and its clock).

        ``today``: the mesh's date (``agentmesh.clock.mesh_today``), by which a release or a
        validity change is judged inside or outside a permit's window, as the specialists judge
        the window; the date of the store's clock when not given.
        """
        self._store = store
        self._today = today if today is not None else lambda: store.clock().date()
        self._handlers: dict[str, Handler] = {
            "workPermit.get": self._permit_get,
            "workPermit.search": self._permit_search,
            "worker.get": self._worker_get,
            "employee.get": self._employee_get,
            "medical.getEligibility": self._medical_eligibility,
            "risk.evaluate": self._risk_evaluate,
            "compliance.getChecklist": self._compliance_checklist,
        }
        self._mutations: dict[str, Mutation] = {
            "workPermit.updateValidity": self._permit_update_validity,
            "workPermit.release": self._permit_release,
        }
        self._verifiers: dict[str, Verifier] = {
            "workPermit.updateValidity": self._verify_validity,
            "workPermit.release": self._verify_release,
        }
        self._compensators: dict[str, Compensator] = {
            "workPermit.updateValidity": self._compensate_validity,
            "workPermit.release": self._compensate_release,
        }

    @property
    def capability_ids(self) -> frozenset[str]:
        """Capabilities this backend implements."""
        return frozenset(self._handlers) | frozenset(self._mutations)

    def has_verifier(self, capability_id: str) -> bool:
        """Whether ``capability_id`` is a mutation with a read-back verifier."""
        return capability_id in self._verifiers

    def has_compensator(self, capability_id: str) -> bool:
        """Whether ``capability_id`` is a mutation that can be undone after a failed verification."""
        return capability_id in self._compensators

    def execute(
        self, capability_id: str, ctx: InvocationContext, arguments: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Run one internal capability for ``ctx.tenant_id`` and return its output (see :meth:`run`)."""
        return self.run(capability_id, ctx, arguments).output

    def run(
        self, capability_id: str, ctx: InvocationContext, arguments: Mapping[str, Any]
    ) -> Execution:
        """Run one internal capability for ``ctx.tenant_id``; input must be schema-valid.

        Returns:
            The output, and for a mutation the permit's fields as they were
            before (for :meth:`compensate`).

        Raises:
            CapabilityNotFound: no handler for ``capability_id``.
            ResourceNotFound: the record does not exist in the caller's tenant.
            PreconditionFailed: the record's state forbids a mutation.
        """
        scope = self._store.scope(ctx.tenant_id)
        mutation = self._mutations.get(capability_id)
        if mutation is not None:
            return mutation(scope, ctx, arguments)
        handler = self._handlers.get(capability_id)
        if handler is None:
            raise CapabilityNotFound(f"no internal handler for {capability_id!r}")
        return Execution(handler(scope, ctx, arguments))

    def verify(
        self,
        capability_id: str,
        ctx: InvocationContext,
        arguments: Mapping[str, Any],
        output: Mapping[str, Any],
    ) -> VerificationResult:
        """Read a mutation's effect back; ``verified`` is ``False`` if it is not visible.

        Raises:
            CapabilityNotFound: ``capability_id`` has no verifier (not a mutation).
        """
        verifier = self._verifiers.get(capability_id)
        if verifier is None:
            raise CapabilityNotFound(f"{capability_id!r} has no read-back verifier")
        return verifier(self._store.scope(ctx.tenant_id), arguments, output)

    def compensate(
        self,
        capability_id: str,
        ctx: InvocationContext,
        arguments: Mapping[str, Any],
        output: Mapping[str, Any],
        before: PriorState,
    ) -> CompensationResult:
        """Undo a mutation whose verification failed: restore ``before``, then read it back.

        Only what this call wrote is undone; a record changed since by another
        write is left as it is and reported (``CHANGED_BY_ANOTHER_WRITE``).

        Raises:
            CapabilityNotFound: ``capability_id`` has no compensation (not a mutation).
        """
        compensator = self._compensators.get(capability_id)
        if compensator is None:
            raise CapabilityNotFound(f"{capability_id!r} has no compensation")
        return compensator(self._store.scope(ctx.tenant_id), arguments, output, before)

    def _provenance(self, source: str, reference: str) -> dict[str, Any]:
        return Provenance(
            source, Authority.OFFICIAL_RECORD, self._store.clock(), reference
        ).to_dict()

    # -- reads --

    def _permit_get(
        self, scope: TenantScope, ctx: InvocationContext, args: Mapping[str, Any]
    ) -> dict[str, Any]:
        permit = scope.require_permit(str(args["permit_id"]))
        return {
            "permit_id": permit.permit_id,
            "title": permit.title,
            "description": permit.description,
            "site": permit.site,
            "work_type": permit.work_type,
            "status": permit.status,
            "valid_from": permit.valid_from,
            "valid_until": permit.valid_until,
            "requested_by": permit.requested_by,
            "released_at": permit.released_at,
            "released_by": permit.released_by,
            "required_trainings": scope.required_trainings(permit.permit_id),
            "workers": [
                {
                    "worker_id": a.worker.worker_id,
                    "name": a.worker.name,
                    "job_title": a.worker.job_title,
                    "company": a.worker.company,
                    "permit_role": a.permit_role,
                    "medical_notes": a.worker.medical_notes,
                }
                for a in scope.permit_workers(permit.permit_id)
            ],
            "added_workers": scope.permit_added_workers(permit.permit_id),
            "provenance": self._provenance("permit-registry", f"permit/{permit.permit_id}"),
        }

    def _permit_search(
        self, scope: TenantScope, ctx: InvocationContext, args: Mapping[str, Any]
    ) -> dict[str, Any]:
        # Struct-encoded input carries numbers as floats; the schema already
        # guaranteed an integral value in range.
        limit = int(args.get("limit", 20))
        permits, truncated = scope.search_permits(
            status=args.get("status"),
            site=args.get("site"),
            worker_id=args.get("worker_id"),
            valid_on=args.get("valid_on"),
            limit=limit,
        )
        return {
            "permits": [
                {
                    "permit_id": p.permit_id,
                    "title": p.title,
                    "site": p.site,
                    "work_type": p.work_type,
                    "status": p.status,
                    "valid_from": p.valid_from,
                    "valid_until": p.valid_until,
                }
                for p in permits
            ],
            "count": len(permits),
            "truncated": truncated,
            "provenance": self._provenance("permit-registry", "permit-search"),
        }

    def _worker_get(
        self, scope: TenantScope, ctx: InvocationContext, args: Mapping[str, Any]
    ) -> dict[str, Any]:
        worker_id = str(args["worker_id"])
        worker = scope.get_worker(worker_id)
        if worker is None:
            raise not_found(worker_id)
        return {
            "worker_id": worker.worker_id,
            "name": worker.name,
            "job_title": worker.job_title,
            "company": worker.company,
            "medical_notes": worker.medical_notes,
            "permits": scope.permits_of_worker(worker_id),
            "provenance": self._provenance("worker-registry", f"worker/{worker_id}"),
        }

    def _employee_get(
        self, scope: TenantScope, ctx: InvocationContext, args: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The HR record of a worker: who they are and whether they are employed now. No health data."""
        worker_id = str(args["worker_id"])
        worker = scope.get_worker(worker_id)
        if worker is None:
            raise not_found(worker_id)
        return {
            "worker_id": worker.worker_id,
            "name": worker.name,
            "job_title": worker.job_title,
            "company": worker.company,
            "employment_status": worker.employment_status,
            "provenance": self._provenance("hr-registry", f"employee/{worker_id}"),
        }

    def _medical_eligibility(
        self, scope: TenantScope, ctx: InvocationContext, args: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Whether the occupational exam makes a worker fit for a permit's work type through its window.

        ``FIT``: the exam covers the work type and is valid until the permit's last day at least;
        ``UNFIT``: the exam found the worker unfit for it; ``EXAM_EXPIRED``: it covers the work type
        but is no longer valid on the permit's last day; ``NOT_EVALUATED``: no exam, or one that
        does not cover the work type. The status only — never the diagnosis or clinical notes.
        """
        worker_id, permit_id = str(args["worker_id"]), str(args["permit_id"])
        if scope.get_worker(worker_id) is None:
            raise not_found(worker_id)
        permit = scope.require_permit(permit_id)
        record = scope.medical_eligibility(worker_id)
        if record is None:
            status, valid_until = "NOT_EVALUATED", None
        else:
            valid_until = record.valid_until
            if permit.work_type in record.unfit_for:
                status = "UNFIT"
            elif permit.work_type not in record.fit_for:
                status = "NOT_EVALUATED"
            elif record.valid_until < permit.valid_until:
                status = "EXAM_EXPIRED"
            else:
                status = "FIT"
        return {
            "worker_id": worker_id,
            "permit_id": permit.permit_id,
            "work_type": permit.work_type,
            "status": status,
            "valid_until": valid_until,
            "provenance": self._provenance("occupational-health", f"exam/{worker_id}"),
        }

    def _risk_evaluate(
        self, scope: TenantScope, ctx: InvocationContext, args: Mapping[str, Any]
    ) -> dict[str, Any]:
        permit = scope.require_permit(str(args["permit_id"]))
        hazards: list[dict[str, Any]] = []
        for row in scope.risks(permit.permit_id):
            controls = json.loads(row["controls"])
            score = int(row["severity"]) * int(row["likelihood"])
            hazards.append(
                {
                    "risk_id": row["risk_id"],
                    "hazard": row["hazard"],
                    "severity": int(row["severity"]),
                    "likelihood": int(row["likelihood"]),
                    "score": score,
                    "level": risk_level(score),
                    "controls": controls,
                    "open_controls": [c["control"] for c in controls if not c["in_place"]],
                }
            )
        max_score = max((h["score"] for h in hazards), default=0)
        return {
            "permit_id": permit.permit_id,
            # No registered hazard means no assessment, which is not "low risk".
            "assessed": bool(hazards),
            "risk_level": risk_level(max_score) if hazards else None,
            "max_score": max_score,
            "hazards": hazards,
            "open_controls_count": sum(len(h["open_controls"]) for h in hazards),
            "provenance": self._provenance("risk-register", f"permit/{permit.permit_id}"),
        }

    def _compliance_checklist(
        self, scope: TenantScope, ctx: InvocationContext, args: Mapping[str, Any]
    ) -> dict[str, Any]:
        permit = scope.require_permit(str(args["permit_id"]))
        summary = {"PASS": 0, "FAIL": 0, "PENDING": 0, "NOT_APPLICABLE": 0}
        checklists: list[dict[str, Any]] = []
        for checklist, items in scope.checklists(permit.permit_id):
            for item in items:
                summary[item["status"]] += 1
            checklists.append(
                {
                    "checklist_id": checklist["checklist_id"],
                    "title": checklist["title"],
                    "items": [
                        {
                            "item_id": it["item_id"],
                            "requirement": it["requirement"],
                            "regulation": it["regulation"],
                            "status": it["status"],
                            "subject": it["subject"],
                            "note": it["note"],
                        }
                        for it in items
                    ],
                }
            )
        return {
            "permit_id": permit.permit_id,
            "checklists": checklists,
            "summary": summary,
            "provenance": self._provenance("compliance-registry", f"permit/{permit.permit_id}"),
        }

    # -- mutations --

    def _permit_release(
        self, scope: TenantScope, ctx: InvocationContext, args: Mapping[str, Any]
    ) -> Execution:
        now = self._store.clock()
        at = format_timestamp(now)
        permit_id = str(args["permit_id"])
        before, _applied = scope.release_permit(
            permit_id, actor=ctx.actor, reason=str(args["reason"]), today=self._today(), at=at
        )
        # The output reports what was *requested and acknowledged*; whether it
        # actually took effect is the verifier's job, never assumed here.
        output = {
            "permit_id": permit_id,
            "status": "RELEASED",
            "previous_status": before.status,
            "released_at": at,
            "released_by": ctx.actor,
            "provenance": self._provenance("permit-registry", f"permit/{permit_id}"),
        }
        return Execution(output, _prior(before, _RELEASE_COLUMNS))

    def _permit_update_validity(
        self, scope: TenantScope, ctx: InvocationContext, args: Mapping[str, Any]
    ) -> Execution:
        now = self._store.clock()
        at = format_timestamp(now)
        permit_id = str(args["permit_id"])
        valid_until = str(args["valid_until"])
        before, _applied = scope.update_validity(
            permit_id, valid_until=valid_until, actor=ctx.actor, today=self._today(), at=at
        )
        output = {
            "permit_id": permit_id,
            "valid_from": before.valid_from,
            "valid_until": valid_until,
            "previous_valid_until": before.valid_until,
            "updated_at": at,
            "updated_by": ctx.actor,
            "provenance": self._provenance("permit-registry", f"permit/{permit_id}"),
        }
        return Execution(output, _prior(before, _VALIDITY_COLUMNS))

    # -- verifiers --

    @staticmethod
    def _verify_release(
        scope: TenantScope, args: Mapping[str, Any], output: Mapping[str, Any]
    ) -> VerificationResult:
        expected = {"status": "RELEASED", "released_at": output.get("released_at")}
        permit = scope.get_permit(str(args["permit_id"]))
        if permit is None:
            return VerificationResult(False, "RESOURCE_MISSING", expected, {})
        observed = {"status": permit.status, "released_at": permit.released_at}
        ok = observed == expected
        return VerificationResult(
            ok, "EFFECT_VISIBLE" if ok else "EFFECT_NOT_VISIBLE", expected, observed
        )

    @staticmethod
    def _verify_validity(
        scope: TenantScope, args: Mapping[str, Any], output: Mapping[str, Any]
    ) -> VerificationResult:
        expected = {"valid_until": str(args["valid_until"])}
        permit = scope.get_permit(str(args["permit_id"]))
        if permit is None:
            return VerificationResult(False, "RESOURCE_MISSING", expected, {})
        observed = {"valid_until": permit.valid_until}
        ok = observed == expected
        return VerificationResult(
            ok, "EFFECT_VISIBLE" if ok else "EFFECT_NOT_VISIBLE", expected, observed
        )

    # -- compensations --

    @staticmethod
    def _compensate_release(
        scope: TenantScope, args: Mapping[str, Any], output: Mapping[str, Any], before: PriorState
    ) -> CompensationResult:
        written = {
            "status": "RELEASED",
            "released_at": output.get("released_at"),
            "released_by": output.get("released_by"),
            "release_reason": str(args["reason"]),
            "updated_at": output.get("released_at"),
            "updated_by": output.get("released_by"),
        }
        return _restore(scope, before, written, key=("status",))

    @staticmethod
    def _compensate_validity(
        scope: TenantScope, args: Mapping[str, Any], output: Mapping[str, Any], before: PriorState
    ) -> CompensationResult:
        written = {
            "valid_until": str(args["valid_until"]),
            "updated_at": output.get("updated_at"),
            "updated_by": output.get("updated_by"),
        }
        return _restore(scope, before, written, key=("valid_until",))
