"""Malicious external data: what the outside world tells the mesh is checked, never trusted.

Contradictory, future-dated and unknown LMS records, an LMS answering garbage,
and a forged TrainingExpired event must never end in a release or a change; and
nobody without the sandbox LMS's admin token may switch it to lying. (The LMS is
outside the mesh: a refusal there has no mesh audit record; what is checked is
that nothing it could have caused happened.)
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import json_format

from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

from .conftest import ANALYSIS, PLATFORM, RELEASE, Mesh, lms_trainings, unique, world_permit

pytestmark = pytest.mark.integration

TODAY = dt.date(2026, 11, 30)
"""'Today' of the demo world (its dates are consistent with it)."""


def _verdicts(ex: sup_pb2.Execution) -> dict[str, str]:
    training = next(r for r in ex.results if r.agent_id == "training-agent")
    subjects: dict[str, str] = json_format.MessageToDict(training.result).get("subjects", {})
    return subjects


def _no_release(mesh: Mesh, ex: sup_pb2.Execution) -> None:
    assert ex.decision != common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE, ex.summary
    if ex.decision == common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW:
        # Contradictory records are a conflict for a human: the release waits for one, with both records.
        assert ex.action.state == sup_pb2.ACTION_STATE_AWAITING_APPROVAL, ex.action
        assert [c for c in ex.conflicts if not c.resolution and c.review_id and c.evidence_a and c.evidence_b]
    else:
        assert ex.action.state in (sup_pb2.ACTION_STATE_UNSPECIFIED, sup_pb2.ACTION_STATE_NOT_ELIGIBLE), ex.action
    records = mesh.records(execution_id=ex.execution_id)
    assert not [r for r in records if r.capability_id == "workPermit.release"]
    finished = [r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED]
    assert [r.analysis_decision for r in finished] == [ex.decision]


def _odd_records(permit_id: str) -> list[tuple[str, str]]:
    """(subject, why) of the LMS records of a permit's workers that must not count as valid training."""
    permit = world_permit("acme", permit_id)
    odd = []
    for worker in permit["workers"]:
        records = lms_trainings("acme", worker["id"])
        if not records:
            odd += [(f"worker:{worker['id']}/{code}", "unknown to the LMS") for code in permit["required_trainings"]]
        for code in permit["required_trainings"]:
            mine = [r for r in records if r["course_code"] == code]
            statuses = {r["status"] for r in mine}
            certificates = [r.get("certificate_id") for r in mine]
            if len(statuses) > 1 and len(set(certificates)) < len(certificates):
                odd.append((f"worker:{worker['id']}/{code}", f"one certificate, statuses {sorted(statuses)}"))
            if any(r.get("completed_on") and r["completed_on"] > TODAY for r in mine):
                odd.append((f"worker:{worker['id']}/{code}", "completed in the future"))
    return odd


@pytest.mark.parametrize("permit_id", ["WP-10236", "WP-10237", "WP-10238"])
def test_suspicious_lms_records_never_count_as_valid_training(mesh: Mesh, permit_id: str) -> None:
    odd = _odd_records(permit_id)
    assert odd, f"{permit_id}'s LMS records are not suspicious: the test would prove nothing"
    ex = mesh.analyze(RELEASE.format(permit_id), mesh.token("alice", "permit-manager"))
    verdicts = _verdicts(ex)
    for subject, why in odd:
        assert verdicts.get(subject, "UNKNOWN") != "PASS", f"{subject} ({why}) was taken as valid: {verdicts}"
    _no_release(mesh, ex)


@pytest.fixture
def lms(mesh: Mesh) -> Iterator[Any]:
    """The sandbox LMS's admin endpoint, used with its token (found through the mesh home), faults cleared after."""
    home = mesh.cfg.mesh_home
    token = home.lms_admin_token.read_text().strip()

    def admin(method: str, body: dict[str, Any] | None = None, *, bearer: str | None = token) -> int:
        req = urllib.request.Request(f"{mesh.addresses['lms']}/admin/faults", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {bearer}"} if bearer else {})})
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as err:
            return int(err.code)

    yield admin
    assert admin("DELETE") < 300


def test_nobody_without_the_admin_token_switches_the_lms_to_lying(mesh: Mesh, lms: Any) -> None:
    hostile = {"mode": "hostile", "tenant_id": "acme", "worker_id": "W-1001"}
    assert lms("POST", hostile, bearer=None) == 401
    assert lms("POST", hostile, bearer="guessed-token") == 401
    assert lms("GET", bearer=None) == 401
    assert lms("DELETE", bearer=None) == 401
    ex = mesh.analyze(ANALYSIS.format("WP-10231"), mesh.token(unique("ana"), "analyst"))
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE, ex.summary
    training = next(r for r in ex.results if r.agent_id == "training-agent")
    assert "ignore previous instructions" not in json.dumps(json_format.MessageToDict(training)).lower()


@pytest.mark.parametrize("mode", ["malformed", "oversized", "5xx"])
def test_an_lms_answering_garbage_never_yields_a_release(mesh: Mesh, lms: Any, mode: str) -> None:
    worker = world_permit("acme", "WP-10231")["workers"][0]["id"]
    assert lms("POST", {"mode": mode, "tenant_id": "acme", "worker_id": worker}) < 300
    ex = mesh.analyze(RELEASE.format("WP-10231"), mesh.token("alice", "permit-manager"))
    assert ex.decision == common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE, ex.summary
    assert not [s for s, v in _verdicts(ex).items() if s.startswith(f"worker:{worker}/") and v == "PASS"]
    _no_release(mesh, ex)
    failed = mesh.find_record(execution_id=ex.execution_id, outcome=audit_pb2.AUDIT_OUTCOME_FAILURE,
                              event_types=(audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME,),
                              where=lambda r: r.resource == f"worker:{worker}")
    assert failed.reason_codes and failed.capability_id == "training.getStatus"


def test_a_forged_training_expired_event_is_checked_against_the_records(mesh: Mesh) -> None:
    """The event alone is not evidence: a training the LMS shows valid flags nothing and changes nothing."""
    worker, code = "W-1001", "NR-10"
    record = next(r for r in lms_trainings("acme", worker) if r["course_code"] == code)
    claimed = (TODAY - dt.timedelta(days=10)).isoformat()
    assert record["status"] == "COMPLETED" and record["valid_until"].isoformat() > claimed
    ex = mesh.supervisor(PLATFORM).HandleEvent(sup_pb2.HandleEventRequest(
        event_id=unique("evt"), tenant_id="acme", training_expired=sup_pb2.TrainingExpired(
            worker_id=worker, training_code=code, expired_on=claimed)), timeout=60).execution
    assert ex.reason == "TRAINING_STILL_VALID", (ex.reason, ex.summary)
    assert not ex.recommended_resources
    records = mesh.records(execution_id=ex.execution_id)
    assert not [r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_REVIEW_CREATED]
    assert {r.capability_id for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED} == {
        "training.getStatus"}
