"""Compliance agent: the permit's compliance checklists, item by item.

Input (projection ``compliance.check``): ``permit_id`` (and ``work_type``,
``required_trainings``, ``workers`` — not needed by these rules). One
``compliance.getChecklist`` call.

Each item is one subject: the item's own ``subject`` when it has one in the
mesh's subject form (e.g. ``worker:W-1005/NR-35`` — the same subject the
training agent judges, so a disagreement surfaces as a conflict), else
``checklist:<checklist_id>/<item_id>``.

==================  =======  ==================================================
item status         verdict  statements
==================  =======  ==================================================
``PASS``            PASS     FACT ``CHECKLIST_ITEM_PASSED``
``FAIL``            FAIL     FACT ``CHECKLIST_ITEM_FAILED``
``PENDING``         UNKNOWN  UNCERTAINTY ``CHECKLIST_ITEM_PENDING``
``NOT_APPLICABLE``  —        INFERENCE ``CHECKLIST_ITEM_NOT_APPLICABLE`` (not judged)
==================  =======  ==================================================

Two items on one subject: the graver verdict stands (FAIL > UNKNOWN > PASS).
No checklist at all → no subject, UNCERTAINTY ``NO_CHECKLIST``. The item's
requirement and note are copied into evidence ``data`` only.

**The clause each item applies** (PRD §31–33). A judged item (PASS, FAIL,
PENDING) whose ``regulation`` names a clause (``NR-10 10.5.1``: a document id
and a clause id) has that clause looked up in the knowledge scope
``compliance.nr`` (``knowledge.search``, one search per distinct reference, all
in one round trip, the reference and the requirement as the query) and cited — evidence first:

=====================  ===========  ==================================================
lookup                 statement    evidence
=====================  ===========  ==================================================
the clause is a hit    INFERENCE    the clause (source ``knowledge``, reference
                       ``CLAUSE_    ``compliance.nr@<store digest>#NR-10/10.5.1``, its
                       APPLIED``    text, title, document version and the store
                                    version in ``data``) and the checklist item;
                                    a FAIL's ``REQUIREMENT_NOT_MET`` cites both too
no hit is that clause  UNCERTAINTY  the checklist item
(or the regulation is  ``CLAUSE_
not a reference)       NOT_FOUND``
the call failed        UNCERTAINTY  the checklist item; the result is PARTIAL
                       (its code,   with the failure in ``error_reason``
                       e.g. ``KNO
                       WLEDGE_UNA
                       VAILABLE``)
=====================  ===========  ==================================================

The citation never changes an item's verdict (that is the registry's FACT)
and is never attached to the FACT: the clause says what is required, not
whether it was done. A legal basis that cannot be established is an
UNCERTAINTY, so the analysis is not complete without it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentmesh.result_contract import Verdict
from agentmesh.v1 import common_pb2
from specialist_svc import knowledge
from specialist_svc.phrases import say
from specialist_svc.rules import (
    CallFailure,
    CapabilityClient,
    ResultBuilder,
    TaskInputInvalid,
    call_or_failure,
    is_id,
    require_str,
    run_guarded,
    token,
)

__all__ = ["AGENT_ID", "CAPABILITIES", "KNOWLEDGE_SCOPE", "clause_reference", "item_subject", "run"]

AGENT_ID = "compliance-agent"
CAPABILITY = "compliance.getChecklist"
CAPABILITIES = (CAPABILITY, knowledge.KNOWLEDGE_CAPABILITY)
"""Capabilities these rules call (each must be among the agent's registered ones)."""
KNOWLEDGE_SCOPE = "compliance.nr"
"""The knowledge scope the cited clauses are read from (one of the agent's ``knowledge_scopes``)."""

_REFERENCE_RE = re.compile(r"^\s*([A-Za-z]{1,8}-?[0-9]{1,4})(?:\s+([0-9][0-9A-Za-z.]{0,31}))?\s*$")
_JUDGED = ("PASS", "FAIL", "PENDING")

_SUBJECT_RE = re.compile(r"^(worker|permit|hazard|checklist):[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
                         r"(/[A-Za-z0-9][A-Za-z0-9._-]{0,63})?$")


def item_subject(checklist_id: str, item: Mapping[str, Any]) -> str:
    """The subject of one checklist item (see the module docstring)."""
    subject = item.get("subject")
    if isinstance(subject, str) and _SUBJECT_RE.match(subject):
        return subject
    return f"checklist:{checklist_id}/{item.get('item_id')}"


def clause_reference(regulation: Any) -> tuple[str, str] | None:
    """``("NR-10", "10.5.1")`` for ``"NR-10 10.5.1"``, ``("NR-10", "")`` for ``"NR-10"``; None if not a reference.

    The document id is upper-cased with its dash (``nr10`` → ``NR-10``), as the store names documents.
    """
    if not isinstance(regulation, str):
        return None
    match = _REFERENCE_RE.match(regulation)
    if match is None:
        return None
    doc = re.sub(r"^([A-Za-z]+)-?([0-9]+)$", r"\1-\2", match.group(1)).upper()
    return doc, match.group(2) or ""


def _lookups(client: CapabilityClient, checklists: list[Any]
             ) -> dict[str, knowledge.KnowledgeAnswer | CallFailure]:
    """One knowledge search per distinct clause reference of a judged item: reference → answer or failure."""
    queries: dict[str, str] = {}
    for checklist in checklists:
        for item in checklist["items"]:
            if not isinstance(item, Mapping) or item.get("status") not in _JUDGED:
                continue
            reference = clause_reference(item.get("regulation"))
            if reference is None:
                continue
            key = " ".join(p for p in reference if p)
            requirement = item.get("requirement")
            queries.setdefault(key, f"{key} {requirement}" if isinstance(requirement, str) else key)
    keys = sorted(queries)
    answers = knowledge.search_all(client, KNOWLEDGE_SCOPE, [queries[k][:1000] for k in keys])
    return dict(zip(keys, answers, strict=True))


def _cite(out: ResultBuilder, item: Mapping[str, Any], name: str, subject: str, item_ev: int,
          lookups: Mapping[str, knowledge.KnowledgeAnswer | CallFailure]) -> int | None:
    """Cites the clause the item applies (see the module docstring); the clause's evidence index, if found."""
    if item.get("status") not in _JUDGED:
        return None
    regulation = item.get("regulation")
    reference = clause_reference(regulation)
    if reference is None:
        if isinstance(regulation, str) and regulation.strip():
            out.uncertainty("CLAUSE_NOT_FOUND", say("{name} cites a regulation that is not a clause reference",
                                                    name=name),
                            subject=subject, evidence=[item_ev])
        return None
    doc, clause = reference
    cited = f"{token(doc)} {token(clause)}" if clause else token(doc)
    answer = lookups.get(" ".join(p for p in reference if p))
    if answer is None:
        return None
    if isinstance(answer, CallFailure):
        out.uncertainty(answer.code, say("{name} cites {reference}; the clause could not be read ({code_})",
                                         name=name, reference=cited, code_=answer.code),
                        subject=subject, evidence=[item_ev])
        return None
    hit = answer.clause(doc, clause)
    store = f"{KNOWLEDGE_SCOPE} {knowledge.short_version(answer.version)}"
    if hit is None:
        out.uncertainty("CLAUSE_NOT_FOUND", say("{name} cites {reference}, which the knowledge scope {store} does "
                                                "not hold", name=name, reference=cited, store=store),
                        subject=subject, evidence=[item_ev])
        return None
    part = f"{hit.document_id}/{hit.clause_id}" if hit.clause_id else hit.document_id
    clause_ev = out.evidence(answer.evidence, part=part, data={
        "scope": answer.scope, "knowledge_version": answer.version, "passage_id": hit.passage_id,
        "document_id": hit.document_id, "clause_id": hit.clause_id, "title": hit.title,
        "document_version": hit.document_version, "edition": hit.edition, "text": hit.text})
    out.inference("CLAUSE_APPLIED", say("{name} applies {reference} (knowledge {store}, document {document})",
                                        name=name, reference=cited, store=store,
                                        document=knowledge.short_version(hit.document_version)),
                  subject=subject, evidence=[clause_ev, item_ev])
    return clause_ev


def run(data: Mapping[str, Any], client: CapabilityClient) -> common_pb2.AgentResult:
    """The compliance analysis of one permit (see the module docstring).

    Raises:
        TaskInputInvalid: ``permit_id`` is missing or not a permit id.
    """
    permit_id = require_str(data, "permit_id")
    if not is_id(permit_id):
        raise TaskInputInvalid("not a permit id", field="permit_id")

    def rules() -> common_pb2.AgentResult:
        out = ResultBuilder()
        overall = f"permit:{permit_id}/compliance"
        answer = call_or_failure(client, CAPABILITY, {"permit_id": permit_id})
        if isinstance(answer, CallFailure):
            if answer.kind == "not_found":
                out.uncertainty(
                    "PERMIT_NOT_FOUND",
                    say("No checklist could be read: permit {permit_id} was not found", permit_id=permit_id),
                    subject=overall,
                )
            else:
                out.unanswered(answer, [], say("The compliance checklists of permit {permit_id}", permit_id=permit_id))
                out.uncertainty(
                    answer.code,
                    say(
                        "The compliance checklists of permit {permit_id} could not be read "
                        "({code_}); no status is assumed",
                        permit_id=permit_id,
                        code_=answer.code,
                    ),
                    subject=overall,
                )
            return out.build()
        output, refs = answer
        checklists = output.get("checklists")
        if (
            not refs
            or output.get("permit_id") != permit_id
            or not isinstance(checklists, list)
            or not all(isinstance(c, Mapping) and isinstance(c.get("items"), list) for c in checklists)
        ):
            code = "EVIDENCE_MISSING" if not refs else "COMPLIANCE_REGISTRY_MALFORMED"
            failure = CallFailure("uncertain", code, f"{CAPABILITY}: unusable answer")
            out.unanswered(failure, [], "")
            out.uncertainty(
                code,
                say("The compliance checklists of permit {permit_id} are not usable", permit_id=permit_id),
                subject=overall,
            )
            return out.build()
        ref = refs[0]
        items = 0
        lookups = _lookups(client, checklists)
        for failure in dict.fromkeys(f for f in lookups.values() if isinstance(f, CallFailure)):
            out.unanswered(failure, [], "")
        for checklist in checklists:
            cl_id = checklist.get("checklist_id")
            for item in checklist["items"]:
                if not isinstance(item, Mapping) or not is_id(cl_id) or not is_id(item.get("item_id")):
                    out.judge(overall, Verdict.UNKNOWN)
                    out.uncertainty(
                        "COMPLIANCE_REGISTRY_MALFORMED", say("A checklist item is not identifiable"), subject=overall
                    )
                    continue
                items += 1
                item_id = str(item["item_id"])
                subject = item_subject(str(cl_id), item)
                ev = out.evidence(ref, part=f"{cl_id}.{item_id}", data={"checklist_id": cl_id, **item})
                name = say("Checklist {checklist_id} item {item_id}", checklist_id=cl_id, item_id=item_id)
                status = item.get("status")
                if status == "PASS":
                    out.judge(subject, Verdict.PASS)
                    out.fact("CHECKLIST_ITEM_PASSED", say("{name} is PASS", name=name), subject=subject, evidence=[ev])
                elif status == "FAIL":
                    out.judge(subject, Verdict.FAIL)
                    out.fact("CHECKLIST_ITEM_FAILED", say("{name} is FAIL", name=name), subject=subject, evidence=[ev])
                elif status == "PENDING":
                    out.judge(subject, Verdict.UNKNOWN)
                    out.uncertainty(
                        "CHECKLIST_ITEM_PENDING",
                        say("{name} is still PENDING", name=name),
                        subject=subject,
                        evidence=[ev],
                    )
                elif status == "NOT_APPLICABLE":
                    out.inference(
                        "CHECKLIST_ITEM_NOT_APPLICABLE",
                        say("{name} is NOT_APPLICABLE", name=name),
                        subject=subject,
                        evidence=[ev],
                    )
                else:
                    out.judge(subject, Verdict.UNKNOWN)
                    out.uncertainty(
                        "COMPLIANCE_REGISTRY_MALFORMED",
                        say("{name} has an unrecognised status", name=name),
                        subject=subject,
                        evidence=[ev],
                    )
                clause_ev = _cite(out, item, name, subject, ev, lookups)
                if status == "FAIL":
                    cited = clause_reference(item.get("regulation")) if clause_ev is not None else None
                    if cited:
                        reference = " ".join(token(p) for p in cited if p)
                        text = say("{name}'s requirement ({reference}) is not met", name=name, reference=reference)
                    else:
                        text = say("{name}'s requirement is not met", name=name)
                    out.inference("REQUIREMENT_NOT_MET", text, subject=subject,
                                  evidence=[clause_ev, ev] if clause_ev is not None else [])
        if not items:
            out.uncertainty(
                "NO_CHECKLIST",
                say("Permit {permit_id} has no compliance checklist item", permit_id=permit_id),
                subject=overall,
            )
        if out.verdict is Verdict.FAIL:
            out.recommendation(
                "DO_NOT_RELEASE",
                say("Resolve the failed checklist items of permit {permit_id} before release", permit_id=permit_id),
            )
        return out.build()

    return run_guarded(rules)
