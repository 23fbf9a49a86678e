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
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentmesh.v1 import common_pb2
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
)
from supervisor_svc.contract import Verdict

__all__ = ["AGENT_ID", "CAPABILITIES", "item_subject", "run"]

AGENT_ID = "compliance-agent"
CAPABILITY = "compliance.getChecklist"
CAPABILITIES = (CAPABILITY,)
"""Capabilities these rules call (each must be among the agent's registered ones)."""

_SUBJECT_RE = re.compile(r"^(worker|permit|hazard|checklist):[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
                         r"(/[A-Za-z0-9][A-Za-z0-9._-]{0,63})?$")


def item_subject(checklist_id: str, item: Mapping[str, Any]) -> str:
    """The subject of one checklist item (see the module docstring)."""
    subject = item.get("subject")
    if isinstance(subject, str) and _SUBJECT_RE.match(subject):
        return subject
    return f"checklist:{checklist_id}/{item.get('item_id')}"


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
                    out.inference(
                        "REQUIREMENT_NOT_MET", say("{name}'s requirement is not met", name=name), subject=subject
                    )
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
