"""AuditLog: appends, group commit, proofs from stored subtrees, queries, checkpoints, recovery."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from audit_svc import merkle
from audit_svc.checkpoints import CheckpointSigner, verify_checkpoint
from audit_svc.errors import (
    InvalidArgumentError,
    LogClosedError,
    LogCorruptedError,
    LogLockedError,
    StorageError,
)
from audit_svc.log_store import AuditLog, AuditLogConfig, IndexAttributes, RecordFilter
from audit_svc.verify import verify_log

OpenLog = Callable[..., AuditLog]
REPO = Path(__file__).resolve().parents[2]


def record(index: int, body: str = "payload") -> bytes:
    """A toy entry that embeds its own index, like an AuditRecord does."""
    return f"record index={index} {body}".encode()


def fill(log: AuditLog, n: int) -> list[bytes]:
    """Append n records in one batch; return the entries in order."""
    start = log.size()
    log.append_many([record] * n)
    return [record(i) for i in range(start, start + n)]


# --------------------------------------------------------------- appending


def test_append_assigns_gap_free_indexes_and_is_readable(open_log: OpenLog) -> None:
    log = open_log()
    seen: list[int] = []

    def build(index: int) -> bytes:
        seen.append(index)
        return record(index)

    results = [log.append(build) for _ in range(5)]
    assert [r.index for r in results] == [0, 1, 2, 3, 4] == seen
    assert all(r.tree_size >= r.index + 1 for r in results)
    assert results[2].leaf_hash == merkle.leaf_hash(record(2))
    assert log.size() == 5
    assert log.entry(3) == record(3)
    assert list(log.entries(1, 4)) == [(i, record(i)) for i in (1, 2, 3)]
    assert [i for i, _ in log.entries()] == [0, 1, 2, 3, 4]
    assert log.leaf_hash(4) == merkle.leaf_hash(record(4))


def test_concurrent_appenders_share_batches_without_gaps(open_log: OpenLog) -> None:
    log = open_log()
    per_thread, threads = 40, 16
    results: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(per_thread):
            r = log.append(record)
            with lock:
                results.append(r.index)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    total = per_thread * threads
    assert sorted(results) == list(range(total))
    # Each entry embeds the index it was given: order and content agree.
    assert [e for _, e in log.entries()] == [record(i) for i in range(total)]
    assert log.root() == merkle.root(merkle.leaf_hash(record(i)) for i in range(total))


def test_a_refused_entry_stores_nothing_and_uses_no_index(open_log: OpenLog) -> None:
    log = open_log(config=AuditLogConfig(max_entry_bytes=100))
    log.append(record)

    class Refused(Exception):
        pass

    def refuse(index: int) -> bytes:
        raise Refused(f"bad record for {index}")

    with pytest.raises(Refused):
        log.append(refuse)
    with pytest.raises(InvalidArgumentError) as exc:
        log.append(lambda i: b"x" * 101)
    assert exc.value.reason == "ENTRY_TOO_LARGE"
    with pytest.raises(InvalidArgumentError) as exc:
        log.append(lambda i: "text, not bytes")  # type: ignore[arg-type,return-value]
    assert exc.value.reason == "ENTRY_TYPE"
    # All or nothing across append_many.
    with pytest.raises(Refused):
        log.append_many([record, refuse, record])
    assert log.size() == 1
    assert log.append(record).index == 1


def test_bad_attributes_are_refused_before_queueing(open_log: OpenLog) -> None:
    log = open_log()
    with pytest.raises(InvalidArgumentError) as exc:
        log.append(record, {"executionid": "typo"})
    assert exc.value.reason == "EXECUTIONID_UNKNOWN"
    with pytest.raises(InvalidArgumentError) as exc:
        log.append(record, {"tenant_id": "x" * 1000})
    assert exc.value.reason == "TENANT_ID_INVALID"
    with pytest.raises(InvalidArgumentError) as exc:
        log.append(record, {"recorded_at": -5})
    assert exc.value.reason == "RECORDED_AT_MICROS_INVALID"
    with pytest.raises(InvalidArgumentError) as exc:
        log.append_many([record, record], [None])
    assert exc.value.reason == "ATTRIBUTES"
    assert log.size() == 0


def test_callback_must_not_reenter_the_log(open_log: OpenLog) -> None:
    log = open_log()

    def reenter(index: int) -> bytes:
        log.append(record)
        return record(index)

    with pytest.raises(RuntimeError):
        log.append(reenter)
    assert log.size() == 0


def test_timed_out_append_is_withdrawn_not_stored(open_log: OpenLog) -> None:
    log = open_log()
    release = threading.Event()
    started = threading.Event()

    def slow(index: int) -> bytes:
        started.set()
        release.wait(5)
        return record(index)

    blocker = threading.Thread(target=lambda: log.append(slow))
    blocker.start()
    assert started.wait(5)
    # The writer is busy with `slow`; this one is still queued when it times out.
    with pytest.raises(TimeoutError):
        log.append(record, timeout=0.01)
    release.set()
    blocker.join()
    assert log.size() == 1
    assert log.append(record).index == 1


# --------------------------------------------------------------- proofs


def test_roots_and_proofs_at_every_size_match_the_in_memory_tree(open_log: OpenLog) -> None:
    log = open_log()
    n = 45
    # Several batches of uneven size, so subtrees complete across batch borders.
    for chunk in (1, 2, 5, 8, 13, 16):
        fill(log, chunk)
    assert log.size() == n
    leaves = [merkle.leaf_hash(record(i)) for i in range(n)]
    for size in range(n + 1):
        assert log.root(size) == merkle.root(leaves[:size])
    for size in range(1, n + 1):
        root = merkle.root(leaves[:size])
        for index in range(size):
            p = log.inclusion_proof(index, size)
            assert list(p.audit_path) == merkle.inclusion_proof(leaves[:size], index)
            assert p.root_hash == root and p.leaf_hash == leaves[index]
            assert merkle.verify_inclusion(index, size, p.leaf_hash, p.audit_path, root)
        for first in range(size + 1):
            c = log.consistency_proof(first, size)
            assert list(c.proof) == merkle.consistency_proof(leaves[:size], first)
            assert merkle.verify_consistency(first, size, c.proof, c.first_root_hash, c.second_root_hash)
    current = log.inclusion_proof(7)
    assert current.tree_size == n


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        (lambda log: log.inclusion_proof(10, 10), "LEAF_INDEX"),
        (lambda log: log.inclusion_proof(-1), "LEAF_INDEX"),
        (lambda log: log.inclusion_proof(0, 11), "TREE_SIZE"),
        (lambda log: log.root(11), "TREE_SIZE"),
        (lambda log: log.consistency_proof(5, 11), "SECOND_TREE_SIZE"),
        (lambda log: log.consistency_proof(6, 5), "FIRST_TREE_SIZE"),
        (lambda log: log.consistency_proof(-1, 5), "FIRST_TREE_SIZE"),
        (lambda log: log.entry(10), "LEAF_INDEX"),
        (lambda log: list(log.entries(3, 11)), "END_INDEX"),
        (lambda log: list(log.entries(4, 3)), "START_INDEX"),
    ],
)
def test_out_of_range_reads_are_invalid_arguments(
    open_log: OpenLog, call: Callable[[AuditLog], object], reason: str
) -> None:
    log = open_log()
    fill(log, 10)
    with pytest.raises(InvalidArgumentError) as exc:
        call(log)
    assert exc.value.reason == reason


# --------------------------------------------------------------- queries


def test_query_filters_pages_and_time_ranges(open_log: OpenLog) -> None:
    log = open_log()
    for i in range(30):
        attrs = IndexAttributes(
            execution_id=f"exec-{i % 3}",
            tenant_id="acme" if i % 2 == 0 else "globex",
            agent_id="training-agent" if i % 5 == 0 else None,
            trace_id=f"trace-{i // 10}",
            recorded_at_micros=1_000 + i,
        )
        log.append(record, attrs)

    hits = log.query(RecordFilter(execution_id="exec-1"), limit=4)
    assert [h.index for h in hits] == [1, 4, 7, 10]
    assert hits[0].entry == record(1)
    page2 = log.query(RecordFilter(execution_id="exec-1"), after_index=hits[-1].index, limit=4)
    assert [h.index for h in page2] == [13, 16, 19, 22]

    both = log.query(RecordFilter(execution_id="exec-0", tenant_id="acme"), limit=100)
    assert [h.index for h in both] == [0, 6, 12, 18, 24]
    agent = log.query(RecordFilter(agent_id="training-agent", tenant_id="globex"))
    assert [h.index for h in agent] == [5, 15, 25]
    window = log.query(RecordFilter(start_micros=1_010, end_micros=1_013))
    assert [h.index for h in window] == [10, 11, 12]
    assert [h.index for h in log.query(RecordFilter(trace_id="trace-2"), limit=3)] == [20, 21, 22]
    # Empty strings mean "no filter", as in protobuf.
    assert len(log.query(RecordFilter(execution_id=""), limit=1000)) == 30
    assert log.query(RecordFilter(tenant_id="nobody")) == []
    assert log.query(RecordFilter(), after_index=29) == []


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda log: log.query(RecordFilter(), limit=0), "LIMIT"),
        (lambda log: log.query(RecordFilter(), limit=10_001), "LIMIT"),
        (lambda log: log.query(RecordFilter(), after_index=-2), "AFTER_INDEX"),
        (lambda log: RecordFilter(start_micros=5, end_micros=4), "TIME_RANGE"),
        (lambda log: RecordFilter(start_micros=-1), "START_TIME_INVALID"),
        (lambda log: RecordFilter(tenant_id="a\x00b"), "TENANT_ID_INVALID"),
    ],
)
def test_bad_queries_are_invalid_arguments(open_log: OpenLog, make: Callable[[AuditLog], object], reason: str) -> None:
    log = open_log()
    with pytest.raises(InvalidArgumentError) as exc:
        make(log)
    assert exc.value.reason == reason


# --------------------------------------------------------------- checkpoints


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000_000

    def __call__(self) -> int:
        return self.now


def test_checkpoints_are_stored_by_entries_time_and_on_request(open_log: OpenLog, signer: CheckpointSigner) -> None:
    clock = FakeClock()
    log = open_log(config=AuditLogConfig(checkpoint_every_entries=10, clock_micros=clock))
    assert log.latest_checkpoint() is None
    log.append(record)  # the very first batch starts the history
    assert [c.tree_size for c in log.checkpoints()] == [1]
    fill(log, 5)  # 6 < 1 + 10, and no time has passed
    assert [c.tree_size for c in log.checkpoints()] == [1]
    fill(log, 5)  # 11 >= 1 + 10
    assert [c.tree_size for c in log.checkpoints()] == [1, 11]
    log.append(record)
    clock.now += 1_000_000  # a second later, one more batch
    log.append(record)
    assert [c.tree_size for c in log.checkpoints()] == [1, 11, 13]

    log.append(record)
    asked = log.checkpoint()  # GetCheckpoint: signs the current tree
    assert asked.tree_size == 14 == log.size()
    assert log.checkpoint() == asked  # nothing new: the same one, no new row
    assert [c.tree_size for c in log.checkpoints()] == [1, 11, 13, 14]
    assert log.latest_checkpoint() == asked
    for cp in log.checkpoints():
        verify_checkpoint(cp, signer.public_key, origin=signer.origin)
        assert cp.root_hash == log.root(cp.tree_size)
    # Time never runs backwards in checkpoints even if the clock does.
    clock.now -= 10_000_000
    log.append(record)
    assert log.checkpoint().timestamp_micros >= asked.timestamp_micros


def test_empty_log_checkpoint_and_final_checkpoint_on_close(tmp_path: Path, signer: CheckpointSigner) -> None:
    log = AuditLog.open(tmp_path / "a.db", signer=signer)
    empty = log.checkpoint()
    assert (empty.tree_size, empty.root_hash) == (0, merkle.EMPTY_ROOT)
    fill(log, 3)  # not due yet: few entries, little time since the empty checkpoint
    log = _reopen_after_close(log, tmp_path / "a.db", signer, lambda lg: fill(lg, 2))
    # close() signed the tail: the newest checkpoint covers all 5.
    assert log.latest_checkpoint() is not None
    assert log.latest_checkpoint().tree_size == 5  # type: ignore[union-attr]
    log.close()


def _reopen_after_close(
    log: AuditLog, path: Path, signer: CheckpointSigner, then: Callable[[AuditLog], object]
) -> AuditLog:
    then(log)
    log.close()
    return AuditLog.open(path, signer=signer)


# --------------------------------------------------------------- lifecycle and recovery


def test_state_survives_reopen(tmp_path: Path, signer: CheckpointSigner) -> None:
    path = tmp_path / "data" / "audit.db"
    log = AuditLog.open(path, signer=signer)
    fill(log, 21)
    root = log.root()
    log.close()
    log = AuditLog.open(path, signer=signer)
    try:
        assert log.size() == 21 and log.root() == root
        assert log.append(record).index == 21
        assert log.root() == merkle.root(merkle.leaf_hash(record(i)) for i in range(22))
    finally:
        log.close()


def test_second_open_of_the_same_file_is_refused(open_log: OpenLog) -> None:
    open_log()
    with pytest.raises(LogLockedError) as exc:
        open_log()
    assert exc.value.reason == "LOG_LOCKED"


def test_closed_log_refuses_everything(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 2)
    log.close()
    log.close()  # idempotent
    for call in (lambda: log.append(record), log.size, lambda: log.root(), log.checkpoint):
        with pytest.raises(LogClosedError):
            call()


def test_missing_subtree_hashes_are_rebuilt_on_open(tmp_path: Path, signer: CheckpointSigner) -> None:
    path = tmp_path / "audit.db"
    log = AuditLog.open(path, signer=signer)
    fill(log, 37)
    root = log.root()
    log.close()
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM subtrees WHERE level = 2 OR (level = 1 AND idx > 5)")
    log = AuditLog.open(path, signer=signer)
    try:
        assert log.root() == root
        assert merkle.verify_inclusion(20, 37, log.leaf_hash(20), log.inclusion_proof(20).audit_path, root)
    finally:
        log.close()
    assert verify_log(path, signer.public_key).ok


def test_open_refuses_a_log_with_a_gap(tmp_path: Path, signer: CheckpointSigner) -> None:
    path = tmp_path / "audit.db"
    log = AuditLog.open(path, signer=signer)
    fill(log, 8)
    log.close()
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM entries WHERE idx = 3")
    with pytest.raises(LogCorruptedError) as exc:
        AuditLog.open(path, signer=signer)
    assert exc.value.reason == "ENTRY_INDEX_GAP"


def test_open_refuses_a_log_whose_newest_checkpoint_disagrees(tmp_path: Path, signer: CheckpointSigner) -> None:
    path = tmp_path / "audit.db"
    log = AuditLog.open(path, signer=signer)
    fill(log, 8)
    log.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE checkpoints SET root_hash = zeroblob(32)")
    with pytest.raises(LogCorruptedError) as exc:
        AuditLog.open(path, signer=signer)
    assert exc.value.reason == "CHECKPOINT_ROOT_MISMATCH"
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM entries WHERE idx >= 4")
    with pytest.raises(LogCorruptedError) as exc:
        AuditLog.open(path, signer=signer)
    assert exc.value.reason == "CHECKPOINT_BEYOND_LOG"


_CRASH_CHILD = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    from audit_svc.checkpoints import CheckpointSigner
    from audit_svc.log_store import AuditLog

    home = Path(sys.argv[1])
    signer = CheckpointSigner.load_or_create(home / "keys", "agentmesh.local/audit")
    log = AuditLog.open(home / "data" / "audit.db", signer=signer)
    out = threading.Lock()

    def build(i):
        return f"record index={i} ".encode() + b"x" * 500

    def worker():
        while True:
            r = log.append(build)
            with out:
                sys.stdout.write(f"{r.index}\\n")
                sys.stdout.flush()

    for _ in range(8):
        threading.Thread(target=worker, daemon=True).start()
    threading.Event().wait()
    """
)


def test_kill_9_mid_batch_keeps_every_acknowledged_record(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CRASH_CHILD, str(tmp_path)],
        stdout=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )
    acked: list[int] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            acked.append(int(line))
            if len(acked) >= 400:
                break
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert len(acked) >= 400

    signer = CheckpointSigner.load_or_create(tmp_path / "keys", "agentmesh.local/audit")
    db = tmp_path / "data" / "audit.db"

    def index_matches(i: int, entry: bytes) -> str | None:
        claimed = int(entry.split(b" ")[1].split(b"=")[1])
        return None if claimed == i else f"claims index {claimed}"

    report = verify_log(db, signer.public_key_pem(), entry_check=index_matches)
    assert report.ok, report.summary()
    log = AuditLog.open(db, signer=signer)
    try:
        assert log.size() >= max(acked) + 1
        for i in acked[:: max(1, len(acked) // 50)]:
            assert log.entry(i).startswith(f"record index={i} ".encode())
        assert log.append(lambda i: f"record index={i} after".encode()).index == log.size() - 1
    finally:
        log.close()


def test_a_failed_commit_acknowledges_nothing_and_the_log_carries_on(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 5)
    # Make the next insert fail inside SQLite, as a full disk or I/O error would.
    with sqlite3.connect(log.path) as db:
        db.execute(
            "CREATE TRIGGER fail BEFORE INSERT ON entries WHEN NEW.idx = 5"
            " BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
        )
    with pytest.raises(StorageError) as exc:
        log.append(record)
    assert exc.value.reason == "STORAGE_ERROR"
    assert log.size() == 5
    with sqlite3.connect(log.path) as db:
        db.execute("DROP TRIGGER fail")
    # The writer re-read the committed state: index 5 is handed out again, no gap.
    assert log.append(record).index == 5
    assert verify_log(log.path, log.signer.public_key).ok


def test_open_refuses_malformed_rows(tmp_path: Path, signer: CheckpointSigner) -> None:
    path = tmp_path / "audit.db"
    log = AuditLog.open(path, signer=signer)
    fill(log, 5)
    log.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE entries SET leaf_hash = 'not a hash' WHERE idx = 4")
    with pytest.raises(LogCorruptedError) as exc:
        AuditLog.open(path, signer=signer)
    assert exc.value.reason == "SUBTREE_INVALID"
    with sqlite3.connect(path) as db:
        db.execute("UPDATE entries SET leaf_hash = ? WHERE idx = 4", (merkle.leaf_hash(record(4)),))
        db.execute("UPDATE checkpoints SET tree_size = 'five'")
    with pytest.raises(LogCorruptedError) as exc:
        AuditLog.open(path, signer=signer)
    assert exc.value.reason == "LOG_MALFORMED"


def test_open_refuses_another_schema_version(tmp_path: Path, signer: CheckpointSigner) -> None:
    path = tmp_path / "audit.db"
    AuditLog.open(path, signer=signer).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(LogCorruptedError) as exc:
        AuditLog.open(path, signer=signer)
    assert exc.value.reason == "SCHEMA_VERSION"


def test_queries_agree_with_brute_force_across_index_and_tail(tmp_path: Path, signer: CheckpointSigner) -> None:
    path = tmp_path / "audit.db"
    # Index in small steps so most records are indexed and a tail is not.
    config = AuditLogConfig(index_every_entries=16, index_every_micros=10**12)
    rng = random.Random(7)
    attrs: list[IndexAttributes] = []
    log = AuditLog.open(path, signer=signer, config=config)
    try:
        for i in range(203):
            a = IndexAttributes(
                execution_id=f"exec-{rng.randrange(5)}",
                trace_id=f"trace-{rng.randrange(3)}" if rng.random() < 0.7 else None,
                agent_id=rng.choice(["training-agent", "risk-agent", None]),
                tenant_id=rng.choice(["acme", "globex"]),
                recorded_at_micros=1_000 + i // 2,
            )
            attrs.append(a)
            log.append(record, a)
        assert 0 < log._indexed < log.size()  # both parts are exercised

        def brute(f: RecordFilter) -> list[int]:
            out = []
            for i, a in enumerate(attrs):
                if any(
                    getattr(f, n) is not None and getattr(f, n) != getattr(a, n)
                    for n in ("execution_id", "trace_id", "agent_id", "tenant_id")
                ):
                    continue
                t = a.recorded_at_micros
                assert t is not None
                if (f.start_micros is not None and t < f.start_micros) or (
                    f.end_micros is not None and t >= f.end_micros
                ):
                    continue
                out.append(i)
            return out

        def paged(f: RecordFilter, page: int) -> list[int]:
            got: list[int] = []
            after = -1
            while True:
                hits = log.query(f, after_index=after, limit=page)
                got += [h.index for h in hits]
                for h in hits:
                    assert h.entry == record(h.index)
                if len(hits) < page:
                    return got
                after = hits[-1].index

        filters = [
            RecordFilter(),
            RecordFilter(execution_id="exec-2"),
            RecordFilter(execution_id="exec-1", tenant_id="acme"),
            RecordFilter(trace_id="trace-0", agent_id="risk-agent"),
            RecordFilter(tenant_id="globex", start_micros=1_020, end_micros=1_090),
            RecordFilter(start_micros=1_050, end_micros=1_060),
            RecordFilter(agent_id="training-agent", end_micros=1_030),
            RecordFilter(execution_id="nope"),
        ]
        for f in filters:
            for page in (1, 7, 1000):
                assert paged(f, page) == brute(f), (f, page)
    finally:
        log.close()
    # Closing indexed everything; a lost index is rebuilt from the entries on open.
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'indexed_size'").fetchone()[0] == "203"
        db.execute("DELETE FROM attr_index WHERE idx >= 100")
        db.execute("UPDATE meta SET value = '100' WHERE key = 'indexed_size'")
    log = AuditLog.open(path, signer=signer, config=config)
    try:
        assert log._indexed == 203
        assert [h.index for h in log.query(RecordFilter(execution_id="exec-3"), limit=1000)] == [
            i for i, a in enumerate(attrs) if a.execution_id == "exec-3"
        ]
    finally:
        log.close()
    assert verify_log(path, signer.public_key).ok
