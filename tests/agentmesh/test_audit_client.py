"""The audit recorder's durable outbox: nothing is lost, order holds, a bad record never blocks the rest.

A fake AuditService runs in-process on a loopback port; it can be "down"
(UNAVAILABLE) and can refuse chosen records for good (INVALID_ARGUMENT
naming the record, as the real service does).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentmesh import errors, telemetry, transport
from agentmesh.audit_client import MAX_BACKOFF_S, AuditOutbox, AuditRecorder, outbox_path
from agentmesh.unimplemented import unimplemented_servicer
from agentmesh.v1 import audit_service_pb2 as pb
from agentmesh.v1 import audit_service_pb2_grpc as pb_grpc

KILL = pb.AUDIT_EVENT_TYPE_KILL_SWITCH_CHANGED
DENIED = pb.AUDIT_EVENT_TYPE_ACCESS_DENIED


class FakeAudit(unimplemented_servicer(pb_grpc.AuditServiceServicer)):  # type: ignore[misc]
    """Keeps what it is given; ``down`` answers UNAVAILABLE; ``refuse`` picks records it refuses for good."""

    def __init__(self) -> None:
        self.records: list[pb.AuditRecord] = []
        self.down = False
        self.refuse: Callable[[pb.AuditRecord], bool] = lambda rec: False
        self.name_index = True
        self.batches: list[int] = []
        self.lock = threading.Lock()

    def _take(self, records: list[pb.AuditRecord], context: grpc.ServicerContext, batch: bool) -> None:
        if self.down:
            errors.abort(context, errors.Unavailable("audit is down", reason="LOG_CLOSED"))
        for i, rec in enumerate(records):
            if self.refuse(rec):
                field = (f"records[{i}].tenant_id" if batch else "record.tenant_id") if self.name_index else None
                errors.abort(context, errors.InvalidArgument("bad tenant", reason="INVALID_FIELD", field=field))
        with self.lock:
            self.records.extend(records)
            if batch:
                self.batches.append(len(records))

    def AppendRecord(self, request: pb.AppendRecordRequest, context: grpc.ServicerContext) -> Any:
        self._take([request.record], context, batch=False)
        return pb.AppendRecordResponse(index=len(self.records) - 1)

    def AppendRecords(self, request: pb.AppendRecordsRequest, context: grpc.ServicerContext) -> Any:
        self._take(list(request.records), context, batch=True)
        return pb.AppendRecordsResponse(results=[pb.AppendRecordResponse() for _ in request.records])

    def codes(self) -> list[str]:
        """Each record's first reason code, in log order."""
        with self.lock:
            return [r.reason_codes[0] if r.reason_codes else "" for r in self.records]


@contextlib.contextmanager
def serving(servicer: Any, add: Callable[[Any, grpc.Server], None] = pb_grpc.add_AuditServiceServicer_to_server
            ) -> Iterator[grpc.Channel]:
    """``servicer`` on a loopback port (an AuditService unless ``add`` registers another service), and a
    channel to it (both closed after)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    add(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield channel
    finally:
        channel.close()
        server.stop(None)


@pytest.fixture()
def audit() -> Iterator[tuple[FakeAudit, grpc.Channel]]:
    fake = FakeAudit()
    with serving(fake) as channel:
        yield fake, channel


def _recorder(channel: grpc.Channel, path: Path, *, start: bool = True) -> AuditRecorder:
    recorder = AuditRecorder(channel, timeout_s=2.0, outbox=AuditOutbox(path))
    if start:
        recorder.start()
    return recorder


def _eventually(check: Callable[[], bool], timeout_s: float = MAX_BACKOFF_S + 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_outbox_path_is_per_role(tmp_path: Path) -> None:
    assert outbox_path(tmp_path, "policy") == tmp_path / "policy-audit-outbox.db"


def test_appends_at_once_when_audit_answers(audit: tuple[FakeAudit, grpc.Channel], tmp_path: Path) -> None:
    fake, channel = audit
    recorder = _recorder(channel, tmp_path / "o.db")
    try:
        recorder.record_durably(KILL, reason_codes=["first"])
        assert fake.codes() == ["first"]  # before record_durably returned
        assert recorder.pending() == 0
        assert not any(c.startswith("queued_at=") for c in fake.records[0].reason_codes)
    finally:
        recorder.close()


def test_queued_while_audit_is_down_then_delivered_in_order(audit: tuple[FakeAudit, grpc.Channel],
                                                            tmp_path: Path) -> None:
    fake, channel = audit
    fake.down = True
    recorder = _recorder(channel, tmp_path / "o.db")
    try:
        for n in range(5):
            recorder.record_durably(KILL, reason_codes=[f"r{n}"])
        assert recorder.pending() == 5
        time.sleep(0.5)  # retried meanwhile, nothing deleted
        assert recorder.pending() == 5 and fake.records == []
        fake.down = False
        _eventually(lambda: recorder.pending() == 0)
        assert fake.codes() == ["r0", "r1", "r2", "r3", "r4"]
        assert all(any(c.startswith("queued_at=") for c in r.reason_codes) for r in fake.records)
        # While records wait, a new one queues behind them instead of overtaking.
        fake.down = True
        recorder.record_durably(KILL, reason_codes=["r5"])
        fake.down = False
        recorder.record_durably(KILL, reason_codes=["r6"])
        assert recorder.flush(MAX_BACKOFF_S + 3.0)
        assert fake.codes()[-2:] == ["r5", "r6"]
    finally:
        recorder.close()


def test_records_made_together_go_in_one_append_or_queue_in_their_order(audit: tuple[FakeAudit, grpc.Channel],
                                                                        tmp_path: Path) -> None:
    fake, channel = audit
    recorder = _recorder(channel, tmp_path / "o.db")
    try:
        recorder.record_all_durably([(KILL, {"reason_codes": ["a"]}), (KILL, {"reason_codes": ["b"]})])
        assert fake.codes() == ["a", "b"] and fake.batches == [2]  # one call, before it returned
        fake.down = True
        recorder.record_all_durably([(KILL, {"reason_codes": ["c"]}), (KILL, {"reason_codes": ["d"]})])
        assert recorder.pending() == 2 and fake.codes() == ["a", "b"]
        recorder.record_durably(KILL, reason_codes=["e"])  # queued behind them
        fake.down = False
        assert recorder.flush(MAX_BACKOFF_S + 3.0)
        assert fake.codes() == ["a", "b", "c", "d", "e"]
        assert all(any(c.startswith("queued_at=") for c in r.reason_codes) for r in fake.records[2:])
    finally:
        recorder.close()


def test_records_made_together_without_an_outbox_are_refused_when_audit_is_down(
        audit: tuple[FakeAudit, grpc.Channel]) -> None:
    fake, channel = audit
    fake.down = True
    recorder = AuditRecorder(channel, timeout_s=2.0)
    with pytest.raises(errors.Unavailable) as refused:
        recorder.record_all_durably([(KILL, {"reason_codes": ["a"]}), (KILL, {"reason_codes": ["b"]})])
    assert refused.value.reason == "AUDIT_UNAVAILABLE" and fake.records == []


def test_delivery_resumes_within_the_backoff_cap(audit: tuple[FakeAudit, grpc.Channel], tmp_path: Path) -> None:
    fake, channel = audit
    fake.down = True
    recorder = _recorder(channel, tmp_path / "o.db")
    try:
        recorder.record_durably(KILL, reason_codes=["late"])
        time.sleep(MAX_BACKOFF_S + 1.0)  # long enough for the backoff to reach its cap
        fake.down = False
        back = time.monotonic()
        _eventually(lambda: recorder.pending() == 0)
        assert time.monotonic() - back <= MAX_BACKOFF_S + 0.5
    finally:
        recorder.close()


def test_records_keep_the_ids_of_the_moment_they_happened(audit: tuple[FakeAudit, grpc.Channel],
                                                          tmp_path: Path) -> None:
    fake, channel = audit
    fake.down = True
    recorder = _recorder(channel, tmp_path / "o.db")
    try:
        with telemetry.mesh_ids(execution_id="exec-1", correlation_id="corr-1"):
            recorder.record_durably(KILL, reason_codes=["x"])
        fake.down = False
        assert recorder.flush(MAX_BACKOFF_S + 3.0)
        assert (fake.records[0].execution_id, fake.records[0].correlation_id) == ("exec-1", "corr-1")
    finally:
        recorder.close()


def test_outbox_survives_a_restart_of_the_process(audit: tuple[FakeAudit, grpc.Channel], tmp_path: Path) -> None:
    fake, channel = audit
    fake.down = True
    path = tmp_path / "policy-audit-outbox.db"
    first = _recorder(channel, path)
    for n in range(3):
        first.record_durably(KILL, reason_codes=[f"before-{n}"])
    first.close()  # the process stops with three records undelivered
    assert fake.records == []
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM outbox").fetchone()[0] == 3

    fake.down = False
    second = _recorder(channel, path)  # a new process, the same file
    try:
        assert second.flush(MAX_BACKOFF_S + 3.0)
        assert fake.codes() == ["before-0", "before-1", "before-2"]
    finally:
        second.close()


def test_a_record_audit_refuses_for_good_is_kept_and_does_not_block_the_rest(
        audit: tuple[FakeAudit, grpc.Channel], tmp_path: Path) -> None:
    fake, channel = audit
    fake.down = True
    fake.refuse = lambda rec: rec.tenant_id == "bad"
    path = tmp_path / "o.db"
    recorder = _recorder(channel, path)
    try:
        recorder.record_durably(KILL, reason_codes=["one"], tenant_id="acme")
        recorder.record_durably(KILL, reason_codes=["two"], tenant_id="bad", execution_id="exec-9")
        recorder.record_durably(KILL, reason_codes=["three"], tenant_id="acme")
        fake.down = False
        assert recorder.flush(MAX_BACKOFF_S + 3.0)
        assert fake.codes() == ["one", "AUDIT_RECORD_REFUSED", "three"]
        substitute = fake.records[1]
        assert substitute.event_type == KILL and substitute.execution_id == "exec-9"
        assert substitute.tenant_id == ""  # the field audit refused is left out
        assert "audit_reason=INVALID_FIELD" in substitute.reason_codes
        assert "audit_field=tenant_id" in substitute.reason_codes
        assert recorder.refused() == 1
        with sqlite3.connect(path) as conn:
            (blob,) = conn.execute("SELECT request FROM refused").fetchone()
        kept = pb.AppendRecordRequest.FromString(blob).record
        assert (kept.tenant_id, kept.reason_codes[0]) == ("bad", "two")
    finally:
        recorder.close()


def test_a_refusal_that_names_no_record_is_narrowed_down(audit: tuple[FakeAudit, grpc.Channel],
                                                         tmp_path: Path) -> None:
    fake, channel = audit
    fake.down = True
    fake.name_index = False
    fake.refuse = lambda rec: rec.reason_codes[0] == "r2"
    recorder = _recorder(channel, tmp_path / "o.db")
    try:
        for n, tenant in enumerate(["a", "a", "bad", "a"]):
            recorder.record_durably(KILL, reason_codes=[f"r{n}"], tenant_id=tenant)
        fake.down = False
        assert recorder.flush(MAX_BACKOFF_S + 3.0)
        assert fake.codes() == ["r0", "r1", "AUDIT_RECORD_REFUSED", "r3"]
        assert recorder.refused() == 1
    finally:
        recorder.close()


def test_a_refused_substitute_is_kept_without_looping(audit: tuple[FakeAudit, grpc.Channel], tmp_path: Path) -> None:
    fake, channel = audit
    fake.down = True
    fake.refuse = lambda rec: True
    recorder = _recorder(channel, tmp_path / "o.db")
    try:
        recorder.record_durably(KILL, reason_codes=["doomed"])
        fake.down = False
        assert recorder.flush(MAX_BACKOFF_S + 3.0)
        assert fake.records == [] and recorder.refused() == 1
    finally:
        recorder.close()


def test_ids_audit_would_refuse_are_cleared_and_noted(audit: tuple[FakeAudit, grpc.Channel],
                                                      tmp_path: Path) -> None:
    fake, channel = audit
    recorder = _recorder(channel, tmp_path / "o.db")
    try:
        with telemetry.mesh_ids(correlation_id="c" * 600):
            recorder.record_durably(DENIED, reason_codes=["POLICY_DENIED"], tenant_id="ac\x00me")
        rec = fake.records[0]
        assert rec.correlation_id == "" and rec.tenant_id == ""
        assert rec.reason_codes[0] == "POLICY_DENIED"
        assert "correlation_id=invalid" in rec.reason_codes and "tenant_id=invalid" in rec.reason_codes
        assert any(c.startswith("correlation_id_sha256=") for c in rec.reason_codes)
    finally:
        recorder.close()


def test_the_denial_hook_never_loses_a_refusal(audit: tuple[FakeAudit, grpc.Channel], tmp_path: Path) -> None:
    fake, channel = audit
    fake.down = True
    recorder = _recorder(channel, tmp_path / "o.db")
    try:
        recorder.denial_hook()(transport.DeniedCall("/agentmesh.v1.SpecialistService/RunTask",
                                                    "spiffe://agentmesh.local/client/cli",
                                                    grpc.StatusCode.PERMISSION_DENIED, "CALLER_NOT_ALLOWED"))
        assert recorder.pending() == 1
        fake.down = False
        assert recorder.flush(MAX_BACKOFF_S + 3.0)
        assert fake.records[0].event_type == DENIED and fake.records[0].outcome == pb.AUDIT_OUTCOME_DENIED
        assert fake.codes() == ["CALLER_NOT_ALLOWED"]
    finally:
        recorder.close()


def test_without_an_outbox_a_failure_is_audit_unavailable(audit: tuple[FakeAudit, grpc.Channel]) -> None:
    fake, channel = audit
    fake.down = True
    recorder = AuditRecorder(channel, timeout_s=2.0)
    with pytest.raises(errors.Unavailable) as info:
        recorder.record_durably(KILL)
    assert info.value.reason == "AUDIT_UNAVAILABLE"


def test_an_outbox_that_cannot_write_is_audit_unavailable(audit: tuple[FakeAudit, grpc.Channel],
                                                          tmp_path: Path) -> None:
    fake, channel = audit
    fake.down = True
    path = tmp_path / "o.db"
    recorder = _recorder(channel, path, start=False)
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE outbox")  # stands in for a disk that refuses writes
    with pytest.raises(errors.Unavailable) as info:
        recorder.record_durably(KILL)
    assert info.value.reason == "AUDIT_UNAVAILABLE"
    recorder.close()


def test_only_one_process_delivers_a_shared_outbox(tmp_path: Path) -> None:
    a, b = AuditOutbox(tmp_path / "o.db"), AuditOutbox(tmp_path / "o.db")
    try:
        assert a.try_lock_delivery()
        assert not b.try_lock_delivery()
        a.close()
        assert b.try_lock_delivery()
    finally:
        b.close()
