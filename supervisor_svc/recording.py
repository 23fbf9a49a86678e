"""How the supervisor records to audit: fail closed where a record governs an action, never lost otherwise.

Two kinds of record, decided per record:

*governing* (:func:`governing`)
    The record that lets an action take effect: an analysis accepted
    (``EXECUTION_STARTED`` before any task runs), a task delegated (before its
    ``RunTask``), a review decision (before it applies), the policy decision
    and the confirmation of a release (before the token is issued, before the
    release runs). It must be durable in the audit log first; if audit cannot
    take it, the action does not happen and the caller gets UNAVAILABLE
    ``AUDIT_UNAVAILABLE`` with nothing changed. The delegations of a stage's
    tasks, made at nearly the same moment, are gathered into one append
    (:class:`Gathering`), each still durable before its own ``RunTask``.

*narrative* (:func:`narrative`)
    Refusals (the refusal stands anyway), safety stops (a cancellation must
    not wait for audit) and records of what already happened (a task
    finished, an execution finished, a review opened). They go through the
    recorder's durable outbox (``record_durably``): appended at once when audit
    answers, otherwise kept on local disk and delivered when it is back. They
    never hold back what they record.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any, Final, Protocol

from agentmesh import errors
from agentmesh.v1 import audit_service_pb2 as audit_pb2

log = logging.getLogger(__name__)

AUDIT_UNAVAILABLE = "AUDIT_UNAVAILABLE"


class Recorder(Protocol):
    """The audit log as the supervisor uses it (``agentmesh.audit_client.AuditRecorder``)."""

    def record(self, event_type: int, **fields: Any) -> Any:
        """Appends one record and returns once it is durable; raises a MeshError otherwise."""
        ...

    def record_durably(self, event_type: int, **fields: Any) -> None:
        """Appends now, or keeps the record in the outbox until audit takes it; raises only if it cannot."""
        ...

    def record_all_durably(self, records: Sequence[tuple[int, dict[str, Any]]]) -> None:
        """``record_durably`` for records made at the same moment: one append, or each in the outbox, in order."""
        ...

    def record_all(self, records: Sequence[tuple[int, dict[str, Any]]]) -> Any:
        """Appends records in one call (consecutive indexes, all or none), once all are durable; raises a
        MeshError otherwise (and then none of them is in the log)."""
        ...

    def build(self, event_type: int, **fields: Any) -> audit_pb2.AuditRecord:
        """The record, with the ids of the calling thread's context."""
        ...

    def append_each(self, records: Sequence[audit_pb2.AuditRecord]) -> list[Future[Any]]:
        """Sends built records in one call, each its own unit: one future each (its answer or MeshError)."""
        ...


def _name(event_type: int) -> str:
    try:
        return str(audit_pb2.AuditEventType.Name(event_type))
    except ValueError:
        return str(event_type)


def audit_unavailable(event_type: int, cause: errors.MeshError) -> errors.Unavailable:
    """The error of an action that did not happen because its record could not be made durable."""
    return errors.Unavailable(
        f"audit could not make the {_name(event_type).removeprefix('AUDIT_EVENT_TYPE_')} record durable, "
        f"so nothing was done ({cause.code.name} {cause.reason})", reason=AUDIT_UNAVAILABLE)


def governing(audit: Recorder, event_type: int, **fields: Any) -> None:
    """The record that lets an action take effect: durable first, or :func:`audit_unavailable` is raised.

    Raises:
        agentmesh.errors.Unavailable: ``AUDIT_UNAVAILABLE``; the caller must not go on with the action.
    """
    try:
        audit.record(event_type, **fields)
    except errors.MeshError as err:
        log.error("audit record %s not written (%s %s: %s): the action it governs does not happen",
                  _name(event_type), err.code.name, err.reason, err.message)
        raise audit_unavailable(event_type, err) from err


def narrative(audit: Recorder, event_type: int, **fields: Any) -> None:
    """A refusal, a safety stop or what already happened: kept durably (outbox), never blocking it.

    Only when even the outbox cannot take the record is it lost; that is logged
    loudly and the caller goes on (the refusal or the effect stands either way).
    """
    try:
        audit.record_durably(event_type, **fields)
    except errors.MeshError as err:
        log.error("AUDIT RECORD LOST: %s could be neither appended nor kept in the outbox (%s %s: %s)",
                  _name(event_type), err.code.name, err.reason, err.message)


def narrative_all(audit: Recorder, records: Sequence[tuple[int, dict[str, Any]]]) -> None:
    """:func:`narrative` for records of what happened at the same moment, in their order: one append (or
    each kept in the outbox), never blocking what they record."""
    try:
        audit.record_all_durably(records)
    except errors.MeshError as err:
        log.error("AUDIT RECORDS LOST: %s could be neither appended nor kept in the outbox (%s %s: %s)",
                  ", ".join(_name(t) for t, _ in records), err.code.name, err.reason, err.message)


def governing_all(audit: Recorder, records: Sequence[tuple[int, dict[str, Any]]]) -> None:
    """Records that together let an action take effect: one append, at consecutive indexes, all durable
    first or none in the log and :func:`audit_unavailable` (named after the first) is raised.

    Raises:
        agentmesh.errors.Unavailable: ``AUDIT_UNAVAILABLE``; the caller must not go on with the action.
    """
    try:
        audit.record_all(records)
    except errors.MeshError as err:
        log.error("audit records %s not written (%s %s: %s): the action they govern does not happen",
                  ", ".join(_name(t) for t, _ in records), err.code.name, err.reason, err.message)
        raise audit_unavailable(records[0][0], err) from err


GATHER_S: Final = 0.005
"""Longest a delegation waits for its siblings' before the ones gathered go without them."""


class Gathering:
    """The governing records of sibling tasks (one stage's), which arrive within a millisecond or two of
    each other from their own threads, appended in one call instead of one round trip each.

    Each member hands its record to :meth:`governing` and waits; once every member has handed its record
    or left (:meth:`leave`: it will not record), or :data:`GATHER_S` after the first arrived, the records
    held go to audit together, each its own unit with its own answer. So each is still durable before its
    caller goes on, and each caller is refused, as by :func:`governing`, only for its own record. A member
    that comes after its gathering left, or that is not a member, records alone, as :func:`governing`.

    ``store``, when given, is what must be durable before the records (the execution, stored with its
    tasks as sent): called once before each append, with every record held then already reflected in
    what it stores, instead of once per member. A record that goes alone calls it first too. If it
    raises, nothing held is appended and each member waiting raises what it raised.
    """

    def __init__(self, audit: Recorder, members: Iterable[str], *, wait_s: float = GATHER_S,
                 answer_s: float = 10.0, store: Callable[[], None] | None = None) -> None:
        self._audit = audit
        self._store = store
        self._answer_s = answer_s
        self._open = set(members)
        self._wait_s = wait_s
        self._lock = threading.Condition()
        self._held: list[tuple[audit_pb2.AuditRecord, Future[Any]]] = []
        self._first_at: float | None = None

    def governing(self, member: str, event_type: int, **fields: Any) -> None:
        """:func:`governing` for ``member``'s record, sent with its siblings'.

        Raises:
            agentmesh.errors.Unavailable: ``AUDIT_UNAVAILABLE``; the caller must not go on with the action.
        """
        with self._lock:
            held: Future[Any] | None = None
            if member in self._open:
                held = Future()
                self._open.discard(member)
                self._held.append((self._audit.build(event_type, **fields), held))
                if self._first_at is None:
                    self._first_at = time.monotonic()
                if not self._open:
                    self._send()
                else:
                    deadline = self._first_at + self._wait_s
                    while not held.done() and self._held and (left := deadline - time.monotonic()) > 0:
                        self._lock.wait(left)
                    if not held.done():
                        self._send()  # the others are late: what is here goes now
        if held is None:
            if self._store is not None:
                self._store()
            governing(self._audit, event_type, **fields)
            return
        answer = held.result()  # raises what the store raised: nothing of this record was appended
        try:
            try:
                answer.result(timeout=self._answer_s)
            except TimeoutError as late:
                raise errors.DeadlineExceeded("audit did not answer in time", reason="AUDIT_TIMEOUT") from late
        except errors.MeshError as err:
            log.error("audit record %s not written (%s %s: %s): the action it governs does not happen",
                      _name(event_type), err.code.name, err.reason, err.message)
            raise audit_unavailable(event_type, err) from err

    def leave(self, member: str) -> None:
        """``member`` will not record (its task ended before its delegation, or already recorded)."""
        with self._lock:
            if member in self._open:
                self._open.discard(member)
                if not self._open and self._held:
                    self._send()

    def _send(self) -> None:
        """Sends what is held (under the lock) and hands each waiting member its record's future."""
        held, self._held = self._held, []
        if not held:
            return
        if self._store is not None:
            try:
                self._store()
            except BaseException as err:  # noqa: BLE001 - no member may be left waiting; each raises it
                for _, slot in held:
                    slot.set_exception(err)
                self._lock.notify_all()
                return
        try:
            answers = self._audit.append_each([record for record, _ in held])
        except Exception as err:  # noqa: BLE001 - no member may be left waiting; each is refused instead
            failed: Future[Any] = Future()
            failed.set_exception(err if isinstance(err, errors.MeshError)
                                 else errors.Internal(f"audit append failed: {err!r}"))
            answers = [failed] * len(held)
        for (_, slot), answer in zip(held, answers, strict=True):
            slot.set_result(answer)
        self._lock.notify_all()
