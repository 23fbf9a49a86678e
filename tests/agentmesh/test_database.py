"""The database layer and the stores on it, on SQLite and (when AGENTMESH_TEST_DATABASE_URL is set) PostgreSQL."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentmesh import database
from agentmesh.v1 import supervisor_service_pb2 as pb
from capability_svc.idempotency import IdempotencyInFlight, IdempotencyStore, KeyHolder
from supervisor_svc.executions import ClaimLost, ExecutionStore, LeaseLost

PG_URL = os.environ.get("AGENTMESH_TEST_DATABASE_URL", "")


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/test.db"
        return
    if not PG_URL:
        pytest.skip("AGENTMESH_TEST_DATABASE_URL is not set (scripts/postgres start)")
    yield PG_URL


def test_plain_path_and_sqlite_url_open_sqlite_with_wal(tmp_path: Path) -> None:
    db = database.open_database(None, default=tmp_path / "a.db", synchronous="NORMAL")
    assert db.backend == database.SQLITE
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    db.close()
    db = database.open_database(f"sqlite:///{tmp_path}/b.db", default=tmp_path / "unused.db")
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert (tmp_path / "b.db").exists() and not (tmp_path / "unused.db").exists()
    db.close()


def test_redact_hides_the_password() -> None:
    assert database.redact("postgresql://u:secret@h:5/db") == "postgresql://u:***@h:5/db"
    assert database.is_postgresql("postgres://h/db") and not database.is_postgresql("sqlite:///x")


def test_unreachable_postgresql_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(database.DatabaseError, match=r"cannot connect to postgresql://u:\*\*\*@127.0.0.1:1/x"):
        database.open_database("postgresql://u:pw@127.0.0.1:1/x", default=tmp_path / "x.db")


def test_placeholders_upserts_blobs_and_transactions(url: str, tmp_path: Path) -> None:
    db = database.open_database(url, default=tmp_path / "x.db")
    table = f"t_{uuid.uuid4().hex[:8]}"
    db.create_schema(f"CREATE TABLE {table} (k TEXT PRIMARY KEY, v {{blob}}, n {{real}});")
    db.execute(f"INSERT INTO {table} VALUES (?, ?, ?)", ("a", b"\x00\x01", 1.5))
    db.execute(f"INSERT INTO {table} VALUES (?, ?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
               ("a", b"\x02", 0.0))
    assert db.execute(f"INSERT INTO {table} VALUES (?, ?, ?) ON CONFLICT DO NOTHING", ("a", b"", 0)).rowcount == 0
    row = db.execute(f"SELECT v, n FROM {table} WHERE k = ?", ("a",)).fetchone()
    assert (bytes(row[0]), row[1]) == (b"\x02", 1.5)
    with pytest.raises(RuntimeError), db.transaction():
        db.execute(f"INSERT INTO {table} VALUES (?, ?, ?)", ("b", None, 0))
        raise RuntimeError("roll back")
    assert db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 1
    now = db.execute(f"SELECT {db.now_sql()}").fetchone()[0]
    import time

    assert abs(float(now) - time.time()) < 5
    db.execute(f"DROP TABLE {table}")
    db.close()


def _execution(status: int = pb.EXECUTION_STATUS_RUNNING) -> pb.Execution:
    return pb.Execution(execution_id=f"exe-{uuid.uuid4().hex[:12]}", tenant_id="acme", user_id="alice", status=status)


def test_what_resuming_needs_is_stored_with_the_execution_or_not_at_all(url: str, tmp_path: Path) -> None:
    from agentmesh.v1 import common_pb2
    from supervisor_svc.executions import ResumeInfo

    a = ExecutionStore(tmp_path / "s.db", url=url, owner="a", lease_s=30)
    b = ExecutionStore(tmp_path / "s.db", url=url, owner="b", lease_s=30)
    info = ResumeInfo(common_pb2.UserContext(tenant_id="acme", user_id="alice"), None, True, 60, "pt",
                      (("training", "NO_AGENT"),))
    ex = _execution()
    a.save(ex, resume=info)
    assert b.resume_info(ex.execution_id) == info  # with the execution, as another replica reads them
    other = _execution()
    a.save(other)  # a's, under its live lease
    with pytest.raises(LeaseLost):
        b.save(other, resume=info)  # refused: neither the execution's change nor the resume row is kept
    assert a.resume_info(other.execution_id) is None
    a.close()
    b.close()


def test_execution_leases(url: str, tmp_path: Path) -> None:
    a = ExecutionStore(tmp_path / "s.db", url=url, owner="a", lease_s=0.5)
    b = ExecutionStore(tmp_path / "s.db", url=url, owner="b", lease_s=0.5)
    ex = _execution()
    a.save(ex)
    assert a.owner_of(ex.execution_id) == ("a", True)
    assert ex.execution_id in a.renew_leases()
    assert b.take_over(ex.execution_id) is None  # a's lease is live
    with pytest.raises(LeaseLost):
        b.save(ex)
    assert b.get(ex.execution_id) is not None  # any replica reads
    import time

    time.sleep(0.7)  # a stops renewing: its lease expires
    assert ex.execution_id in b.expired()
    taken = b.take_over(ex.execution_id)
    assert taken is not None and taken.execution_id == ex.execution_id
    assert a.take_over(ex.execution_id) is None  # b holds it now
    with pytest.raises(LeaseLost):
        a.save(ex)  # the replica that lost the lease cannot overwrite
    assert b.request_cancel(ex.execution_id, "stop")
    assert b.cancel_requests() == [(ex.execution_id, "stop")]
    ex.status = pb.EXECUTION_STATUS_CANCELLED
    b.save(ex)
    assert not a.request_cancel(ex.execution_id, "again")  # not running any more
    # The replica cut off for longer than its lease still holds its RUNNING copy: it cannot turn
    # the execution the new owner ended back into RUNNING (the take-over raised the epoch).
    stale = pb.Execution()
    stale.CopyFrom(ex)
    stale.status = pb.EXECUTION_STATUS_RUNNING
    with pytest.raises(LeaseLost):
        a.save(stale)
    stored = b.get(ex.execution_id)
    assert stored is not None and stored.status == pb.EXECUTION_STATUS_CANCELLED
    # A replica that reads the ended execution may change it (a review decision on any replica).
    assert a.get(ex.execution_id) is not None
    ex.summary = "decided on replica a"
    a.save(ex)
    a.close()
    b.close()


def test_only_one_replica_takes_an_expired_execution(url: str, tmp_path: Path) -> None:
    dead = ExecutionStore(tmp_path / "s.db", url=url, owner="dead", lease_s=0.0)
    ex = _execution()
    dead.save(ex)
    stores = [ExecutionStore(tmp_path / "s.db", url=url, owner=f"r{i}") for i in range(4)]
    wins: list[str] = []
    barrier = threading.Barrier(len(stores))

    def race(store: ExecutionStore) -> None:
        barrier.wait()
        if store.take_over(ex.execution_id) is not None:
            wins.append(store.owner)

    threads = [threading.Thread(target=race, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    for s in [dead, *stores]:
        s.close()


def test_idempotency_owner_lease_on_postgresql(tmp_path: Path) -> None:
    if not PG_URL:
        pytest.skip("AGENTMESH_TEST_DATABASE_URL is not set (scripts/postgres start)")
    holder = KeyHolder("acme", "alice", "work-permit-agent")
    key = f"k-{uuid.uuid4().hex[:8]}"
    first = IdempotencyStore(tmp_path / "i.db", url=PG_URL)
    second = IdempotencyStore(tmp_path / "i.db", url=PG_URL)
    assert first.claim(holder, "workPermit.release", key, "d").new
    with pytest.raises(IdempotencyInFlight):  # its owner's lease is live
        second.claim(holder, "workPermit.release", key, "d")
    first.close()  # gives up the lease: the owner is gone
    claim = second.claim(holder, "workPermit.release", key, "d")
    assert claim.orphaned == first.owner
    assert second.take_over("acme", "workPermit.release", key, first.owner)
    second.complete("acme", "workPermit.release", key, b"done")
    assert second.claim(holder, "workPermit.release", key, "d").response == b"done"
    second.close()


@pytest.fixture()
def shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stores behave as replicas sharing their database (as on PostgreSQL), on SQLite too."""
    monkeypatch.setattr(ExecutionStore, "shared", property(lambda self: True))


def _claimed(crid: str, execution_id: str) -> pb.Execution:
    ex = _execution()
    ex.execution_id, ex.client_request_id = execution_id, crid
    return ex


@pytest.mark.usefixtures("shared")
def test_a_client_request_claimed_by_a_replica_whose_lease_is_gone_is_taken_over_by_one_retry(
        url: str, tmp_path: Path) -> None:
    crid = f"req-{uuid.uuid4().hex[:8]}"
    dead = ExecutionStore(tmp_path / "s.db", url=url, owner=f"dead-{crid}", lease_s=0.0)
    assert dead.claim_request("acme", "alice", crid, f"exe-dead-{crid}", "d") == (f"exe-dead-{crid}", "d")
    # Its lease is gone (not left to the clock: a zero lease still reads as live within SQLite's millisecond).
    dead._db.execute("DELETE FROM replicas WHERE instance_id = ?", (dead.owner,))
    stores = [ExecutionStore(tmp_path / "s.db", url=url, owner=f"r{i}-{crid}") for i in range(4)]
    assert stores[0].claim_abandoned("acme", "alice", crid, f"exe-dead-{crid}")
    wins: list[str] = []
    barrier = threading.Barrier(len(stores))

    def race(store: ExecutionStore) -> None:
        barrier.wait()
        if store.release_request("acme", "alice", crid, f"exe-dead-{crid}", abandoned=True):
            wins.append(store.owner)
        store.claim_request("acme", "alice", crid, f"exe-{store.owner}", "d")

    threads = [threading.Thread(target=race, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    owner, _ = stores[0].claim_request("acme", "alice", crid, "exe-late", "d")
    assert owner.startswith("exe-r")  # one retry's claim, alive: no one takes it over
    assert not stores[0].claim_abandoned("acme", "alice", crid, owner)
    with pytest.raises(ClaimLost):  # the dead replica, had it only been slow, stores nothing
        dead.save(_claimed(crid, f"exe-dead-{crid}"))
    assert dead.get(f"exe-dead-{crid}") is None
    for s in [dead, *stores]:
        s.close()


@pytest.mark.usefixtures("shared")
def test_a_live_or_settled_client_request_claim_is_not_taken_over(url: str, tmp_path: Path) -> None:
    crid = f"req-{uuid.uuid4().hex[:8]}"
    a = ExecutionStore(tmp_path / "s.db", url=url, owner=f"a-{crid}", lease_s=0.5)
    b = ExecutionStore(tmp_path / "s.db", url=url, owner=f"b-{crid}")
    a.claim_request("acme", "alice", crid, f"exe-a-{crid}", "d")
    assert not b.claim_abandoned("acme", "alice", crid, f"exe-a-{crid}")  # a's lease is live
    assert not b.release_request("acme", "alice", crid, f"exe-a-{crid}", abandoned=True)
    a.renew_leases()
    ex = _claimed(crid, f"exe-a-{crid}")
    a.save(ex)  # still a's claim: stored, and the claim settled
    import time

    time.sleep(0.7)  # a's lease is gone, but its execution exists
    assert not b.claim_abandoned("acme", "alice", crid, f"exe-a-{crid}")
    assert not b.release_request("acme", "alice", crid, f"exe-a-{crid}", abandoned=True)
    ex.status = pb.EXECUTION_STATUS_SUCCEEDED
    a.save(ex)  # later saves of an execution whose claim was settled need nothing more
    assert b.claim_request("acme", "alice", crid, "exe-other", "d") == (f"exe-a-{crid}", "d")
    a.close()
    b.close()
