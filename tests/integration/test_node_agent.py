"""training-agent 2.0.0, the training specialist written in Node.js (agents/node-training), on a real mesh.

The mesh is the whole mesh as ``agentmesh up`` starts it, the Python training agent (1.0.0) included.
The Node.js process gets the agent's certificate (``agentmesh certs issue``) and listens on a free port.
It is onboarded through the lifecycle as far as it goes: the Python 1.0.0 is evaluated first (the
baseline); 2.0.0 is registered at the Node.js endpoint (DRAFT), validated by the Release Manager
(VALIDATING), refused approval before it is evaluated, evaluated in the sandbox against its own process
(EVALUATING: the training dataset, mocked capability answers, the regression gate against 1.0.0),
approved by another person than its registrant (APPROVED), CANARY, then ACTIVE (1.0.0 DEPRECATED).

For the analyses on the real path the test also points ``peers.training-agent`` (the shipped version's
address) at the Node.js process (in the home's config; the supervisor is killed and restarted by the
supervising loop, so it reads it), so every training task reaches it whichever version is chosen; the
version-aware dispatch and the canary split themselves are tests/integration/test_agent_traffic.py's. Real analyses of
the demo permits then get their training findings from the Node.js agent over mTLS: the results carry its
versions, and the capability service's audit records show its calls under the agent identity, with its grant
and the execution's trace. It refuses a RunTask from anyone but the supervisor, each refusal in the audit log
under its own identity.

``scripts/bootstrap`` installs node and the agent's dependencies (``npm ci`` in agents/node-training);
without them this test fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh import errors, launcher, spiffe, transport
from agentmesh.config import DEFAULT_AGENTS, MeshConfig
from agentmesh.identities import OPERATOR
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from agentmesh.v1 import specialist_service_pb2_grpc as spec_grpc
from agentmesh.v1 import supervisor_service_pb2 as pb

from .conftest import (
    MESH_ON_POSTGRESQL,
    agentmesh_cli,
    client_tls,
    fresh_database,
    launched_mesh,
    peer_address,
    write_config,
)
from .test_analysis_e2e import analyze, audit_records, decision, result_of

ROOT = Path(__file__).resolve().parents[2]
AGENT_DIR = ROOT / "agents" / "node-training"
AGENT = "training-agent"
AGENT_ID = spiffe.agent(AGENT)
SUPERVISOR = spiffe.service("supervisor")
VERSION = "training-agent@2.0.0"
OLGA = ("--tenant", "acme", "--user", "olga")
ADAM = ("--tenant", "acme", "--user", "adam")


@dataclass
class NodeMesh:
    cfg: MeshConfig
    address: str
    """Where the Node.js agent listens."""
    log: Path
    fields: dict[str, object]
    """The home's config."""


def _wait(what: str, cond: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _serving(channel: grpc.Channel) -> bool:
    try:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
    except grpc.RpcError:
        return False
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def _restart_supervisor(cfg: MeshConfig) -> None:
    """kill -9 the supervisor: the supervising loop starts it again on its port, and it reads the config anew."""
    before = next(p for p in launcher.read_state(cfg) if p.name == "supervisor")
    os.kill(before.pid, signal.SIGKILL)

    def back() -> bool:
        now = next((p for p in launcher.read_state(cfg) if p.name == "supervisor"), None)
        return now is not None and now.pid != before.pid and now.state == "running"

    _wait("the supervisor to be restarted", back)
    channel = transport.secure_channel(before.address, client_tls(cfg, OPERATOR), SUPERVISOR)
    with channel:
        _wait("the supervisor to serve", lambda: _serving(channel))


def _start(cmd: list[str], log: Path, address_file: Path, what: str) -> tuple[subprocess.Popen[bytes], str]:
    """Starts a process that writes its bound address to ``address_file``; returns it and the address."""
    with open(log, "ab") as out:
        # No terminal for node: from a background job it would reset the terminal's mode (SIGTTOU).
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)

    def bound() -> str | None:
        assert proc.poll() is None, f"{what} exited {proc.returncode}: {log.read_text()[-3000:]}"
        try:
            return str(json.loads(address_file.read_text())["address"])
        except (OSError, ValueError, KeyError):  # not written yet, or not whole yet
            return None

    try:
        return proc, _wait(f"{what} to listen", bound)
    except BaseException:
        _stop(proc)
        raise


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _route(mesh: NodeMesh, address: str) -> None:
    """The supervisor sends training tasks to ``address``: ``peers.training-agent`` in the home's config, read
    by the supervisor when the supervising loop restarts it."""
    write_config(mesh.cfg.home, **mesh.fields, peers={AGENT: address})
    _restart_supervisor(mesh.cfg)


@pytest.fixture(scope="module")
def node_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeMesh]:
    """The mesh with the training agent's two processes outside the launcher, each on a free port: the Python
    one (1.0.0, where the supervisor sends training tasks at first) and the Node.js one (2.0.0, no task yet)."""
    node = shutil.which("node")
    assert node, "node is not installed (scripts/bootstrap installs it)"
    assert (AGENT_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir(), \
        "run scripts/bootstrap (npm ci in agents/node-training)"
    home = tmp_path_factory.mktemp("node-agent-mesh")
    fields: dict[str, object] = {"agents": [a for a in DEFAULT_AGENTS if a != AGENT]}
    if MESH_ON_POSTGRESQL:
        fields["database_url"] = fresh_database()
    write_config(home, **fields)
    with launched_mesh(home) as cfg:
        issued = agentmesh_cli(home, "certs", "issue", "--spiffe-id", str(AGENT_ID))
        assert issued.returncode == 0, issued.stderr
        peers = [f"--peer={name}={peer_address(cfg, name)}" for name in ("capability", "audit")]
        # The Python process runs in a home of its own for its run files, sharing the mesh's identities.
        own = home / "python-training-agent"
        own.mkdir()
        for name in ("ca", "trust", "workloads"):
            (own / name).symlink_to(home / name)
        python, python_address = _start(
            [sys.executable, "-m", "specialist_svc", "--agent", AGENT, "--home", str(own), "--port", "0", *peers],
            home / "logs" / "python-training-agent.log", own / "run" / f"{AGENT}.addr", "the Python training agent")
        try:
            log = home / "logs" / "node-training.log"
            node_proc, address = _start(
                [node, str(AGENT_DIR / "server.js"), "--home", str(home), "--listen", "127.0.0.1:0",
                 "--capability", peer_address(cfg, "capability"), "--audit", peer_address(cfg, "audit"),
                 "--address-file", str(home / "run" / "node-training.addr")],
                log, home / "run" / "node-training.addr", "the Node.js agent")
            try:
                mesh = NodeMesh(cfg, address, log, fields)
                _route(mesh, python_address)
                yield mesh
            finally:
                _stop(node_proc)
            assert node_proc.returncode == 0, f"the Node.js agent did not stop cleanly: {log.read_text()[-3000:]}"
        finally:
            _stop(python)


def _cli(mesh: NodeMesh, *args: str) -> subprocess.CompletedProcess[str]:
    return agentmesh_cli(mesh.cfg.home, *args)


@pytest.fixture(scope="module")
def onboarded(node_mesh: NodeMesh) -> dict[str, subprocess.CompletedProcess[str]]:
    """training-agent@2.0.0 at the Node.js endpoint taken through the lifecycle; each step's command output."""
    steps: dict[str, subprocess.CompletedProcess[str]] = {}

    def step(name: str, *args: str, ok: bool = True) -> None:
        steps[name] = _cli(node_mesh, *args)
        assert (steps[name].returncode == 0) is ok, f"{name}: {steps[name].stdout}{steps[name].stderr}"

    step("baseline", "agents", "evaluate", "training-agent@1.0.0", *OLGA, "--json")  # the Python agent
    step("register", "agents", "register", str(AGENT_DIR / "manifest.yaml"), "--endpoint", node_mesh.address, *OLGA)
    for status in ("VALIDATING", "EVALUATING"):
        step(status, "agents", "transition", VERSION, status, "--reason", "the Node.js training agent", *OLGA)
    step("unevaluated", "agents", "transition", VERSION, "APPROVED", "--reason", "not yet", *ADAM, ok=False)
    step("evaluate", "agents", "evaluate", VERSION, *OLGA, "--json")
    step("own-approval", "agents", "transition", VERSION, "APPROVED", "--reason", "mine", *OLGA,
         "--role", "agent-approver", ok=False)
    step("APPROVED", "agents", "transition", VERSION, "APPROVED", "--reason", "evaluated", *ADAM)
    for status in ("CANARY", "ACTIVE"):
        step(status, "agents", "transition", VERSION, status, "--reason", "ship the Node.js agent", *OLGA)
    return steps


@pytest.fixture(scope="module")
def routed(node_mesh: NodeMesh, onboarded: dict[str, subprocess.CompletedProcess[str]]) -> NodeMesh:
    """The supervisor sends training tasks to the Node.js process (2.0.0, now ACTIVE)."""
    _route(node_mesh, node_mesh.address)
    return node_mesh


def _agent_channel(mesh: NodeMesh, identity: spiffe.SpiffeId) -> grpc.Channel:
    return transport.secure_channel(mesh.address, client_tls(mesh.cfg, identity), AGENT_ID)


def _training(ex: pb.Execution) -> tuple[common_pb2.AgentResult, dict[str, Any]]:
    result = result_of(ex, AGENT)
    return result, json_format.MessageToDict(result.result)


def _codes(result: common_pb2.AgentResult, kind: int) -> list[str]:
    return [s.code for s in result.statements if s.kind == kind]


def test_analyses_get_their_training_findings_from_the_node_agent(routed: NodeMesh) -> None:
    cfg = routed.cfg
    valid = analyze(cfg, "Analyze permit WP-10231 and tell me if it can be released")
    assert decision(valid) == "RECOMMENDED_FOR_RELEASE", valid.summary
    result, data = _training(valid)
    assert result.versions.agent_version == "2.0.0"
    assert result.versions.runtime_version.startswith("agentmesh-node-training/2.0.0 node/v")
    assert result.versions.capability_version.startswith("training.getStatus@")
    assert result.versions.policy_version, "the policy version of the decisions that allowed its calls"
    assert data["subjects"] == {f"worker:{w}/{t}": "PASS" for w in ("W-1001", "W-1002") for t in ("NR-10", "NR-35")}
    assert set(_codes(result, common_pb2.STATEMENT_KIND_FACT)) == {"TRAINING_VALID"}

    expired = analyze(cfg, "Analyze permit WP-10232 and tell me if it can be released")
    assert decision(expired) == "NOT_RECOMMENDED", expired.summary
    result, data = _training(expired)
    assert result.versions.agent_version == "2.0.0"
    assert data["subjects"] == {"worker:W-1003/NR-10": "FAIL", "worker:W-1002/NR-10": "PASS"}
    (fact,) = [s for s in result.statements if s.subject == "worker:W-1003/NR-10"
               and s.kind == common_pb2.STATEMENT_KIND_FACT]
    assert fact.code == "TRAINING_EXPIRED" and "2026-08-15" in fact.text
    (ev,) = [result.evidence[i] for i in fact.evidence_indexes]
    assert ev.source == "lms" and ev.authority == common_pb2.AUTHORITY_LEVEL_VERIFIED_INTEGRATION
    assert ev.reference.endswith("/workers/W-1003/trainings#TR-1003-10") and ev.data["valid_until"] == "2026-08-15"

    # In Portuguese: the statements in the user's language, the same codes and subjects.
    pt = analyze(cfg, "Analise a permissão WP-10232 e me diga se ela pode ser liberada")
    result_pt, data_pt = _training(pt)
    assert data_pt["subjects"] == data["subjects"]
    assert [(s.code, s.subject) for s in result_pt.statements] == [(s.code, s.subject) for s in result.statements]
    assert any("venceu em 2026-08-15" in s.text for s in result_pt.statements if s.code == "TRAINING_EXPIRED")

    # Every capability call it made is in the audit log under the agent identity, with its version and grant.
    trail = audit_records(cfg, execution_id=expired.execution_id)
    (delegated,) = [r for r in trail if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED
                    and r.task_id == result.task_id]
    calls = [r for r in trail if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED and r.agent_id == AGENT]
    assert {r.resource for r in calls} == {"worker:W-1003", "worker:W-1002"}
    for r in calls:
        assert r.recorded_by == str(spiffe.service("capability"))
        assert r.capability_id == "training.getStatus" and r.versions.agent_version == "2.0.0"
        assert r.principal.agent_id == AGENT and r.principal.agent_version == "2.0.0"
        # user -> supervisor -> this agent -> the capability (the capability service adds the last link)
        assert list(r.principal.delegation_chain)[-2:] == [f"agent:{AGENT}", "capability:training.getStatus"]
        assert r.principal.grants
        assert r.task_id == result.task_id and r.correlation_id == delegated.correlation_id
        assert r.trace_id and r.trace_id == delegated.trace_id, "the trace context went on with the call"
        assert r.policy_decision.effect == common_pb2.POLICY_EFFECT_ALLOW
    outcomes = [r for r in audit_records(cfg, execution_id=expired.execution_id)
                if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME and r.agent_id == AGENT]
    assert len(outcomes) == 2 and all(r.outcome == audit_pb2.AUDIT_OUTCOME_SUCCESS for r in outcomes)
    # The two lookups went together (InvokeCapabilities): their four records are one append, at consecutive
    # indexes, each lookup's decision before its outcome.
    by_index = sorted(calls + outcomes, key=lambda r: r.index)
    assert [r.index for r in by_index] == list(range(by_index[0].index, by_index[0].index + 4))
    assert [r.event_type for r in by_index] == [audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED,
                                                audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME] * 2


@pytest.mark.parametrize(("permit", "subjects", "code"), [
    ("WP-10235", {"worker:W-1008/NR-10": "PASS"}, "DUPLICATE_CERTIFICATE_RECORDS"),
    ("WP-10236", {"worker:W-1009/NR-35": "FAIL"}, "TRAINING_NOT_YET_VALID"),
    ("WP-10237", {"worker:W-1010/NR-10": "UNKNOWN"}, "CONFLICTING_CERTIFICATES"),
    ("WP-10239", {"worker:W-1012/NR-10": "PASS", "worker:W-1012/NR-35": "FAIL"}, "TRAINING_MISSING"),
], ids=["duplicate", "future-dated", "conflicting", "missing"])
def test_the_demo_cases_on_the_real_path(routed: NodeMesh, permit: str, subjects: dict[str, str], code: str) -> None:
    ex = analyze(routed.cfg, f"Analyze permit {permit} and tell me if it can be released")
    result, data = _training(ex)
    assert result.versions.agent_version == "2.0.0"
    assert data["subjects"] == subjects
    assert code in {s.code for s in result.statements}
    if permit == "WP-10237":  # a data conflict, each record's issuer named, for the supervisor to decide
        (conflict,) = data["data_conflicts"]
        assert [(s["record_id"], s["verdict"]) for s in conflict["sides"]] == [("TR-1010-10a", "PASS"),
                                                                             ("TR-1010-10b", "FAIL")]


def test_an_unknown_worker_waits_for_the_handoff_the_supervisor_refuses(routed: NodeMesh) -> None:
    ex = analyze(routed.cfg, "Analyze permit WP-10238 and tell me if it can be released")
    result, data = _training(ex)
    assert result.versions.agent_version == "2.0.0"
    assert data["subjects"] == {"worker:W-1011/NR-10": "UNKNOWN"}
    assert _codes(result, common_pb2.STATEMENT_KIND_FACT) == ["WORKER_UNKNOWN_TO_LMS"]
    assert _codes(result, common_pb2.STATEMENT_KIND_UNCERTAINTY) == ["UNKNOWN_WORKER", "WORKER_ASSIGNMENT_UNCONFIRMED"]
    (why,) = [s for s in result.statements if s.code == "WORKER_ASSIGNMENT_UNCONFIRMED"]
    assert "HANDOFF_REFUSED: HANDOFF_NOT_ALLOWED" in why.text


def test_an_lms_timeout_is_unknown_never_an_invented_status(routed: NodeMesh) -> None:
    ex = analyze(routed.cfg, "Analyze permit WP-10234 and tell me if it can be released")
    assert decision(ex) == "INSUFFICIENT_EVIDENCE", ex.summary
    result, data = _training(ex)
    assert result.status == common_pb2.RESULT_STATUS_PARTIAL and result.versions.agent_version == "2.0.0"
    assert set(data["subjects"].values()) == {"UNKNOWN"}
    assert set(_codes(result, common_pb2.STATEMENT_KIND_UNCERTAINTY)) == {"LMS_TIMEOUT"}
    assert not _codes(result, common_pb2.STATEMENT_KIND_FACT) and not result.evidence
    assert result.error_reason.startswith("LMS_TIMEOUT: training.getStatus")


def _run_task(mesh: NodeMesh, identity: spiffe.SpiffeId, request: spec_pb2.RunTaskRequest) -> grpc.RpcError:
    with _agent_channel(mesh, identity) as channel, pytest.raises(grpc.RpcError) as info:
        spec_grpc.SpecialistServiceStub(channel).RunTask(request, timeout=10)
    return info.value


def _refusals(cfg: MeshConfig, reason: str) -> list[audit_pb2.AuditRecord]:
    return [r for r in audit_records(cfg, agent_id=AGENT) if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED
            and r.reason_codes and r.reason_codes[0] == reason]


def test_only_the_supervisor_may_run_a_task_and_each_refusal_is_audited_under_the_agent(node_mesh: NodeMesh) -> None:
    cfg = node_mesh.cfg
    task = common_pb2.AgentTask(task_id="task-x", target_agent_id=AGENT, tenant_id="acme")
    err = _run_task(node_mesh, OPERATOR, spec_pb2.RunTaskRequest(task=task))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    info = errors.error_info(err)
    assert info is not None and (info.reason, info.domain) == ("CALLER_NOT_ALLOWED", "agentmesh.local")
    assert info.metadata["caller"] == str(OPERATOR)
    # Another agent of the mesh is not the supervisor either.
    other = _run_task(node_mesh, spiffe.agent("risk-agent"), spec_pb2.RunTaskRequest(task=task))
    assert other.code() == grpc.StatusCode.PERMISSION_DENIED
    # The supervisor's own certificate, a task without a grant: refused before anything runs.
    no_grant = _run_task(node_mesh, SUPERVISOR, spec_pb2.RunTaskRequest(task=task))
    assert no_grant.code() == grpc.StatusCode.INVALID_ARGUMENT
    detail = errors.error_info(no_grant)
    assert detail is not None and (detail.reason, detail.metadata["field"]) == ("GRANT_MISSING", "grant")
    wrong = _run_task(node_mesh, SUPERVISOR, spec_pb2.RunTaskRequest(
        task=common_pb2.AgentTask(task_id="task-y", target_agent_id="risk-agent", tenant_id="acme")))
    assert errors.error_info(wrong).reason == "TASK_AGENT_MISMATCH"  # type: ignore[union-attr]

    denied = _wait("the refusals in the audit log",
                   lambda: (found := _refusals(cfg, "CALLER_NOT_ALLOWED")) and len(found) >= 2 and found)
    assert all(r.recorded_by == str(AGENT_ID) and r.outcome == audit_pb2.AUDIT_OUTCOME_DENIED for r in denied)
    assert {c for r in denied for c in r.reason_codes} >= {
        f"caller={OPERATOR}", f"caller={spiffe.agent('risk-agent')}", "method=/agentmesh.v1.SpecialistService/RunTask"}
    missing = _wait("the grant refusal in the audit log", lambda: _refusals(cfg, "GRANT_MISSING"))
    assert all(r.recorded_by == str(AGENT_ID) for r in missing)
    assert any(r.task_id == "task-x" and r.tenant_id == "acme" and "field=grant" in r.reason_codes for r in missing)

    # Health answers any mesh identity; DescribeAgent the supervisor: version 2.0.0 from its manifest.
    with _agent_channel(node_mesh, OPERATOR) as channel:
        assert _serving(channel)
    with _agent_channel(node_mesh, SUPERVISOR) as channel:
        stub = spec_grpc.SpecialistServiceStub(channel)
        agent = stub.DescribeAgent(spec_pb2.DescribeAgentRequest(), timeout=10).agent
    assert (agent.agent_id, agent.version, agent.spiffe_id) == (AGENT, "2.0.0", str(AGENT_ID))
    assert agent.capabilities == ["training.getStatus"]


def test_onboarded_through_the_lifecycle_to_active(node_mesh: NodeMesh,
                                                   onboarded: dict[str, subprocess.CompletedProcess[str]]) -> None:
    assert "training-agent@2.0.0  DRAFT" in onboarded["register"].stdout
    assert "EVALUATION_REQUIRED" in onboarded["unevaluated"].stderr
    own = onboarded["own-approval"].stderr
    assert "POLICY_DENIED" in own and "agent.own_registration" in own
    # The sandbox evaluation ran the training dataset (the seven §61 cases among them) against the Node.js process.
    baseline = json.loads(onboarded["baseline"].stdout)["evaluation"]
    evaluation = json.loads(onboarded["evaluate"].stdout)["evaluation"]
    assert baseline["gatePassed"] is True and baseline["score"] == 1.0
    assert evaluation["gatePassed"] is True and evaluation["score"] == 1.0
    assert evaluation["baselineVersion"] == "1.0.0"
    assert evaluation["passedCases"] == evaluation["totalCases"] == baseline["totalCases"] >= 7
    sandbox = [r for r in audit_records(node_mesh.cfg, agent_id=AGENT) if "SANDBOX" in r.reason_codes
               and r.principal.agent_version == "2.0.0"]
    assert sandbox and all("MOCK_ANSWER" in r.reason_codes for r in sandbox), "its calls were answered from mocks"
    # 2.0.0 is the version in service; 1.0.0 is deprecated.
    listed = {v["version"]: v for v in json.loads(_cli(node_mesh, "agents", "versions", AGENT, "--json").stdout)}
    assert listed["2.0.0"]["status"] == "LIFECYCLE_STATUS_ACTIVE" and listed["2.0.0"]["endpoint"] == node_mesh.address
    assert listed["1.0.0"]["status"] == "LIFECYCLE_STATUS_DEPRECATED"
    served = json.loads(_cli(node_mesh, "agents", "list", "--json").stdout)
    assert next(a for a in served if a["agentId"] == AGENT)["version"] == "2.0.0"
    records = [r for r in audit_records(node_mesh.cfg, agent_id=AGENT)
               if r.resource == f"agent-version:{VERSION}" and r.outcome == audit_pb2.AUDIT_OUTCOME_SUCCESS]
    (evaluated,) = [r for r in records if "AGENT_VERSION_EVALUATED" in r.reason_codes]
    assert "gate=PASSED" in evaluated.reason_codes
    moves = [r for r in records if {"AGENT_VERSION_REGISTERED", "AGENT_VERSION_TRANSITION"} & set(r.reason_codes)]
    assert [next(c for c in r.reason_codes if c.startswith("status=")) for r in moves] == [
        "status=DRAFT", "status=VALIDATING", "status=EVALUATING", "status=APPROVED", "status=CANARY",
        "status=ACTIVE"]
