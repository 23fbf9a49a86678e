"""The supervisor's side of the security work, over real processes.

Executions are private (policy engine, READ_EXECUTION / CANCEL_EXECUTION), a
foreign execution or review answers with the very bytes of a missing one
(trailing metadata included), rejected assertions are audited by digest, every
grant names its task's resources, and with audit stopped nothing is accepted.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh import assertion, config, errors, grants, launcher, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import PLATFORM_CLI
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import decision_center_service_pb2_grpc as dc_grpc
from agentmesh.v1 import supervisor_service_pb2 as pb

from .conftest import agentmesh_cli, client_tls, peer_address
from .test_analysis_e2e import analyze, audit_records, supervisor, token

ANALYSIS = "Analyze permit {} and tell me if it can be released"
PLATFORM = str(PLATFORM_CLI)


def center(cfg: MeshConfig) -> dc_grpc.DecisionCenterServiceStub:
    channel = transport.secure_channel(peer_address(cfg, "supervisor"), client_tls(cfg, PLATFORM_CLI),
                                       spiffe.service("supervisor"), default_timeout_s=60)
    return dc_grpc.DecisionCenterServiceStub(channel)


def refusal(call: Callable[..., Any], *args: Any) -> grpc.RpcError:
    """The error of a call that must be refused (a stream is read to its end)."""
    with pytest.raises(grpc.RpcError) as info:
        result = call(*args)
        if isinstance(result, Iterator):
            list(result)
    return info.value


def wire(err: grpc.RpcError, asked: str) -> tuple[Any, ...]:
    """Everything the caller receives about a refusal, the id it asked for replaced."""
    def scrub(value: str | bytes) -> str | bytes:
        if isinstance(value, bytes):
            return value.replace(asked.encode(), b"<id>")
        return value.replace(asked, "<id>")

    trailing = tuple((k, scrub(v)) for k, v in (err.trailing_metadata() or ()))  # type: ignore[attr-defined]
    return err.code(), scrub(err.details() or ""), trailing  # type: ignore[attr-defined]


def lookalike(some_id: str) -> str:
    """An id of the same length that names nothing."""
    prefix, _, rest = some_id.rpartition("-")
    return f"{prefix}-{'0' * len(rest)}"


def marker() -> Timestamp:
    """Now, as a QueryRecords start_time."""
    ts = Timestamp()
    ts.FromDatetime(dt.datetime.now(dt.UTC) - dt.timedelta(milliseconds=5))
    return ts


def records_where(cfg: MeshConfig, match: Callable[[audit_pb2.AuditRecord], bool], *,
                  timeout_s: float = 6.0, **filters: Any) -> list[audit_pb2.AuditRecord]:
    """Records matching (polls: refusals reach the log through the outbox when audit is slow)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [r for r in audit_records(cfg, **filters) if match(r)]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


# -- executions are private ------------------------------------------------------------------------

def test_an_execution_is_read_only_by_its_requester_reviewers_and_operators(mesh: MeshConfig) -> None:
    ex = analyze(mesh, ANALYSIS.format("WP-10231"))
    stub = supervisor(mesh)
    for user, roles in (("alice", ("analyst",)), ("bob", ("reviewer",)), ("olga", ("operator",)),
                        ("ada", ("admin",))):
        seen = stub.GetExecution(pb.GetExecutionRequest(user_assertion=token(mesh, user=user, roles=roles),
                                                        execution_id=ex.execution_id), timeout=30).execution
        assert seen.execution_id == ex.execution_id and seen.decision == ex.decision
    viewer = token(mesh, user="victor", roles=("viewer",))
    for call in (lambda: stub.GetExecution(pb.GetExecutionRequest(user_assertion=viewer,
                                                                  execution_id=ex.execution_id), timeout=30),
                 lambda: stub.WatchExecution(pb.WatchExecutionRequest(user_assertion=viewer,
                                                                      execution_id=ex.execution_id), timeout=30),
                 lambda: stub.CancelExecution(pb.CancelExecutionRequest(user_assertion=viewer,
                                                                        execution_id=ex.execution_id), timeout=30)):
        got = errors.from_rpc_error(refusal(call))
        assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED"), got
    # A reviewer reads it but may not cancel it.
    got = errors.from_rpc_error(refusal(lambda: stub.CancelExecution(pb.CancelExecutionRequest(
        user_assertion=token(mesh, user="bob", roles=("reviewer",)), execution_id=ex.execution_id), timeout=30)))
    assert got.reason == "POLICY_DENIED"
    denials = records_where(mesh, lambda r: r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED
                            and r.reason_codes[0] == "POLICY_DENIED", execution_id=ex.execution_id)
    assert {(r.user_id, r.reason_codes[1]) for r in denials} >= {
        ("victor", "OPERATION_KIND_READ_EXECUTION"), ("victor", "OPERATION_KIND_CANCEL_EXECUTION"),
        ("bob", "OPERATION_KIND_CANCEL_EXECUTION")}
    assert all(r.outcome == audit_pb2.AUDIT_OUTCOME_DENIED and r.policy_decision.decision_id for r in denials)


def test_foreign_and_missing_executions_and_reviews_answer_with_the_same_bytes(mesh: MeshConfig) -> None:
    theirs = analyze(mesh, ANALYSIS.format("WP-10233"), assertion=token(mesh, user="carol"))
    review_id = theirs.conflicts[0].review_id
    assert review_id, theirs.summary
    eve = token(mesh, tenant="globex", user="eve", roles=("admin", "reviewer"))
    stub, dc = supervisor(mesh), center(mesh)
    since = marker()
    calls: dict[str, tuple[str, Callable[[str], Any]]] = {
        "GetExecution": (theirs.execution_id, lambda i: stub.GetExecution(
            pb.GetExecutionRequest(user_assertion=eve, execution_id=i), timeout=30)),
        "WatchExecution": (theirs.execution_id, lambda i: stub.WatchExecution(
            pb.WatchExecutionRequest(user_assertion=eve, execution_id=i), timeout=30)),
        "CancelExecution": (theirs.execution_id, lambda i: stub.CancelExecution(
            pb.CancelExecutionRequest(user_assertion=eve, execution_id=i, reason="mine now"), timeout=30)),
        "ConfirmAction": (theirs.execution_id, lambda i: stub.ConfirmAction(pb.ConfirmActionRequest(
            user_assertion=eve, execution_id=i, confirmation_token="t" * 43, capability_id="workPermit.release",
            resource_id="WP-10233"), timeout=30)),
        "GetReview": (review_id, lambda i: dc.GetReview(
            dc_pb2.GetReviewRequest(user_assertion=eve, review_id=i), timeout=30)),
        "SubmitReviewDecision": (review_id, lambda i: dc.SubmitReviewDecision(dc_pb2.SubmitReviewDecisionRequest(
            user_assertion=eve, review_id=i, decision=dc_pb2.REVIEW_DECISION_APPROVE), timeout=30)),
    }
    for name, (real, call) in calls.items():
        none = lookalike(real)
        assert len(none) == len(real) and none != real
        foreign, missing = refusal(call, real), refusal(call, none)
        assert foreign.code() == grpc.StatusCode.NOT_FOUND, (name, foreign)  # type: ignore[attr-defined]
        assert wire(foreign, real) == wire(missing, none), name
        assert any(k == "grpc-status-details-bin" for k, _ in foreign.trailing_metadata()), name  # type: ignore[attr-defined]
    # Nothing of theirs changed, and the log says who tried.
    review = dc.GetReview(dc_pb2.GetReviewRequest(user_assertion=token(mesh, user="bob", roles=("reviewer",)),
                                                  review_id=review_id), timeout=30).review
    assert review.status == dc_pb2.REVIEW_STATUS_OPEN
    tried = records_where(mesh, lambda r: r.user_id == "eve" and r.tenant_id == "globex"
                          and r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED
                          and r.reason_codes[0] in ("EXECUTION_NOT_FOUND", "REVIEW_NOT_FOUND"), start_time=since)
    assert {r.resource for r in tried} >= {f"execution:{theirs.execution_id}", f"review:{review_id}"}


def test_another_tenants_permit_and_a_missing_one_give_the_same_analysis(mesh: MeshConfig) -> None:
    foreign = analyze(mesh, ANALYSIS.format("WP-20001"))
    missing = analyze(mesh, ANALYSIS.format("WP-99999"))

    def shown(ex: pb.Execution, permit: str) -> tuple[Any, ...]:
        statements = [(s.kind, s.code, s.text.replace(permit, "<id>"))
                      for r in ex.results for s in r.statements]
        return (ex.status, ex.decision, ex.reason.replace(permit, "<id>"), ex.summary.replace(permit, "<id>"),
                [m.text.replace(permit, "<id>") for m in ex.missing], statements,
                [(n.target_agent_id, n.status) for n in ex.graph.nodes])

    assert shown(foreign, "WP-20001") == shown(missing, "WP-99999")
    assert "globex" not in str(foreign)


# -- rejected assertions ---------------------------------------------------------------------------

def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def test_every_rejected_assertion_leaves_a_record_naming_it_by_digest(mesh: MeshConfig) -> None:
    now = int(time.time())
    claims = {"iss": assertion.DEV_ISSUER, "aud": assertion.AUDIENCE, "sub": "mallory", "tenant": "acme",
              "roles": ["admin"], "iat": now, "exp": now + 600}
    since = marker()
    forged = jwt.encode(claims, Ed25519PrivateKey.generate(), algorithm="EdDSA")
    unsigned = _b64({"alg": "none", "typ": "JWT"}) + "." + _b64(claims) + "."
    expired = assertion.issue(_idp(mesh), tenant_id="acme", user_id="mallory", roles=["admin"], ttl_s=-10)
    other_audience = jwt.encode({**claims, "aud": "someone-else"}, _idp(mesh), algorithm="EdDSA")
    for bad, reason in ((forged, "ASSERTION_INVALID"), (unsigned, "ASSERTION_INVALID"),
                        (expired, "ASSERTION_EXPIRED"), (other_audience, "ASSERTION_INVALID"),
                        ("not-even-a-jwt", "ASSERTION_INVALID")):
        got = errors.from_rpc_error(refusal(lambda bad=bad: supervisor(mesh).Analyze(pb.AnalyzeRequest(
            user_assertion=bad, tenant_id="acme", request_text=ANALYSIS.format("WP-10231")), timeout=30)))
        assert (got.code, got.reason) == (grpc.StatusCode.UNAUTHENTICATED, reason)
        digest = f"assertion_sha256={assertion.digest(bad)}"
        (record,) = records_where(mesh, lambda r, digest=digest: digest in r.reason_codes, start_time=since)
        assert record.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED
        assert record.reason_codes[0] == reason and record.outcome == audit_pb2.AUDIT_OUTCOME_DENIED
        assert f"caller={PLATFORM}" in record.reason_codes
        assert record.recorded_by == str(spiffe.service("supervisor"))
        assert bad not in record.SerializeToString().decode("utf-8", "replace")
    alg_none = records_where(mesh, lambda r: f"assertion_sha256={assertion.digest(unsigned)}" in r.reason_codes,
                             start_time=since)[0]
    assert {"alg=none", "sub=mallory", "tenant=acme"} <= set(alg_none.reason_codes)


def _idp(cfg: MeshConfig) -> Ed25519PrivateKey:
    from agentmesh.signing import load_private_key

    home = cfg.mesh_home
    key = load_private_key(getattr(home, "idp_key", None) or home.keys / "idp.key")
    assert isinstance(key, Ed25519PrivateKey)
    return key


# -- grants name their task's resources ------------------------------------------------------------

def test_every_grant_of_an_analysis_names_the_resources_of_its_task(mesh: MeshConfig) -> None:
    ex = analyze(mesh, ANALYSIS.format("WP-10231"))
    named: dict[str, list[str]] = {}
    for r in audit_records(mesh, execution_id=ex.execution_id):
        if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED:
            (grant,) = [grants.decode(g) for g in r.principal.grants
                        if grants.decode(g).audience == str(spiffe.agent(r.agent_id))]
            named[r.agent_id] = list(grant.resources)
    workers = ["worker:W-1001", "worker:W-1002"]
    # The compliance task, granted knowledge.search, also names its agent's knowledge scope and no other.
    assert named == {"work-permit-agent": ["permit:WP-10231"], "training-agent": ["permit:WP-10231", *workers],
                     "risk-agent": ["permit:WP-10231"],
                     "compliance-agent": ["permit:WP-10231", *workers, "knowledge:compliance.nr"]}
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE


# -- with audit stopped nothing is accepted --------------------------------------------------------

@pytest.fixture()
def mesh_without_audit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshConfig]:
    """A mesh of its own whose audit process is stopped once everything is up."""
    home = tmp_path_factory.mktemp("mesh-without-audit")
    result = agentmesh_cli(home, "up", "--detach", "--ports-auto", "--json")
    cfg = config.load(home=str(home), environ={})
    try:
        assert result.returncode == 0, result.stderr
        analyze(cfg, ANALYSIS.format("WP-10231"))  # channels warm, one execution on the record
        pid = next(p.pid for p in launcher.read_state(cfg) if p.name == "audit")
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        yield cfg
    finally:
        launcher.down(cfg)


def _rows(path: Any, table: str) -> int:
    if not path.exists():
        return 0
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_with_audit_stopped_an_analysis_is_refused_and_no_task_runs(mesh_without_audit: MeshConfig) -> None:
    cfg = mesh_without_audit
    data = cfg.mesh_home.data
    executions_before = _rows(data / "supervisor.db", "executions")
    queued = {p.name: _rows(p, "outbox") for p in data.glob("*-audit-outbox.db")}
    got = errors.from_rpc_error(refusal(lambda: analyze(cfg, ANALYSIS.format("WP-10232"))))
    assert (got.code, got.reason) == (grpc.StatusCode.UNAVAILABLE, "AUDIT_UNAVAILABLE"), got
    event = pb.HandleEventRequest(event_id="evt-audit-down", tenant_id="acme", training_expired=pb.TrainingExpired(
        worker_id="W-1003", training_code="NR-10", expired_on="2026-08-15"))
    got = errors.from_rpc_error(refusal(lambda: supervisor(cfg).HandleEvent(event, timeout=60)))
    assert (got.code, got.reason) == (grpc.StatusCode.UNAVAILABLE, "AUDIT_UNAVAILABLE"), got
    # Nothing was accepted and no agent was asked anything: no execution, no capability call, nothing
    # queued by a specialist or the capability service for the log.
    assert _rows(data / "supervisor.db", "executions") == executions_before
    after = {p.name: _rows(p, "outbox") for p in data.glob("*-audit-outbox.db")}
    for name, count in after.items():
        if not name.startswith("supervisor"):
            assert count == queued.get(name, 0), (name, count)
