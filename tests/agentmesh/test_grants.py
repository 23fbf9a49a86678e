"""Task grants verify only when untouched, unexpired and signed by a trusted key."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import grants
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
