"""The audit log's writer after a storage failure: it refuses, says why, retries, and comes back by itself."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from audit_svc.errors import LogClosedError, StorageError
from audit_svc.log_store import AuditLog, AuditLogConfig
from audit_svc.verify import verify_log

OpenLog = Callable[..., AuditLog]
FAST = AuditLogConfig(recovery_interval_s=0.05, index_every_entries=10**6, index_every_micros=10**12)


def record(i: int) -> bytes:
    return f"record index={i}".encode()


def _full_disk(path: Path) -> None:
    """Every write of the log fails inside SQLite, as on a full disk: entries, the index catch-up and the probe."""
    with sqlite3.connect(path) as db:
        for table in ("entries", "meta", "attr_index"):
            db.execute(f"CREATE TRIGGER full_{table} BEFORE INSERT ON {table}"
                       " BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")


def _disk_freed(path: Path) -> None:
    with sqlite3.connect(path) as db:
        for table in ("entries", "meta", "attr_index"):
            db.execute(f"DROP TRIGGER full_{table}")


def _wait(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_a_full_disk_fails_the_writer_and_it_comes_back_when_space_is_freed(open_log: OpenLog) -> None:
    log = open_log(config=FAST)
    for _ in range(5):
        log.append(record)
    assert log._indexed < log.size()  # the catch-up of the query index must write too
    assert log.health() is None
    _full_disk(log.path)

    with pytest.raises(StorageError):
        log.append(record)
    reason = log.health()
    assert reason is not None and "disk is full" in reason and "retrying" in reason
    # While failed every append is refused at once, naming the cause; reads go on.
    with pytest.raises(LogClosedError) as info:
        log.append(record)
    assert info.value.reason == "LOG_WRITER_FAILED" and "disk is full" in str(info.value)
    assert log.size() == 5 and log.entry(4) == record(4)
    time.sleep(0.2)  # several retries fail meanwhile; the writer goes on trying
    assert log.health() is not None and log._writer.is_alive()

    _disk_freed(log.path)
    _wait(lambda: log.health() is None)
    assert log.append(record).index == 5  # no gap: the refused appends used no index
    assert log.checkpoint().tree_size == 6
    assert verify_log(log.path, log.signer.public_key).ok


def test_an_append_after_the_cause_is_gone_is_stored_without_waiting_for_the_timer(open_log: OpenLog) -> None:
    log = open_log(config=AuditLogConfig(recovery_interval_s=30.0))
    log.append(record)
    _full_disk(log.path)
    with pytest.raises(StorageError):
        log.append(record)
    assert log.health() is not None
    _disk_freed(log.path)
    time.sleep(0.15)  # past the on-demand retry spacing, far from the 30 s timer
    assert log.append(record).index == 1
    assert log.health() is None


def test_a_log_file_removed_while_open_is_refused_until_the_same_log_is_back(
        open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log(config=FAST)
    for _ in range(3):
        log.append(record)
    keep = tmp_path / "kept.db"
    os.link(log.path, keep)
    log.path.unlink()  # appends would go to a file nobody can open again

    reason = log.health()
    assert reason is not None and "LOG_REPLACED" in reason
    with pytest.raises(LogClosedError) as info:
        log.append(record)
    assert info.value.reason == "LOG_WRITER_FAILED"
    time.sleep(0.2)
    assert log.health() is not None and not log.path.exists()  # nothing is created in its place

    os.link(keep, log.path)
    _wait(lambda: log.health() is None)
    assert log.append(record).index == 3
    assert verify_log(log.path, log.signer.public_key).ok


def test_health_after_close(open_log: OpenLog) -> None:
    log = open_log()
    log.close()
    assert log.health() == "the audit log is closed"
