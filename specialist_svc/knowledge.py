"""Knowledge retrieval for an agent's rules (PRD §31–33): governed ``knowledge.search`` calls, each in a Knowledge span.

The rules never read a knowledge store themselves: :func:`search` asks the
capability service (through the task's :class:`~specialist_svc.rules.CapabilityClient`,
so under the task's grant, the policy engine's decision and the audit log)
for the passages of one scope that match a query, and checks the answer's
shape. What comes back is data with provenance: a passage's text may be
copied into an evidence reference's ``data``, never into a statement's text
and never read as an instruction.

Several searches go in one round trip (:func:`search_all`), each still governed
on its own. Every lookup is one OpenTelemetry span named ``Knowledge`` under
the agent's ``AgentTask`` span (PRD §54), with the capability service's spans
for it under it, and with the scope, the store version, the number of hits
and the outcome — never the query text, which can carry source data.

A failed call is never raised: it comes back as a
:class:`~specialist_svc.rules.CallFailure` (codes ``KNOWLEDGE_TIMEOUT``,
``KNOWLEDGE_UNAVAILABLE``, ``KNOWLEDGE_MALFORMED``, ``NOT_AUTHORISED``, ...),
so the rules decide what a missing citation means for their analysis.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

from agentmesh import errors, telemetry
from agentmesh.v1 import common_pb2
from specialist_svc.rules import Answered, CallFailure, CapabilityClient, classify

__all__ = ["KNOWLEDGE_CAPABILITY", "KnowledgeAnswer", "KnowledgeHit", "search", "search_all", "short_version"]

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
    return search_all(client, scope, [query], limit=limit, expand=expand)[0]


def search_all(client: CapabilityClient, scope: str, queries: Sequence[str], *, limit: int = 5,
               expand: int = 1) -> list[KnowledgeAnswer | CallFailure]:
    """Governed searches of ``scope``, one per query, in one round trip; each its answer or its failure.

    Each search is governed on its own (its grant check, policy decision and records) and has its own
    ``Knowledge`` span, under which the capability service's spans for it sit.
    """
    tracer = telemetry.tracer(__name__)
    spans = [tracer.start_span("Knowledge", attributes={
        "agentmesh.knowledge.scope": scope,
        "agentmesh.knowledge.query_sha256": hashlib.sha256(q.encode()).hexdigest()}) for q in queries]
    try:
        calls = [(KNOWLEDGE_CAPABILITY, {"scope": scope, "query": q, "limit": limit, "expand": expand})
                 for q in queries]
        if len(calls) == 1:
            with trace.use_span(spans[0], end_on_exit=False):
                try:
                    answers: list[Answered | errors.MeshError] = [client.call(*calls[0])]
                except errors.MeshError as err:
                    answers = [err]
        else:
            answers = client.call_all(calls, traceparents=[
                telemetry.traceparent_of(trace.set_span_in_context(span)) for span in spans])
        return [_read(span, scope, answer) for span, answer in zip(spans, answers, strict=True)]
    finally:
        for span in spans:
            span.end()


def _read(span: trace.Span, scope: str, answer: Answered | errors.MeshError) -> KnowledgeAnswer | CallFailure:
    """One search's answer, checked, with its outcome on its span."""
    if isinstance(answer, errors.MeshError):
        failure = classify(answer, KNOWLEDGE_CAPABILITY)
        span.set_attribute("agentmesh.knowledge.outcome", failure.code)
        return failure
    output, refs = answer
    raw_hits = output.get("hits")
    hits = [_hit(h) for h in raw_hits] if isinstance(raw_hits, list) else [None]
    version = output.get("knowledge_version")
    if (not refs or output.get("scope") != scope or not isinstance(version, str) or not _VERSION_RE.match(version)
            or any(h is None for h in hits)):
        span.set_attribute("agentmesh.knowledge.outcome", "KNOWLEDGE_MALFORMED")
        return CallFailure("uncertain", "KNOWLEDGE_MALFORMED", f"{KNOWLEDGE_CAPABILITY}: unusable answer")
    result = KnowledgeAnswer(scope, version, tuple(h for h in hits if h is not None), refs[0])
    span.set_attribute("agentmesh.knowledge.outcome", "OK")
    span.set_attribute("agentmesh.knowledge.version", f"{scope}@{version}")
    span.set_attribute("agentmesh.knowledge.hits", len(result.hits))
    if result.hits:
        span.set_attribute("agentmesh.knowledge.top", result.hits[0].passage_id)
    return result
