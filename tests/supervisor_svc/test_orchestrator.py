"""The orchestrator on its own: real registry, selection, planner, projection, aggregation, store and
grant signer; specialists and audit are in-memory stand-ins (the gRPC path is covered by the
integration tests)."""

from __future__ import annotations

import functools
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import assertion, errors, grants, spiffe
from agentmesh.tenant_file import load_tenant_file
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from agentmesh.v1 import tenant_service_pb2 as tenant_pb2
from supervisor_svc.definitions import default_catalog, projection_config
from supervisor_svc.executions import ExecutionStore, LeaseLost
from supervisor_svc.orchestrator import Orchestrator
from supervisor_svc.projection import Projector
from supervisor_svc.registry import AgentRegistry
from supervisor_svc.selection import AgentSelector
from supervisor_svc.servicer import _GrpcTaskCall
from supervisor_svc.tenants import TenantDirectory

from .conftest import DEMO_TENANTS, demo_tenants
from .test_flow import PERMIT, _fact_result

SUBJECTS = {"training-agent": "worker:W-1001/NR-10", "risk-agent": "permit:WP-10231/risk",
            "compliance-agent": "checklist:CL-1/I-1"}


class Call:
    def __init__(self, result: common_pb2.AgentResult | None, error: errors.MeshError | None = None) -> None:
        self._result, self._error = result, error

    def result(self) -> common_pb2.AgentResult:
        if self._error:
            raise self._error
        assert self._result is not None
        return self._result

    def cancel(self) -> None:
        pass


def handoff_to(target: str, action_id: str = "h-1", **params: Any) -> common_pb2.RequestedAction:
    """A handoff request as a specialist makes it."""
    action = common_pb2.RequestedAction(action="handoff", target_agent_id=target, reason=f"ask {target}",
                                        action_id=action_id)
    action.parameters.update({"purpose": "training.verify", "required_capabilities": [],
                              "input": {"permit_id": "WP-10231", "valid_from": "2026-11-30",
                                        "valid_until": "2026-12-10", "required_trainings": ["NR-10"],
                                        "workers": [{"worker_id": "W-1016"}], "medical_notes": "x"}, **params})
    return action


class Specialists:
    """Answers each task like a well-behaved specialist; records what it received.

    An agent with ``handoffs`` answers its first call WAITING, asking for them, and finishes when it is
    called again with their outcomes (as the shipped agents do)."""

    def __init__(self) -> None:
        self.requests: list[spec_pb2.RunTaskRequest] = []
        self.handoffs: dict[str, list[common_pb2.RequestedAction]] = {}
        self.usage: dict[str, common_pb2.ModelUsage] = {}
        self.fail: dict[str, errors.MeshError] = {}
        self.answers: dict[str, Callable[[common_pb2.AgentTask], common_pb2.AgentResult]] = {}
        """Agents that answer what this makes of their task, as a RunTask response read by the supervisor's own
        client of agents (``supervisor_svc.servicer``, its checks included)."""
        self.always_waiting: set[str] = set()
        self.delay_s = 0.0
        self.lock = threading.Lock()

    def start(self, agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float, endpoint: Any = None) -> Call:
        with self.lock:
            self.requests.append(request)
        time.sleep(self.delay_s)
        if agent_id in self.fail:
            return Call(None, self.fail[agent_id])
        if agent_id in self.answers:
            answered: Future[spec_pb2.RunTaskResponse] = Future()
            answered.set_result(spec_pb2.RunTaskResponse(result=self.answers[agent_id](request.task)))
            return _GrpcTaskCall(answered)  # type: ignore[return-value,arg-type]
        task = request.task
        asks = self.handoffs.get(agent_id, [])
        if asks and (not request.handoff_outcomes or agent_id in self.always_waiting):
            waiting = common_pb2.AgentResult(task_id=task.task_id, agent_id=agent_id,
                                             status=common_pb2.RESULT_STATUS_WAITING)
            waiting.result.update({"verdict": "UNKNOWN", "subjects": {}})
            waiting.requested_actions.extend(asks)
            return Call(waiting)
        if agent_id == "work-permit-agent":
            result = _fact_result(task, "permit:WP-10231/status", "PERMIT_PENDING_RELEASE",
                                  {"permit_found": True, "permit": PERMIT})
        else:
            result = _fact_result(task, SUBJECTS[agent_id], "CHECK_PASSED")
        if agent_id in self.usage:
            result.model_usage.CopyFrom(self.usage[agent_id])
        return Call(result)

    def calls_of(self, agent_id: str) -> list[spec_pb2.RunTaskRequest]:
        return [r for r in self.requests if r.task.target_agent_id == agent_id]


class Audit:
    """The audit log in memory. ``down``: audit answers nothing (``record`` fails); ``record_durably``
    then keeps the record in ``outbox`` as the real recorder's outbox would."""

    def __init__(self) -> None:
        self.records: list[audit_pb2.AuditRecord] = []
        self.outbox: list[audit_pb2.AuditRecord] = []
        self.down = False
        self.calls_of_each: list[int] = []
        self.together: list[list[int]] = []
        """The event types of each ``record_all_durably``."""
        self.unreachable_for: set[str] = set()
        """Agents whose records, sent together with others (``append_each``), audit does not take."""

    def record(self, event_type: int, **fields: Any) -> audit_pb2.AppendRecordResponse:
        if self.down:
            raise errors.Unavailable("connection refused", reason="UNAVAILABLE")
        self.records.append(audit_pb2.AuditRecord(event_type=event_type, **fields))  # type: ignore[arg-type]
        return audit_pb2.AppendRecordResponse()

    def record_durably(self, event_type: int, **fields: Any) -> None:
        if self.down:
            self.outbox.append(audit_pb2.AuditRecord(event_type=event_type, **fields))  # type: ignore[arg-type]
        else:
            self.record(event_type, **fields)

    def record_all_durably(self, records: Any) -> None:
        self.together.append([event_type for event_type, _ in records])
        if self.down:
            self.outbox.extend(audit_pb2.AuditRecord(event_type=event_type, **fields) for event_type, fields in records)
        else:
            self.record_all(records)

    def record_all(self, records: Any) -> list[audit_pb2.AppendRecordResponse]:
        if self.down:  # all or none, as the real log
            raise errors.Unavailable("connection refused", reason="UNAVAILABLE")
        return [self.record(event_type, **fields) for event_type, fields in records]

    def build(self, event_type: int, **fields: Any) -> audit_pb2.AuditRecord:
        return audit_pb2.AuditRecord(event_type=event_type, **fields)  # type: ignore[arg-type]

    def append_each(self, records: Any) -> list[Future[audit_pb2.AppendRecordResponse]]:
        """Each record its own unit, in one call (``calls_of_each`` counts the calls)."""
        self.calls_of_each.append(len(records))
        answers: list[Future[audit_pb2.AppendRecordResponse]] = []
        for record in records:
            answer: Future[audit_pb2.AppendRecordResponse] = Future()
            if self.down or record.agent_id in self.unreachable_for:
                answer.set_exception(errors.Unavailable("connection refused", reason="UNAVAILABLE"))
            else:
                self.records.append(record)
                answer.set_result(audit_pb2.AppendRecordResponse())
            answers.append(answer)
        return answers


READERS = {"reviewer", "admin", "operator"}
CANCELLERS = {"admin"}


class Policy:
    """The execution policies as policy_svc/policies/execution.cedar states them; records every request."""

    def __init__(self) -> None:
        self.requests: list[policy_pb2.AuthorizeRequest] = []

    def __call__(self, request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        self.requests.append(request)
        own = request.context.subject_requester_id == request.user.user_id
        privileged = READERS if request.operation == policy_pb2.OPERATION_KIND_READ_EXECUTION else CANCELLERS
        allowed = request.resource.tenant_id == request.user.tenant_id and (
            own or bool(privileged & set(request.user.roles)))
        return policy_pb2.AuthorizeResponse(decision=common_pb2.PolicyDecision(
            decision_id=f"d{len(self.requests)}",
            effect=common_pb2.POLICY_EFFECT_ALLOW if allowed else common_pb2.POLICY_EFFECT_DENY,
            reason_codes=[] if allowed else ["execution.not_requester_or_reader"]))


@pytest.fixture()
def idp() -> Ed25519PrivateKey:
    """The identity provider's key."""
    return Ed25519PrivateKey.generate()


def _world(tmp_path: Path, idp: Ed25519PrivateKey, tenants: Any, **options: Any) -> Any:
    signer = grants.GrantSigner(Ed25519PrivateKey.generate())
    registry = AgentRegistry(tmp_path / "agents.db")
    specialists, audit = Specialists(), Audit()
    orch = Orchestrator(
        identity=spiffe.service("supervisor"), registry=registry, selector=AgentSelector(registry, tenants),
        tenants=tenants, projector=Projector(projection_config(default_catalog())),
        store=ExecutionStore(tmp_path / "supervisor.db"), signer=signer, specialists=specialists, audit=audit,
        verify_assertion=functools.partial(assertion.verify, key=idp.public_key()), authorize=Policy(), **options)
    token = assertion.issue(idp, tenant_id="acme", user_id="alice", roles=["analyst"])
    return orch, specialists, audit, token, signer, registry


@pytest.fixture()
def world(tmp_path: Path, idp: Ed25519PrivateKey) -> Any:
    orch, specialists, audit, token, signer, registry = _world(tmp_path, idp, demo_tenants())
    yield orch, specialists, audit, token, signer
    orch.close()
    registry.close()


def acme_with(**limits: Any) -> Any:
    """A tenant directory whose acme has these ``limits`` and ``on_exceeded`` (the demo's otherwise)."""
    on_exceeded = limits.pop("on_exceeded", {})
    definitions = [d for d in load_tenant_file(DEMO_TENANTS).definitions]
    acme = next(d for d in definitions if d.tenant_id == "acme")
    acme.on_exceeded.clear()
    for key, action in on_exceeded.items():
        acme.on_exceeded[key] = tenant_pb2.LimitAction.Value(f"LIMIT_ACTION_{action}")
    for name, value in limits.items():
        setattr(acme.limits, name, value)
    return TenantDirectory.of(definitions)


def _analyze(orch: Orchestrator, token: str, text: str = "Analyze permit WP-10231 and tell me if it can be released",
             **kw: Any) -> pb.Execution:
    execution_id = orch.start(pb.AnalyzeRequest(user_assertion=token, request_text=text, tenant_id="acme", **kw),
                              "spiffe://agentmesh.local/client/test")
    return orch.run(execution_id)


def test_each_task_gets_a_signed_grant_for_its_agent_and_projection(world: Any) -> None:
    orch, specialists, _, token, signer = world
    ex = _analyze(orch, token)
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    trusted = {signer.key_id: signer.key.public_key()}
    for req in specialists.requests:
        grant = grants.verify(req.grant, trusted)
        assert grant.audience == f"spiffe://agentmesh.local/agent/{req.task.target_agent_id}"
        assert grant.projection_digest == req.task.projection.digest
        assert (grant.tenant_id, grant.user_id) == ("acme", "alice")
        assert "medical" not in str(req.task.input)


def test_each_grant_names_the_resources_of_its_task_and_no_other(world: Any) -> None:
    orch, specialists, _, token, signer = world
    _analyze(orch, token)
    trusted = {signer.key_id: signer.key.public_key()}
    named = {req.task.target_agent_id: list(grants.verify(req.grant, trusted).resources)
             for req in specialists.requests}
    # The first task knows only the permit; the others what their projection passes them; the compliance task,
    # granted knowledge.search, also names its agent's knowledge scope (and no other).
    assert named == {"work-permit-agent": ["permit:WP-10231"],
                     "training-agent": ["permit:WP-10231", "worker:W-1001"],
                     "risk-agent": ["permit:WP-10231"],
                     "compliance-agent": ["permit:WP-10231", "worker:W-1001", "knowledge:compliance.nr"]}
    capabilities = {req.task.target_agent_id: list(grants.verify(req.grant, trusted).capabilities)
                    for req in specialists.requests}
    assert capabilities["compliance-agent"] == ["compliance.getChecklist", "knowledge.search"]
    assert capabilities["training-agent"] == ["training.getStatus"]


def _trail(audit: Audit) -> list[audit_pb2.AuditRecord]:
    return audit.records + audit.outbox


def _every_delegation_closed(audit: Audit) -> None:
    delegated = {r.task_id for r in _trail(audit) if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED}
    finished = {r.task_id for r in _trail(audit) if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED}
    assert delegated <= finished


def test_the_delegations_of_stage_two_are_one_append_each_before_its_agent_is_called(
        tmp_path: Path, idp: Ed25519PrivateKey) -> None:
    # A gathering that waits long enough for siblings on a loaded machine (its 5 ms default is what a
    # late sibling costs the others; the late case is tests/supervisor_svc/test_recording.py's).
    orch, specialists, audit, token, _, registry = _world(tmp_path, idp, demo_tenants(), gather_s=5.0)
    try:
        ex = _analyze(orch, token)
    finally:
        orch.close()
        registry.close()
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    assert audit.calls_of_each == [3]  # stage one is one task: its delegation went alone
    delegated = [r.agent_id for r in audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED]
    assert delegated[0] == "work-permit-agent"
    assert sorted(delegated[1:]) == ["compliance-agent", "risk-agent", "training-agent"]
    _every_delegation_closed(audit)


def test_the_tasks_of_stage_two_are_stored_as_sent_once_before_their_delegations_append(
        tmp_path: Path, idp: Ed25519PrivateKey) -> None:
    orch, specialists, audit, token, _, registry = _world(tmp_path, idp, demo_tenants(), gather_s=5.0)
    stage_two = {"compliance-agent", "risk-agent", "training-agent"}
    stored: list[dict[str, int]] = []  # each store of the execution: the stage-two tasks' statuses in it
    events: list[str] = []
    save, append_each = orch._store.save, audit.append_each

    def counted_save(execution: pb.Execution, **kw: Any) -> None:
        save(execution, **kw)
        stored.append({n.target_agent_id: n.status for n in execution.graph.nodes if n.target_agent_id in stage_two})
        events.append("store")

    def appended(records: Any) -> Any:
        events.append("append " + " ".join(sorted(r.agent_id for r in records)))
        # What another replica reads from the store as the delegations go to audit: all three RUNNING.
        assert {a: _stored_status(tmp_path, ex_id, a) for a in stage_two} == dict.fromkeys(
            stage_two, common_pb2.TASK_STATUS_RUNNING)
        return append_each(records)

    orch._store.save = counted_save  # type: ignore[method-assign]
    audit.append_each = appended  # type: ignore[method-assign]
    try:
        ex_id = orch.start(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme", request_text=(
            "Analyze permit WP-10231 and tell me if it can be released")), "spiffe://agentmesh.local/client/test")
        ex = orch.run(ex_id)
    finally:
        orch.close()
        registry.close()
    assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED
    gathered = events.index("append compliance-agent risk-agent training-agent")
    # One store for the three delegations, right before their one append, with every one of them RUNNING
    # (not one store each, the first with one task RUNNING, the next with two).
    assert events[gathered - 1] == "store"
    before = stored[:events[:gathered].count("store")]
    assert [s for s in before if common_pb2.TASK_STATUS_RUNNING in s.values()] == [
        dict.fromkeys(stage_two, common_pb2.TASK_STATUS_RUNNING)]
    _every_delegation_closed(audit)


def test_a_stage_whose_store_fails_delegates_none_of_its_tasks_and_calls_no_agent(
        tmp_path: Path, idp: Ed25519PrivateKey) -> None:
    orch, specialists, audit, token, _, registry = _world(tmp_path, idp, demo_tenants(), gather_s=5.0)
    stage_two = {"compliance-agent", "risk-agent", "training-agent"}
    save = orch._store.save
    failed: list[bool] = []

    def failing_once(execution: pb.Execution, **kw: Any) -> None:
        if not failed and any(n.status == common_pb2.TASK_STATUS_RUNNING and n.target_agent_id in stage_two
                              for n in execution.graph.nodes):
            failed.append(True)
            raise sqlite3.OperationalError("disk I/O error")  # the stage's one store before its append
        save(execution, **kw)

    orch._store.save = failing_once  # type: ignore[method-assign]
    try:
        ex = _analyze(orch, token)
    finally:
        orch.close()
        registry.close()
    assert failed
    assert ex.status == pb.EXECUTION_STATUS_FAILED and ex.reason.startswith("SUPERVISOR_ERROR")
    # Nothing of stage two happened: no delegation on the record, no agent told, none stored as running.
    assert [r.agent_id for r in _trail(audit) if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED] == [
        "work-permit-agent"]
    assert not any(specialists.calls_of(agent) for agent in stage_two)
    assert all(n.status != common_pb2.TASK_STATUS_RUNNING for n in ex.graph.nodes)
    _every_delegation_closed(audit)


def test_a_delegation_audit_does_not_take_stops_only_its_own_task(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    audit.unreachable_for = {"risk-agent"}
    ex = _analyze(orch, token)
    assert not specialists.calls_of("risk-agent")  # never told of a task whose delegation is not on the record
    assert specialists.calls_of("training-agent") and specialists.calls_of("compliance-agent")
    risk = next(n for n in ex.graph.nodes if n.target_agent_id == "risk-agent")
    assert risk.status == common_pb2.TASK_STATUS_FAILED
    assert ex.decision != common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    closed = [r for r in _trail(audit) if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED
              and r.agent_id == "risk-agent"]
    assert closed and "NOT_RUN" in closed[0].reason_codes


def test_a_handoff_result_goes_back_to_the_agent_that_asked_which_finishes_with_it(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    specialists.handoffs["work-permit-agent"] = [handoff_to("training-agent", "added-workers")]
    seen: list[int] = []
    save = orch._store.save

    def watch_status(ex: pb.Execution, **kw: Any) -> None:
        seen.extend(n.status for n in ex.graph.nodes if n.target_agent_id == "work-permit-agent")
        save(ex, **kw)

    orch._store.save = watch_status
    ex = _analyze(orch, token)
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    first, again = specialists.calls_of("work-permit-agent")
    assert first.task.task_id == again.task.task_id and not first.handoff_outcomes
    (outcome,) = again.handoff_outcomes
    assert (outcome.action_id, outcome.state, outcome.target_agent_id) == (
        "added-workers", common_pb2.HANDOFF_STATE_COMPLETED, "training-agent")
    (handoff,) = [n for n in ex.graph.nodes if n.parent_task_id]
    assert outcome.task_id == handoff.task_id and outcome.result.task_id == handoff.task_id
    assert (handoff.source_agent_id, handoff.target_agent_id, handoff.depth) == ("work-permit-agent",
                                                                                 "training-agent", 2)
    # The requester waited (WAITING) while its handoff ran, and the grant of each call is fresh.
    assert common_pb2.TASK_STATUS_WAITING in seen
    assert first.grant.grant != again.grant.grant
    # The target received only what its projection allows (no medical notes), from the requester's proposal.
    target = next(r for r in specialists.requests if r.task.task_id == handoff.task_id)
    assert "medical" not in str(target.task.input)
    assert target.task.input.fields["workers"].list_value.values[0].struct_value.fields["worker_id"].string_value \
        == "W-1016"
    # The requester's two calls each have their delegation and their end on the record; the first ended WAITING.
    wp = [r for r in _trail(audit) if r.task_id == first.task.task_id and r.event_type in (
        audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED, audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED)]
    assert [r.event_type for r in wp] == [audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED,
                                          audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED,
                                          audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED,
                                          audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED]
    assert wp[1].outcome == audit_pb2.AUDIT_OUTCOME_PENDING and wp[1].reason_codes[0] == "WAITING"
    assert "HANDOFF_OUTCOMES" in wp[2].reason_codes
    _every_delegation_closed(audit)
    # Only the requester's final answer is its result; the handoff's is kept too.
    assert [r.task_id for r in ex.results].count(first.task.task_id) == 1
    assert any(r.task_id == handoff.task_id for r in ex.results)


def test_a_handoff_outside_the_allowed_delegations_is_refused_and_the_requester_told(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    specialists.handoffs["training-agent"] = [handoff_to("work-permit-agent", "confirm", purpose="permit.assess")]
    ex = _analyze(orch, token)
    (again,) = [r for r in specialists.calls_of("training-agent") if r.handoff_outcomes]
    (outcome,) = again.handoff_outcomes
    assert outcome.state == common_pb2.HANDOFF_STATE_REFUSED and outcome.reason.startswith("HANDOFF_NOT_ALLOWED")
    assert not [n for n in ex.graph.nodes if n.parent_task_id]
    assert any(m.kind == pb.MISSING_KIND_HANDOFF and "training-agent -> work-permit-agent" in m.text
               and "HANDOFF_NOT_ALLOWED" in m.detail for m in ex.missing)
    assert any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED and "HANDOFF_NOT_ALLOWED" in r.reason_codes
               for r in audit.records)
    _every_delegation_closed(audit)


def test_a_handoff_back_to_the_requester_is_a_loop(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    specialists.handoffs["work-permit-agent"] = [handoff_to("training-agent")]
    specialists.handoffs["training-agent"] = [handoff_to("work-permit-agent", "back", purpose="permit.assess")]
    ex = _analyze(orch, token)
    (handoff,) = [n for n in ex.graph.nodes if n.parent_task_id]
    (again,) = [r for r in specialists.requests if r.task.task_id == handoff.task_id and r.handoff_outcomes]
    (refusal,) = again.handoff_outcomes
    assert refusal.state == common_pb2.HANDOFF_STATE_REFUSED
    assert refusal.reason == ("HANDOFF_LOOP: handoff would loop: "
                              "work-permit-agent -> training-agent -> work-permit-agent")
    assert any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED and "HANDOFF_LOOP" in r.reason_codes
               for r in audit.records)
    _every_delegation_closed(audit)


def test_a_handoff_target_the_tenant_may_not_use_is_refused(tmp_path: Path, idp: Ed25519PrivateKey) -> None:
    definitions = load_tenant_file(DEMO_TENANTS).definitions
    acme = next(d for d in definitions if d.tenant_id == "acme")
    del acme.allowed_agents[:]
    acme.allowed_agents.extend(["work-permit-agent", "risk-agent", "compliance-agent"])
    orch, specialists, audit, token, _, registry = _world(tmp_path, idp, TenantDirectory.of(definitions))
    specialists.handoffs["work-permit-agent"] = [handoff_to("training-agent")]
    try:
        _analyze(orch, token)
        (again,) = [r for r in specialists.calls_of("work-permit-agent") if r.handoff_outcomes]
        assert again.handoff_outcomes[0].reason.startswith("HANDOFF_TARGET_NOT_ALLOWED_FOR_TENANT")
        assert not specialists.calls_of("training-agent")
    finally:
        orch.close()
        registry.close()


def test_an_agent_that_keeps_waiting_fails_and_one_waiting_for_nothing_too(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    specialists.handoffs["risk-agent"] = [handoff_to("training-agent")]
    specialists.always_waiting.add("risk-agent")
    ex = _analyze(orch, token)
    assert any("risk" in m.text and "HANDOFF_ROUNDS_EXCEEDED" in m.text for m in ex.missing)
    assert ex.decision == common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE
    _every_delegation_closed(audit)


def test_a_finished_result_asking_for_a_handoff_runs_none(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    start = specialists.start

    def finished_but_asking(agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float,
            endpoint: Any = None) -> Call:
        call = start(agent_id, request, timeout_s)
        if agent_id == "risk-agent":
            call.result().requested_actions.append(handoff_to("training-agent"))
        return call

    specialists.start = finished_but_asking
    ex = _analyze(orch, token)
    assert not [n for n in ex.graph.nodes if n.parent_task_id]
    assert any("HANDOFF_NOT_WAITING" in m.text for m in ex.missing)


def test_failed_specialist_is_partial_naming_it(world: Any) -> None:
    orch, specialists, _, token, _ = world
    specialists.fail["risk-agent"] = errors.Unavailable("connection refused", reason="UNAVAILABLE")
    ex = _analyze(orch, token)
    assert ex.status == pb.EXECUTION_STATUS_PARTIAL
    assert ex.decision == common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE
    assert any(m.text.startswith("risk") for m in ex.missing)


def test_an_answer_outside_the_mesh_rules_fails_its_task_on_the_record_and_nothing_of_it_is_kept(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    def hostile(task: common_pb2.AgentTask) -> common_pb2.AgentResult:
        answer = _fact_result(task, SUBJECTS["risk-agent"], "CHECK_PASSED")
        answer.result.update({"score": float("nan")})
        return answer

    specialists.answers["risk-agent"] = hostile
    ex = _analyze(orch, token)
    assert ex.status == pb.EXECUTION_STATUS_PARTIAL
    assert ex.decision == common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE
    assert not [r for r in ex.results if r.agent_id == "risk-agent"]
    (task,) = [n for n in ex.graph.nodes if n.target_agent_id == "risk-agent"]
    assert task.status == common_pb2.TASK_STATUS_FAILED
    (finished,) = [r for r in _trail(audit) if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED
                   and r.agent_id == "risk-agent"]
    said = " ".join(finished.reason_codes)
    assert "AGENT_ANSWER_INVALID" in said and "result.result" in said, said
    # Not transient: asked once, not retried, and the other agents' work stands.
    assert len(specialists.calls_of("risk-agent")) == 1
    assert {r.agent_id for r in ex.results} == {"work-permit-agent", "training-agent", "compliance-agent"}
    _every_delegation_closed(audit)


LIMITS = {
    # limit reason -> (tenant limits, what the stand-in specialists do)
    "MAX_DEPTH_EXCEEDED": ({"max_depth": 1}, "handoff"),
    "MAX_TASKS_EXCEEDED": ({"max_tasks": 3}, ""),
    "MAX_HANDOFFS_EXCEEDED": ({"max_handoffs": 0}, "handoff"),
    "MAX_EXECUTION_TIME_EXCEEDED": ({"max_execution_time_ms": 30}, "slow"),
    "MAX_COST_EXCEEDED": ({"max_cost": 2.0}, ""),
    "MAX_TOKENS_EXCEEDED": ({"max_tokens": 100}, "tokens"),
    "MAX_MODEL_CALLS_EXCEEDED": ({"max_model_calls": 1}, "model_calls"),
}


def _limited_world(tmp_path: Path, idp: Ed25519PrivateKey, reason: str, action: str) -> Any:
    limits, behaviour = LIMITS[reason]
    world = _world(tmp_path, idp, acme_with(on_exceeded={reason: action}, **limits))
    specialists = world[1]
    if behaviour == "handoff":
        specialists.handoffs["work-permit-agent"] = [handoff_to("training-agent")]
    elif behaviour == "slow":
        specialists.delay_s = 0.05
    elif behaviour == "tokens":
        specialists.usage["work-permit-agent"] = common_pb2.ModelUsage(prompt_tokens=100, completion_tokens=50, calls=1)
    elif behaviour == "model_calls":
        specialists.usage["work-permit-agent"] = common_pb2.ModelUsage(prompt_tokens=10, calls=2)
    return world


@pytest.mark.parametrize("action", ["STOP", "HUMAN_REVIEW"])
@pytest.mark.parametrize("reason", list(LIMITS))
def test_every_limit_ends_as_its_tenant_configured(reason: str, action: str, tmp_path: Path,
                                                   idp: Ed25519PrivateKey) -> None:
    orch, specialists, audit, token, _, registry = _limited_world(tmp_path, idp, reason, action)
    try:
        ex = _analyze(orch, token)
        assert ex.reason.split(":")[0] == reason, ex.reason
        reviews = orch._store.reviews("acme", execution_id=ex.execution_id)
        if action == "STOP":
            assert (ex.status, ex.decision) == (pb.EXECUTION_STATUS_STOPPED,
                                                common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE)
            assert reviews == []
        else:
            assert (ex.status, ex.decision) == (pb.EXECUTION_STATUS_AWAITING_REVIEW,
                                                common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW)
            (review,) = reviews
            assert (review.kind, review.status, review.limit.limit_reason) == (
                dc_pb2.REVIEW_KIND_LIMIT, dc_pb2.REVIEW_STATUS_OPEN, reason)
            assert review.limit.source.startswith("limits.")
            assert any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_REVIEW_CREATED and review.review_id in r.reason_codes
                       for r in _trail(audit))
        # Nothing past the limit is left to run, and every delegation made is closed on the record.
        assert not [n for n in ex.graph.nodes if n.status in (common_pb2.TASK_STATUS_CREATED,
                                                               common_pb2.TASK_STATUS_RUNNING,
                                                               common_pb2.TASK_STATUS_WAITING)]
        _every_delegation_closed(audit)
        finished = [r for r in _trail(audit) if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED]
        assert finished and finished[-1].reason_codes[0] == pb.ExecutionStatus.Name(ex.status)
    finally:
        orch.close()
        registry.close()


def test_a_request_budget_tightens_the_tenant_limit(world: Any) -> None:
    orch, specialists, _, token, _ = world
    # acme sends MAX_COST_EXCEEDED to human review (its tenant definition); every other limit stops.
    ex = _analyze(orch, token, budget=common_pb2.AgentBudget(max_cost=0.01))
    assert (ex.status, ex.reason.split(":")[0]) == (pb.EXECUTION_STATUS_AWAITING_REVIEW, "MAX_COST_EXCEEDED")
    assert ex.decision == common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW
    specialists.delay_s = 0.05
    ex = _analyze(orch, token, budget=common_pb2.AgentBudget(max_execution_time_ms=30))
    assert (ex.status, ex.reason.split(":")[0]) == (pb.EXECUTION_STATUS_STOPPED, "MAX_EXECUTION_TIME_EXCEEDED")
    assert "budget.max_execution_time_ms" in ex.reason
    assert ex.decision != common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE


@pytest.mark.parametrize("reason", ["MAX_COST_EXCEEDED", "MAX_HANDOFFS_EXCEEDED", "MAX_TOKENS_EXCEEDED"])
def test_an_approved_limit_review_lets_the_execution_go_on_past_that_limit(reason: str, tmp_path: Path,
                                                                          idp: Ed25519PrivateKey) -> None:
    orch, specialists, audit, token, _, registry = _limited_world(tmp_path, idp, reason, "HUMAN_REVIEW")
    try:
        ex = _analyze(orch, token)
        assert ex.status == pb.EXECUTION_STATUS_AWAITING_REVIEW
        done_before = {r.task_id for r in ex.results}
        calls_before = len(specialists.requests)
        (review,) = orch._store.reviews("acme", execution_id=ex.execution_id)
        review.status = dc_pb2.REVIEW_STATUS_APPROVED  # as the Decision Center decides it
        running = orch.continue_past_limit(review, "acme/bob")
        assert running.status == pb.EXECUTION_STATUS_RUNNING and list(running.waived_limits) == [reason]
        deadline = time.monotonic() + 10
        while (orch._store.get(ex.execution_id) or running).status == pb.EXECUTION_STATUS_RUNNING:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        final = orch._store.get(ex.execution_id)
        assert final is not None
        assert final.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE, final.summary
        # Completed tasks were not run again (the checkpoint); the others ran.
        rerun = [r.task.task_id for r in specialists.requests[calls_before:]]
        assert not done_before & set(rerun)
        resumed = [r for r in _trail(audit) if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED
                   and "LIMIT_WAIVED" in r.reason_codes]
        assert resumed and reason in resumed[0].reason_codes and "by=acme/bob" in resumed[0].reason_codes
        _every_delegation_closed(audit)
        assert [r.status for r in orch._store.reviews("acme", execution_id=ex.execution_id)] == [
            dc_pb2.REVIEW_STATUS_APPROVED]
        with pytest.raises(errors.FailedPrecondition):
            orch.continue_past_limit(review, "acme/bob")
    finally:
        orch.close()
        registry.close()


def test_a_limit_approval_whose_execution_cannot_be_stored_leaves_the_review_open(
        tmp_path: Path, idp: Ed25519PrivateKey, monkeypatch: pytest.MonkeyPatch) -> None:
    """The approved LIMIT review and the execution RUNNING again are one transaction: a failure after the
    execution's row is written (a crash, here the review's own update failing) keeps neither — the execution
    still waits at its limit with its review open, to be decided again."""
    orch, _, _, token, _, registry = _limited_world(tmp_path, idp, "MAX_COST_EXCEEDED", "HUMAN_REVIEW")
    try:
        ex = _analyze(orch, token)
        (review,) = orch._store.reviews("acme", execution_id=ex.execution_id)
        review.status = dc_pb2.REVIEW_STATUS_APPROVED
        update = orch._store._update_review

        def crash(item: dc_pb2.ReviewItem) -> None:
            raise RuntimeError("process killed between the execution and its review")

        monkeypatch.setattr(orch._store, "_update_review", crash)
        with pytest.raises(RuntimeError):
            orch.continue_past_limit(review, "acme/bob")
        stored = orch._store.get(ex.execution_id)
        assert stored is not None and stored.status == pb.EXECUTION_STATUS_AWAITING_REVIEW
        assert not stored.waived_limits
        assert [r.status for r in orch._store.reviews("acme", execution_id=ex.execution_id)] == [
            dc_pb2.REVIEW_STATUS_OPEN]
        monkeypatch.setattr(orch._store, "_update_review", update)
        assert orch.continue_past_limit(review, "acme/bob").status == pb.EXECUTION_STATUS_RUNNING
        assert [r.status for r in orch._store.reviews("acme", execution_id=ex.execution_id)] == [
            dc_pb2.REVIEW_STATUS_APPROVED]
        deadline = time.monotonic() + 10
        while (orch._store.get(ex.execution_id) or stored).status == pb.EXECUTION_STATUS_RUNNING:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        orch.close()
        registry.close()


def test_a_resumed_execution_stopped_at_the_same_limit_asks_in_the_review_it_had(
        tmp_path: Path, idp: Ed25519PrivateKey, monkeypatch: pytest.MonkeyPatch) -> None:
    """The review is opened before the execution's end is stored: a supervisor killed between the two resumes
    the execution, which stops at the same limit again — in the one review it had, not a second beside it."""
    reason = "MAX_HANDOFFS_EXCEEDED"  # reached while the tasks run, after the execution was accepted
    orch, _, audit, token, _, registry = _limited_world(tmp_path, idp, reason, "HUMAN_REVIEW")
    try:
        save = orch._store.save

        def killed_before_the_end_is_stored(execution: pb.Execution, **kw: Any) -> None:
            if execution.status == pb.EXECUTION_STATUS_AWAITING_REVIEW:
                raise LeaseLost("the process is killed here")  # nothing of the end is stored
            save(execution, **kw)

        monkeypatch.setattr(orch._store, "save", killed_before_the_end_is_stored)
        execution_id = orch.start(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme",
                                                    request_text="Analyze permit WP-10231 and tell me if it can be "
                                                                 "released"), "x")
        orch.run(execution_id)
        stored = orch._store.get(execution_id)
        assert stored is not None and stored.status == pb.EXECUTION_STATUS_RUNNING
        (opened,) = orch._store.reviews("acme", execution_id=execution_id)
        monkeypatch.setattr(orch._store, "save", save)
        orch._live.clear()
        assert orch.resume_interrupted(background=False) == [execution_id]
        ex = orch._store.get(execution_id)
        assert ex is not None and ex.status == pb.EXECUTION_STATUS_AWAITING_REVIEW, ex.summary
        assert ex.reason.split(":")[0] == reason
        (review,) = orch._store.reviews("acme", execution_id=execution_id)
        assert review.review_id == opened.review_id and review.status == dc_pb2.REVIEW_STATUS_OPEN
        created = [r for r in _trail(audit) if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_REVIEW_CREATED]
        assert [r.reason_codes[0] for r in created] == [opened.review_id]
    finally:
        orch.close()
        registry.close()


def test_a_review_whose_record_was_not_made_before_a_crash_is_recorded_on_resume(
        tmp_path: Path, idp: Ed25519PrivateKey, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed after the limit's review is stored and before its REVIEW_CREATED is recorded: the resumed
    execution asks in that same review, and records it then — the review is never left without its record."""
    reason = "MAX_HANDOFFS_EXCEEDED"
    orch, _, audit, token, _, registry = _limited_world(tmp_path, idp, reason, "HUMAN_REVIEW")
    try:
        narrate = orch._narrate

        def killed_before_the_review_is_recorded(event_type: int, **fields: Any) -> None:
            if event_type == audit_pb2.AUDIT_EVENT_TYPE_REVIEW_CREATED:
                raise LeaseLost("the process is killed here")
            narrate(event_type, **fields)

        monkeypatch.setattr(orch, "_narrate", killed_before_the_review_is_recorded)
        execution_id = orch.start(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme",
                                                    request_text="Analyze permit WP-10231 and tell me if it can be "
                                                                 "released"), "x")
        orch.run(execution_id)
        (stored_review,) = orch._store.reviews("acme", execution_id=execution_id)
        assert not [r for r in _trail(audit) if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_REVIEW_CREATED]
        monkeypatch.setattr(orch, "_narrate", narrate)
        orch._live.clear()
        assert orch.resume_interrupted(background=False) == [execution_id]
        ex = orch._store.get(execution_id)
        assert ex is not None and ex.status == pb.EXECUTION_STATUS_AWAITING_REVIEW, ex.summary
        (review,) = orch._store.reviews("acme", execution_id=execution_id)
        assert review.review_id == stored_review.review_id
        created = [r for r in _trail(audit) if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_REVIEW_CREATED]
        assert [r.reason_codes[0] for r in created] == [review.review_id]
    finally:
        orch.close()
        registry.close()


def test_tenant_named_in_the_text_must_match_the_assertion(world: Any) -> None:
    orch, _, audit, token, _ = world
    with pytest.raises(errors.PermissionDenied):
        _analyze(orch, token, text="Analyze permit WP-10231 of tenant globex")
    assert audit.records[-1].event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED


def test_restart_ends_an_execution_it_cannot_resume_truthfully(world: Any, tmp_path: Path) -> None:
    orch, _, _, token, _ = world
    execution_id = orch.start(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme",
                                                request_text="Analyze permit WP-10231"), "x")
    # Stored before resumption existed: nothing says how to go on, so it ends, naming what did not finish.
    orch._store._conn.execute("DELETE FROM resume")
    orch._live.clear()
    assert orch.resume_interrupted(background=False) == [execution_id]
    stored = orch._store.get(execution_id)
    assert stored is not None and stored.status == pb.EXECUTION_STATUS_FAILED
    assert stored.reason.startswith("SUPERVISOR_RESTARTED") and stored.missing


class Revocations:
    def __init__(self) -> None:
        self.revoked: list[tuple[str, str, Any]] = []

    def revoke(self, execution_id: str, reason: str, issued_before: Any = None) -> None:
        self.revoked.append((execution_id, reason, issued_before))


def test_restart_resumes_from_the_last_completed_task(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    revocations = Revocations()
    orch._revoker = revocations
    execution_id = orch.start(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme",
                                                request_text="Analyze permit WP-10231 and tell me if it can be "
                                                             "released"), "x")
    # The first stage completes, then the process dies: only the work-permit result is stored.
    live = orch._live[execution_id]
    assert live.plan is not None
    first = live.plan.stages()[0][0]
    orch._run_task(live, first, None)
    orch._live.clear()
    assert [r.task.target_agent_id for r in specialists.requests] == ["work-permit-agent"]

    assert orch.resume_interrupted(background=False) == [execution_id]
    ex = orch._store.get(execution_id)
    assert ex is not None and ex.status == pb.EXECUTION_STATUS_SUCCEEDED, ex.summary
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    ran = [r.task.target_agent_id for r in specialists.requests]
    assert ran.count("work-permit-agent") == 1, "a completed task is not run again"
    assert sorted(ran[1:]) == ["compliance-agent", "risk-agent", "training-agent"]
    assert len(ex.results) == 4 and ex.execution_id == execution_id
    # The dead process's grants were revoked first (those issued before the restart), then the rest ran.
    ((revoked_id, reason, before),) = revocations.revoked
    assert (revoked_id, reason) == (execution_id, "SUPERVISOR_RESTARTED") and before is not None
    assert any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED and "RESUMED" in r.reason_codes
               for r in audit.records + audit.outbox)


def _delegated_then_crashed(orch: Orchestrator, audit: Audit, token: str) -> tuple[str, list[str]]:
    """The work-permit task completed and the other three were delegated (on the record, stored
    RUNNING) when the process died."""
    execution_id = orch.start(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme",
                                                request_text="Analyze permit WP-10231 and tell me if it can be "
                                                             "released"), "x")
    live = orch._live[execution_id]
    assert live.plan is not None
    first, second = live.plan.stages()[0][0], list(live.plan.stages()[1])
    orch._run_task(live, first, None)
    for node in live.execution.graph.nodes:
        if node.task_id in second:
            audit.record(audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED, execution_id=execution_id, task_id=node.task_id,
                         agent_id=node.target_agent_id)
            node.status = common_pb2.TASK_STATUS_RUNNING
    orch._store.save(live.execution)
    orch._live.clear()
    return execution_id, second


def _finished(audit: Audit, execution_id: str) -> dict[str, audit_pb2.AuditRecord]:
    return {r.task_id: r for r in audit.records + audit.outbox
            if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED and r.execution_id == execution_id}


def test_a_resumed_task_delegated_before_the_restart_that_cannot_run_closes_its_delegation(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    execution_id, second = _delegated_then_crashed(orch, audit, token)
    audit.down = True  # the restarted supervisor cannot delegate them again
    assert orch.resume_interrupted(background=False) == [execution_id]
    ex = orch._store.get(execution_id)
    assert ex is not None and ex.status == pb.EXECUTION_STATUS_PARTIAL, pb.ExecutionStatus.Name(ex.status)
    assert [r.task.target_agent_id for r in specialists.requests] == ["work-permit-agent"]
    # Each earlier delegation is closed on the record (through the outbox): NOT_RUN, with the reason.
    closed = _finished(audit, execution_id)
    for task_id in second:
        assert task_id in closed, f"{task_id} delegated before the restart, never finished"
        record = closed[task_id]
        assert record.outcome == audit_pb2.AUDIT_OUTCOME_FAILURE and record.reason_codes[0] == "NOT_RUN"
        assert "AUDIT_UNAVAILABLE" in record.reason_codes[1]
    assert all(r in audit.outbox for r in closed.values() if r.task_id in second)


def test_a_resumed_task_delegated_before_the_restart_is_finished_once_when_it_runs(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    execution_id, second = _delegated_then_crashed(orch, audit, token)
    assert orch.resume_interrupted(background=False) == [execution_id]
    ex = orch._store.get(execution_id)
    assert ex is not None and ex.status == pb.EXECUTION_STATUS_SUCCEEDED
    finished = [r for r in audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED
                and r.task_id in second]
    assert sorted(r.task_id for r in finished) == sorted(second)  # one each: the run's own


def test_a_retried_analyze_with_the_same_client_request_id_is_the_same_execution(world: Any) -> None:
    orch, specialists, _, token, _ = world
    text = "Analyze permit WP-10231 and tell me if it can be released"
    first = orch.accept(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme", request_text=text,
                                          client_request_id="req-1"), "x")
    again = orch.accept(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme", request_text=text,
                                          client_request_id="req-1"), "x")
    assert (again.execution_id, again.duplicate, first.duplicate) == (first.execution_id, True, False)
    ex = orch.run(first.execution_id)
    assert ex.client_request_id == "req-1"
    assert orch.outcome_of(again.user, again.execution_id).status == pb.EXECUTION_STATUS_SUCCEEDED
    assert len(specialists.requests) == 4, "one execution ran"
    with pytest.raises(errors.Aborted) as info:
        orch.accept(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme", request_text="Analyze permit WP-10232",
                                      client_request_id="req-1"), "x")
    assert info.value.reason == "CLIENT_REQUEST_ID_REUSED"
    # Another id is another request.
    other = orch.accept(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme", request_text=text,
                                          client_request_id="req-2"), "x")
    assert other.execution_id != first.execution_id and not other.duplicate


# -- executions are private -------------------------------------------------------------------------

def _user(orch: Orchestrator, idp: Ed25519PrivateKey, user: str, *roles: str, tenant: str = "acme"
          ) -> assertion.UserIdentity:
    return orch.authenticate(assertion.issue(idp, tenant_id=tenant, user_id=user, roles=list(roles)))


def test_an_execution_is_read_by_its_requester_reviewers_and_operators_only(world: Any,
                                                                            idp: Ed25519PrivateKey) -> None:
    orch, _, audit, token, _ = world
    ex = _analyze(orch, token)
    for reader in (_user(orch, idp, "alice", "analyst"), _user(orch, idp, "bob", "reviewer"),
                   _user(orch, idp, "olga", "operator"), _user(orch, idp, "ada", "admin")):
        assert orch.visible(reader, ex.execution_id).execution_id == ex.execution_id
    request = orch._guard._authorize.requests[-1]
    assert (request.operation, request.resource.type, request.resource.id, request.resource.tenant_id,
            request.context.subject_requester_id, request.capability_id) == (
        policy_pb2.OPERATION_KIND_READ_EXECUTION, "Execution", ex.execution_id, "acme", "alice", "")
    viewer = _user(orch, idp, "victor", "viewer")
    with pytest.raises(errors.PermissionDenied) as denied:
        orch.visible(viewer, ex.execution_id)
    assert denied.value.reason == "POLICY_DENIED" and denied.value.field == "user_assertion"
    refusal = audit.records[-1]
    assert (refusal.event_type, refusal.outcome, refusal.user_id, refusal.resource) == (
        audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, audit_pb2.AUDIT_OUTCOME_DENIED, "victor",
        f"execution:{ex.execution_id}")
    assert list(refusal.reason_codes[:2]) == ["POLICY_DENIED", "OPERATION_KIND_READ_EXECUTION"]
    with pytest.raises(errors.PermissionDenied):
        list(orch.watch(viewer, ex.execution_id, lambda: True))


def test_another_tenants_execution_and_a_missing_one_are_the_same_answer(world: Any,
                                                                         idp: Ed25519PrivateKey) -> None:
    orch, _, audit, token, _ = world
    ex = _analyze(orch, token)
    missing = "exe-" + "0" * 16
    assert len(missing) == len(ex.execution_id)
    eve = _user(orch, idp, "eve", "admin", tenant="globex")
    asked = len(orch._guard._authorize.requests)
    answers = []
    for call in (lambda i: orch.visible(eve, i), lambda i: orch.cancel(eve, i, "x"),
                 lambda i: list(orch.watch(eve, i, lambda: True))):
        for execution_id in (ex.execution_id, missing):
            with pytest.raises(errors.NotFound) as err:
                call(execution_id)
            answers.append(err.value.to_status().SerializeToString().replace(execution_id.encode(), b"<id>"))
    assert len(set(answers)) == 1 and b"EXECUTION_NOT_FOUND" in answers[0]
    assert len(orch._guard._authorize.requests) == asked  # another tenant's execution is never even looked at
    assert audit.records[-1].reason_codes[0] == "EXECUTION_NOT_FOUND"


def test_only_the_requester_or_an_admin_cancels(world: Any, idp: Ed25519PrivateKey) -> None:
    orch, _, _, token, _ = world
    ex = _analyze(orch, token)
    for who in (_user(orch, idp, "victor", "viewer"), _user(orch, idp, "bob", "reviewer")):
        with pytest.raises(errors.PermissionDenied) as denied:
            orch.cancel(who, ex.execution_id, "stop")
        assert denied.value.reason == "POLICY_DENIED"
    assert orch._guard._authorize.requests[-1].operation == policy_pb2.OPERATION_KIND_CANCEL_EXECUTION
    # Allowed by the policy engine; the execution has just ended, so there is nothing to cancel.
    for who in (_user(orch, idp, "alice", "analyst"), _user(orch, idp, "ada", "admin")):
        with pytest.raises(errors.FailedPrecondition) as not_running:
            orch.cancel(who, ex.execution_id, "stop")
        assert not_running.value.reason == "EXECUTION_NOT_RUNNING"


def test_no_policy_decision_means_no_access(world: Any, idp: Ed25519PrivateKey) -> None:
    orch, _, _, token, _ = world
    ex = _analyze(orch, token)

    def down(request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        raise errors.Unavailable("policy down", reason="UNAVAILABLE")

    orch._guard._authorize = down
    with pytest.raises(errors.Unavailable) as err:
        orch.visible(_user(orch, idp, "alice", "analyst"), ex.execution_id)
    assert err.value.reason == "POLICY_UNAVAILABLE"


# -- rejected assertions are audited, never recorded -------------------------------------------------

def _token(key: Ed25519PrivateKey, **claims: Any) -> str:
    import jwt

    now = int(time.time())
    body = {"iss": assertion.DEV_ISSUER, "aud": assertion.AUDIENCE, "sub": "mallory", "tenant": "acme",
            "roles": ["admin"], "iat": now, "exp": now + 60, **claims}
    return jwt.encode(body, key, algorithm="EdDSA")


def _unsigned(**claims: Any) -> str:
    import base64
    import json

    def part(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    now = int(time.time())
    return part({"alg": "none", "typ": "JWT"}) + "." + part(
        {"iss": assertion.DEV_ISSUER, "aud": assertion.AUDIENCE, "sub": "mallory", "tenant": "acme",
         "iat": now, "exp": now + 60, **claims}) + "."


@pytest.mark.parametrize(("make", "reason", "shown"), [
    (lambda idp: _token(Ed25519PrivateKey.generate()), "ASSERTION_INVALID", ["alg=EdDSA", "sub=mallory"]),
    (lambda idp: _unsigned(), "ASSERTION_INVALID", ["alg=none", "cause=InvalidAlgorithmError"]),
    (lambda idp: _token(idp, exp=int(time.time()) - 60), "ASSERTION_EXPIRED", ["tenant=acme"]),
    (lambda idp: _token(idp, aud="another-mesh"), "ASSERTION_INVALID", ["cause=InvalidAudienceError"]),
    (lambda idp: _token(idp, iss="https://evil.example"), "ASSERTION_INVALID", ["iss=https://evil.example"]),
    (lambda idp: "not.a.jwt", "ASSERTION_INVALID", ["header=unreadable"]),
    (lambda idp: _token(Ed25519PrivateKey.generate(), sub="x" * 300, tenant="ac\x00me"), "ASSERTION_INVALID",
     [f"sub={'x' * 64}+truncated"]),
    (lambda idp: "", "ASSERTION_MISSING", ["assertion=absent"]),
])
def test_every_rejected_assertion_is_audited_without_the_token(world: Any, idp: Ed25519PrivateKey, make: Any,
                                                               reason: str, shown: list[str]) -> None:
    orch, specialists, audit, _, _ = world
    bad = make(idp)
    with pytest.raises(errors.Unauthenticated) as err:
        orch.start(pb.AnalyzeRequest(user_assertion=bad, request_text="Analyze permit WP-10231", tenant_id="acme"),
                   "spiffe://agentmesh.local/client/platform")
    assert err.value.reason == reason and not specialists.requests
    (record,) = audit.records
    assert (record.event_type, record.outcome) == (audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED,
                                                   audit_pb2.AUDIT_OUTCOME_DENIED)
    codes = list(record.reason_codes)
    assert codes[0] == reason and "caller=spiffe://agentmesh.local/client/platform" in codes
    assert all(s in codes for s in shown), codes
    if bad:
        assert f"assertion_sha256={assertion.digest(bad)}" in codes
        assert bad not in record.SerializeToString().decode("utf-8", "replace")
        for piece in bad.split("."):
            assert len(piece) < 16 or piece not in str(record)
    assert all(len(c) < 200 and "\x00" not in c for c in codes)
    # The record itself is valid for audit: every field within bounds.
    assert record.tenant_id == "" and record.user_id == ""


def test_a_rejected_assertion_is_kept_in_the_outbox_when_audit_is_down(world: Any) -> None:
    orch, _, audit, _, _ = world
    audit.down = True
    with pytest.raises(errors.Unauthenticated):
        orch.authenticate("not.a.jwt", "spiffe://agentmesh.local/client/platform")
    (kept,) = audit.outbox
    assert kept.reason_codes[0] == "ASSERTION_INVALID"


# -- fail closed on audit ---------------------------------------------------------------------------

def test_audit_down_means_no_analysis_at_all(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    audit.down = True
    with pytest.raises(errors.Unavailable) as err:
        _analyze(orch, token)
    assert err.value.reason == "AUDIT_UNAVAILABLE"
    assert not specialists.requests and not orch._live and orch._store.running() == []


def test_the_start_and_the_selections_are_one_append_before_anything_runs(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    units: list[list[int]] = []
    record_all = audit.record_all

    def counted(records: Any) -> Any:
        units.append([event_type for event_type, _ in records])
        return record_all(records)

    audit.record_all = counted
    ex = _analyze(orch, token)
    assert units[0] == [audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED] + [
        audit_pb2.AUDIT_EVENT_TYPE_AGENT_SELECTED] * len(ex.graph.nodes)
    # In the log at consecutive places, first of the execution, each selection naming its task.
    assert [r.event_type for r in audit.records[:len(units[0])]] == units[0]
    assert [r.task_id for r in audit.records[1:len(units[0])]] == [n.task_id for n in ex.graph.nodes]


def test_a_start_audit_refuses_leaves_no_record_and_no_execution(world: Any) -> None:
    orch, specialists, audit, token, _ = world

    def refused(records: Any) -> Any:
        raise errors.InvalidArgument("record too large", reason="FIELD_TOO_LONG", metadata={"field": "records"})

    audit.record_all = refused
    with pytest.raises(errors.Unavailable) as err:
        _analyze(orch, token)
    assert err.value.reason == "AUDIT_UNAVAILABLE"
    assert "EXECUTION_STARTED" in err.value.message
    assert audit.records == [] and audit.outbox == []
    assert not specialists.requests and not orch._live and orch._store.running() == []


def test_audit_down_after_the_start_runs_no_task(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    execution_id = orch.start(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme",
                                                request_text="Analyze permit WP-10231"), "x")
    audit.down = True
    ex = orch.run(execution_id)
    assert not specialists.requests  # no delegation record, no task
    assert ex.decision != common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    assert any("AUDIT_UNAVAILABLE" in m.text for m in ex.missing), list(ex.missing)
    first = next(n for n in ex.graph.nodes if n.target_agent_id == "work-permit-agent")
    assert first.status == common_pb2.TASK_STATUS_FAILED
    # What did happen waits in the outbox for audit: the task did not run — closing a delegation
    # record audit may have written without answering — and the execution ended.
    assert [r.event_type for r in audit.outbox] == [audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED,
                                                    audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED]
    assert audit.outbox[0].task_id == first.task_id
    assert list(audit.outbox[0].reason_codes)[0] == "NOT_RUN"
    assert list(audit.outbox[0].reason_codes)[-1] == "DELEGATION_UNACKNOWLEDGED"
    assert all(r.execution_id == execution_id for r in audit.outbox)


def test_each_task_is_delegated_on_the_record_before_it_runs(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    seen: list[int] = []
    start = specialists.start

    def start_after_record(agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float,
            endpoint: Any = None) -> Call:
        delegated = [r for r in audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED
                     and r.task_id == request.task.task_id]
        seen.append(len(delegated))
        return start(agent_id, request, timeout_s)

    specialists.start = start_after_record
    _analyze(orch, token)
    assert seen == [1, 1, 1, 1]
    started = next(r for r in audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED)
    assert audit.records.index(started) == 0


def test_a_task_that_fails_inside_the_supervisor_after_its_delegation_is_closed_on_the_record(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    start = specialists.start

    def broken_for_risk(agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float,
            endpoint: Any = None) -> Call:
        if agent_id == "risk-agent":
            raise RuntimeError("channel closed")
        return start(agent_id, request, timeout_s)

    specialists.start = broken_for_risk
    ex = _analyze(orch, token)
    assert ex.status == pb.EXECUTION_STATUS_FAILED and ex.reason.startswith("SUPERVISOR_ERROR")
    kept = audit.records + audit.outbox
    delegated = {r.task_id for r in kept if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED}
    finished = {r.task_id: r for r in kept if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED}
    assert len(delegated) == 4 and delegated <= set(finished)
    risk = next(r for r in finished.values() if r.agent_id == "risk-agent")
    assert "SUPERVISOR_ERROR" in risk.reason_codes


def test_a_task_or_execution_is_stored_as_finished_only_once_its_record_is_kept(world: Any) -> None:
    """A crash right after any store write must not lose a record: a restart skips a stored task result
    and never resumes a stored end, so their TASK_FINISHED / EXECUTION_FINISHED records come first."""
    orch, _, audit, token, _ = world
    save = orch._store.save
    missing: list[str] = []

    def save_after_records(ex: pb.Execution, **kw: Any) -> None:
        kept = audit.records + audit.outbox
        for result in ex.results:
            if not any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED and r.task_id == result.task_id
                       for r in kept):
                missing.append(f"TASK_FINISHED {result.task_id}")
        if ex.HasField("finished_at") and not any(
                r.event_type == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED and r.execution_id == ex.execution_id
                and r.reason_codes[:1] == [pb.ExecutionStatus.Name(ex.status)] for r in kept):
            missing.append(f"EXECUTION_FINISHED {pb.ExecutionStatus.Name(ex.status)}")
        save(ex, **kw)

    orch._store.save = save_after_records
    ex = _analyze(orch, token)
    assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED and len(ex.results) == 4
    assert missing == []


def test_a_task_reaches_its_agent_stored_running_as_sent_in_two_stores_a_task(world: Any) -> None:
    """What a process killed once a task's delegation is on the record leaves stored is the task RUNNING,
    as it was sent (a restart closes that delegation or runs it again, see _rebuild): it was stored so
    before its delegation, and the delegation needs no store of its own; a task's attempt that ends it is
    stored with its end."""
    orch, specialists, _, token, _ = world
    save, start = orch._store.save, specialists.start
    saves: list[str] = []
    stored_when_sent: list[common_pb2.AgentTask] = []

    def counted(ex: pb.Execution, **kw: Any) -> None:
        saves.append(ex.execution_id)
        save(ex, **kw)

    def sent(agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float, endpoint: Any = None) -> Call:
        stored = orch._store.get(request.task.execution_id)
        assert stored is not None
        stored_when_sent.extend(n for n in stored.graph.nodes if n.task_id == request.task.task_id)
        return start(agent_id, request, timeout_s, endpoint)

    orch._store.save, specialists.start = counted, sent
    ex = _analyze(orch, token)
    assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED
    assert len(stored_when_sent) == len(specialists.requests) == 4
    for node, request in zip(stored_when_sent, specialists.requests, strict=True):
        assert node.status == common_pb2.TASK_STATUS_RUNNING, common_pb2.TaskStatus.Name(node.status)
        assert node.input == request.task.input and node.deadline == request.task.deadline
        assert node.projection.digest == request.task.projection.digest
    # Before its delegation and at its end, for each task; the execution's own: accepted, ended.
    assert len(saves) <= 2 * 4 + 2, len(saves)


def test_the_last_task_end_and_the_execution_end_are_one_append_in_their_order(world: Any) -> None:
    orch, _, audit, token, _ = world
    ex = _analyze(orch, token)
    assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED
    task_finished, execution_finished = (audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED,
                                         audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED)
    assert audit.together == [[task_finished, execution_finished]]
    *_, last_task, end = audit.records
    assert end.event_type == execution_finished and end.reason_codes[0] == "EXECUTION_STATUS_SUCCEEDED"
    assert last_task.event_type == task_finished and last_task.agent_id != "work-permit-agent"
    assert last_task.reason_codes[0] == "COMPLETED"
    ends = [r.task_id for r in audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED]
    assert sorted(ends) == sorted(n.task_id for n in ex.graph.nodes)  # one each


def test_a_review_opened_at_the_end_comes_after_the_last_task_end_on_the_record(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    start = specialists.start

    def disagreeing(agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float, endpoint: Any = None) -> Call:
        if agent_id != "compliance-agent":
            return start(agent_id, request, timeout_s, endpoint)
        with specialists.lock:
            specialists.requests.append(request)
        result = _fact_result(request.task, SUBJECTS["training-agent"], "CHECK_FAILED")
        result.result.update({"verdict": "FAIL", "subjects": {SUBJECTS["training-agent"]: "FAIL"}})
        return Call(result)

    specialists.start = disagreeing  # type: ignore[method-assign]
    ex = _analyze(orch, token)
    assert ex.decision == common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW and len(ex.conflicts) == 1
    kinds = [r.event_type for r in audit.records]
    created = kinds.index(audit_pb2.AUDIT_EVENT_TYPE_REVIEW_CREATED)
    assert kinds[created - 1] == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED
    assert kinds.count(audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED) == 4
    assert kinds[created + 1:] == [audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED] and audit.together == []


def test_a_client_request_id_claimed_by_a_process_killed_before_its_execution_existed_is_started_again(
        world: Any) -> None:
    """A supervisor killed between claiming a client_request_id and storing its execution left the claim
    behind; every retry used to wait and answer UNAVAILABLE EXECUTION_STARTING for ever."""
    orch, _, _, token, _ = world
    request = pb.AnalyzeRequest(user_assertion=token, tenant_id="acme", client_request_id="req-killed",
                                request_text="Analyze permit WP-10231 and tell me if it can be released")
    from supervisor_svc.orchestrator import request_digest

    orch._store.claim_request("acme", "alice", "req-killed", "exe-of-a-dead-process", request_digest(request))
    started = time.monotonic()
    accepted = orch.accept(request, "spiffe://agentmesh.local/client/test")
    assert time.monotonic() - started < 2
    assert not accepted.duplicate and accepted.execution_id != "exe-of-a-dead-process"
    ex = orch.run(accepted.execution_id)
    assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED and ex.client_request_id == "req-killed"
    again = orch.accept(request, "spiffe://agentmesh.local/client/test")
    assert again.duplicate and again.execution_id == accepted.execution_id


def test_on_a_shared_store_a_client_request_id_claimed_by_a_replica_whose_lease_is_gone_is_started_again(
        world: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replicas on one store: a replica killed between claiming a client_request_id and storing its
    execution left the claim behind; once its lease is gone a retry on another replica starts it."""
    orch, _, _, token, _ = world
    monkeypatch.setattr(ExecutionStore, "shared", property(lambda self: True))
    request = pb.AnalyzeRequest(user_assertion=token, tenant_id="acme", client_request_id="req-killed",
                                request_text="Analyze permit WP-10231 and tell me if it can be released")
    from supervisor_svc.orchestrator import request_digest

    killed = ExecutionStore(tmp_path / "supervisor.db", owner="killed-replica", lease_s=0.0)
    killed.claim_request("acme", "alice", "req-killed", "exe-of-a-killed-replica", request_digest(request))
    # Its lease is gone (not left to the clock: a zero lease can still read as live within one tick).
    killed._db.execute("DELETE FROM replicas WHERE instance_id = ?", ("killed-replica",))
    accepted = orch.accept(request, "spiffe://agentmesh.local/client/test")
    assert not accepted.duplicate and accepted.execution_id != "exe-of-a-killed-replica"
    ex = orch.run(accepted.execution_id)
    assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED and ex.client_request_id == "req-killed"
    again = orch.accept(request, "spiffe://agentmesh.local/client/test")
    assert again.duplicate and again.execution_id == accepted.execution_id
    killed.close()


def test_on_a_shared_store_a_replica_whose_claim_was_taken_over_while_it_was_slow_stores_nothing(
        world: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The claimer was only slow (its lease lapsed): a retry took its client_request_id over; the slow
    one then finds the claim gone right before storing and stops, ABORTED, without a second execution."""
    orch, _, audit, token, _ = world
    monkeypatch.setattr(ExecutionStore, "shared", property(lambda self: True))
    request = pb.AnalyzeRequest(user_assertion=token, tenant_id="acme", client_request_id="req-slow",
                                request_text="Analyze permit WP-10231 and tell me if it can be released")
    from supervisor_svc.orchestrator import request_digest

    other = ExecutionStore(tmp_path / "supervisor.db", owner="other-replica")
    save = orch._store.save
    slowed: list[str] = []

    def slow_save(execution: pb.Execution, **kw: Any) -> None:  # right before the execution is first stored
        if not slowed:
            slowed.append(execution.execution_id)
            other._db.execute("DELETE FROM replicas WHERE instance_id = ?", (orch._store.owner,))  # lease lapsed
            assert other.claim_abandoned("acme", "alice", "req-slow", execution.execution_id)
            assert other.release_request("acme", "alice", "req-slow", execution.execution_id, abandoned=True)
            assert other.claim_request("acme", "alice", "req-slow", "exe-of-the-retry",
                                       request_digest(request))[0] == "exe-of-the-retry"
        save(execution, **kw)

    monkeypatch.setattr(orch._store, "save", slow_save)
    with pytest.raises(errors.Aborted) as refused:
        orch.accept(request, "spiffe://agentmesh.local/client/test")
    assert refused.value.reason == "CLIENT_REQUEST_ID_REUSED"
    assert [e.execution_id for e in orch._store.running()] == []
    # Nothing of it is kept: neither the execution nor what resuming it would need (one transaction).
    assert slowed and orch._store.get(slowed[0]) is None and orch._store.resume_info(slowed[0]) is None
    assert any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED
               and list(r.reason_codes)[:1] == ["CLIENT_REQUEST_ID_REUSED"] for r in audit.records)
    other.close()


def test_an_execution_that_cannot_be_resumed_closes_the_delegations_of_the_process_before(world: Any) -> None:
    orch, _, audit, token, _ = world
    execution_id, second = _delegated_then_crashed(orch, audit, token)
    orch._store._conn.execute("DELETE FROM resume")  # it cannot be rebuilt: it ends FAILED
    assert orch.resume_interrupted(background=False) == [execution_id]
    ex = orch._store.get(execution_id)
    assert ex is not None and ex.status == pb.EXECUTION_STATUS_FAILED
    closed = _finished(audit, execution_id)
    for task_id in second:
        assert task_id in closed, f"{task_id} delegated before the restart, never finished"
        assert closed[task_id].reason_codes[0] == "NOT_RUN"
        assert "SUPERVISOR_RESTARTED" in closed[task_id].reason_codes[1]


def test_a_resumed_execution_that_fails_in_the_supervisor_closes_earlier_delegations(world: Any) -> None:
    orch, _, audit, token, _ = world
    execution_id, second = _delegated_then_crashed(orch, audit, token)

    def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("boom")

    orch._context_for_stage = broken  # type: ignore[method-assign]
    assert orch.resume_interrupted(background=False) == [execution_id]
    ex = orch._store.get(execution_id)
    assert ex is not None and ex.status == pb.EXECUTION_STATUS_FAILED
    closed = _finished(audit, execution_id)
    assert all(task_id in closed for task_id in second), sorted(set(second) - closed.keys())


def test_a_user_request_is_a_user_execution_with_its_intent_as_an_enum(world: Any) -> None:
    orch, _, _, token, _ = world
    ex = _analyze(orch, token)
    assert ex.actor_type == common_pb2.ACTOR_TYPE_USER and ex.user_id == "alice" and not ex.system_actor
    assert list(ex.user_roles) == ["analyst"]
    assert (ex.intent, ex.intent_rule) == (pb.EXECUTION_INTENT_ANALYZE_PERMIT, "ANALYSIS")
    assert (ex.intent_kind, ex.domain) == ("ANALYZE_PERMIT", "work-permit")
    status = _analyze(orch, token, "What is the status of WP-10231?")
    assert (status.intent, status.intent_rule) == (pb.EXECUTION_INTENT_PERMIT_STATUS, "STATUS")


def test_watch_reports_typed_events_from_snapshot_to_finished(world: Any) -> None:
    orch, _, _, token, _ = world
    ex = _analyze(orch, token)
    user = orch.authenticate(token, "spiffe://agentmesh.local/client/test")
    events = [e.event for e in orch.watch(user, ex.execution_id, lambda: True)]
    assert events == [pb.EXECUTION_EVENT_SNAPSHOT, pb.EXECUTION_EVENT_EXECUTION_FINISHED]


def test_a_task_waiting_for_its_handoff_when_the_process_dies_runs_again_and_leaves_no_delegation_open(
        world: Any) -> None:
    orch, specialists, audit, token, _ = world
    orch._revoker = Revocations()
    specialists.handoffs["work-permit-agent"] = [handoff_to("training-agent")]
    execution_id = orch.start(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme",
                                                request_text="Analyze permit WP-10231 and tell me if it can be "
                                                             "released"), "x")
    live = orch._live[execution_id]
    assert live.plan is not None
    first = live.plan.stages()[0][0]
    crash: dict[str, Any] = {}
    start = specialists.start

    def dies_while_the_handoff_runs(agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float,
            endpoint: Any = None) -> Call:
        if request.task.parent_task_id and not crash:
            # What is stored and recorded at this moment is all a process killed now leaves behind.
            crash["stored"], crash["records"] = orch._store.get(execution_id), len(audit.records)
        return start(agent_id, request, timeout_s)

    specialists.start = dies_while_the_handoff_runs
    orch._run_task(live, first, None)
    stored = crash["stored"]
    orch._store.save(stored)
    del audit.records[crash["records"]:]
    orch._live.clear()
    statuses = {n.task_id: n.status for n in stored.graph.nodes}
    (old_handoff,) = [n for n in stored.graph.nodes if n.parent_task_id]
    assert statuses[first] == common_pb2.TASK_STATUS_WAITING
    assert statuses[old_handoff.task_id] == common_pb2.TASK_STATUS_RUNNING
    specialists.start = start
    calls_before = len(specialists.requests)

    assert orch.resume_interrupted(background=False) == [execution_id]
    ex = orch._store.get(execution_id)
    assert ex is not None and ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE, ex.summary
    # The waiting task ran again from its start (first call without outcomes), with a new handoff.
    again = [r for r in specialists.requests[calls_before:] if r.task.task_id == first]
    assert [len(r.handoff_outcomes) for r in again] == [0, 1]
    handoffs = [n for n in ex.graph.nodes if n.parent_task_id]
    assert [n.task_id for n in handoffs][0] == old_handoff.task_id and len({n.task_id for n in handoffs}) == 2
    assert [n.status for n in handoffs] == [common_pb2.TASK_STATUS_CANCELLED, common_pb2.TASK_STATUS_COMPLETED]
    # The dead process's handoff delegation is closed on the record; no delegation is left open.
    closed = [r for r in audit.records + audit.outbox if r.task_id == old_handoff.task_id
              and r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED]
    assert closed and "DELEGATED_BEFORE_RESTART" in closed[-1].reason_codes
    _every_delegation_closed(audit)


def _stored_status(tmp_path: Path, execution_id: str, agent_id: str) -> int:
    """The task's status as another replica reads it from the store."""
    store = ExecutionStore(tmp_path / "supervisor.db")
    try:
        stored = store.get(execution_id)
        assert stored is not None
        return next(n.status for n in stored.graph.nodes if n.target_agent_id == agent_id)
    finally:
        store.close()


def _stage_one_end_held(audit: Audit, orch: Orchestrator | None = None,
                        known: list[bool] | None = None) -> tuple[threading.Event, threading.Event]:
    """Holds stage one's ``TASK_FINISHED`` (the work-permit agent's) on its way to audit: ``(arrived, go)``.

    ``arrived`` is set when the record is handed to audit; it goes on once ``go`` is set (at most 10 s).
    With ``orch`` and ``known``: whether the execution counted the record among those sent ahead (what a
    cancellation's catch-up waits for) when it reached audit, appended to ``known``."""
    arrived, go = threading.Event(), threading.Event()
    record_durably = audit.record_durably

    def held(event_type: int, **fields: Any) -> None:
        if event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED and fields["agent_id"] == "work-permit-agent":
            if orch is not None and known is not None:
                (live,) = orch._live.values()  # the test's one execution
                with live.lock:
                    known.append(any(task_id == fields["task_id"] for task_id, _ in live.ahead))
            arrived.set()
            go.wait(10)
        record_durably(event_type, **fields)

    audit.record_durably = held
    return arrived, go


def test_the_record_that_ends_a_stage_travels_while_the_next_stage_is_prepared_and_comes_first(
        world: Any, tmp_path: Path) -> None:
    orch, specialists, audit, token, _ = world
    arrived, go = _stage_one_end_held(audit)
    text = "Analyze permit WP-10231 and tell me if it can be released"
    execution_id = orch.start(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme", request_text=text),
                              "spiffe://agentmesh.local/client/test")
    ran: list[pb.Execution] = []
    runner = threading.Thread(target=lambda: ran.append(orch.run(execution_id)))
    runner.start()
    try:
        assert arrived.wait(10)
        time.sleep(0.3)  # the next stage goes as far as it may while the record travels
        live = orch._live[execution_id]
        waited = time.monotonic()
        with live.lock:  # never held while a record travels: readers and a cancellation get it at once
            assert time.monotonic() - waited < 1
            # The task has ended (in memory: its result feeds the next stage) ...
            assert next(n.status for n in live.execution.graph.nodes
                        if n.target_agent_id == "work-permit-agent") == common_pb2.TASK_STATUS_COMPLETED
        # ... but it is not stored as ended before its record is durable, and nothing of the next stage is on
        # the record or run.
        assert _stored_status(tmp_path, execution_id, "work-permit-agent") != common_pb2.TASK_STATUS_COMPLETED
        assert [r.agent_id for r in audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED] \
            == ["work-permit-agent"]
        assert [r.task.target_agent_id for r in specialists.requests] == ["work-permit-agent"]
    finally:
        go.set()
        runner.join(20)
    assert ran and ran[0].status == pb.EXECUTION_STATUS_SUCCEEDED
    kinds = [(r.event_type, r.agent_id) for r in audit.records]
    finished = kinds.index((audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED, "work-permit-agent"))
    delegated = [i for i, (t, a) in enumerate(kinds)
                 if t == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED and a != "work-permit-agent"]
    assert len(delegated) == 3 and finished < min(delegated)
    # Every task's end is on the record before the execution's, and stored with it.
    ends = [i for i, (t, _) in enumerate(kinds) if t == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED]
    assert len(ends) == 4 and max(ends) < kinds.index((audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED, ""))
    assert all(_stored_status(tmp_path, execution_id, n.target_agent_id) == common_pb2.TASK_STATUS_COMPLETED
               for n in ran[0].graph.nodes)


def test_a_cancellation_goes_on_the_record_after_the_task_end_that_travels_when_it_comes(
        world: Any, idp: Ed25519PrivateKey) -> None:
    orch, specialists, audit, token, _ = world
    # Stage one's end, sent ahead, still on its way when the cancellation comes.
    known: list[bool] = []
    arrived, go = _stage_one_end_held(audit, orch, known)
    execution_id = orch.start(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme", request_text=(
        "Analyze permit WP-10231 and tell me if it can be released")), "spiffe://agentmesh.local/client/test")
    runner = threading.Thread(target=orch.run, args=(execution_id,))
    runner.start()
    cancelled: list[pb.Execution] = []
    canceller = threading.Thread(target=lambda: cancelled.append(
        orch.cancel(_user(orch, idp, "alice", "analyst"), execution_id, "stop")))
    try:
        assert arrived.wait(10)
        assert known == [True]  # already among the records a catch-up waits for when it went
        canceller.start()
        time.sleep(0.3)  # the cancellation is under way: its calls stopped, its grants revoked
        assert orch._live[execution_id].cancelled.is_set()
    finally:
        go.set()
        runner.join(20)
        if canceller.is_alive() or cancelled == []:
            canceller.join(20)
    assert cancelled and cancelled[0].status == pb.EXECUTION_STATUS_CANCELLED
    kinds = [(r.event_type, r.agent_id, list(r.reason_codes)) for r in audit.records]
    stage_one_end = kinds.index(next(k for k in kinds if k[:2] == (audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED,
                                                                   "work-permit-agent")))
    cancel = next(i for i, (_, _, codes) in enumerate(kinds) if codes[:1] == ["CANCEL_REQUESTED"])
    assert stage_one_end < cancel
    _every_delegation_closed(audit)


def test_a_cancellation_during_the_execution_end_goes_on_the_record_after_it(
        world: Any, idp: Ed25519PrivateKey) -> None:
    orch, specialists, audit, token, _ = world
    arrived, go = threading.Event(), threading.Event()
    record_all_durably = audit.record_all_durably

    def slow(records: Any) -> None:
        arrived.set()
        go.wait(10)  # the last task's end and the execution's, on their way when the cancellation comes
        record_all_durably(records)

    audit.record_all_durably = slow  # type: ignore[method-assign]
    execution_id = orch.start(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme", request_text=(
        "Analyze permit WP-10231 and tell me if it can be released")), "spiffe://agentmesh.local/client/test")
    runner = threading.Thread(target=orch.run, args=(execution_id,))
    runner.start()
    canceller = threading.Thread(target=lambda: orch.cancel(_user(orch, idp, "alice", "analyst"), execution_id, "x"))
    try:
        assert arrived.wait(10)
        canceller.start()
        time.sleep(0.3)
        assert orch._live[execution_id].cancelled.is_set()
    finally:
        go.set()
        runner.join(20)
        canceller.join(20)
    kinds = [(r.event_type, list(r.reason_codes)) for r in audit.records]
    cancel = next(i for i, (_, codes) in enumerate(kinds) if codes[:1] == ["CANCEL_REQUESTED"])
    assert [t for t, _ in kinds[cancel - 2:cancel]] == [audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED,
                                                        audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED]


def test_a_stage_ending_record_audit_cannot_take_waits_in_the_outbox_before_the_execution_goes_on(
        world: Any) -> None:
    orch, specialists, audit, token, _ = world
    record = audit.record

    def down_for_the_first_end(event_type: int, **fields: Any) -> Any:
        if event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED and fields["agent_id"] == "work-permit-agent":
            raise errors.Unavailable("connection refused", reason="UNAVAILABLE")
        return record(event_type, **fields)

    audit.record = down_for_the_first_end

    def durably(event_type: int, **fields: Any) -> None:
        try:
            audit.record(event_type, **fields)
        except errors.Unavailable:
            audit.outbox.append(audit_pb2.AuditRecord(event_type=event_type, **fields))

    audit.record_durably = durably
    ex = _analyze(orch, token)
    assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED
    assert [(r.event_type, r.agent_id) for r in audit.outbox] == [
        (audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED, "work-permit-agent")]
    assert len([r for r in audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED]) == 4


def _breaking(audit: Audit, breaks_it: Callable[[dict[str, Any]], bool], *, after_s: float = 0.0,
              held: bool = False) -> list[str]:
    """Makes the first TASK_FINISHED for which ``breaks_it(fields)`` holds fail to be built (a fault of the
    supervisor, not an absent audit), ``after_s`` after it was asked for; the agents whose record broke.
    ``held``: the one held back for the execution's end (built when it is held), else one recorded."""
    broken: list[str] = []

    def breaking(make: Callable[..., Any]) -> Callable[..., Any]:
        def breaks(event_type: int, **fields: Any) -> Any:
            if event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED and \
                    "SUPERVISOR_ERROR" not in fields["reason_codes"] and not broken and breaks_it(fields):
                broken.append(fields["agent_id"])
                time.sleep(after_s)
                raise ValueError("the record cannot be built")
            return make(event_type, **fields)
        return breaks

    if held:
        audit.build = breaking(audit.build)  # type: ignore[method-assign]
    else:
        audit.record_durably = breaking(audit.record_durably)  # type: ignore[method-assign]
    return broken


def _ended_on_supervisor_error(audit: Audit, tmp_path: Path, ex: pb.Execution, broken: list[str]) -> None:
    """The execution FAILED inside the supervisor; the broken task's end is on the record as that failure,
    it is FAILED in memory and in the store (never stored completed or RUNNING), every delegation is
    closed, and the execution's end comes last."""
    assert len(broken) == 1
    assert ex.status == pb.EXECUTION_STATUS_FAILED and ex.reason.startswith("SUPERVISOR_ERROR")
    closed = [r for r in audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED
              and r.agent_id == broken[0]]
    assert [list(r.reason_codes) for r in closed] == [["FAILED", "SUPERVISOR_ERROR"]]
    assert audit.records[-1].event_type == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED
    assert _stored_status(tmp_path, ex.execution_id, broken[0]) == common_pb2.TASK_STATUS_FAILED
    assert next(n.status for n in ex.graph.nodes if n.target_agent_id == broken[0]) == common_pb2.TASK_STATUS_FAILED
    _every_delegation_closed(audit)


def _on(pool: str) -> Callable[[dict[str, Any]], bool]:
    return lambda fields: threading.current_thread().name.startswith(pool)


def test_a_task_end_that_cannot_be_made_on_its_own_thread_fails_the_execution_and_the_task(
        world: Any, tmp_path: Path) -> None:
    orch, specialists, audit, token, _ = world
    # Of stage two's three tasks, the two that do not end the stage record their end on their own thread.
    broken = _breaking(audit, lambda f: _on("task")(f) and f["agent_id"] != "work-permit-agent")
    _ended_on_supervisor_error(audit, tmp_path, _analyze(orch, token), broken)


@pytest.mark.parametrize("agent", ["work-permit-agent", "last of stage two"])
def test_a_stage_ending_record_that_cannot_be_made_fails_the_execution_as_on_the_tasks_own_thread(
        world: Any, tmp_path: Path, agent: str) -> None:
    orch, specialists, audit, token, _ = world
    # The record that ends stage one is made on the record-ahead pool; the one that ends the last stage
    # (which of stage two's tasks ends last is up to the machine) is held back for the execution's end.
    if agent == "work-permit-agent":
        broken = _breaking(audit, lambda f: _on("record-ahead")(f) and f["agent_id"] == agent)
    else:
        broken = _breaking(audit, lambda f: f["agent_id"] != "work-permit-agent", held=True)
    _ended_on_supervisor_error(audit, tmp_path, _analyze(orch, token), broken)
    assert audit.together == []  # the execution's end went on its own
    if agent == "work-permit-agent":  # the next stage never ran
        assert [r.task.target_agent_id for r in specialists.requests] == ["work-permit-agent"]
        assert [r.agent_id for r in audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED] \
            == ["work-permit-agent"]


@pytest.mark.parametrize("stage", ["one", "last"])
def test_a_task_that_fails_while_its_record_sent_ahead_fails_too_still_ends_the_execution_on_the_record(
        world: Any, tmp_path: Path, stage: str) -> None:
    orch, specialists, audit, token, _ = world
    if stage == "one":
        # Stage one's task sends its end ahead, then fails inside the supervisor while that record is still
        # on its way, and the record then cannot be made either.
        broken = _breaking(audit, lambda f: _on("record-ahead")(f) and f["agent_id"] == "work-permit-agent",
                           after_s=0.3)
    else:
        # The last stage's last task holds its end back for the execution's, cannot make it, then fails.
        broken = _breaking(audit, lambda f: f["agent_id"] != "work-permit-agent", held=True)
    finished = orch._traffic.guard.finished

    def fails_for_the_task_sent_ahead(route: Any, *, succeeded: bool) -> bool:
        (live,) = orch._live.values()
        with live.lock:
            ahead = {task_id for task_id, _ in live.ahead}
            agents = {n.task_id: n.target_agent_id for n in live.execution.graph.nodes}
        if route.agent_id in {agents[t] for t in ahead}:
            raise RuntimeError("the supervisor failed after the task's end was sent ahead")
        return finished(route, succeeded=succeeded)

    orch._traffic.guard.finished = fails_for_the_task_sent_ahead
    _ended_on_supervisor_error(audit, tmp_path, _analyze(orch, token), broken)
