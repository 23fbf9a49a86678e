"""Intent by a model only when the rules do not understand, validated; model usage feeds the limits."""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import assertion, errors, grants, spiffe
from agentmesh.v1 import common_pb2
from agentmesh.v1 import model_service_pb2 as model_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc.definitions import default_catalog, projection_config
from supervisor_svc.executions import ExecutionStore
from supervisor_svc.model_intent import IntentCatalogue, IntentClassifier
from supervisor_svc.orchestrator import Orchestrator
from supervisor_svc.projection import Projector
from supervisor_svc.registry import AgentRegistry
from supervisor_svc.selection import AgentSelector

from .conftest import demo_tenants
from .test_definitions import _error, _shipped
from .test_orchestrator import Audit, Policy, Specialists, _fact_result


class Models:
    """The model service: answers ``answer`` (or raises ``error``), and keeps every request."""

    def __init__(self) -> None:
        self.requests: list[model_pb2.CompleteRequest] = []
        self.answer: dict[str, Any] = {"intent": "ANALYZE_PERMIT", "subjects": {"permit": "WP-10231"},
                                       "confidence": 0.9}
        self.error: errors.MeshError | None = None

    def complete(self, request: model_pb2.CompleteRequest) -> model_pb2.CompleteResponse:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        resp = model_pb2.CompleteResponse(call_id="mc-1", model_id="sandbox-small", model_version="small@1",
                                          usage=common_pb2.ModelUsage(prompt_tokens=300, completion_tokens=30,
                                                                      calls=1, cost=0.001))
        resp.answer.update(self.answer)
        return resp


@pytest.fixture
def catalogue() -> IntentCatalogue:
    return IntentCatalogue.of(default_catalog())


def test_only_relevant_intents_are_shown(catalogue: IntentCatalogue) -> None:
    assert [c.intent for c in catalogue.relevant("Can the crew start the job under wp 10231?")] == [
        "ANALYZE_PERMIT", "PERMIT_STATUS"]
    assert [c.intent for c in catalogue.relevant("Where does WP-10231 stand right now?")][0] == "PERMIT_STATUS"
    assert catalogue.relevant("Tell me a joke") == []  # no permit id: nothing a model could answer
    # A worker and a permit named: the worker-assignment domain's intent is relevant too.
    assert "ASSIGN_WORKER" in [c.intent for c in catalogue.relevant("Could W-1003 join the crew of WP-10231?")]


def test_candidates_come_from_the_domain_definitions(catalogue: IntentCatalogue) -> None:
    shown = {c.intent: c.parameters() for c in catalogue.candidates}
    assert set(shown) == {"ANALYZE_PERMIT", "PERMIT_STATUS", "ASSIGN_WORKER"}
    assert shown["ANALYZE_PERMIT"]["subjects"] == {"permit": "WP-[0-9]{1,12}"}
    assert shown["ASSIGN_WORKER"]["subjects"] == {"worker": "W-[0-9]{1,12}", "permit": "WP-[0-9]{1,12}"}
    # Ids are found the domain's own way: a space or no dash, any case.
    (analyze,) = [c for c in catalogue.candidates if c.intent == "ANALYZE_PERMIT"]
    assert analyze.ids("permit", "wp 10231, WP10232 and WP-10233 but not XWP-1") == ["WP-10231", "WP-10232", "WP-10233"]


@pytest.mark.parametrize(("answer", "why"), [
    ({"intent": "NONE", "subjects": {}, "confidence": 0.9}, "MODEL_FOUND_NO_INTENT"),
    ({"intent": "RELEASE_ALL", "subjects": {"permit": "WP-10231"}, "confidence": 1.0}, "INTENT_NOT_SHOWN"),
    ({"intent": "ANALYZE_PERMIT", "subjects": {"permit": "WP-10231", "tenant_id": "globex"},
      "confidence": 1.0}, "SUBJECT_NOT_DECLARED"),
    ({"intent": "ANALYZE_PERMIT", "subjects": {"permit": "WP-99999"}, "confidence": 1.0},
     "SUBJECT_NOT_IN_REQUEST"),
    ({"intent": "ANALYZE_PERMIT", "subjects": {"permit": "WP-10231 WP-10232"}, "confidence": 1.0},
     "SUBJECT_NOT_IN_REQUEST"),
    ({"intent": "ANALYZE_PERMIT", "subjects": {}, "confidence": 1.0}, "SUBJECT_MISSING"),
    ({"intent": "ANALYZE_PERMIT", "subjects": {"permit": "WP-10231"}, "confidence": 0.2}, "CONFIDENCE_TOO_LOW"),
])
def test_an_answer_is_accepted_only_if_it_holds(catalogue: IntentCatalogue, answer: dict[str, Any],
                                                why: str) -> None:
    models = Models()
    models.answer = answer
    text = "Can the crew start the job under WP-10231 tomorrow?"
    found = IntentClassifier(catalogue, models).classify(
        text, grant=common_pb2.SignedTaskGrant(), principal=common_pb2.AgentPrincipal(),
        trace=common_pb2.TraceContext())
    assert found is not None and found.classification is None and found.why_not == why
    assert found.record.intent == f"UNKNOWN:{why}" and found.record.source == "MODEL"


@pytest.mark.parametrize(("subjects", "message", "field"), [
    ({"permit": "WP-[0-9]+"}, "names the intent's subjects exactly", "intents.assign.model.subjects"),
    ({"worker": "W-[0-9]+", "permit": "["}, "not a regular expression", "intents.assign.model.subjects.permit"),
])
def test_model_hints_that_do_not_fit_their_intent_are_refused_at_start(tmp_path: Path, subjects: dict[str, str],
                                                                      message: str, field: str) -> None:
    data = _shipped("worker-assignment")
    data["intents"]["assign"]["model"]["subjects"] = subjects
    err = _error(tmp_path, data)
    assert message in err.message and err.field == field and err.line


@pytest.fixture
def idp() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def orch(tmp_path: Path, idp: Ed25519PrivateKey) -> Any:
    signer = grants.GrantSigner(Ed25519PrivateKey.generate())
    registry = AgentRegistry(tmp_path / "agents.db")
    tenants = demo_tenants()
    specialists, audit, models = Specialists(), Audit(), Models()
    orchestrator = Orchestrator(
        identity=spiffe.service("supervisor"), registry=registry, selector=AgentSelector(registry, tenants),
        tenants=tenants, projector=Projector(projection_config(default_catalog())),
        store=ExecutionStore(tmp_path / "supervisor.db"), signer=signer, specialists=specialists, audit=audit,
        verify_assertion=functools.partial(assertion.verify, key=idp.public_key()), authorize=Policy(),
        intents=IntentClassifier(IntentCatalogue.of(default_catalog()), models))
    token = assertion.issue(idp, tenant_id="acme", user_id="alice", roles=["analyst"])
    yield orchestrator, specialists, audit, models, token, signer
    orchestrator.close()
    registry.close()


def _analyze(orch: Orchestrator, token: str, text: str, **kw: Any) -> pb.Execution:
    return orch.run(orch.start(pb.AnalyzeRequest(user_assertion=token, request_text=text, tenant_id="acme", **kw),
                               "spiffe://agentmesh.local/client/test"))


def test_a_request_the_rules_understand_never_reaches_a_model(orch: Any) -> None:
    orchestrator, _, _, models, token, _ = orch
    ex = _analyze(orchestrator, token, "Analyze permit WP-10231 and tell me if it can be released")
    assert models.requests == []
    assert ex.intent_classification.source == "RULES" and ex.intent_classification.subjects["permit"] == "WP-10231"
    with pytest.raises(errors.InvalidArgument):  # several permits: understood, and refused, by the rules
        _analyze(orchestrator, token, "Can the crew start WP-10231 and WP-10232?")
    assert models.requests == []


def test_a_request_the_rules_do_not_understand_is_classified_and_recorded(orch: Any) -> None:
    orchestrator, specialists, audit, models, token, signer = orch
    ex = _analyze(orchestrator, token, "Can the crew start the job under wp 10231 tomorrow?")
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    assert (ex.intent, ex.intent_rule) == (pb.EXECUTION_INTENT_ANALYZE_PERMIT, "MODEL")
    found = ex.intent_classification
    assert (found.source, found.intent, dict(found.subjects), found.model_id, found.model_call_id) == (
        "MODEL", "ANALYZE_PERMIT", {"permit": "WP-10231"}, "sandbox-small", "mc-1")
    assert list(found.candidates) == ["ANALYZE_PERMIT", "PERMIT_STATUS"]
    assert (ex.intent_kind, ex.domain) == ("ANALYZE_PERMIT", "work-permit")
    (request,) = models.requests
    # The request text went as data; the candidates as parameters; the grant is the supervisor's own,
    # on the user's authority, for this execution, with the execution's model budget.
    assert [(d.name, d.text) for d in request.data] == [("request_text",
                                                          "Can the crew start the job under wp 10231 tomorrow?")]
    assert "wp 10231" not in str(request.parameters)
    grant = grants.verify(request.grant, {signer.key_id: signer.key.public_key()})
    assert grant.audience == grant.issuer == "spiffe://agentmesh.local/svc/supervisor"
    assert (grant.tenant_id, grant.user_id, grant.execution_id) == ("acme", "alice", ex.execution_id)
    assert list(grant.capabilities) == [] and list(grant.resources) == []
    assert grant.execution_budget.max_tokens == 20000 and grant.execution_budget.max_model_calls == 10
    started = next(r for r in audit.records if r.event_type == 1)
    assert "rule=MODEL" in started.reason_codes and "model_call=mc-1" in started.reason_codes
    # The classification's usage counts: the tasks' grants carry what is left.
    task_grant = grants.verify(specialists.requests[0].grant, {signer.key_id: signer.key.public_key()})
    assert task_grant.budget.max_tokens == 20000 - 330 and task_grant.budget.max_model_calls == 9


def test_a_model_never_asks_for_the_release(orch: Any) -> None:
    orchestrator, _, _, _, token, _ = orch
    ex = _analyze(orchestrator, token, "Can the crew start the job under WP-10231? Go for it, liberate it.")
    assert not ex.HasField("action")


@pytest.mark.parametrize(("error", "code", "reason"), [
    (errors.DeadlineExceeded("slow", reason="MODEL_TIMEOUT"), errors.Unavailable, "INTENT_MODEL_UNAVAILABLE"),
    (errors.PermissionDenied("no", reason="MODEL_NOT_PERMITTED"), errors.InvalidArgument, "UNKNOWN_INTENT"),
    (errors.ResourceExhausted("spent", reason="MAX_TOKENS_EXCEEDED"), errors.InvalidArgument, "UNKNOWN_INTENT"),
])
def test_a_failed_classification_refuses_the_request(orch: Any, error: errors.MeshError, code: type,
                                                     reason: str) -> None:
    orchestrator, specialists, _, models, token, _ = orch
    models.error = error
    with pytest.raises(code) as caught:
        _analyze(orchestrator, token, "Can the crew start the job under WP-10231 tomorrow?")
    assert caught.value.reason == reason and error.reason in caught.value.message
    assert specialists.requests == []


def test_a_rejected_answer_refuses_the_request_naming_why(orch: Any) -> None:
    orchestrator, specialists, _, models, token, _ = orch
    models.answer = {"intent": "ANALYZE_PERMIT", "subjects": {"permit": "WP-10232"}, "confidence": 1.0}
    with pytest.raises(errors.InvalidArgument) as caught:
        _analyze(orchestrator, token, "Can the crew start the job under WP-10231 tomorrow?")
    assert "SUBJECT_NOT_IN_REQUEST" in caught.value.message and specialists.requests == []


def test_an_exhausted_model_budget_stops_or_goes_to_review(orch: Any) -> None:
    orchestrator, specialists, _, _, token, _ = orch
    original = specialists.start

    def start(agent_id: str, request: Any, timeout_s: float, endpoint: Any = None) -> Any:
        call = original(agent_id, request, timeout_s)
        if agent_id == "risk-agent" and call._result is not None:
            call._result.model_usage.CopyFrom(common_pb2.ModelUsage(calls=1, prompt_tokens=10,
                                                                    exhausted_reason="MAX_TOKENS_EXCEEDED"))
        return call

    specialists.start = start  # type: ignore[method-assign]
    ex = _analyze(orchestrator, token, "Analyze permit WP-10231 and tell me if it can be released")
    assert ex.status == pb.EXECUTION_STATUS_STOPPED and ex.reason.startswith("MAX_TOKENS_EXCEEDED")
    assert ex.decision != common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE


def test_resumed_model_intent_keeps_the_accepted_reading(orch: Any) -> None:
    orchestrator, _, _, models, token, _ = orch
    execution_id = orchestrator.start(pb.AnalyzeRequest(
        user_assertion=token, tenant_id="acme", request_text="Can the crew start the job under WP-10231 tomorrow?"),
        "spiffe://agentmesh.local/client/test")
    stored = orchestrator._store.get(execution_id)
    live = orchestrator._rebuild(stored, stored.started_at.ToDatetime(tzinfo=dt.UTC))
    assert live is not None and live.plan.intent.subjects == {"permit": "WP-10231"}
    assert live.plan.intent.rule == "MODEL"
    assert len(models.requests) == 1  # not asked again
    assert _fact_result  # the shared helpers are the orchestrator tests'
