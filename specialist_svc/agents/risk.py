"""Risk agent: are the permit's registered hazards under control?

Input (projection ``risk.assess``): ``permit_id`` (and ``work_type``, ``site``,
the window — not needed by these rules). One ``risk.evaluate`` call, which
scores every hazard (severity × likelihood → LOW / MEDIUM / HIGH / CRITICAL)
and lists the controls not in place.

==========================  =======  ==========================================================
subject                     verdict  rule
==========================  =======  ==========================================================
``hazard:<risk_id>``        FAIL     a control is not in place (FACT ``HAZARD_CONTROLS_OPEN``)
                            FAIL     level CRITICAL (``HAZARD_CRITICAL``): not for an automated
                                     recommendation whatever the controls
                            PASS     otherwise (``HAZARD_CONTROLLED``)
``permit:<id>/risk``        FAIL     any hazard fails (``RISK_NOT_CONTROLLED``)
                            PASS     every hazard passes (``RISK_CONTROLLED``)
                            UNKNOWN  no assessment registered (FACT + UNCERTAINTY
                                     ``RISK_NOT_ASSESSED``): absence of an assessment is not low risk
==========================  =======  ==========================================================

``result.risk_level`` is the assessment's overall level (null when not assessed).
The permit not found → ``permit:<id>/risk`` UNKNOWN with UNCERTAINTY
``PERMIT_NOT_FOUND`` (the work-permit agent owns that answer).

The permit's description (free text the rules cannot read)
------------------------------------------------------------

With a model service, the description (projected as ``description``) is read by
a model through the prompt ``risk.hazards_in_text``: the description and the
registered hazards' names go to the model as data, never as instructions. The
answer is a proposal, kept only where it holds against the text: a category the
agent asked about, and a quote found verbatim in the description. Each hazard
category the model finds mentioned and not covered by a registered hazard
becomes an INFERENCE ``MODEL_HAZARD_NOT_ASSESSED`` on ``permit:<id>/description``
whose evidence is the description (the quote, as data) and the model's answer
(authority MODEL_INFERENCE: model, version, call id, answer digest). It judges no
subject, so it never changes the verdict, the status or the decision; a reviewer
sees it in the report. ``result.model_reading`` says how the reading went:
``READ`` (with ``proposed``, ``kept``, ``rejected`` counts), ``UNAVAILABLE`` (the
call failed or was refused, with its reason: the analysis stands without it),
or ``NOT_ASKED`` (no description, or no model service). A model budget
exhausted on the way is reported with the result (``model_usage``) and ends the
execution as the tenant's policy says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentmesh import errors
from agentmesh.result_contract import Verdict
from agentmesh.v1 import common_pb2
from specialist_svc.phrases import say
from specialist_svc.rules import (
    CallFailure,
    CapabilityClient,
    ModelInput,
    ModelPort,
    ResultBuilder,
    TaskInputInvalid,
    call_or_failure,
    is_id,
    require_str,
    run_guarded,
    token,
)

__all__ = ["AGENT_ID", "CAPABILITIES", "run"]

AGENT_ID = "risk-agent"
CAPABILITY = "risk.evaluate"
CAPABILITIES = (CAPABILITY,)
"""Capabilities these rules call (each must be among the agent's registered ones)."""

LEVELS = ("LOW", "MEDIUM", "HIGH", "CRITICAL")
BLOCKING_LEVEL = "CRITICAL"
"""A hazard at this level fails even with every control in place."""
USES_MODELS = True
"""The rules may ask a model (the description); see the module docstring."""
TEXT_PROMPT = "risk.hazards_in_text"
HAZARD_CATEGORIES = ("CHEMICAL", "CONFINED_SPACE", "ELECTRICAL", "HOT_WORK", "LIFTING", "WORK_AT_HEIGHT")
"""The hazard categories the model is asked about."""


def _category_word(category: str) -> str:
    """How a statement names a hazard category, in the user's language."""
    return {"WORK_AT_HEIGHT": say("work-at-height"), "ELECTRICAL": say("electrical"),
            "CONFINED_SPACE": say("confined-space"), "HOT_WORK": say("hot-work"), "CHEMICAL": say("chemical"),
            "LIFTING": say("lifting")}[category]


def read_description(out: ResultBuilder, permit_id: str, description: str, hazards: Sequence[Mapping[str, Any]],
                     models: ModelPort | None) -> dict[str, Any]:
    """A model's reading of the permit description as INFERENCEs (see the module docstring); the reading's summary."""
    if models is None or not description.strip():
        return {"status": "NOT_ASKED"}
    registered = "; ".join(str(h.get("hazard")) for h in hazards if isinstance(h.get("hazard"), str))
    try:
        reply = models.complete(TEXT_PROMPT, {"categories": list(HAZARD_CATEGORIES)}, [
            ModelInput("permit.description", description, "permit-registry"),
            ModelInput("risk.registered_hazards", registered or "(none)", "risk-register")])
    except errors.MeshError as err:
        return {"status": "UNAVAILABLE", "reason": err.reason}
    proposed = reply.answer.get("hazards")
    items = proposed if isinstance(proposed, list) else []
    subject = f"permit:{permit_id}/description"
    kept = rejected = 0
    seen: set[str] = set()
    for item in items:
        category = item.get("category") if isinstance(item, Mapping) else None
        quote = item.get("quote") if isinstance(item, Mapping) else None
        covered = item.get("covered") if isinstance(item, Mapping) else None
        # Only what holds against the text is kept: a category asked about, once, and words that are there.
        if category not in HAZARD_CATEGORIES or category in seen or not isinstance(quote, str) or not quote.strip() \
                or quote not in description or not isinstance(covered, bool):
            rejected += 1
            continue
        seen.add(category)
        if covered:
            continue
        kept += 1
        source = out.evidence(common_pb2.EvidenceReference(
            source="permit-registry", reference=f"permit/{permit_id}#description",
            authority=common_pb2.AUTHORITY_LEVEL_OFFICIAL_RECORD), data={"field": "description", "quote": quote})
        model = out.evidence(common_pb2.EvidenceReference(
            source=f"model:{reply.model_id}", reference=reply.call_id,
            authority=common_pb2.AUTHORITY_LEVEL_MODEL_INFERENCE, capability=f"model:{reply.prompt}"),
            data={"model_version": reply.model_version, "prompt": reply.prompt, "answer_sha256": reply.answer_digest,
                  "category": category})
        out.inference(
            "MODEL_HAZARD_NOT_ASSESSED",
            say("A model reads the description of permit {permit_id} as mentioning a {category} hazard that no "
                "registered hazard covers (a model's inference, not a verified fact; the words are in the evidence)",
                permit_id=permit_id, category=_category_word(category)),
            subject=subject, evidence=[source, model])
    return {"status": "READ", "model_id": reply.model_id, "proposed": len(items), "kept": kept,
            "rejected": rejected}


def run(data: Mapping[str, Any], client: CapabilityClient, *,
        models: ModelPort | None = None) -> common_pb2.AgentResult:
    """The risk analysis of one permit (see the module docstring).

    Raises:
        TaskInputInvalid: ``permit_id`` is missing or not a permit id.
    """
    permit_id = require_str(data, "permit_id")
    if not is_id(permit_id):
        raise TaskInputInvalid("not a permit id", field="permit_id")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise TaskInputInvalid("a string is expected", field="description")

    def rules() -> common_pb2.AgentResult:
        overall = f"permit:{permit_id}/risk"
        out = ResultBuilder()
        answer = call_or_failure(client, CAPABILITY, {"permit_id": permit_id})
        if isinstance(answer, CallFailure):
            if answer.kind == "not_found":
                out.judge(overall, Verdict.UNKNOWN)
                out.uncertainty(
                    "PERMIT_NOT_FOUND",
                    say("No risk assessment could be read: permit {permit_id} was not found", permit_id=permit_id),
                    subject=overall,
                )
            else:
                out.unanswered(answer, [overall], say("The risk assessment of permit {permit_id}", permit_id=permit_id))
            return out.build({"risk_level": None})
        output, refs = answer
        hazards = output.get("hazards")
        if (
            not refs
            or output.get("permit_id") != permit_id
            or not isinstance(output.get("assessed"), bool)
            or not isinstance(hazards, list)
            or not all(isinstance(h, Mapping) for h in hazards)
        ):
            code = "EVIDENCE_MISSING" if not refs else "RISK_REGISTER_MALFORMED"
            out.unanswered(
                CallFailure("uncertain", code, f"{CAPABILITY}: unusable answer"),
                [overall],
                say("The risk assessment of permit {permit_id}", permit_id=permit_id),
            )
            return out.build({"risk_level": None})
        ref = refs[0]
        level = output.get("risk_level")
        summary = out.evidence(
            ref,
            data={
                "permit_id": permit_id,
                "assessed": output["assessed"],
                "risk_level": level,
                "max_score": output.get("max_score"),
                "open_controls_count": output.get("open_controls_count"),
                "hazards": len(hazards),
            },
        )
        if not output["assessed"] or not hazards:
            out.judge(overall, Verdict.UNKNOWN)
            out.fact(
                "RISK_NOT_ASSESSED",
                say("No hazard is registered for permit {permit_id}", permit_id=permit_id),
                subject=overall,
                evidence=[summary],
            )
            out.uncertainty(
                "RISK_NOT_ASSESSED",
                say("Permit {permit_id} has no risk assessment; that is not low risk", permit_id=permit_id),
                subject=overall,
                evidence=[summary],
            )
            out.recommendation(
                "ASSESS_RISK",
                say("Register a risk assessment for permit {permit_id} before release", permit_id=permit_id),
            )
            return out.build({"risk_level": None})

        failing: list[str] = []
        unreadable = 0
        for hazard in hazards:
            risk_id = hazard.get("risk_id")
            if not is_id(risk_id):
                unreadable += 1  # no usable subject: the overall risk cannot pass
                continue
            subject = f"hazard:{risk_id}"
            ev = out.evidence(ref, part=str(risk_id), data=dict(hazard))
            h_level = hazard.get("level") if hazard.get("level") in LEVELS else say("unrecognised")
            open_controls = hazard.get("open_controls")
            if not isinstance(open_controls, list):
                out.judge(subject, Verdict.UNKNOWN)
                out.uncertainty(
                    "RISK_REGISTER_MALFORMED",
                    say("The controls of hazard {risk_id} are not readable", risk_id=risk_id),
                    subject=subject,
                    evidence=[ev],
                )
                continue
            score = say("score {score}, level {level}", score=token(str(hazard.get("score")), "?"), level=h_level)
            if open_controls:
                out.judge(subject, Verdict.FAIL)
                out.fact(
                    "HAZARD_CONTROLS_OPEN",
                    say(
                        "Hazard {risk_id} ({score}) has {n_open_controls} control(s) not in place",
                        risk_id=risk_id,
                        score=score,
                        n_open_controls=len(open_controls),
                    ),
                    subject=subject,
                    evidence=[ev],
                )
                failing.append(subject)
            elif hazard.get("level") == BLOCKING_LEVEL:
                out.judge(subject, Verdict.FAIL)
                out.fact(
                    "HAZARD_CRITICAL",
                    say(
                        "Hazard {risk_id} is {BLOCKING_LEVEL} ({score})",
                        risk_id=risk_id,
                        BLOCKING_LEVEL=BLOCKING_LEVEL,
                        score=score,
                    ),
                    subject=subject,
                    evidence=[ev],
                )
                failing.append(subject)
            elif hazard.get("level") in LEVELS:
                out.judge(subject, Verdict.PASS)
                out.fact(
                    "HAZARD_CONTROLLED",
                    say("Hazard {risk_id} ({score}) has every control in place", risk_id=risk_id, score=score),
                    subject=subject,
                    evidence=[ev],
                )
            else:
                out.judge(subject, Verdict.UNKNOWN)
                out.uncertainty(
                    "RISK_REGISTER_MALFORMED",
                    say("The level of hazard {risk_id} is not readable", risk_id=risk_id),
                    subject=subject,
                    evidence=[ev],
                )

        reading = read_description(out, permit_id, description, hazards, models)
        shown_level = level if level in LEVELS else say("unrecognised")
        if failing:
            out.judge(overall, Verdict.FAIL)
            out.fact(
                "RISK_NOT_CONTROLLED",
                say(
                    "Permit {permit_id}: {n_failing} hazard(s) not under control (overall level {shown_level})",
                    permit_id=permit_id,
                    n_failing=len(failing),
                    shown_level=shown_level,
                ),
                subject=overall,
                evidence=[summary],
            )
            out.recommendation(
                "DO_NOT_RELEASE",
                say("Close the open controls of permit {permit_id} before release", permit_id=permit_id),
            )
        elif out.verdict is Verdict.PASS and not unreadable:
            out.judge(overall, Verdict.PASS)
            out.fact(
                "RISK_CONTROLLED",
                say(
                    "Permit {permit_id}: every registered hazard has its controls in "
                    "place (overall level {shown_level})",
                    permit_id=permit_id,
                    shown_level=shown_level,
                ),
                subject=overall,
                evidence=[summary],
            )
        else:
            out.judge(overall, Verdict.UNKNOWN)
            out.uncertainty(
                "RISK_INCOMPLETE",
                say("Not every hazard of permit {permit_id} could be judged", permit_id=permit_id),
                subject=overall,
                evidence=[summary],
            )
        return out.build({"risk_level": level if level in LEVELS else None, "model_reading": reading})

    return run_guarded(rules)
