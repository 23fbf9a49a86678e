"""InvokeCapabilities on the governed path, in process: each call of a batch is answered, refused and recorded as
it would be alone; the decisions go to the policy together, the records of the reads that succeeded in one append
before any output leaves, and a mutation never travels in a batch."""

from __future__ import annotations

import threading
import time
from typing import Any

import grpc
import pytest

from agentmesh import errors
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import capability_service_pb2 as pb
from agentmesh.v1 import common_pb2

from .governed import AGENT, INVOKED, Mesh, outcome

COMPLIANCE = "spiffe://agentmesh.local/agent/compliance-agent"
QUERIES = ("NR-10 10.5.1 de-energised", "NR-35 35.4.1 work at height", "NR-33 confined spaces")


def _grant(mesh: Mesh, *resources: str) -> common_pb2.SignedTaskGrant:
    return mesh.grant(audience=COMPLIANCE, capabilities=["compliance.getChecklist", "knowledge.search"],
                      resources=list(resources or ("permit:WP-10231", "knowledge:compliance.nr")), roles=["viewer"])


def _search(mesh: Mesh, grant: common_pb2.SignedTaskGrant, query: str, **arguments: Any) -> pb.InvokeCapabilityRequest:
    return mesh.request("knowledge.search", grant=grant, **{"scope": "compliance.nr", "query": query, **arguments})


def _batch(mesh: Mesh, reqs: list[pb.InvokeCapabilityRequest],
           caller: str = COMPLIANCE) -> list[pb.InvokeCapabilityResponse | errors.MeshError]:
    return mesh.invoker.invoke_all(caller, reqs, deadline_s=5.0)


def _comparable(resp: pb.InvokeCapabilityResponse) -> pb.InvokeCapabilityResponse:
    same = pb.InvokeCapabilityResponse()
    same.CopyFrom(resp)
    same.ClearField("completed_at")
    same.decision.ClearField("decision_id")
    return same


def test_each_call_of_a_batch_gets_the_answer_it_would_get_alone(mesh: Mesh) -> None:
    grant = _grant(mesh)
    alone = [mesh.call(_search(mesh, grant, q), caller=COMPLIANCE) for q in QUERIES]
    mesh.audit.kept.clear()
    mesh.policy.requests.clear()
    together = _batch(mesh, [_search(mesh, grant, q) for q in QUERIES])
    assert all(isinstance(r, pb.InvokeCapabilityResponse) for r in together)
    assert [_comparable(r) for r in together] == [_comparable(r) for r in alone]  # type: ignore[arg-type]
    # One policy round trip for the three decisions, each decided on its own (its own decision id).
    assert mesh.policy.batches == [3]
    assert len({r.decision.decision_id for r in together}) == 3  # type: ignore[union-attr]
    # Every call's decision and outcome, in call order, durable in one append before any answer.
    assert mesh.audit.appends[-1] == 6
    assert mesh.audit.trail() == [INVOKED, outcome(audit_pb2.AUDIT_OUTCOME_SUCCESS)] * 3
    assert {how for _, how in mesh.audit.how()} == {"record_all"}
    assert [f["input_digest"] for _, f in mesh.audit.records][::2] == [
        f["input_digest"] for _, f in mesh.audit.records][1::2]


def test_a_refused_call_changes_nothing_for_the_others_and_is_audited(mesh: Mesh) -> None:
    grant = _grant(mesh)
    reqs = [_search(mesh, grant, QUERIES[0]), _search(mesh, grant, QUERIES[1], scope="training.nr"),
            _search(mesh, grant, QUERIES[2], limit=0)]
    first, outside, invalid = _batch(mesh, reqs)
    assert isinstance(first, pb.InvokeCapabilityResponse) and first.output["hits"]
    assert isinstance(outside, errors.PermissionDenied) and outside.reason == "GRANT_RESOURCE_NOT_LISTED"
    assert isinstance(invalid, errors.InvalidArgument) and (invalid.reason, invalid.field) == ("INPUT_INVALID",
                                                                                                 "limit")
    # Only the admitted call was put to the policy.
    assert mesh.policy.batches == [1] and len(mesh.policy.requests) == 1
    denied = [(t, f) for t, f in mesh.audit.records if t == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED]
    assert sorted(f["reason_codes"][0] for _, f in denied) == ["GRANT_RESOURCE_NOT_LISTED", "INPUT_INVALID"]
    assert mesh.audit.appends == [2]  # the one read that succeeded


def test_a_mutation_never_travels_in_a_batch(mesh: Mesh) -> None:
    grant = mesh.grant(resources=["permit:WP-10231"])
    release = mesh.request("workPermit.release", "k-batch", grant=grant, permit_id="WP-10231",
                           reason="all checks passed")
    read = mesh.request("workPermit.get", grant=grant, permit_id="WP-10231")
    before = mesh.permit("WP-10231").status
    refused, answered = _batch(mesh, [release, read], caller=AGENT)
    assert isinstance(refused, errors.InvalidArgument)
    assert (refused.reason, refused.field) == ("MUTATION_IN_BATCH", "calls")
    assert isinstance(answered, pb.InvokeCapabilityResponse) and answered.output["permit_id"] == "WP-10231"
    assert mesh.permit("WP-10231").status == before  # nothing released
    assert all(r.capability_id != "workPermit.release" for r in mesh.policy.requests)  # never decided
    (denial,) = [f for t, f in mesh.audit.records if t == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED]
    assert denial["reason_codes"] == ["MUTATION_IN_BATCH"] and denial["capability_id"] == "workPermit.release"
    # The key was never claimed: the same key still works alone.
    assert mesh.call(release).output["status"] == "RELEASED"


def test_no_output_leaves_when_the_records_cannot_be_made_durable(mesh: Mesh) -> None:
    grant = _grant(mesh)
    mesh.audit.failing.add(audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME)
    answers = _batch(mesh, [_search(mesh, grant, q) for q in QUERIES])
    for answer in answers:
        assert isinstance(answer, errors.Unavailable) and answer.reason == "AUDIT_UNAVAILABLE"
    assert not any(t == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME for t, _ in mesh.audit.records)


def test_without_a_decision_no_call_runs(mesh: Mesh) -> None:
    grant = _grant(mesh)
    mesh.policy.down = True
    answers = _batch(mesh, [_search(mesh, grant, q) for q in QUERIES[:2]])
    for answer in answers:
        assert isinstance(answer, errors.Unavailable) and answer.reason == "POLICY_UNAVAILABLE"
    assert mesh.audit.appends == []  # nothing ran, so no decision or outcome record
    assert [f["reason_codes"][0] for t, f in mesh.audit.records] == ["POLICY_UNAVAILABLE"] * 2


def test_a_denied_call_is_refused_as_it_would_be_alone(mesh: Mesh) -> None:
    grant = mesh.grant(resources=["permit:WP-10231", "permit:WP-20001"])
    # WP-20001 is another tenant's: "not found", byte for byte, as alone; the record says the truth.
    alone = mesh.refusal(mesh.request("workPermit.get", grant=grant, permit_id="WP-20001"))
    ours, theirs = _batch(mesh, [mesh.request("workPermit.get", grant=grant, permit_id="WP-10231"),
                                 mesh.request("workPermit.get", grant=grant, permit_id="WP-20001")], caller=AGENT)
    assert isinstance(ours, pb.InvokeCapabilityResponse)
    assert isinstance(theirs, errors.NotFound)
    assert theirs.to_status().SerializeToString(deterministic=True) == alone.to_status().SerializeToString(
        deterministic=True)
    elsewhere = [f for t, f in mesh.audit.records if "RESOURCE_IN_ANOTHER_TENANT" in f.get("reason_codes", [])]
    assert len(elsewhere) == 2  # alone, then in the batch


def test_calls_run_side_by_side_so_a_slow_one_does_not_spend_the_others_time(
        mesh: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    grant = _grant(mesh)
    executor = mesh.runtime.executor
    run = executor.run
    gate = threading.Event()

    def slow_first(call: Any, *, deadline_s: float | None) -> Any:
        if call.arguments.get("query") == QUERIES[0]:
            assert gate.wait(5), "the other calls never ran while this one waited"
        else:
            gate.set()
        return run(call, deadline_s=deadline_s)

    monkeypatch.setattr(executor, "run", slow_first)
    started = time.monotonic()
    answers = _batch(mesh, [_search(mesh, grant, q) for q in QUERIES])
    assert all(isinstance(a, pb.InvokeCapabilityResponse) for a in answers)
    assert time.monotonic() - started < 5


def test_a_batch_too_large_or_empty_is_refused_whole(mesh: Mesh) -> None:
    from capability_svc.servicer import CapabilityServicer

    servicer = CapabilityServicer(mesh.invoker, mesh.runtime.registry, mesh.audit)  # type: ignore[arg-type]
    grant = _grant(mesh)

    class Context:
        def time_remaining(self) -> float:
            return 5.0

        def auth_context(self) -> dict[str, list[bytes]]:
            return {}

    for calls, reason in (([], "MISSING_FIELD"), ([_search(mesh, grant, "NR-10")] * 17, "FIELD_TOO_LONG")):
        with pytest.raises(errors.InvalidArgument) as info:
            servicer.InvokeCapabilities(pb.InvokeCapabilitiesRequest(calls=calls), Context())  # type: ignore[arg-type]
        assert (info.value.reason, info.value.field) == (reason, "calls")
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert mesh.policy.requests == [] and mesh.audit.records == []
