"""Signed task grants: the delegation the supervisor gives one agent for one task.

A grant names the execution and task, the tenant and user (by assertion
digest), its audience (the agent's SPIFFE id), the capabilities allowed for the
task, the resources the task may act on (``"permit:WP-10231"``,
``"worker:W-1001"``, ``"tenant:acme"`` for an operation over the whole tenant),
the context-projection digest, the depth and an expiry. It is signed
with the supervisor's Ed25519 key over its deterministic protobuf encoding, so
the capability runtime and anyone reading the audit log can verify it offline.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from google.protobuf import message as pb_message
from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh.signing import key_id
from agentmesh.v1 import common_pb2

DEFAULT_TTL = dt.timedelta(minutes=5)


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
        """Signs a grant body as it is (fill ids and times before calling)."""
        body = grant.SerializeToString(deterministic=True)
        return common_pb2.SignedTaskGrant(grant=body, signature=self.key.sign(body), key_id=self.key_id)

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
        ttl: dt.timedelta = DEFAULT_TTL,
        now: dt.datetime | None = None,
    ) -> common_pb2.SignedTaskGrant:
        """Builds and signs a fresh grant.

        ``resources`` are the ``"TYPE:ID"`` the task may act on; the capability
        runtime refuses a call on any other (and every call of a grant that
        lists none), so leaving them out gives a grant that can do nothing.
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
    """Checks the signature against a trusted key and the validity window; returns the body.

    ``check_expiry=False`` is for offline audit verification of old records,
    where the grant was valid when used and has expired since.
    """
    if not signed.grant or not signed.signature:
        raise GrantInvalid("a signed task grant is required", "GRANT_MISSING")
    key = trusted.get(signed.key_id)
    if key is None:
        raise GrantInvalid(f"grant signed by an unknown key {signed.key_id!r}", "GRANT_UNKNOWN_KEY")
    try:
        key.verify(signed.signature, signed.grant)
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


def verify_chain(
    chain: Sequence[common_pb2.SignedTaskGrant],
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    check_expiry: bool = False,
) -> list[common_pb2.TaskGrant]:
    """Verifies every link and that each one derives from the one before it."""
    bodies: list[common_pb2.TaskGrant] = []
    for i, signed in enumerate(chain):
        try:
            grant = verify(signed, trusted, check_expiry=check_expiry)
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
