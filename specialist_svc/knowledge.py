"""Knowledge retrieval for an agent's rules (PRD §31–33): one governed ``knowledge.search`` call in a Knowledge span.

The rules never read a knowledge store themselves: :func:`search` asks the
capability service (through the task's :class:`~specialist_svc.rules.CapabilityClient`,
so under the task's grant, the policy engine's decision and the audit log)
for the passages of one scope that match a query, and checks the answer's
shape. What comes back is data with provenance: a passage's text may be
copied into an evidence reference's ``data``, never into a statement's text
and never read as an instruction.

Every lookup is one OpenTelemetry span named ``Knowledge`` under the agent's
``AgentTask`` span (PRD §54), with the scope, the store version, the number
of hits and the outcome — never the query text, which can carry source data.

A failed call is never raised: it comes back as a
:class:`~specialist_svc.rules.CallFailure` (codes ``KNOWLEDGE_TIMEOUT``,
``KNOWLEDGE_UNAVAILABLE``, ``KNOWLEDGE_MALFORMED``, ``NOT_AUTHORISED``, ...),
so the rules decide what a missing citation means for their analysis.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentmesh import errors, telemetry
from agentmesh.v1 import common_pb2
from specialist_svc.rules import CallFailure, CapabilityClient, classify

__all__ = ["KNOWLEDGE_CAPABILITY", "KnowledgeAnswer", "KnowledgeHit", "search", "short_version"]

KNOWLEDGE_CAPABILITY = "knowledge.search"

_VERSION_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_HIT_FIELDS = ("passage_id", "document_id", "clause_id", "title", "text", "document_version")


def short_version(version: str) -> str:
    """``sha256:`` and the first 12 hex digits: short enough for a statement's text, still a token."""
    return version[:19]


@dataclass(frozen=True)
class KnowledgeHit:
    """One passage of the answer (see the ``knowledge.search`` output schema)."""

    passage_id: str
    document_id: str
    clause_id: str
    title: str
    text: str
    document_version: str
    edition: str
    score: float
    rank: int
    via: str | None


@dataclass(frozen=True)
class KnowledgeAnswer:
    """The passages one search returned, with the store version and the evidence reference they came with."""

    scope: str
    version: str
    """The store's digest, ``sha256:…``."""
    hits: tuple[KnowledgeHit, ...]
    evidence: common_pb2.EvidenceReference
    """As the capability service built it from the answer's provenance."""

    def clause(self, document_id: str, clause_id: str) -> KnowledgeHit | None:
        """The hit that is exactly this clause (``NR-10``, ``10.5.1``), or None; ``clause_id`` "" is the document."""
        return next((h for h in self.hits if h.document_id == document_id and h.clause_id == clause_id), None)


def _hit(raw: Any) -> KnowledgeHit | None:
    if not isinstance(raw, Mapping) or not all(isinstance(raw.get(k), str) for k in _HIT_FIELDS):
        return None
    if not _VERSION_RE.match(raw["document_version"]):
        return None
    score, rank, via = raw.get("score"), raw.get("rank"), raw.get("via")
    if not isinstance(score, int | float) or not isinstance(rank, int) or not (via is None or isinstance(via, str)):
        return None
    return KnowledgeHit(raw["passage_id"], raw["document_id"], raw["clause_id"], raw["title"], raw["text"],
                        raw["document_version"], str(raw.get("edition", "")), float(score), rank, via)


def search(client: CapabilityClient, scope: str, query: str, *, limit: int = 5,
           expand: int = 1) -> KnowledgeAnswer | CallFailure:
    """One governed search of ``scope``; the answer, or what its failure means (never raised).

    Args:
        client: The task's capability port.
        scope: A knowledge scope of the agent (``compliance.nr``); the grant names it or the call is refused.
        query: Keywords (e.g. a clause reference and the requirement's words).
        limit: BM25 hits wanted (1-20).
        expand: Wikilink depth (0-2).
    """
    attributes = {"agentmesh.knowledge.scope": scope,
                  "agentmesh.knowledge.query_sha256": hashlib.sha256(query.encode()).hexdigest()}
    with telemetry.tracer(__name__).start_as_current_span("Knowledge", attributes=attributes) as span:
        try:
            output, refs = client.call(KNOWLEDGE_CAPABILITY, {"scope": scope, "query": query, "limit": limit,
                                                              "expand": expand})
        except errors.MeshError as err:
            failure = classify(err, KNOWLEDGE_CAPABILITY)
            span.set_attribute("agentmesh.knowledge.outcome", failure.code)
            return failure
        raw_hits = output.get("hits")
        hits = [_hit(h) for h in raw_hits] if isinstance(raw_hits, list) else [None]
        version = output.get("knowledge_version")
        if (not refs or output.get("scope") != scope or not isinstance(version, str) or not _VERSION_RE.match(version)
                or any(h is None for h in hits)):
            span.set_attribute("agentmesh.knowledge.outcome", "KNOWLEDGE_MALFORMED")
            return CallFailure("uncertain", "KNOWLEDGE_MALFORMED", f"{KNOWLEDGE_CAPABILITY}: unusable answer")
        answer = KnowledgeAnswer(scope, version, tuple(h for h in hits if h is not None), refs[0])
        span.set_attribute("agentmesh.knowledge.outcome", "OK")
        span.set_attribute("agentmesh.knowledge.version", f"{scope}@{version}")
        span.set_attribute("agentmesh.knowledge.hits", len(answer.hits))
        if answer.hits:
            span.set_attribute("agentmesh.knowledge.top", answer.hits[0].passage_id)
        return answer
