"""The contract between specialists and the supervisor's aggregator (PRD §14–16, §37).

Specialists implement this; :mod:`supervisor_svc.aggregation` relies on it and
treats anything that breaks it as a *missing* analysis (fail closed — never
guessed). :func:`check_result` checks a result against it, so a specialist's
tests can use the very same check.

Analyses
--------

Every task of a plan covers one *analysis*, named in the domain definition
(``supervisor_svc/domains/*.yaml``, e.g. ``work-permit``, ``training``,
``risk``, ``compliance`` of the work-permit domain).

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
                  its own analysis.
    ``subjects``  a mapping ``{subject: "PASS" | "FAIL" | "UNKNOWN"}`` — one entry
                  per thing the agent judged. ``verdict`` must agree with it:
                  FAIL if any subject is FAIL; otherwise UNKNOWN if any subject
                  is UNKNOWN or there are none; otherwise PASS.

    A task of a plan may require more fields (its ``result`` in the domain
    definition, a :class:`ResultContract`): e.g. the work-permit task of the
    work-permit domain requires ``permit_found`` (a boolean, ``false`` when the
    permit does not exist *in the caller's tenant*) and ``permit`` (an object,
    required when ``permit_found`` is true: the record the supervisor projects
    for the other agents, without provenance and medical notes). A condition
    of the plan (:class:`Condition`) reads such a field.

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

The agents of a domain agree on them; in the shipped domains:

- training:     ``worker:<worker_id>/<course_code>``   e.g. ``worker:W-1005/NR-35``
- compliance:   the checklist item's ``subject`` when it has one (the same
                ``worker:<id>/<course>`` form), else ``checklist:<checklist_id>/<item_id>``
- risk:         ``permit:<permit_id>/risk`` (overall) or ``hazard:<risk_id>``
- work-permit:  ``permit:<permit_id>/status``, ``permit:<permit_id>/validity``, ...
- employee:     ``worker:<worker_id>/employment``, ``worker:<worker_id>/tenant``, ``permit:<permit_id>/tenant``
- medical:      ``worker:<worker_id>/medical``

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agentmesh.structs import struct_dict
from agentmesh.v1 import common_pb2

__all__ = [
    "Condition",
    "ConflictSide",
    "ContractViolation",
    "DataConflict",
    "ParsedResult",
    "ResultContract",
    "ResultField",
    "Verdict",
    "check_result",
    "context_of",
    "derived_verdict",
    "result_value",
]

_CODE_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


class Verdict(StrEnum):
    """An agent's answer for its analysis, or for one subject."""

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


FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "boolean": (bool,),
    "string": (str,),
    "number": (int, float),
    "object": (dict,),
    "array": (list,),
}
"""The types a :class:`ResultField` may declare, and the Python values of each."""


@dataclass(frozen=True)
class ResultField:
    """A field a task's result must carry beyond ``verdict`` and ``subjects``."""

    name: str
    type: str
    """One of :data:`FIELD_TYPES`."""
    required_when: str | None = None
    """Required only when this boolean field of the same result is true; else always required."""


@dataclass(frozen=True)
class ResultContract:
    """The extra fields one task of a plan must return (from its domain definition)."""

    fields: tuple[ResultField, ...] = ()


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
    values: dict[str, Any] = field(default_factory=dict)
    """The contract's extra fields that are present, by name."""
    data_conflicts: tuple[DataConflict, ...] = ()
    """Records of one source that disagree (``result.data_conflicts``), checked."""


def _result_dict(result: common_pb2.AgentResult) -> dict[str, Any]:
    data: dict[str, Any] = struct_dict(result.result)
    return data


def derived_verdict(subjects: dict[str, Verdict]) -> Verdict:
    """The verdict a set of subject verdicts implies (see the module docstring)."""
    values = set(subjects.values())
    if Verdict.FAIL in values:
        return Verdict.FAIL
    if not values or Verdict.UNKNOWN in values:
        return Verdict.UNKNOWN
    return Verdict.PASS


def _is(value: Any, kind: str) -> bool:
    if kind == "number" and isinstance(value, bool):
        return False
    if kind == "object" and not value:
        return False  # an empty object carries nothing to project
    return isinstance(value, FIELD_TYPES[kind])


def check_result(result: common_pb2.AgentResult, contract: ResultContract | None = None) -> ParsedResult:
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
    values: dict[str, Any] = {}
    for spec in contract.fields if contract else ():
        value = data.get(spec.name)
        needed = spec.required_when is None or data.get(spec.required_when) is True
        if value is None:
            if needed:
                raise ContractViolation(
                    "required" + (f" when {spec.required_when} is true" if spec.required_when else ""),
                    field=f"result.{spec.name}")
            continue
        if not _is(value, spec.type):
            raise ContractViolation(f"must be a non-empty {spec.type}" if spec.type == "object"
                                    else f"must be a {spec.type}", field=f"result.{spec.name}")
        values[spec.name] = value
    return ParsedResult(verdict, subjects, values, conflicts)


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


def result_value(result: common_pb2.AgentResult | None, contract: ResultContract | None, name: str) -> Any:
    """A contract field of a usable result (``None`` when there is none, it is unusable, or it lacks the field)."""
    if result is None or result.status == common_pb2.RESULT_STATUS_FAILED:
        return None
    try:
        return check_result(result, contract).values.get(name)
    except ContractViolation:
        return None


@dataclass(frozen=True)
class Condition:
    """A named test of one task's result, for the conditional edges of a plan (PRD §17).

    True when the field's value is one of ``true_when``, false when it is one of
    ``false_when``, and *undetermined* otherwise — the task failed, its result
    breaks its contract, or the value is neither. An undetermined condition
    holds for neither branch (fail closed): the tasks after it do not run.
    """

    name: str
    task: str
    """The template task whose result it reads."""
    field: str
    true_when: tuple[Any, ...]
    false_when: tuple[Any, ...]
    if_false: str | None = None
    """The outcome (decision mapping key) that answers when it is false and no task takes the false branch."""

    def evaluate(self, result: common_pb2.AgentResult | None, contract: ResultContract | None) -> bool | None:
        """True, False, or None (undetermined)."""
        value = result_value(result, contract, self.field)
        if value is None:
            return None
        if any(value == v and type(value) is type(v) for v in self.true_when):
            return True
        if any(value == v and type(value) is type(v) for v in self.false_when):
            return False
        return None


def context_of(results: Sequence[tuple[common_pb2.AgentResult, ResultContract | None, str]]) -> dict[str, Any]:
    """The context later tasks are projected from: the named context field of each usable result, merged
    in plan order (a later field overrides an earlier one). Empty when none has one."""
    out: dict[str, Any] = {}
    for result, contract, name in results:
        value = result_value(result, contract, name)
        if isinstance(value, Mapping):
            out.update(value)
    return out
