"""The supervisor's recording rules: a stage's delegations gathered into one append (``Gathering``)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from agentmesh import errors
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from supervisor_svc.recording import Gathering

DELEGATED = audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED


class Audit:
    """Audit in memory: ``calls`` lists each call as the task ids it carried; ``refuse``: task ids refused."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.down = False
        self.refuse: set[str] = set()
        self.lock = threading.Lock()

    def record(self, event_type: int, **fields: Any) -> audit_pb2.AppendRecordResponse:
        return self.append_each([self.build(event_type, **fields)])[0].result()

    def record_durably(self, event_type: int, **fields: Any) -> None:
        self.record(event_type, **fields)

    def record_all(self, records: Any) -> list[audit_pb2.AppendRecordResponse]:
        return [f.result() for f in self.append_each([self.build(t, **f) for t, f in records])]

    def build(self, event_type: int, **fields: Any) -> audit_pb2.AuditRecord:
        return audit_pb2.AuditRecord(event_type=event_type, **fields)

    def append_each(self, records: Any) -> list[Future[audit_pb2.AppendRecordResponse]]:
        with self.lock:
            self.calls.append([r.task_id for r in records])
        answers = []
        for record in records:
            answer: Future[audit_pb2.AppendRecordResponse] = Future()
            if self.down:
                answer.set_exception(errors.Unavailable("audit is down", reason="UNAVAILABLE"))
            elif record.task_id in self.refuse:
                answer.set_exception(errors.InvalidArgument("refused", reason="INVALID_FIELD", field="record.x"))
            else:
                answer.set_result(audit_pb2.AppendRecordResponse())
            answers.append(answer)
        return answers


def _delegate_all(gathering: Gathering, task_ids: list[str]) -> dict[str, BaseException | None]:
    """Each task id records its delegation from a thread of its own; what each call raised (None: durable)."""
    def one(task_id: str) -> BaseException | None:
        try:
            gathering.governing(task_id, DELEGATED, task_id=task_id)
        except errors.MeshError as err:
            return err
        return None

    with ThreadPoolExecutor(len(task_ids)) as pool:
        return dict(zip(task_ids, pool.map(one, task_ids), strict=True))


def test_the_delegations_of_a_stage_go_in_one_call_each_durable_before_its_caller_goes_on() -> None:
    audit = Audit()
    gathering = Gathering(audit, ["t2", "t3", "t4"], wait_s=10)  # no waiting past the last of them
    assert _delegate_all(gathering, ["t2", "t3", "t4"]) == {"t2": None, "t3": None, "t4": None}
    assert len(audit.calls) == 1 and sorted(audit.calls[0]) == ["t2", "t3", "t4"]


def test_a_task_that_leaves_before_its_delegation_holds_back_none_of_the_others() -> None:
    audit = Audit()
    gathering = Gathering(audit, ["t2", "t3", "t4"], wait_s=30)  # a wait this long would fail the test's timeout
    gathering.leave("t4")
    assert _delegate_all(gathering, ["t2", "t3"]) == {"t2": None, "t3": None}
    assert len(audit.calls) == 1 and sorted(audit.calls[0]) == ["t2", "t3"]


def test_the_last_member_leaving_sends_what_the_others_handed_in() -> None:
    audit = Audit()
    gathering = Gathering(audit, ["t2", "t3"], wait_s=30)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(gathering.governing, "t2", DELEGATED, task_id="t2")
        time.sleep(0.1)  # t2 is waiting for t3
        gathering.leave("t3")
        assert waiting.result(5) is None
    assert audit.calls == [["t2"]]


def test_a_late_member_does_not_hold_back_the_others_and_records_alone() -> None:
    audit = Audit()
    gathering = Gathering(audit, ["t2", "t3", "t4"], wait_s=0.05)
    assert _delegate_all(gathering, ["t2", "t3"]) == {"t2": None, "t3": None}  # t4 has not come yet
    assert len(audit.calls) == 1 and sorted(audit.calls[0]) == ["t2", "t3"]
    gathering.governing("t4", DELEGATED, task_id="t4")
    assert audit.calls[1:] == [["t4"]]


def test_a_non_member_or_a_second_record_of_a_member_records_alone() -> None:
    audit = Audit()
    gathering = Gathering(audit, ["t2"], wait_s=10)
    gathering.governing("t2", DELEGATED, task_id="t2")
    gathering.governing("t2", DELEGATED, task_id="t2")  # a retry's delegation
    gathering.governing("h1", DELEGATED, task_id="h1")
    assert audit.calls == [["t2"], ["t2"], ["h1"]]


def test_with_audit_down_every_member_is_refused_audit_unavailable() -> None:
    audit = Audit()
    audit.down = True
    gathering = Gathering(audit, ["t2", "t3"], wait_s=10)
    raised = _delegate_all(gathering, ["t2", "t3"])
    assert all(isinstance(err, errors.Unavailable) and err.reason == "AUDIT_UNAVAILABLE" for err in raised.values())


def test_a_refused_record_refuses_only_its_own_task() -> None:
    audit = Audit()
    audit.refuse = {"t3"}
    gathering = Gathering(audit, ["t2", "t3", "t4"], wait_s=10)
    raised = _delegate_all(gathering, ["t2", "t3", "t4"])
    assert raised["t2"] is None and raised["t4"] is None
    assert isinstance(raised["t3"], errors.Unavailable) and raised["t3"].reason == "AUDIT_UNAVAILABLE"


def test_a_recorder_that_fails_outright_refuses_every_member_and_leaves_none_waiting() -> None:
    class Broken(Audit):
        def append_each(self, records: Any) -> list[Future[audit_pb2.AppendRecordResponse]]:
            raise RuntimeError("channel closed")

    gathering = Gathering(Broken(), ["t2", "t3"], wait_s=10)
    raised = _delegate_all(gathering, ["t2", "t3"])
    assert all(isinstance(err, errors.Unavailable) for err in raised.values())


def test_an_answer_that_never_comes_is_a_refusal_not_a_hang() -> None:
    class Silent(Audit):
        def append_each(self, records: Any) -> list[Future[audit_pb2.AppendRecordResponse]]:
            return [Future() for _ in records]

    gathering = Gathering(Silent(), ["t2"], wait_s=10, answer_s=0.05)
    with pytest.raises(errors.Unavailable) as raised:
        gathering.governing("t2", DELEGATED, task_id="t2")
    assert raised.value.reason == "AUDIT_UNAVAILABLE"


class Stored(Audit):
    """Audit in memory that also lists, in ``events``, each store and each append in the order they came."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    def store(self) -> None:
        with self.lock:
            self.events.append("store")

    def append_each(self, records: Any) -> list[Future[audit_pb2.AppendRecordResponse]]:
        with self.lock:
            self.events.append("append " + " ".join(sorted(r.task_id for r in records)))
        return super().append_each(records)


def test_the_members_are_stored_once_before_their_append_not_once_each() -> None:
    audit = Stored()
    gathering = Gathering(audit, ["t2", "t3", "t4"], wait_s=10, store=audit.store)
    assert _delegate_all(gathering, ["t2", "t3", "t4"]) == {"t2": None, "t3": None, "t4": None}
    assert audit.events == ["store", "append t2 t3 t4"]


def test_a_record_that_goes_alone_is_stored_first_too() -> None:
    audit = Stored()
    gathering = Gathering(audit, ["t2", "t3"], wait_s=0.05, store=audit.store)
    assert _delegate_all(gathering, ["t2"]) == {"t2": None}  # t3 late: t2 went without it
    gathering.governing("t3", DELEGATED, task_id="t3")  # the late member
    gathering.governing("t2", DELEGATED, task_id="t2")  # a retry's delegation
    gathering.governing("h1", DELEGATED, task_id="h1")  # not a member: a handoff's
    assert audit.events == ["store", "append t2", "store", "append t3", "store", "append t2", "store", "append h1"]


def test_a_store_that_fails_appends_nothing_and_every_member_raises_its_error() -> None:
    audit = Stored()

    def broken() -> None:
        raise RuntimeError("disk full")

    gathering = Gathering(audit, ["t2", "t3"], wait_s=10, store=broken)
    raised: dict[str, BaseException | None] = {}

    def one(task_id: str) -> None:
        try:
            gathering.governing(task_id, DELEGATED, task_id=task_id)
        except BaseException as err:  # noqa: BLE001 - what each member raised is the point
            raised[task_id] = err
        else:
            raised[task_id] = None

    threads = [threading.Thread(target=one, args=(t,)) for t in ("t2", "t3")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert audit.calls == []  # not appended: a delegation is never on the record before its stored task
    assert set(raised) == {"t2", "t3"}
    assert all(isinstance(err, RuntimeError) and str(err) == "disk full" for err in raised.values())
