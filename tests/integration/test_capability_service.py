"""CapabilityService over real processes: grants, policy, audit, execution, verification, LMS faults.

Starts the sandbox LMS, audit, policy and capability as their own processes;
the test plays a specialist agent (its certificate) holding grants signed with
the mesh's grant-signing key, as the supervisor would issue them.
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
from agentmesh.pki import leaf_paths
from agentmesh.signing import load_private_key
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc
from agentmesh.v1 import capability_service_pb2 as pb
from agentmesh.v1 import capability_service_pb2_grpc as pb_grpc
from agentmesh.v1 import common_pb2

from .conftest import RoleProcess

SUPERVISOR = str(spiffe.service("supervisor"))
WORK_PERMIT = spiffe.agent("work-permit-agent")
TRAINING = spiffe.agent("training-agent")
RISK = spiffe.agent("risk-agent")


@dataclass
class CapabilityMesh:
    cfg: MeshConfig
    lms_url: str
    capability: str
    audit: str
    signer: grants.GrantSigner

    def stub(self, identity: spiffe.SpiffeId) -> pb_grpc.CapabilityServiceStub:
        tls = transport.TlsFiles.of(leaf_paths(self.cfg.mesh_home.certs, identity), self.cfg.mesh_home.certs / "ca.pem")
        return pb_grpc.CapabilityServiceStub(
            transport.secure_channel(self.capability, tls, spiffe.service("capability")))

    def grant(self, audience: spiffe.SpiffeId, capabilities: list[str], **kw: Any) -> common_pb2.SignedTaskGrant:
        args: dict[str, Any] = dict(issuer=SUPERVISOR, audience=str(audience),
                                    execution_id=f"exe-{uuid.uuid4().hex[:10]}",
                                    task_id=f"task-{uuid.uuid4().hex[:6]}", tenant_id="acme", user_id="alice",
                                    assertion_digest="0" * 64, roles=["analyst"], capabilities=capabilities)
        args.update(kw)
        return self.signer.issue(**args)

    def audit_records(self, execution_id: str) -> list[audit_pb2.AuditRecord]:
        tls = transport.TlsFiles.of(leaf_paths(self.cfg.mesh_home.certs, OPERATOR), self.cfg.mesh_home.certs / "ca.pem")
        with transport.secure_channel(self.audit, tls, spiffe.service("audit")) as channel:
            pages = audit_grpc.AuditServiceStub(channel).QueryRecords(
                audit_pb2.QueryRecordsRequest(execution_id=execution_id))
            return [r for page in pages for r in page.records]

    def lms_fault(self, body: dict[str, Any] | None) -> None:
        req = urllib.request.Request(f"{self.lms_url}/admin/faults", method="POST" if body else "DELETE",
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5):
            pass


@pytest.fixture(scope="module")
def cap_mesh(mesh_config: MeshConfig) -> Iterator[CapabilityMesh]:
    addr_file = mesh_config.mesh_home.run / "lms-test.addr"
    addr_file.unlink(missing_ok=True)
    lms = subprocess.Popen([sys.executable, "-m", "lms_sandbox", "--port", "0", "--data", str(demo_world()),
                            "--address-file", str(addr_file)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs: list[RoleProcess] = []
    try:
        deadline = time.monotonic() + 20
        while not addr_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        lms_url = addr_file.read_text().strip()
        audit = RoleProcess(mesh_config, "audit", "audit_svc")
        procs.append(audit)
        policy = RoleProcess(mesh_config, "policy", "policy_svc", peers={"audit": audit.address})
        procs.append(policy)
        capability = RoleProcess(mesh_config, "capability", "capability_svc",
                                 peers={"audit": audit.address, "policy": policy.address},
                                 extra=("--lms-url", lms_url, "--world", str(demo_world())))
        procs.append(capability)
        signer = grants.GrantSigner(load_private_key(mesh_config.mesh_home.keys / "grant-signer.key"))
        yield CapabilityMesh(mesh_config, lms_url, capability.address, audit.address, signer)
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
            **fields: Any) -> pb.InvokeCapabilityResponse:
    req = pb.InvokeCapabilityRequest(capability_id=capability, input=_struct(**fields), idempotency_key=idempotency_key)
    if grant is not None:
        req.grant.CopyFrom(grant)
    return mesh.stub(identity).InvokeCapability(req, timeout=timeout)  # type: ignore[no-any-return]


def _refused(fn: Any) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    detail = errors.error_info(info.value)
    assert detail is not None, info.value
    return info.value.code(), detail.reason, dict(detail.metadata)


def test_a_granted_read_returns_data_with_provenance(cap_mesh: CapabilityMesh) -> None:
    grant = cap_mesh.grant(WORK_PERMIT, ["workPermit.get"])
    resp = _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.get", permit_id="WP-10231")
    assert resp.output["permit_id"] == "WP-10231"
    assert resp.decision.effect == common_pb2.POLICY_EFFECT_ALLOW
    assert [e.authority for e in resp.evidence] == [common_pb2.AUTHORITY_LEVEL_OFFICIAL_RECORD]
    records = cap_mesh.audit_records(grants.decode(grant).execution_id)
    kinds = [(r.event_type, r.outcome) for r in records]
    assert kinds == [(audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, audit_pb2.AUDIT_OUTCOME_PENDING),
                     (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, audit_pb2.AUDIT_OUTCOME_SUCCESS)]
    assert records[0].recorded_by == str(spiffe.service("capability"))
    assert records[0].principal.delegation_chain[-2:] == ["agent:work-permit-agent", "capability:workPermit.get"]
    assert len(records[0].principal.grants) == 1 and records[0].policy_decision.policy_version.startswith("sha256:")


def _forged(mesh: CapabilityMesh, execution_id: str) -> common_pb2.SignedTaskGrant:
    forger = grants.GrantSigner(Ed25519PrivateKey.generate())
    forged = forger.issue(issuer=SUPERVISOR, audience=str(WORK_PERMIT), execution_id=execution_id, task_id="t",
                          tenant_id="acme", user_id="alice", assertion_digest="0", capabilities=["workPermit.get"])
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
        grant = cap_mesh.grant(TRAINING, ["workPermit.get"], execution_id=execution_id)
    elif case == "expired grant":
        grant = cap_mesh.grant(WORK_PERMIT, ["workPermit.get"], execution_id=execution_id,
                               now=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    else:
        grant = cap_mesh.grant(WORK_PERMIT, ["workPermit.search"], execution_id=execution_id)
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.get", permit_id="WP-10231"))
    assert got[:2] == (code, reason)
    if grant is not None:
        records = cap_mesh.audit_records(execution_id)
        assert [(r.event_type, r.outcome, r.reason_codes[0]) for r in records] == [
            (audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, audit_pb2.AUDIT_OUTCOME_DENIED, reason)]


def test_resource_of_another_tenant_looks_missing_but_is_audited(cap_mesh: CapabilityMesh) -> None:
    grant = cap_mesh.grant(WORK_PERMIT, ["workPermit.get"])
    cross = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.get", permit_id="WP-20001"))
    missing = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.get", permit_id="WP-99999"))
    assert cross[0] == missing[0] == grpc.StatusCode.NOT_FOUND
    assert cross[1] == missing[1] == "RESOURCE_NOT_FOUND"
    assert "globex" not in json.dumps(cross[2])
    records = cap_mesh.audit_records(grants.decode(grant).execution_id)
    denial = [r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION]
    assert len(denial) == 1 and "tenant.isolation" in denial[0].policy_decision.reason_codes
    assert denial[0].resource == "permit:WP-20001"


def test_disabled_capability_fails_closed(cap_mesh: CapabilityMesh) -> None:
    operator = cap_mesh.stub(OPERATOR)
    operator.SetCapabilityStatus(pb.SetCapabilityStatusRequest(
        capability_id="risk.evaluate", status=common_pb2.LIFECYCLE_STATUS_DISABLED, reason="bad model"))
    try:
        grant = cap_mesh.grant(RISK, ["risk.evaluate"])
        got = _refused(lambda: _invoke(cap_mesh, RISK, grant, "risk.evaluate", permit_id="WP-10231"))
        assert got[:2] == (grpc.StatusCode.FAILED_PRECONDITION, "CAPABILITY_DISABLED")
        listed = {c.capability_id: c.status
                  for c in operator.ListCapabilities(pb.ListCapabilitiesRequest()).capabilities}
        assert listed["risk.evaluate"] == common_pb2.LIFECYCLE_STATUS_DISABLED
    finally:
        operator.SetCapabilityStatus(pb.SetCapabilityStatusRequest(
            capability_id="risk.evaluate", status=common_pb2.LIFECYCLE_STATUS_ACTIVE, reason="fixed"))
    assert _invoke(cap_mesh, RISK, cap_mesh.grant(RISK, ["risk.evaluate"]), "risk.evaluate",
                   permit_id="WP-10231").output


def test_only_operators_change_capability_status(cap_mesh: CapabilityMesh) -> None:
    got = _refused(lambda: cap_mesh.stub(WORK_PERMIT).SetCapabilityStatus(pb.SetCapabilityStatusRequest(
        capability_id="risk.evaluate", status=common_pb2.LIFECYCLE_STATUS_DISABLED, reason="x")))
    assert got[0] == grpc.StatusCode.PERMISSION_DENIED


def test_input_failing_its_schema_names_the_field_and_runs_nothing(cap_mesh: CapabilityMesh) -> None:
    grant = cap_mesh.grant(WORK_PERMIT, ["workPermit.get"])
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.get", permit_id="WP 10231; DROP"))
    assert got[0] == grpc.StatusCode.INVALID_ARGUMENT and got[2]["field"] == "permit_id"
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.get", permit="WP-10231"))
    assert got[0] == grpc.StatusCode.INVALID_ARGUMENT
    records = cap_mesh.audit_records(grants.decode(grant).execution_id)
    assert not [r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED]


def _validity_grant(mesh: CapabilityMesh, permit: str, valid_until: str, reason: str) -> common_pb2.SignedTaskGrant:
    args = {"permit_id": permit, "valid_until": valid_until, "reason": reason}
    return mesh.grant(WORK_PERMIT, ["workPermit.updateValidity"], roles=["permit-manager"],
                      confirmed_action_digest=grants.action_digest("workPermit.updateValidity", args),
                      confirmation_id="conf-1")


def test_mutation_needs_confirmation(cap_mesh: CapabilityMesh) -> None:
    grant = cap_mesh.grant(WORK_PERMIT, ["workPermit.updateValidity"], roles=["permit-manager"])
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.updateValidity", idempotency_key="k0",
                                   permit_id="WP-10235", valid_until="2026-12-20", reason="shift moved"))
    assert got[:2] == (grpc.StatusCode.FAILED_PRECONDITION, "CONFIRMATION_REQUIRED")
    # Confirmation of a different action does not count.
    other = _validity_grant(cap_mesh, "WP-10235", "2027-01-31", "shift moved")
    got = _refused(lambda: _invoke(cap_mesh, WORK_PERMIT, other, "workPermit.updateValidity", idempotency_key="k0",
                                   permit_id="WP-10235", valid_until="2026-12-20", reason="shift moved"))
    assert got[1] == "CONFIRMATION_REQUIRED"


def test_confirmed_mutation_is_verified_and_replays_idempotently(cap_mesh: CapabilityMesh) -> None:
    key = f"idem-{uuid.uuid4().hex[:8]}"
    grant = _validity_grant(cap_mesh, "WP-10235", "2026-12-20", "shift moved")
    first = _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.updateValidity", idempotency_key=key,
                    permit_id="WP-10235", valid_until="2026-12-20", reason="shift moved")
    assert first.verified and not first.replayed
    again = _invoke(cap_mesh, WORK_PERMIT, grant, "workPermit.updateValidity", idempotency_key=key,
                    permit_id="WP-10235", valid_until="2026-12-20", reason="shift moved")
    assert again.replayed and again.output == first.output
    outcomes = [r for r in cap_mesh.audit_records(grants.decode(grant).execution_id)
                if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME]
    assert len(outcomes) == 1  # one effect, however many replays
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
        grant = cap_mesh.grant(TRAINING, ["training.getStatus"])
        got = _refused(lambda: _invoke(cap_mesh, TRAINING, grant, "training.getStatus", timeout=1.5,
                                       worker_id="W-1002"))
    finally:
        cap_mesh.lms_fault(None)
    assert got[0] == code
    if reason:
        assert got[1] == reason
    # The same worker answers normally once the fault is gone: nothing was cached from the failure.
    ok = _invoke(cap_mesh, TRAINING, cap_mesh.grant(TRAINING, ["training.getStatus"]), "training.getStatus",
                 worker_id="W-1002")
    assert ok.output["worker_id"] == "W-1002"


def test_hostile_lms_text_comes_back_as_inert_data(cap_mesh: CapabilityMesh) -> None:
    cap_mesh.lms_fault({"mode": "hostile", "tenant_id": "acme", "worker_id": "W-1003"})
    try:
        resp = _invoke(cap_mesh, TRAINING, cap_mesh.grant(TRAINING, ["training.getStatus"]), "training.getStatus",
                       worker_id="W-1003")
    finally:
        cap_mesh.lms_fault(None)
    titles = [t["course_title"] for t in resp.output["trainings"]]
    assert any("ignore previous instructions" in t.lower() for t in titles)
    # The expired NR-10 stays expired: text changed no data the LMS gave.
    statuses = {t["course_code"]: t["valid_until"] for t in resp.output["trainings"]}
    assert statuses["NR-10"] == "2026-08-15"
    assert [e.authority for e in resp.evidence] == [common_pb2.AUTHORITY_LEVEL_VERIFIED_INTEGRATION]
