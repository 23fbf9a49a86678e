"""Appends to the audit service carried together: concurrent records go in one ``AppendRecords`` call.

Every process of the mesh appends records from many threads at once (one per
call it serves). Sent one RPC each, a governed analysis costs two dozen
round trips to audit, and the gRPC stack, not the log, is what the machine
spends its time on. :class:`GroupAppender` is the one path every append of
:class:`~agentmesh.audit_client.AuditRecorder` takes:

* a caller that finds no call to audit in flight sends its record from its
  own thread, at once. Otherwise the record waits while the earlier calls are
  in flight (a sender thread is free: at most :data:`SENDERS` of them), then
  goes with everything else waiting, up to
  :data:`MAX_RECORDS` records / :data:`MAX_BYTES` bytes, in one
  ``AppendRecords`` call. A record alone goes as ``AppendRecord``, so an idle
  mesh sends what it sent before, under the caller's own trace span;
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

import contextvars
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Final

import grpc

from agentmesh import errors
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc

__all__ = ["MAX_BYTES", "MAX_RECORDS", "SENDERS", "GroupAppender"]

MAX_RECORDS: Final = 200
"""Most records in one ``AppendRecords`` call (the service takes up to 1,000)."""
MAX_BYTES: Final = 1 << 20
"""Most encoded bytes of records in one call, well under gRPC's 4 MiB message limit."""
SENDERS: Final = 2
"""Calls to audit in flight at once; what arrives meanwhile waits and goes together."""
_TRANSPORT_FAILURES: Final = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                        grpc.StatusCode.CANCELLED})


@dataclass(slots=True)
class _Append:
    """One caller's unit: its records go in one call, and its answer is theirs, in order."""

    records: list[audit_pb2.AuditRecord]
    deadline: float
    context: contextvars.Context
    size: int
    answer: Future[list[audit_pb2.AppendRecordResponse]] = field(default_factory=Future)

    @classmethod
    def of(cls, records: list[audit_pb2.AuditRecord], timeout_s: float) -> _Append:
        """The unit of ``records``, due within ``timeout_s``, in the caller's context."""
        return cls(list(records), time.monotonic() + timeout_s, contextvars.copy_context(),
                   sum(r.ByteSize() for r in records))


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

    The sender threads start on the first append and are daemons: a process that
    exits with appends in flight leaves their callers without an answer, as a
    call of their own would.
    """

    def __init__(self, stub: Callable[[], audit_grpc.AuditServiceStub], *, senders: int = SENDERS) -> None:
        self._stub = stub
        self._senders = senders
        self._queue: deque[_Append] = deque()
        self._ready = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._in_flight = 0
        self.batches = 0
        """Batches taken from the queue so far (each one call to audit, unless it was refused)."""

    def submit(self, record: audit_pb2.AuditRecord, timeout_s: float) -> Future[audit_pb2.AppendRecordResponse]:
        """Queues one record; the future holds its answer, or the :class:`~agentmesh.errors.MeshError`."""
        return _first(self.submit_all([record], timeout_s))

    def submit_all(self, records: list[audit_pb2.AuditRecord],
                   timeout_s: float) -> Future[list[audit_pb2.AppendRecordResponse]]:
        """Queues records that go together (one call, consecutive indexes, all or none); one answer each."""
        item = _Append.of(records, timeout_s)
        with self._ready:
            self._add_sender()
            self._queue.append(item)
            self._ready.notify()
        return item.answer

    def submit_each(self, records: list[audit_pb2.AuditRecord],
                    timeout_s: float) -> list[Future[audit_pb2.AppendRecordResponse]]:
        """Queues records that are each their own unit, all at once, so a sender takes them together
        (within :data:`MAX_RECORDS` / :data:`MAX_BYTES`); one future each, with its own answer or error."""
        items = [_Append.of([record], timeout_s) for record in records]
        with self._ready:
            self._add_sender()
            self._queue.extend(items)
            self._ready.notify()
        return [_first(item.answer) for item in items]

    def _add_sender(self) -> None:
        """Starts one more sender thread while there are fewer than ``senders`` (under ``_ready``)."""
        if len(self._threads) < self._senders:
            thread = threading.Thread(target=self._send_forever, name=f"audit-append-{len(self._threads)}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()

    def append(self, record: audit_pb2.AuditRecord, timeout_s: float) -> audit_pb2.AppendRecordResponse:
        """Appends one record and returns once it is durable; raises a MeshError otherwise."""
        return self.append_all([record], timeout_s)[0]

    def append_all(self, records: list[audit_pb2.AuditRecord],
                   timeout_s: float) -> list[audit_pb2.AppendRecordResponse]:
        """Appends records together (all or none) and returns once they are durable; raises a MeshError otherwise.

        When no call to audit is in flight and nothing waits, the caller's own thread sends
        them (no hand-off to a sender thread); otherwise they wait and go with the others.
        """
        with self._ready:
            direct = not self._queue and self._in_flight == 0
            if direct:
                self._in_flight += 1
                self.batches += 1
        if direct:
            item = _Append.of(records, timeout_s)
            try:
                self._send([item])
            finally:
                with self._ready:
                    self._in_flight -= 1
            answer = item.answer
        else:
            answer = self.submit_all(records, timeout_s)
        try:
            return answer.result(timeout=timeout_s + 1.0)
        except TimeoutError as err:
            raise errors.DeadlineExceeded("audit did not answer in time", reason="AUDIT_TIMEOUT") from err

    def _take(self) -> list[_Append]:
        with self._ready:
            while not self._queue:
                self._ready.wait()
            self.batches += 1
            self._in_flight += 1
            batch = [self._queue.popleft()]
            size = batch[0].size
            count = len(batch[0].records)
            while (self._queue and count + len(self._queue[0].records) <= MAX_RECORDS
                   and size + self._queue[0].size <= MAX_BYTES):
                size += self._queue[0].size
                count += len(self._queue[0].records)
                batch.append(self._queue.popleft())
            return batch

    def _send_forever(self) -> None:
        while True:
            batch = self._take()
            try:
                self._send(batch)
            except BaseException as err:  # noqa: BLE001 - no caller may be left without an answer
                for item in batch:
                    if not item.answer.done():
                        item.answer.set_exception(errors.Internal(f"audit append failed: {err!r}"))
            finally:
                with self._ready:
                    self._in_flight -= 1

    def _send(self, batch: list[_Append]) -> None:
        now = time.monotonic()
        live = []
        for item in batch:
            if item.deadline <= now:
                item.answer.set_exception(errors.DeadlineExceeded("audit append waited past its deadline",
                                                                  reason="AUDIT_TIMEOUT"))
            else:
                live.append(item)
        if len(live) == 1:
            self._send_one(live[0])
        elif live:
            self._send_together(live)

    def _send_one(self, item: _Append) -> None:
        if len(item.records) > 1:
            self._send_together([item])
            return
        request = audit_pb2.AppendRecordRequest(record=item.records[0])
        timeout = max(0.01, item.deadline - time.monotonic())
        try:
            answer = item.context.run(self._stub().AppendRecord, request, timeout=timeout)
        except grpc.RpcError as err:
            item.answer.set_exception(errors.from_rpc_error(err))
            return
        item.answer.set_result([answer])

    def _send_together(self, batch: list[_Append]) -> None:
        request = audit_pb2.AppendRecordsRequest(records=[r for item in batch for r in item.records])
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
            item.answer.set_result(results[start:start + len(item.records)])
            start += len(item.records)
