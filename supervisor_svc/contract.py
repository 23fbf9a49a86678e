"""The contract between specialists and the supervisor's aggregator (PRD §14–16, §37).

Specialists implement this; :mod:`supervisor_svc.aggregation` relies on it and
treats anything that breaks it as a *missing* analysis (fail closed — never
guessed). :func:`check_result` checks a result against it, so a specialist's
tests can use the very same check.

Analyses
--------

Every task of an analysis plan covers one *analysis*, named by its domain:
``work-permit``, ``training``, ``risk``, ``compliance`` (:class:`Analysis`).

What every specialist's ``AgentResult`` must contain
----------------------------------------------------

``status``
    ``SUCCESS``   the analysis is complete; ``verdict`` is PASS or FAIL.
    ``PARTIAL`` / ``UNCERTAIN``  something could not be established; a FAIL
                  found anyway still counts, anything else is incomplete.
    ``FAILED``    no usable result; ``error_reason`` says why (e.g.
                  ``"LMS_TIMEOUT: training.getStatus timed out after 3000 ms"``).

``result`` (a Struct) — two required fields:

    ``verdict``   ``"PASS"`` | ``"FAIL"`` | ``"UNKNOWN"`` — the agent's answer for
                  its own domain to "may this permit be released?".
    ``subjects``  a mapping ``{subject: "PASS" | "FAIL" | "UNKNOWN"}`` — one entry
                  per thing the agent judged. ``verdict`` must agree with it:
                  FAIL if any subject is FAIL; otherwise UNKNOWN if any subject
                  is UNKNOWN or there are none; otherwise PASS.

    The work-permit agent adds:

    ``permit_found``  bool, required. ``false`` when the permit does not exist
                      *in the caller's tenant* (then ``verdict`` is UNKNOWN,
                      ``subjects`` is empty, and the plan stops).
    ``permit``        the permit record as ``workPermit.get`` returned it,
                      without ``provenance`` (that goes into ``evidence``) and
                      without ``workers[].medical_notes``; required when found.
                      The supervisor projects it for the other agents.

    Any agent may add:

    ``data_conflicts``  a list ``[{subject, sides: [{record_id, verdict, state, issuer_id,
                      evidence}]}]``: records of one source that disagree about ``subject``
                      (judged UNKNOWN in ``subjects``), one side per record, ``verdict`` PASS or
                      FAIL as that record alone would decide, ``issuer_id`` who issued it (or
                      null), ``evidence`` indexes into ``evidence``. At least one PASS and one
                      FAIL side. The aggregator resolves it by the issuers' configured authority,
                      or sends it to a human — a data conflict is never a missing analysis.

``statements`` — typed (§16); ``code`` UPPER_SNAKE, ``subject`` as in ``subjects``:

    Every subject judged PASS or FAIL needs at least one **FACT** statement with
    that ``subject`` whose ``evidence_indexes`` point into ``evidence``.
    A PASS or FAIL without such a fact is treated as UNKNOWN (unsupported).
    **UNCERTAINTY** statements say what could not be established (e.g. code
    ``LMS_TIMEOUT``, subject ``worker:W-1006/NR-10``); they make the analysis
    incomplete unless it FAILs on a fact anyway. INFERENCE and RECOMMENDATION
    statements are reported to the user but never decide anything.

``evidence`` — ``EvidenceReference``s with ``source``, ``reference`` and
    ``authority`` taken from the capability output's ``provenance`` (never
    raised by the agent), and ``capability`` = ``"id@version"``.

Subject conventions (conflicts are found by equal subjects across agents)
------------------------------------------------------------------------

- training:     ``worker:<worker_id>/<course_code>``   e.g. ``worker:W-1005/NR-35``
- compliance:   the checklist item's ``subject`` when it has one (the same
                ``worker:<id>/<course>`` form), else ``checklist:<checklist_id>/<item_id>``
- risk:         ``permit:<permit_id>/risk`` (overall) or ``hazard:<risk_id>``
- work-permit:  ``permit:<permit_id>/status``, ``permit:<permit_id>/validity``, ...

Example (training agent, one expired certificate)::

    status: SUCCESS
    result: {verdict: FAIL, subjects: {"worker:W-1002/NR-10": FAIL, "worker:W-1002/NR-35": PASS}}
    evidence: [{source: lms, reference: TR-7, authority: VERIFIED_INTEGRATION, capability: training.getStatus@2.1.0},
               {source: lms, reference: TR-8, authority: VERIFIED_INTEGRATION, capability: training.getStatus@2.1.0}]
    statements:
      - {kind: FACT, code: TRAINING_EXPIRED, subject: "worker:W-1002/NR-10", evidence_indexes: [0],
         text: "NR-10 of W-1002 expired on 2026-08-15"}
      - {kind: FACT, code: TRAINING_VALID, subject: "worker:W-1002/NR-35", evidence_indexes: [1], text: ...}
      - {kind: INFERENCE, code: REQUIREMENT_NOT_MET, subject: "worker:W-1002/NR-10", text: ...}
      - {kind: RECOMMENDATION, code: DO_NOT_RELEASE, text: ...}
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from google.protobuf import json_format

from agentmesh.v1 import common_pb2

__all__ = [
    "CONDITION_PERMIT_FOUND",
    "Analysis",
    "ConflictSide",
    "ContractViolation",
    "DataConflict",
    "ParsedResult",
    "Verdict",
    "check_result",
    "condition_holds",
    "permit_context",
]

CONDITION_PERMIT_FOUND = "permit_found"
"""Edge condition: the work-permit task completed and found the permit in the caller's tenant."""

_CODE_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


class Analysis(StrEnum):
    """The analyses of a permit-release plan, named by domain."""

    WORK_PERMIT = "work-permit"
    TRAINING = "training"
    RISK = "risk"
    COMPLIANCE = "compliance"


class Verdict(StrEnum):
    """An agent's answer for its domain, or for one subject."""

    PASS = "PASS"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"


class ContractViolation(ValueError):
    """A result breaks the contract; ``reason`` is ``RESULT_CONTRACT_VIOLATION``, ``field`` the path."""

    reason = "RESULT_CONTRACT_VIOLATION"

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(f"{field}: {message}")
        self.message = message
        self.field = field


@dataclass(frozen=True)
class ConflictSide:
    """One record of a data conflict."""

    record_id: str
    verdict: Verdict
    """PASS or FAIL: what the record alone would decide."""
    issuer_id: str | None
    evidence: tuple[int, ...]
    """Indexes into the result's ``evidence``."""


@dataclass(frozen=True)
class DataConflict:
    """Records of one source that disagree about a subject (``result.data_conflicts``)."""

    subject: str
    sides: tuple[ConflictSide, ...]


@dataclass(frozen=True)
class ParsedResult:
    """The contract fields of a result, checked."""

    verdict: Verdict
    subjects: dict[str, Verdict]
    permit_found: bool | None
    """Only for the work-permit analysis; None elsewhere."""
    permit: dict[str, Any] | None
    data_conflicts: tuple[DataConflict, ...] = ()


def _result_dict(result: common_pb2.AgentResult) -> dict[str, Any]:
    data: dict[str, Any] = json_format.MessageToDict(result.result)
    return data


def derived_verdict(subjects: dict[str, Verdict]) -> Verdict:
    """The verdict a set of subject verdicts implies (see the module docstring)."""
    values = set(subjects.values())
    if Verdict.FAIL in values:
        return Verdict.FAIL
    if not values or Verdict.UNKNOWN in values:
        return Verdict.UNKNOWN
    return Verdict.PASS


def check_result(result: common_pb2.AgentResult, analysis: Analysis | str) -> ParsedResult:
    """Check a result against the contract and return its contract fields.

    Evidence backing is not checked here (a PASS/FAIL without a FACT is
    downgraded to UNKNOWN by the aggregator, not rejected); only the structure is.

    Raises:
        ContractViolation: naming the offending field.
    """
    data = _result_dict(result)
    raw_verdict = data.get("verdict")
    try:
        verdict = Verdict(str(raw_verdict))
    except ValueError:
        raise ContractViolation(f"must be PASS, FAIL or UNKNOWN, got {raw_verdict!r}", field="result.verdict") from None
    raw_subjects = data.get("subjects")
    if not isinstance(raw_subjects, dict):
        raise ContractViolation("must be a mapping of subject to verdict", field="result.subjects")
    subjects: dict[str, Verdict] = {}
    for subject, value in raw_subjects.items():
        try:
            subjects[subject] = Verdict(value)
        except ValueError:
            raise ContractViolation(
                f"must be PASS, FAIL or UNKNOWN, got {value!r}", field=f"result.subjects[{subject!r}]"
            ) from None
    if derived_verdict(subjects) is not verdict:
        raise ContractViolation(
            f"{verdict.value} disagrees with the subjects, which imply {derived_verdict(subjects).value}",
            field="result.verdict",
        )
    for i, statement in enumerate(result.statements):
        if statement.kind == common_pb2.STATEMENT_KIND_UNSPECIFIED:
            raise ContractViolation("kind is UNSPECIFIED", field=f"statements[{i}].kind")
        if not _CODE_RE.match(statement.code):
            raise ContractViolation("code must be UPPER_SNAKE", field=f"statements[{i}].code")
        for j, index in enumerate(statement.evidence_indexes):
            if not 0 <= index < len(result.evidence):
                raise ContractViolation(
                    f"evidence index {index} is out of range (there are {len(result.evidence)})",
                    field=f"statements[{i}].evidence_indexes[{j}]",
                )
    conflicts = _data_conflicts(data, subjects, len(result.evidence))
    permit_found: bool | None = None
    permit: dict[str, Any] | None = None
    if analysis == Analysis.WORK_PERMIT:
        found = data.get("permit_found")
        if not isinstance(found, bool):
            raise ContractViolation("must be a bool", field="result.permit_found")
        permit_found = found
        raw_permit = data.get("permit")
        if found:
            if not isinstance(raw_permit, dict) or not raw_permit:
                raise ContractViolation("required when the permit was found", field="result.permit")
            permit = raw_permit
        elif verdict is not Verdict.UNKNOWN or subjects:
            raise ContractViolation("a permit that was not found has no verdict", field="result.verdict")
    return ParsedResult(verdict, subjects, permit_found, permit, conflicts)


def _data_conflicts(data: dict[str, Any], subjects: dict[str, Verdict], evidence_count: int
                    ) -> tuple[DataConflict, ...]:
    raw = data.get("data_conflicts")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ContractViolation("must be a list", field="result.data_conflicts")
    out: list[DataConflict] = []
    for i, item in enumerate(raw):
        where = f"result.data_conflicts[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("subject"), str):
            raise ContractViolation("needs a subject", field=f"{where}.subject")
        subject = item["subject"]
        if subjects.get(subject) is not Verdict.UNKNOWN:
            raise ContractViolation("a disputed subject is judged UNKNOWN in subjects", field=f"{where}.subject")
        if any(c.subject == subject for c in out):
            raise ContractViolation("the subject is listed twice", field=f"{where}.subject")
        raw_sides = item.get("sides")
        if not isinstance(raw_sides, list):
            raise ContractViolation("must be a list", field=f"{where}.sides")
        sides: list[ConflictSide] = []
        for j, side in enumerate(raw_sides):
            at = f"{where}.sides[{j}]"
            if not isinstance(side, dict):
                raise ContractViolation("must be a mapping", field=at)
            verdict = side.get("verdict")
            if verdict not in (Verdict.PASS.value, Verdict.FAIL.value):
                raise ContractViolation("must be PASS or FAIL", field=f"{at}.verdict")
            issuer = side.get("issuer_id")
            if issuer is not None and not isinstance(issuer, str):
                raise ContractViolation("must be a string or null", field=f"{at}.issuer_id")
            indexes = side.get("evidence")
            if not isinstance(indexes, list) or not indexes or not all(
                    isinstance(k, int | float) and float(k).is_integer() and 0 <= k < evidence_count for k in indexes):
                raise ContractViolation("must list evidence indexes in range", field=f"{at}.evidence")
            sides.append(ConflictSide(str(side.get("record_id") or ""), Verdict(verdict), issuer,
                                      tuple(int(k) for k in indexes)))
        if {s.verdict for s in sides} != {Verdict.PASS, Verdict.FAIL}:
            raise ContractViolation("a data conflict needs a PASS side and a FAIL side", field=f"{where}.sides")
        out.append(DataConflict(subject, tuple(sides)))
    return tuple(out)


def condition_holds(condition: str, analysis: Analysis | str, result: common_pb2.AgentResult | None) -> bool:
    """Whether an edge condition holds for the source task's result.

    Unknown conditions and unusable results never hold (fail closed).
    """
    if condition == "":
        return result is not None and result.status != common_pb2.RESULT_STATUS_FAILED
    if condition != CONDITION_PERMIT_FOUND or result is None or analysis != Analysis.WORK_PERMIT:
        return False
    if result.status == common_pb2.RESULT_STATUS_FAILED:
        return False
    try:
        return check_result(result, analysis).permit_found is True
    except ContractViolation:
        return False


def permit_context(result: common_pb2.AgentResult) -> dict[str, Any] | None:
    """The full context for projection: the permit record of a work-permit result, or None."""
    try:
        return check_result(result, Analysis.WORK_PERMIT).permit
    except ContractViolation:
        return None
