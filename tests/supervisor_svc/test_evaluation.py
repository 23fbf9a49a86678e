"""Evaluation in a sandbox (PRD §60–61): datasets, judging, the regression gate, the runner, and the onboarding's
evaluate step. The datasets themselves run here against each agent's rules in-process, their answers held to the
capability output schemas; tests/integration/test_onboarding.py runs them against the agents' real processes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format

from agentmesh import assertion, errors, grants, spiffe
from agentmesh.v1 import agent_registry_service_pb2 as reg_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from agentmesh.vocabulary import LifecycleStatus as S
from agentmesh.vocabulary import RiskLevel
from capability_svc.governance import evidence_of, sandbox_answer, sandbox_failure
from capability_svc.registry import CapabilityRegistry, default_capabilities_dir
from specialist_svc.agent import SpecialistAgent
from specialist_svc.rules import CallsInTurn, plain
from supervisor_svc import evaluation
from supervisor_svc.evaluation import DatasetError, DatasetNotFound, Evaluator, case_mismatches, gate_problems
from supervisor_svc.onboarding import (
    CapabilityFacts,
    EvaluationNotAllowed,
    EvaluationRequired,
    EvaluationRun,
    Onboarding,
    ReleaseManager,
)
from supervisor_svc.registry import AgentRegistry, default_agents_dir

SHIPPED = sorted(p.stem for p in default_agents_dir().glob("*.yaml"))
OLGA = assertion.UserIdentity("acme", "olga", ("agent-operator",), "s", "c")
ADAM = assertion.UserIdentity("acme", "adam", ("agent-approver",), "s", "c")


class SandboxClient(CallsInTurn):
    """The capability service's sandbox path, in-process: the first fitting answer, schema-checked."""

    def __init__(self, answers: Any, registry: CapabilityRegistry) -> None:
        self._answers, self._registry = answers, registry

    def call(self, capability_id: str, input: Any, idempotency_key: str | None = None) -> Any:
        answer = sandbox_answer(self._answers, capability_id, dict(input))
        if answer is None:
            raise errors.FailedPrecondition("unmocked", reason="SANDBOX_NOT_MOCKED")
        if answer.error_code:
            raise sandbox_failure(answer)
        output = json_format.MessageToDict(answer.output)
        manifest = self._registry.get(capability_id).manifest
        self._registry.validate_output(manifest, output)
        return plain(output), evidence_of(output, manifest.key)


@pytest.fixture(scope="module")
def capabilities(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CapabilityRegistry]:
    registry = CapabilityRegistry.load(default_capabilities_dir(), tmp_path_factory.mktemp("caps") / "c.db")
    yield registry
    registry.close()


@pytest.mark.parametrize("agent_id", SHIPPED)
def test_every_shipped_agent_has_a_dataset_its_rules_pass(agent_id: str, capabilities: CapabilityRegistry) -> None:
    dataset = evaluation.dataset_for(agent_id)
    assert dataset.agent_id == agent_id and len(dataset.cases) >= 3
    agent = SpecialistAgent.load(agent_id, today=lambda: dt.date(2026, 11, 30))
    for case in dataset.cases:
        task = common_pb2.AgentTask(task_id="t", execution_id="e", target_agent_id=agent_id, tenant_id="acme",
                                    user_id="olga", locale=case.locale)
        task.input.update(case.input)
        result = agent.run(task, SandboxClient(case.answers, capabilities))
        assert case_mismatches(case, result) == [], case.case_id
    # Every dataset also says what the agent does when a backend fails.
    assert any(c.answers and c.answers[0].error_code for c in dataset.cases)


def test_the_training_dataset_holds_the_seven_cases_of_section_61() -> None:
    cases = {c.case_id: c for c in evaluation.dataset_for("training-agent").cases}
    assert {"valid-certificate", "expired-certificate", "missing-training", "duplicate-records",
            "future-dated-certificate", "conflicting-certificates", "unknown-employee"} <= set(cases)
    assert cases["expired-certificate"].verdict == "FAIL" and cases["unknown-employee"].verdict == "UNKNOWN"


def _write(tmp: Path, data: dict[str, Any]) -> Path:
    path = tmp / f"{data.get('agent_id', 'x')}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


CASE = {"id": "one", "description": "d", "input": {"permit_id": "WP-1"},
        "answers": [{"capability": "risk.evaluate", "output": {"x": 1}}], "expect": {"verdict": "PASS"}}


@pytest.mark.parametrize(("change", "field"), [
    ({"cases": [CASE, CASE]}, "cases[1].id"),
    ({"cases": [{**CASE, "answers": [{"capability": "risk.evaluate", "output": {}, "error": {
        "code": "UNAVAILABLE", "reason": "X"}}]}]}, "cases[0].answers[0]"),
    ({"cases": [{**CASE, "answers": [{"capability": "risk.evaluate", "error": {"code": "INTERNAL", "reason": "X"}}]}]},
     "cases[0].answers[0].error.code"),
    ({"cases": [{**CASE, "answers": [{"capability": "risk.evaluate", "output": {"big": "x" * 20000}}]}]},
     "cases[0].answers"),
    ({"dataset_version": "one"}, "dataset_version"),
    ({"cases": []}, "cases"),
])
def test_a_bad_dataset_is_refused_naming_file_field_and_line(tmp_path: Path, change: dict[str, Any],
                                                             field: str) -> None:
    path = _write(tmp_path, {"agent_id": "risk-agent", "dataset_version": "1.0.0", "cases": [CASE], **change})
    with pytest.raises(DatasetError) as info:
        evaluation.load_dataset(path)
    assert info.value.field == field and str(path) in info.value.message


def test_no_dataset_is_not_found_and_another_agents_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFound):
        evaluation.dataset_for("ghost-agent")
    _write(tmp_path, {"agent_id": "risk-agent", "dataset_version": "1.0.0", "cases": [CASE]}).rename(
        tmp_path / "training-agent.yaml")
    with pytest.raises(DatasetError):
        evaluation.dataset_for("training-agent", tmp_path)


def _result(verdict: str, *, evidence: bool = True, status: int = common_pb2.RESULT_STATUS_SUCCESS,
            ) -> common_pb2.AgentResult:
    result = common_pb2.AgentResult(status=status, statements=[common_pb2.Statement(
        kind=common_pb2.STATEMENT_KIND_FACT, code="C", subject="permit:WP-1/risk", evidence_indexes=[0])])
    result.result.update({"verdict": verdict, "subjects": {"permit:WP-1/risk": verdict}})
    if evidence:
        result.evidence.add(source="s", reference="r")
    return result


def test_a_case_says_every_expectation_that_does_not_hold(tmp_path: Path) -> None:
    case = evaluation.load_dataset(_write(tmp_path, {"agent_id": "risk-agent", "dataset_version": "1.0.0", "cases": [{
        **CASE, "expect": {"status": "SUCCESS", "verdict": "PASS", "result": {"subjects": {"permit:WP-1/risk": "PASS"}},
                           "statements": [{"kind": "FACT", "subject": "permit:WP-1/risk"}]}}]})).cases[0]
    assert case_mismatches(case, _result("PASS")) == []
    wrong = case_mismatches(case, _result("FAIL", evidence=False, status=common_pb2.RESULT_STATUS_PARTIAL))
    assert [m.split(":")[0] for m in wrong] == ["status", "result.verdict", "result.subjects.permit", "evidence"]


def _evaluation(version: str, passed: dict[str, bool]) -> reg_pb2.AgentEvaluation:
    score = sum(passed.values()) / len(passed)
    return reg_pb2.AgentEvaluation(version=version, score=score, cases=[
        reg_pb2.EvaluationCaseResult(case_id=k, passed=v) for k, v in passed.items()])


def test_the_gate_holds_only_without_regression_and_at_the_threshold() -> None:
    base = _evaluation("1.0.0", {"a": True, "b": True, "c": False})
    assert gate_problems(_evaluation("1.1.0", {"a": True, "b": True, "c": True}), 1.0, base) == []
    assert gate_problems(_evaluation("1.1.0", {"a": True, "b": True, "c": False}), 0.6, base) == []
    problems = gate_problems(_evaluation("1.1.0", {"a": True, "b": False, "c": True}), 0.6, base)
    assert problems == ["case b passed on 1.0.0 and fails now"]
    assert gate_problems(_evaluation("1.1.0", {"a": True, "b": False, "c": False}), 0.5, base) == [
        "score 0.33 is below the dataset's threshold 0.50", "score 0.33 is below 1.0.0's 0.67",
        "case b passed on 1.0.0 and fails now"]


def test_the_runner_sends_each_case_under_a_signed_sandbox_grant_and_reports_failures_as_such() -> None:
    key = Ed25519PrivateKey.generate()
    evaluator = Evaluator(identity=spiffe.service("supervisor"), signer=grants.GrantSigner(key))
    manifest = SpecialistAgent.load("training-agent").manifest
    dataset = evaluation.dataset_for("training-agent")
    seen: list[spec_pb2.RunTaskRequest] = []

    def run_task(request: spec_pb2.RunTaskRequest, timeout_s: float) -> common_pb2.AgentResult:
        seen.append(request)
        if len(seen) == 2:
            raise errors.Unavailable("down", reason="UNAVAILABLE")
        return _result("PASS")

    ev = evaluator.run(manifest, dataset, run_task, tenant_id="acme", user_id="olga")
    grant = grants.verify(seen[0].grant, {grants.key_id(key.public_key()): key.public_key()},
                          now=dt.datetime.now(dt.UTC))
    assert grant.sandbox and list(grant.sandbox_answers) == list(dataset.cases[0].answers)
    assert grant.audience == "spiffe://agentmesh.local/agent/training-agent" and grant.tenant_id == "acme"
    assert seen[0].task.target_agent_id == "training-agent" and seen[0].task.execution_id.startswith("evaluation-")
    assert ev.total_cases == len(dataset.cases) and not ev.cases[1].passed
    assert "the task failed: UNAVAILABLE" in ev.cases[1].mismatches[0]

    def down(request: spec_pb2.RunTaskRequest, timeout_s: float) -> common_pb2.AgentResult:
        raise errors.Unavailable("down", reason="UNAVAILABLE")

    with pytest.raises(errors.Unavailable) as info:
        evaluator.run(manifest, dataset, down, tenant_id="acme", user_id="olga")
    assert info.value.reason == "AGENT_UNAVAILABLE"


# --- the onboarding's evaluate step ------------------------------------------------------------------

CAPS = [CapabilityFacts("training.getStatus", "2.1.0", S.ACTIVE, RiskLevel.LOW, False, False, False)]


def _policy(op: str, user: assertion.UserIdentity, key: str, subject: str) -> tuple[bool, list[str], str]:
    if op == "APPROVE_AGENT":
        return "agent-approver" in user.roles and subject != user.user_id, ["x"], "d"
    return bool({"agent-operator", "agent-approver"} & set(user.roles)), ["x"], "d"


@pytest.fixture()
def onboarding(tmp_path: Path) -> Iterator[tuple[Onboarding, list[dict[str, Any]]]]:
    audit: list[dict[str, Any]] = []
    with AgentRegistry(tmp_path / "agents.db") as registry:
        ob = Onboarding(tmp_path / "lifecycle.db", registry, lambda: ReleaseManager(CAPS), authorize=_policy,
                        audit=lambda event, **f: audit.append({"event": event, **f}))
        yield ob, audit
        ob.close()


def _register(ob: Onboarding, version: str) -> None:
    data = yaml.safe_load((default_agents_dir() / "training-agent.yaml").read_text())
    data["version"] = version
    ob.register(OLGA, data, "127.0.0.1:7600", "spiffe://agentmesh.local/agent/training-agent")
    for status in (S.VALIDATING, S.EVALUATING):
        ob.transition(OLGA, "training-agent", version, status, "go")


def _run(passed: bool, seen: list[Any] | None = None) -> Any:
    def run(record: Any, baseline: Any) -> EvaluationRun:
        if seen is not None:
            seen.append((record.key, baseline[0] if baseline else None))
        return EvaluationRun(b"evaluation-" + record.version.encode(), passed, ("score=1.0",),
                             () if passed else ("case x fails",))
    return run


def test_approval_needs_a_passed_evaluation_kept_and_audited_before_it_counts(onboarding: Any) -> None:
    ob, audit = onboarding
    _register(ob, "1.1.0")
    with pytest.raises(EvaluationRequired):
        ob.transition(ADAM, "training-agent", "1.1.0", S.APPROVED, "ok")
    seen: list[Any] = []
    blob, record = ob.evaluate(OLGA, "training-agent", "1.1.0", _run(True, seen))
    assert blob == b"evaluation-1.1.0" and record.status is S.EVALUATING
    assert ob.latest_evaluation("training-agent", "1.1.0") == (b"evaluation-1.1.0", True)
    evaluated = [a for a in audit if "AGENT_VERSION_EVALUATED" in a.get("reason_codes", [])]
    assert evaluated[-1]["first"] is True and "gate=PASSED" in evaluated[-1]["reason_codes"]
    assert ob.transition(ADAM, "training-agent", "1.1.0", S.APPROVED, "ok")[0].status is S.APPROVED
    # The next version is compared with this one's evaluation.
    _register(ob, "1.2.0")
    ob.evaluate(OLGA, "training-agent", "1.2.0", _run(True, seen))
    assert seen == [("training-agent@1.1.0", None), ("training-agent@1.2.0", "1.1.0")]


def test_a_failed_gate_sends_an_evaluating_version_back_to_draft(onboarding: Any) -> None:
    ob, audit = onboarding
    _register(ob, "1.1.0")
    _, record = ob.evaluate(OLGA, "training-agent", "1.1.0", _run(False))
    assert record.status is S.DRAFT and record.problems == ("case x fails",)
    assert "gate=FAILED" in [a for a in audit if "AGENT_VERSION_EVALUATED" in a.get("reason_codes", [])][-1][
        "reason_codes"]
    with pytest.raises(EvaluationNotAllowed):
        ob.evaluate(OLGA, "training-agent", "1.1.0", _run(True))


def test_an_evaluation_that_cannot_be_recorded_or_run_counts_for_nothing(tmp_path: Path) -> None:
    with AgentRegistry(tmp_path / "agents.db") as registry:
        down = {"on": False}

        def audit(event: str, **fields: Any) -> None:
            if down["on"] and fields.get("first"):
                raise errors.Unavailable("audit down", reason="AUDIT_UNAVAILABLE")

        ob = Onboarding(tmp_path / "l.db", registry, lambda: ReleaseManager(CAPS), authorize=_policy, audit=audit)
        _register(ob, "1.1.0")
        down["on"] = True
        with pytest.raises(errors.Unavailable):
            ob.evaluate(OLGA, "training-agent", "1.1.0", _run(True))
        assert ob.latest_evaluation("training-agent", "1.1.0") is None
        down["on"] = False

        def unreachable(record: Any, baseline: Any) -> EvaluationRun:
            raise errors.Unavailable("no case answered", reason="AGENT_UNAVAILABLE")

        with pytest.raises(errors.Unavailable):
            ob.evaluate(OLGA, "training-agent", "1.1.0", unreachable)
        assert ob.latest_evaluation("training-agent", "1.1.0") is None
        assert ob.get("training-agent", "1.1.0").status is S.EVALUATING
        ob.close()
