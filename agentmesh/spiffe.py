"""SPIFFE ids of mesh workloads, parsed and authorised by small pure functions.

Every workload certificate carries exactly one URI SAN of the form
``spiffe://agentmesh.local/<kind>/<name>`` where kind is ``svc`` (a mesh role),
``agent`` (a specialist) or ``client`` (a platform caller or an operator).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

TRUST_DOMAIN = "agentmesh.local"
KINDS = ("svc", "agent", "client")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


class InvalidSpiffeId(ValueError):
    """The text is not a SPIFFE id of this mesh."""


@dataclass(frozen=True, slots=True)
class SpiffeId:
    """A parsed mesh SPIFFE id."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"spiffe://{TRUST_DOMAIN}/{self.kind}/{self.name}"

    @property
    def dns_name(self) -> str:
        """DNS SAN placed beside the URI SAN so clients can verify servers by name."""
        return f"{self.name}.{self.kind}.{TRUST_DOMAIN}"


def parse(text: str) -> SpiffeId:
    """Parses ``spiffe://agentmesh.local/<kind>/<name>``; anything else is refused."""
    prefix = f"spiffe://{TRUST_DOMAIN}/"
    if not text.startswith(prefix):
        raise InvalidSpiffeId(f"not a spiffe://{TRUST_DOMAIN}/ id: {text!r}")
    parts = text[len(prefix) :].split("/")
    if len(parts) != 2 or parts[0] not in KINDS or not _NAME.fullmatch(parts[1]):
        raise InvalidSpiffeId(f"expected spiffe://{TRUST_DOMAIN}/<svc|agent|client>/<name>: {text!r}")
    return SpiffeId(parts[0], parts[1])


def service(role: str) -> SpiffeId:
    """The id of a mesh role, e.g. ``service("policy")``."""
    return SpiffeId("svc", role)


def agent(agent_id: str) -> SpiffeId:
    """The id of a specialist agent process."""
    return SpiffeId("agent", agent_id)


def client(name: str) -> SpiffeId:
    """The id of a platform caller or an operator."""
    return SpiffeId("client", name)


def matches(spiffe_id: str, pattern: str) -> bool:
    """Whether an id matches an allow-list pattern; ``*`` matches within one path segment."""
    if "*" not in pattern:
        return spiffe_id == pattern
    # fnmatch's * crosses "/", so match segment by segment.
    id_parts, pat_parts = spiffe_id.split("/"), pattern.split("/")
    return len(id_parts) == len(pat_parts) and all(
        fnmatch.fnmatchcase(i, p) for i, p in zip(id_parts, pat_parts, strict=True)
    )


def authorize_one_of(spiffe_id: str, patterns: list[str] | tuple[str, ...]) -> bool:
    """True when the id matches at least one pattern. Deny by default."""
    return any(matches(spiffe_id, p) for p in patterns)
