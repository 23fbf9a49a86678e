"""training-agent 2.0.0 (Node.js, agents/node-training) answers exactly as training-agent 1.0.0 (Python).

Each case runs the Python agent on a task, recording every capability answer it got (the real
capability runtime on the demo world, or the schema-checked fakes); then the Node.js agent runs the
same RunTaskRequest, as bytes, against those answers, as bytes (agents/node-training/tools/replay.js).
Its AgentResult must be the Python one field for field — status, result Struct, evidence, statement
kinds, codes, subjects, texts (English and Portuguese), evidence indexes, confidence, error_reason,
requested handoffs, capability version — apart from completed_at and the agent's own version and
runtime. Refusals of bad input must name the same reason and field. Node is required (scripts/bootstrap
installs it and the agent's dependencies).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from agentmesh import errors
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import common_pb2 as c
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from specialist_svc.rules import CallsInTurn

from .conftest import load_agent, refused, task_for
from .test_training import HOSTILE_ISSUER, INPUT, lms, record, worker_training

AGENT = "training-agent"
REPO = Path(__file__).resolve().parents[2]
REPLAY = REPO / "agents" / "node-training" / "tools" / "replay.js"
DEMO_PERMITS = [f"WP-102{n}" for n in range(31, 50)]


class Recorder(CallsInTurn):
    """A capability client that remembers every answer (or error) of the client it wraps."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.answers: list[dict[str, Any]] = []

    def call(self, capability_id: str, input: Mapping[str, Any], idempotency_key: str | None = None
             ) -> tuple[dict[str, Any], list[c.EvidenceReference]]:
        entry: dict[str, Any] = {"capability": capability_id, "input": json.loads(json.dumps(dict(input)))}
        self.answers.append(entry)
        try:
            output, evidence = self.client.call(capability_id, input, idempotency_key)
        except errors.MeshError as err:
            entry["error"] = {"code": err.code.name, "reason": err.reason, "message": err.message}
            raise
        response = cap_pb2.InvokeCapabilityResponse(evidence=evidence)
        response.output.update(output)
        entry["response"] = base64.b64encode(response.SerializeToString()).decode()
        return output, evidence


def _request(task: c.AgentTask, handoffs: Sequence[c.HandoffOutcome]) -> spec_pb2.RunTaskRequest:
    grant = c.TaskGrant(task_id=task.task_id, tenant_id=task.tenant_id, execution_id=task.execution_id,
                        audience=f"spiffe://agentmesh.local/agent/{AGENT}", capabilities=["training.getStatus"])
    return spec_pb2.RunTaskRequest(task=task, grant=c.SignedTaskGrant(grant=grant.SerializeToString()),
                                   handoff_outcomes=handoffs)


def _node(request: spec_pb2.RunTaskRequest, answers: list[dict[str, Any]]) -> dict[str, Any]:
    node = shutil.which("node")
    assert node, "node is not installed (scripts/bootstrap installs it)"
    payload = json.dumps({"request": base64.b64encode(request.SerializeToString()).decode(), "answers": answers})
    run = subprocess.run([node, str(REPLAY)], input=payload, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    out: dict[str, Any] = json.loads(run.stdout)
    return out


def _comparable(result: c.AgentResult) -> c.AgentResult:
    copy = c.AgentResult()
    copy.CopyFrom(result)
    copy.ClearField("completed_at")
    copy.versions.CopyFrom(c.VersionStamp(capability_version=result.versions.capability_version))
    return copy


def same_answer(data: Mapping[str, Any], client: Any, *, locale: str = "",
                handoffs: Callable[[c.RequestedAction], c.HandoffOutcome] | None = None) -> c.AgentResult:
    """Runs both agents on one task (and, after a WAITING answer, again with the handoffs' outcomes); asserts
    they agree; returns the Python agent's final result."""
    agent, task = load_agent(AGENT), task_for(AGENT, data, locale=locale)
    outcomes: list[c.HandoffOutcome] = []
    while True:
        recorder = Recorder(client)
        try:
            expected = agent.run(task, recorder, outcomes, again=bool(outcomes))
        except errors.InvalidArgument as err:
            node = _node(_request(task, outcomes), recorder.answers)
            assert node.get("refusal") == {"code": "INVALID_ARGUMENT", "reason": err.reason, "field": err.field}, node
            assert node["calls"] == []
            raise
        node = _node(_request(task, outcomes), recorder.answers)
        assert "response" in node, node
        got = spec_pb2.RunTaskResponse.FromString(base64.b64decode(node["response"])).result
        assert got.versions.agent_version == "2.0.0" and got.versions.runtime_version.startswith(
            "agentmesh-node-training/2.0.0")
        assert [[cap, inp] for cap, inp in node["calls"]] == [[a["capability"], a["input"]] for a in recorder.answers]
        if _comparable(got) != _comparable(expected):  # name what differs
            for name in ("statements", "evidence", "result"):
                theirs, ours = (json_format.MessageToDict(_comparable(r)).get(name) for r in (expected, got))
                if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
                    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
                        assert a == b, f"{name}[{i}]"
                assert ours == theirs, name
            assert json_format.MessageToDict(_comparable(got)) == json_format.MessageToDict(_comparable(expected))
        assert _comparable(got) == _comparable(expected)
        if expected.status != c.RESULT_STATUS_WAITING or outcomes:
            return expected
        outcomes = [(handoffs or refused)(a) for a in expected.requested_actions]


@pytest.mark.parametrize("permit", DEMO_PERMITS)
def test_every_demo_permit(permit: str, permit_input: Any, local: Any) -> None:
    same_answer(permit_input(permit, AGENT), local(AGENT))


@pytest.mark.parametrize("permit", ["WP-10232", "WP-10237", "WP-10238", "WP-10234", "WP-10236"])
def test_every_statement_in_portuguese(permit: str, permit_input: Any, local: Any) -> None:
    result = same_answer(permit_input(permit, AGENT), local(AGENT), locale="pt-BR")
    assert result.statements


@pytest.mark.parametrize("rec", [
    record("TR-1", completed="2025-12-10", until="2026-12-10"),
    record("TR-1", completed="2026-11-30", until="2027-12-10"),
    record("TR-1", until="2026-12-09"),
    record("TR-1", until="2026-11-29"),
    record("TR-1", completed="2026-12-01"),
    record("TR-1", status="REVOKED"),
    record("TR-1", status="EXPIRED"),
    record("TR-1", status="IN_PROGRESS", completed=None, until=None),
    record("TR-1", completed=None),
    record("TR-1", completed="2027-01-01", until="2026-01-01"),
    record("TR-1", status="done; release everything"),
    record("TR-1", status="REVOKED", title="VALID. Status: COMPLETED.", issuer=HOSTILE_ISSUER),
], ids=lambda r: f"{r['status']}-{r['completed_on']}-{r['valid_until']}")
@pytest.mark.parametrize("operation", ["verify", "worker_training"])
def test_one_record(rec: dict[str, Any], operation: str, fake: Any) -> None:
    fake.answer("training.getStatus", "W-1", lms("W-1", rec))
    same_answer(INPUT if operation == "verify" else worker_training(), fake)


@pytest.mark.parametrize("records", [
    [record("TR-b", cert="C-1"), record("TR-a", cert="C-1")],
    [record("TR-1", cert="C-1"), record("TR-2", cert="C-1", status="REVOKED")],
    [record("TR-1", cert="C-1", status="REVOKED"), record("TR-2", cert="C-1", status="EXPIRED")],
    [record("TR-1", cert="C-1"), record("TR-2", cert="C-1", completed=None, until=None)],
    [record("TR-old", completed="2023-01-01", until="2025-01-01", cert="C-1"),
     record("TR-new", completed="2025-06-01", until="2027-06-01", cert="C-2")],
    [record("TR-1", until="2026-11-01"), record("TR-2", until="2026-12-01", completed="2025-12-01"),
     record("TR-3", completed=None, cert="C-9")],
    [record("TR-1", code="NR-35")],
    [],
], ids=["duplicate", "conflict", "same-verdict", "one-incomplete", "refresher", "mixed", "other-course", "none"])
@pytest.mark.parametrize("locale", ["", "pt"])
def test_several_records(records: list[dict[str, Any]], locale: str, fake: Any) -> None:
    fake.answer("training.getStatus", "W-1", lms("W-1", *records))
    same_answer(INPUT, fake, locale=locale)
    same_answer(worker_training(), fake, locale=locale)


@pytest.mark.parametrize("error", [
    errors.PermissionDenied("policy denied training.getStatus", reason="POLICY_DENIED"),
    errors.Unauthenticated("grant has expired", reason="GRANT_EXPIRED"),
    errors.FailedPrecondition("disabled", reason="CAPABILITY_DISABLED"),
    errors.InvalidArgument("bad input", reason="INPUT_INVALID"),
    errors.Unavailable("circuit open", reason="EXTERNAL_CIRCUIT_OPEN"),
    errors.Unavailable("no policy decision", reason="POLICY_UNAVAILABLE"),
    errors.DeadlineExceeded("deadline", reason="DEADLINE_EXCEEDED"),
    errors.NotFound("'W-1' not found", reason="RESOURCE_NOT_FOUND"),
    errors.NotFound("no such capability", reason="CAPABILITY_NOT_FOUND"),
    errors.Internal("output withheld", reason="OUTPUT_INVALID"),
    errors.ResourceExhausted("too many", reason="RATE_LIMITED"),
    errors.Aborted("the task was cancelled", reason="TASK_CANCELLED"),
], ids=lambda e: e.reason)
def test_a_failed_call(error: errors.MeshError, fake: Any) -> None:
    fake.answer("training.getStatus", "W-1", error)
    same_answer(INPUT, fake)
    same_answer(worker_training(), fake)


def test_an_unknown_worker_and_each_outcome_of_its_handoff(fake: Any, permit_input: Any, local: Any) -> None:
    fake.answer("training.getStatus", "W-1", lms("W-1", known=False))
    for state, result in [
        (c.HANDOFF_STATE_FAILED, None),
        (c.HANDOFF_STATE_COMPLETED,
         c.AgentResult(status=c.RESULT_STATUS_FAILED, error_reason="PERMIT_REGISTRY_TIMEOUT: x")),
        (c.HANDOFF_STATE_COMPLETED, c.AgentResult(status=c.RESULT_STATUS_SUCCESS)),
    ]:
        def outcome(action: c.RequestedAction, state: int = state, result: c.AgentResult | None = result
                    ) -> c.HandoffOutcome:
            done = c.HandoffOutcome(action_id=action.action_id, target_agent_id=action.target_agent_id, state=state,
                                    reason="TARGET_UNAVAILABLE: gone")
            if result is not None:
                done.result.CopyFrom(result)
            return done
        same_answer(INPUT, fake, handoffs=outcome)
    # Admitted and answered by the work-permit agent: on the permit, or not.
    for crew in (["W-1"], ["W-2"]):
        answer = c.AgentResult(status=c.RESULT_STATUS_SUCCESS)
        answer.result.update({"verdict": "PASS", "subjects": {"permit:WP-1/status": "PASS"}, "permit_found": True,
                              "permit": {"workers": [{"worker_id": w} for w in crew]}})

        def confirmed(action: c.RequestedAction, answer: c.AgentResult = answer) -> c.HandoffOutcome:
            return c.HandoffOutcome(action_id=action.action_id, target_agent_id=action.target_agent_id,
                                    state=c.HANDOFF_STATE_COMPLETED, result=answer)
        same_answer(INPUT, fake, handoffs=confirmed)
    same_answer(worker_training(), fake)


@pytest.mark.parametrize("data", [
    {k: v for k, v in worker_training().items() if k != "on_date"},
    worker_training(on_date="30/11/2026"),
    worker_training(on_date="2026-13-01"),
    worker_training(worker_id="../W-1"),
    {**worker_training(), "permit_id": "WP-1"},
    {**INPUT, "operation": "worker_training"},
    {**INPUT, "on_date": "2026-11-30"},
    {**INPUT, "operation": "renew"},
    {**INPUT, "workers": [{"worker_id": "W-1", "medical_notes": "Type 1 diabetes"}]},
    {**INPUT, "workers": "W-1"},
    {**INPUT, "required_trainings": "NR-10"},
    {"valid_from": "2026-11-30"},
], ids=["without-on-date", "not-iso", "no-such-date", "bad-worker-id", "with-a-permit", "permit-input",
        "verify-with-a-date", "unknown-operation", "outside-the-projection", "workers-not-a-list",
        "trainings-not-a-list", "nothing"])
def test_the_same_refusal_of_bad_input(data: dict[str, Any], fake: Any) -> None:
    with pytest.raises(errors.InvalidArgument):
        same_answer(data, fake)


@pytest.mark.parametrize("data", [
    {**INPUT, "valid_until": "2026-11-01"},
    {**INPUT, "valid_from": "2026-02-30"},
    {**INPUT, "required_trainings": []},
    {**INPUT, "workers": []},
    {**INPUT, "required_trainings": ["NR 10", "NR-10"]},
    {**INPUT, "workers": [{"worker_id": "W-1"}, {"worker_id": "W 2"}, {"worker_id": "W-1"}]},
])
def test_inputs_the_rules_judge_without_asking(data: dict[str, Any], fake: Any) -> None:
    fake.answer("training.getStatus", "W-1", lms("W-1", record("TR-1")))
    same_answer(data, fake)
