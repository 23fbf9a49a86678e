"""How the supervisor records to audit: fail closed where a record governs an action, never lost otherwise.

Two kinds of record, decided per record:

*governing* (:func:`governing`)
    The record that lets an action take effect: an analysis accepted
    (``EXECUTION_STARTED`` before any task runs), a task delegated (before its
    ``RunTask``), a review decision (before it applies), the policy decision
    and the confirmation of a release (before the token is issued, before the
    release runs). It must be durable in the audit log first; if audit cannot
    take it, the action does not happen and the caller gets UNAVAILABLE
    ``AUDIT_UNAVAILABLE`` with nothing changed.

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
from collections.abc import Sequence
from typing import Any, Protocol

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

    def record_all(self, records: Sequence[tuple[int, dict[str, Any]]]) -> Any:
        """Appends records in one call (consecutive indexes, all or none), once all are durable; raises a
        MeshError otherwise (and then none of them is in the log)."""
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
