"""Retries, fallbacks, the canary split and live signals on the orchestrator's real path (PRD §45, §47, §57).

The registry, selection, planner, projection, aggregation, store and grant signer are real; the specialists,
the policy engine, the agents' health and the onboarding's versions are in-memory stand-ins."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import assertion, errors, grants, spiffe
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from agentmesh.vocabulary import LifecycleStatus as S
from supervisor_svc.definitions import default_catalog, projection_config
from supervisor_svc.executions import ExecutionStore
from supervisor_svc.orchestrator import Orchestrator
from supervisor_svc.projection import Projector
from supervisor_svc.registry import AgentManifest, AgentRegistry
from supervisor_svc.routing import CanaryConfig, Endpoint, RetryConfig, RoutingConfig, canary_bucket
from supervisor_svc.selection import AgentSelector
from supervisor_svc.traffic import Traffic

from .conftest import demo_tenants
from .test_orchestrator import Audit, Call, Policy, Specialists

READS = {"workPermit.get": False, "workPermit.search": False, "training.getStatus": False, "risk.evaluate": False,
         "compliance.getChecklist": False, "knowledge.search": False, "worker.get": False,
         "workPermit.release": True, "workPermit.updateValidity": True}
"""The capability registry's risk profiles: which capabilities mutate."""
UNAVAILABLE = errors.Unavailable("connection refused", reason="UNAVAILABLE")


class Scripted(Specialists):
    """A specialist per agent; ``script[agent]`` lists what its calls get in turn (the last one repeats):
    an error, a result, or None for a well-behaved answer. Records the endpoint of every call."""

    def __init__(self) -> None:
        super().__init__()
        self.script: dict[str, list[Any]] = {}
        self.endpoints: list[tuple[str, Endpoint | None]] = []

    def start(self, agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float,
              endpoint: Any = None) -> Call:
        self.endpoints.append((agent_id, endpoint))
        steps = self.script.get(agent_id, [])
        step = (steps.pop(0) if len(steps) > 1 else steps[0]) if steps else None
        if isinstance(step, errors.MeshError):
            with self.lock:
                self.requests.append(request)
            return Call(None, step)
        if isinstance(step, common_pb2.AgentResult):
            with self.lock:
                self.requests.append(request)
            answer = common_pb2.AgentResult()
            answer.CopyFrom(step)
            answer.task_id, answer.agent_id = request.task.task_id, agent_id
            return Call(answer)
        if agent_id == "risk-rules-agent":  # the risk agent's rules, under its fallback's name
            call = super().start("risk-agent", request, timeout_s)
            result = call.result()
            result.agent_id = agent_id
            return Call(result)
        return super().start(agent_id, request, timeout_s)


class FallbackPolicy(Policy):
    """The execution policies, and use_fallback_agent as fallback.cedar says it for the demo tenants."""

    def __init__(self, allow: bool = True) -> None:
        super().__init__()
        self.allow = allow

    def __call__(self, request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        if request.operation != policy_pb2.OPERATION_KIND_USE_FALLBACK_AGENT:
            return super().__call__(request)
        self.requests.append(request)
        return policy_pb2.AuthorizeResponse(decision=common_pb2.PolicyDecision(
            decision_id=f"fb{len(self.requests)}", policy_version="p-1",
            effect=common_pb2.POLICY_EFFECT_ALLOW if self.allow else common_pb2.POLICY_EFFECT_DENY,
            reason_codes=["agent.fallback"] if self.allow else ["agent.fallback_not_allowed"]))


class Health:
    """The agents' gRPC health, by endpoint key; SERVING unless told otherwise."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}

    def __call__(self, endpoint: Endpoint, timeout_s: float) -> str:
        return self.status.get(endpoint.key, "SERVING")


@dataclasses.dataclass(frozen=True)
class Version:
    manifest: AgentManifest
    status: S
    endpoint: str = ""
    spiffe_id: str = "spiffe://agentmesh.local/agent/training-agent"
    shipped: bool = False


class Versions:
    """The onboarding's versions; ``roll_back_canary`` moves a CANARY back to APPROVED as it would."""

    def __init__(self) -> None:
        self.records: list[Version] = []
        self.rolled_back: list[tuple[str, str, str, Sequence[str]]] = []

    def list(self, agent_id: str = "") -> list[Version]:
        return [r for r in self.records if not agent_id or r.manifest.agent_id == agent_id]

    def roll_back_canary(self, agent_id: str, version: str, reason: str, codes: Sequence[str] = ()) -> None:
        self.rolled_back.append((agent_id, version, reason, codes))
        self.records = [dataclasses.replace(r, status=S.APPROVED) if (r.manifest.agent_id, r.manifest.version) ==
                        (agent_id, version) else r for r in self.records]


@dataclasses.dataclass
class World:
    orch: Orchestrator
    specialists: Scripted
    audit: Audit
    policy: FallbackPolicy
    health: Health
    versions: Versions
    registry: AgentRegistry
    token: str
    globex: str

    def analyze(self, token: str | None = None, tenant: str = "acme") -> pb.Execution:
        execution_id = self.orch.start(pb.AnalyzeRequest(
            user_assertion=token or self.token, tenant_id=tenant,
            request_text="Analyze permit WP-10231 and tell me if it can be released"),
            "spiffe://agentmesh.local/client/test")
        return self.orch.run(execution_id)


def _world(tmp_path: Path, *, routing: RoutingConfig | None = None, mutating: dict[str, bool] | None = None,
           allow: bool = True) -> World:
    idp = Ed25519PrivateKey.generate()
    registry = AgentRegistry(tmp_path / "agents.db")
    tenants = demo_tenants()
    routing = routing or RoutingConfig(retry=RetryConfig(max_attempts=3, initial_backoff_ms=5, multiplier=2,
                                                         max_backoff_ms=20, execution_budget=6))
    health, versions = Health(), Versions()
    traffic = Traffic.build(routing, versions=versions, probe=health, rollback=versions.roll_back_canary,
                            mutating=READS if mutating is None else mutating)
    specialists, audit, policy = Scripted(), Audit(), FallbackPolicy(allow)
    orch = Orchestrator(
        identity=spiffe.service("supervisor"), registry=registry,
        selector=AgentSelector(registry, tenants, traffic=traffic), tenants=tenants,
        projector=Projector(projection_config(default_catalog())), store=ExecutionStore(tmp_path / "supervisor.db"),
        signer=grants.GrantSigner(Ed25519PrivateKey.generate()), specialists=specialists, audit=audit,
        verify_assertion=functools.partial(assertion.verify, key=idp.public_key()), authorize=policy,
        traffic=traffic)
    return World(orch, specialists, audit, policy, health, versions, registry,
                 assertion.issue(idp, tenant_id="acme", user_id="alice", roles=["analyst"]),
                 assertion.issue(idp, tenant_id="globex", user_id="gina", roles=["analyst"]))


@pytest.fixture()
def world(tmp_path: Path) -> Iterator[World]:
    w = _world(tmp_path)
    yield w
    w.orch.close()
    w.registry.close()


def _attempts(ex: pb.Execution, agent_id: str) -> list[pb.TaskAttempt]:
    task_id = next(n.task_id for n in ex.graph.nodes if n.target_agent_id == agent_id or any(
        a.task_id == n.task_id and a.agent_id == agent_id for a in ex.attempts))
    return [a for a in ex.attempts if a.task_id == task_id]


def _node(ex: pb.Execution, task_id: str) -> common_pb2.AgentTask:
    return next(n for n in ex.graph.nodes if n.task_id == task_id)


# --- agent-level retries (PRD §45) ----------------------------------------------------------------

def test_a_read_that_failed_transiently_is_retried_with_backoff(world: World) -> None:
    world.specialists.script["risk-agent"] = [UNAVAILABLE, UNAVAILABLE, None]
    ex = world.analyze()
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    risk = _attempts(ex, "risk-agent")
    assert [(a.attempt, a.kind, a.outcome, a.backoff_ms) for a in risk] == [
        (1, pb.ATTEMPT_KIND_FIRST, pb.ATTEMPT_OUTCOME_UNAVAILABLE, 0),
        (2, pb.ATTEMPT_KIND_RETRY, pb.ATTEMPT_OUTCOME_UNAVAILABLE, 5),
        (3, pb.ATTEMPT_KIND_RETRY, pb.ATTEMPT_OUTCOME_ANSWERED, 10)]
    assert risk[0].reason.startswith("UNAVAILABLE UNAVAILABLE: connection refused")
    assert all(a.agent_version == "1.0.0" and a.endpoint == "config" for a in risk)
    # Every other task took one call; each attempt is its own delegation, grant and record.
    assert {a.task_id for a in ex.attempts if a.task_id != risk[0].task_id and a.attempt > 1} == set()
    delegated = [r for r in world.audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED
                 and r.task_id == risk[0].task_id]
    assert [next(c for c in r.reason_codes if c.startswith("attempt=")) for r in delegated] == [
        "attempt=1", "attempt=2", "attempt=3"]
    assert len({r.principal.grants[0].grant for r in delegated}) == 3  # a fresh grant each time


def test_retries_stop_at_max_attempts_and_the_failure_is_reported(world: World) -> None:
    world.specialists.script["training-agent"] = [UNAVAILABLE]
    ex = world.analyze()
    training = _attempts(ex, "training-agent")
    assert [a.outcome for a in training] == [pb.ATTEMPT_OUTCOME_UNAVAILABLE] * 3
    assert _node(ex, training[0].task_id).status == common_pb2.TASK_STATUS_FAILED
    assert ex.decision != common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    assert any("training" in m.text for m in ex.missing)
    assert not ex.fallbacks  # the training agent declares none


def test_a_task_whose_grant_may_mutate_is_never_retried(tmp_path: Path) -> None:
    w = _world(tmp_path, mutating={**READS, "risk.evaluate": True})
    w.specialists.script["risk-agent"] = [UNAVAILABLE, None]
    ex = w.analyze()
    assert [a.outcome for a in _attempts(ex, "risk-agent")] == [pb.ATTEMPT_OUTCOME_UNAVAILABLE]
    # Nor run elsewhere: the primary was called and may have acted.
    (decision,) = ex.fallbacks
    assert not decision.allowed and decision.reason_codes[0] == "FALLBACK_NOT_IDEMPOTENT"
    assert "risk.evaluate mutates" in decision.reason_codes[1]
    w.orch.close()


def test_without_risk_profiles_nothing_is_retried(tmp_path: Path) -> None:
    w = _world(tmp_path)
    w.orch._traffic = dataclasses.replace(w.orch._traffic, mutating=None)
    w.specialists.script["risk-agent"] = [UNAVAILABLE, None]
    ex = w.analyze()
    assert [a.agent_id for a in _attempts(ex, "risk-agent")] == ["risk-agent"]
    assert ex.fallbacks[0].reason_codes[0] == "FALLBACK_NOT_IDEMPOTENT"
    w.orch.close()


def test_the_execution_retry_budget_is_shared_by_its_tasks(tmp_path: Path) -> None:
    w = _world(tmp_path, routing=RoutingConfig(retry=RetryConfig(max_attempts=3, initial_backoff_ms=1,
                                                                 execution_budget=1)))
    w.specialists.script["risk-agent"] = [UNAVAILABLE]
    w.specialists.script["training-agent"] = [UNAVAILABLE]
    w.specialists.script["compliance-agent"] = [UNAVAILABLE]
    ex = w.analyze()
    assert sum(1 for a in ex.attempts if a.kind == pb.ATTEMPT_KIND_RETRY) == 1
    w.orch.close()


def _partial(reason: str) -> common_pb2.AgentResult:
    partial = common_pb2.AgentResult(status=common_pb2.RESULT_STATUS_PARTIAL, error_reason=reason)
    partial.result.update({"verdict": "UNKNOWN", "subjects": {"permit:WP-10231/risk": "UNKNOWN"}})
    return partial


def test_a_result_whose_governance_was_away_is_retried_but_never_falls_back(world: World) -> None:
    world.specialists.script["risk-agent"] = [_partial("GOVERNANCE_UNAVAILABLE: risk.evaluate AUDIT_UNAVAILABLE")]
    ex = world.analyze()
    risk = _attempts(ex, "risk-agent")
    assert [a.outcome for a in risk] == [pb.ATTEMPT_OUTCOME_TRANSIENT_RESULT] * 3
    assert risk[0].reason.startswith("RESULT_STATUS_PARTIAL: GOVERNANCE_UNAVAILABLE")
    assert not ex.fallbacks and not any(p.operation == policy_pb2.OPERATION_KIND_USE_FALLBACK_AGENT
                                        for p in world.policy.requests)


def test_a_result_whose_external_source_was_away_is_an_answer(world: World) -> None:
    # The capability service's gateway already retried the LMS and keeps its circuit: not again here.
    world.specialists.script["risk-agent"] = [_partial("RISK_REGISTER_UNAVAILABLE: risk.evaluate UNAVAILABLE"), None]
    ex = world.analyze()
    assert [a.outcome for a in _attempts(ex, "risk-agent")] == [pb.ATTEMPT_OUTCOME_ANSWERED]


def test_a_slow_health_probe_still_sends_the_task(world: World) -> None:
    world.health.status["config:risk-agent"] = "UNREACHABLE (DEADLINE_EXCEEDED)"
    ex = world.analyze()
    score = next(s for s in ex.selection_scores if s.agent_id == "risk-agent")
    assert (score.availability_score, score.availability_reason) == (0.5, "UNREACHABLE (DEADLINE_EXCEEDED)")
    assert [a.outcome for a in _attempts(ex, "risk-agent")] == [pb.ATTEMPT_OUTCOME_ANSWERED]


def test_a_cancelled_wait_ends_the_retries(world: World) -> None:
    world.specialists.script["risk-agent"] = [UNAVAILABLE]
    world.orch._traffic = dataclasses.replace(world.orch._traffic, retry=RetryConfig(initial_backoff_ms=60_000))
    import threading

    execution_id = world.orch.start(pb.AnalyzeRequest(
        user_assertion=world.token, tenant_id="acme",
        request_text="Analyze permit WP-10231 and tell me if it can be released"), "spiffe://x/client/test")
    done = threading.Thread(target=world.orch.run, args=(execution_id,))
    done.start()
    user = world.orch.authenticate(world.token)
    while not any(a.agent_id == "risk-agent" for a in world.orch.snapshot(user, execution_id).attempts):
        done.join(0.01)
    world.orch.cancel(user, execution_id, "enough")
    done.join(10)
    assert not done.is_alive()
    ex = world.orch.snapshot(user, execution_id)
    assert ex.status == pb.EXECUTION_STATUS_CANCELLED
    assert len(_attempts(ex, "risk-agent")) == 1


# --- fallback agents (PRD §47) --------------------------------------------------------------------

def test_an_unavailable_primary_runs_on_its_fallback_when_the_policy_allows(world: World) -> None:
    world.specialists.script["risk-agent"] = [UNAVAILABLE]
    ex = world.analyze()
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    attempts = _attempts(ex, "risk-agent")
    assert [(a.agent_id, a.kind, a.outcome) for a in attempts] == [
        ("risk-agent", pb.ATTEMPT_KIND_FIRST, pb.ATTEMPT_OUTCOME_UNAVAILABLE),
        ("risk-agent", pb.ATTEMPT_KIND_RETRY, pb.ATTEMPT_OUTCOME_UNAVAILABLE),
        ("risk-agent", pb.ATTEMPT_KIND_RETRY, pb.ATTEMPT_OUTCOME_UNAVAILABLE),
        ("risk-rules-agent", pb.ATTEMPT_KIND_FALLBACK, pb.ATTEMPT_OUTCOME_ANSWERED)]
    fallback = attempts[-1]
    assert fallback.fallback_for == "risk-agent" and fallback.decision_id
    (decision,) = ex.fallbacks
    assert (decision.primary_agent_id, decision.primary_version, decision.fallback_agent_id,
            decision.fallback_version, decision.allowed, decision.decision_id) == (
        "risk-agent", "1.0.0", "risk-rules-agent", "1.0.0", True, fallback.decision_id)
    assert decision.primary_failure.startswith("UNAVAILABLE") and "agent.fallback" in decision.reason_codes
    # The task says it ran on the fallback, with its own projection (the description is not projected to it).
    node = _node(ex, fallback.task_id)
    assert node.target_agent_id == "risk-rules-agent" and node.status == common_pb2.TASK_STATUS_COMPLETED
    sent = [r for r in world.specialists.requests if r.task.target_agent_id == "risk-rules-agent"][-1]
    assert "description" not in sent.task.input.fields and sent.task.projection.target_agent_id == "risk-rules-agent"
    assert next(r for r in ex.results if r.task_id == fallback.task_id).agent_id == "risk-rules-agent"
    # Asked of the policy engine as the user, on the fallback's version; the decision is on the record first.
    (asked,) = [p for p in world.policy.requests if p.operation == policy_pb2.OPERATION_KIND_USE_FALLBACK_AGENT]
    assert (asked.agent.agent_id, asked.resource.type, asked.resource.id, asked.resource.tenant_id,
            asked.user.user_id) == ("risk-rules-agent", "AgentVersion", "risk-rules-agent@1.0.0", "acme", "alice")
    selected = [r for r in world.audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_AGENT_SELECTED
                and "FALLBACK" in r.reason_codes]
    assert len(selected) == 1 and selected[0].policy_decision.decision_id == decision.decision_id
    assert "primary=risk-agent@1.0.0" in selected[0].reason_codes
    delegated = [r for r in world.audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED
                 and r.agent_id == "risk-rules-agent"]
    assert world.audit.records.index(selected[0]) < world.audit.records.index(delegated[0])


def test_a_denied_fallback_reports_the_primary_failure_honestly(tmp_path: Path) -> None:
    w = _world(tmp_path, allow=False)
    w.specialists.script["risk-agent"] = [UNAVAILABLE]
    ex = w.analyze()
    attempts = _attempts(ex, "risk-agent")
    assert {a.agent_id for a in attempts} == {"risk-agent"}
    (decision,) = ex.fallbacks
    assert not decision.allowed and decision.reason_codes[:2] == ["FALLBACK_DENIED", "agent.fallback_not_allowed"]
    node = _node(ex, attempts[0].task_id)
    assert node.target_agent_id == "risk-agent" and node.status == common_pb2.TASK_STATUS_FAILED
    assert any("risk" in m.text and "UNAVAILABLE" in m.text for m in ex.missing)
    assert ex.decision != common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    denied = [r for r in w.audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED
              and "FALLBACK_NOT_USED" in r.reason_codes]
    assert len(denied) == 1 and "FALLBACK_DENIED" in denied[0].reason_codes
    assert not any(r.task.target_agent_id == "risk-rules-agent" for r in w.specialists.requests)
    w.orch.close()


def test_no_decision_means_no_fallback(world: World) -> None:
    def down(request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        if request.operation == policy_pb2.OPERATION_KIND_USE_FALLBACK_AGENT:
            raise errors.Unavailable("policy engine down", reason="UNAVAILABLE")
        return FallbackPolicy()(request)

    world.orch._authorize = down
    world.specialists.script["risk-agent"] = [UNAVAILABLE]
    (decision,) = world.analyze().fallbacks
    assert not decision.allowed and decision.reason_codes[0] == "POLICY_UNAVAILABLE"


def test_a_primary_known_to_be_down_is_not_called(world: World) -> None:
    world.health.status["config:risk-agent"] = "UNREACHABLE (UNAVAILABLE)"
    ex = world.analyze()
    score = next(s for s in ex.selection_scores if s.agent_id == "risk-agent")
    assert (score.availability_score, score.availability_reason) == (0.0, "UNREACHABLE (UNAVAILABLE)")
    assert score.chosen  # the only agent of its kind for acme: chosen, but not with availability 1.0
    attempts = _attempts(ex, "risk-agent")
    assert [(a.agent_id, a.outcome) for a in attempts] == [("risk-agent", pb.ATTEMPT_OUTCOME_NOT_CALLED)] * 3 + [
        ("risk-rules-agent", pb.ATTEMPT_OUTCOME_ANSWERED)]
    assert "UNREACHABLE (UNAVAILABLE)" in attempts[0].reason
    assert not any(agent == "risk-agent" for agent, _ in world.specialists.endpoints)


def test_a_fallback_that_is_down_too_is_not_used(world: World) -> None:
    world.health.status["config:risk-agent"] = "NOT_SERVING"
    world.health.status["config:risk-rules-agent"] = "NO_ADDRESS"
    ex = world.analyze()
    (decision,) = ex.fallbacks
    assert not decision.allowed and decision.reason_codes == ["FALLBACK_UNAVAILABLE", "NO_ADDRESS"]


def test_a_fallback_that_is_not_active_is_not_used(world: World) -> None:
    world.registry.set_status("risk-rules-agent", S.DISABLED, "incident", "ops")
    world.specialists.script["risk-agent"] = [UNAVAILABLE]
    (decision,) = world.analyze().fallbacks
    assert not decision.allowed and decision.reason_codes[0] == "FALLBACK_NOT_ACTIVE"
    assert not any(p.operation == policy_pb2.OPERATION_KIND_USE_FALLBACK_AGENT for p in world.policy.requests)


# --- the canary split (PRD §57) -------------------------------------------------------------------

def _with_canary(world: World, share: float, endpoint: str = "127.0.0.1:7601") -> None:
    shipped = world.registry.get("training-agent").manifest
    world.versions.records = [Version(shipped, S.ACTIVE, shipped=True),
                              Version(dataclasses.replace(shipped, version="1.1.0"), S.CANARY, endpoint=endpoint)]
    world.orch._traffic.router._canary = CanaryConfig(share_percent=share, window=4, min_tasks=2,
                                                      max_failure_rate=0.5)
    world.orch._traffic.guard._config = world.orch._traffic.router._canary


def test_the_canary_gets_its_share_and_the_version_is_recorded(world: World) -> None:
    _with_canary(world, 50.0)
    seen: dict[bool, int] = {True: 0, False: 0}
    for _ in range(12):
        ex = world.analyze()
        canary = canary_bucket(ex.execution_id, "training-agent") < 50
        seen[canary] += 1
        version = "1.1.0" if canary else "1.0.0"
        (attempt,) = _attempts(ex, "training-agent")
        assert (attempt.agent_version, attempt.endpoint) == (version, "127.0.0.1:7601" if canary else "config")
        score = next(s for s in ex.selection_scores if s.agent_id == "training-agent")
        assert score.agent_version == version and score.chosen and score.task_id == attempt.task_id
        assert score.version_reason.startswith("canary share 50%" if canary else "ACTIVE version (canary 1.1.0")
        result = next(r for r in ex.results if r.task_id == attempt.task_id)
        assert result.versions.agent_version == version
    assert seen[True] and seen[False]
    sent = [e for a, e in world.specialists.endpoints if a == "training-agent"]
    assert {e.address for e in sent if e is not None} == {"", "127.0.0.1:7601"}


def test_a_failing_canary_is_rolled_back_and_traffic_returns_to_the_active_version(world: World) -> None:
    _with_canary(world, 100.0)
    world.specialists.script["training-agent"] = [UNAVAILABLE]
    first, second = world.analyze(), world.analyze()
    assert {a.agent_version for a in _attempts(first, "training-agent")} == {"1.1.0"}
    assert world.versions.rolled_back and world.versions.rolled_back[0][:2] == ("training-agent", "1.1.0")
    agent_id, version, reason, codes = world.versions.rolled_back[0]
    assert reason == "canary failure rate 100% (2 of its last 2 tasks) is above 50%"
    assert "CANARY_ROLLBACK" in codes
    world.specialists.script["training-agent"] = [None]
    third = world.analyze()
    (attempt,) = _attempts(third, "training-agent")
    assert (attempt.agent_version, attempt.outcome) == ("1.0.0", pb.ATTEMPT_OUTCOME_ANSWERED)
    assert len(world.versions.rolled_back) == 1
    assert second.execution_id != third.execution_id


# --- history in the scores ------------------------------------------------------------------------

def test_history_is_the_real_success_rate(world: World) -> None:
    first = world.analyze()
    score = next(s for s in first.selection_scores if s.agent_id == "risk-agent")
    assert (score.history_score, score.history_reason) == (0.5, "no finished task yet")
    world.specialists.script["risk-agent"] = [common_pb2.AgentResult(status=common_pb2.RESULT_STATUS_FAILED,
                                                                     error_reason="NOT_AUTHORISED: x")]
    world.analyze()
    third = world.analyze()
    score = next(s for s in third.selection_scores if s.agent_id == "risk-agent")
    # Planned before its own tasks ran: the first execution's risk task succeeded, the second's failed.
    assert (score.history_score, score.history_reason) == (0.5, "1 of 2 recent tasks succeeded")
    world.analyze()
    fourth = world.analyze()
    score = next(s for s in fourth.selection_scores if s.agent_id == "risk-agent")
    assert (score.history_score, score.history_reason) == (0.25, "1 of 4 recent tasks succeeded")
