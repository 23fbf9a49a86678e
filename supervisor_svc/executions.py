"""Durable executions, review items, proposed actions and handled events (SQLite under the mesh home, or PostgreSQL).

An execution is stored whole, as its protobuf, after every change (planned,
each task started / finished, decided), so a supervisor restart never loses
one. Each completed task's result is stored with it: that is the checkpoint
from which a restarted supervisor resumes an execution still RUNNING (see
:meth:`Orchestrator.end_interrupted`), with what it needs to go on kept beside
it (:class:`ResumeInfo`: the requester, the budget, what was asked). A
client's request id (``AnalyzeRequest.client_request_id``) is claimed per
tenant and user, so a retried Analyze finds its execution; the claim names the
replica accepting it (``claimed_by``, cleared when the execution is first stored),
and a claim whose replica's lease is gone (table ``replicas``, renewed with the
execution leases) before its execution existed may be taken over. Review items are stored whole as
``ReviewItem`` protobufs. A proposed action keeps the requester's user context
(for deciding it later, after a review) and the digest of its single-use
confirmation token, never the token itself.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agentmesh.database import Database, open_database
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb

_SCHEMA = """
CREATE TABLE IF NOT EXISTS executions (
    execution_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    status INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    body {blob} NOT NULL,
    owner TEXT,
    lease_expires_at {real},
    cancel_requested TEXT,
    epoch INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS executions_status ON executions (status);
CREATE TABLE IF NOT EXISTS reviews (
    review_id TEXT PRIMARY KEY,
    execution_id TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    status INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    body {blob} NOT NULL
);
CREATE INDEX IF NOT EXISTS reviews_tenant ON reviews (tenant_id, status);
CREATE INDEX IF NOT EXISTS reviews_execution ON reviews (execution_id);
CREATE TABLE IF NOT EXISTS reviews_on_record (
    review_id TEXT PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS actions (
    action_id TEXT PRIMARY KEY,
    execution_id TEXT NOT NULL UNIQUE,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    requester {blob} NOT NULL,
    state TEXT NOT NULL,
    ttl_s INTEGER NOT NULL,
    token_digest TEXT,
    expires_at TEXT,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS resume (
    execution_id TEXT PRIMARY KEY,
    requester {blob} NOT NULL,
    budget {blob},
    release_requested INTEGER NOT NULL,
    ttl_s INTEGER NOT NULL,
    language TEXT NOT NULL,
    not_run TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS client_requests (
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    client_request_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    request_digest TEXT NOT NULL,
    received_at TEXT NOT NULL,
    claimed_by TEXT,
    PRIMARY KEY (tenant_id, user_id, client_request_id)
);
CREATE TABLE IF NOT EXISTS replicas (
    instance_id TEXT PRIMARY KEY,
    lease_expires_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    tenant_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    received_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, event_id)
);
"""

# States of a proposed action's confirmation (the ``actions.state`` column).
PENDING_APPROVAL = "PENDING_APPROVAL"
PENDING_CONFIRMATION = "PENDING_CONFIRMATION"
USED = "USED"
DECLINED = "DECLINED"
EXPIRED = "EXPIRED"
CLOSED = "CLOSED"


@dataclass(frozen=True)
class ActionRecord:
    """A proposed action's durable part: who asked, and its confirmation state."""

    action_id: str
    execution_id: str
    tenant_id: str
    user_id: str
    requester: common_pb2.UserContext
    state: str
    ttl_s: int
    """How long a confirmation token may stay unused (0: the supervisor's default)."""
    token_digest: str | None
    expires_at: dt.datetime | None


@dataclass(frozen=True)
class ResumeInfo:
    """What a restarted supervisor needs to go on with an execution beyond the execution itself."""

    requester: common_pb2.UserContext
    """The verified user (with the assertion digest): grants of resumed tasks are on their authority."""
    budget: common_pb2.AgentBudget | None
    release_requested: bool
    ttl_s: int
    language: str
    not_run: tuple[tuple[str, str], ...]
    """``(analysis, reason)`` of analyses the plan could not assign."""


UNDECIDED: Final = (dc_pb2.REVIEW_STATUS_OPEN, dc_pb2.REVIEW_STATUS_INFORMATION_REQUESTED)
"""Review statuses still waiting for a decision."""


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


DEFAULT_LEASE_S = 5.0
"""How long an execution's owner holds it without renewing (renewed about every second)."""

_LEASE_COLUMNS = (("owner", "TEXT"), ("lease_expires_at", "REAL"), ("cancel_requested", "TEXT"),
                  ("epoch", "INTEGER NOT NULL DEFAULT 0"))
_CLAIM_COLUMNS = (("claimed_by", "TEXT"),)


class ClaimLost(Exception):
    """A client request id's claim no longer names this execution (a retry took it over): nothing was stored."""


class LeaseLost(Exception):
    """This replica no longer owns the execution it tried to save (another replica took it over)."""


class ExecutionStore:
    """Executions (whole protobufs), review items, proposed actions and events, durable on every save.

    On SQLite (``path``, the default) or on PostgreSQL (``url``). Each RUNNING execution is
    owned by one supervisor replica (``owner``) through a lease (``lease_expires_at``, on
    the database's clock): the owner renews it (:meth:`renew_leases`); another replica may
    take over one whose lease expired (:meth:`take_over`). A save by a replica that lost the
    lease is refused (:class:`LeaseLost`), so a replica that was cut off cannot overwrite
    what the new owner wrote. Each take-over also raises the execution's ``epoch`` (a fencing
    token): a save is refused when the execution was taken over since this store last read
    or took it, so a replica cut off for longer than its lease cannot overwrite an execution
    the new owner has already ended either.
    """

    def __init__(self, path: Path, *, url: str | None = None, owner: str | None = None,
                 lease_s: float = DEFAULT_LEASE_S) -> None:
        # NORMAL in WAL mode survives a crash of the process (the threat a
        # restart recovers from); only an OS crash can lose the last commits.
        self._db: Database = open_database(url, default=path, synchronous="NORMAL")
        if not self._db.postgresql:
            self._add_lease_columns()
        self._db.create_schema(_SCHEMA)
        self._add_claim_columns()
        self._lock = threading.Lock()
        self._epochs: dict[str, int] = {}
        """The epoch of each execution as this store last read, took over or wrote it (0: never taken over)."""
        self.owner = owner or f"supervisor-{uuid.uuid4().hex[:12]}"
        self.lease_s = lease_s
        self._now = self._db.now_sql()
        # A client request this replica claimed and has not stored yet may be taken over by
        # another replica once this condition holds (its claimer's lease is gone, nothing stored).
        self._abandoned = (
            "claimed_by IS NOT NULL AND NOT EXISTS (SELECT 1 FROM replicas WHERE replicas.instance_id ="
            f" client_requests.claimed_by AND replicas.lease_expires_at >= {self._now}) AND NOT EXISTS"
            " (SELECT 1 FROM executions WHERE executions.execution_id = client_requests.execution_id)")

    @property
    def shared(self) -> bool:
        """Whether several replicas may share this store (PostgreSQL)."""
        return self._db.postgresql

    @property
    def database(self) -> Database:
        """The database (health checks, tests)."""
        return self._db

    @property
    def _conn(self) -> Database:
        """The database, under the name the store's connection had (tools and tests)."""
        return self._db

    def _add_lease_columns(self) -> None:
        """A file from before leases gets their columns (SQLite; idempotent)."""
        rows = self._db.execute("PRAGMA table_info(executions)").fetchall()
        if not rows:
            return
        have = {r[1] for r in rows}
        for name, kind in _LEASE_COLUMNS:
            if name not in have:
                self._db.execute(f"ALTER TABLE executions ADD COLUMN {name} {kind}")

    def _add_claim_columns(self) -> None:
        """A ``client_requests`` table from before ``claimed_by`` gets the column (idempotent).

        Its rows keep NULL (settled): on a shared store they are never taken over."""
        if self._db.postgresql:
            self._db.execute("ALTER TABLE executions ADD COLUMN IF NOT EXISTS epoch INTEGER NOT NULL DEFAULT 0")
            for name, kind in _CLAIM_COLUMNS:
                row = self._db.execute(
                    "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
                    " AND table_name = 'client_requests' AND column_name = ?", (name,)).fetchone()
                if row is None:
                    self._db.execute(f"ALTER TABLE client_requests ADD COLUMN IF NOT EXISTS {name} {kind}")
            return
        have = {r[1] for r in self._db.execute("PRAGMA table_info(client_requests)").fetchall()}
        for name, kind in _CLAIM_COLUMNS:
            if name not in have:
                self._db.execute(f"ALTER TABLE client_requests ADD COLUMN {name} {kind}")

    def save(self, execution: pb.Execution, *, reviews: Sequence[dc_pb2.ReviewItem] = (),
             resume: ResumeInfo | None = None) -> None:
        """Stores the execution as it is now, held by this replica.

        The first store of an execution started for a client request id settles its claim in
        the same transaction (``claimed_by`` cleared), provided the claim still names it.
        ``reviews`` are stored in the same transaction, all or none with the execution: a review
        decided is never on record without the execution it moved (a crash in between would leave
        an approved review and an execution still waiting for it). ``resume``, what resuming it needs
        (:meth:`save_resume`), is stored in the same transaction too (at its first store, once planned).

        Raises:
            LeaseLost: the execution is RUNNING under another replica's live lease, or another replica
                took it over since this store last read it (its epoch is higher).
            ClaimLost: its client request id was taken over by a retry (nothing is stored).
        """
        body = execution.SerializeToString(deterministic=True)
        with self._lock, self._db.transaction():
            if execution.client_request_id and self._db.execute(
                    "SELECT 1 FROM executions WHERE execution_id = ?", (execution.execution_id,)).fetchone() is None:
                held = self._db.execute(
                    "UPDATE client_requests SET claimed_by = NULL WHERE tenant_id = ? AND user_id = ?"
                    " AND client_request_id = ? AND execution_id = ?",
                    (execution.tenant_id, execution.user_id, execution.client_request_id,
                     execution.execution_id)).rowcount
                if held != 1:
                    raise ClaimLost(f"client_request_id of {execution.execution_id} was taken over by a retry")
            changed = self._db.execute(
                "INSERT INTO executions (execution_id, tenant_id, user_id, status, updated_at, body, owner,"
                f" lease_expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, {self._now} + ?)"
                " ON CONFLICT (execution_id) DO UPDATE SET"
                " status = excluded.status, updated_at = excluded.updated_at, body = excluded.body,"
                " owner = excluded.owner, lease_expires_at = excluded.lease_expires_at"
                " WHERE executions.epoch <= ? AND (executions.owner IS NULL OR executions.owner = excluded.owner"
                f" OR executions.status <> ? OR executions.lease_expires_at < {self._now})",
                (execution.execution_id, execution.tenant_id, execution.user_id, int(execution.status), _now(), body,
                 self.owner, self.lease_s, self._epochs.get(execution.execution_id, 0),
                 pb.EXECUTION_STATUS_RUNNING)).rowcount
            if changed == 0:
                # Raised inside the transaction: nothing of this store, reviews included, is kept.
                raise LeaseLost(f"execution {execution.execution_id} is owned by another supervisor replica")
            for item in reviews:
                self._update_review(item)
            if resume is not None:
                self._insert_resume(execution.execution_id, resume)

    def get(self, execution_id: str) -> pb.Execution | None:
        """The stored execution, or None."""
        with self._lock:
            row = self._db.execute("SELECT body, epoch FROM executions WHERE execution_id = ?",
                                   (execution_id,)).fetchone()
            if row is None:
                return None
            self._epochs[execution_id] = int(row[1])
        execution = pb.Execution()
        execution.ParseFromString(bytes(row[0]))
        return execution

    def running(self) -> list[pb.Execution]:
        """Executions still marked RUNNING."""
        with self._lock:
            rows = self._db.execute("SELECT body FROM executions WHERE status = ?",
                                    (pb.EXECUTION_STATUS_RUNNING,)).fetchall()
        return [_execution(body) for (body,) in rows]

    def page(self, tenant_id: str, *, after: tuple[str, str] | None = None,
             limit: int = 100) -> list[tuple[str, pb.Execution]]:
        """Up to ``limit`` executions of a tenant, most recently changed first, each with its ``updated_at``.

        ``after`` is the ``(updated_at, execution_id)`` of the last one of the previous page: the page
        goes on from there (keyset order ``updated_at DESC, execution_id DESC``).
        """
        sql = "SELECT updated_at, body FROM executions WHERE tenant_id = ?"
        params: list[object] = [tenant_id]
        if after is not None:
            sql += " AND (updated_at < ? OR (updated_at = ? AND execution_id < ?))"
            params += [after[0], after[0], after[1]]
        params.append(limit)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY updated_at DESC, execution_id DESC LIMIT ?", params).fetchall()
        return [(str(updated), _execution(body)) for updated, body in rows]

    # -- leases ------------------------------------------------------------------

    def owner_of(self, execution_id: str) -> tuple[str, bool] | None:
        """``(owner, lease live)`` of an execution, or None if there is none."""
        with self._lock:
            row = self._db.execute(
                f"SELECT COALESCE(owner, ''), COALESCE(lease_expires_at, 0) > {self._now} FROM executions"
                " WHERE execution_id = ?", (execution_id,)).fetchone()
        return None if row is None else (str(row[0]), bool(row[1]))

    def _beat(self) -> None:
        """Extends this replica's own lease (what tells other replicas its claims are alive); forgets expired ones."""
        self._db.execute(
            f"INSERT INTO replicas (instance_id, lease_expires_at) VALUES (?, {self._now} + ?)"
            " ON CONFLICT (instance_id) DO UPDATE SET lease_expires_at = excluded.lease_expires_at",
            (self.owner, self.lease_s))
        self._db.execute(f"DELETE FROM replicas WHERE lease_expires_at < {self._now}")

    def renew_leases(self) -> list[str]:
        """Extends this replica's lease and that of every RUNNING execution it owns; returns their ids."""
        with self._lock:
            self._beat()
            self._db.execute(
                f"UPDATE executions SET lease_expires_at = {self._now} + ? WHERE owner = ? AND status = ?",
                (self.lease_s, self.owner, pb.EXECUTION_STATUS_RUNNING))
            rows = self._db.execute("SELECT execution_id FROM executions WHERE owner = ? AND status = ?",
                                    (self.owner, pb.EXECUTION_STATUS_RUNNING)).fetchall()
        return [str(r[0]) for r in rows]

    def expired(self) -> list[str]:
        """RUNNING executions whose owner's lease has expired (candidates for :meth:`take_over`)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT execution_id FROM executions WHERE status = ? AND (owner IS NULL OR owner <> ?)"
                f" AND COALESCE(lease_expires_at, 0) < {self._now}",
                (pb.EXECUTION_STATUS_RUNNING, self.owner)).fetchall()
        return [str(r[0]) for r in rows]

    def take_over(self, execution_id: str, *, status: int = pb.EXECUTION_STATUS_RUNNING,
                  force: bool = False) -> pb.Execution | None:
        """Makes this replica the owner of an execution in ``status`` whose lease expired (atomically).

        ``force`` takes it whatever the lease says (one replica restarting on its own store).
        Returns the execution as stored, or None if it is not in ``status`` or another
        replica holds (or just took) it.
        """
        lease = "" if force else f" AND (owner IS NULL OR COALESCE(lease_expires_at, 0) < {self._now})"
        with self._lock:
            changed = self._db.execute(
                f"UPDATE executions SET owner = ?, lease_expires_at = {self._now} + ?, epoch = epoch + 1"
                " WHERE execution_id = ? AND status = ?" + lease,
                (self.owner, self.lease_s, execution_id, status)).rowcount
        return self.get(execution_id) if changed == 1 else None

    def request_cancel(self, execution_id: str, reason: str) -> bool:
        """Marks a RUNNING execution to be cancelled by its owner; False if it is not running."""
        with self._lock:
            changed = self._db.execute(
                "UPDATE executions SET cancel_requested = ? WHERE execution_id = ? AND status = ?",
                (reason or "CANCELLED", execution_id, pb.EXECUTION_STATUS_RUNNING)).rowcount
        return changed == 1

    def cancel_requests(self) -> list[tuple[str, str]]:
        """``(execution id, reason)`` of RUNNING executions of this replica that another replica cancelled."""
        with self._lock:
            rows = self._db.execute(
                "SELECT execution_id, cancel_requested FROM executions WHERE owner = ? AND status = ?"
                " AND cancel_requested IS NOT NULL", (self.owner, pb.EXECUTION_STATUS_RUNNING)).fetchall()
        return [(str(a), str(b)) for a, b in rows]

    def spent_before(self, execution_id: str, seconds: float) -> bool:
        """Whether the execution's action was last changed more than ``seconds`` ago (database clock)."""
        with self._lock:
            row = self._db.execute("SELECT updated_at FROM actions WHERE execution_id = ?",
                                   (execution_id,)).fetchone()
        if row is None:
            return False
        return (dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(str(row[0]))).total_seconds() > seconds

    # -- what resuming needs -------------------------------------------------------

    def save_resume(self, execution_id: str, info: ResumeInfo) -> None:
        """Keeps what resuming ``execution_id`` needs (when it is planned and stopped at once; an execution
        that runs keeps it with its first store, ``save(resume=)``)."""
        with self._lock:
            self._insert_resume(execution_id, info)

    def _insert_resume(self, execution_id: str, info: ResumeInfo) -> None:
        self._db.execute(
            "INSERT INTO resume VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (execution_id) DO UPDATE SET"
            " requester = excluded.requester, budget = excluded.budget,"
            " release_requested = excluded.release_requested, ttl_s = excluded.ttl_s,"
            " language = excluded.language, not_run = excluded.not_run",
            (execution_id, info.requester.SerializeToString(deterministic=True),
             info.budget.SerializeToString(deterministic=True) if info.budget is not None else None,
             int(info.release_requested), info.ttl_s, info.language, json.dumps(list(info.not_run))))

    def resume_info(self, execution_id: str) -> ResumeInfo | None:
        """What resuming ``execution_id`` needs, or None (an execution stored before resumption existed)."""
        with self._lock:
            row = self._db.execute(
                "SELECT requester, budget, release_requested, ttl_s, language, not_run FROM resume"
                " WHERE execution_id = ?", (execution_id,)).fetchone()
        if row is None:
            return None
        requester = common_pb2.UserContext()
        requester.ParseFromString(bytes(row[0]))
        budget = None
        if row[1] is not None:
            budget = common_pb2.AgentBudget()
            budget.ParseFromString(bytes(row[1]))
        return ResumeInfo(requester, budget, bool(row[2]), int(row[3]), str(row[4]),
                          tuple((str(a), str(r)) for a, r in json.loads(row[5])))

    def claim_request(self, tenant_id: str, user_id: str, client_request_id: str, execution_id: str,
                      request_digest: str) -> tuple[str, str]:
        """Records that a client's request id starts ``execution_id``, claimed by this replica (until
        :meth:`save` stores it); returns the owning execution and its digest."""
        with self._lock:
            self._beat()
            self._db.execute(
                "INSERT INTO client_requests (tenant_id, user_id, client_request_id, execution_id, request_digest,"
                " received_at, claimed_by) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (tenant_id, user_id, client_request_id, execution_id, request_digest, _now(), self.owner))
            row = self._db.execute(
                "SELECT execution_id, request_digest FROM client_requests"
                " WHERE tenant_id = ? AND user_id = ? AND client_request_id = ?",
                (tenant_id, user_id, client_request_id)).fetchone()
        return str(row[0]), str(row[1])

    def claim_abandoned(self, tenant_id: str, user_id: str, client_request_id: str, execution_id: str) -> bool:
        """Whether the claim of a client request id for ``execution_id`` was left by a replica whose lease
        is gone, before its execution was stored (it can never come to exist: a retry may take it over)."""
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM client_requests WHERE tenant_id = ? AND user_id = ? AND client_request_id = ?"
                " AND execution_id = ? AND " + self._abandoned,
                (tenant_id, user_id, client_request_id, execution_id)).fetchone()
        return row is not None

    def release_request(self, tenant_id: str, user_id: str, client_request_id: str, execution_id: str, *,
                        abandoned: bool = False) -> bool:
        """Gives up a client request id whose execution never came to exist (it may be retried).

        ``abandoned``: on a shared store, only if :meth:`claim_abandoned` still holds (atomically:
        of several retries, one releases it). Returns whether this call released it."""
        condition = " AND " + self._abandoned if abandoned and self.shared else ""
        with self._lock:
            changed = self._db.execute(
                "DELETE FROM client_requests WHERE tenant_id = ? AND user_id = ? AND client_request_id = ?"
                " AND execution_id = ?" + condition, (tenant_id, user_id, client_request_id, execution_id)).rowcount
        return changed == 1

    def used_actions(self) -> list[str]:
        """Executions whose action's confirmation was spent (the release was let go): candidates for resuming."""
        with self._lock:
            rows = self._db.execute("SELECT execution_id FROM actions WHERE state = ?", (USED,)).fetchall()
        return [str(r[0]) for r in rows]

    def open_review(self, item: dc_pb2.ReviewItem) -> tuple[dc_pb2.ReviewItem, bool]:
        """Opens ``item``, a new review of its execution (:meth:`add_review`) — unless the execution already
        has an undecided review of the same question (a conflict's subject and agents, a limit's reason): an
        execution resumed after a crash that reaches the same point again asks in the review it had, never in
        a second one beside it.

        Returns the review in force and whether its REVIEW_CREATED still has to be recorded: always for a
        review opened now; for one asked again, unless :meth:`review_on_record` was told it is (a process
        that stopped between storing a review and recording it leaves it to be recorded on resume)."""
        for existing in self.reviews(item.tenant_id, statuses=UNDECIDED, execution_id=item.execution_id):
            if _same_question(existing, item):
                with self._lock:
                    recorded = self._db.execute("SELECT 1 FROM reviews_on_record WHERE review_id = ?",
                                                (existing.review_id,)).fetchone()
                return existing, recorded is None
        self.add_review(item)
        return item, True

    def review_on_record(self, review_id: str) -> None:
        """Notes that the REVIEW_CREATED of ``review_id`` is on record (in audit, or in the outbox on its way)."""
        with self._lock:
            self._db.execute("INSERT INTO reviews_on_record VALUES (?) ON CONFLICT (review_id) DO NOTHING",
                             (review_id,))

    def add_review(self, item: dc_pb2.ReviewItem) -> str:
        """Persists a new review item (its id is made when empty); returns its id."""
        if not item.review_id:
            item.review_id = new_review_id()
        with self._lock:
            self._db.execute("INSERT INTO reviews VALUES (?, ?, ?, ?, ?, ?)",
                             (item.review_id, item.execution_id, item.tenant_id, int(item.status), _now(),
                              item.SerializeToString(deterministic=True)))
        return item.review_id

    def save_review(self, item: dc_pb2.ReviewItem) -> None:
        """Stores a review item as it is now (with its execution: ``save(execution, reviews=[item])``)."""
        with self._lock:
            self._update_review(item)

    def _update_review(self, item: dc_pb2.ReviewItem) -> None:
        self._db.execute("UPDATE reviews SET status = ?, body = ? WHERE review_id = ?",
                         (int(item.status), item.SerializeToString(deterministic=True), item.review_id))

    def review(self, review_id: str) -> dc_pb2.ReviewItem | None:
        """One review item, or None."""
        with self._lock:
            row = self._db.execute("SELECT body FROM reviews WHERE review_id = ?", (review_id,)).fetchone()
        return _review(row[0]) if row else None

    def reviews(self, tenant_id: str, *, statuses: tuple[int, ...] = (), execution_id: str = "") -> list[
            dc_pb2.ReviewItem]:
        """Review items of a tenant, oldest first, optionally only in ``statuses`` / of one execution."""
        sql = "SELECT body FROM reviews WHERE tenant_id = ?"
        params: list[object] = [tenant_id]
        if statuses:
            sql += f" AND status IN ({', '.join('?' * len(statuses))})"
            params.extend(int(s) for s in statuses)
        if execution_id:
            sql += " AND execution_id = ?"
            params.append(execution_id)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY created_at, review_id", params).fetchall()
        return [_review(body) for (body,) in rows]

    # -- proposed actions ------------------------------------------------------

    def add_action(self, action_id: str, execution_id: str, requester: common_pb2.UserContext,
                   ttl_s: int = 0) -> None:
        """Records a proposed action and who asked for it (state PENDING_APPROVAL until a token exists)."""
        with self._lock:
            self._db.execute(
                "INSERT INTO actions VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?)",
                (action_id, execution_id, requester.tenant_id, requester.user_id,
                 requester.SerializeToString(deterministic=True), PENDING_APPROVAL, ttl_s, _now()))

    def action(self, execution_id: str) -> ActionRecord | None:
        """The action proposed by an execution, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT action_id, execution_id, tenant_id, user_id, requester, state, ttl_s, token_digest, expires_at"
                " FROM actions WHERE execution_id = ?", (execution_id,)).fetchone()
        if row is None:
            return None
        requester = common_pb2.UserContext()
        requester.ParseFromString(bytes(row[4]))
        return ActionRecord(row[0], row[1], row[2], row[3], requester, row[5], int(row[6]), row[7],
                            dt.datetime.fromisoformat(row[8]) if row[8] else None)

    def await_confirmation(self, action_id: str, token_digest: str, expires_at: dt.datetime) -> None:
        """Stores the digest of a fresh confirmation token (replacing none: one token per action)."""
        with self._lock:
            self._db.execute(
                "UPDATE actions SET state = ?, token_digest = ?, expires_at = ?, updated_at = ? WHERE action_id = ?",
                (PENDING_CONFIRMATION, token_digest, expires_at.isoformat(), _now(), action_id))

    def spend(self, action_id: str, new_state: str) -> bool:
        """Moves a PENDING_CONFIRMATION action to ``new_state`` atomically; False if it was not pending."""
        with self._lock:
            changed = self._db.execute(
                "UPDATE actions SET state = ?, updated_at = ? WHERE action_id = ? AND state = ?",
                (new_state, _now(), action_id, PENDING_CONFIRMATION)).rowcount
        return changed == 1

    def set_action_state(self, action_id: str, state: str) -> None:
        """Sets an action's state unconditionally (approval refused, action closed, ...)."""
        with self._lock:
            self._db.execute("UPDATE actions SET state = ?, updated_at = ? WHERE action_id = ?",
                             (state, _now(), action_id))

    # -- events ------------------------------------------------------------------

    def claim_event(self, tenant_id: str, event_id: str, execution_id: str) -> str:
        """Records that ``event_id`` starts ``execution_id``; returns the execution that owns the event."""
        with self._lock:
            self._db.execute("INSERT INTO events VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                             (tenant_id, event_id, execution_id, _now()))
            row = self._db.execute("SELECT execution_id FROM events WHERE tenant_id = ? AND event_id = ?",
                                   (tenant_id, event_id)).fetchone()
        return str(row[0])

    def release_event(self, tenant_id: str, event_id: str, execution_id: str) -> None:
        """Gives up a claim that started nothing (the event may be handled again)."""
        with self._lock:
            self._db.execute("DELETE FROM events WHERE tenant_id = ? AND event_id = ? AND execution_id = ?",
                             (tenant_id, event_id, execution_id))

    def close(self) -> None:
        """Closes the database."""
        self._db.close()


def _execution(body: bytes) -> pb.Execution:
    execution = pb.Execution()
    execution.ParseFromString(bytes(body))
    return execution


def new_review_id() -> str:
    """A review id no other review has."""
    return f"rev-{uuid.uuid4().hex[:12]}"


def _same_question(a: dc_pb2.ReviewItem, b: dc_pb2.ReviewItem) -> bool:
    """Whether two reviews of one execution ask the same: the conflict of one subject between the same agents,
    or the same limit reached."""
    if a.kind != b.kind:
        return False
    if a.kind == dc_pb2.REVIEW_KIND_CONFLICT:
        return (a.conflict.subject, a.conflict.agent_a, a.conflict.agent_b) == (
            b.conflict.subject, b.conflict.agent_a, b.conflict.agent_b)
    if a.kind == dc_pb2.REVIEW_KIND_LIMIT:
        return a.limit.limit_reason == b.limit.limit_reason
    return False


def _review(body: bytes) -> dc_pb2.ReviewItem:
    item = dc_pb2.ReviewItem()
    item.ParseFromString(bytes(body))
    return item
