"""Idempotency keys for mutations: a replayed key returns the first outcome, never a second effect.

Keys are scoped by tenant and capability. The first call with a key stores
the digest of its payload; a later call with the same key and the same payload
gets the stored response, one with a different payload is refused.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from capability_svc.errors import CapabilityError


class IdempotencyConflict(CapabilityError):
    """The key was used before with a different payload."""

    default_reason = "IDEMPOTENCY_KEY_REUSED"


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


class IdempotencyStore:
    """SQLite table of (tenant, capability, key) → payload digest, response."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=5.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS idempotency (tenant_id TEXT NOT NULL, capability_id TEXT NOT NULL,"
            " idem_key TEXT NOT NULL, payload_digest TEXT NOT NULL, response BLOB, failure TEXT,"
            " PRIMARY KEY (tenant_id, capability_id, idem_key))")
        self._lock = threading.Lock()

    def claim(self, tenant_id: str, capability_id: str, key: str, payload_digest: str) -> Claim:
        """Claims a key for a payload, or returns the first call's outcome."""
        with self._lock:
            row = self._conn.execute(
                "SELECT payload_digest, response, failure FROM idempotency"
                " WHERE tenant_id=? AND capability_id=? AND idem_key=?",
                (tenant_id, capability_id, key)).fetchone()
            if row is None:
                self._conn.execute("INSERT INTO idempotency VALUES (?, ?, ?, ?, NULL, NULL)",
                                   (tenant_id, capability_id, key, payload_digest))
                return Claim(True)
        if row[0] != payload_digest:
            raise IdempotencyConflict(
                f"idempotency key {key!r} was already used for {capability_id} with a different payload",
                field="idempotency_key")
        if row[2] is not None:
            raise IdempotencyFailed(f"the first call with idempotency key {key!r} failed after its effect was "
                                    f"attempted ({row[2]}); check the resource and use a new key",
                                    field="idempotency_key")
        if row[1] is None:
            raise IdempotencyInFlight(f"the first call with idempotency key {key!r} is still running",
                                      field="idempotency_key")
        return Claim(False, bytes(row[1]))

    def complete(self, tenant_id: str, capability_id: str, key: str, response: bytes) -> None:
        """Stores the outcome of the first call."""
        with self._lock:
            self._conn.execute("UPDATE idempotency SET response=? WHERE tenant_id=? AND capability_id=? AND idem_key=?",
                               (response, tenant_id, capability_id, key))

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
