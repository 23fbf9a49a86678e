"""Revoking an execution's grants where they are used: the capability service and the model gateway.

The supervisor revokes an execution's grants (all of them, or those issued before a time)
when it stops trusting what it handed out — a cancelled execution, a superseded attempt.
Each service that honours grants keeps its own revocations (the same rule, its own store)
and refuses a grant a revocation covers, in force the moment it is stored.
:func:`revoke_execution` is that one act as both services run it: the request checked,
the revocation stored (it only ever widens), then its ``STATUS_CHANGED`` record kept
durably (the outbox when audit is away) rather than awaited — a safety stop is never held
back by the log.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh import errors
from agentmesh.v1 import audit_service_pb2 as audit_pb2

__all__ = ["DurableRecorder", "Revocation", "RevocationStore", "revoke_execution", "widened"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Revocation:
    """The grants of an execution that are revoked: all of them, or those issued before ``issued_before``."""

    execution_id: str
    issued_before: dt.datetime | None
    """None: every grant of the execution, whenever issued."""
    reason: str

    def covers(self, issued_at: dt.datetime) -> bool:
        """Whether a grant issued at ``issued_at`` is revoked."""
        return self.issued_before is None or issued_at < self.issued_before


def widened(held: dt.datetime | None, found: bool, issued_before: dt.datetime | None) -> dt.datetime | None:
    """The cut-off in force after revoking grants issued before ``issued_before`` (None: all) where a
    revocation with cut-off ``held`` was ``found`` already: a revocation only ever widens."""
    if not found:
        return issued_before
    if held is None or issued_before is None:
        return None
    return max(held, issued_before)


class DurableRecorder(Protocol):
    """Where the revocation's record goes (:meth:`agentmesh.audit_client.AuditRecorder.record_durably`)."""

    def record_durably(self, event_type: int, **fields: Any) -> None: ...


class RevocationStore(Protocol):
    """Where a service keeps its revocations."""

    def revoke(self, execution_id: str, issued_before: dt.datetime | None, reason: str,
               now: dt.datetime) -> Revocation: ...


def revoke_execution(store: RevocationStore, audit: DurableRecorder, *, execution_id: str,
                     issued_before: Timestamp | None, reason: str, caller: str, code: str,
                     now: dt.datetime) -> Revocation:
    """Revokes ``execution_id``'s grants in ``store`` and records it (``STATUS_CHANGED``, reason ``code``).

    Returns the revocation in force afterwards (wider than asked when an earlier one was).

    Raises:
        agentmesh.errors.InvalidArgument: ``MISSING_FIELD`` (field ``execution_id``); nothing is revoked.
    """
    if not execution_id:
        raise errors.InvalidArgument("execution_id is required", reason="MISSING_FIELD",
                                     metadata={"field": "execution_id"})
    before = issued_before.ToDatetime(tzinfo=dt.UTC) if issued_before is not None else None
    revocation = store.revoke(execution_id, before, reason or "revoked", now)
    try:
        audit.record_durably(
            audit_pb2.AUDIT_EVENT_TYPE_STATUS_CHANGED, outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS,
            execution_id=execution_id,
            reason_codes=[code, reason or "revoked",
                          "issued_before=" + (revocation.issued_before.isoformat()
                                              if revocation.issued_before else "all"),
                          f"revoked_by={caller}"])
    except errors.MeshError:
        log.exception("revocation of %s recorded neither in audit nor in the outbox", execution_id)
    return revocation
