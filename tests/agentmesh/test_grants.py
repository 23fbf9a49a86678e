"""Task grants verify only when untouched, unexpired and signed by a trusted key."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import grants, validation
from agentmesh.v1 import common_pb2

SUPERVISOR = "spiffe://agentmesh.local/svc/supervisor"
AGENT = "spiffe://agentmesh.local/agent/training-agent"


def _issue(signer: grants.GrantSigner, **kw: object) -> common_pb2.SignedTaskGrant:
    args: dict[str, object] = dict(issuer=SUPERVISOR, audience=AGENT, execution_id="exe-1", task_id="t-1",
                                   tenant_id="acme", user_id="alice", assertion_digest="d" * 64,
                                   capabilities=["training.getStatus"])
    args.update(kw)
    return signer.issue(**args)  # type: ignore[arg-type]


@pytest.fixture()
def signer() -> grants.GrantSigner:
    return grants.GrantSigner(Ed25519PrivateKey.generate())


def trusted(signer: grants.GrantSigner) -> dict[str, object]:
    return {signer.key_id: signer.key.public_key()}


def test_valid_grant_verifies(signer: grants.GrantSigner) -> None:
    body = grants.verify(_issue(signer), trusted(signer))  # type: ignore[arg-type]
    assert (body.audience, list(body.capabilities), body.tenant_id) == (AGENT, ["training.getStatus"], "acme")


@pytest.mark.parametrize("mutate, reason", [
    (lambda s: s.__setattr__("grant", s.grant[:-1] + bytes([s.grant[-1] ^ 1])), "GRANT_BAD_SIGNATURE"),
    (lambda s: s.__setattr__("signature", bytes(64)), "GRANT_BAD_SIGNATURE"),
    (lambda s: s.__setattr__("key_id", "someone-else"), "GRANT_UNKNOWN_KEY"),
    (lambda s: s.Clear(), "GRANT_MISSING"),
])
def test_tampered_grant_is_refused(signer: grants.GrantSigner, mutate: object, reason: str) -> None:
    signed = _issue(signer)
    mutate(signed)  # type: ignore[operator]
    with pytest.raises(grants.GrantInvalid) as info:
        grants.verify(signed, trusted(signer))  # type: ignore[arg-type]
    assert info.value.reason == reason


def test_forged_grant_from_another_key_is_refused(signer: grants.GrantSigner) -> None:
    forger = grants.GrantSigner(Ed25519PrivateKey.generate())
    forged = _issue(forger)
    forged.key_id = signer.key_id  # claims to be the supervisor's
    with pytest.raises(grants.GrantInvalid) as info:
        grants.verify(forged, trusted(signer))  # type: ignore[arg-type]
    assert info.value.reason == "GRANT_BAD_SIGNATURE"


def test_expired_grant_is_refused_but_verifies_offline(signer: grants.GrantSigner) -> None:
    old = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    signed = _issue(signer, now=old)
    with pytest.raises(grants.GrantInvalid) as info:
        grants.verify(signed, trusted(signer))  # type: ignore[arg-type]
    assert info.value.reason == "GRANT_EXPIRED"
    assert grants.verify(signed, trusted(signer), check_expiry=False).task_id == "t-1"  # type: ignore[arg-type]


def test_chain_must_derive_and_never_widen(signer: grants.GrantSigner) -> None:
    root = _issue(signer, capabilities=["training.getStatus", "workPermit.get"])
    root_id = grants.decode(root).grant_id
    child = _issue(signer, capabilities=["training.getStatus"], parent_grant_id=root_id, depth=2)
    assert len(grants.verify_chain([root, child], trusted(signer))) == 2  # type: ignore[arg-type]
    orphan = _issue(signer, parent_grant_id="grant-other")
    with pytest.raises(grants.GrantInvalid) as info:
        grants.verify_chain([root, orphan], trusted(signer))  # type: ignore[arg-type]
    assert info.value.reason == "CHAIN_BROKEN"
    wider = _issue(signer, capabilities=["workPermit.release"], parent_grant_id=root_id)
    with pytest.raises(grants.GrantInvalid) as info:
        grants.verify_chain([root, wider], trusted(signer))  # type: ignore[arg-type]
    assert info.value.reason == "CHAIN_WIDENED"


def test_grant_names_its_resources_and_they_are_signed(signer: grants.GrantSigner) -> None:
    signed = _issue(signer, resources=["permit:WP-10231", "worker:W-1001"])
    body = grants.verify(signed, trusted(signer))  # type: ignore[arg-type]
    assert list(body.resources) == ["permit:WP-10231", "worker:W-1001"]
    # Naming another resource afterwards breaks the signature.
    body.resources.append("permit:WP-10233")
    signed.grant = body.SerializeToString(deterministic=True)
    with pytest.raises(grants.GrantInvalid) as info:
        grants.verify(signed, trusted(signer))  # type: ignore[arg-type]
    assert info.value.reason == "GRANT_BAD_SIGNATURE"
    assert list(grants.decode(_issue(signer)).resources) == []  # none named: a grant that can act on nothing


def test_chain_never_widens_the_resources(signer: grants.GrantSigner) -> None:
    root = _issue(signer, resources=["permit:WP-10231", "worker:W-1001"])
    root_id = grants.decode(root).grant_id
    narrower = _issue(signer, resources=["worker:W-1001"], parent_grant_id=root_id)
    assert len(grants.verify_chain([root, narrower], trusted(signer))) == 2  # type: ignore[arg-type]
    wider = _issue(signer, resources=["worker:W-1001", "permit:WP-10233"], parent_grant_id=root_id)
    with pytest.raises(grants.GrantInvalid) as info:
        grants.verify_chain([root, wider], trusted(signer))  # type: ignore[arg-type]
    assert info.value.reason == "CHAIN_WIDENED"


# --------------------------------------------------------------- the record form


def test_a_grant_is_signed_as_a_grant_and_as_a_record(signer: grants.GrantSigner) -> None:
    signed = _issue(signer)
    assert signed.signature and signed.record_signature and signed.signature != signed.record_signature
    public = signer.key.public_key()
    public.verify(signed.signature, signed.grant)
    public.verify(signed.record_signature, grants.RECORD_CONTEXT + signed.grant)
    assert grants.verify_record(signed, trusted(signer)) == grants.verify(signed, trusted(signer))  # type: ignore[arg-type]


def test_the_record_form_keeps_no_grant_signature_and_verifies_offline(signer: grants.GrantSigner) -> None:
    old = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    signed = _issue(signer, now=old)
    record = grants.record_form(signed)
    assert (record.grant, record.key_id, record.record_signature, record.signature) == (
        signed.grant, signed.key_id, signed.record_signature, b"")
    assert signed.signature not in record.SerializeToString()
    # An expired grant's record still verifies: a record is about a moment that has passed.
    assert grants.verify_record(record, trusted(signer)).task_id == "t-1"  # type: ignore[arg-type]


def test_a_record_form_is_no_grant(signer: grants.GrantSigner) -> None:
    record = grants.record_form(_issue(signer))
    with pytest.raises(grants.GrantInvalid) as info:
        grants.verify(record, trusted(signer))  # type: ignore[arg-type]
    assert info.value.reason == "GRANT_MISSING"
    # Nor is a record signature put where the grant signature goes.
    moved = common_pb2.SignedTaskGrant(grant=record.grant, key_id=record.key_id, signature=record.record_signature)
    with pytest.raises(grants.GrantInvalid) as info:
        grants.verify(moved, trusted(signer))  # type: ignore[arg-type]
    assert info.value.reason == "GRANT_BAD_SIGNATURE"
    # And a grant signature is no record signature.
    signed = _issue(signer)
    swapped = common_pb2.SignedTaskGrant(grant=signed.grant, key_id=signed.key_id, record_signature=signed.signature)
    with pytest.raises(grants.GrantInvalid) as info:
        grants.verify_record(swapped, trusted(signer))  # type: ignore[arg-type]
    assert info.value.reason == "GRANT_BAD_SIGNATURE"


@pytest.mark.parametrize("mutate, reason", [
    (lambda s: s.__setattr__("grant", s.grant[:-1] + bytes([s.grant[-1] ^ 1])), "GRANT_BAD_SIGNATURE"),
    (lambda s: s.__setattr__("record_signature", bytes(64)), "GRANT_BAD_SIGNATURE"),
    (lambda s: s.__setattr__("record_signature", b""), "GRANT_MISSING"),
    (lambda s: s.__setattr__("key_id", "someone-else"), "GRANT_UNKNOWN_KEY"),
])
def test_a_tampered_record_is_refused(signer: grants.GrantSigner, mutate: object, reason: str) -> None:
    record = grants.record_form(_issue(signer))
    mutate(record)  # type: ignore[operator]
    with pytest.raises(grants.GrantInvalid) as info:
        grants.verify_record(record, trusted(signer))  # type: ignore[arg-type]
    assert info.value.reason == reason
    assert reason == "GRANT_UNKNOWN_KEY" or "record signature" in str(info.value)


def test_a_forged_record_is_refused(signer: grants.GrantSigner) -> None:
    forged = grants.record_form(_issue(grants.GrantSigner(Ed25519PrivateKey.generate())))
    forged.key_id = signer.key_id
    with pytest.raises(grants.GrantInvalid) as info:
        grants.verify_record(forged, trusted(signer))  # type: ignore[arg-type]
    assert info.value.reason == "GRANT_BAD_SIGNATURE"


def test_a_recorded_chain_obeys_the_same_rules(signer: grants.GrantSigner) -> None:
    root = _issue(signer, capabilities=["training.getStatus", "workPermit.get"], resources=["worker:W-1001"])
    root_id = grants.decode(root).grant_id
    child = _issue(signer, capabilities=["training.getStatus"], resources=["worker:W-1001"], parent_grant_id=root_id)
    chain = [grants.record_form(root), grants.record_form(child)]
    assert len(grants.verify_record_chain(chain, trusted(signer))) == 2  # type: ignore[arg-type]
    with pytest.raises(grants.GrantInvalid) as info:
        grants.verify_chain(chain, trusted(signer))  # type: ignore[arg-type]
    assert info.value.reason == "GRANT_MISSING"
    for bad, reason in [(_issue(signer, parent_grant_id="grant-other"), "CHAIN_BROKEN"),
                        (_issue(signer, parent_grant_id=root_id, user_id="mallory"), "CHAIN_BROKEN"),
                        (_issue(signer, parent_grant_id=root_id, capabilities=["workPermit.release"]),
                         "CHAIN_WIDENED"),
                        (_issue(signer, parent_grant_id=root_id, resources=["worker:W-1002"]), "CHAIN_WIDENED")]:
        for check in (grants.verify_chain, grants.verify_record_chain):
            links = [root, bad] if check is grants.verify_chain else [grants.record_form(root), grants.record_form(bad)]
            with pytest.raises(grants.GrantInvalid) as info:
                check(links, trusted(signer))  # type: ignore[arg-type]
            assert info.value.reason == reason
    tampered = grants.record_form(child)
    tampered.record_signature = bytes(64)
    with pytest.raises(grants.GrantInvalid) as info:
        grants.verify_record_chain([chain[0], tampered], trusted(signer))  # type: ignore[arg-type]
    assert (info.value.reason, str(info.value).startswith("delegation chain link 1:")) == (
        "GRANT_BAD_SIGNATURE", True)


def test_a_record_signature_is_bounded_like_the_grant_signature(signer: grants.GrantSigner) -> None:
    ok = common_pb2.AgentPrincipal(grants=[_issue(signer)])
    assert validation.problem(ok) is None
    too_long = common_pb2.AgentPrincipal(grants=[common_pb2.SignedTaskGrant(record_signature=b"s" * 513)])
    err = validation.problem(too_long)
    assert err is not None
    assert (err.reason, err.field, err.metadata["max"]) == ("FIELD_TOO_LONG", "grants[0].record_signature", "512")
