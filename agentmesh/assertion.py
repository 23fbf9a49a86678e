"""Signed user assertions: how the end user's authority enters the mesh.

A platform service authenticates itself by mTLS; the user it acts for arrives
as a JWT signed with EdDSA by the configured identity provider. In development
the mesh generates its own issuer key (``keys/idp.key``) next to the certs.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass, field

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentmesh.v1 import common_pb2

DEV_ISSUER = "https://idp.agentmesh.local"
AUDIENCE = "agentmesh"
DEFAULT_TTL_S = 3600


class AssertionInvalid(Exception):
    """The user assertion is missing, malformed, badly signed or expired."""

    def __init__(self, message: str, reason: str = "ASSERTION_INVALID") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class UserIdentity:
    """The verified end user: who, in which tenant, with which roles."""

    tenant_id: str
    user_id: str
    roles: tuple[str, ...]
    session_id: str
    conversation_id: str
    digest: str = field(default="")

    def to_context(self) -> common_pb2.UserContext:
        """The user as the contracts carry it (policy requests, plans, kept requesters)."""
        return common_pb2.UserContext(tenant_id=self.tenant_id, user_id=self.user_id, session_id=self.session_id,
                                      conversation_id=self.conversation_id, roles=list(self.roles),
                                      assertion_digest=self.digest)


def digest(token: str) -> str:
    """SHA-256 (hex) of an assertion, the form in which grants and audit refer to it."""
    return hashlib.sha256(token.encode()).hexdigest()


def issue(
    key: Ed25519PrivateKey,
    *,
    tenant_id: str,
    user_id: str,
    roles: list[str] | tuple[str, ...],
    session_id: str | None = None,
    conversation_id: str | None = None,
    ttl_s: int = DEFAULT_TTL_S,
    issuer: str = DEV_ISSUER,
) -> str:
    """Mints a signed assertion for a user."""
    now = int(time.time())
    claims = {
        "iss": issuer,
        "aud": AUDIENCE,
        "sub": user_id,
        "tenant": tenant_id,
        "roles": list(roles),
        "sid": session_id or f"ses-{uuid.uuid4().hex[:12]}",
        "cid": conversation_id or f"conv-{uuid.uuid4().hex[:12]}",
        "iat": now,
        "nbf": now - 5,
        "exp": now + ttl_s,
        "jti": uuid.uuid4().hex,
    }
    return jwt.encode(claims, key, algorithm="EdDSA")


def verify(token: str, key: Ed25519PublicKey, *, issuer: str = DEV_ISSUER) -> UserIdentity:
    """Verifies signature, issuer, audience and expiry; returns the user it asserts."""
    if not token:
        raise AssertionInvalid("user_assertion is required", "ASSERTION_MISSING")
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=["EdDSA"],
            audience=AUDIENCE,
            issuer=issuer,
            options={"require": ["exp", "iat", "sub", "iss", "aud"]},
        )
    except jwt.ExpiredSignatureError as err:
        raise AssertionInvalid("user assertion has expired", "ASSERTION_EXPIRED") from err
    except jwt.PyJWTError as err:
        raise AssertionInvalid(f"user assertion rejected: {err}") from err
    tenant, roles = claims.get("tenant"), claims.get("roles", [])
    if not isinstance(tenant, str) or not tenant:
        raise AssertionInvalid("user assertion has no tenant claim", "ASSERTION_NO_TENANT")
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise AssertionInvalid("user assertion roles must be a list of strings")
    return UserIdentity(
        tenant_id=tenant,
        user_id=str(claims["sub"]),
        roles=tuple(roles),
        session_id=str(claims.get("sid", "")),
        conversation_id=str(claims.get("cid", "")),
        digest=digest(token),
    )
