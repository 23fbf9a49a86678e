"""Agent traffic over real processes (PRD §45, §47, §57): retries of a stalled agent's reads, availability in the
scores, fallback agents under the policy engine, the canary split and its automatic rollback, and a registered
version reached at its own endpoint, verified as its SPIFFE id.

The module starts its own mesh: seven agents (the risk agent's rules-only fallback too), a routing file with a
50 % canary share and short backoffs, and traces exported to a receiver in the test process. A second process of
the training agent is onboarded through the whole lifecycle (register, validate, evaluate, approve) as its canary.
It stops agent processes of its own mesh (executions on PostgreSQL when the suite runs with the mesh there).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentmesh import errors, launcher, spiffe, transport
from agentmesh.config import DEFAULT_AGENTS, MeshConfig
from agentmesh.identities import PLATFORM_CLI
from agentmesh.v1 import agent_registry_service_pb2 as reg_pb2
from agentmesh.v1 import agent_registry_service_pb2_grpc as reg_grpc
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc.registry import default_agents_dir
from supervisor_svc.routing import Endpoint, canary_bucket
from supervisor_svc.servicer import GrpcSpecialists

from .conftest import (
    MESH_ON_POSTGRESQL,
    RoleProcess,
    client_tls,
    fresh_database,
    launched_mesh,
    peer_address,
    write_config,
)
from .otlp_receiver import OtlpReceiver
from .test_analysis_e2e import analyze, audit_records, supervisor, token
from .test_cli import am

PERMIT = "Analyze permit WP-10231 and tell me if it can be released"
OLGA = ("--tenant", "acme", "--user", "olga")
ROUTING = {
    "canary": {"share_percent": 50, "window": 4, "min_tasks": 2, "max_failure_rate": 0.5},
    "retry": {"max_attempts": 3, "initial_backoff_ms": 300, "multiplier": 2, "max_backoff_ms": 1200,
              "execution_budget": 6},
    "availability": {"probe_ttl_ms": 200, "probe_timeout_ms": 500, "circuit_failures": 3, "circuit_open_ms": 60000},
    "history": {"window": 20},
}


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


@pytest.fixture(scope="module")
def traffic_mesh(tmp_path_factory: pytest.TempPathFactory, receiver: OtlpReceiver) -> Iterator[MeshConfig]:
    home = tmp_path_factory.mktemp("traffic-mesh")
    routing = home / "routing.yaml"
    routing.write_text(yaml.safe_dump(ROUTING))
    # A stalled agent's attempt ends at the task's deadline: 5 s here.
    fields: dict[str, Any] = {"agents": [*DEFAULT_AGENTS, "risk-rules-agent"], "routing_file": str(routing),
                              "task_timeout_s": 5}
    if MESH_ON_POSTGRESQL:
        fields["database_url"] = fresh_database()
    write_config(home, **fields)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}", "OTEL_EXPORTER_OTLP_INSECURE": "true",
           "OTEL_BSP_SCHEDULE_DELAY": "200"}
    with launched_mesh(home, env=env) as cfg:
        yield cfg


def _task(ex: pb.Execution, agent_id: str) -> str:
    """The task of ``agent_id``'s analysis (it may have run on a fallback since)."""
    return next(a.task_id for a in ex.attempts if a.agent_id == agent_id)


def _attempts(ex: pb.Execution, task_id: str) -> list[pb.TaskAttempt]:
    return [a for a in ex.attempts if a.task_id == task_id]


def _until(check: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.2)


def _discover(cfg: MeshConfig, domain: str) -> reg_pb2.DiscoverAgentsResponse:
    channel = transport.secure_channel(peer_address(cfg, "supervisor"), client_tls(cfg, PLATFORM_CLI),
                                       spiffe.service("supervisor"))
    with channel:
        return reg_grpc.AgentRegistryServiceStub(channel).DiscoverAgents(
            reg_pb2.DiscoverAgentsRequest(tenant_id="acme", domains=[domain]), timeout=30)


# --- agent-level retries (PRD §45) ----------------------------------------------------------------

def _execution(cfg: MeshConfig, execution_id: str) -> pb.Execution:
    return supervisor(cfg).GetExecution(pb.GetExecutionRequest(user_assertion=token(cfg),
                                                                execution_id=execution_id), timeout=30).execution


def test_an_agent_that_stalls_is_tried_again_and_each_attempt_is_visible(
    traffic_mesh: MeshConfig, receiver: OtlpReceiver
) -> None:
    cfg = traffic_mesh
    training = next(p for p in launcher.read_state(cfg) if p.name == "training-agent")
    os.kill(training.pid, signal.SIGSTOP)  # it takes the call and answers nothing
    try:
        execution_id = analyze(cfg, PERMIT, detach=True).execution_id
        _until(lambda: [a for a in _execution(cfg, execution_id).attempts
                        if a.agent_id == "training-agent" and a.outcome], "the stalled agent's first attempt ended",
               timeout_s=60)
    finally:
        os.kill(training.pid, signal.SIGCONT)
    ex = _until(lambda: next((e for e in [_execution(cfg, execution_id)] if e.status != pb.EXECUTION_STATUS_RUNNING),
                             None), "the execution ended", timeout_s=60)
    assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED, ex.reason
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    attempts = _attempts(ex, _task(ex, "training-agent"))
    # A stopped process accepts the connection and answers nothing: the call fails UNAVAILABLE (its TLS
    # handshake never completes) or runs out of its 5 s, depending on where it stopped. On a slow machine
    # the supervisor's health probe may find it stalled before the task gets there: then the first
    # attempt is not called at all, and says why.
    first = attempts[0].outcome
    assert first in (pb.ATTEMPT_OUTCOME_UNAVAILABLE, pb.ATTEMPT_OUTCOME_TIMED_OUT,
                     pb.ATTEMPT_OUTCOME_NOT_CALLED), attempts[0]
    assert [(a.attempt, a.kind, a.outcome, a.backoff_ms) for a in attempts] == [
        (1, pb.ATTEMPT_KIND_FIRST, first, 0),
        (2, pb.ATTEMPT_KIND_RETRY, pb.ATTEMPT_OUTCOME_ANSWERED, 300)]
    called_first = first != pb.ATTEMPT_OUTCOME_NOT_CALLED
    expected_reason = ("UNAVAILABLE", "DEADLINE_EXCEEDED after 5000 ms") if called_first else (
        "AGENT_UNAVAILABLE: training-agent@1.0.0",)
    assert attempts[0].reason.startswith(expected_reason), attempts[0].reason
    assert all((a.agent_version, a.endpoint) == ("1.0.0", "config") for a in attempts)
    assert next(r for r in ex.results if r.task_id == attempts[0].task_id).status == common_pb2.RESULT_STATUS_SUCCESS
    # Each attempt that called the agent is its own delegation on the record ...
    delegated = [r for r in audit_records(cfg, execution_id=ex.execution_id)
                 if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED and r.task_id == attempts[0].task_id]
    assert [next(c for c in r.reason_codes if c.startswith("attempt=")) for r in delegated] == (
        ["attempt=1", "attempt=2"] if called_first else ["attempt=2"])

    # ... and an event of the supervisor's span of the task.
    def task_span(spans: list[dict[str, Any]]) -> dict[str, Any] | None:
        return next((s for s in spans if s["service"] == "supervisor" and s["name"] == "AgentTask training-agent"
                     and s["attributes"].get("agentmesh.task_id") == attempts[0].task_id), None)

    span = task_span(receiver.wait_for(lambda spans: task_span(spans) is not None, timeout_s=30))
    assert span is not None
    events = [e["attributes"] for e in span["events"] if e["name"] == "agentmesh.attempt"]
    assert [(e["agentmesh.attempt"], e["agentmesh.attempt_kind"], e["agentmesh.outcome"], e["agentmesh.backoff_ms"])
            for e in events] == [(1, "ATTEMPT_KIND_FIRST", pb.AttemptOutcome.Name(first), 0),
                                 (2, "ATTEMPT_KIND_RETRY", "ATTEMPT_OUTCOME_ANSWERED", 300)]


# --- a registered version at its own endpoint -------------------------------------------------------

def test_a_registered_endpoint_is_reached_only_as_its_registered_identity(traffic_mesh: MeshConfig) -> None:
    # The supervisor's own way to a registered version: a channel verifying the registered SPIFFE id.
    tls = client_tls(traffic_mesh, spiffe.service("supervisor"))

    def configured(agent_id: str) -> Any:
        raise AssertionError(f"{agent_id}: a registered version is never reached at the configured address")

    specialists = GrpcSpecialists(configured, endpoint_channel=lambda address, identity: transport.secure_channel(
        address, tls, identity))
    training_address = peer_address(traffic_mesh, "training-agent")
    risk_address = peer_address(traffic_mesh, "risk-agent")
    own = Endpoint("training-agent", "1.1.0", training_address, str(spiffe.agent("training-agent")))
    impostor = Endpoint("training-agent", "1.1.0", risk_address, str(spiffe.agent("training-agent")))
    try:
        assert specialists.health(own, 5.0) == "SERVING"
        # The risk agent's process answers at that address, but it is not the training agent: never reached.
        assert specialists.health(impostor, 5.0).startswith("UNREACHABLE")
        with pytest.raises(errors.Unavailable):
            specialists.start("training-agent", spec_pb2.RunTaskRequest(), 5.0, endpoint=impostor).result()
    finally:
        specialists.close()


# --- the canary split and its rollback (PRD §57) ----------------------------------------------------

def _versions(cfg: MeshConfig) -> dict[str, str]:
    listed = json.loads(am(cfg.home, "agents", "versions", "training-agent", "--json").stdout)
    return {v["version"]: v["status"] for v in listed}


def test_a_canary_gets_its_share_and_is_rolled_back_when_it_fails(traffic_mesh: MeshConfig, tmp_path: Path) -> None:
    cfg = traffic_mesh
    canary = RoleProcess(cfg, "training-agent-canary", "specialist_svc",
                         extra=("--agent", "training-agent", "--instance", "training-agent-canary"),
                         peers={"capability": peer_address(cfg, "capability"), "audit": peer_address(cfg, "audit")})
    try:
        manifest = yaml.safe_load((default_agents_dir() / "training-agent.yaml").read_text(encoding="utf-8"))
        manifest["version"] = "1.1.0"
        path = tmp_path / "training-agent-1.1.0.yaml"
        path.write_text(yaml.safe_dump(manifest), encoding="utf-8")
        done = am(cfg.home, "agents", "register", str(path), "--endpoint", canary.address, *OLGA)
        assert done.returncode == 0, done.stderr
        for status in ("VALIDATING", "EVALUATING"):
            moved = am(cfg.home, "agents", "transition", "training-agent@1.1.0", status, "--reason", "go", *OLGA)
            assert moved.returncode == 0, moved.stderr
        # Its dataset in the sandbox against the shipped version's result, an approver, then the canary.
        assert am(cfg.home, "agents", "evaluate", "training-agent@1.0.0", *OLGA).returncode == 0
        ran = am(cfg.home, "agents", "evaluate", "training-agent@1.1.0", *OLGA)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        approved = am(cfg.home, "agents", "transition", "training-agent@1.1.0", "APPROVED", "--reason", "evaluated",
                      "--tenant", "acme", "--user", "adam")
        assert approved.returncode == 0, approved.stderr
        moved = am(cfg.home, "agents", "transition", "training-agent@1.1.0", "CANARY", "--reason", "canary", *OLGA)
        assert moved.returncode == 0, moved.stderr

        # Half of acme's executions (by the bucket of their id) go to the canary, at its own endpoint.
        seen: set[bool] = set()
        for _ in range(30):
            ex = analyze(cfg, PERMIT)
            to_canary = canary_bucket(ex.execution_id, "training-agent") < 50
            seen.add(to_canary)
            (attempt,) = _attempts(ex, _task(ex, "training-agent"))
            version = "1.1.0" if to_canary else "1.0.0"
            assert (attempt.agent_version, attempt.endpoint, attempt.outcome) == (
                version, canary.address if to_canary else "config", pb.ATTEMPT_OUTCOME_ANSWERED)
            assert next(r for r in ex.results if r.task_id == attempt.task_id).versions.agent_version == version
            score = next(s for s in ex.selection_scores if s.agent_id == "training-agent")
            assert score.agent_version == version and score.chosen and score.task_id == attempt.task_id
            assert score.version_reason.startswith("canary share 50%" if to_canary else "ACTIVE version (canary")
            if len(seen) == 2:
                break
        assert seen == {True, False}

        # The canary's process stops: its tasks fail, and once they fail above the threshold it is rolled back.
        canary.stop()
        rolled = None
        for _ in range(30):
            ex = analyze(cfg, PERMIT)
            attempts = _attempts(ex, _task(ex, "training-agent"))
            if canary_bucket(ex.execution_id, "training-agent") < 50 and attempts[0].agent_version == "1.1.0":
                assert {a.outcome for a in attempts} <= {pb.ATTEMPT_OUTCOME_UNAVAILABLE, pb.ATTEMPT_OUTCOME_NOT_CALLED}
                assert len(attempts) == 3
            if _versions(cfg)["1.1.0"] == "LIFECYCLE_STATUS_APPROVED":
                rolled = ex
                break
        assert rolled is not None, "the failing canary was not rolled back"
        records = [r for r in audit_records(cfg, agent_id="training-agent")
                   if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_STATUS_CHANGED and "CANARY_ROLLBACK" in r.reason_codes]
        (record,) = records
        assert record.resource == "agent-version:training-agent@1.1.0"
        assert {"from=CANARY", "status=APPROVED", "changed_by=system:supervisor"} <= set(record.reason_codes)
        assert any(c.startswith("failure_rate=") for c in record.reason_codes)
        # From now on every execution's training task goes to the ACTIVE version, the canary's share too.
        for _ in range(4):
            ex = analyze(cfg, PERMIT)
            assert {a.agent_version for a in _attempts(ex, _task(ex, "training-agent"))} == {"1.0.0"}
    finally:
        canary.stop()


# --- availability and fallback (PRD §47) ------------------------------------------------------------

def test_a_stopped_agent_is_not_chosen_as_available_and_its_fallback_runs_only_where_allowed(
    traffic_mesh: MeshConfig,
) -> None:
    cfg = traffic_mesh
    before = next(s for s in _discover(cfg, "risk").scores if s.agent_id == "risk-agent")
    assert (before.availability_score, before.availability_reason) == (1.0, "SERVING")
    risk = next(p for p in launcher.read_state(cfg) if p.name == "risk-agent")
    os.kill(risk.pid, signal.SIGTERM)  # stopped on purpose: the supervising loop leaves it stopped
    # While it stops (its grace period) it answers NOT_SERVING, which scores 0 too; stopped, nothing listens.
    _until(lambda: not launcher.pid_alive(risk.pid), "the risk agent's process exits")
    after = _until(lambda: next((s for s in _discover(cfg, "risk").scores
                                 if s.agent_id == "risk-agent" and s.availability_score == 0.0
                                 and s.availability_reason != "NOT_SERVING"), None),
                   "the stopped risk agent scores availability 0 and is no longer NOT_SERVING (stopping)")
    assert after.availability_reason.startswith("UNREACHABLE") and after.final_score < before.final_score

    # acme's roles hold agent.fallback: the risk task runs on the risk agent's fallback.
    ex = analyze(cfg, PERMIT)
    score = next(s for s in ex.selection_scores if s.agent_id == "risk-agent")
    assert score.chosen and score.availability_score == 0.0
    task_id = _task(ex, "risk-agent")
    attempts = _attempts(ex, task_id)
    assert [(a.agent_id, a.kind, a.outcome) for a in attempts] == [
        ("risk-agent", pb.ATTEMPT_KIND_FIRST, pb.ATTEMPT_OUTCOME_NOT_CALLED),
        ("risk-agent", pb.ATTEMPT_KIND_RETRY, pb.ATTEMPT_OUTCOME_NOT_CALLED),
        ("risk-agent", pb.ATTEMPT_KIND_RETRY, pb.ATTEMPT_OUTCOME_NOT_CALLED),
        ("risk-rules-agent", pb.ATTEMPT_KIND_FALLBACK, pb.ATTEMPT_OUTCOME_ANSWERED)]
    (fallback,) = ex.fallbacks
    assert (fallback.primary_agent_id, fallback.fallback_agent_id, fallback.allowed) == (
        "risk-agent", "risk-rules-agent", True)
    assert fallback.decision_id and fallback.decision_id == attempts[-1].decision_id
    assert "agent.fallback" in fallback.reason_codes
    node = next(n for n in ex.graph.nodes if n.task_id == task_id)
    assert node.target_agent_id == "risk-rules-agent" and node.status == common_pb2.TASK_STATUS_COMPLETED
    result = next(r for r in ex.results if r.task_id == task_id)
    assert result.agent_id == "risk-rules-agent" and result.status == common_pb2.RESULT_STATUS_SUCCESS
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    trail = audit_records(cfg, execution_id=ex.execution_id)
    (selected,) = [r for r in trail if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_AGENT_SELECTED
                   and "FALLBACK" in r.reason_codes]
    assert selected.policy_decision.decision_id == fallback.decision_id
    assert selected.policy_decision.effect == common_pb2.POLICY_EFFECT_ALLOW
    assert "primary=risk-agent@1.0.0" in selected.reason_codes

    # globex's roles do not: the risk analysis is reported missing with the primary's failure.
    ex = analyze(cfg, "Analyze permit WP-20001 and tell me if it can be released", tenant_id="globex",
                 assertion=token(cfg, tenant="globex", user="gina"))
    task_id = _task(ex, "risk-agent")
    assert {a.agent_id for a in _attempts(ex, task_id)} == {"risk-agent"}
    (fallback,) = ex.fallbacks
    assert not fallback.allowed and fallback.reason_codes[:2] == ["FALLBACK_DENIED", "agent.fallback_not_allowed"]
    node = next(n for n in ex.graph.nodes if n.task_id == task_id)
    assert node.target_agent_id == "risk-agent" and node.status == common_pb2.TASK_STATUS_FAILED
    assert any("risk" in m.text and "AGENT_UNAVAILABLE" in m.text for m in ex.missing), list(ex.missing)
    assert ex.decision != common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    denied = [r for r in audit_records(cfg, execution_id=ex.execution_id)
              if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED and "FALLBACK_NOT_USED" in r.reason_codes]
    assert len(denied) == 1 and denied[0].policy_decision.effect == common_pb2.POLICY_EFFECT_DENY
