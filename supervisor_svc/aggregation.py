"""Evidence-first aggregation, conflict resolution and the decision (PRD §36–40, §46).

Input: one :class:`TaskOutcome` per planned analysis (what happened to the
task, and its ``AgentResult`` if it produced one), the analyses the answer
needs, and from the domain definition (:mod:`supervisor_svc.definitions`) the
evidence policy, the plan's conditions and the decision mapping. Output: an
:class:`Assessment` — decision, execution status, what is missing,
conflicts, and a plain summary. Nothing here knows a domain.

What a specialist's result must contain is defined in
:mod:`agentmesh.result_contract` (``result.verdict`` PASS/FAIL/UNKNOWN,
``result.subjects`` {subject: verdict}, FACT statements with evidence for every
PASS/FAIL subject, UNCERTAINTY statements for what could not be established;
plus the fields its task's contract requires). A result that breaks it is
treated as a missing analysis — never repaired, never guessed.

How the decision is made, in order (the outcome names are the keys of the
domain's decision mapping, which says the decision and the headline of each):

1. A condition of the plan with an ``if_false`` outcome is false (e.g. the
   work-permit domain's ``permit_found``: the permit does not exist in the
   caller's tenant → ``PERMIT_NOT_FOUND``; the worker-assignment domain's
   ``worker_assignable`` → ``WORKER_NOT_ASSIGNABLE``): that outcome answers,
   SUCCEEDED, nothing missing; the tasks after it were skipped, off the path.
   Its headline is followed by the reasons (the FACT codes on the failing
   subjects of the task the condition read), unless ``details: false``.
2. ``DEFINITIVE_FAIL``: a FAIL that no unresolved conflict disputes.
   Definitive = a FAIL subject backed by a FACT whose best evidence is at least
   the analysis' ``decisive_authority`` (e.g. an expired training read from the
   LMS), or a FAIL that a conflict rule upheld.
3. ``UNRESOLVED_CONFLICT`` → review, with both sides' evidence and the
   applicable rules (a review item for the Decision Center).
4. ``MISSING_ANALYSIS``: anything missing (a failed / timed-out / cancelled /
   skipped task, an unusable result, an UNKNOWN subject, an UNCERTAINTY such as
   an LMS timeout), execution PARTIAL naming exactly what is missing.
5. ``NON_DECISIVE_FAIL``: a FAIL on weak evidence only.
6. ``ALL_ANALYSES_PASS``: every expected analysis passed on evidence.
   (``NO_ANALYSIS_COMPLETED`` when nothing completed at all.)

Data conflicts: records of one source that disagree about a subject (two LMS
records of one certificate, one COMPLETED, one REVOKED), which the agent reports
in ``result.data_conflicts`` (see agentmesh.result_contract). Each side's authority
is its issuer's, as configured for the analysis's domain (``issuer_authority``);
the same conflict rules decide it. Decided, the winning side's verdict and
evidence count as a finding; undecided (an issuer without configured authority,
or no rule that decides), it is an unresolved conflict for a human with both
sides' evidence — REQUIRES_REVIEW, never a missing analysis.

Conflicts (§36–38): two agents judge the *same subject* (e.g.
``worker:W-1005/NR-35``) one PASS, the other FAIL, each on FACT evidence. A
configured rule resolves it only when it decides by the evidence-authority
hierarchy of its domain (one side's best evidence at least
``prevails_at_least``, the other's at most ``yields_at_most``). Otherwise it
stays unresolved: never picked arbitrarily, never a vote. Results about
different subjects are never weighed against each other (§38).

Execution status: SUCCEEDED when nothing is missing, PARTIAL when something
is, FAILED when no analysis completed. The caller may show AWAITING_REVIEW
once it has persisted a review item for ``review_required``.

A plan that reports instead of deciding (a status question) is answered by
:func:`report`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, cast

import pydantic

from agentmesh.result_contract import (
    Condition,
    ConflictSide,
    ContractViolation,
    DataConflict,
    ResultContract,
    Verdict,
    check_result,
)
from agentmesh.v1 import common_pb2, supervisor_service_pb2
from supervisor_svc._datafile import Document, format_path, load_document, validation_error
from supervisor_svc.errors import ConfigError

__all__ = [
    "AUTHORITIES",
    "AnalysisReport",
    "Assessment",
    "ConflictRule",
    "Decision",
    "EvidencePolicy",
    "Missing",
    "OutcomeStatus",
    "TaskOutcome",
    "TaskState",
    "Headline",
    "aggregate",
    "missing_item",
    "report",
]

AUTHORITIES = ("GOVERNMENT_SOURCE", "OFFICIAL_RECORD", "VERIFIED_INTEGRATION", "UNVERIFIED_DOCUMENT",
               "MODEL_INFERENCE")
"""Authority levels of ``common.proto`` without their prefix, highest first."""


class Decision(StrEnum):
    """The recommendation of an analysis (``AnalysisDecision`` without prefix)."""

    UNSPECIFIED = "UNSPECIFIED"
    """Not an analysis (e.g. a status question)."""
    RECOMMENDED_FOR_RELEASE = "RECOMMENDED_FOR_RELEASE"
    NOT_RECOMMENDED = "NOT_RECOMMENDED"
    REQUIRES_REVIEW = "REQUIRES_REVIEW"
    INSUFFICIENT_EVIDENCE = "INSUFFICIENT_EVIDENCE"

    def to_proto(self) -> common_pb2.AnalysisDecision:
        """The ``common_pb2.AnalysisDecision`` value."""
        value: common_pb2.AnalysisDecision = getattr(common_pb2, f"ANALYSIS_DECISION_{self.value}")
        return value


class OutcomeStatus(StrEnum):
    """Completeness of an execution (a subset of ``ExecutionStatus``)."""

    SUCCEEDED = "SUCCEEDED"
    PARTIAL = "PARTIAL"
    FAILED = "FAILED"

    def to_proto(self) -> supervisor_service_pb2.ExecutionStatus:
        """The ``supervisor_service_pb2.ExecutionStatus`` value."""
        value: supervisor_service_pb2.ExecutionStatus = getattr(supervisor_service_pb2,
                                                               f"EXECUTION_STATUS_{self.value}")
        return value


class TaskState(StrEnum):
    """What happened to a task, as the executor saw it."""

    COMPLETED = "COMPLETED"
    """The agent returned a result (which may still be FAILED / UNCERTAIN inside)."""
    FAILED = "FAILED"
    """The call failed (agent unreachable, crashed, refused)."""
    TIMED_OUT = "TIMED_OUT"
    """The task's deadline passed without a result."""
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"
    """An incoming edge's condition did not hold."""
    NOT_RUN = "NOT_RUN"
    """Never started (no agent available, a limit stopped the execution, ...)."""


@dataclass(frozen=True)
class TaskOutcome:
    """One planned analysis's task and what came of it. Pass only the plan's own tasks, not handoffs."""

    analysis: str
    state: TaskState
    task_id: str = ""
    agent_id: str = ""
    result: common_pb2.AgentResult | None = None
    error_reason: str = ""
    """Why it failed, timed out, was skipped or not run (e.g. ``"DEADLINE_EXCEEDED after 3000 ms"``)."""
    contract: ResultContract | None = None
    """The extra result fields its task must return (from the domain definition)."""
    template_task: str = ""
    """The id of its task in the plan template (what the plan's conditions name)."""
    off_path: bool = False
    """SKIPPED because a condition chose the other branch: not part of this answer, not missing."""


@dataclass(frozen=True)
class Missing:
    """One thing the answer lacks; ``str()`` is the line for ``Execution.missing``."""

    analysis: str
    agent_id: str
    code: str
    """``TASK_FAILED``, ``TASK_TIMED_OUT``, ``TASK_CANCELLED``, ``TASK_SKIPPED``, ``TASK_NOT_RUN``,
    ``RESULT_FAILED``, ``RESULT_CONTRACT_VIOLATION``, ``RESULT_AMBIGUOUS`` or ``ANALYSIS_INCOMPLETE``."""
    detail: str

    def __str__(self) -> str:
        who = f" ({self.agent_id})" if self.agent_id else ""
        return f"{self.analysis} analysis{who}: {self.code} — {self.detail}"

    def to_proto(self) -> supervisor_service_pb2.MissingItem:
        """The ``Execution.missing`` entry: its kind is the code (``MISSING_KIND_<code>``)."""
        kind = supervisor_service_pb2.MissingKind.Value(f"MISSING_KIND_{self.code}")
        return missing_item(cast("supervisor_service_pb2.MissingKind", kind), self.agent_id, self.detail, str(self),
                            analysis=self.analysis)


def missing_item(kind: supervisor_service_pb2.MissingKind, agent_id: str, detail: str, text: str, *,
                 analysis: str = "") -> supervisor_service_pb2.MissingItem:
    """One entry of ``Execution.missing``: what kind of gap, about what, why, and the line for a reader."""
    return supervisor_service_pb2.MissingItem(kind=kind, analysis=analysis, agent_id=agent_id, detail=detail,
                                              text=text)


# --- evidence policy ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ConflictRule:
    """A deterministic rule that may decide a PASS-vs-FAIL conflict on a subject."""

    rule_id: str
    description: str
    subjects: tuple[str, ...]
    """fnmatch patterns of the subjects it covers, e.g. ``worker:*``."""
    hierarchy: str
    """Name of the authority hierarchy it ranks evidence by."""
    prevails_at_least: str
    yields_at_most: str


@dataclass(frozen=True)
class EvidencePolicy:
    """Evidence-authority hierarchies per domain, decisive thresholds and conflict rules (PRD §37)."""

    hierarchies: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: {"default": AUTHORITIES})
    """Domain (or rule hierarchy name) → authority levels, highest first; ``default`` for any other."""
    decisive_authority: Mapping[str, str] = field(default_factory=lambda: {"default": "VERIFIED_INTEGRATION"})
    """Domain → the least authority that makes a FACT-backed FAIL decisive; ``default`` for any other."""
    rules: tuple[ConflictRule, ...] = ()
    issuers: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Domain → issuer id → the authority of the records it issues, for data conflicts (PRD §37)."""

    def issuer_authority(self, domain: str, issuer_id: str | None) -> str | None:
        """The configured authority of an issuer's records in a domain; None when it has none."""
        if not issuer_id:
            return None
        return (self.issuers.get(domain) or {}).get(issuer_id)

    def hierarchy(self, name: str) -> tuple[str, ...]:
        """The hierarchy of a domain, or the default one."""
        return tuple(self.hierarchies.get(name) or self.hierarchies.get("default") or AUTHORITIES)

    def rank(self, name: str, authority: str) -> int:
        """Position of an authority in a hierarchy (0 = highest); unlisted or unknown ranks last."""
        order = self.hierarchy(name)
        return order.index(authority) if authority in order else len(order)

    def is_decisive(self, domain: str, authority: str) -> bool:
        """Whether evidence of this authority makes a FAIL in this domain decisive on its own."""
        threshold = self.decisive_authority.get(domain) or self.decisive_authority.get("default")
        if threshold is None or authority not in self.hierarchy(domain):
            return False
        return self.rank(domain, authority) <= self.rank(domain, threshold)

    @classmethod
    def load(cls, path: Path) -> EvidencePolicy:
        """Read and validate an evidence policy file (the format of a domain definition's ``evidence``).

        Raises:
            ConfigError: naming the file, the field and the line.
        """
        doc = load_document(path)
        return cls.from_document(doc, str(path))

    @classmethod
    def from_document(cls, doc: Document, file: str, prefix: tuple[str | int, ...] = ()) -> EvidencePolicy:
        """Validate the evidence policy found at ``prefix`` of a parsed document (e.g. ``("evidence",)``).

        Raises:
            ConfigError: naming the file, the field (its full path in the document) and the line.
        """
        data: Any = doc.data
        for key in prefix:
            data = data[key]
        try:
            model = _PolicyModel.model_validate(data)
        except pydantic.ValidationError as exc:
            raise validation_error(exc, doc, file, prefix=prefix) from None

        def fail(message: str, *loc: str | int) -> ConfigError:
            return ConfigError(message, file=file, field=format_path((*prefix, *loc)),
                               line=doc.line_of((*prefix, *loc)))

        if "default" not in model.hierarchies:
            raise fail("a 'default' hierarchy is required", "hierarchies")
        if "default" not in model.decisive_authority:
            raise fail("a 'default' threshold is required", "decisive_authority")
        for name, levels in model.hierarchies.items():
            if len(set(levels)) != len(levels):
                raise fail("an authority is listed twice", "hierarchies", name)
        for name, level in model.decisive_authority.items():
            if level not in (model.hierarchies.get(name) or model.hierarchies["default"]):
                raise fail(f"{level} is not in the {name!r} hierarchy", "decisive_authority", name)
        rules: list[ConflictRule] = []
        seen: set[str] = set()
        for i, r in enumerate(model.conflict_rules):
            if r.id in seen:
                raise fail(f"rule id {r.id!r} is used twice", "conflict_rules", i, "id")
            seen.add(r.id)
            if r.hierarchy not in model.hierarchies:
                raise fail(f"unknown hierarchy {r.hierarchy!r}", "conflict_rules", i, "hierarchy")
            order = model.hierarchies[r.hierarchy]
            for name in ("prevails_at_least", "yields_at_most"):
                if getattr(r, name) not in order:
                    raise fail(f"{getattr(r, name)} is not in the {r.hierarchy!r} hierarchy",
                               "conflict_rules", i, name)
            if order.index(r.prevails_at_least) >= order.index(r.yields_at_most):
                # Otherwise both sides could "prevail" and the rule would decide arbitrarily.
                raise fail("prevails_at_least must rank strictly above yields_at_most", "conflict_rules", i)
            rules.append(ConflictRule(r.id, r.description, tuple(r.subjects), r.hierarchy,
                                      r.prevails_at_least, r.yields_at_most))
        for domain, issuers in model.issuer_authority.items():
            for issuer, level in issuers.items():
                if level not in (model.hierarchies.get(domain) or model.hierarchies["default"]):
                    raise fail(f"{level} is not in the {domain!r} hierarchy", "issuer_authority", domain, issuer)
        return cls({k: tuple(v) for k, v in model.hierarchies.items()}, dict(model.decisive_authority), tuple(rules),
                   {d: dict(i) for d, i in model.issuer_authority.items()})


_Authority = Literal["GOVERNMENT_SOURCE", "OFFICIAL_RECORD", "VERIFIED_INTEGRATION", "UNVERIFIED_DOCUMENT",
                     "MODEL_INFERENCE"]


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)


class _RuleModel(_Strict):
    id: Annotated[str, pydantic.StringConstraints(pattern=r"^[A-Z][A-Z0-9_]{0,63}$")]
    description: Annotated[str, pydantic.StringConstraints(min_length=1)]
    subjects: list[Annotated[str, pydantic.StringConstraints(min_length=1)]] = pydantic.Field(min_length=1)
    hierarchy: str
    prevails_at_least: _Authority
    yields_at_most: _Authority


class _PolicyModel(_Strict):
    hierarchies: dict[str, list[_Authority]]
    decisive_authority: dict[str, _Authority]
    conflict_rules: list[_RuleModel] = []
    issuer_authority: dict[str, dict[Annotated[str, pydantic.StringConstraints(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")], _Authority]] = {}


# --- reading results -------------------------------------------------------------------------------

def _authority_name(value: int) -> str:
    try:
        return common_pb2.AuthorityLevel.Name(value).removeprefix("AUTHORITY_LEVEL_")
    except ValueError:
        return "UNSPECIFIED"


@dataclass(frozen=True)
class _Finding:
    analysis: str
    agent_id: str
    subject: str
    verdict: Verdict
    evidence: tuple[common_pb2.EvidenceReference, ...]
    codes: tuple[str, ...]

    def best(self, policy: EvidencePolicy, hierarchy: str) -> str:
        names = [_authority_name(e.authority) for e in self.evidence]
        return min(names, key=lambda n: policy.rank(hierarchy, n)) if names else "UNSPECIFIED"


@dataclass(frozen=True)
class AnalysisReport:
    """How one analysis came out, for the report."""

    analysis: str
    agent_id: str
    task_id: str
    verdict: Verdict
    """After the evidence check: a PASS/FAIL subject without FACT evidence counts as UNKNOWN."""
    complete: bool
    fail_codes: tuple[str, ...] = ()
    """``CODE on subject`` for each failing subject."""


@dataclass
class _Read:
    report: AnalysisReport | None = None
    findings: list[_Finding] = field(default_factory=list)
    missing: list[Missing] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    """The contract's extra fields of a usable result."""
    data_conflicts: list[_Resolved] = field(default_factory=list)
    """The agent's data conflicts, each decided by issuer authority or left to a human."""


_STATE_CODES = {
    TaskState.FAILED: ("TASK_FAILED", "the task failed"),
    TaskState.TIMED_OUT: ("TASK_TIMED_OUT", "the task timed out"),
    TaskState.CANCELLED: ("TASK_CANCELLED", "the task was cancelled"),
    TaskState.SKIPPED: ("TASK_SKIPPED", "the task was skipped"),
    TaskState.NOT_RUN: ("TASK_NOT_RUN", "the task was not run"),
}


def _read(outcome: TaskOutcome, policy: EvidencePolicy | None = None) -> _Read:
    """Check one outcome against the contract and extract its findings, data conflicts and gaps."""
    analysis, agent = str(outcome.analysis), outcome.agent_id
    out = _Read()
    if outcome.state is not TaskState.COMPLETED:
        code, what = _STATE_CODES[outcome.state]
        out.missing.append(Missing(analysis, agent, code, outcome.error_reason or what))
        return out
    result = outcome.result
    if result is None:
        out.missing.append(Missing(analysis, agent, "RESULT_CONTRACT_VIOLATION", "completed without a result"))
        return out
    if result.status == common_pb2.RESULT_STATUS_FAILED:
        out.missing.append(Missing(analysis, agent, "RESULT_FAILED", result.error_reason or "the agent failed"))
        return out
    if (outcome.agent_id and result.agent_id != outcome.agent_id) or (
        outcome.task_id and result.task_id != outcome.task_id
    ):
        out.missing.append(Missing(analysis, agent, "RESULT_CONTRACT_VIOLATION",
                                   "the result names another task or agent"))
        return out
    try:
        parsed = check_result(result, outcome.contract)
    except ContractViolation as exc:
        out.missing.append(Missing(analysis, agent, "RESULT_CONTRACT_VIOLATION", str(exc)))
        return out
    out.values = parsed.values

    facts: dict[str, list[common_pb2.Statement]] = {}
    for s in result.statements:
        # A model's statement is at most an INFERENCE (PRD §35, §37): a "FACT" whose only evidence is a
        # model inference backs nothing, so no verdict — and no release — ever rests on a model alone.
        if s.kind == common_pb2.STATEMENT_KIND_FACT and any(
                0 <= i < len(result.evidence)
                and result.evidence[i].authority != common_pb2.AUTHORITY_LEVEL_MODEL_INFERENCE
                for i in s.evidence_indexes):
            facts.setdefault(s.subject, []).append(s)
    gaps: list[str] = []
    fail_codes: list[str] = []
    effective: dict[str, Verdict] = {}
    disputed: set[str] = set()
    for conflict in parsed.data_conflicts:
        resolved = _resolve_data(conflict, result, analysis, agent, policy or EvidencePolicy())
        out.data_conflicts.append(resolved)
        disputed.add(conflict.subject)
        if resolved.winner is None:
            continue
        won = resolved.conflict
        side_evidence = won.evidence_a if resolved.winner is Verdict.PASS else won.evidence_b
        effective[conflict.subject] = resolved.winner
        out.findings.append(_Finding(analysis, agent, conflict.subject, resolved.winner, tuple(side_evidence),
                                     ("DATA_CONFLICT_RESOLVED",)))
        if resolved.winner is Verdict.FAIL:
            fail_codes.append(f"DATA_CONFLICT_RESOLVED on {conflict.subject}")
    for subject, verdict in sorted(parsed.subjects.items()):
        if subject in disputed:
            continue  # a data conflict: decided above, or for a human — not a gap
        backing = facts.get(subject, [])
        if verdict is not Verdict.UNKNOWN and not backing:
            gaps.append(f"{verdict.value} on {subject} has no FACT with evidence")
            verdict = Verdict.UNKNOWN
        elif verdict is Verdict.UNKNOWN:
            gaps.append(f"{subject} could not be established")
        effective[subject] = verdict
        if verdict is Verdict.UNKNOWN:
            continue
        indexes = sorted({i for s in backing for i in s.evidence_indexes})
        codes = tuple(dict.fromkeys(s.code for s in backing))
        out.findings.append(_Finding(analysis, agent, subject, verdict,
                                     tuple(result.evidence[i] for i in indexes), codes))
        if verdict is Verdict.FAIL:
            fail_codes.append(f"{'/'.join(codes)} on {subject}")
    for s in result.statements:
        if s.kind == common_pb2.STATEMENT_KIND_UNCERTAINTY:
            gaps.append(f"{s.code} on {s.subject}" if s.subject else s.code)
    if not parsed.subjects:
        gaps.append("no subject was judged")
    has_fail = any(v is Verdict.FAIL for v in effective.values())
    uncertain_status = result.status != common_pb2.RESULT_STATUS_SUCCESS
    if uncertain_status and not gaps and not disputed:
        gaps.append(f"result status {common_pb2.ResultStatus.Name(result.status)}")
    complete = not gaps
    undecided = any(r.winner is None for r in out.data_conflicts)
    if has_fail:
        verdict = Verdict.FAIL
    elif complete and not undecided:
        verdict = Verdict.PASS
    else:
        verdict = Verdict.UNKNOWN
    out.report = AnalysisReport(analysis, agent, outcome.task_id, verdict, complete, tuple(fail_codes))
    if not complete:
        # Listed even beside a FAIL: the answer names everything it could not establish.
        out.missing.append(Missing(analysis, agent, "ANALYSIS_INCOMPLETE", "; ".join(dict.fromkeys(gaps))))
    return out


# --- conflicts ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Resolved:
    conflict: supervisor_service_pb2.Conflict
    winner: Verdict | None
    """PASS or FAIL if a rule decided; None when it goes to review."""


def _resolve_data(conflict: DataConflict, result: common_pb2.AgentResult, analysis: str, agent: str,
                  policy: EvidencePolicy) -> _Resolved:
    """A data conflict decided by the configured authority of each side's issuer, through the conflict rules."""
    passing = [s for s in conflict.sides if s.verdict is Verdict.PASS]
    failing = [s for s in conflict.sides if s.verdict is Verdict.FAIL]

    def evidence(sides: list[ConflictSide]) -> list[common_pb2.EvidenceReference]:
        return [result.evidence[i] for i in sorted({i for s in sides for i in s.evidence})]

    def best(sides: list[ConflictSide], hierarchy: str) -> str | None:
        levels = [policy.issuer_authority(analysis, s.issuer_id) for s in sides]
        known = [level for level in levels if level is not None]
        return min(known, key=lambda n: policy.rank(hierarchy, n)) if known else None

    def who(sides: list[ConflictSide]) -> str:
        return ", ".join(f"{s.record_id or '?'} (issuer {s.issuer_id or 'not given'})" for s in sides)

    applicable: list[str] = []
    winner: Verdict | None = None
    resolution = ""
    unrated = sorted({s.issuer_id or "not given" for s in conflict.sides
                      if policy.issuer_authority(analysis, s.issuer_id) is None})
    if unrated:
        applicable.append(f"ISSUER_AUTHORITY: no configured authority in the {analysis} domain for issuer(s) "
                          f"{', '.join(unrated)}")
    else:
        for rule in policy.rules:
            if not any(fnmatch.fnmatchcase(conflict.subject, p) for p in rule.subjects):
                continue
            a, b = best(passing, rule.hierarchy), best(failing, rule.hierarchy)
            assert a is not None and b is not None
            rank = policy.rank
            top, floor = rank(rule.hierarchy, rule.prevails_at_least), rank(rule.hierarchy, rule.yields_at_most)
            decided: Verdict | None = None
            if rank(rule.hierarchy, a) <= top and rank(rule.hierarchy, b) >= floor:
                decided = Verdict.PASS
            elif rank(rule.hierarchy, b) <= top and rank(rule.hierarchy, a) >= floor:
                decided = Verdict.FAIL
            applicable.append(f"{rule.rule_id}: {rule.description} — {'decides' if decided else 'does not decide'}: "
                              f"PASS records {who(passing)} {a} vs FAIL records {who(failing)} {b}")
            if decided is not None and winner is None:
                winner = decided
                win, lose = (passing, failing) if decided is Verdict.PASS else (failing, passing)
                resolution = (f"{rule.rule_id}: by issuer authority, the record(s) {who(win)} "
                              f"({best(win, rule.hierarchy)}) prevail over {who(lose)} "
                              f"({best(lose, rule.hierarchy)}); {conflict.subject} is {decided.value}")
        if not applicable:
            applicable.append(f"NO_RULE: no configured conflict rule covers {conflict.subject}")
    return _Resolved(supervisor_service_pb2.Conflict(
        subject=conflict.subject, agent_a=agent, agent_b=agent, evidence_a=evidence(passing),
        evidence_b=evidence(failing), applicable_rules=applicable, resolution=resolution), winner)


def _resolve(passing: _Finding, failing: _Finding, policy: EvidencePolicy) -> _Resolved:
    applicable: list[str] = []
    winner: Verdict | None = None
    resolution = ""
    for rule in policy.rules:
        if not any(fnmatch.fnmatchcase(passing.subject, p) for p in rule.subjects):
            continue
        a, b = passing.best(policy, rule.hierarchy), failing.best(policy, rule.hierarchy)
        order = " > ".join(policy.hierarchy(rule.hierarchy))
        rank = policy.rank
        top, floor = rank(rule.hierarchy, rule.prevails_at_least), rank(rule.hierarchy, rule.yields_at_most)
        decided: Verdict | None = None
        if rank(rule.hierarchy, a) <= top and rank(rule.hierarchy, b) >= floor:
            decided = Verdict.PASS
        elif rank(rule.hierarchy, b) <= top and rank(rule.hierarchy, a) >= floor:
            decided = Verdict.FAIL
        verdict_text = "decides" if decided else "does not decide"
        applicable.append(f"{rule.rule_id}: {rule.description} [{order}] — {verdict_text}: "
                          f"{passing.agent_id} {a} vs {failing.agent_id} {b}")
        if decided is not None and winner is None:
            winner = decided
            win, lose = (passing, failing) if decided is Verdict.PASS else (failing, passing)
            resolution = (f"{rule.rule_id}: {win.agent_id}'s evidence ({win.best(policy, rule.hierarchy)}) prevails "
                          f"over {lose.agent_id}'s ({lose.best(policy, rule.hierarchy)}); {passing.subject} is "
                          f"{decided.value}")
    if not applicable:
        applicable.append(f"NO_RULE: no configured conflict rule covers {passing.subject}")
    conflict = supervisor_service_pb2.Conflict(
        subject=passing.subject, agent_a=passing.agent_id, agent_b=failing.agent_id,
        evidence_a=passing.evidence, evidence_b=failing.evidence, applicable_rules=applicable,
        resolution=resolution,
    )
    return _Resolved(conflict, winner)


# --- the assessment ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Assessment:
    """The consolidated outcome of an execution."""

    decision: Decision
    status: OutcomeStatus
    reason: str
    """``PERMIT_NOT_FOUND``, ``DEFINITIVE_FAIL``, ``UNRESOLVED_CONFLICT``, ``MISSING_ANALYSIS``,
    ``NON_DECISIVE_FAIL``, ``ALL_ANALYSES_PASS``, ``NO_ANALYSIS_COMPLETED``, ``STATUS_REPORTED``."""
    missing: tuple[Missing, ...]
    conflicts: tuple[supervisor_service_pb2.Conflict, ...]
    """agent_a found PASS, agent_b FAIL; ``resolution`` is empty when it needs review."""
    analyses: tuple[AnalysisReport, ...]
    blocking: tuple[str, ...]
    """What the decision rests on: ``agent: CODE on subject`` for the failing or disputed subjects."""
    summary: str
    review_required: bool
    """An unresolved conflict or a non-decisive FAIL: a human must decide (Decision Center)."""

    def apply_to(self, execution: supervisor_service_pb2.Execution) -> None:
        """Copy decision, status, missing, conflicts, reason and summary into an Execution."""
        execution.decision = self.decision.to_proto()
        execution.status = self.status.to_proto()
        del execution.missing[:]
        execution.missing.extend(m.to_proto() for m in self.missing)
        del execution.conflicts[:]
        execution.conflicts.extend(self.conflicts)
        execution.reason = self.reason
        execution.summary = self.summary


class Headline(Protocol):
    """One entry of a domain's decision mapping (:class:`supervisor_svc.definitions.OutcomeDef`)."""

    @property
    def decision(self) -> str:
        """An ``AnalysisDecision`` without its prefix."""
        ...

    @property
    def details(self) -> bool:
        """Whether the analyses follow the headline."""
        ...

    def line(self, language: str, subjects: Mapping[str, str]) -> str:
        """The headline in a language."""
        ...


_WORDS = {
    "en": {"MISSING": "Missing", "CONFLICT": "Conflict on {subject}: {a} PASS vs {b} FAIL",
           "DATA_CONFLICT": "Data conflict on {subject}: records of {a} disagree (PASS vs FAIL)",
           "REVIEW": "sent to human review", "RESOLVED": "resolved by"},
    "pt": {"MISSING": "Faltando", "CONFLICT": "Conflito em {subject}: {a} PASS vs {b} FAIL",
           "DATA_CONFLICT": "Conflito de dados em {subject}: registros de {a} divergem (PASS vs FAIL)",
           "REVIEW": "enviado para revisão humana", "RESOLVED": "resolvido por"},
}


def _summary(
    language: str, headline: str, analyses: Sequence[AnalysisReport], missing: Sequence[Missing],
    conflicts: Sequence[supervisor_service_pb2.Conflict],
) -> str:
    # Codes and subjects only: the statements' free text stays in the results, so the
    # summary is deterministic and carries nothing a specialist copied from a source.
    t = _WORDS.get(language, _WORDS["en"])
    lines = [headline]
    for a in analyses:
        detail = f" — {'; '.join(a.fail_codes)}" if a.fail_codes else ""
        lines.append(f"- {a.analysis} ({a.agent_id}): {a.verdict.value}{detail}")
    for m in missing:
        lines.append(f"- {t['MISSING']}: {m}")
    for c in conflicts:
        head = t["DATA_CONFLICT" if c.agent_a == c.agent_b else "CONFLICT"].format(
            subject=c.subject, a=c.agent_a, b=c.agent_b)
        tail = f"{t['RESOLVED']} {c.resolution.split(':', 1)[0]}" if c.resolution else t["REVIEW"]
        lines.append(f"- {head} — {tail}")
    return "\n".join(lines)


def _reasons(outcome: TaskOutcome) -> tuple[str, ...]:
    """``CODE on subject`` for the FACT statements on each failing subject of a result, as the agent said them."""
    result = outcome.result
    if result is None:
        return ()
    try:
        parsed = check_result(result, outcome.contract)
    except ContractViolation:
        return ()
    failing = {s for s, v in parsed.subjects.items() if v is Verdict.FAIL}
    return tuple(dict.fromkeys(f"{s.code} on {s.subject}" for s in result.statements
                               if s.kind == common_pb2.STATEMENT_KIND_FACT and s.subject in failing))


def _branch(outcomes: Sequence[TaskOutcome], conditions: Sequence[Condition]) -> tuple[Condition, TaskOutcome] | None:
    """The first condition with an ``if_false`` outcome that is false for its task's outcome."""
    for condition in conditions:
        if condition.if_false is None:
            continue
        for o in outcomes:
            if o.template_task == condition.task and o.state is TaskState.COMPLETED and \
                    condition.evaluate(o.result, o.contract) is False:
                return condition, o
    return None


def _branch_assessment(condition: Condition, source: TaskOutcome, decisions: Mapping[str, Headline],
                       subjects: Mapping[str, str], language: str, *, report: bool = False) -> Assessment:
    assert condition.if_false is not None
    outcome = decisions[condition.if_false]
    read = _read(source)
    analyses = tuple(r for r in (read.report,) if r is not None)
    lines = [outcome.line(language, subjects)]
    if outcome.details:
        reasons = _reasons(source)
        lines.append(f"- {source.analysis} ({source.agent_id}): " + ("; ".join(reasons) or condition.name))
    decision = Decision.UNSPECIFIED if report else Decision(outcome.decision)
    return Assessment(decision, OutcomeStatus.SUCCEEDED, condition.if_false, (), (), analyses, (),
                      "\n".join(lines), decision is Decision.REQUIRES_REVIEW)


def aggregate(
    outcomes: Sequence[TaskOutcome],
    *,
    expected: Sequence[str],
    policy: EvidencePolicy,
    decisions: Mapping[str, Headline],
    conditions: Sequence[Condition] = (),
    subjects: Mapping[str, str] | None = None,
    language: str = "en",
) -> Assessment:
    """Consolidate the outcomes of a plan into a decision (see the module docstring).

    Args:
        outcomes: One per planned analysis (from the plan's tasks and ``Plan.not_run``).
        expected: The analyses a complete answer needs (``Plan.expected``).
        policy: The domain's evidence-authority hierarchies and conflict rules.
        decisions: The domain's decision mapping (``DomainDefinition.outcomes``).
        conditions: The plan's conditions (a false one with ``if_false`` answers).
        subjects: The request's subjects, for the headline (``{"permit": "WP-10231"}``).
        language: ``pt`` or ``en`` for the summary's sentences.
    """
    subjects = subjects or {}
    branch = _branch(outcomes, conditions)
    if branch is not None:
        return _branch_assessment(*branch, decisions, subjects, language)
    off_path = {str(o.analysis) for o in outcomes if o.off_path}
    by_analysis: dict[str, list[TaskOutcome]] = {}
    for o in outcomes:
        if not o.off_path:
            by_analysis.setdefault(str(o.analysis), []).append(o)
    wanted = [str(a) for a in expected if str(a) not in off_path]
    order = wanted + sorted(set(by_analysis) - set(wanted))

    reads: dict[str, _Read] = {}
    for analysis in order:
        got = by_analysis.get(analysis, [])
        if len(got) == 1:
            reads[analysis] = _read(got[0], policy)
        elif not got:
            reads[analysis] = _Read(missing=[Missing(analysis, "", "TASK_NOT_RUN", "no task was planned")])
        else:
            agents = ", ".join(o.agent_id for o in got)
            reads[analysis] = _Read(missing=[Missing(analysis, "", "RESULT_AMBIGUOUS",
                                                     f"{len(got)} outcomes ({agents}); none is used")])

    analyses = tuple(r.report for r in reads.values() if r.report is not None)
    missing = tuple(m for r in reads.values() for m in r.missing)
    findings = [f for r in reads.values() for f in r.findings]

    # Group by subject; a conflict is a PASS and a FAIL on the same subject from different agents.
    by_subject: dict[str, list[_Finding]] = {}
    for f in findings:
        by_subject.setdefault(f.subject, []).append(f)
    conflicts: list[_Resolved] = [c for r in reads.values() for c in r.data_conflicts]
    definitive: list[str] = []
    disputed: list[str] = []
    weak: list[str] = []
    unresolved_subjects: list[str] = [c.conflict.subject for c in conflicts if c.winner is None]
    disputed.extend(f"{c.conflict.agent_a}: DATA_CONFLICT on {c.conflict.subject}" for c in conflicts
                    if c.winner is None)
    for subject in sorted(by_subject):
        group = by_subject[subject]
        passes = [f for f in group if f.verdict is Verdict.PASS]
        fails = [f for f in group if f.verdict is Verdict.FAIL]
        resolved = [_resolve(p, f, policy) for p in passes for f in fails if p.agent_id != f.agent_id]
        conflicts.extend(resolved)
        winners = {r.winner for r in resolved}
        # Settled only if every pair was decided, all the same way; anything else is for a human.
        settled = winners.pop() if len(winners) == 1 else None
        if resolved and settled is None:
            unresolved_subjects.append(subject)
        for f in fails:
            label = f"{f.agent_id}: {'/'.join(f.codes)} on {subject}"
            if not resolved:
                is_definitive = policy.is_decisive(f.analysis, f.best(policy, f.analysis))
                (definitive if is_definitive else weak).append(label)
            elif settled is Verdict.FAIL:
                definitive.append(label)  # a rule upheld the FAIL
            elif settled is None:
                disputed.append(label)
            # settled PASS: every rule overruled this FAIL

    completed = [a for a in analyses if a.complete or a.verdict is Verdict.FAIL]
    blocking: tuple[str, ...]
    if not completed:
        reason, blocking = "NO_ANALYSIS_COMPLETED", ()
    elif definitive:
        reason, blocking = "DEFINITIVE_FAIL", tuple(definitive)
    elif unresolved_subjects:
        reason, blocking = "UNRESOLVED_CONFLICT", tuple(disputed)
    elif missing:
        reason, blocking = "MISSING_ANALYSIS", ()
    elif weak:
        reason, blocking = "NON_DECISIVE_FAIL", tuple(weak)
    else:
        reason, blocking = "ALL_ANALYSES_PASS", ()
    outcome = decisions[reason]
    decision = Decision(outcome.decision)
    status = OutcomeStatus.PARTIAL if missing else OutcomeStatus.SUCCEEDED
    if not completed:
        status = OutcomeStatus.FAILED
    conflict_msgs = tuple(r.conflict for r in conflicts)
    review = decision is Decision.REQUIRES_REVIEW or bool(unresolved_subjects)
    summary = _summary(language, outcome.line(language, subjects), analyses if outcome.details else (), missing,
                       conflict_msgs)
    return Assessment(decision, status, reason, missing, conflict_msgs, analyses, blocking, summary, review)


class Report(Protocol):
    """A plan's report (:class:`supervisor_svc.definitions.ReportDef`)."""

    def text(self, language: str, values: Mapping[str, Any]) -> str | None:
        """The first template all of whose fields ``values`` has, in a language; None if none."""
        ...

    def unavailable(self, language: str, values: Mapping[str, Any]) -> str:
        """The line saying the report cannot be given."""
        ...


def report(
    outcome: TaskOutcome,
    spec: Report,
    *,
    decisions: Mapping[str, Headline],
    conditions: Sequence[Condition] = (),
    context: str | None = None,
    subjects: Mapping[str, str] | None = None,
    language: str = "en",
) -> Assessment:
    """The answer to a question a plan reports on (one task, no decision), e.g. a permit's status.

    The text is the first of the report's templates that the task's ``context`` record
    (with the request's subjects) fills; a failed task, or a record that fills none,
    is reported as FAILED with what is missing — never filled in.
    """
    subjects = subjects or {}
    branch = _branch([outcome], conditions)
    if branch is not None:
        return _branch_assessment(*branch, decisions, subjects, language, report=True)
    read = _read(outcome)
    record = read.values.get(context) if context else None
    values: dict[str, Any] = {**(record if isinstance(record, Mapping) else {}), **subjects}
    text = spec.text(language, values) if read.report is not None else None
    if text is None:
        missing = tuple(read.missing) or (Missing(str(outcome.analysis), outcome.agent_id,
                                                  "RESULT_CONTRACT_VIOLATION",
                                                  "the record has none of the fields the report needs"),)
        lines = [spec.unavailable(language, values)] + [f"- {m}" for m in missing]
        return Assessment(Decision.UNSPECIFIED, OutcomeStatus.FAILED, "REPORT_UNAVAILABLE", missing, (),
                          (), (), "\n".join(lines), False)
    analyses = (read.report,) if read.report else ()
    return Assessment(Decision.UNSPECIFIED, OutcomeStatus.SUCCEEDED, "REPORTED", (), (), analyses, (),
                      text, False)
