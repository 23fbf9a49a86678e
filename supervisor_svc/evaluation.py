"""Evaluating an agent version in a sandbox (PRD §60–61).

Each agent has an evaluation **dataset**: a versioned data file
``supervisor_svc/evaluations/<agent-id>.yaml`` (format below). Each case is one
task for the agent — its input, the answers its capability calls get, and what
the result must say. :class:`Evaluator` sends every case, as a real
``RunTask``, to the version's own process under a **sandbox grant**: a grant
signed like any other, marked ``sandbox`` and carrying the case's answers.
The capability service never runs a capability under it — it answers each call
from those answers, refuses an unmocked one (``SANDBOX_NOT_MOCKED``) and one of
a capability the mesh has not registered, claims no idempotency key and asks
no policy; the model service refuses it (``SANDBOX_NO_MODEL``). So an
evaluation touches no production binding, persists nothing but its audit
records, and mutates nothing.

The outcome is a score (passed / all cases) and a **regression gate** against
the baseline, the latest evaluation of the agent's highest lower version:

* every case passes (or the dataset's ``pass_threshold`` is met),
* the score is not below the baseline's,
* no case the baseline passed fails now.

Dataset format::

    agent_id: training-agent
    dataset_version: 1.0.0          # semver of the dataset itself
    pass_threshold: 1.0             # optional, in (0, 1]
    cases:
      - id: expired-certificate     # unique, [a-z0-9-]
        description: a certificate that ended before the permit window
        objective: ...              # optional
        locale: pt                  # optional (default pt)
        input: {...}                # the task input, checked by the agent's own input schema
        answers:                    # the capability answers of this case, first fit wins
          - capability: training.getStatus
            input: {worker_id: W-1001}      # optional: the call's input must hold these
            output: {...}                   # or: error: {code: UNAVAILABLE, reason: LMS_UNAVAILABLE}
        expect:
          status: SUCCESS           # optional ResultStatus name without its prefix
          verdict: FAIL             # optional: result.verdict
          result: {...}             # optional: fields the result must hold (nested, exact values)
          statements:               # optional: each must match one statement of the result
            - {kind: FACT, subject: worker:W-1001/NR-35}
          evidence: true            # default true: a result with statements cites evidence

A failed case never stops the run; a version whose process answers no case is
``AGENT_UNAVAILABLE`` (nothing is recorded as its evaluation then: a version
that could not be reached was not evaluated).
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from google.protobuf import struct_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh import errors, grants, spiffe, validation
from agentmesh.agent_manifest import AgentManifest
from agentmesh.structs import struct_dict
from agentmesh.v1 import agent_registry_service_pb2 as registry_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from supervisor_svc._datafile import Document, load_document, validation_error
from supervisor_svc.errors import ConfigError, SupervisorError
from supervisor_svc.onboarding import AgentVersionRecord, EvaluationRun, EvaluationRunner

__all__ = [
    "Dataset",
    "DatasetNotFound",
    "EvaluationCase",
    "Evaluator",
    "case_mismatches",
    "datasets_dir",
    "gate_problems",
    "load_dataset",
    "runner",
]

_CASE_ID = r"^[a-z0-9][a-z0-9-]{0,63}$"
_SEMVER = r"^[0-9]+\.[0-9]+\.[0-9]+$"
_MAX_ANSWER_BYTES = validation.MAX_BYTES - 2048
"""The answers travel in the signed grant, whose bytes the mesh caps (agentmesh.validation.MAX_BYTES)."""
_FAILURE_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "NOT_FOUND", "PERMISSION_DENIED", "FAILED_PRECONDITION",
                  "RESOURCE_EXHAUSTED", "INVALID_ARGUMENT")


class DatasetNotFound(SupervisorError):
    """The agent has no evaluation dataset."""

    code = errors.NotFound.code
    default_reason = "EVALUATION_DATASET_NOT_FOUND"


class DatasetError(ConfigError):
    """A dataset file that does not follow the format."""

    default_reason = "EVALUATION_DATASET_INVALID"


def datasets_dir() -> Path:
    """Where the shipped datasets live."""
    return Path(__file__).resolve().parent / "evaluations"


# --- the file format -------------------------------------------------------------------------------


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)


class _Failure(_Strict):
    code: Literal[_FAILURE_CODES]  # type: ignore[valid-type]
    reason: Annotated[str, pydantic.StringConstraints(pattern=r"^[A-Z][A-Z0-9_]{0,63}$")]


class _Answer(_Strict):
    capability: Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z][A-Za-z0-9]*(\.[a-z][A-Za-z0-9]*)+$")]
    input: dict[str, Any] = {}
    output: dict[str, Any] | None = None
    error: _Failure | None = None

    @pydantic.model_validator(mode="after")
    def _one(self) -> _Answer:
        if (self.output is None) == (self.error is None):
            raise ValueError("an answer has exactly one of output and error")
        return self


class _Expect(_Strict):
    status: Literal["SUCCESS", "FAILED", "UNCERTAIN", "PARTIAL", "WAITING"] | None = None
    verdict: str | None = None
    result: dict[str, Any] = {}
    statements: list[dict[str, str]] = []
    evidence: bool = True


class _Case(_Strict):
    id: Annotated[str, pydantic.StringConstraints(pattern=_CASE_ID)]
    description: Annotated[str, pydantic.StringConstraints(min_length=1, max_length=500)]
    objective: str = ""
    locale: str = "pt"
    input: dict[str, Any]
    answers: list[_Answer] = []
    expect: _Expect


class _Dataset(_Strict):
    agent_id: str
    dataset_version: Annotated[str, pydantic.StringConstraints(pattern=_SEMVER)]
    pass_threshold: Annotated[float, pydantic.Field(gt=0, le=1)] = 1.0
    cases: Annotated[list[_Case], pydantic.Field(min_length=1)]


@dataclass(frozen=True)
class EvaluationCase:
    """One case: a task, its capability answers, what the result must say."""

    case_id: str
    description: str
    objective: str
    locale: str
    input: dict[str, Any]
    answers: tuple[common_pb2.SandboxAnswer, ...]
    status: str | None
    verdict: str | None
    result: dict[str, Any]
    statements: tuple[dict[str, str], ...]
    evidence: bool


@dataclass(frozen=True)
class Dataset:
    """One agent's versioned evaluation cases."""

    agent_id: str
    dataset_version: str
    pass_threshold: float
    cases: tuple[EvaluationCase, ...]
    source: str


def _struct(data: Mapping[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(data)
    return out


def _answer(a: _Answer) -> common_pb2.SandboxAnswer:
    return common_pb2.SandboxAnswer(
        capability_id=a.capability, input=_struct(a.input),
        output=_struct(a.output or {}), error_code=a.error.code if a.error else "",
        error_reason=a.error.reason if a.error else "")


def load_dataset(path: Path) -> Dataset:
    """A dataset file, validated.

    Raises:
        DatasetError: naming the file, the field and the line.
    """
    doc: Document = load_document(path, error=DatasetError)
    try:
        parsed = _Dataset.model_validate(doc.data)
    except pydantic.ValidationError as exc:
        raise validation_error(exc, doc, str(path), error=DatasetError) from None
    seen: set[str] = set()
    for i, case in enumerate(parsed.cases):
        if case.id in seen:
            raise DatasetError(f"duplicate case id {case.id!r}", file=str(path), field=f"cases[{i}].id",
                               line=doc.line_of(("cases", i, "id")))
        seen.add(case.id)
        size = sum(len(_answer(a).SerializeToString()) for a in case.answers)
        if size > _MAX_ANSWER_BYTES:
            raise DatasetError(f"the answers of case {case.id!r} take {size} bytes; a sandbox grant carries at most "
                               f"{_MAX_ANSWER_BYTES}", file=str(path), field=f"cases[{i}].answers",
                               line=doc.line_of(("cases", i, "answers")))
    return Dataset(
        agent_id=parsed.agent_id, dataset_version=parsed.dataset_version, pass_threshold=parsed.pass_threshold,
        source=str(path),
        cases=tuple(EvaluationCase(
            case_id=c.id, description=c.description, objective=c.objective or f"evaluation case {c.id}",
            locale=c.locale, input=dict(c.input), answers=tuple(_answer(a) for a in c.answers),
            status=c.expect.status, verdict=c.expect.verdict, result=dict(c.expect.result),
            statements=tuple(c.expect.statements), evidence=c.expect.evidence) for c in parsed.cases))


def dataset_for(agent_id: str, directory: Path | None = None) -> Dataset:
    """The dataset of ``agent_id``.

    Raises:
        DatasetNotFound: field ``agent_id``.
        DatasetError: the file is not a valid dataset, or is another agent's.
    """
    path = (directory or datasets_dir()) / f"{agent_id}.yaml"
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,63}", agent_id) or not path.is_file():
        raise DatasetNotFound(f"agent {agent_id!r} has no evaluation dataset ({path.name})", field="agent_id")
    dataset = load_dataset(path)
    if dataset.agent_id != agent_id:
        raise DatasetError(f"the dataset names agent {dataset.agent_id!r}", file=str(path), field="agent_id")
    return dataset


# --- judging ---------------------------------------------------------------------------------------


def _holds(expected: Any, actual: Any, path: str, out: list[str]) -> None:
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            out.append(f"{path}: expected an object, got {actual!r}"[:300])
            return
        for key, value in expected.items():
            if key not in actual:
                out.append(f"{path}.{key}: missing (expected {value!r})"[:300])
            else:
                _holds(value, actual[key], f"{path}.{key}", out)
    elif expected != actual:
        out.append(f"{path}: expected {expected!r}, got {actual!r}"[:300])


def _statement(s: common_pb2.Statement) -> dict[str, str]:
    return {"kind": common_pb2.StatementKind.Name(s.kind).removeprefix("STATEMENT_KIND_"), "code": s.code,
            "subject": s.subject, "text": s.text}


def case_mismatches(case: EvaluationCase, result: common_pb2.AgentResult) -> list[str]:
    """What the result says that the case did not expect (empty: the case passed)."""
    out: list[str] = []
    status = common_pb2.ResultStatus.Name(result.status).removeprefix("RESULT_STATUS_")
    if case.status and status != case.status:
        out.append(f"status: expected {case.status}, got {status}"
                   + (f" ({result.error_reason})" if result.error_reason else ""))
    data = struct_dict(result.result)
    if case.verdict is not None and data.get("verdict") != case.verdict:
        out.append(f"result.verdict: expected {case.verdict}, got {data.get('verdict')!r}")
    _holds(case.result, data, "result", out)
    statements = [_statement(s) for s in result.statements]
    for wanted in case.statements:
        if not any(all(s.get(k) == v for k, v in wanted.items()) for s in statements):
            out.append(f"statements: none matches {wanted}"[:300])
    if case.evidence and result.statements and not result.evidence:
        out.append("evidence: the result makes statements but cites no evidence")
    return out


def gate_problems(evaluation: registry_pb2.AgentEvaluation, threshold: float,
                  baseline: registry_pb2.AgentEvaluation | None) -> list[str]:
    """Why the regression gate fails (empty: it holds)."""
    problems: list[str] = []
    if evaluation.score + 1e-9 < threshold:
        problems.append(f"score {evaluation.score:.2f} is below the dataset's threshold {threshold:.2f}")
    if baseline is not None:
        if evaluation.score + 1e-9 < baseline.score:
            problems.append(f"score {evaluation.score:.2f} is below {baseline.version}'s {baseline.score:.2f}")
        now = {c.case_id: c.passed for c in evaluation.cases}
        for case in baseline.cases:
            if case.passed and now.get(case.case_id) is False:
                problems.append(f"case {case.case_id} passed on {baseline.version} and fails now")
    return problems


# --- running ---------------------------------------------------------------------------------------

RunTask = Callable[[spec_pb2.RunTaskRequest, float], common_pb2.AgentResult]
"""Sends one RunTask to the version's process; raises a MeshError when the call fails."""


@dataclass(frozen=True)
class Evaluator:
    """Runs a dataset against one agent version, each case under a sandbox grant."""

    identity: spiffe.SpiffeId
    signer: grants.GrantSigner
    timeout_s: float = 10.0

    def _request(self, manifest: AgentManifest, case: EvaluationCase, tenant_id: str, user_id: str,
                 run_id: str) -> spec_pb2.RunTaskRequest:
        task_id = f"eval-{uuid.uuid4().hex[:16]}"
        execution_id = f"evaluation-{run_id}"
        deadline = Timestamp()
        deadline.FromDatetime(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=self.timeout_s))
        task = common_pb2.AgentTask(
            task_id=task_id, execution_id=execution_id, source_agent_id="supervisor",
            target_agent_id=manifest.agent_id, tenant_id=tenant_id, user_id=user_id, objective=case.objective,
            input=_struct(case.input), required_capabilities=manifest.capabilities, deadline=deadline, depth=1,
            correlation_id=f"{run_id}:{case.case_id}", locale=case.locale)
        signed = self.signer.issue(
            issuer=str(self.identity), audience=str(spiffe.agent(manifest.agent_id)), execution_id=execution_id,
            task_id=task_id, tenant_id=tenant_id, user_id=user_id, assertion_digest="",
            capabilities=manifest.capabilities, agent_risk_profile=manifest.risk_profile.to_proto(),
            ttl=dt.timedelta(seconds=self.timeout_s + 30))
        body = grants.decode(signed)
        body.sandbox = True
        body.sandbox_answers.extend(case.answers)
        signed = self.signer.sign(body)
        principal = common_pb2.AgentPrincipal(
            agent_id=manifest.agent_id, agent_version=manifest.version, execution_id=execution_id,
            parent_agent_id="supervisor",
            delegation_chain=[f"user:{tenant_id}/{user_id}", f"svc:{self.identity.name}",
                              f"agent:{manifest.agent_id}"], grants=[signed])
        return spec_pb2.RunTaskRequest(task=task, grant=signed, principal=principal,
                                       trace=common_pb2.TraceContext(execution_id=execution_id,
                                                                     correlation_id=task.correlation_id))

    def run(self, manifest: AgentManifest, dataset: Dataset, run_task: RunTask, *, tenant_id: str,
            user_id: str) -> registry_pb2.AgentEvaluation:
        """Every case, in order; the evaluation without its gate (see :func:`gate_problems`).

        Raises:
            errors.Unavailable: ``AGENT_UNAVAILABLE`` — the version's process answered no case.
        """
        run_id = uuid.uuid4().hex[:12]
        results: list[registry_pb2.EvaluationCaseResult] = []
        unreachable: list[str] = []
        for case in dataset.cases:
            row = registry_pb2.EvaluationCaseResult(case_id=case.case_id, description=case.description,
                                                    expected_verdict=case.verdict or "")
            try:
                result = run_task(self._request(manifest, case, tenant_id, user_id, run_id), self.timeout_s)
            except errors.MeshError as err:
                if isinstance(err, errors.Unavailable | errors.DeadlineExceeded):
                    unreachable.append(case.case_id)
                row.actual_verdict = err.reason
                row.mismatches.append(f"the task failed: {err.code.name} {err.reason}: {err.message}"[:300])
            else:
                verdict = struct_dict(result.result).get("verdict")
                row.actual_verdict = str(verdict) if verdict else result.error_reason.split(":", 1)[0]
                row.mismatches.extend(case_mismatches(case, result))
            row.passed = not row.mismatches
            results.append(row)
        if len(unreachable) == len(dataset.cases):
            raise errors.Unavailable(f"{manifest.agent_id}@{manifest.version} answered no evaluation case",
                                     reason="AGENT_UNAVAILABLE")
        passed = sum(1 for r in results if r.passed)
        evaluation = registry_pb2.AgentEvaluation(
            agent_id=manifest.agent_id, version=manifest.version, dataset_version=dataset.dataset_version,
            score=round(passed / len(results), 4), passed_cases=passed, total_cases=len(results), cases=results)
        evaluation.evaluated_at.FromDatetime(dt.datetime.now(dt.UTC))
        return evaluation


def runner(evaluator: Evaluator, reach: Callable[[AgentVersionRecord], RunTask], *, tenant_id: str, user_id: str,
           directory: Path | None = None) -> EvaluationRunner:
    """The onboarding's :data:`~supervisor_svc.onboarding.EvaluationRunner`: the agent's dataset, run against the
    version's process (``reach``), judged by the gate against the baseline."""

    def run(record: AgentVersionRecord, baseline: tuple[str, bytes] | None) -> EvaluationRun:
        dataset = dataset_for(record.agent_id, directory)
        evaluation = evaluator.run(record.manifest, dataset, reach(record), tenant_id=tenant_id, user_id=user_id)
        base = registry_pb2.AgentEvaluation.FromString(baseline[1]) if baseline else None
        problems = gate_problems(evaluation, dataset.pass_threshold, base)
        if base is not None:
            evaluation.baseline_version = base.version
            evaluation.baseline_score = base.score
        evaluation.gate_passed = not problems
        evaluation.gate_problems.extend(problems)
        evaluation.evaluated_by = f"user:{tenant_id}/{user_id}"
        summary = (f"dataset={dataset.agent_id}@{dataset.dataset_version}", f"score={evaluation.score:.4f}",
                   f"cases={evaluation.passed_cases}/{evaluation.total_cases}",
                   f"baseline={base.version if base else 'none'}",
                   *[f"case_failed={c.case_id}" for c in evaluation.cases if not c.passed])
        return EvaluationRun(evaluation.SerializeToString(deterministic=True), not problems, summary,
                             tuple(problems))

    return run
