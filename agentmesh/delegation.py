"""The principal of a governed call (capability or model), verified before anything of it is used or recorded.

Shared by the capability service and the model service: both take a task's grant and the
caller's principal, and neither trusts anything of the principal that no grant vouches for.

A caller sends its principal (agent, version, delegation chain and the signed
grants that make the chain up) next to the grant of its task. None of it is
taken on trust. :func:`verify_principal` accepts it only if

* every grant in ``principal.grants`` verifies against the trusted grant keys
  (signature; an ancestor's expiry is not checked, since a task may outlive the
  grant it was derived from, but each link must have been issued while its
  parent was valid) — an empty list stands for the request's grant alone;
* every grant also carries its valid record signature, the proof the audit
  log keeps of it (``agentmesh.grants.verify_record``): a chain audit would
  refuse to record is refused here, before anything happens;
* the chain (at most :data:`MAX_LINKS` grants) starts at a root grant (no ``parent_grant_id``) and ends in the
  request's own grant, byte for byte;
* each link derives from the one before it (``agentmesh.grants.verify_chain``:
  ``parent_grant_id``, same tenant and user, never more capabilities or
  resources) and changes nothing else of its parent either: same execution,
  actor type and user assertion, no role its parent did not have;
* ``agent_id`` and ``execution_id``, when given, are the grant's;
* ``delegation_chain``, when given, is exactly the chain the grants say
  (:func:`chain_of`).

What comes back is rebuilt from the verified grants only; the caller's strings
are never copied (``parent_agent_id``, which no grant states, is dropped).
``agent_version`` is the one claim no grant covers: it is kept as the
authenticated caller's own statement, and only in its documented form
(:data:`AGENT_VERSION_MAX` characters of ``[0-9A-Za-z.+-]``).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh import grants, spiffe
from agentmesh.v1 import common_pb2

__all__ = ["AGENT_VERSION_MAX", "MAX_LINKS", "PrincipalInvalid", "VerifiedPrincipal", "chain_of", "verify_principal"]

MAX_LINKS: Final = 8
"""The most grants a delegation chain may carry (the mesh delegates at most a few levels deep)."""
AGENT_VERSION_MAX: Final = 64
"""The longest ``principal.agent_version`` accepted (a semantic version fits easily)."""
_AGENT_VERSION: Final = re.compile(r"[0-9A-Za-z.+-]*")


class PrincipalInvalid(Exception):
    """The principal does not verify; ``reason`` says how (UPPER_SNAKE, for the audit record only)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class VerifiedPrincipal:
    """A principal built from verified grants only."""

    signed: tuple[common_pb2.SignedTaskGrant, ...]
    """The chain as it was signed, root first, ending in the request's grant."""
    grants: tuple[common_pb2.TaskGrant, ...]
    """The decoded bodies of :attr:`signed`."""
    delegation_chain: tuple[str, ...]
    """``("user:acme/alice", "svc:supervisor", "agent:work-permit-agent")``, from :func:`chain_of`."""
    agent_id: str
    """The agent the request's grant was issued to."""
    agent_version: str
    """The caller's own statement of its version (checked for form only)."""

    def principal(self, capability_id: str = "") -> common_pb2.AgentPrincipal:
        """The AgentPrincipal to record and to show the policy engine.

        With a ``capability_id`` (one the grant lists) the chain ends in
        ``capability:<id>``; without, it ends at the agent.
        """
        last = self.grants[-1]
        chain = [*self.delegation_chain, *([f"capability:{capability_id}"] if capability_id else [])]
        return common_pb2.AgentPrincipal(agent_id=self.agent_id, agent_version=self.agent_version,
                                         execution_id=last.execution_id, delegation_chain=chain,
                                         grants=list(self.signed))


def _party(spiffe_id: str) -> str:
    try:
        parsed = spiffe.parse(spiffe_id)
    except spiffe.InvalidSpiffeId as err:
        raise PrincipalInvalid(f"a grant names {spiffe_id!r}, not a mesh identity", "GRANT_PARTY_INVALID") from err
    return f"{parsed.kind}:{parsed.name}"


def chain_of(chain: Sequence[common_pb2.TaskGrant]) -> list[str]:
    """The delegation chain a list of grants says, from the user to the last grant's audience.

    ``user:<tenant>/<user>`` (``system:`` for a system actor), then for each
    grant its issuer and its audience, each named once where one hands over
    to the next: one supervisor grant gives
    ``["user:acme/alice", "svc:supervisor", "agent:training-agent"]``.

    Raises:
        PrincipalInvalid: an issuer or audience is not a mesh SPIFFE id.
    """
    if not chain:
        return []
    root = chain[0]
    kind = "system" if root.actor_type == common_pb2.ACTOR_TYPE_SYSTEM else "user"
    parties = [f"{kind}:{root.tenant_id}/{root.user_id}"]
    for grant in chain:
        for party in (_party(grant.issuer), _party(grant.audience)):
            if parties[-1] != party:
                parties.append(party)
    return parties


def _same(a: common_pb2.SignedTaskGrant, b: common_pb2.SignedTaskGrant) -> bool:
    return (a.grant, a.signature, a.key_id) == (b.grant, b.signature, b.key_id)


def _at(ts: Timestamp) -> dt.datetime:
    return ts.ToDatetime(dt.UTC)


def _check_link(i: int, child: common_pb2.TaskGrant, parent: common_pb2.TaskGrant) -> None:
    """What ``grants.verify_chain`` leaves to the caller: a link widens nothing of its parent."""
    if (child.execution_id, child.actor_type, child.assertion_digest) != (
            parent.execution_id, parent.actor_type, parent.assertion_digest):
        raise PrincipalInvalid(f"delegation chain link {i} changes the execution or the user's assertion",
                               "CHAIN_BROKEN")
    if not set(child.roles) <= set(parent.roles):
        raise PrincipalInvalid(f"delegation chain link {i} widens the roles", "CHAIN_WIDENED")
    if not _at(parent.issued_at) <= _at(child.issued_at) <= _at(parent.expires_at):
        raise PrincipalInvalid(f"delegation chain link {i} was not issued while link {i - 1} was valid",
                               "CHAIN_BROKEN")


def verify_principal(
    principal: common_pb2.AgentPrincipal,
    signed: common_pb2.SignedTaskGrant,
    grant: common_pb2.TaskGrant,
    trusted: Mapping[str, Ed25519PublicKey],
) -> VerifiedPrincipal:
    """Verifies a request's principal against its grant (see the module docstring).

    Args:
        principal: As the caller sent it.
        signed: The request's grant, as sent.
        grant: Its body, already verified (signature, expiry) by the caller of this function.
        trusted: The grant-signing keys by key id.

    Raises:
        PrincipalInvalid: anything does not hold; nothing of the principal may be used then.
    """
    chain = list(principal.grants) or [signed]
    if len(chain) > MAX_LINKS:
        raise PrincipalInvalid(f"a delegation chain has at most {MAX_LINKS} grants", "CHAIN_TOO_LONG")
    if not _same(chain[-1], signed):
        raise PrincipalInvalid("the delegation chain does not end in the request's grant", "CHAIN_NOT_THIS_GRANT")
    try:
        bodies = grants.verify_chain(chain, trusted, check_expiry=False)
        grants.verify_record_chain(chain, trusted)
    except grants.GrantInvalid as err:
        raise PrincipalInvalid(str(err), err.reason) from err
    if bodies[0].parent_grant_id:
        raise PrincipalInvalid("the delegation chain does not start at a root grant", "CHAIN_INCOMPLETE")
    for i in range(1, len(bodies)):
        _check_link(i, bodies[i], bodies[i - 1])
    agent_id = spiffe.parse(grant.audience).name
    if principal.agent_id and principal.agent_id != agent_id:
        raise PrincipalInvalid("principal.agent_id is not the grant's audience", "PRINCIPAL_AGENT_MISMATCH")
    if principal.execution_id and principal.execution_id != grant.execution_id:
        raise PrincipalInvalid("principal.execution_id is not the grant's execution", "PRINCIPAL_EXECUTION_MISMATCH")
    parties = chain_of(bodies)
    if principal.delegation_chain and list(principal.delegation_chain) != parties:
        raise PrincipalInvalid("principal.delegation_chain is not the chain its grants say", "CHAIN_MISMATCH")
    version = principal.agent_version
    if len(version) > AGENT_VERSION_MAX or not _AGENT_VERSION.fullmatch(version):
        raise PrincipalInvalid(f"principal.agent_version: at most {AGENT_VERSION_MAX} characters of [0-9A-Za-z.+-]",
                               "AGENT_VERSION_INVALID")
    return VerifiedPrincipal(tuple(chain), tuple(bodies), tuple(parties), agent_id, version)
