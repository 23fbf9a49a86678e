"""The health monitor: checks decide SERVING, reasons travel with the answer, and it recovers by itself."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from agentmesh import health

SERVICES = ("agentmesh.v1.PolicyService",)


@pytest.fixture()
def server() -> Iterator[tuple[health.HealthServicer, grpc.Channel, grpc.Server]]:
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.add_to_server(srv, SERVICES)
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield servicer, channel, srv
    finally:
        channel.close()
        srv.stop(None)


def _status(servicer: health.HealthServicer, service: str = "") -> int:
    return servicer.Check(health_pb2.HealthCheckRequest(service=service), _Context()).status  # type: ignore[no-any-return]


class _Context:
    def set_trailing_metadata(self, md: object) -> None:
        self.md = md

    def abort(self, code: object, details: str) -> None:
        raise AssertionError(details)


def test_not_serving_until_the_monitor_has_run(server: tuple[health.HealthServicer, grpc.Channel, grpc.Server]) -> None:
    servicer, channel, _ = server
    assert health.probe(channel, 2) == ("NOT_SERVING", "")
    monitor = health.HealthMonitor(servicer, SERVICES)
    monitor.add("nothing", lambda: None)
    assert monitor.run_once() == []
    assert health.probe(channel, 2) == ("SERVING", "")
    assert _status(servicer, SERVICES[0]) == health_pb2.HealthCheckResponse.SERVING


def test_a_failing_check_flips_every_service_and_its_reason_travels(
        server: tuple[health.HealthServicer, grpc.Channel, grpc.Server]) -> None:
    servicer, channel, _ = server
    broken = {"now": True}
    monitor = health.HealthMonitor(servicer, SERVICES)
    monitor.add("database policy.db", lambda: "file is not a database" if broken["now"] else None)
    monitor.add("fine", lambda: None)
    assert monitor.run_once() == ["database policy.db: file is not a database"]
    assert health.probe(channel, 2) == ("NOT_SERVING", "database policy.db: file is not a database")
    assert _status(servicer, SERVICES[0]) == health_pb2.HealthCheckResponse.NOT_SERVING
    broken["now"] = False  # the cause goes away: the next round serves again
    monitor.run_once()
    assert health.probe(channel, 2) == ("SERVING", "")


def test_tolerated_failures_and_raising_checks(server: tuple[health.HealthServicer, grpc.Channel, grpc.Server]) -> None:
    servicer, _, _ = server
    monitor = health.HealthMonitor(servicer, SERVICES)
    monitor.add("peer policy", lambda: "UNREACHABLE (UNAVAILABLE)", tolerate=1)
    assert monitor.run_once() == []  # one miss over the network is not an outage
    assert monitor.run_once() == ["peer policy: UNREACHABLE (UNAVAILABLE)"]

    def boom() -> str | None:
        raise RuntimeError("bug")

    other = health.HealthMonitor(servicer, SERVICES)
    other.add("buggy", boom)
    assert other.run_once() == ["buggy: check raised RuntimeError('bug')"]


def test_the_thread_recovers_by_itself_and_stop_reports_not_serving(
        server: tuple[health.HealthServicer, grpc.Channel, grpc.Server]) -> None:
    import time

    servicer, channel, _ = server
    broken = {"now": True}
    monitor = health.HealthMonitor(servicer, SERVICES, interval_s=0.02)
    monitor.add("writer", lambda: "failed" if broken["now"] else None)
    monitor.start()
    try:
        assert health.probe(channel, 2)[0] == "NOT_SERVING"  # already true at the first answer
        broken["now"] = False
        deadline = time.monotonic() + 5
        while health.probe(channel, 2)[0] != "SERVING":
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        monitor.stop()
    assert health.probe(channel, 2) == ("NOT_SERVING", "stopping")


def test_reasons_are_printable_ascii(server: tuple[health.HealthServicer, grpc.Channel, grpc.Server]) -> None:
    servicer, channel, _ = server
    monitor = health.HealthMonitor(servicer, SERVICES)
    monitor.add("disk", lambda: "permissão negada\nline two" + "x" * 2000)
    monitor.run_once()
    status, reason = health.probe(channel, 2)
    assert status == "NOT_SERVING" and reason.isascii() and "\n" not in reason
    assert reason.startswith("disk: permiss") and len(reason) <= health.MAX_REASON_CHARS


def test_peer_check(server: tuple[health.HealthServicer, grpc.Channel, grpc.Server]) -> None:
    servicer, channel, srv = server
    check = health.peer_check(lambda: channel, timeout_s=1)
    monitor = health.HealthMonitor(servicer, SERVICES)
    monitor.add("peer audit", lambda: "UNREACHABLE (UNAVAILABLE)")
    monitor.run_once()
    assert check() == "NOT_SERVING (peer audit: UNREACHABLE (UNAVAILABLE))"
    monitor = health.HealthMonitor(servicer, SERVICES)
    monitor.run_once()
    assert check() is None
    srv.stop(None)
    result = check()
    assert result is not None and result.startswith("UNREACHABLE")


def test_sqlite_check(tmp_path: Path) -> None:
    good = tmp_path / "good.db"
    with sqlite3.connect(good) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE t (x)")
    assert health.sqlite_check(good)() is None

    missing = tmp_path / "missing.db"
    assert health.sqlite_check(missing)() == f"{missing} is missing"
    assert not missing.exists()  # the check never creates the file

    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"garbage" * 1000)
    reason = health.sqlite_check(garbage)()
    assert reason is not None and "not a database" in reason

    empty = tmp_path / "empty.db"
    empty.touch()
    assert health.sqlite_check(empty)() == f"{empty} holds no tables"

    folder = tmp_path / "folder.db"
    folder.mkdir()
    assert health.sqlite_check(folder)() == f"{folder} is missing"

    # Another writer holding the lock is someone using the database, not a broken one.
    writer = sqlite3.connect(good, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        assert health.sqlite_check(good)() is None
    finally:
        writer.execute("ROLLBACK")
        writer.close()
