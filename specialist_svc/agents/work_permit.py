"""Work-permit agent: does the permit exist in the caller's tenant, and does its own state allow a release?

Input (projection ``permit.assess`` / ``permit.status``): ``permit_id``. One
``workPermit.get`` call. The result carries ``permit_found`` and, when found,
``permit`` — the record as the capability returned it without ``provenance``
and without ``workers[].medical_notes`` — which the supervisor projects for
the other agents.

=============================  =======  ==================================================
subject                        verdict  rule
=============================  =======  ==================================================
``permit:<id>/status``         PASS     status ``PENDING_RELEASE`` (FACT ``PERMIT_PENDING_RELEASE``)
                               FAIL     ``RELEASED`` (``PERMIT_ALREADY_RELEASED``), anything else
                                        (``PERMIT_NOT_RELEASABLE``)
``permit:<id>/validity``       PASS     ``valid_from`` ≤ ``valid_until`` (``PERMIT_WINDOW_VALID``)
                               FAIL     otherwise (``PERMIT_WINDOW_INVALID``)
``permit:<id>/workers``        PASS     at least one worker assigned (``PERMIT_WORKERS_ASSIGNED``)
                               FAIL     none (``PERMIT_HAS_NO_WORKERS``)
=============================  =======  ==================================================

Not found (NOT_FOUND — also what a permit of another tenant looks like) →
``permit_found: false``, verdict UNKNOWN, no subjects, and nothing else: the
answer is the same whether the permit exists nowhere or in another tenant.
A permit that could not be read (timeout, registry unavailable, bad answer) →
a FAILED result whose ``error_reason`` names why (e.g. ``PERMIT_REGISTRY_TIMEOUT:
...``) with an UNCERTAINTY statement: not even its existence is established.
No clock is read: whether the window has passed is enforced by the permit
registry at release time, so the same record always gives the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentmesh.v1 import common_pb2
from specialist_svc.rules import (
    AgentFailed,
    CallFailure,
    CapabilityClient,
    ResultBuilder,
    TaskInputInvalid,
    call_or_failure,
    is_id,
    iso_date,
    require_str,
    run_guarded,
    token,
)
from supervisor_svc.contract import Verdict

__all__ = ["AGENT_ID", "CAPABILITIES", "permit_record", "run"]

AGENT_ID = "work-permit-agent"
CAPABILITY = "workPermit.get"
CAPABILITIES = (CAPABILITY,)
"""Capabilities these rules call (each must be among the agent's registered ones)."""

RELEASABLE = "PENDING_RELEASE"
_SENSITIVE_WORKER_FIELDS = ("medical_notes",)


def permit_record(output: Mapping[str, Any]) -> dict[str, Any]:
    """The permit as ``workPermit.get`` returned it, minus ``provenance`` and workers' medical notes."""
    record = {k: v for k, v in output.items() if k != "provenance"}
    workers = record.get("workers")
    if isinstance(workers, list):
        record["workers"] = [
            {k: v for k, v in w.items() if k not in _SENSITIVE_WORKER_FIELDS} if isinstance(w, Mapping) else w
            for w in workers
        ]
    return record


def _not_found(permit_id: str) -> common_pb2.AgentResult:
    out = ResultBuilder()
    out.fact("PERMIT_NOT_FOUND", f"Permit {token(permit_id)} was not found")
    result = out.build({"permit_found": False})
    # Complete as an answer: "not found" is the analysis' result, not a gap in it.
    result.status = common_pb2.RESULT_STATUS_SUCCESS
    result.confidence = 1.0
    return result


def run(data: Mapping[str, Any], client: CapabilityClient) -> common_pb2.AgentResult:
    """The work-permit analysis (see the module docstring).

    Raises:
        TaskInputInvalid: ``permit_id`` is missing or not a permit id.
    """
    permit_id = require_str(data, "permit_id")
    if not is_id(permit_id):
        raise TaskInputInvalid("not a permit id", field="permit_id")

    def rules() -> common_pb2.AgentResult:
        answer = call_or_failure(client, CAPABILITY, {"permit_id": permit_id})
        prefix = f"permit:{permit_id}"
        subjects = [f"{prefix}/status", f"{prefix}/validity", f"{prefix}/workers"]
        if isinstance(answer, CallFailure):
            if answer.kind == "not_found":
                return _not_found(permit_id)
            # Not even the permit's existence is established, so there is no
            # usable analysis (and no honest permit_found): FAILED, naming why.
            raise answer.failed()
        output, refs = answer
        if not refs:
            raise AgentFailed("EVIDENCE_MISSING", f"{CAPABILITY}: the answer carries no provenance")
        if output.get("permit_id") != permit_id:
            raise AgentFailed("PERMIT_REGISTRY_MALFORMED", f"{CAPABILITY}: the answer is for another permit")
        out = ResultBuilder()
        record = permit_record(output)
        ref = refs[0]
        status = output.get("status")
        workers = output.get("workers")
        ids = [w.get("worker_id") for w in workers if isinstance(w, Mapping)] if isinstance(workers, list) else []
        # One reference to the permit record, with the fields the rules read.
        ev = out.evidence(ref, data={
            "permit_id": permit_id, "status": status, "valid_from": output.get("valid_from"),
            "valid_until": output.get("valid_until"), "worker_ids": [str(i) for i in ids]})
        shown = token(status, "unrecognised")
        if status == RELEASABLE:
            out.judge(subjects[0], Verdict.PASS)
            out.fact("PERMIT_PENDING_RELEASE", f"Permit {permit_id} is {RELEASABLE}", subject=subjects[0],
                     evidence=[ev])
        elif status == "RELEASED":
            out.judge(subjects[0], Verdict.FAIL)
            out.fact("PERMIT_ALREADY_RELEASED", f"Permit {permit_id} is already RELEASED", subject=subjects[0],
                     evidence=[ev])
        else:
            out.judge(subjects[0], Verdict.FAIL)
            out.fact("PERMIT_NOT_RELEASABLE", f"Permit {permit_id} is {shown}; only {RELEASABLE} can be released",
                     subject=subjects[0], evidence=[ev])

        start, end = iso_date(output.get("valid_from")), iso_date(output.get("valid_until"))
        if start is None or end is None:
            out.judge(subjects[1], Verdict.UNKNOWN)
            out.uncertainty("PERMIT_WINDOW_UNREADABLE", f"The validity window of permit {permit_id} is not readable",
                            subject=subjects[1], evidence=[ev])
        elif start <= end:
            out.judge(subjects[1], Verdict.PASS)
            out.fact("PERMIT_WINDOW_VALID", f"Permit {permit_id} is valid from {start} until {end}",
                     subject=subjects[1], evidence=[ev])
        else:
            out.judge(subjects[1], Verdict.FAIL)
            out.fact("PERMIT_WINDOW_INVALID", f"Permit {permit_id} ends ({end}) before it starts ({start})",
                     subject=subjects[1], evidence=[ev])

        if ids:
            out.judge(subjects[2], Verdict.PASS)
            out.fact("PERMIT_WORKERS_ASSIGNED", f"Permit {permit_id} has {len(ids)} assigned worker(s)",
                     subject=subjects[2], evidence=[ev])
        else:
            out.judge(subjects[2], Verdict.FAIL)
            out.fact("PERMIT_HAS_NO_WORKERS", f"Permit {permit_id} has no assigned worker", subject=subjects[2],
                     evidence=[ev])

        if out.verdict is Verdict.FAIL:
            out.recommendation("DO_NOT_RELEASE", f"Permit {permit_id} cannot be released in its current state")
        return out.build({"permit_found": True, "permit": record})

    return run_guarded(rules)
