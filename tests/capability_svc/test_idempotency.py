"""Idempotency keys: held by the principal that first used them; the table is migrated in place."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from capability_svc.idempotency import (
    SCHEMA_VERSION,
    IdempotencyConflict,
    IdempotencyFailed,
    IdempotencyInFlight,
    IdempotencyStore,
    KeyHolder,
)

ALICE = KeyHolder("acme", "alice", "work-permit-agent")
BOB = KeyHolder("acme", "bob", "work-permit-agent")
ALICE_OTHER_AGENT = KeyHolder("acme", "alice", "training-agent")
CAP = "workPermit.release"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[IdempotencyStore]:
    s = IdempotencyStore(tmp_path / "idempotency.db")
    try:
        yield s
    finally:
        s.close()


def test_a_key_replays_only_to_its_holder(store: IdempotencyStore) -> None:
    assert store.claim(ALICE, CAP, "k", "p1").new
    store.complete("acme", CAP, "k", b"response", "out-digest")
    again = store.claim(ALICE, CAP, "k", "p1")
    assert (again.new, again.response, again.output_digest) == (False, b"response", "out-digest")
    for other in (BOB, ALICE_OTHER_AGENT):
        with pytest.raises(IdempotencyConflict) as info:
            store.claim(other, CAP, "k", "p1")
        assert info.value.cause == "PRINCIPAL_MISMATCH"


def test_another_principal_and_another_payload_hear_the_same(store: IdempotencyStore) -> None:
    store.claim(ALICE, CAP, "k", "p1")
    with pytest.raises(IdempotencyConflict) as by_bob:
        store.claim(BOB, CAP, "k", "p1")
    with pytest.raises(IdempotencyConflict) as other_payload:
        store.claim(ALICE, CAP, "k", "p2")
    assert (by_bob.value.cause, other_payload.value.cause) == ("PRINCIPAL_MISMATCH", "PAYLOAD_MISMATCH")
    assert (by_bob.value.message, by_bob.value.field, by_bob.value.reason) == (
        other_payload.value.message, other_payload.value.field, other_payload.value.reason)


def test_another_principal_learns_nothing_of_the_keys_state(store: IdempotencyStore) -> None:
    store.claim(ALICE, CAP, "running", "p")
    store.claim(ALICE, CAP, "failed", "p")
    store.fail("acme", CAP, "failed", "VERIFICATION_FAILED")
    with pytest.raises(IdempotencyInFlight):
        store.claim(ALICE, CAP, "running", "p")
    with pytest.raises(IdempotencyFailed):
        store.claim(ALICE, CAP, "failed", "p")
    for key in ("running", "failed"):
        with pytest.raises(IdempotencyConflict):
            store.claim(BOB, CAP, key, "p")


def test_keys_are_per_tenant(store: IdempotencyStore) -> None:
    store.claim(ALICE, CAP, "k", "p")
    assert store.claim(KeyHolder("globex", "alice", "work-permit-agent"), CAP, "k", "p").new


def _old_file(path: Path) -> None:
    """A file as version 0 wrote it: no principal columns, one completed key."""
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE idempotency (tenant_id TEXT NOT NULL, capability_id TEXT NOT NULL,"
        " idem_key TEXT NOT NULL, payload_digest TEXT NOT NULL, response BLOB, failure TEXT,"
        " PRIMARY KEY (tenant_id, capability_id, idem_key))")
    conn.execute("INSERT INTO idempotency VALUES ('acme', ?, 'old', 'p', x'0a01', NULL)", (CAP,))
    conn.commit()
    conn.close()


def test_an_old_file_is_migrated_in_place_and_its_keys_replay_to_nobody(tmp_path: Path) -> None:
    path = tmp_path / "idempotency.db"
    _old_file(path)
    store = IdempotencyStore(path)
    try:
        # The old row is still there (its key is not free again) but has no holder: fail closed.
        with pytest.raises(IdempotencyConflict) as info:
            store.claim(ALICE, CAP, "old", "p")
        assert info.value.cause == "PRINCIPAL_MISMATCH"
        assert store.claim(ALICE, CAP, "new", "p").new
        store.complete("acme", CAP, "new", b"r", "d")
        assert store.claim(ALICE, CAP, "new", "p").response == b"r"
    finally:
        store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        columns = [row[1] for row in conn.execute("PRAGMA table_info(idempotency)")]
        assert columns[-4:] == ["user_id", "agent_id", "output_digest", "owner"]
    finally:
        conn.close()
    # Opening it again changes nothing.
    IdempotencyStore(path).close()


def test_a_new_file_is_at_the_current_version(tmp_path: Path) -> None:
    IdempotencyStore(tmp_path / "fresh.db").close()
    conn = sqlite3.connect(tmp_path / "fresh.db")
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()
