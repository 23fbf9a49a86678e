"""The governed path against a hostile caller, in process.

The principal is verified and rebuilt, never copied; an idempotency key
replays only to its holder and only after a new ALLOW; a grant reaches only
the resources it names; a record the tenant does not hold is "not found",
byte for byte the same whether it is missing or another tenant's; every
refusal is recorded, through the outbox.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import grants, spiffe
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from capability_svc import errors as cap_errors
from capability_svc.governance import mesh_error

from .governed import AGENT, INVOKED, NOW, READS, VERIFIED, Mesh, error_info, outcome, wire

CHAIN = ["user:acme/alice", "svc:supervisor", "agent:work-permit-agent"]
TRAINING = str(spiffe.agent("training-agent"))
DENIED = audit_pb2.AUDIT_OUTCOME_DENIED
ACCESS_DENIED = audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED
POLICY_DECISION = audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION


def _principal(grant: common_pb2.SignedTaskGrant, *chain: common_pb2.SignedTaskGrant,
               **kw: Any) -> common_pb2.AgentPrincipal:
    """The principal a specialist sends: the supervisor's, naming itself, carrying its grants."""
    fields: dict[str, Any] = dict(agent_id="work-permit-agent", agent_version="1.0.0", execution_id="exe-1",
                                  parent_agent_id="supervisor", delegation_chain=CHAIN,
                                  grants=[*chain, grant])
    fields.update(kw)
    return common_pb2.AgentPrincipal(**fields)


def _keys(mesh: Mesh) -> dict[str, Any]:
    return {mesh.signer.key_id: mesh.signer.key.public_key()}


def _assert_log_verifies(mesh: Mesh) -> None:
    """What ``agentmesh audit verify`` checks of each record's principal holds for every record."""
    for _, fields in mesh.audit.records:
        principal = fields.get("principal")
        if principal is not None and principal.grants:
            grants.verify_chain(list(principal.grants), _keys(mesh), check_expiry=False)


# --- the principal -------------------------------------------------------------------


def test_the_recorded_principal_is_rebuilt_from_the_verified_grant(mesh: Mesh) -> None:
    grant = mesh.grant(resources=["permit:WP-10231"])
    mesh.call(mesh.request("workPermit.get", grant=grant, principal=_principal(grant), permit_id="WP-10231"))
    # Sent with no principal at all, the same principal is derived from the grant.
    mesh.call(mesh.request("workPermit.get", grant=grant, permit_id="WP-10231"))
    assert len(mesh.audit.records) == 4
    for _, fields in mesh.audit.records:
        p = fields["principal"]
        assert list(p.delegation_chain) == [*CHAIN, "capability:workPermit.get"]
        assert list(p.grants) == [grant] and p.agent_id == "work-permit-agent" and p.execution_id == "exe-1"
        # The caller's unverifiable parent_agent_id is not recorded.
        assert p.parent_agent_id == ""
    assert mesh.audit.records[0][1]["principal"].agent_version == "1.0.0"
    assert mesh.audit.records[0][1]["versions"].agent_version == "1.0.0"
    assert mesh.policy.requests[0].agent == mesh.audit.records[0][1]["principal"]
    _assert_log_verifies(mesh)


def _forged(mesh: Mesh, *, same_key_id: bool, **body: Any) -> common_pb2.SignedTaskGrant:
    """A grant signed with a key of the forger's own, naming the real key id or its own."""
    forged = grants.GrantSigner(Ed25519PrivateKey.generate()).issue(**body)
    if same_key_id:
        forged.key_id = mesh.signer.key_id
    return forged


def _bad_principal(mesh: Mesh, case: str) -> tuple[common_pb2.SignedTaskGrant, common_pb2.AgentPrincipal | None]:
    """A good request grant and a principal that must not verify (or a grant whose chain is incomplete)."""
    good = mesh.grant(resources=["permit:WP-10231"])
    body = dict(issuer="spiffe://agentmesh.local/svc/supervisor", audience=AGENT, execution_id="exe-1",
                task_id="t", tenant_id="acme", user_id="alice", assertion_digest="0" * 64,
                capabilities=READS, resources=["permit:WP-10231"], now=NOW)
    if case == "a self-signed extra grant":
        return good, _principal(good, _forged(mesh, same_key_id=True, **body))
    if case == "an extra grant of an unknown key":
        return good, _principal(good, _forged(mesh, same_key_id=False, **body))
    if case == "the chain of another grant":
        return good, _principal(good, grants=[mesh.grant(resources=["permit:WP-10231"])])
    if case == "a grant after the request's":
        return good, _principal(good, grants=[good, mesh.grant(resources=["permit:WP-10231"])])
    if case == "a grant derived from one not sent":
        return mesh.grant(resources=["permit:WP-10231"], parent_grant_id="grant-elsewhere"), None
    if case == "a link that widens the capabilities":
        root = mesh.grant(audience=TRAINING, capabilities=["workPermit.get"], resources=["permit:WP-10231"])
        child = mesh.grant(capabilities=["workPermit.get", "worker.get"], resources=["permit:WP-10231"],
                           parent_grant_id=grants.decode(root).grant_id)
        return child, _principal(child, root, delegation_chain=[])
    if case == "a link of another user":
        root = mesh.grant(audience=TRAINING, user="bob", resources=["permit:WP-10231"])
        child = mesh.grant(resources=["permit:WP-10231"], parent_grant_id=grants.decode(root).grant_id)
        return child, _principal(child, root, delegation_chain=[])
    if case == "a link issued after its parent expired":
        root = mesh.grant(audience=TRAINING, resources=["permit:WP-10231"], now=NOW - dt.timedelta(minutes=10))
        child = mesh.grant(resources=["permit:WP-10231"], parent_grant_id=grants.decode(root).grant_id)
        return child, _principal(child, root, delegation_chain=[])
    if case == "too many links":
        return good, _principal(good, *[good] * 8)
    if case == "another agent id":
        return good, _principal(good, agent_id="risk-agent")
    if case == "another execution id":
        return good, _principal(good, execution_id="exe-other")
    if case == "a delegation chain the grants do not say":
        return good, _principal(good, delegation_chain=["user:globex/mallory", "svc:supervisor",
                                                        "agent:work-permit-agent"])
    if case == "an agent version with a NUL":
        return good, _principal(good, agent_version="1.0.0\x00")
    assert case == "an agent version too long"
    return good, _principal(good, agent_version="1" * 65)


@pytest.mark.parametrize(("case", "detail"), [
    ("a self-signed extra grant", "GRANT_BAD_SIGNATURE"),
    ("an extra grant of an unknown key", "GRANT_UNKNOWN_KEY"),
    ("the chain of another grant", "CHAIN_NOT_THIS_GRANT"),
    ("a grant after the request's", "CHAIN_NOT_THIS_GRANT"),
    ("a grant derived from one not sent", "CHAIN_INCOMPLETE"),
    ("a link that widens the capabilities", "CHAIN_WIDENED"),
    ("a link of another user", "CHAIN_BROKEN"),
    ("a link issued after its parent expired", "CHAIN_BROKEN"),
    ("too many links", "CHAIN_TOO_LONG"),
    ("another agent id", "PRINCIPAL_AGENT_MISMATCH"),
    ("another execution id", "PRINCIPAL_EXECUTION_MISMATCH"),
    ("a delegation chain the grants do not say", "CHAIN_MISMATCH"),
    ("an agent version with a NUL", "AGENT_VERSION_INVALID"),
    ("an agent version too long", "AGENT_VERSION_INVALID"),
])
def test_a_principal_that_does_not_verify_is_refused_and_never_recorded(mesh: Mesh, case: str,
                                                                        detail: str) -> None:
    grant, principal = _bad_principal(mesh, case)
    err = mesh.refusal(mesh.request("workPermit.get", grant=grant, principal=principal, permit_id="WP-10231"))
    assert (err.code, err.reason, err.metadata) == (grpc.StatusCode.UNAUTHENTICATED, "PRINCIPAL_INVALID",
                                                    {"field": "principal"})
    assert mesh.policy.requests == []
    ((event, fields),) = mesh.audit.records
    verified = grants.decode(grant)
    assert (event, fields["outcome"]) == (ACCESS_DENIED, DENIED)
    assert list(fields["reason_codes"]) == ["PRINCIPAL_INVALID", detail, f"grant_id={verified.grant_id}"]
    # Only what was verified: the request grant's ids, no principal, no grant.
    assert fields["principal"] is None
    assert (fields["tenant_id"], fields["user_id"], fields["execution_id"], fields["task_id"],
            fields["agent_id"]) == ("acme", verified.user_id, "exe-1", verified.task_id, "work-permit-agent")
    assert mesh.audit.how() == [(ACCESS_DENIED, "record_durably")]


def test_a_derived_grant_with_its_whole_chain_is_recorded_as_the_grants_say(mesh: Mesh) -> None:
    # The root has expired by now (ancestors' expiry is not checked), but the
    # child was issued while it was valid.
    root = mesh.grant(audience=TRAINING, capabilities=["workPermit.get", "worker.get"],
                      resources=["permit:WP-10231", "worker:W-1001"], now=NOW - dt.timedelta(minutes=4, seconds=59))
    child = mesh.grant(capabilities=["workPermit.get"], resources=["permit:WP-10231"],
                       parent_grant_id=grants.decode(root).grant_id, depth=2)
    chain = ["user:acme/alice", "svc:supervisor", "agent:training-agent", "svc:supervisor", "agent:work-permit-agent"]
    mesh.call(mesh.request("workPermit.get", grant=child, principal=_principal(child, root, delegation_chain=chain),
                           permit_id="WP-10231"))
    p = mesh.audit.records[0][1]["principal"]
    assert list(p.delegation_chain) == [*chain, "capability:workPermit.get"]
    assert list(p.grants) == [root, child]
    _assert_log_verifies(mesh)


def test_a_refusal_before_the_principal_verifies_records_no_principal(mesh: Mesh) -> None:
    grant = mesh.grant(resources=["permit:WP-10231"])
    forged = _forged(mesh, same_key_id=True, issuer="spiffe://agentmesh.local/svc/supervisor", audience=AGENT,
                     execution_id="exe-1", task_id="t", tenant_id="acme", user_id="alice", assertion_digest="0",
                     capabilities=READS, now=NOW)
    err = mesh.refusal(mesh.request("workPermit.get", grant=grant, principal=_principal(grant, forged),
                                    permit_id="WP-10231"), caller=TRAINING)
    assert err.reason == "GRANT_AUDIENCE_MISMATCH"
    assert mesh.audit.records[0][1]["principal"] is None


def test_a_forged_grant_leaves_only_its_digest_and_an_expired_one_its_signed_ids(mesh: Mesh) -> None:
    body = dict(issuer="spiffe://agentmesh.local/svc/supervisor", audience=AGENT, execution_id="exe-forged",
                task_id="t", tenant_id="acme", user_id="alice", assertion_digest="0" * 64, capabilities=READS,
                resources=["permit:WP-10231"], now=NOW)
    forged = _forged(mesh, same_key_id=True, **body)
    req = mesh.request("workPermit.get", grant=forged, permit_id="WP-10231")
    req.trace.execution_id = "exe-of-the-trace"
    assert mesh.refusal(req).reason == "GRANT_BAD_SIGNATURE"
    expired = mesh.grant(resources=["permit:WP-10231"], execution_id="exe-expired", now=NOW - dt.timedelta(hours=1))
    assert mesh.refusal(mesh.request("workPermit.get", grant=expired, permit_id="WP-10231")).reason == "GRANT_EXPIRED"
    (_, bad), (_, old) = mesh.audit.records
    digest = hashlib.sha256(forged.grant).hexdigest()
    assert list(bad["reason_codes"]) == ["GRANT_BAD_SIGNATURE", f"grant_sha256={digest}"]
    assert (bad["tenant_id"], bad["user_id"], bad["execution_id"], bad["agent_id"], bad["principal"]) == (
        "", "", "exe-of-the-trace", "", None)
    assert (old["tenant_id"], old["user_id"], old["execution_id"], list(old["reason_codes"])) == (
        "acme", "alice", "exe-expired", ["GRANT_EXPIRED"])
    assert old["principal"] is None


# --- idempotent replays -----------------------------------------------------------------


RELEASE = dict(permit_id="WP-10231", reason="all checks passed")


def test_a_replay_is_authorised_again_and_audited(mesh: Mesh) -> None:
    first = mesh.invoke("workPermit.release", **RELEASE)
    released_at = mesh.permit("WP-10231").released_at
    again = mesh.invoke("workPermit.release", **RELEASE)
    assert again.replayed and not first.replayed and again.output == first.output
    # A new decision allowed the answer, and it carries that decision.
    assert len(mesh.policy.requests) == 2 and again.decision.decision_id == "d-2"
    assert mesh.policy.requests[1].capability_id == "workPermit.release"
    assert mesh.audit.trail() == [INVOKED, VERIFIED, outcome(audit_pb2.AUDIT_OUTCOME_SUCCESS, "VERIFIED"),
                                  outcome(audit_pb2.AUDIT_OUTCOME_SUCCESS, "IDEMPOTENT_REPLAY",
                                          "first_decision_id=d-1")]
    effect, replay = mesh.audit.records[2][1], mesh.audit.records[3][1]
    assert replay["output_digest"] == effect["output_digest"] != ""
    assert replay["policy_decision"].decision_id == "d-2" and replay["user_id"] == "alice"
    # Durable before the stored result leaves; the write ran once.
    assert mesh.audit.how()[3] == (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, "record")
    assert mesh.permit("WP-10231").released_at == released_at


def test_a_replay_the_policy_now_refuses_gets_nothing(mesh: Mesh) -> None:
    mesh.invoke("workPermit.release", **RELEASE)
    mesh.policy.effect = common_pb2.POLICY_EFFECT_DENY
    err = mesh.refused("workPermit.release", **RELEASE)
    assert (err.code, err.reason) == (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED")
    assert mesh.audit.trail()[-1] == (POLICY_DECISION, DENIED, ["POLICY_DENIED", "test.policy"])


def test_a_replay_is_withheld_when_audit_cannot_record_it(mesh: Mesh) -> None:
    mesh.invoke("workPermit.release", **RELEASE)
    mesh.audit.failing.add(audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME)
    err = mesh.refused("workPermit.release", **RELEASE)
    assert (err.code, err.reason) == (grpc.StatusCode.UNAVAILABLE, "AUDIT_UNAVAILABLE")


def test_another_principal_replaying_a_key_hears_what_a_different_payload_hears(mesh: Mesh) -> None:
    mesh.invoke("workPermit.release", **RELEASE)
    viewer = mesh.grant(user="bob", roles=["viewer"], resources=["permit:WP-10231"])
    by_viewer = mesh.refusal(mesh.request("workPermit.release", grant=viewer, **RELEASE))
    other_agent = mesh.grant(audience=TRAINING, resources=["permit:WP-10231"])
    by_other_agent = mesh.refusal(mesh.request("workPermit.release", grant=other_agent, **RELEASE), caller=TRAINING)
    other_payload = mesh.refused("workPermit.release", permit_id="WP-10231", reason="another reason")
    assert (by_viewer.code, by_viewer.reason, by_viewer.metadata) == (
        grpc.StatusCode.ABORTED, "IDEMPOTENCY_KEY_REUSED", {"field": "idempotency_key"})
    assert wire(by_viewer) == wire(by_other_agent) == wire(other_payload)
    # No decision was asked for them, and each refusal is recorded with what really happened.
    assert len(mesh.policy.requests) == 1
    refusals = [(f["user_id"], f["agent_id"], list(f["reason_codes"])) for _, f in mesh.audit.records[3:]]
    assert refusals == [("bob", "work-permit-agent", ["IDEMPOTENCY_KEY_REUSED", "PRINCIPAL_MISMATCH"]),
                        ("alice", "training-agent", ["IDEMPOTENCY_KEY_REUSED", "PRINCIPAL_MISMATCH"]),
                        ("alice", "work-permit-agent", ["IDEMPOTENCY_KEY_REUSED", "PAYLOAD_MISMATCH"])]
    assert {e for e, _ in mesh.audit.records[3:]} == {ACCESS_DENIED}


# --- grants bound to resources ------------------------------------------------------------


def test_a_grant_reaches_only_the_resources_it_names(mesh: Mesh) -> None:
    # The grant of a WP-10232 task: the permit and its workers.
    grant = mesh.grant(resources=["permit:WP-10232", "worker:W-1003", "worker:W-1002"])
    assert mesh.call(mesh.request("workPermit.get", grant=grant, permit_id="WP-10232")).output["permit_id"]
    assert mesh.call(mesh.request("worker.get", grant=grant, worker_id="W-1003")).output["worker_id"] == "W-1003"
    asked = len(mesh.policy.requests)
    for capability, field, arguments, resource in [
        ("workPermit.get", "permit_id", {"permit_id": "WP-10233"}, "permit:WP-10233"),
        ("worker.get", "worker_id", {"worker_id": "W-1005"}, "worker:W-1005"),
        ("risk.evaluate", "permit_id", {"permit_id": "WP-10233"}, "permit:WP-10233"),
        ("workPermit.search", "input", {"worker_id": "W-1005"}, "tenant:acme"),
    ]:
        before = len(mesh.audit.records)
        err = mesh.refusal(mesh.request(capability, grant=grant, **arguments))
        assert (err.code, err.reason, err.metadata) == (
            grpc.StatusCode.PERMISSION_DENIED, "GRANT_RESOURCE_NOT_LISTED", {"field": field}), capability
        ((event, fields),) = mesh.audit.records[before:]
        assert (event, list(fields["reason_codes"]), fields["resource"]) == (
            ACCESS_DENIED, ["GRANT_RESOURCE_NOT_LISTED"], resource)
        assert fields["principal"].delegation_chain[-1] == f"capability:{capability}"
    # Nothing was looked up or asked for them.
    assert len(mesh.policy.requests) == asked


def test_a_grant_naming_no_resource_can_do_nothing(mesh: Mesh) -> None:
    err = mesh.refusal(mesh.request("workPermit.get", grant=mesh.grant(resources=[]), permit_id="WP-10231"))
    assert err.reason == "GRANT_RESOURCE_NOT_LISTED"
    assert mesh.audit.trail() == [(ACCESS_DENIED, DENIED, ["GRANT_RESOURCE_NOT_LISTED", "GRANT_NAMES_NO_RESOURCE"])]
    err = mesh.refusal(mesh.request("workPermit.search", grant=mesh.grant(resources=[]), limit=10))
    assert (err.reason, err.metadata) == ("GRANT_RESOURCE_NOT_LISTED", {"field": "input"})


def test_a_search_is_on_the_tenant(mesh: Mesh) -> None:
    out = mesh.call(mesh.request("workPermit.search", grant=mesh.grant(resources=["tenant:acme"]), limit=10))
    assert out.output["count"] > 0
    assert mesh.audit.records[0][1]["resource"] == "tenant:acme"
    assert mesh.policy.requests[0].resource.type == "Tenant"


def test_an_unlisted_resource_is_refused_alike_whether_it_exists_or_not(mesh: Mesh) -> None:
    grant = mesh.grant(resources=["permit:WP-10231"])
    answers = {p: wire(mesh.refusal(mesh.request("workPermit.get", grant=grant, permit_id=p)))
               for p in ("WP-10233", "WP-20001", "WP-99999")}
    assert {a.replace(p.encode(), b"WP-X") for p, a in answers.items()} == {
        answers["WP-99999"].replace(b"WP-99999", b"WP-X")}


def test_a_mutation_on_a_permit_its_grant_does_not_name_changes_nothing(mesh: Mesh) -> None:
    before = mesh.permit("WP-10235")
    grant = mesh.grant(resources=["permit:WP-10231"])
    err = mesh.refusal(mesh.request("workPermit.release", grant=grant, permit_id="WP-10235", reason="all good"))
    assert err.reason == "GRANT_RESOURCE_NOT_LISTED"
    assert mesh.permit("WP-10235") == before
    # The key was never claimed: the right grant may use it.
    named = mesh.grant(resources=["permit:WP-10235"])
    assert mesh.call(mesh.request("workPermit.release", grant=named, permit_id="WP-10235", reason="all good")).verified


# --- not found ---------------------------------------------------------------------------


@pytest.mark.parametrize(("capability", "field", "foreign", "missing"), [
    ("workPermit.get", "permit_id", "WP-20001", "WP-99999"),
    ("risk.evaluate", "permit_id", "WP-20001", "WP-99999"),
    ("compliance.getChecklist", "permit_id", "WP-20001", "WP-99999"),
    ("worker.get", "worker_id", "W-2001", "W-9999"),
    # A worker the registry does not hold is not asked of the LMS (no LMS here).
    ("training.getStatus", "worker_id", "W-2001", "W-9999"),
])
def test_another_tenants_record_and_a_missing_one_give_the_same_bytes(mesh: Mesh, capability: str, field: str,
                                                                     foreign: str, missing: str) -> None:
    kind = field.removesuffix("_id")
    grant = mesh.grant(resources=[f"{kind}:{foreign}", f"{kind}:{missing}"])
    a = mesh.refusal(mesh.request(capability, grant=grant, **{field: foreign}))
    b = mesh.refusal(mesh.request(capability, grant=grant, **{field: missing}))
    assert (b.code, b.reason, b.metadata, b.message) == (
        grpc.StatusCode.NOT_FOUND, "RESOURCE_NOT_FOUND", {}, f"'{missing}' not found")
    assert wire(a).replace(foreign.encode(), missing.encode()) == wire(b)
    assert error_info(a).metadata == {}
    # The records say the truth; nothing ran for either.
    (ea, fa), (eb, fb) = mesh.audit.records
    assert (ea, list(fa["reason_codes"])) == (POLICY_DECISION, ["RESOURCE_NOT_FOUND", "RESOURCE_IN_ANOTHER_TENANT",
                                                                 "tenant.isolation"])
    assert (eb, list(fb["reason_codes"])) == (ACCESS_DENIED, ["RESOURCE_NOT_FOUND", "RESOURCE_MISSING",
                                                              "test.policy"])
    assert fa["tenant_id"] == fb["tenant_id"] == "acme"
    assert mesh.policy.requests[0].resource.tenant_id == "globex"


def test_the_runtimes_own_not_found_is_the_same_answer(mesh: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    grant = mesh.grant(resources=["permit:WP-99999"])
    governed = mesh.refusal(mesh.request("workPermit.get", grant=grant, permit_id="WP-99999"))
    # Were the record to vanish between the check and the read, the runtime answers alike.
    monkeypatch.setattr(mesh.store, "holds", lambda resource_type: False)
    runtime = mesh.refusal(mesh.request("workPermit.get", grant=grant, permit_id="WP-99999"))
    assert wire(runtime) == wire(governed) == wire(mesh_error(cap_errors.not_found("WP-99999")))
    assert mesh.audit.trail()[-1] == outcome(audit_pb2.AUDIT_OUTCOME_FAILURE, "RESOURCE_NOT_FOUND")


# --- refusal records -----------------------------------------------------------------------


def test_refusals_are_recorded_through_the_outbox_and_stand_without_it(mesh: Mesh) -> None:
    mesh.audit.failing |= set(audit_pb2.AuditEventType.values())
    grant = mesh.grant(resources=["permit:WP-10231"])
    err = mesh.refusal(mesh.request("workPermit.get", grant=grant, permit_id="WP-10233"))
    assert err.reason == "GRANT_RESOURCE_NOT_LISTED"
    assert mesh.audit.how() == [(ACCESS_DENIED, "record_durably")]
    mesh.audit.outbox_broken = True
    err = mesh.refusal(mesh.request("workPermit.get", grant=grant, permit_id="WP-10233"))
    assert err.reason == "GRANT_RESOURCE_NOT_LISTED"  # the refusal, not an audit error


def test_a_read_is_withheld_without_its_records(mesh: Mesh) -> None:
    mesh.audit.failing.add(audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME)
    err = mesh.refused("workPermit.get", permit_id="WP-10231")
    assert (err.code, err.reason) == (grpc.StatusCode.UNAVAILABLE, "AUDIT_UNAVAILABLE")


def test_a_task_that_searches_its_tenant_may_read_what_it_finds_there_never_change_it(mesh: Mesh) -> None:
    grant = mesh.grant(resources=["tenant:acme"])
    read = mesh.call(mesh.request("workPermit.get", grant=grant, permit_id="WP-10232"))
    assert read.output["permit_id"] == "WP-10232"
    before = mesh.permit("WP-10235")
    err = mesh.refusal(mesh.request("workPermit.release", grant=grant, permit_id="WP-10235", reason="all good"))
    assert err.reason == "GRANT_RESOURCE_NOT_LISTED"
    assert mesh.permit("WP-10235") == before


def test_naming_another_tenant_reads_nothing_of_it(mesh: Mesh) -> None:
    err = mesh.refusal(mesh.request("workPermit.get", grant=mesh.grant(resources=["tenant:globex"]),
                                    permit_id="WP-10231"))
    assert err.reason == "GRANT_RESOURCE_NOT_LISTED"
