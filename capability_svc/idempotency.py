"""Idempotency keys for mutations: a replayed key returns the first outcome, never a second effect.

Keys are scoped by tenant and capability, and held by the principal that
first used them: the tenant, user and agent of its verified grant. The first
call with a key stores that principal and the digest of its payload; a later
call with the same key, the same principal and the same payload gets the
stored response (the caller re-authorises it first, see
``capability_svc.governance``). Another principal, or another payload, is
refused with one and the same answer (``IDEMPOTENCY_KEY_REUSED``), so a key
tells nobody else whether or how it was used.

A claim records its **owner**: the capability process that claimed it
(``pid:start-time:instance``, see :func:`process_owner`). A key still
IN_FLIGHT whose owner is alive is "still running"; one whose owner is gone
(killed mid-call) is reported as :attr:`Claim.orphaned`, so the caller can
read the effect back and either complete the key with what it finds
(:meth:`IdempotencyStore.complete`) or take the claim over and run the call
(:meth:`IdempotencyStore.take_over`): never IN_FLIGHT for ever.

The same file keeps **revoked executions** (:meth:`IdempotencyStore.revoke`):
the supervisor revokes the grants of a cancelled execution, or those a
previous supervisor process issued before a restart; a call under such a grant
is refused.

On PostgreSQL (``url``, shared by capability processes on several hosts) an
owner's liveness cannot be read from ``/proc``: each store holds a **lease**
(a row of ``idempotency_owners`` whose ``expires_at`` it renews every
:data:`HEARTBEAT_S`, on the database's clock); an owner whose lease expired
(or was given up at close) is dead.

Schema history on SQLite (``PRAGMA user_version``): 0 had no principal columns; 1 adds
``user_id``, ``agent_id`` and ``output_digest``; 2 adds ``owner`` and the
``revocations`` table. A file of an older version is migrated in place on
open; version-0 rows have no principal, so no one can replay them (fail
closed: such a key is refused as reused); a row claimed before version 2 has
no owner, so it is taken to be gone (only a process older than this one can
have claimed it).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agentmesh.database import Database, open_database
from agentmesh.revocation import Revocation, widened
from capability_svc.errors import CapabilityError

log = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 2


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot, from /proc), or None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22, counted after the parenthesised command name (which may hold spaces).
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def process_owner(pid: int | None = None, instance: str = "") -> str:
    """``pid:start-time:instance``: names one process for its whole life (a reused pid has another start time)."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{_start_time(pid) or '?'}:{instance}"


def owner_alive(owner: str | None, me: str) -> bool:
    """Whether the process that claimed a key may still be running its call.

    This process (same pid, start time and instance) is alive. Another process
    is alive only if its pid exists with the same start time; a process that
    died (kill -9, a crash) cannot answer for the key any more. An empty owner
    (a claim from before owners were recorded) is gone.
    """
    if not owner:
        return False
    if owner == me:
        return True
    pid_text, _, rest = owner.partition(":")
    started = rest.partition(":")[0]
    my_pid, _, my_rest = me.partition(":")
    if pid_text == my_pid and my_rest.partition(":")[0] == started:
        return False  # this very process, but another store instance than the one that claimed: that call is over
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if started == "?":  # no /proc where it was claimed: the pid alone says it
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return _start_time(pid) == started


@dataclass(frozen=True, slots=True)
class KeyHolder:
    """Who may replay a key: the verified grant's tenant, user and agent."""

    tenant_id: str
    user_id: str
    agent_id: str


class IdempotencyConflict(CapabilityError):
    """The key was used before by another principal or with a different payload.

    The message and field are the same either way; ``cause`` (``PRINCIPAL_MISMATCH``
    or ``PAYLOAD_MISMATCH``) is for the audit record only.
    """

    default_reason = "IDEMPOTENCY_KEY_REUSED"

    def __init__(self, message: str, *, cause: str, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.cause = cause


class IdempotencyFailed(CapabilityError):
    """The first call with this key failed once its effect had been attempted; it is not run again."""

    default_reason = "IDEMPOTENCY_KEY_FAILED"


class IdempotencyInFlight(CapabilityError):
    """The first call with this key has not finished yet."""

    default_reason = "IDEMPOTENCY_KEY_IN_FLIGHT"


@dataclass(frozen=True, slots=True)
class Claim:
    """Result of claiming a key: either new, or the stored response of the first call."""

    new: bool
    response: bytes | None = None
    output_digest: str = ""
    """Digest of the first call's output, as its outcome record named it."""
    orphaned: str = ""
    """Set (to the dead owner) when the key is IN_FLIGHT and its owner is gone: the caller must
    read the effect back and :meth:`IdempotencyStore.complete` or :meth:`IdempotencyStore.take_over`."""


HEARTBEAT_S: Final = 1.0
"""How often a PostgreSQL store renews its owner lease."""
OWNER_LEASE_S: Final = 5.0
"""How long an owner lease lasts without renewal."""

_POSTGRESQL_SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency (tenant_id TEXT NOT NULL, capability_id TEXT NOT NULL,
    idem_key TEXT NOT NULL, payload_digest TEXT NOT NULL, response {blob}, failure TEXT,
    user_id TEXT, agent_id TEXT, output_digest TEXT, owner TEXT,
    PRIMARY KEY (tenant_id, capability_id, idem_key));
CREATE TABLE IF NOT EXISTS revocations (execution_id TEXT PRIMARY KEY, issued_before TEXT,
    reason TEXT NOT NULL, revoked_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS idempotency_owners (owner TEXT PRIMARY KEY, expires_at {real} NOT NULL)
"""


def _migrate(db: Database) -> None:
    """Brings a SQLite file to :data:`SCHEMA_VERSION`; idempotent, in one transaction."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version >= SCHEMA_VERSION:
        return
    with db.transaction() as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS idempotency (tenant_id TEXT NOT NULL, capability_id TEXT NOT NULL,"
            " idem_key TEXT NOT NULL, payload_digest TEXT NOT NULL, response BLOB, failure TEXT,"
            " PRIMARY KEY (tenant_id, capability_id, idem_key))")
        columns = {row[1] for row in conn.execute("PRAGMA table_info(idempotency)").fetchall()}
        for column in ("user_id", "agent_id", "output_digest", "owner"):
            if column not in columns:
                conn.execute(f"ALTER TABLE idempotency ADD COLUMN {column} TEXT")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS revocations (execution_id TEXT PRIMARY KEY, issued_before TEXT,"
            " reason TEXT NOT NULL, revoked_at TEXT NOT NULL)")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


class IdempotencyStore:
    """Table of (tenant, capability, key) → holder, payload digest, owner, response; and revocations.

    SQLite (``path``, the default) or PostgreSQL (``url``).
    """

    def __init__(self, path: Path, *, owner: str | None = None, url: str | None = None) -> None:
        """``owner`` names this process in the claims it makes (default :func:`process_owner`)."""
        self._db: Database = open_database(url, default=path, synchronous="FULL", timeout_s=5.0)
        self._lock = threading.Lock()
        self.owner = owner or process_owner(instance=uuid.uuid4().hex[:12])
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        if self._db.postgresql:
            self._db.create_schema(_POSTGRESQL_SCHEMA)
            self._renew()
            self._heartbeat = threading.Thread(target=self._beat, name="idempotency-lease", daemon=True)
            self._heartbeat.start()
        else:
            _migrate(self._db)

    @property
    def _conn(self) -> Database:
        return self._db

    # -- owner leases (PostgreSQL) ---------------------------------------------------

    def _renew(self) -> None:
        now = self._db.now_sql()
        with self._lock:
            self._db.execute(
                f"INSERT INTO idempotency_owners VALUES (?, {now} + ?) ON CONFLICT (owner) DO UPDATE SET"
                " expires_at = excluded.expires_at", (self.owner, OWNER_LEASE_S))

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._renew()
            except Exception:  # noqa: BLE001 - the next beat tries again
                log.warning("renewing the idempotency owner lease failed", exc_info=True)

    def _alive(self, owner: str | None) -> bool:
        if not self._db.postgresql:
            return owner_alive(owner, self.owner)
        if not owner:
            return False
        if owner == self.owner:
            return True
        row = self._db.execute(f"SELECT expires_at > {self._db.now_sql()} FROM idempotency_owners WHERE owner = ?",
                               (owner,)).fetchone()
        return bool(row and row[0])

    def claim(self, holder: KeyHolder, capability_id: str, key: str, payload_digest: str) -> Claim:
        """Claims a key for a principal and a payload, or returns the first call's outcome to the same principal.

        Raises:
            IdempotencyConflict: another principal holds the key, or it was used with another payload.
            IdempotencyFailed: the first call failed after its effect was attempted.
            IdempotencyInFlight: the first call has not finished and its owner is alive.
        """
        with self._lock:
            # One statement decides who claimed first, also across processes sharing the database.
            claimed = self._db.execute(
                "INSERT INTO idempotency (tenant_id, capability_id, idem_key, payload_digest, user_id, agent_id,"
                " owner) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (holder.tenant_id, capability_id, key, payload_digest, holder.user_id, holder.agent_id,
                 self.owner)).rowcount
            if claimed == 1:
                return Claim(True)
            row = self._db.execute(
                "SELECT payload_digest, response, failure, user_id, agent_id, output_digest, owner FROM idempotency"
                " WHERE tenant_id=? AND capability_id=? AND idem_key=?",
                (holder.tenant_id, capability_id, key)).fetchone()
        if row is None:  # released between the two statements: claim again
            return self.claim(holder, capability_id, key, payload_digest)
        # One message for both: a key says nothing to anyone but its holder.
        reused = f"idempotency key {key!r} was already used for {capability_id} by another request; use a new key"
        if (row[3], row[4]) != (holder.user_id, holder.agent_id):
            raise IdempotencyConflict(reused, cause="PRINCIPAL_MISMATCH", field="idempotency_key")
        if row[0] != payload_digest:
            raise IdempotencyConflict(reused, cause="PAYLOAD_MISMATCH", field="idempotency_key")
        if row[2] is not None:
            raise IdempotencyFailed(f"the first call with idempotency key {key!r} failed after its effect was "
                                    f"attempted ({row[2]}); check the resource and use a new key",
                                    field="idempotency_key")
        if row[1] is None:
            if not self._alive(row[6]):
                return Claim(False, orphaned=row[6] or "unknown")
            raise IdempotencyInFlight(f"the first call with idempotency key {key!r} is still running",
                                      field="idempotency_key")
        return Claim(False, bytes(row[1]), row[5] or "")

    def take_over(self, tenant_id: str, capability_id: str, key: str, dead_owner: str) -> bool:
        """Makes this process the owner of an orphaned IN_FLIGHT key; False if someone else resolved it first."""
        with self._lock:
            changed = self._db.execute(
                "UPDATE idempotency SET owner=? WHERE tenant_id=? AND capability_id=? AND idem_key=?"
                " AND response IS NULL AND failure IS NULL AND COALESCE(owner, 'unknown')=?",
                (self.owner, tenant_id, capability_id, key, dead_owner)).rowcount
        return changed == 1

    def in_flight(self) -> list[tuple[str, str, str, str]]:
        """Keys still IN_FLIGHT, as ``(tenant, capability, key, owner)`` (tools and tests)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT tenant_id, capability_id, idem_key, COALESCE(owner, '') FROM idempotency"
                " WHERE response IS NULL AND failure IS NULL").fetchall()
        return [(str(a), str(b), str(c), str(d)) for a, b, c, d in rows]

    # -- revoked executions --------------------------------------------------------

    def revoke(self, execution_id: str, issued_before: dt.datetime | None, reason: str,
               now: dt.datetime) -> Revocation:
        """Revokes the grants of an execution (all, or those issued before ``issued_before``); only ever widens.

        Returns the revocation in force afterwards.
        """
        with self._lock, self._db.transaction():
            row = self._db.execute("SELECT issued_before FROM revocations WHERE execution_id=?",
                                   (execution_id,)).fetchone()
            held = None if row is None or row[0] is None else dt.datetime.fromisoformat(row[0])
            issued_before = widened(held, row is not None, issued_before)
            self._db.execute(
                "INSERT INTO revocations VALUES (?, ?, ?, ?) ON CONFLICT (execution_id) DO UPDATE SET"
                " issued_before=excluded.issued_before, reason=excluded.reason, revoked_at=excluded.revoked_at",
                (execution_id, None if issued_before is None else issued_before.isoformat(), reason,
                 now.isoformat()))
        return Revocation(execution_id, issued_before, reason)

    def revocation(self, execution_id: str) -> Revocation | None:
        """The revocation of an execution's grants, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT issued_before, reason FROM revocations WHERE execution_id=?", (execution_id,)).fetchone()
        if row is None:
            return None
        return Revocation(execution_id, None if row[0] is None else dt.datetime.fromisoformat(row[0]), str(row[1]))

    def complete(self, tenant_id: str, capability_id: str, key: str, response: bytes, output_digest: str = "") -> None:
        """Stores the outcome of the first call."""
        with self._lock:
            self._db.execute(
                "UPDATE idempotency SET response=?, output_digest=?"
                " WHERE tenant_id=? AND capability_id=? AND idem_key=?",
                (response, output_digest, tenant_id, capability_id, key))

    def fail(self, tenant_id: str, capability_id: str, key: str, reason: str) -> None:
        """Records that the first call failed after its effect was attempted: replays get that failure."""
        with self._lock:
            self._db.execute("UPDATE idempotency SET failure=? WHERE tenant_id=? AND capability_id=? AND idem_key=?",
                               (reason, tenant_id, capability_id, key))

    def release(self, tenant_id: str, capability_id: str, key: str) -> None:
        """Forgets a claim whose call failed before any effect, so it may be retried."""
        with self._lock:
            self._db.execute(
                "DELETE FROM idempotency WHERE tenant_id=? AND capability_id=? AND idem_key=?"
                " AND response IS NULL AND failure IS NULL",
                (tenant_id, capability_id, key))

    def close(self) -> None:
        """Gives up this owner's lease (PostgreSQL) and closes the database."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)
            try:
                with self._lock:
                    self._db.execute("DELETE FROM idempotency_owners WHERE owner = ?", (self.owner,))
            except Exception:  # noqa: BLE001 - the lease expires on its own
                log.warning("giving up the idempotency owner lease failed", exc_info=True)
        self._db.close()
