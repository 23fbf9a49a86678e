"""Revoking an execution's grants: the rule both the capability service and the model gateway follow."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh import errors
from agentmesh.revocation import Revocation, revoke_execution, widened
from agentmesh.v1 import audit_service_pb2 as audit_pb2

T1 = dt.datetime(2026, 12, 4, 10, 0, tzinfo=dt.UTC)
T2 = dt.datetime(2026, 12, 4, 11, 0, tzinfo=dt.UTC)


def test_a_revocation_only_ever_widens() -> None:
    assert widened(None, False, T1) == T1  # the first: as asked
    assert widened(None, False, None) is None
    assert widened(T1, True, T2) == T2 and widened(T2, True, T1) == T2  # the later cut-off covers more
    assert widened(None, True, T1) is None  # all grants stay revoked
    assert widened(T1, True, None) is None


def test_covers_the_grants_issued_before_its_cut_off() -> None:
    assert Revocation("exe-1", T2, "x").covers(T1) and not Revocation("exe-1", T1, "x").covers(T2)
    assert Revocation("exe-1", None, "x").covers(T2)


class _Store:
    def __init__(self) -> None:
        self.held: dict[str, Revocation] = {}

    def revoke(self, execution_id: str, issued_before: dt.datetime | None, reason: str,
               now: dt.datetime) -> Revocation:
        current = self.held.get(execution_id)
        self.held[execution_id] = Revocation(
            execution_id, widened(current.issued_before if current else None, current is not None, issued_before),
            reason)
        return self.held[execution_id]


class _Audit:
    def __init__(self, fail: bool = False) -> None:
        self.records: list[tuple[int, dict[str, Any]]] = []
        self.fail = fail

    def record_durably(self, event_type: int, **fields: Any) -> None:
        if self.fail:
            raise errors.Unavailable("the outbox cannot write", reason="AUDIT_UNAVAILABLE")
        self.records.append((event_type, fields))


def test_revoking_stores_the_wider_revocation_and_records_it() -> None:
    store, audit = _Store(), _Audit()
    cut = Timestamp()
    cut.FromDatetime(T1)
    revoke_execution(store, audit, execution_id="exe-1", issued_before=None, reason="cancelled", caller="sup",
                     code="GRANTS_REVOKED", now=T2)
    after = revoke_execution(store, audit, execution_id="exe-1", issued_before=cut, reason="", caller="sup",
                             code="GRANTS_REVOKED", now=T2)
    assert after.issued_before is None, "an earlier revocation of every grant stands"
    assert [fields["reason_codes"] for _, fields in audit.records] == [
        ["GRANTS_REVOKED", "cancelled", "issued_before=all", "revoked_by=sup"],
        ["GRANTS_REVOKED", "revoked", "issued_before=all", "revoked_by=sup"]]
    assert {event for event, _ in audit.records} == {audit_pb2.AUDIT_EVENT_TYPE_STATUS_CHANGED}


def test_a_revocation_without_an_execution_id_is_refused_and_revokes_nothing() -> None:
    store, audit = _Store(), _Audit()
    with pytest.raises(errors.InvalidArgument) as err:
        revoke_execution(store, audit, execution_id="", issued_before=None, reason="x", caller="sup",
                         code="GRANTS_REVOKED", now=T2)
    assert (err.value.reason, err.value.field) == ("MISSING_FIELD", "execution_id")
    assert store.held == {} and audit.records == []


def test_a_revocation_whose_record_cannot_be_kept_is_still_in_force() -> None:
    """A safety stop is never held back by the log: in force at once, the failure to record it logged."""
    store = _Store()
    revoke_execution(store, _Audit(fail=True), execution_id="exe-1", issued_before=None, reason="x", caller="sup",
                     code="GRANTS_REVOKED", now=T2)
    assert store.held["exe-1"].covers(T1)
