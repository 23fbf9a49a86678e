"""Signed user assertions: how the end user's authority enters the mesh.

A platform service authenticates itself by mTLS; the user it acts for arrives
as a JWT signed with EdDSA by the configured identity provider. In development
the mesh generates its own issuer key (``keys/idp.key``) next to the certs.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentmesh import validation
from agentmesh.v1 import common_pb2

DEV_ISSUER = "https://idp.agentmesh.local"
AUDIENCE = "agentmesh"
DEFAULT_TTL_S = 3600


class AssertionInvalid(Exception):
    """The user assertion is missing, malformed, badly signed or expired.

    ``cause`` names the check that failed (``InvalidSignatureError``,
    ``InvalidAudienceError``, ``InvalidAlgorithmError``, ...) — a class name,
    safe to record.
    """

    def __init__(self, message: str, reason: str = "ASSERTION_INVALID", cause: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.cause = cause


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
        raise AssertionInvalid("user assertion has expired", "ASSERTION_EXPIRED", type(err).__name__) from err
    except jwt.PyJWTError as err:
        raise AssertionInvalid(f"user assertion rejected: {err}", cause=type(err).__name__) from err
    tenant, roles = claims.get("tenant"), claims.get("roles", [])
    if not isinstance(tenant, str) or not tenant:
        raise AssertionInvalid("user assertion has no tenant claim", "ASSERTION_NO_TENANT")
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise AssertionInvalid("user assertion roles must be a list of strings")
    # Every claim becomes an id of the mesh (in grants, policy requests, audit
    # records): one that is not a valid id is refused here, not further on.
    named = [("tenant", tenant), ("sub", claims["sub"]), ("sid", claims.get("sid", "")),
             ("cid", claims.get("cid", "")), *((f"roles[{i}]", r) for i, r in enumerate(roles))]
    for name, value in named:
        required = name in ("tenant", "sub") or name.startswith("roles")
        if not isinstance(value, str) or (required and not value) or (
                value and validation.value_problem(name, value, "id") is not None):
            raise AssertionInvalid(f"user assertion claim {name} is not a valid id", cause="ClaimInvalid")
    return UserIdentity(
        tenant_id=tenant,
        user_id=str(claims["sub"]),
        roles=tuple(roles),
        session_id=str(claims.get("sid", "")),
        conversation_id=str(claims.get("cid", "")),
        digest=digest(token),
    )


_SAFE_CLAIM = re.compile(r"[A-Za-z0-9._:/@+=~-]+")
_MAX_CLAIM_SHOWN = 64
_SHOWN_CLAIMS = (("alg", "header"), ("iss", "claims"), ("sub", "claims"), ("tenant", "claims"))


def _shown(value: Any) -> str:
    """A claim as a record may show it: a short id-like string, else a note of what it was."""
    if not isinstance(value, str):
        return "absent" if value is None else f"non-string:{type(value).__name__}"
    if not value:
        return "empty"
    if not _SAFE_CLAIM.fullmatch(value):
        return f"unsafe:sha256:{hashlib.sha256(value.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"
    if len(value) > _MAX_CLAIM_SHOWN:
        return f"{value[:_MAX_CLAIM_SHOWN]}+truncated"
    return value


def rejection_codes(token: str, err: AssertionInvalid | None = None) -> list[str]:
    """What an audit record of a rejected assertion says about it — never the token itself.

    ``assertion_sha256=<hex>`` (or ``assertion=absent``), the failed check, and the
    *unverified* ``alg``, ``iss``, ``sub`` and ``tenant``: each shown only if it is a
    short string of id characters (longer ones are cut at 64 and marked
    ``+truncated``; anything else is replaced by a note and a digest prefix), so no
    caller can make the record invalid or carry text through it.
    """
    if not token:
        return ["assertion=absent"]
    codes = [f"assertion_sha256={digest(token)}"]
    if err is not None and err.cause:
        codes.append(f"cause={_shown(err.cause)}")
    parts: dict[str, Any] = {"header": {}, "claims": {}}
    try:
        parts["header"] = jwt.get_unverified_header(token)
    except (jwt.PyJWTError, ValueError, TypeError):
        codes.append("header=unreadable")
    try:
        parts["claims"] = jwt.decode(token, options={"verify_signature": False, "verify_exp": False,
                                                    "verify_aud": False, "verify_iss": False})
    except (jwt.PyJWTError, ValueError, TypeError):
        codes.append("claims=unreadable")
    for name, part in _SHOWN_CLAIMS:
        source = parts[part]
        if isinstance(source, dict) and name in source:
            codes.append(f"{name}={_shown(source[name])}")
    return codes
