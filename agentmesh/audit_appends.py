"""Appends to the audit service carried together: concurrent records go in one ``AppendRecords`` call.

Every process of the mesh appends records from many threads at once (one per
call it serves). Sent one RPC each, a governed analysis costs two dozen
round trips to audit, and the gRPC stack, not the log, is what the machine
spends its time on. :class:`GroupAppender` is the one path every append of
:class:`~agentmesh.audit_client.AuditRecorder` takes (the grouping itself is
:class:`agentmesh.call_groups.CallGroups`, shared with the policy decisions):

* a caller that waits for its record (:meth:`GroupAppender.append`) and finds
  fewer than :data:`SENDERS` calls to audit in flight and nothing waiting
  sends it from its own thread, at once. Otherwise the record waits until a
  call in flight ends, then goes, from the thread of the first caller
  waiting, with everything else waiting then, up to :data:`MAX_RECORDS`
  records / :data:`MAX_BYTES` bytes, in one ``AppendRecords`` call. Records
  queued without waiting (``submit``) go the same way from a sender thread.
  A record alone goes as ``AppendRecord``, so an idle mesh sends what it sent
  before, under the caller's own trace span;
* each caller gets its own answer once the audit service has made the batch
  durable (``AppendRecords`` answers after its one durable write, all or
  nothing), so the promise of each append is unchanged: durable when it
  returns, an error otherwise;
* a batch refused because of what is in it is not held against the other
  records: each is asked again alone, so a caller is only ever refused for
  its own record (and the error names ``record.<field>``, as an append of
  one does). A batch that failed for the transport's reasons (UNAVAILABLE,
  DEADLINE_EXCEEDED) fails each of its records with that error: nothing in
  the answer says anything about one record, and the callers fall back as
  they would for a call of their own (the outbox, or not acting);
* a batch is sent in the context of its first record (trace and mesh ids of
  the RPC); each record carries its own ids in its body regardless;
* :meth:`GroupAppender.submit_all` appends several records as one unit: they
  go in the same call, at consecutive indexes, all or none (a governed read's
  decision and outcome);
* :meth:`GroupAppender.submit_each` queues several records that are each a unit
  of their own at once, so they go in one call with one answer each (the
  delegations of a stage's tasks, gathered by their caller).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Final

import grpc

from agentmesh import errors
from agentmesh.call_groups import CallGroups, Unit
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc

__all__ = ["MAX_BYTES", "MAX_RECORDS", "SENDERS", "GroupAppender"]

MAX_RECORDS: Final = 200
"""Most records in one ``AppendRecords`` call (the service takes up to 1,000)."""
MAX_BYTES: Final = 1 << 20
"""Most encoded bytes of records in one call, well under gRPC's 4 MiB message limit."""
SENDERS: Final = 2
"""Calls to audit in flight at once from callers that wait (and sender threads for records sent on ahead);
what arrives meanwhile waits and goes together."""
_TRANSPORT_FAILURES: Final = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                        grpc.StatusCode.CANCELLED})

_Append = Unit[list[audit_pb2.AppendRecordResponse]]
"""One caller's unit: its records go in one call, and its answer is theirs, in order."""


def _unit(records: list[audit_pb2.AuditRecord], timeout_s: float) -> _Append:
    return Unit.of(records, timeout_s, size=sum(r.ByteSize() for r in records))


def _first(answers: Future[list[audit_pb2.AppendRecordResponse]]) -> Future[audit_pb2.AppendRecordResponse]:
    """The answer of a unit of one record, as a future of that record's own answer."""
    one: Future[audit_pb2.AppendRecordResponse] = Future()

    def settle(done: Future[list[audit_pb2.AppendRecordResponse]]) -> None:
        failure = done.exception()
        if failure is not None:
            one.set_exception(failure)
        else:
            one.set_result(done.result()[0])

    answers.add_done_callback(settle)
    return one


class GroupAppender:
    """Appends records to audit, concurrent ones together; :meth:`append` returns the caller's own answer.

    ``senders``: the calls in flight at once from callers that wait, and the sender threads of the
    records queued without waiting. The sender threads start on the first such record and are daemons:
    a process that exits with appends in flight leaves their callers without an answer, as a call of
    their own would.
    """

    def __init__(self, stub: Callable[[], audit_grpc.AuditServiceStub], *, senders: int = SENDERS) -> None:
        self._stub = stub
        self._groups: CallGroups[list[audit_pb2.AppendRecordResponse]] = CallGroups(
            self._send, name="audit-append", limit=senders, senders=senders, max_count=MAX_RECORDS,
            max_size=MAX_BYTES,
            expired=lambda: errors.DeadlineExceeded("audit append waited past its deadline", reason="AUDIT_TIMEOUT"),
            failed=lambda err: errors.Internal(f"audit append failed: {err!r}"))

    @property
    def batches(self) -> int:
        """Batches taken so far (each one call to audit, unless it was refused)."""
        return self._groups.batches

    def submit(self, record: audit_pb2.AuditRecord, timeout_s: float) -> Future[audit_pb2.AppendRecordResponse]:
        """Queues one record; the future holds its answer, or the :class:`~agentmesh.errors.MeshError`."""
        return _first(self.submit_all([record], timeout_s))

    def submit_all(self, records: list[audit_pb2.AuditRecord],
                   timeout_s: float) -> Future[list[audit_pb2.AppendRecordResponse]]:
        """Queues records that go together (one call, consecutive indexes, all or none); one answer each."""
        item = _unit(records, timeout_s)
        self._groups.submit([item])
        return item.answer

    def submit_each(self, records: list[audit_pb2.AuditRecord],
                    timeout_s: float) -> list[Future[audit_pb2.AppendRecordResponse]]:
        """Queues records that are each their own unit, all at once, so a sender takes them together
        (within :data:`MAX_RECORDS` / :data:`MAX_BYTES`); one future each, with its own answer or error."""
        items = [_unit([record], timeout_s) for record in records]
        self._groups.submit(items)
        return [_first(item.answer) for item in items]

    def append(self, record: audit_pb2.AuditRecord, timeout_s: float) -> audit_pb2.AppendRecordResponse:
        """Appends one record and returns once it is durable; raises a MeshError otherwise."""
        return self.append_all([record], timeout_s)[0]

    def append_all(self, records: list[audit_pb2.AuditRecord],
                   timeout_s: float) -> list[audit_pb2.AppendRecordResponse]:
        """Appends records together (all or none) and returns once they are durable; raises a MeshError otherwise.

        When no call to audit is in flight and nothing waits, the caller's own thread sends
        them (no hand-off to a sender thread); otherwise they wait and go with the others.
        """
        answer = self._groups.run(_unit(records, timeout_s))
        try:
            return answer.result(timeout=timeout_s + 1.0)
        except TimeoutError as err:
            raise errors.DeadlineExceeded("audit did not answer in time", reason="AUDIT_TIMEOUT") from err

    def _send(self, batch: list[_Append]) -> None:
        if len(batch) == 1:
            self._send_one(batch[0])
        else:
            self._send_together(batch)

    def _send_one(self, item: _Append) -> None:
        if len(item.items) > 1:
            self._send_together([item])
            return
        request = audit_pb2.AppendRecordRequest(record=item.items[0])
        timeout = max(0.01, item.deadline - time.monotonic())
        try:
            answer = item.context.run(self._stub().AppendRecord, request, timeout=timeout)
        except grpc.RpcError as err:
            item.answer.set_exception(errors.from_rpc_error(err))
            return
        item.answer.set_result([answer])

    def _send_together(self, batch: list[_Append]) -> None:
        request = audit_pb2.AppendRecordsRequest(records=[r for item in batch for r in item.items])
        timeout = max(0.01, min(item.deadline for item in batch) - time.monotonic())
        try:
            answer = batch[0].context.run(self._stub().AppendRecords, request, timeout=timeout)
        except grpc.RpcError as err:
            failure = errors.from_rpc_error(err)
            if err.code() in _TRANSPORT_FAILURES:
                for item in batch:
                    item.answer.set_exception(failure)
                return
            if len(batch) == 1:
                batch[0].answer.set_exception(failure)  # a unit refused: its own answer
                return
            # Refused for what one of them holds: each is asked alone and gets its own answer.
            for item in batch:
                self._send_one(item)
            return
        results = list(answer.results)
        if len(results) != len(request.records):
            raise errors.Internal(f"audit answered {len(results)} results for {len(request.records)} records")
        start = 0
        for item in batch:
            item.answer.set_result(results[start:start + len(item.items)])
            start += len(item.items)
