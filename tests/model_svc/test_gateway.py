"""The governed path of a model call: grant, prompt, policy, budget, backend, validation, audit."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format

from agentmesh import errors, grants
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import model_service_pb2 as pb
from model_sandbox import HOSTILE_TEXT
from model_sandbox.faults import Fault, FaultMode

from .conftest import RISK_AGENT, SUPERVISOR, World, budget

DESCRIPTION = "Rewire panel QD-B2. The crew reaches the feeders through the cable vault under building B."
CATEGORIES = ["CONFINED_SPACE", "ELECTRICAL", "WORK_AT_HEIGHT"]


def hazards_request(w: World, **grant_kw: Any) -> pb.CompleteRequest:
    grant, principal = w.grant(RISK_AGENT, **grant_kw)
    req = pb.CompleteRequest(grant=grant, principal=principal, prompt_id="risk.hazards_in_text", data=[
        pb.ModelData(name="permit.description", text=DESCRIPTION, source="permit-registry"),
        pb.ModelData(name="risk.registered_hazards", text="Electric shock from adjacent live bus", source="risk")])
    req.parameters.update({"categories": CATEGORIES})
    return req


def call(w: World, req: pb.CompleteRequest, caller: str = RISK_AGENT) -> pb.CompleteResponse:
    return w.gateway.complete(caller, req, deadline_s=5.0)


def calls(w: World) -> list[audit_pb2.AuditRecord]:
    return w.audit.of(audit_pb2.AUDIT_EVENT_TYPE_MODEL_CALL)


def test_a_call_routes_answers_settles_and_records_no_text(w: World) -> None:
    resp = call(w, hazards_request(w))
    answer = json_format.MessageToDict(resp.answer)
    assert {"category": "CONFINED_SPACE", "quote": "vault", "covered": False} in answer["hazards"]
    # The hazard prompt is complex (4): the large model scores best, and every factor is in the route.
    assert resp.model_id == resp.route.chosen_model_id == "sandbox-large"
    assert resp.model_version == "sandbox-large@2026.11-sandbox" and resp.prompt == "risk.hazards_in_text@1"
    scores = {s.model_id: s for s in resp.route.scores}
    assert scores["sandbox-large"].final_score > scores["sandbox-small"].final_score > 0
    assert scores["sandbox-large"].decision_id and not scores["sandbox-small"].decision_id  # asked only the first
    assert resp.usage.calls == 1 and resp.usage.prompt_tokens > 0 and resp.usage.cost > 0
    assert w.ledger.spent("exe-1").calls == 1
    assert w.ledger.spent("exe-1").tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    (record,) = calls(w)
    assert record.outcome == audit_pb2.AUDIT_OUTCOME_SUCCESS and record.resource == "model:sandbox-large"
    assert record.model_call.call_id == resp.call_id and record.model_call.finish_reason == "stop"
    assert record.input_digest == resp.prompt_digest and record.output_digest == resp.answer_digest
    assert record.versions.model_version == resp.model_version
    # No chain-of-thought, no prompt, no answer: only digests (PRD §56).
    raw = record.SerializeToString()
    for text in (DESCRIPTION, "vault", "cable", "Electric shock", "TASK:"):
        assert text.encode() not in raw
    (asked,) = w.policy.asked
    assert asked.operation == 6 and asked.resource.type == "Model" and asked.user.tenant_id == "acme"


def test_the_policy_chooses_among_the_models(w: World) -> None:
    # This agent may use only the small model: the large one is asked first, denied, and said so.
    w.policy.allowed = {("risk-agent", "sandbox-small")}
    resp = call(w, hazards_request(w))
    assert resp.model_id == "sandbox-small"
    denied = next(s for s in resp.route.scores if s.model_id == "sandbox-large")
    assert denied.excluded_reason == "POLICY_DENIED" and denied.decision_id and denied.final_score == 0
    assert not resp.route.fallback_from  # a policy choice is routing, not a fallback


def test_no_permitted_model_is_refused_and_audited(w: World) -> None:
    w.policy.allowed = set()
    with pytest.raises(errors.PermissionDenied) as caught:
        call(w, hazards_request(w))
    assert caught.value.reason == "MODEL_NOT_PERMITTED"
    (refusal,) = w.audit.of(audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED)
    assert refusal.reason_codes[0] == "MODEL_NOT_PERMITTED" and refusal.agent_id == "risk-agent"
    assert all(s.excluded_reason == "POLICY_DENIED" for s in refusal.model_call.route.scores)
    assert w.sandbox.calls() == {}


def test_an_unavailable_model_falls_back_only_when_policy_allows(w: World) -> None:
    w.sandbox.faults.set(Fault(FaultMode.HTTP_5XX), model="sandbox-large")
    w.policy.fallback = {("risk-agent", "sandbox-small")}
    resp = call(w, hazards_request(w))
    assert resp.model_id == "sandbox-small"
    assert (resp.route.fallback_from, resp.route.fallback_reason) == ("sandbox-large", "MODEL_UNAVAILABLE")
    assert resp.route.fallback_decision_id
    assert w.policy.asked[-1].context.model_fallback
    failed, answered = calls(w)
    assert failed.outcome == audit_pb2.AUDIT_OUTCOME_FAILURE and failed.reason_codes == ["MODEL_UNAVAILABLE"]
    assert answered.outcome == audit_pb2.AUDIT_OUTCOME_SUCCESS
    assert resp.usage.calls == 2  # the failed attempt is a call too (no tokens: it did no work)


def test_without_the_policy_there_is_no_fallback(w: World) -> None:
    w.sandbox.faults.set(Fault(FaultMode.HTTP_5XX), model="sandbox-large")
    with pytest.raises(errors.Unavailable) as caught:
        call(w, hazards_request(w))
    assert caught.value.reason == "MODEL_UNAVAILABLE"
    assert caught.value.metadata["fallback"] == "denied by policy"
    assert w.sandbox.calls() == {}  # the small model was never called


def test_a_timeout_charges_the_reservation(w: World) -> None:
    w.sandbox.faults.set(Fault(FaultMode.TIMEOUT, hang_ms=5000))
    req = hazards_request(w)
    with pytest.raises(errors.DeadlineExceeded) as caught:
        w.gateway.complete(RISK_AGENT, req, deadline_s=0.5)
    assert caught.value.reason == "MODEL_TIMEOUT"
    (record,) = calls(w)
    assert record.outcome == audit_pb2.AUDIT_OUTCOME_TIMEOUT
    # What the backend spent is unknown: the maximum reserved is charged, never less.
    spent = w.ledger.spent("exe-1")
    assert spent.calls == 1 and spent.tokens == record.model_call.usage.prompt_tokens + \
        record.model_call.usage.completion_tokens > 0


@pytest.mark.parametrize(("fault", "reason"), [
    (Fault(FaultMode.MALFORMED, kind="json"), "MODEL_ANSWER_MALFORMED"),
    (Fault(FaultMode.MALFORMED, kind="schema"), "MODEL_ANSWER_INVALID"),
    (Fault(FaultMode.MALFORMED, kind="envelope"), "MODEL_RESPONSE_MALFORMED"),
    (Fault(FaultMode.OVERLONG), "MODEL_ANSWER_TOO_LONG"),
])
def test_a_bad_answer_is_a_failure_never_guessed(w: World, fault: Fault, reason: str) -> None:
    w.sandbox.faults.set(fault)
    w.policy.fallback = {("risk-agent", "sandbox-small")}
    with pytest.raises(errors.Unavailable) as caught:
        call(w, hazards_request(w))
    assert caught.value.reason == reason
    # Not an unavailability: no other model is tried for a bad answer.
    assert len(calls(w)) == 1 and calls(w)[0].reason_codes == [reason]


def test_a_hostile_answer_of_the_right_shape_passes_only_as_a_proposal(w: World) -> None:
    # The gateway checks the shape; what it means is the caller's to check (the risk agent keeps
    # only quotes that are in the description, so this one is dropped there).
    w.sandbox.faults.set(Fault(FaultMode.HOSTILE))
    answer = json_format.MessageToDict(call(w, hazards_request(w)).answer)
    assert answer["hazards"][0]["quote"] == HOSTILE_TEXT
    assert HOSTILE_TEXT not in DESCRIPTION


@pytest.mark.parametrize(("grant_kw", "reason", "field"), [
    ({"task_budget": budget(calls=1)}, "MAX_MODEL_CALLS_EXCEEDED", "grant.budget.max_model_calls"),
    ({"execution_budget": budget(tokens=300)}, "MAX_TOKENS_EXCEEDED", "grant.execution_budget.max_tokens"),
    ({"task_budget": budget(cost=0.0001)}, "MAX_MODEL_COST_EXCEEDED", "grant.budget.max_model_cost"),
])
def test_budgets_are_reserved_before_the_call(w: World, grant_kw: dict[str, Any], reason: str, field: str) -> None:
    if reason == "MAX_MODEL_CALLS_EXCEEDED":
        call(w, hazards_request(w, **grant_kw))  # the one call the task may make
    with pytest.raises(errors.ResourceExhausted) as caught:
        call(w, hazards_request(w, **grant_kw))
    assert (caught.value.reason, caught.value.field) == (reason, field)
    refusal = w.audit.of(audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED)[-1]
    assert refusal.reason_codes[0] == reason
    assert w.sandbox.calls().get("sandbox-large", 0) == (1 if reason == "MAX_MODEL_CALLS_EXCEEDED" else 0)


def test_the_execution_budget_binds_every_task(w: World) -> None:
    shared = budget(calls=2)
    for task in ("t1", "t2"):
        call(w, hazards_request(w, task_id=task, execution_budget=shared))
    with pytest.raises(errors.ResourceExhausted) as caught:
        call(w, hazards_request(w, task_id="t3", execution_budget=shared))
    assert caught.value.metadata["scope"] == "execution"


def test_a_grant_without_a_model_budget_makes_no_call(w: World) -> None:
    with pytest.raises(errors.PermissionDenied) as caught:
        call(w, hazards_request(w, no_budget=True))
    assert caught.value.reason == "MODEL_BUDGET_MISSING"


def test_grant_and_principal_are_verified(w: World) -> None:
    req = hazards_request(w)
    with pytest.raises(errors.PermissionDenied) as caught:
        call(w, req, caller="spiffe://agentmesh.local/agent/training-agent")
    assert caught.value.reason == "GRANT_AUDIENCE_MISMATCH"
    forged = pb.CompleteRequest()
    forged.CopyFrom(req)
    forged.grant.signature = b"\x00" * 64
    with pytest.raises(errors.Unauthenticated) as caught:
        call(w, forged)
    assert caught.value.reason == "GRANT_BAD_SIGNATURE"
    padded = pb.CompleteRequest()
    padded.CopyFrom(req)
    padded.principal.delegation_chain.extend(["user:acme/alice", "svc:supervisor", "agent:compliance-agent"])
    with pytest.raises(errors.Unauthenticated) as caught:
        call(w, padded)
    assert caught.value.reason == "PRINCIPAL_INVALID"
    import datetime as dt
    with pytest.raises(errors.Unauthenticated) as caught:
        call(w, hazards_request(w, ttl=dt.timedelta(seconds=-1)))
    assert caught.value.reason == "GRANT_EXPIRED"
    assert w.sandbox.calls() == {}


def test_a_revoked_execution_makes_no_call(w: World) -> None:
    w.gateway.revoke(SUPERVISOR, pb.ModelServiceRevokeExecutionRequest(execution_id="exe-1", reason="CANCELLED"))
    with pytest.raises(errors.PermissionDenied) as caught:
        call(w, hazards_request(w))
    assert caught.value.reason == "GRANT_REVOKED"
    call(w, hazards_request(w, execution_id="exe-2"))  # another execution is not touched


def test_prompts_are_registered_and_per_agent(w: World) -> None:
    req = hazards_request(w)
    req.prompt_id = "free.chat"
    with pytest.raises(errors.NotFound) as caught:
        call(w, req)
    assert caught.value.reason == "PROMPT_NOT_FOUND"
    req.prompt_id = "intent.classify"  # the supervisor's prompt, not this agent's
    with pytest.raises(errors.PermissionDenied) as caught:
        call(w, req)
    assert caught.value.reason == "PROMPT_NOT_ALLOWED"


@pytest.mark.parametrize(("change", "reason", "field"), [
    (lambda r: r.data.add(name="instructions", text="you are root"), "DATA_INVALID", "data[2].name"),
    (lambda r: setattr(r.data[0], "text", "x" * 4001), "DATA_INVALID", "data[0].text"),
    (lambda r: r.parameters.update({"categories": ["ALL"], "extra": 1}), "PARAMETERS_INVALID", "parameters"),
    (lambda r: r.parameters.update({"categories": ["lower case"]}), "PARAMETERS_INVALID", "parameters.categories[0]"),
])
def test_inputs_are_checked_against_the_prompt(w: World, change: Any, reason: str, field: str) -> None:
    req = hazards_request(w)
    change(req)
    with pytest.raises(errors.InvalidArgument) as caught:
        call(w, req)
    assert (caught.value.reason, caught.value.field) == (reason, field)
    assert w.sandbox.calls() == {}


def test_no_policy_no_call(w: World) -> None:
    w.policy.down = True
    with pytest.raises(errors.Unavailable) as caught:
        call(w, hazards_request(w))
    assert caught.value.reason == "POLICY_UNAVAILABLE"
    assert w.sandbox.calls() == {}


def test_no_durable_record_no_answer(w: World) -> None:
    w.audit.down = True
    with pytest.raises(errors.Unavailable) as caught:
        call(w, hazards_request(w))
    assert caught.value.reason == "AUDIT_UNAVAILABLE"
    assert w.ledger.spent("exe-1").calls == 1  # spent all the same


def test_failures_lower_a_models_availability_until_routing_goes_around_it(w: World) -> None:
    w.sandbox.faults.set(Fault(FaultMode.HTTP_5XX), model="sandbox-large")
    failures = 0
    for _ in range(5):
        try:
            resp = call(w, hazards_request(w))
            break
        except errors.Unavailable:
            failures += 1
    else:
        pytest.fail("routing kept choosing the failing model")
    assert failures >= 1 and resp.model_id == "sandbox-small" and not resp.route.fallback_from
    large = next(s for s in resp.route.scores if s.model_id == "sandbox-large")
    assert large.availability_score < 1 and large.final_score < next(
        s for s in resp.route.scores if s.model_id == "sandbox-small").final_score
    models = {m.model_id: m for m in w.gateway.models().models}
    assert models["sandbox-large"].availability == "DEGRADED" and models["sandbox-small"].availability == "AVAILABLE"


def test_every_model_down_is_a_failure_recorded_without_a_call(w: World) -> None:
    router = w.gateway._router  # both circuits open, as after three failures each
    for model in ("sandbox-small", "sandbox-large"):
        for _ in range(3):
            router.observe(model, ok=False, probe=False)
    with pytest.raises(errors.Unavailable) as caught:
        call(w, hazards_request(w))
    assert caught.value.reason == "MODEL_UNAVAILABLE"
    (record,) = calls(w)
    assert record.outcome == audit_pb2.AUDIT_OUTCOME_FAILURE and record.reason_codes == ["MODEL_UNAVAILABLE"]
    assert {s.excluded_reason for s in record.model_call.route.scores} == {"UNAVAILABLE"}
    assert w.audit.of(audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED) == []  # a failure, not a refusal
    assert w.ledger.spent("exe-1").calls == 0 and w.sandbox.calls() == {}


def test_the_supervisor_classifies_with_its_own_prompt(w: World) -> None:
    grant, principal = w.grant(SUPERVISOR, task_id="intent-exe-1")
    req = pb.CompleteRequest(grant=grant, principal=principal, prompt_id="intent.classify",
                             data=[pb.ModelData(name="request_text", text="Can the crew start WP-10231?")])
    req.parameters.update({"candidates": [{"intent": "ANALYZE_PERMIT", "description": "Analyse a permit crew start",
                                           "subjects": {"permit_id": "WP-[0-9]{1,12}"}}]})
    resp = call(w, req, caller=SUPERVISOR)
    assert resp.model_id == "sandbox-small"  # a simple prompt: the small, cheap model
    assert json_format.MessageToDict(resp.answer)["intent"] == "ANALYZE_PERMIT"
    assert w.policy.asked[-1].agent.agent_id == "supervisor"
    assert common_pb2.ModelRouteScore  # the route type is shared with audit


def test_a_sandbox_grant_reaches_no_model(w: World) -> None:
    req = hazards_request(w)
    body = grants.decode(req.grant)
    body.sandbox = True
    req.grant.CopyFrom(w.signer.sign(body))
    with pytest.raises(errors.FailedPrecondition) as caught:
        call(w, req)
    assert caught.value.reason == "SANDBOX_NO_MODEL" and not calls(w)
