"""Medical agent: is the worker medically fit for the permit's work type? (PRD §23)

The least context of the whole mesh. Input (projection ``assignment.medical``):
``worker_id`` and ``permit_id`` only; one ``medical.getEligibility`` call, whose
answer is the eligibility status (and the work type and exam validity it is
for) — the occupational-health record's diagnosis and clinical notes never
leave the capability runtime, so they never reach this agent. One subject,
``worker:<id>/medical``:

=====================  =======  ================================================================
status                 verdict  statements
=====================  =======  ================================================================
``FIT``                PASS     FACT ``MEDICALLY_FIT`` (the work type, the exam's validity)
``UNFIT``              FAIL     FACT ``MEDICALLY_UNFIT``, RECOMMENDATION ``DO_NOT_ASSIGN``
``EXAM_EXPIRED``       FAIL     FACT ``MEDICAL_EXAM_EXPIRED`` (valid until before the permit ends)
``NOT_EVALUATED``      FAIL     FACT ``MEDICAL_EXAM_MISSING``: no exam covers the work type; nobody
                                works without one
worker or permit       UNKNOWN  UNCERTAINTY ``MEDICAL_RECORD_NOT_FOUND``
not found
no answer              UNKNOWN  UNCERTAINTY ``OCCUPATIONAL_HEALTH_TIMEOUT`` / ``_UNAVAILABLE`` / ...
=====================  =======  ================================================================

No statement repeats anything but the status, the work type and dates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentmesh.result_contract import Verdict
from agentmesh.v1 import common_pb2
from specialist_svc.phrases import say
from specialist_svc.rules import (
    CallFailure,
    CapabilityClient,
    ResultBuilder,
    call_or_failure,
    iso_date,
    require_id,
    run_guarded,
    token,
)

__all__ = ["AGENT_ID", "CAPABILITIES", "run"]

AGENT_ID = "medical-agent"
CAPABILITY = "medical.getEligibility"
CAPABILITIES = (CAPABILITY,)
"""Capabilities these rules call (each must be among the agent's registered ones)."""

_FAILING = {"UNFIT": "MEDICALLY_UNFIT", "EXAM_EXPIRED": "MEDICAL_EXAM_EXPIRED", "NOT_EVALUATED": "MEDICAL_EXAM_MISSING"}
"""Status -> the FACT code of a FAIL."""


def _why(status: str, worker_id: str, work_type: str, valid_until: str, permit_id: str) -> str:
    if status == "UNFIT":
        return say("Worker {worker_id} is medically unfit for {work_type} work", worker_id=worker_id,
                   work_type=work_type)
    if status == "EXAM_EXPIRED":
        return say("The occupational exam of worker {worker_id} for {work_type} work is valid until {valid_until}, "
                   "before permit {permit_id} ends", worker_id=worker_id, work_type=work_type,
                   valid_until=valid_until, permit_id=permit_id)
    return say("No occupational exam covers {work_type} work for worker {worker_id}", worker_id=worker_id,
               work_type=work_type)



def run(data: Mapping[str, Any], client: CapabilityClient) -> common_pb2.AgentResult:
    """The worker's fitness for the permit's work type (see the module docstring).

    Raises:
        TaskInputInvalid: ``worker_id`` or ``permit_id`` missing or not an id.
    """
    worker_id, permit_id = require_id(data, "worker_id"), require_id(data, "permit_id")

    def rules() -> common_pb2.AgentResult:
        subject = f"worker:{worker_id}/medical"
        out = ResultBuilder()
        answer = call_or_failure(client, CAPABILITY, {"worker_id": worker_id, "permit_id": permit_id})
        if isinstance(answer, CallFailure):
            if answer.kind == "not_found":
                out.judge(subject, Verdict.UNKNOWN)
                out.uncertainty("MEDICAL_RECORD_NOT_FOUND", say("No eligibility could be read for worker {worker_id} "
                                                                "on permit {permit_id}", worker_id=worker_id,
                                                                permit_id=permit_id), subject=subject)
            else:
                out.unanswered(answer, [subject], say("The medical eligibility of worker {worker_id}",
                                                      worker_id=worker_id))
            return out.build()
        output, refs = answer
        status, work_type = output.get("status"), token(output.get("work_type"), say("unrecognised"))
        valid_until = iso_date(output.get("valid_until"))
        if not refs or output.get("worker_id") != worker_id or output.get("permit_id") != permit_id or \
                status not in ("FIT", *_FAILING):
            code = "EVIDENCE_MISSING" if not refs else "OCCUPATIONAL_HEALTH_MALFORMED"
            out.unanswered(CallFailure("uncertain", code, f"{CAPABILITY}: unusable answer"), [subject],
                           say("The medical eligibility of worker {worker_id}", worker_id=worker_id))
            return out.build()
        # The evidence carries the status only, as the capability answered it.
        ev = out.evidence(refs[0], data={"worker_id": worker_id, "permit_id": permit_id, "work_type": work_type,
                                         "status": status, "valid_until": str(valid_until) if valid_until else None})
        if status == "FIT":
            out.judge(subject, Verdict.PASS)
            if valid_until:
                text = say("Worker {worker_id} is medically fit for {work_type} work (exam valid until "
                           "{valid_until})", worker_id=worker_id, work_type=work_type, valid_until=str(valid_until))
            else:
                text = say("Worker {worker_id} is medically fit for {work_type} work", worker_id=worker_id,
                           work_type=work_type)
            out.fact("MEDICALLY_FIT", text, subject=subject, evidence=[ev])
        else:
            out.judge(subject, Verdict.FAIL)
            out.fact(_FAILING[str(status)], _why(str(status), worker_id, work_type,
                                                 str(valid_until) if valid_until else "?", permit_id),
                     subject=subject, evidence=[ev])
            out.recommendation("DO_NOT_ASSIGN", say("Worker {worker_id} should not work on permit {permit_id} until "
                                                    "the occupational physician clears them", worker_id=worker_id,
                                                    permit_id=permit_id))
        return out.build()

    return run_guarded(rules)
