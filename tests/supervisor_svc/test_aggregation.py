"""Evidence-first aggregation, conflicts by evidence authority, and the decision (PRD §36–40, §46)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentmesh.result_contract import ContractViolation, check_result
from agentmesh.v1 import common_pb2, supervisor_service_pb2
from supervisor_svc.aggregation import (
    Decision,
    EvidencePolicy,
    OutcomeStatus,
    TaskOutcome,
    TaskState,
    aggregate,
    report,
)
from supervisor_svc.definitions import default_catalog, default_domains_dir, load_definition
from supervisor_svc.errors import ConfigError
from supervisor_svc.projection import ProjectionConfig

WP_DOMAIN = default_catalog().domain("work-permit")
ANALYSIS_PLAN, STATUS_PLAN = WP_DOMAIN.plans["analysis"], WP_DOMAIN.plans["status"]
CONDITIONS = tuple(ANALYSIS_PLAN.conditions.values())
WP_CONTRACT = ANALYSIS_PLAN.task("permit").contract


class Analysis:
    """The analyses of the work-permit domain's analysis plan."""

    WORK_PERMIT, TRAINING, RISK, COMPLIANCE = ANALYSIS_PLAN.expected


EXPECTED = (Analysis.WORK_PERMIT, Analysis.TRAINING, Analysis.RISK, Analysis.COMPLIANCE)
AGENTS = {Analysis.WORK_PERMIT: "work-permit-agent", Analysis.TRAINING: "training-agent",
          Analysis.RISK: "risk-agent", Analysis.COMPLIANCE: "compliance-agent"}
SOURCES = {"GOVERNMENT_SOURCE": "gov-registry", "OFFICIAL_RECORD": "sst-records",
           "VERIFIED_INTEGRATION": "lms", "UNVERIFIED_DOCUMENT": "upload", "MODEL_INFERENCE": "model"}
Fact = tuple[str, str, str]  # subject, code, authority


@pytest.fixture(scope="module")
def policy() -> EvidencePolicy:
    return WP_DOMAIN.evidence


def _aggregate(outcomes: list[TaskOutcome], *, permit_id: str = "", **kw: Any) -> Any:
    return aggregate(outcomes, decisions=WP_DOMAIN.outcomes, conditions=CONDITIONS,
                     subjects={"permit": permit_id} if permit_id else {}, **kw)


def _result(
    analysis: str,
    subjects: dict[str, str],
    facts: list[Fact],
    *,
    uncertain: list[tuple[str, str]] = (),  # type: ignore[assignment]
    status: int = common_pb2.RESULT_STATUS_SUCCESS,
    verdict: str | None = None,
    extra: dict[str, Any] | None = None,
) -> common_pb2.AgentResult:
    agent = AGENTS[analysis]
    r = common_pb2.AgentResult(task_id=f"t-{analysis}", agent_id=agent, status=status)
    values = set(subjects.values())
    derived = "FAIL" if "FAIL" in values else "UNKNOWN" if not values or "UNKNOWN" in values else "PASS"
    r.result.update({"verdict": verdict or derived, "subjects": subjects, **(extra or {})})
    for i, (subject, code, authority) in enumerate(facts):
        r.evidence.append(common_pb2.EvidenceReference(
            source=SOURCES[authority], reference=f"REC-{i}",
            authority=common_pb2.AuthorityLevel.Value(f"AUTHORITY_LEVEL_{authority}")))
        r.statements.append(common_pb2.Statement(kind=common_pb2.STATEMENT_KIND_FACT, code=code, subject=subject,
                                                 evidence_indexes=[i], text=f"{code} for {subject}"))
    for code, subject in uncertain:
        r.statements.append(common_pb2.Statement(kind=common_pb2.STATEMENT_KIND_UNCERTAINTY, code=code,
                                                 subject=subject, text="could not be established"))
    r.statements.append(common_pb2.Statement(kind=common_pb2.STATEMENT_KIND_RECOMMENDATION, code="NOTE",
                                             text="informative only"))
    return r


def _done(analysis: str, result: common_pb2.AgentResult) -> TaskOutcome:
    wp = analysis == Analysis.WORK_PERMIT
    return TaskOutcome(analysis, TaskState.COMPLETED, f"t-{analysis}", AGENTS[analysis], result,
                       contract=WP_CONTRACT if wp else None, template_task="permit" if wp else analysis)


PERMIT = {"permit_id": "WP-10231", "status": "PENDING_RELEASE", "valid_from": "2026-11-25",
          "valid_until": "2026-12-20", "workers": [{"worker_id": "W-1001"}]}


def _work_permit_pass() -> TaskOutcome:
    return _done(Analysis.WORK_PERMIT, _result(
        Analysis.WORK_PERMIT, {"permit:WP-10231/status": "PASS"},
        [("permit:WP-10231/status", "PERMIT_PENDING_RELEASE", "OFFICIAL_RECORD")],
        extra={"permit_found": True, "permit": PERMIT}))


def _training_pass() -> TaskOutcome:
    return _done(Analysis.TRAINING, _result(
        Analysis.TRAINING, {"worker:W-1001/NR-10": "PASS", "worker:W-1001/NR-35": "PASS"},
        [("worker:W-1001/NR-10", "TRAINING_VALID", "VERIFIED_INTEGRATION"),
         ("worker:W-1001/NR-35", "TRAINING_VALID", "VERIFIED_INTEGRATION")]))


def _risk_pass() -> TaskOutcome:
    return _done(Analysis.RISK, _result(Analysis.RISK, {"permit:WP-10231/risk": "PASS"},
                                        [("permit:WP-10231/risk", "RISK_ACCEPTABLE", "OFFICIAL_RECORD")]))


def _compliance_pass() -> TaskOutcome:
    return _done(Analysis.COMPLIANCE, _result(Analysis.COMPLIANCE, {"checklist:CL-1/I-1": "PASS"},
                                              [("checklist:CL-1/I-1", "CHECKLIST_ITEM_PASSED", "OFFICIAL_RECORD")]))


def _all_pass() -> dict[str, TaskOutcome]:
    return {Analysis.WORK_PERMIT: _work_permit_pass(), Analysis.TRAINING: _training_pass(),
            Analysis.RISK: _risk_pass(), Analysis.COMPLIANCE: _compliance_pass()}


def _run(policy: EvidencePolicy, outcomes: dict[str, TaskOutcome], **kw: Any) -> Any:
    return _aggregate(list(outcomes.values()), expected=EXPECTED, policy=policy, permit_id="WP-10231", **kw)


def test_all_pass_is_recommended(policy: EvidencePolicy) -> None:
    a = _run(policy, _all_pass())
    assert (a.decision, a.status, a.reason) == (Decision.RECOMMENDED_FOR_RELEASE, OutcomeStatus.SUCCEEDED,
                                                "ALL_ANALYSES_PASS")
    assert a.missing == () and a.conflicts == () and not a.review_required
    assert [r.analysis for r in a.analyses] == [str(x) for x in EXPECTED]
    assert a.summary.startswith("Permit WP-10231: recommended for release.")


def test_expired_training_from_the_lms_is_not_recommended(policy: EvidencePolicy) -> None:
    outcomes = _all_pass()
    outcomes[Analysis.TRAINING] = _done(Analysis.TRAINING, _result(
        Analysis.TRAINING, {"worker:W-1002/NR-10": "FAIL", "worker:W-1002/NR-35": "PASS"},
        [("worker:W-1002/NR-10", "TRAINING_EXPIRED", "VERIFIED_INTEGRATION"),
         ("worker:W-1002/NR-35", "TRAINING_VALID", "VERIFIED_INTEGRATION")]))
    a = _run(policy, outcomes)
    assert (a.decision, a.status, a.reason) == (Decision.NOT_RECOMMENDED, OutcomeStatus.SUCCEEDED,
                                                "DEFINITIVE_FAIL")
    assert a.blocking == ("training-agent: TRAINING_EXPIRED on worker:W-1002/NR-10",)
    assert "TRAINING_EXPIRED on worker:W-1002/NR-10" in a.summary


def test_pass_against_fail_without_deciding_rule_requires_review(policy: EvidencePolicy) -> None:
    subject = "worker:W-1005/NR-35"
    outcomes = _all_pass()
    outcomes[Analysis.TRAINING] = _done(Analysis.TRAINING, _result(
        Analysis.TRAINING, {subject: "PASS"}, [(subject, "TRAINING_VALID", "VERIFIED_INTEGRATION")]))
    outcomes[Analysis.COMPLIANCE] = _done(Analysis.COMPLIANCE, _result(
        Analysis.COMPLIANCE, {subject: "FAIL", "checklist:CL-1/I-1": "PASS"},
        [(subject, "CHECKLIST_ITEM_FAILED", "OFFICIAL_RECORD"),
         ("checklist:CL-1/I-1", "CHECKLIST_ITEM_PASSED", "OFFICIAL_RECORD")]))
    a = _run(policy, outcomes)
    assert (a.decision, a.reason) == (Decision.REQUIRES_REVIEW, "UNRESOLVED_CONFLICT")
    assert a.status is OutcomeStatus.SUCCEEDED and a.review_required
    (c,) = a.conflicts
    assert (c.subject, c.agent_a, c.agent_b, c.resolution) == (subject, "training-agent", "compliance-agent", "")
    assert [e.source for e in c.evidence_a] == ["lms"]
    assert [e.source for e in c.evidence_b] == ["sst-records"]
    assert c.evidence_b[0].authority == common_pb2.AUTHORITY_LEVEL_OFFICIAL_RECORD
    assert len(c.applicable_rules) == 2
    assert all("does not decide" in rule for rule in c.applicable_rules)
    assert c.applicable_rules[0].startswith("GOVERNMENT_SOURCE_PREVAILS")
    assert a.blocking == (f"compliance-agent: CHECKLIST_ITEM_FAILED on {subject}",)
    assert "sent to human review" in a.summary


@pytest.mark.parametrize(
    ("pass_authority", "fail_authority", "decision", "rule"),
    [
        ("GOVERNMENT_SOURCE", "OFFICIAL_RECORD", Decision.RECOMMENDED_FOR_RELEASE, "GOVERNMENT_SOURCE_PREVAILS"),
        ("VERIFIED_INTEGRATION", "GOVERNMENT_SOURCE", Decision.NOT_RECOMMENDED, "GOVERNMENT_SOURCE_PREVAILS"),
        ("UNVERIFIED_DOCUMENT", "VERIFIED_INTEGRATION", Decision.NOT_RECOMMENDED, "VERIFIED_RECORD_OVER_UNVERIFIED"),
        ("OFFICIAL_RECORD", "UNVERIFIED_DOCUMENT", Decision.RECOMMENDED_FOR_RELEASE, "VERIFIED_RECORD_OVER_UNVERIFIED"),
    ],
)
def test_conflict_resolved_only_by_a_configured_rule(
    policy: EvidencePolicy, pass_authority: str, fail_authority: str, decision: Decision, rule: str
) -> None:
    subject = "worker:W-1005/NR-35"
    outcomes = _all_pass()
    outcomes[Analysis.TRAINING] = _done(Analysis.TRAINING, _result(
        Analysis.TRAINING, {subject: "PASS"}, [(subject, "TRAINING_VALID", pass_authority)]))
    outcomes[Analysis.COMPLIANCE] = _done(Analysis.COMPLIANCE, _result(
        Analysis.COMPLIANCE, {subject: "FAIL"}, [(subject, "CHECKLIST_ITEM_FAILED", fail_authority)]))
    a = _run(policy, outcomes)
    assert a.decision is decision
    (c,) = a.conflicts
    assert c.resolution.startswith(rule) and not a.review_required


@pytest.mark.parametrize("verdict", ["PASS", "FAIL"])
def test_a_fact_resting_on_a_model_alone_backs_nothing(policy: EvidencePolicy, verdict: str) -> None:
    # A statement from a model is at most an INFERENCE (PRD §35, §37): called a FACT with only
    # MODEL_INFERENCE evidence, it backs no verdict. A PASS cannot release, a FAIL cannot decide.
    subject = "worker:W-1001/NR-10"
    outcomes = _all_pass()
    outcomes[Analysis.TRAINING] = _done(Analysis.TRAINING, _result(
        Analysis.TRAINING, {subject: verdict}, [(subject, "TRAINING_VALID", "MODEL_INFERENCE")]))
    a = _run(policy, outcomes)
    assert a.decision is Decision.INSUFFICIENT_EVIDENCE
    assert a.conflicts == () and a.blocking == ()
    assert any(f"{verdict} on {subject} has no FACT with evidence" in m.detail for m in a.missing)


def test_no_rule_covering_the_subject_goes_to_review() -> None:
    policy = EvidencePolicy(rules=())
    subject = "worker:W-1005/NR-35"
    outcomes = _all_pass()
    outcomes[Analysis.TRAINING] = _done(Analysis.TRAINING, _result(
        Analysis.TRAINING, {subject: "PASS"}, [(subject, "TRAINING_VALID", "GOVERNMENT_SOURCE")]))
    outcomes[Analysis.COMPLIANCE] = _done(Analysis.COMPLIANCE, _result(
        Analysis.COMPLIANCE, {subject: "FAIL"}, [(subject, "CHECKLIST_ITEM_FAILED", "UNVERIFIED_DOCUMENT")]))
    a = _run(policy, outcomes)
    assert a.decision is Decision.REQUIRES_REVIEW  # even lopsided authority is not resolved without a rule
    assert a.conflicts[0].applicable_rules[0].startswith("NO_RULE")


def test_results_about_different_subjects_are_not_a_conflict(policy: EvidencePolicy) -> None:
    outcomes = _all_pass()
    outcomes[Analysis.RISK] = _done(Analysis.RISK, _result(
        Analysis.RISK, {"permit:WP-10231/risk": "FAIL"}, [("permit:WP-10231/risk", "RISK_HIGH", "OFFICIAL_RECORD")]))
    a = _run(policy, outcomes)
    assert a.conflicts == () and a.decision is Decision.NOT_RECOMMENDED  # no vote: three PASS do not outweigh it


@pytest.mark.parametrize(
    ("state", "code"),
    [(TaskState.FAILED, "TASK_FAILED"), (TaskState.TIMED_OUT, "TASK_TIMED_OUT"),
     (TaskState.CANCELLED, "TASK_CANCELLED"), (TaskState.NOT_RUN, "TASK_NOT_RUN")],
)
def test_failed_risk_task_is_partial_naming_the_risk_analysis(
    policy: EvidencePolicy, state: TaskState, code: str
) -> None:
    outcomes = _all_pass()
    outcomes[Analysis.RISK] = TaskOutcome(Analysis.RISK, state, "t-risk", "risk-agent",
                                          error_reason="risk-agent unreachable")
    a = _run(policy, outcomes)
    assert (a.decision, a.status, a.reason) == (Decision.INSUFFICIENT_EVIDENCE, OutcomeStatus.PARTIAL,
                                                "MISSING_ANALYSIS")
    (m,) = a.missing
    assert (m.analysis, m.agent_id, m.code) == ("risk", "risk-agent", code)
    assert str(m) == f"risk analysis (risk-agent): {code} — risk-agent unreachable"
    assert "risk analysis" in a.summary


def test_failed_result_is_missing_with_its_reason(policy: EvidencePolicy) -> None:
    outcomes = _all_pass()
    outcomes[Analysis.RISK] = _done(Analysis.RISK, common_pb2.AgentResult(
        task_id="t-risk", agent_id="risk-agent", status=common_pb2.RESULT_STATUS_FAILED,
        error_reason="CAPABILITY_DISABLED: risk.evaluate"))
    a = _run(policy, outcomes)
    assert a.decision is Decision.INSUFFICIENT_EVIDENCE
    assert a.missing[0].code == "RESULT_FAILED" and "CAPABILITY_DISABLED" in a.missing[0].detail


def test_lms_timeout_uncertainty_is_insufficient_evidence(policy: EvidencePolicy) -> None:
    outcomes = _all_pass()
    outcomes[Analysis.TRAINING] = _done(Analysis.TRAINING, _result(
        Analysis.TRAINING, {"worker:W-1006/NR-10": "UNKNOWN", "worker:W-1001/NR-10": "PASS"},
        [("worker:W-1001/NR-10", "TRAINING_VALID", "VERIFIED_INTEGRATION")],
        uncertain=[("LMS_TIMEOUT", "worker:W-1006/NR-10")], status=common_pb2.RESULT_STATUS_UNCERTAIN))
    a = _run(policy, outcomes)
    assert (a.decision, a.status) == (Decision.INSUFFICIENT_EVIDENCE, OutcomeStatus.PARTIAL)
    (m,) = a.missing
    assert m.analysis == "training" and m.code == "ANALYSIS_INCOMPLETE"
    assert "LMS_TIMEOUT on worker:W-1006/NR-10" in m.detail
    training = next(r for r in a.analyses if r.analysis == "training")
    assert training.verdict.value == "UNKNOWN" and not training.complete


def test_uncertainty_beside_a_pass_verdict_is_not_a_pass(policy: EvidencePolicy) -> None:
    outcomes = _all_pass()
    outcomes[Analysis.TRAINING] = _done(Analysis.TRAINING, _result(
        Analysis.TRAINING, {"worker:W-1001/NR-10": "PASS"},
        [("worker:W-1001/NR-10", "TRAINING_VALID", "VERIFIED_INTEGRATION")],
        uncertain=[("CERTIFICATE_CONFLICT", "worker:W-1001/NR-10")]))
    assert _run(policy, outcomes).decision is Decision.INSUFFICIENT_EVIDENCE


def test_definitive_fail_with_something_missing_is_not_recommended_and_partial(policy: EvidencePolicy) -> None:
    outcomes = _all_pass()
    outcomes[Analysis.TRAINING] = _done(Analysis.TRAINING, _result(
        Analysis.TRAINING, {"worker:W-1002/NR-10": "FAIL", "worker:W-1006/NR-10": "UNKNOWN"},
        [("worker:W-1002/NR-10", "TRAINING_EXPIRED", "VERIFIED_INTEGRATION")],
        uncertain=[("LMS_TIMEOUT", "worker:W-1006/NR-10")], status=common_pb2.RESULT_STATUS_PARTIAL))
    outcomes[Analysis.RISK] = TaskOutcome(Analysis.RISK, TaskState.TIMED_OUT, "t-risk", "risk-agent")
    a = _run(policy, outcomes)
    assert (a.decision, a.status) == (Decision.NOT_RECOMMENDED, OutcomeStatus.PARTIAL)
    assert {m.analysis for m in a.missing} == {"training", "risk"}


def test_unsupported_pass_is_not_evidence(policy: EvidencePolicy) -> None:
    outcomes = _all_pass()
    outcomes[Analysis.RISK] = _done(Analysis.RISK, _result(Analysis.RISK, {"permit:WP-10231/risk": "PASS"}, []))
    a = _run(policy, outcomes)
    assert a.decision is Decision.INSUFFICIENT_EVIDENCE
    assert "has no FACT with evidence" in a.missing[0].detail


def test_weak_fail_requires_review(policy: EvidencePolicy) -> None:
    outcomes = _all_pass()
    outcomes[Analysis.COMPLIANCE] = _done(Analysis.COMPLIANCE, _result(
        Analysis.COMPLIANCE, {"checklist:CL-2/I-4": "FAIL"},
        [("checklist:CL-2/I-4", "CHECKLIST_ITEM_FAILED", "UNVERIFIED_DOCUMENT")]))
    a = _run(policy, outcomes)
    assert (a.decision, a.reason) == (Decision.REQUIRES_REVIEW, "NON_DECISIVE_FAIL") and a.review_required


def test_definitive_fail_elsewhere_outranks_a_conflict_but_review_is_still_flagged(policy: EvidencePolicy) -> None:
    subject = "worker:W-1005/NR-35"
    outcomes = _all_pass()
    outcomes[Analysis.TRAINING] = _done(Analysis.TRAINING, _result(
        Analysis.TRAINING, {subject: "PASS"}, [(subject, "TRAINING_VALID", "VERIFIED_INTEGRATION")]))
    outcomes[Analysis.COMPLIANCE] = _done(Analysis.COMPLIANCE, _result(
        Analysis.COMPLIANCE, {subject: "FAIL"}, [(subject, "CHECKLIST_ITEM_FAILED", "OFFICIAL_RECORD")]))
    outcomes[Analysis.RISK] = _done(Analysis.RISK, _result(
        Analysis.RISK, {"permit:WP-10231/risk": "FAIL"}, [("permit:WP-10231/risk", "RISK_HIGH", "OFFICIAL_RECORD")]))
    a = _run(policy, outcomes)
    assert a.decision is Decision.NOT_RECOMMENDED and a.review_required
    assert a.blocking == ("risk-agent: RISK_HIGH on permit:WP-10231/risk",)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.result.update({"verdict": "PASS"}), "result.verdict"),  # disagrees with subjects
        (lambda r: r.result.update({"verdict": "MAYBE"}), "result.verdict"),
        (lambda r: r.result.update({"subjects": "all good"}), "result.subjects"),
        (lambda r: r.statements[0].evidence_indexes.append(7), "statements[0].evidence_indexes[1]"),
        (lambda r: setattr(r.statements[0], "code", "lower case"), "statements[0].code"),
    ],
)
def test_contract_violation_is_missing_never_repaired(policy: EvidencePolicy, mutate: Any, field: str) -> None:
    result = _result(Analysis.TRAINING, {"worker:W-1002/NR-10": "FAIL"},
                     [("worker:W-1002/NR-10", "TRAINING_EXPIRED", "VERIFIED_INTEGRATION")])
    mutate(result)
    with pytest.raises(ContractViolation) as err:
        check_result(result)
    assert err.value.field == field
    outcomes = _all_pass()
    outcomes[Analysis.TRAINING] = _done(Analysis.TRAINING, result)
    a = _run(policy, outcomes)
    assert a.decision is Decision.INSUFFICIENT_EVIDENCE  # the FAIL inside an unusable result is not used
    assert a.missing[0].code == "RESULT_CONTRACT_VIOLATION" and field in a.missing[0].detail


def test_result_for_another_task_is_rejected(policy: EvidencePolicy) -> None:
    outcomes = _all_pass()
    stolen = _risk_pass().result
    assert stolen is not None
    outcomes[Analysis.RISK] = TaskOutcome(Analysis.RISK, TaskState.COMPLETED, "t-other", "risk-agent", stolen)
    assert _run(policy, outcomes).missing[0].code == "RESULT_CONTRACT_VIOLATION"


def test_permit_not_found_stops_with_a_clear_answer(policy: EvidencePolicy) -> None:
    wp = _done(Analysis.WORK_PERMIT, _result(Analysis.WORK_PERMIT, {}, [], extra={"permit_found": False}))
    skipped = [TaskOutcome(x, TaskState.SKIPPED, f"t-{x}", AGENTS[x], error_reason="permit_found is false",
                           off_path=True) for x in EXPECTED[1:]]
    a = _aggregate([wp, *skipped], expected=EXPECTED, policy=policy, permit_id="WP-20001")
    assert (a.decision, a.status, a.reason) == (Decision.INSUFFICIENT_EVIDENCE, OutcomeStatus.SUCCEEDED,
                                                "PERMIT_NOT_FOUND")
    assert a.summary == "Permit WP-20001 was not found." and a.missing == ()
    pt = _aggregate([wp, *skipped], expected=EXPECTED, policy=policy, permit_id="WP-20001", language="pt")
    assert pt.summary == "A permissão WP-20001 não foi encontrada."


def test_failed_first_stage_means_nothing_completed(policy: EvidencePolicy) -> None:
    wp = TaskOutcome(Analysis.WORK_PERMIT, TaskState.FAILED, "t-wp", "work-permit-agent", error_reason="UNAVAILABLE")
    skipped = [TaskOutcome(x, TaskState.SKIPPED, f"t-{x}", AGENTS[x], error_reason="work-permit analysis failed")
               for x in EXPECTED[1:]]
    a = _aggregate([wp, *skipped], expected=EXPECTED, policy=policy)
    assert (a.decision, a.status, a.reason) == (Decision.INSUFFICIENT_EVIDENCE, OutcomeStatus.FAILED,
                                                "NO_ANALYSIS_COMPLETED")
    assert len(a.missing) == 4


def test_expected_analysis_without_outcome_or_with_two_is_missing(policy: EvidencePolicy) -> None:
    outcomes = _all_pass()
    del outcomes[Analysis.COMPLIANCE]
    a = _run(policy, outcomes)
    assert a.missing[0].analysis == "compliance" and a.missing[0].code == "TASK_NOT_RUN"
    both = [*_all_pass().values(), _risk_pass()]
    a = _aggregate(both, expected=EXPECTED, policy=policy)
    assert a.missing[0].code == "RESULT_AMBIGUOUS" and a.decision is Decision.INSUFFICIENT_EVIDENCE


def test_apply_to_execution(policy: EvidencePolicy) -> None:
    outcomes = _all_pass()
    outcomes[Analysis.RISK] = TaskOutcome(Analysis.RISK, TaskState.FAILED, "t-risk", "risk-agent")
    execution = supervisor_service_pb2.Execution(
        execution_id="exe-1", missing=[supervisor_service_pb2.MissingItem(text="stale")])
    _run(policy, outcomes).apply_to(execution)
    assert execution.decision == common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE
    assert execution.status == supervisor_service_pb2.EXECUTION_STATUS_PARTIAL
    assert [m.text for m in execution.missing] == ["risk analysis (risk-agent): TASK_FAILED — the task failed"]
    (item,) = execution.missing
    assert (item.kind, item.analysis, item.agent_id, item.detail) == (
        supervisor_service_pb2.MISSING_KIND_TASK_FAILED, "risk", "risk-agent", "the task failed")
    assert execution.reason == "MISSING_ANALYSIS" and execution.summary


def test_summary_in_portuguese(policy: EvidencePolicy) -> None:
    assert _run(policy, _all_pass(), language="pt").summary.startswith("Permissão WP-10231: liberação recomendada.")


def _status(outcome: TaskOutcome, permit_id: str = "", language: str = "en") -> Any:
    assert STATUS_PLAN.report is not None
    return report(outcome, STATUS_PLAN.report, decisions=WP_DOMAIN.outcomes,
                  conditions=tuple(STATUS_PLAN.conditions.values()), context="permit",
                  subjects={"permit": permit_id} if permit_id else {}, language=language)


def test_status_question_summary() -> None:
    a = _status(_work_permit_pass(), permit_id="WP-10231")
    assert a.decision is Decision.UNSPECIFIED and a.status is OutcomeStatus.SUCCEEDED
    assert a.summary == "Permit WP-10231: status PENDING_RELEASE, valid 2026-11-25 to 2026-12-20."
    assert _status(_work_permit_pass(), "WP-10231", "pt").summary == (
        "Permissão WP-10231: status PENDING_RELEASE, válida de 2026-11-25 a 2026-12-20.")
    failed = _status(TaskOutcome(Analysis.WORK_PERMIT, TaskState.TIMED_OUT, "t", "work-permit-agent",
                                 contract=WP_CONTRACT, template_task="permit"))
    assert failed.status is OutcomeStatus.FAILED and failed.missing[0].code == "TASK_TIMED_OUT"
    not_found = _done(Analysis.WORK_PERMIT, _result(Analysis.WORK_PERMIT, {}, [], extra={"permit_found": False}))
    assert _status(not_found, permit_id="WP-9").reason == "PERMIT_NOT_FOUND"
    assert _status(not_found, permit_id="WP-9").summary == "Permit WP-9 was not found."


# --- the evidence policy file ----------------------------------------------------------------------------

def test_shipped_policy(policy: EvidencePolicy) -> None:  # the work-permit definition's evidence rules
    assert policy.hierarchy("training")[0] == "GOVERNMENT_SOURCE"
    assert policy.hierarchy("unknown-domain") == policy.hierarchy("default")
    assert policy.is_decisive("training", "VERIFIED_INTEGRATION")
    assert not policy.is_decisive("training", "UNVERIFIED_DOCUMENT")
    assert not policy.is_decisive("training", "UNSPECIFIED")


_RULE = ("conflict_rules:\n  - {id: R, description: d, subjects: ['*'], hierarchy: %s, "
         "prevails_at_least: %s, yields_at_most: %s}\n")
_BASE = "hierarchies:\n  default: [GOVERNMENT_SOURCE, OFFICIAL_RECORD]\ndecisive_authority:\n  default: %s\n"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (_BASE % "OFFICIAL_RECORD" + _RULE % ("default", "OFFICIAL_RECORD", "GOVERNMENT_SOURCE"), "conflict_rules[0]"),
        (_BASE % "OFFICIAL_RECORD" + _RULE % ("nope", "GOVERNMENT_SOURCE", "OFFICIAL_RECORD"),
         "conflict_rules[0].hierarchy"),
        (_BASE % "MODEL_INFERENCE", "decisive_authority.default"),
        ("hierarchies:\n  x: [GOVERNMENT_SOURCE]\ndecisive_authority:\n  default: GOVERNMENT_SOURCE\n", "hierarchies"),
        ("hierarchies:\n  default: [RUMOUR]\ndecisive_authority: {}\n", "hierarchies.default[0]"),
    ],
)
def test_bad_evidence_policy(tmp_path: Path, text: str, field: str) -> None:
    cfg = tmp_path / "evidence.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as err:
        EvidencePolicy.load(cfg)
    assert err.value.field == field


# --- data conflicts: records of one source that disagree -----------------------------------------------------

def _conflicting(issuers: tuple[str | None, str | None]) -> TaskOutcome:
    """The training agent's answer when two LMS records of one NR-35 certificate disagree (COMPLETED vs REVOKED)."""
    subject = "worker:W-1001/NR-35"
    r = _result(Analysis.TRAINING, {"worker:W-1001/NR-10": "PASS", subject: "UNKNOWN"},
                [("worker:W-1001/NR-10", "TRAINING_VALID", "VERIFIED_INTEGRATION"),
                 (subject, "TRAINING_RECORD", "VERIFIED_INTEGRATION"),
                 (subject, "TRAINING_RECORD", "VERIFIED_INTEGRATION")],
                extra={"data_conflicts": [{"subject": subject, "sides": [
                    {"record_id": "TR-a", "verdict": "PASS", "state": "VALID", "issuer_id": issuers[0],
                     "evidence": [1]},
                    {"record_id": "TR-b", "verdict": "FAIL", "state": "REVOKED", "issuer_id": issuers[1],
                     "evidence": [2]}]}]})
    r.statements.append(common_pb2.Statement(kind=common_pb2.STATEMENT_KIND_INFERENCE, code="CONFLICTING_CERTIFICATES",
                                             subject=subject, evidence_indexes=[1, 2]))
    return _done(Analysis.TRAINING, r)


def test_a_data_conflict_decided_by_issuer_authority(policy: EvidencePolicy) -> None:
    # The Ministry of Labour (GOVERNMENT_SOURCE) revoked what SENAI (OFFICIAL_RECORD) records as completed.
    outcomes = {**_all_pass(), Analysis.TRAINING: _conflicting(("senai", "mte"))}
    a = _run(policy, outcomes)
    assert (a.decision, a.reason, a.missing) == (Decision.NOT_RECOMMENDED, "DEFINITIVE_FAIL", ())
    (conflict,) = a.conflicts
    assert (conflict.agent_a, conflict.agent_b) == ("training-agent", "training-agent")
    assert conflict.resolution.startswith("GOVERNMENT_SOURCE_PREVAILS: by issuer authority, the record(s) TR-b")
    assert [e.reference for e in conflict.evidence_a] == ["REC-1"] and [e.reference for e in conflict.evidence_b] == [
        "REC-2"]
    assert a.blocking == ("training-agent: DATA_CONFLICT_RESOLVED on worker:W-1001/NR-35",)
    # The other way round, SENAI's REVOKED does not stand against the Ministry's COMPLETED.
    passed = _run(policy, {**_all_pass(), Analysis.TRAINING: _conflicting(("mte", "senai"))})
    assert passed.decision is Decision.RECOMMENDED_FOR_RELEASE and passed.conflicts[0].resolution


@pytest.mark.parametrize(("issuers", "why"), [
    (("senai", "alves-training"), "does not decide"),       # OFFICIAL_RECORD vs VERIFIED_INTEGRATION: no rule
    (("senai", "senai"), "does not decide"),                # one issuer, one authority
    (("senai", None), "ISSUER_AUTHORITY: no configured authority"),
    (("senai", "some-school"), "ISSUER_AUTHORITY: no configured authority"),
])
def test_an_undecided_data_conflict_is_for_a_human_never_a_missing_analysis(
        policy: EvidencePolicy, issuers: tuple[str | None, str | None], why: str) -> None:
    a = _run(policy, {**_all_pass(), Analysis.TRAINING: _conflicting(issuers)})
    assert (a.decision, a.reason, a.missing) == (Decision.REQUIRES_REVIEW, "UNRESOLVED_CONFLICT", ())
    assert a.review_required and a.status is OutcomeStatus.SUCCEEDED
    (conflict,) = a.conflicts
    assert not conflict.resolution and any(why in rule for rule in conflict.applicable_rules)
    assert conflict.evidence_a and conflict.evidence_b
    assert "Data conflict on worker:W-1001/NR-35" in a.summary


def test_a_data_conflict_that_breaks_the_contract_is_missing(policy: EvidencePolicy) -> None:
    outcome = _conflicting(("senai", "mte"))
    assert outcome.result is not None
    outcome.result.result["data_conflicts"][0]["sides"][1]["verdict"] = "PASS"  # no FAIL side left
    a = _run(policy, {**_all_pass(), Analysis.TRAINING: outcome})
    assert a.decision is Decision.INSUFFICIENT_EVIDENCE
    assert any(m.code == "RESULT_CONTRACT_VIOLATION" and "data_conflicts" in m.detail for m in a.missing)


def test_issuer_authority_must_be_in_the_domains_hierarchy(tmp_path: Path) -> None:
    text = (default_domains_dir() / "work-permit.yaml").read_text()
    bad = tmp_path / "work-permit.yaml"
    bad.write_text(text.replace("mte: GOVERNMENT_SOURCE", "mte: DIVINE_REVELATION"))
    with pytest.raises(ConfigError) as caught:
        load_definition(bad, sensitive_fields=ProjectionConfig.load().sensitive_fields)
    assert caught.value.field == "evidence.issuer_authority.training.mte"
    assert caught.value.line == next(n for n, line in enumerate(bad.read_text().splitlines(), 1)
                                     if "DIVINE_REVELATION" in line)
