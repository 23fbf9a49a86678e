"""Signed task grants: the delegation the supervisor gives one agent for one task.

A grant names the execution and task, the tenant and user (by assertion
digest), its audience (the agent's SPIFFE id), the capabilities allowed for the
task, the resources the task may act on (``"permit:WP-10231"``,
``"worker:W-1001"``, ``"tenant:acme"`` for an operation over the whole tenant),
the context-projection digest, the depth and an expiry. The supervisor signs
its deterministic protobuf encoding twice with its Ed25519 key, once per
purpose (domain separation):

* ``signature`` over the body makes it a credential: the agent presents it
  and the capability runtime checks it (:func:`verify`);
* ``record_signature`` over :data:`RECORD_CONTEXT` + body makes it a record:
  the audit log keeps grants in their :func:`record_form` (no ``signature``),
  and anyone can verify them offline (:func:`verify_record`), while no record
  form, and no record signature moved into ``signature``, is ever a grant.

The rules a delegation chain obeys (each link derives from the one before
it, same tenant and user, never more capabilities or resources) are
:func:`verify_links`, whichever signature vouches for the links.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from google.protobuf import message as pb_message
from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh.signing import key_id
from agentmesh.v1 import common_pb2

DEFAULT_TTL = dt.timedelta(minutes=5)
RECORD_CONTEXT: Final = b"agentmesh.grant.record.v1\x00"
"""What a record signature signs before the grant body: it can never verify as a grant signature."""


@functools.lru_cache(maxsize=4096)
def _signature_holds(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """Whether an Ed25519 signature verifies, remembered: one task's grant is checked on every one of its
    calls (its signature, then its chain and its record signature), always with the same answer."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except InvalidSignature:
        return False
    return True


def _check(key: Ed25519PublicKey, signature: bytes, message: bytes) -> None:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    if not _signature_holds(raw, signature, message):
        raise InvalidSignature()


class GrantInvalid(Exception):
    """A grant failed verification; ``reason`` says how (UPPER_SNAKE)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def _ts(when: dt.datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(when.astimezone(dt.UTC))
    return ts


@dataclass(frozen=True, slots=True)
class GrantSigner:
    """Signs grants with one Ed25519 key."""

    key: Ed25519PrivateKey

    @property
    def key_id(self) -> str:
        """Id of the signing key, carried in every signed grant."""
        return key_id(self.key.public_key())

    def sign(self, grant: common_pb2.TaskGrant) -> common_pb2.SignedTaskGrant:
        """Signs a grant body as it is (fill ids and times before calling): as a grant and as a record."""
        body = grant.SerializeToString(deterministic=True)
        return common_pb2.SignedTaskGrant(grant=body, signature=self.key.sign(body), key_id=self.key_id,
                                          record_signature=self.key.sign(RECORD_CONTEXT + body))

    def issue(
        self,
        *,
        issuer: str,
        audience: str,
        execution_id: str,
        task_id: str,
        tenant_id: str,
        user_id: str,
        assertion_digest: str,
        capabilities: Sequence[str],
        resources: Sequence[str] = (),
        projection_digest: str = "",
        depth: int = 1,
        roles: Sequence[str] = (),
        actor_type: int = common_pb2.ACTOR_TYPE_USER,
        session_id: str = "",
        conversation_id: str = "",
        parent_grant_id: str = "",
        confirmed_action_digest: str = "",
        confirmation_id: str = "",
        human_approval_id: str = "",
        human_approver_id: str = "",
        model_budgets: tuple[common_pb2.AgentBudget, common_pb2.AgentBudget] | None = None,
        agent_risk_profile: common_pb2.RiskProfile | None = None,
        ttl: dt.timedelta = DEFAULT_TTL,
        now: dt.datetime | None = None,
    ) -> common_pb2.SignedTaskGrant:
        """Builds and signs a fresh grant.

        ``resources`` are the ``"TYPE:ID"`` the task may act on; the capability
        runtime refuses a call on any other (and every call of a grant that
        lists none), so leaving them out gives a grant that can do nothing.
        ``model_budgets`` are the task's and the execution's model budget (the
        model service refuses every call of a grant without them). ``agent_risk_profile`` is what the
        agent version declared; the policy engine refuses a capability beyond it.
        """
        start = now or dt.datetime.now(dt.UTC)
        grant = common_pb2.TaskGrant(
            grant_id=f"grant-{uuid.uuid4().hex}",
            execution_id=execution_id,
            task_id=task_id,
            tenant_id=tenant_id,
            user_id=user_id,
            assertion_digest=assertion_digest,
            issuer=issuer,
            audience=audience,
            capabilities=list(capabilities),
            resources=list(resources),
            projection_digest=projection_digest,
            depth=depth,
            issued_at=_ts(start),
            expires_at=_ts(start + ttl),
            actor_type=actor_type,  # type: ignore[arg-type]
            roles=list(roles),
            session_id=session_id,
            conversation_id=conversation_id,
            parent_grant_id=parent_grant_id,
            confirmed_action_digest=confirmed_action_digest,
            confirmation_id=confirmation_id,
            human_approval_id=human_approval_id,
            human_approver_id=human_approver_id,
        )
        if agent_risk_profile is not None:
            grant.agent_risk_profile.CopyFrom(agent_risk_profile)
        if model_budgets is not None:
            grant.budget.CopyFrom(model_budgets[0])
            grant.execution_budget.CopyFrom(model_budgets[1])
        return self.sign(grant)


def action_digest(capability_id: str, arguments: Mapping[str, object]) -> str:
    """SHA-256 of one exact action (capability and input), as confirmations bind to it."""
    body = json.dumps({"capability": capability_id, "input": arguments}, sort_keys=True, separators=(",", ":"),
                      default=str)
    return hashlib.sha256(body.encode()).hexdigest()


def decode(signed: common_pb2.SignedTaskGrant) -> common_pb2.TaskGrant:
    """The grant body, without checking the signature (for display only)."""
    grant = common_pb2.TaskGrant()
    try:
        grant.ParseFromString(signed.grant)
    except pb_message.DecodeError as err:
        raise GrantInvalid("grant body is not a TaskGrant", "GRANT_MALFORMED") from err
    return grant


def verify(
    signed: common_pb2.SignedTaskGrant,
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    now: dt.datetime | None = None,
    check_expiry: bool = True,
) -> common_pb2.TaskGrant:
    """Checks the grant signature against a trusted key and the validity window; returns the body.

    Only ``signature`` counts: a grant's record form (no ``signature``) is
    GRANT_MISSING, and a record signature in its place does not verify
    (GRANT_BAD_SIGNATURE). ``check_expiry=False`` is for chains of grants that
    were valid when used and may have expired since.
    """
    if not signed.grant or not signed.signature:
        raise GrantInvalid("a signed task grant is required", "GRANT_MISSING")
    key = trusted.get(signed.key_id)
    if key is None:
        raise GrantInvalid(f"grant signed by an unknown key {signed.key_id!r}", "GRANT_UNKNOWN_KEY")
    try:
        _check(key, signed.signature, signed.grant)
    except InvalidSignature as err:
        raise GrantInvalid("grant signature does not verify", "GRANT_BAD_SIGNATURE") from err
    grant = decode(signed)
    if check_expiry:
        moment = now or dt.datetime.now(dt.UTC)
        if grant.expires_at.ToDatetime(dt.UTC) <= moment:
            raise GrantInvalid("grant has expired", "GRANT_EXPIRED")
        if grant.issued_at.ToDatetime(dt.UTC) > moment + dt.timedelta(seconds=30):
            raise GrantInvalid("grant is issued in the future", "GRANT_NOT_YET_VALID")
    return grant


def record_form(signed: common_pb2.SignedTaskGrant) -> common_pb2.SignedTaskGrant:
    """The grant as the audit log keeps it: body, key id and record signature, no grant signature.

    It proves the grant authentic to anyone holding the signer's public key
    (:func:`verify_record`) and cannot be presented as a grant.
    """
    return common_pb2.SignedTaskGrant(grant=signed.grant, key_id=signed.key_id,
                                      record_signature=signed.record_signature)


def verify_record(signed: common_pb2.SignedTaskGrant,
                  trusted: Mapping[str, Ed25519PublicKey]) -> common_pb2.TaskGrant:
    """Checks the record signature against a trusted key; returns the body.

    Expiry is not checked: a record is about a moment that has passed. The
    grant signature, if any, is not looked at. The reasons are those of
    :func:`verify` (GRANT_MISSING: no body or no record signature;
    GRANT_UNKNOWN_KEY; GRANT_BAD_SIGNATURE; GRANT_MALFORMED); the message
    says it is the record signature.
    """
    if not signed.grant or not signed.record_signature:
        raise GrantInvalid("a grant with its record signature is required", "GRANT_MISSING")
    key = trusted.get(signed.key_id)
    if key is None:
        raise GrantInvalid(f"grant signed by an unknown key {signed.key_id!r}", "GRANT_UNKNOWN_KEY")
    try:
        _check(key, signed.record_signature, RECORD_CONTEXT + signed.grant)
    except InvalidSignature as err:
        raise GrantInvalid("grant record signature does not verify", "GRANT_BAD_SIGNATURE") from err
    return decode(signed)


def verify_links(
    chain: Sequence[common_pb2.SignedTaskGrant],
    open_link: Callable[[common_pb2.SignedTaskGrant], common_pb2.TaskGrant],
) -> list[common_pb2.TaskGrant]:
    """The rules of a delegation chain, whatever vouches for each link; returns the bodies.

    ``open_link`` authenticates one link and returns its body (e.g.
    :func:`verify` or :func:`verify_record` with the trusted keys), raising
    GrantInvalid. Each link must then derive from the one before it
    (``parent_grant_id``, CHAIN_BROKEN), keep its tenant and user
    (CHAIN_BROKEN), and never widen the capabilities or the resources
    (CHAIN_WIDENED). Links are checked in order; the first problem is raised,
    its message naming the link.
    """
    bodies: list[common_pb2.TaskGrant] = []
    for i, signed in enumerate(chain):
        try:
            grant = open_link(signed)
        except GrantInvalid as err:
            raise GrantInvalid(f"delegation chain link {i}: {err}", err.reason) from err
        if bodies:
            parent = bodies[-1]
            if grant.parent_grant_id != parent.grant_id:
                raise GrantInvalid(f"delegation chain link {i} does not derive from link {i - 1}",
                                   "CHAIN_BROKEN")
            if grant.tenant_id != parent.tenant_id or grant.user_id != parent.user_id:
                raise GrantInvalid(f"delegation chain link {i} changes tenant or user", "CHAIN_BROKEN")
            if not set(grant.capabilities) <= set(parent.capabilities):
                raise GrantInvalid(f"delegation chain link {i} widens the capabilities", "CHAIN_WIDENED")
            if not set(grant.resources) <= set(parent.resources):
                raise GrantInvalid(f"delegation chain link {i} widens the resources", "CHAIN_WIDENED")
        bodies.append(grant)
    return bodies


def verify_chain(
    chain: Sequence[common_pb2.SignedTaskGrant],
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    check_expiry: bool = False,
) -> list[common_pb2.TaskGrant]:
    """Verifies every link's grant signature and the chain rules (:func:`verify_links`)."""
    return verify_links(chain, lambda signed: verify(signed, trusted, check_expiry=check_expiry))


def verify_record_chain(
    chain: Sequence[common_pb2.SignedTaskGrant],
    trusted: Mapping[str, Ed25519PublicKey],
) -> list[common_pb2.TaskGrant]:
    """Verifies every link's record signature and the chain rules (:func:`verify_links`), as audit does."""
    return verify_links(chain, lambda signed: verify_record(signed, trusted))
