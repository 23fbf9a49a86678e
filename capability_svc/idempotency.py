"""Idempotency keys for mutations: a replayed key returns the first outcome, never a second effect.

Keys are scoped by tenant and capability, and held by the principal that
first used them: the tenant, user and agent of its verified grant. The first
call with a key stores that principal and the digest of its payload; a later
call with the same key, the same principal and the same payload gets the
stored response (the caller re-authorises it first, see
``capability_svc.governance``). Another principal, or another payload, is
refused with one and the same answer (``IDEMPOTENCY_KEY_REUSED``), so a key
tells nobody else whether or how it was used.

Schema history (``PRAGMA user_version``): 0 had no principal columns; 1 adds
``user_id``, ``agent_id`` and ``output_digest``. A file of version 0 is
migrated in place on open; its rows have no principal, so no one can replay
them (fail closed: such a key is refused as reused).
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from capability_svc.errors import CapabilityError

SCHEMA_VERSION: Final = 1


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


def _migrate(conn: sqlite3.Connection) -> None:
    """Brings the file to :data:`SCHEMA_VERSION`; idempotent, in one transaction."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version >= SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS idempotency (tenant_id TEXT NOT NULL, capability_id TEXT NOT NULL,"
            " idem_key TEXT NOT NULL, payload_digest TEXT NOT NULL, response BLOB, failure TEXT,"
            " PRIMARY KEY (tenant_id, capability_id, idem_key))")
        columns = {row[1] for row in conn.execute("PRAGMA table_info(idempotency)")}
        for column in ("user_id", "agent_id", "output_digest"):
            if column not in columns:
                conn.execute(f"ALTER TABLE idempotency ADD COLUMN {column} TEXT")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class IdempotencyStore:
    """SQLite table of (tenant, capability, key) → holder, payload digest, response."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=5.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        _migrate(self._conn)
        self._lock = threading.Lock()

    def claim(self, holder: KeyHolder, capability_id: str, key: str, payload_digest: str) -> Claim:
        """Claims a key for a principal and a payload, or returns the first call's outcome to the same principal.

        Raises:
            IdempotencyConflict: another principal holds the key, or it was used with another payload.
            IdempotencyFailed: the first call failed after its effect was attempted.
            IdempotencyInFlight: the first call has not finished.
        """
        with self._lock:
            row = self._conn.execute(
                "SELECT payload_digest, response, failure, user_id, agent_id, output_digest FROM idempotency"
                " WHERE tenant_id=? AND capability_id=? AND idem_key=?",
                (holder.tenant_id, capability_id, key)).fetchone()
            if row is None:
                self._conn.execute(
                    "INSERT INTO idempotency (tenant_id, capability_id, idem_key, payload_digest, user_id, agent_id)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (holder.tenant_id, capability_id, key, payload_digest, holder.user_id, holder.agent_id))
                return Claim(True)
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
            raise IdempotencyInFlight(f"the first call with idempotency key {key!r} is still running",
                                      field="idempotency_key")
        return Claim(False, bytes(row[1]), row[5] or "")

    def complete(self, tenant_id: str, capability_id: str, key: str, response: bytes, output_digest: str = "") -> None:
        """Stores the outcome of the first call."""
        with self._lock:
            self._conn.execute(
                "UPDATE idempotency SET response=?, output_digest=?"
                " WHERE tenant_id=? AND capability_id=? AND idem_key=?",
                (response, output_digest, tenant_id, capability_id, key))

    def fail(self, tenant_id: str, capability_id: str, key: str, reason: str) -> None:
        """Records that the first call failed after its effect was attempted: replays get that failure."""
        with self._lock:
            self._conn.execute("UPDATE idempotency SET failure=? WHERE tenant_id=? AND capability_id=? AND idem_key=?",
                               (reason, tenant_id, capability_id, key))

    def release(self, tenant_id: str, capability_id: str, key: str) -> None:
        """Forgets a claim whose call failed before any effect, so it may be retried."""
        with self._lock:
            self._conn.execute(
                "DELETE FROM idempotency WHERE tenant_id=? AND capability_id=? AND idem_key=?"
                " AND response IS NULL AND failure IS NULL",
                (tenant_id, capability_id, key))

    def close(self) -> None:
        """Closes the database."""
        self._conn.close()
