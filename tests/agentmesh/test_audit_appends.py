"""Concurrent appends go to audit together, and each caller still gets its own answer.

A fake AuditService runs in-process on a loopback port. Its first call can be
held, so that the appends made meanwhile are waiting when it is released.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from agentmesh import errors
from agentmesh.audit_appends import GroupAppender
from agentmesh.unimplemented import unimplemented_servicer
from agentmesh.v1 import audit_service_pb2 as pb
from agentmesh.v1 import audit_service_pb2_grpc as pb_grpc

from .test_audit_client import serving

KILL = pb.AUDIT_EVENT_TYPE_KILL_SWITCH_CHANGED


class HeldAudit(unimplemented_servicer(pb_grpc.AuditServiceServicer)):  # type: ignore[misc]
    """Numbers records in the order it takes them; ``hold`` keeps the first call waiting until set."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.taken = 0
        self.hold = threading.Event()
        self.held = threading.Event()
        self.down = False
        self.refused_code = "bad"
        self.lock = threading.Lock()

    def _take(self, records: list[pb.AuditRecord], context: grpc.ServicerContext, method: str) -> list[int]:
        with self.lock:
            self.calls.append((method, len(records)))
            first = len(self.calls) == 1
        if first:
            self.held.set()
            self.hold.wait(10)
        if self.down:
            errors.abort(context, errors.Unavailable("audit is down", reason="LOG_CLOSED"))
        for i, rec in enumerate(records):
            if self.refused_code in rec.reason_codes:
                field = f"records[{i}].reason_codes" if method == "AppendRecords" else "record.reason_codes"
                errors.abort(context, errors.InvalidArgument("refused", reason="INVALID_FIELD", field=field))
        with self.lock:
            start = self.taken
            self.taken += len(records)
        return list(range(start, start + len(records)))

    def AppendRecord(self, request: pb.AppendRecordRequest, context: grpc.ServicerContext) -> Any:
        (index,) = self._take([request.record], context, "AppendRecord")
        return pb.AppendRecordResponse(index=index)

    def AppendRecords(self, request: pb.AppendRecordsRequest, context: grpc.ServicerContext) -> Any:
        indexes = self._take(list(request.records), context, "AppendRecords")
        return pb.AppendRecordsResponse(results=[pb.AppendRecordResponse(index=i) for i in indexes])


@pytest.fixture()
def audit() -> Iterator[tuple[HeldAudit, GroupAppender]]:
    fake = HeldAudit()
    with serving(fake) as channel:
        stub = pb_grpc.AuditServiceStub(channel)
        try:
            yield fake, GroupAppender(lambda: stub, senders=1)
        finally:
            fake.hold.set()


def _record(code: str) -> pb.AuditRecord:
    return pb.AuditRecord(event_type=KILL, reason_codes=[code])


def _held_then(fake: HeldAudit, appender: GroupAppender, codes: list[str]) -> list[futures.Future[Any]]:
    """The first append held at audit; ``codes`` appended while it is; then released."""
    first = appender.submit(_record("first"), timeout_s=10)
    assert fake.held.wait(5)
    waiting = [appender.submit(_record(c), timeout_s=10) for c in codes]
    fake.hold.set()
    return [first, *waiting]


def test_a_lone_append_is_one_append_record_call(audit: tuple[HeldAudit, GroupAppender]) -> None:
    fake, appender = audit
    fake.hold.set()
    assert appender.append(_record("alone"), timeout_s=5).index == 0
    assert fake.calls == [("AppendRecord", 1)]


def test_appends_made_while_a_call_is_in_flight_go_in_one_call(audit: tuple[HeldAudit, GroupAppender]) -> None:
    fake, appender = audit
    answers = _held_then(fake, appender, [f"r{i}" for i in range(10)])
    assert [a.result(5).index for a in answers] == list(range(11))
    assert fake.calls == [("AppendRecord", 1), ("AppendRecords", 10)]
    assert appender.batches == 2


def test_a_refused_record_fails_only_its_own_caller(audit: tuple[HeldAudit, GroupAppender]) -> None:
    fake, appender = audit
    first, good1, bad, good2 = _held_then(fake, appender, ["good1", "bad", "good2"])
    assert first.result(5).index == 0
    # The batch was refused as a whole; each was then asked alone.
    assert (good1.result(5).index, good2.result(5).index) == (1, 2)
    err = bad.exception(5)
    assert isinstance(err, errors.InvalidArgument) and err.field == "record.reason_codes"
    assert fake.calls == [("AppendRecord", 1), ("AppendRecords", 3), ("AppendRecord", 1), ("AppendRecord", 1),
                          ("AppendRecord", 1)]


def test_a_batch_audit_could_not_take_fails_every_caller_as_unavailable(
        audit: tuple[HeldAudit, GroupAppender]) -> None:
    fake, appender = audit
    fake.down = True
    answers = _held_then(fake, appender, ["a", "b"])
    assert all(isinstance(a.exception(5), errors.Unavailable) for a in answers)
    assert fake.calls == [("AppendRecord", 1), ("AppendRecords", 2)]


def test_an_append_that_waited_past_its_deadline_is_not_sent(audit: tuple[HeldAudit, GroupAppender]) -> None:
    fake, appender = audit
    first = appender.submit(_record("first"), timeout_s=10)
    assert fake.held.wait(5)
    late = appender.submit(_record("late"), timeout_s=0.05)
    time.sleep(0.2)
    fake.hold.set()
    assert first.result(5).index == 0
    err = late.exception(5)
    assert isinstance(err, errors.DeadlineExceeded) and err.reason == "AUDIT_TIMEOUT"
    assert fake.calls == [("AppendRecord", 1)]
    with pytest.raises(errors.DeadlineExceeded):
        appender.append(_record("never"), timeout_s=-1)


def test_records_appended_as_a_unit_go_together_at_consecutive_indexes(
        audit: tuple[HeldAudit, GroupAppender]) -> None:
    fake, appender = audit
    first = appender.submit(_record("first"), timeout_s=10)
    assert fake.held.wait(5)
    single = appender.submit(_record("single"), timeout_s=10)
    unit = appender.submit_all([_record("decision"), _record("outcome")], timeout_s=10)
    fake.hold.set()
    assert first.result(5).index == 0 and single.result(5).index == 1
    assert [r.index for r in unit.result(5)] == [2, 3]
    assert fake.calls == [("AppendRecord", 1), ("AppendRecords", 3)]


def test_a_unit_with_a_refused_record_is_refused_whole(audit: tuple[HeldAudit, GroupAppender]) -> None:
    fake, appender = audit
    fake.hold.set()
    with pytest.raises(errors.InvalidArgument):
        appender.append_all([_record("fine"), _record("bad")], timeout_s=5)
    assert fake.taken == 0
    assert [r.index for r in appender.append_all([_record("a"), _record("b")], timeout_s=5)] == [0, 1]


def test_with_nothing_in_flight_the_caller_sends_from_its_own_thread(
        audit: tuple[HeldAudit, GroupAppender]) -> None:
    fake, appender = audit
    fake.hold.set()
    stub = appender._stub()
    threads: list[str] = []

    class Watching:
        def __getattr__(self, name: str) -> Any:
            threads.append(threading.current_thread().name)
            return getattr(stub, name)

    watching = GroupAppender(lambda: Watching())  # type: ignore[arg-type, return-value]
    assert watching.append(_record("alone"), timeout_s=5).index == 0
    assert threads == [threading.current_thread().name]
    # Not waited for: always through a sender thread.
    assert watching.submit(_record("later"), timeout_s=5).result(5).index == 1
    assert threads[1].startswith("audit-append-")


def test_records_queued_each_on_its_own_go_in_one_call_with_one_answer_each(
        audit: tuple[HeldAudit, GroupAppender]) -> None:
    fake, appender = audit
    fake.hold.set()
    answers = appender.submit_each([_record("a"), _record("b"), _record("c")], timeout_s=5)
    assert [a.result(5).index for a in answers] == [0, 1, 2]
    assert fake.calls == [("AppendRecords", 3)]


def test_records_queued_each_on_its_own_are_refused_one_by_one(audit: tuple[HeldAudit, GroupAppender]) -> None:
    fake, appender = audit
    fake.hold.set()
    good, bad, other = appender.submit_each([_record("good"), _record("bad"), _record("other")], timeout_s=5)
    assert (good.result(5).index, other.result(5).index) == (0, 1)
    err = bad.exception(5)
    assert isinstance(err, errors.InvalidArgument) and err.field == "record.reason_codes"
    assert fake.calls == [("AppendRecords", 3), ("AppendRecord", 1), ("AppendRecord", 1), ("AppendRecord", 1)]
