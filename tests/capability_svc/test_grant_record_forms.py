"""A grant as the audit log keeps it (its record form) is never a grant at the capability layer.

The supervisor signs each grant twice: ``signature`` over the body (the
credential an agent presents) and ``record_signature`` over the record
context and the body (the proof the log keeps). Whoever reads the log gets
record forms: presented as a grant, or with the record signature moved into
``signature``, they are refused before anything happens. A grant whose record
signature does not verify is refused too (audit would not record its chain),
and every principal the capability service records verifies as records.
"""

from __future__ import annotations

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentmesh import grants
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2

from .governed import AGENT, Mesh

ACCESS_DENIED = audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED


def _keys(mesh: Mesh) -> dict[str, Ed25519PublicKey]:
    return {mesh.signer.key_id: mesh.signer.key.public_key()}


def _principal(*chain: common_pb2.SignedTaskGrant) -> common_pb2.AgentPrincipal:
    return common_pb2.AgentPrincipal(agent_id="work-permit-agent", execution_id="exe-1", grants=list(chain))


def _record_signature_moved(grant: common_pb2.SignedTaskGrant) -> common_pb2.SignedTaskGrant:
    return common_pb2.SignedTaskGrant(grant=grant.grant, key_id=grant.key_id, signature=grant.record_signature)


@pytest.mark.parametrize(("form", "reason"), [
    ("the record form", "GRANT_MISSING"),
    ("the record signature as the grant signature", "GRANT_BAD_SIGNATURE"),
])
def test_a_grant_read_from_the_log_cannot_be_presented(mesh: Mesh, form: str, reason: str) -> None:
    logged = grants.record_form(mesh.grant(resources=["permit:WP-10231"]))
    presented = logged if form == "the record form" else _record_signature_moved(logged)
    err = mesh.refusal(mesh.request("workPermit.get", grant=presented, permit_id="WP-10231"))
    assert (err.code, err.reason) == (grpc.StatusCode.UNAUTHENTICATED, reason)
    assert mesh.policy.requests == []
    ((event, fields),) = mesh.audit.records
    assert event == ACCESS_DENIED and list(fields["reason_codes"])[0] == reason
    assert fields["principal"] is None


def test_a_record_form_in_the_principal_is_no_link(mesh: Mesh) -> None:
    root = mesh.grant(audience=AGENT, resources=["permit:WP-10231"])
    child = mesh.grant(resources=["permit:WP-10231"], parent_grant_id=grants.decode(root).grant_id)
    for link in (grants.record_form(root), _record_signature_moved(root)):
        mesh.audit.kept.clear()
        err = mesh.refusal(mesh.request("workPermit.get", grant=child, principal=_principal(link, child),
                                        permit_id="WP-10231"))
        assert (err.code, err.reason) == (grpc.StatusCode.UNAUTHENTICATED, "PRINCIPAL_INVALID")
        ((_, fields),) = mesh.audit.records
        assert list(fields["reason_codes"])[1] in ("GRANT_MISSING", "GRANT_BAD_SIGNATURE")
    assert mesh.policy.requests == []


@pytest.mark.parametrize(("change", "detail"), [
    ("none", "GRANT_MISSING"),
    ("tampered", "GRANT_BAD_SIGNATURE"),
    ("the grant signature", "GRANT_BAD_SIGNATURE"),
    ("another key's", "GRANT_BAD_SIGNATURE"),
])
def test_a_grant_whose_record_signature_does_not_verify_is_refused(mesh: Mesh, change: str, detail: str) -> None:
    grant = mesh.grant(resources=["permit:WP-10231"])
    if change == "none":
        grant.record_signature = b""
    elif change == "tampered":
        grant.record_signature = bytes([grant.record_signature[0] ^ 0x01]) + grant.record_signature[1:]
    elif change == "the grant signature":
        grant.record_signature = grant.signature
    else:
        grant.record_signature = Ed25519PrivateKey.generate().sign(grants.RECORD_CONTEXT + grant.grant)
    grants.verify(grant, _keys(mesh), check_expiry=False)  # a genuine grant signature
    err = mesh.refusal(mesh.request("workPermit.get", grant=grant, permit_id="WP-10231"))
    assert (err.code, err.reason, err.metadata) == (grpc.StatusCode.UNAUTHENTICATED, "PRINCIPAL_INVALID",
                                                    {"field": "principal"})
    assert mesh.policy.requests == []
    ((event, fields),) = mesh.audit.records
    assert event == ACCESS_DENIED and list(fields["reason_codes"])[:2] == ["PRINCIPAL_INVALID", detail]
    assert fields["principal"] is None


def test_every_recorded_chain_verifies_as_records(mesh: Mesh) -> None:
    root = mesh.grant(audience=AGENT, resources=["permit:WP-10231"])
    child = mesh.grant(resources=["permit:WP-10231"], parent_grant_id=grants.decode(root).grant_id, depth=2)
    mesh.call(mesh.request("workPermit.get", grant=child, principal=_principal(root, child), permit_id="WP-10231"))
    mesh.call(mesh.request("workPermit.get", permit_id="WP-10231"))
    recorded = [fields["principal"] for _, fields in mesh.audit.records if fields.get("principal") is not None]
    assert len(recorded) == 4
    for principal in recorded:
        bodies = grants.verify_record_chain([grants.record_form(g) for g in principal.grants], _keys(mesh))
        assert bodies[-1].audience == AGENT
