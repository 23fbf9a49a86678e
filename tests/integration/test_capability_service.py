"""CapabilityService over real processes: grants, policy, audit, execution, verification, LMS faults.

Starts the sandbox LMS, audit, policy and capability as their own processes;
the test plays a specialist agent (its certificate) holding grants signed with
the mesh's grant-signing key, as the supervisor would issue them — and an agent
gone bad: extra grants in its principal, another user's idempotency key,
another task's resources, probing which records exist.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import struct_pb2

from agentmesh import errors, grants, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import OPERATOR
from agentmesh.launcher import demo_world
from agentmesh.signing import load_private_key, load_public_key
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc
from agentmesh.v1 import capability_service_pb2 as pb
from agentmesh.v1 import capability_service_pb2_grpc as pb_grpc
from agentmesh.v1 import common_pb2
from audit_svc.servicer import chain_problem

from .conftest import RoleProcess

SUPERVISOR = str(spiffe.service("supervisor"))
WORK_PERMIT = spiffe.agent("work-permit-agent")
TRAINING = spiffe.agent("training-agent")
RISK = spiffe.agent("risk-agent")


@dataclass
class CapabilityMesh:
    cfg: MeshConfig
    lms_url: str
    lms_token: str
    capability: str
    audit: str
    signer: grants.GrantSigner

    def tls(self, identity: spiffe.SpiffeId) -> transport.TlsFiles:
        home = self.cfg.mesh_home
        return transport.TlsFiles.of(home.workload_files(identity), home.trust_bundle)

    def stub(self, identity: spiffe.SpiffeId) -> pb_grpc.CapabilityServiceStub:
        return pb_grpc.CapabilityServiceStub(
            transport.secure_channel(self.capability, self.tls(identity), spiffe.service("capability")))

    def grant(self, audience: spiffe.SpiffeId, capabilities: list[str], resources: list[str],
              **kw: Any) -> common_pb2.SignedTaskGrant:
        args: dict[str, Any] = dict(issuer=SUPERVISOR, audience=str(audience),
                                    execution_id=f"exe-{uuid.uuid4().hex[:10]}",
                                    task_id=f"task-{uuid.uuid4().hex[:6]}", tenant_id="acme", user_id="alice",
                                    assertion_digest="0" * 64, roles=["analyst"], capabilities=capabilities,
                                    resources=resources)
        args.update(kw)
        return self.signer.issue(**args)

    def audit_records(self, execution_id: str) -> list[audit_pb2.AuditRecord]:
        with transport.secure_channel(self.audit, self.tls(OPERATOR), spiffe.service("audit")) as channel:
            pages = audit_grpc.AuditServiceStub(channel).QueryRecords(
                audit_pb2.QueryRecordsRequest(execution_id=execution_id))
            return [r for page in pages for r in page.records]

    def lms_fault(self, body: dict[str, Any] | None) -> None:
        req = urllib.request.Request(f"{self.lms_url}/admin/faults", method="POST" if body else "DELETE",
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {self.lms_token}"})
        with urllib.request.urlopen(req, timeout=5):
            pass


@pytest.fixture(scope="module")
def cap_mesh(mesh_config: MeshConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CapabilityMesh]:
    addr_file = mesh_config.mesh_home.run / "lms-test.addr"
    addr_file.unlink(missing_ok=True)
    token_file = tmp_path_factory.mktemp("lms") / "admin-token"
    lms = subprocess.Popen([sys.executable, "-m", "lms_sandbox", "--port", "0", "--data", str(demo_world()),
                            "--address-file", str(addr_file), "--admin-token-file", str(token_file)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs: list[RoleProcess] = []
    try:
        deadline = time.monotonic() + 20
        while not addr_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        lms_url = addr_file.read_text().strip()
        audit = RoleProcess(mesh_config, "audit", "audit_svc")
        procs.append(audit)
        policy = RoleProcess(mesh_config, "policy", "policy_svc", peers={"audit": audit.address}, demo_tenants=True)
        procs.append(policy)
        capability = RoleProcess(mesh_config, "capability", "capability_svc",
                                 peers={"audit": audit.address, "policy": policy.address},
                                 extra=("--lms-url", lms_url, "--world", str(demo_world())))
        procs.append(capability)
        signer = grants.GrantSigner(load_private_key(mesh_config.mesh_home.grant_signer_key))
        yield CapabilityMesh(mesh_config, lms_url, token_file.read_text().strip(), capability.address, audit.address,
                             signer)
    finally:
        for proc in reversed(procs):
            proc.stop()
        lms.terminate()
        lms.wait(timeout=10)


def _struct(**fields: Any) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(fields)
    return s


def _invoke(mesh: CapabilityMesh, identity: spiffe.SpiffeId, grant: common_pb2.SignedTaskGrant | None,
            capability: str, timeout: float = 10, idempotency_key: str = "",
            principal: common_pb2.AgentPrincipal | None = None, execution_id: str = "",
            **fields: Any) -> pb.InvokeCapabilityResponse:
    req = pb.InvokeCapabilityRequest(capability_id=capability, input=_struct(**fields), idempotency_key=idempotency_key)
    if grant is not None:
        req.grant.CopyFrom(grant)
        execution_id = execution_id or grants.decode(grant).execution_id
    if principal is not None:
        req.principal.CopyFrom(principal)
    # As a specialist does: the call carries its execution's trace.
    req.trace.execution_id = execution_id
    return mesh.stub(identity).InvokeCapability(req, timeout=timeout)  # type: ignore[no-any-return]


def _rpc_error(fn: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    return info.value


def _refused(fn: Any) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    err = _rpc_error(fn)
    detail = errors.error_info(err)
    assert detail is not None, err
    return err.code(), detail.reason, dict(detail.metadata)


def _wire(err: grpc.RpcError) -> tuple[Any, ...]:
    """Everything a caller receives of a refusal: code, message and the trailing metadata with its raw bytes."""
    assert isinstance(err, grpc.Call)
    return err.code(), err.details(), tuple((k, v) for k, v in (err.trailing_metadata() or ()))


def _as_if(answer: tuple[Any, ...], old: str, new: str) -> tuple[Any, ...]:
    """An answer with one id the caller sent replaced by another of the same length (lengths are encoded too)."""
    assert len(old) == len(new)

    def swap(v: Any) -> Any:
        return v.replace(old.encode(), new.encode()) if isinstance(v, bytes) else v.replace(old, new)

    code, details, trailers = answer
    return code, swap(details), tuple((k, swap(v)) for k, v in trailers)


def test_a_granted_read_returns_data_with_provenance(cap_mesh: CapabilityMesh) -> None:
    grant = cap_mesh.grant(WORK_PERMIT, ["workPermit.get"], ["permit:WP-10231"])
    resp = _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.get", permit_id="WP-10231")
    assert resp.output["permit_id"] == "WP-10231"
    assert resp.decision.effect == common_pb2.POLICY_EFFECT_ALLOW
    assert [e.authority for e in resp.evidence] == [common_pb2.AUTHORITY_LEVEL_OFFICIAL_RECORD]
    records = cap_mesh.audit_records(grants.decode(grant).execution_id)
    kinds = [(r.event_type, r.outcome) for r in records]
    assert kinds == [(audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, audit_pb2.AUDIT_OUTCOME_PENDING),
                     (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, audit_pb2.AUDIT_OUTCOME_SUCCESS)]
    assert records[0].recorded_by == str(spiffe.service("capability"))
    assert list(records[0].principal.delegation_chain) == [
        "user:acme/alice", "svc:supervisor", "agent:work-permit-agent", "capability:workPermit.get"]
    # The log keeps the grant's record form: the same body, no grant signature, a record signature that verifies.
    assert [(g.grant, g.signature) for g in records[0].principal.grants] == [(grant.grant, b"")]
    grants.verify_record_chain(list(records[0].principal.grants), _grant_keys(cap_mesh))
    assert records[0].policy_decision.policy_version.startswith("sha256:")


def _forged(mesh: CapabilityMesh, execution_id: str) -> common_pb2.SignedTaskGrant:
    forger = grants.GrantSigner(Ed25519PrivateKey.generate())
    forged = forger.issue(issuer=SUPERVISOR, audience=str(WORK_PERMIT), execution_id=execution_id, task_id="t",
                          tenant_id="acme", user_id="alice", assertion_digest="0", capabilities=["workPermit.get"],
                          resources=["permit:WP-10231"])
    forged.key_id = mesh.signer.key_id
    return forged


@pytest.mark.parametrize("case, code, reason", [
    ("no grant", grpc.StatusCode.UNAUTHENTICATED, "GRANT_MISSING"),
    ("forged grant", grpc.StatusCode.UNAUTHENTICATED, "GRANT_BAD_SIGNATURE"),
    ("grant for another agent", grpc.StatusCode.PERMISSION_DENIED, "GRANT_AUDIENCE_MISMATCH"),
    ("expired grant", grpc.StatusCode.UNAUTHENTICATED, "GRANT_EXPIRED"),
    ("capability not in grant", grpc.StatusCode.PERMISSION_DENIED, "GRANT_CAPABILITY_NOT_LISTED"),
])
def test_bad_grants_are_refused_and_audited(cap_mesh: CapabilityMesh, case: str, code: grpc.StatusCode,
                                            reason: str) -> None:
    execution_id = f"exe-{uuid.uuid4().hex[:10]}"
    grant: common_pb2.SignedTaskGrant | None
    if case == "no grant":
        grant = None
    elif case == "forged grant":
        grant = _forged(cap_mesh, execution_id)
    elif case == "grant for another agent":
        grant = cap_mesh.grant(TRAINING, ["workPermit.get"], ["permit:WP-10231"], execution_id=execution_id)
    elif case == "expired grant":
        grant = cap_mesh.grant(WORK_PERMIT, ["workPermit.get"], ["permit:WP-10231"], execution_id=execution_id,
                               now=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    else:
        grant = cap_mesh.grant(WORK_PERMIT, ["workPermit.search"], ["permit:WP-10231"], execution_id=execution_id)
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.get", permit_id="WP-10231",
                                   execution_id=execution_id))
    assert got[:2] == (code, reason)
    records = cap_mesh.audit_records(execution_id)
    assert [(r.event_type, r.outcome, r.reason_codes[0]) for r in records] == [
        (audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, audit_pb2.AUDIT_OUTCOME_DENIED, reason)]
    if case == "forged grant":
        # Nothing the forged grant claims is recorded: no tenant, no user, no principal.
        assert (records[0].tenant_id, records[0].user_id, records[0].HasField("principal")) == ("", "", False)
        assert records[0].reason_codes[1].startswith("grant_sha256=")


@pytest.mark.parametrize(("identity", "capability", "field", "foreign", "missing"), [
    (WORK_PERMIT, "workPermit.get", "permit_id", "WP-20001", "WP-99999"),
    (RISK, "risk.evaluate", "permit_id", "WP-20001", "WP-99999"),
    (WORK_PERMIT, "worker.get", "worker_id", "W-2001", "W-9999"),
    (TRAINING, "training.getStatus", "worker_id", "W-2001", "W-9999"),
])
def test_another_tenants_record_and_a_missing_one_answer_byte_for_byte_alike(
        cap_mesh: CapabilityMesh, identity: spiffe.SpiffeId, capability: str, field: str, foreign: str,
        missing: str) -> None:
    kind = field.removesuffix("_id")
    grant = cap_mesh.grant(identity, [capability], [f"{kind}:{foreign}", f"{kind}:{missing}"])
    cross = _rpc_error(lambda: _invoke(cap_mesh, identity, grant, capability, **{field: foreign}))
    absent = _rpc_error(lambda: _invoke(cap_mesh, identity, grant, capability, **{field: missing}))
    # Status, message, ErrorInfo reason and metadata: the same bytes but for the id the caller sent.
    assert _as_if(_wire(cross), foreign, missing) == _wire(absent)
    assert _wire(absent)[:2] == (grpc.StatusCode.NOT_FOUND, f"'{missing}' not found")
    detail = errors.error_info(absent)
    assert detail is not None and (detail.reason, dict(detail.metadata)) == ("RESOURCE_NOT_FOUND", {})
    # The log says the truth (and what the policy said: a missing worker may be
    # refused to this role too, the answer is "not found" all the same); nothing ran for either.
    records = cap_mesh.audit_records(grants.decode(grant).execution_id)
    assert [(r.outcome, list(r.reason_codes[:2]), r.resource) for r in records] == [
        (audit_pb2.AUDIT_OUTCOME_DENIED, ["RESOURCE_NOT_FOUND", "RESOURCE_IN_ANOTHER_TENANT"], f"{kind}:{foreign}"),
        (audit_pb2.AUDIT_OUTCOME_DENIED, ["RESOURCE_NOT_FOUND", "RESOURCE_MISSING"], f"{kind}:{missing}")]
    assert records[0].event_type == audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION
    assert "tenant.isolation" in records[0].policy_decision.reason_codes
    assert "globex" not in json.dumps([list(r.reason_codes) for r in records])


def test_disabled_capability_fails_closed(cap_mesh: CapabilityMesh) -> None:
    operator = cap_mesh.stub(OPERATOR)
    operator.SetCapabilityStatus(pb.SetCapabilityStatusRequest(
        capability_id="risk.evaluate", status=common_pb2.LIFECYCLE_STATUS_DISABLED, reason="bad model"))
    try:
        grant = cap_mesh.grant(RISK, ["risk.evaluate"], ["permit:WP-10231"])
        got = _refused(lambda: _invoke(cap_mesh, RISK, grant, "risk.evaluate", permit_id="WP-10231"))
        assert got[:2] == (grpc.StatusCode.FAILED_PRECONDITION, "CAPABILITY_DISABLED")
        listed = {c.capability_id: c.status
                  for c in operator.ListCapabilities(pb.ListCapabilitiesRequest()).capabilities}
        assert listed["risk.evaluate"] == common_pb2.LIFECYCLE_STATUS_DISABLED
    finally:
        operator.SetCapabilityStatus(pb.SetCapabilityStatusRequest(
            capability_id="risk.evaluate", status=common_pb2.LIFECYCLE_STATUS_ACTIVE, reason="fixed"))
    assert _invoke(cap_mesh, RISK, cap_mesh.grant(RISK, ["risk.evaluate"], ["permit:WP-10231"]), "risk.evaluate",
                   permit_id="WP-10231").output


def test_only_operators_change_capability_status(cap_mesh: CapabilityMesh) -> None:
    got = _refused(lambda: cap_mesh.stub(WORK_PERMIT).SetCapabilityStatus(pb.SetCapabilityStatusRequest(
        capability_id="risk.evaluate", status=common_pb2.LIFECYCLE_STATUS_DISABLED, reason="x")))
    assert got[0] == grpc.StatusCode.PERMISSION_DENIED


def test_input_failing_its_schema_names_the_field_and_runs_nothing(cap_mesh: CapabilityMesh) -> None:
    grant = cap_mesh.grant(WORK_PERMIT, ["workPermit.get"], ["permit:WP-10231"])
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.get", permit_id="WP 10231; DROP"))
    assert got[0] == grpc.StatusCode.INVALID_ARGUMENT and got[2]["field"] == "permit_id"
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.get", permit="WP-10231"))
    assert got[0] == grpc.StatusCode.INVALID_ARGUMENT
    records = cap_mesh.audit_records(grants.decode(grant).execution_id)
    assert not [r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED]


def _validity_grant(mesh: CapabilityMesh, permit: str, valid_until: str, reason: str,
                    **kw: Any) -> common_pb2.SignedTaskGrant:
    args = {"permit_id": permit, "valid_until": valid_until, "reason": reason}
    fields: dict[str, Any] = dict(roles=["permit-manager"], confirmation_id="conf-1",
                                  confirmed_action_digest=grants.action_digest("workPermit.updateValidity", args))
    fields.update(kw)
    return mesh.grant(WORK_PERMIT, ["workPermit.updateValidity"], [f"permit:{permit}"], **fields)


def test_mutation_needs_confirmation(cap_mesh: CapabilityMesh) -> None:
    grant = cap_mesh.grant(WORK_PERMIT, ["workPermit.updateValidity"], ["permit:WP-10235"], roles=["permit-manager"])
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.updateValidity", idempotency_key="k0",
                                   permit_id="WP-10235", valid_until="2026-12-20", reason="shift moved"))
    assert got[:2] == (grpc.StatusCode.FAILED_PRECONDITION, "CONFIRMATION_REQUIRED")
    # Confirmation of a different action does not count.
    other = _validity_grant(cap_mesh, "WP-10235", "2027-01-31", "shift moved")
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, other, "workPermit.updateValidity", idempotency_key="k0",
                                   permit_id="WP-10235", valid_until="2026-12-20", reason="shift moved"))
    assert got[1] == "CONFIRMATION_REQUIRED"


def test_a_mutation_beyond_the_agents_declared_risk_profile_is_denied_and_runs_nothing(
    cap_mesh: CapabilityMesh
) -> None:
    """PRD §65: a version that declared it changes nothing (signed into its grant) cannot, even confirmed."""
    narrow = common_pb2.RiskProfile(max_risk=common_pb2.RISK_LEVEL_LOW)
    grant = _validity_grant(cap_mesh, "WP-10235", "2027-01-31", "shift moved", agent_risk_profile=narrow)
    before = cap_mesh.grant(WORK_PERMIT, ["workPermit.get"], ["permit:WP-10235"])
    valid_until = _invoke(cap_mesh, WORK_PERMIT, before, "workPermit.get", permit_id="WP-10235").output["valid_until"]
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.updateValidity", idempotency_key="k-rp",
                                   permit_id="WP-10235", valid_until="2027-01-31", reason="shift moved"))
    assert got[:2] == (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED")
    assert "blast_radius.agent_profile_exceeded" in got[2]["reason_codes"]
    after = _invoke(cap_mesh, WORK_PERMIT, cap_mesh.grant(WORK_PERMIT, ["workPermit.get"], ["permit:WP-10235"]),
                    "workPermit.get", permit_id="WP-10235").output["valid_until"]
    assert after == valid_until


def test_confirmed_mutation_is_verified_and_replays_idempotently(cap_mesh: CapabilityMesh) -> None:
    key = f"idem-{uuid.uuid4().hex[:8]}"
    grant = _validity_grant(cap_mesh, "WP-10235", "2026-12-20", "shift moved")
    first = _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.updateValidity", idempotency_key=key,
                    permit_id="WP-10235", valid_until="2026-12-20", reason="shift moved")
    assert first.verified and not first.replayed
    again = _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.updateValidity", idempotency_key=key,
                    permit_id="WP-10235", valid_until="2026-12-20", reason="shift moved")
    assert again.replayed and again.output == first.output
    records = cap_mesh.audit_records(grants.decode(grant).execution_id)
    # One effect, however many replays; each replay is recorded as such.
    assert len([r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED]) == 1
    outcomes = [list(r.reason_codes[:1]) for r in records
                if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME]
    assert outcomes == [["VERIFIED"], ["IDEMPOTENT_REPLAY"]]
    different = _validity_grant(cap_mesh, "WP-10235", "2027-01-15", "shift moved")
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, different, "workPermit.updateValidity",
                                   idempotency_key=key, permit_id="WP-10235", valid_until="2027-01-15",
                                   reason="shift moved"))
    assert got[:2] == (grpc.StatusCode.ABORTED, "IDEMPOTENCY_KEY_REUSED")


def test_failed_read_back_is_reported_as_a_failure(cap_mesh: CapabilityMesh) -> None:
    grant = _validity_grant(cap_mesh, "WP-10241", "2026-12-24", "holiday shift")
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.updateValidity", idempotency_key="v1",
                                   permit_id="WP-10241", valid_until="2026-12-24", reason="holiday shift"))
    assert got[:2] == (grpc.StatusCode.ABORTED, "VERIFICATION_FAILED")
    outcome = [r for r in cap_mesh.audit_records(grants.decode(grant).execution_id)
               if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME]
    # A lost write leaves the permit as it was: the compensation checks that and says so.
    assert [(r.outcome, list(r.reason_codes)) for r in outcome] == [
        (audit_pb2.AUDIT_OUTCOME_FAILURE,
         ["VERIFICATION_FAILED", "COMPENSATED", "ALREADY_IN_PREVIOUS_STATE valid_until=2026-12-14"])]
    # Its effect was attempted: the same key never runs it a second time.
    again = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.updateValidity", idempotency_key="v1",
                                     permit_id="WP-10241", valid_until="2026-12-24", reason="holiday shift"))
    assert again[:2] == (grpc.StatusCode.ABORTED, "IDEMPOTENCY_KEY_FAILED")
    runs = [r for r in cap_mesh.audit_records(grants.decode(grant).execution_id)
            if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED]
    assert len(runs) == 1


@pytest.mark.parametrize("fault, code, reason", [
    ({"mode": "timeout"}, grpc.StatusCode.DEADLINE_EXCEEDED, None),
    ({"mode": "latency", "latency_ms": 5000}, grpc.StatusCode.DEADLINE_EXCEEDED, None),
    ({"mode": "5xx"}, grpc.StatusCode.UNAVAILABLE, "EXTERNAL_5XX"),
    ({"mode": "malformed"}, grpc.StatusCode.UNAVAILABLE, None),
    ({"mode": "oversized"}, grpc.StatusCode.UNAVAILABLE, None),
])
def test_each_lms_fault_is_an_honest_error(cap_mesh: CapabilityMesh, fault: dict[str, Any], code: grpc.StatusCode,
                                           reason: str | None) -> None:
    cap_mesh.lms_fault({**fault, "tenant_id": "acme", "worker_id": "W-1002"})
    try:
        grant = cap_mesh.grant(TRAINING, ["training.getStatus"], ["worker:W-1002"])
        # 3 s: the service keeps 0.25 s of it back to report the backend's timeout itself (with its
        # ErrorInfo) before the caller gives up, which a tighter deadline on a loaded machine may not.
        got = _refused(lambda: _invoke(cap_mesh, TRAINING, grant, "training.getStatus", timeout=3.0,
                                       worker_id="W-1002"))
    finally:
        cap_mesh.lms_fault(None)
    assert got[0] == code
    if reason:
        assert got[1] == reason
    # The same worker answers normally once the fault is gone: nothing was cached from the failure.
    ok = _invoke(cap_mesh, TRAINING, cap_mesh.grant(TRAINING, ["training.getStatus"], ["worker:W-1002"]),
                 "training.getStatus", worker_id="W-1002")
    assert ok.output["worker_id"] == "W-1002"


def test_hostile_lms_text_comes_back_as_inert_data(cap_mesh: CapabilityMesh) -> None:
    cap_mesh.lms_fault({"mode": "hostile", "tenant_id": "acme", "worker_id": "W-1003"})
    try:
        resp = _invoke(cap_mesh, TRAINING, cap_mesh.grant(TRAINING, ["training.getStatus"], ["worker:W-1003"]),
                       "training.getStatus", worker_id="W-1003")
    finally:
        cap_mesh.lms_fault(None)
    titles = [t["course_title"] for t in resp.output["trainings"]]
    assert any("ignore previous instructions" in t.lower() for t in titles)
    # The expired NR-10 stays expired: text changed no data the LMS gave.
    statuses = {t["course_code"]: t["valid_until"] for t in resp.output["trainings"]}
    assert statuses["NR-10"] == "2026-08-15"
    assert [e.authority for e in resp.evidence] == [common_pb2.AUTHORITY_LEVEL_VERIFIED_INTEGRATION]


# --- an agent gone bad ----------------------------------------------------------------


def _grant_keys(mesh: CapabilityMesh) -> dict[str, Any]:
    key = load_public_key(mesh.cfg.mesh_home.public_key_path("grant-signer.pub"))
    return {mesh.signer.key_id: key}


def test_a_principal_with_a_forged_extra_grant_is_refused_and_the_log_still_verifies(
        cap_mesh: CapabilityMesh) -> None:
    grant = cap_mesh.grant(WORK_PERMIT, ["workPermit.get"], ["permit:WP-10231"])
    execution_id = grants.decode(grant).execution_id
    chain = ["user:acme/alice", "svc:supervisor", "agent:work-permit-agent"]
    forged = _forged(cap_mesh, execution_id)
    bad = common_pb2.AgentPrincipal(agent_id="work-permit-agent", agent_version="1.0.0", execution_id=execution_id,
                                    delegation_chain=chain, grants=[forged, grant])
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.get", principal=bad,
                                   permit_id="WP-10231"))
    assert got == (grpc.StatusCode.UNAUTHENTICATED, "PRINCIPAL_INVALID", {"field": "principal"})
    # A caller's claim about who it acts for is refused too, though every grant is genuine.
    lying = common_pb2.AgentPrincipal(agent_id="work-permit-agent", execution_id=execution_id, grants=[grant],
                                      delegation_chain=["user:acme/admin", "svc:supervisor", "agent:work-permit-agent"])
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.get", principal=lying,
                                   permit_id="WP-10231"))
    assert got[1] == "PRINCIPAL_INVALID"
    good = common_pb2.AgentPrincipal(agent_id="work-permit-agent", agent_version="1.0.0", execution_id=execution_id,
                                     parent_agent_id="supervisor", delegation_chain=chain, grants=[grant])
    assert _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.get", principal=good, permit_id="WP-10231").output
    records = cap_mesh.audit_records(execution_id)
    refusals = [r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED]
    assert [list(r.reason_codes[:2]) for r in refusals] == [["PRINCIPAL_INVALID", "GRANT_BAD_SIGNATURE"],
                                                            ["PRINCIPAL_INVALID", "CHAIN_MISMATCH"]]
    # Only what was verified: the grant's ids, never the principal sent.
    assert all(not r.HasField("principal") and r.tenant_id == "acme" and r.user_id == "alice" for r in refusals)
    invoked = next(r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED)
    assert [(g.grant, g.signature) for g in invoked.principal.grants] == [(grant.grant, b"")]
    grants.verify_record_chain(list(invoked.principal.grants), _grant_keys(cap_mesh))
    assert list(invoked.principal.delegation_chain) == [*chain, "capability:workPermit.get"]
    # What `agentmesh audit verify` checks of each record's chain holds for every record of the execution.
    keys = _grant_keys(cap_mesh)
    assert [chain_problem(r, keys) for r in records] == [None] * len(records)


def test_another_principal_replaying_a_key_hears_what_a_different_payload_hears(cap_mesh: CapabilityMesh) -> None:
    key = f"idem-{uuid.uuid4().hex[:8]}"
    args = dict(permit_id="WP-10239", valid_until="2026-12-22", reason="crane slot moved")
    alice = _validity_grant(cap_mesh, *args.values())
    first = _invoke(cap_mesh, WORK_PERMIT, alice, "workPermit.updateValidity", idempotency_key=key, **args)
    assert first.verified
    # A viewer's grant for the very same action and key, through the same agent.
    viewer = _validity_grant(cap_mesh, *args.values(), user_id="victor", roles=["viewer"])
    by_viewer = _rpc_error(lambda: _invoke(cap_mesh, WORK_PERMIT, viewer, "workPermit.updateValidity",
                                           idempotency_key=key, **args))
    other = {**args, "valid_until": "2027-01-22"}
    alice_other = _validity_grant(cap_mesh, *other.values())
    other_payload = _rpc_error(lambda: _invoke(cap_mesh, WORK_PERMIT, alice_other, "workPermit.updateValidity",
                                               idempotency_key=key, **other))
    assert _wire(by_viewer) == _wire(other_payload)
    detail = errors.error_info(by_viewer)
    assert by_viewer.code() == grpc.StatusCode.ABORTED
    assert detail is not None and (detail.reason, dict(detail.metadata)) == (
        "IDEMPOTENCY_KEY_REUSED", {"field": "idempotency_key"})
    (refusal,) = cap_mesh.audit_records(grants.decode(viewer).execution_id)
    assert (refusal.event_type, list(refusal.reason_codes), refusal.user_id) == (
        audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, ["IDEMPOTENCY_KEY_REUSED", "PRINCIPAL_MISMATCH"], "victor")
    # Alice's own replay is authorised again and recorded.
    again = _invoke(cap_mesh, WORK_PERMIT, alice, "workPermit.updateValidity", idempotency_key=key, **args)
    assert again.replayed and again.output == first.output
    assert again.decision.decision_id != first.decision.decision_id
    outcomes = [r for r in cap_mesh.audit_records(grants.decode(alice).execution_id)
                if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME]
    assert [r.reason_codes[0] for r in outcomes] == ["VERIFIED", "IDEMPOTENT_REPLAY"]
    assert outcomes[1].policy_decision.decision_id == again.decision.decision_id
    assert outcomes[1].output_digest == outcomes[0].output_digest


def test_a_grant_of_one_permit_reads_nothing_of_another(cap_mesh: CapabilityMesh) -> None:
    # The WP-10232 task's grant, reused by the same agent identity for WP-10233.
    grant = cap_mesh.grant(WORK_PERMIT, ["workPermit.get", "worker.get", "workPermit.search"],
                           ["permit:WP-10232", "worker:W-1003", "worker:W-1002"])
    assert _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.get", permit_id="WP-10232").output
    for capability, field, fields in [("workPermit.get", "permit_id", {"permit_id": "WP-10233"}),
                                      ("worker.get", "worker_id", {"worker_id": "W-1005"}),
                                      ("workPermit.search", "input", {"worker_id": "W-1005"})]:
        got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, capability, **fields))  # noqa: B023
        assert got == (grpc.StatusCode.PERMISSION_DENIED, "GRANT_RESOURCE_NOT_LISTED", {"field": field})
    records = cap_mesh.audit_records(grants.decode(grant).execution_id)
    refusals = [(r.reason_codes[0], r.resource) for r in records
                if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED]
    assert refusals == [("GRANT_RESOURCE_NOT_LISTED", "permit:WP-10233"),
                        ("GRANT_RESOURCE_NOT_LISTED", "worker:W-1005"),
                        ("GRANT_RESOURCE_NOT_LISTED", "tenant:acme")]
    # Only the named permit was read.
    assert [r.resource for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED] == [
        "permit:WP-10232"]
