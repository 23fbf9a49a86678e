"""The CLI drives the release, the Decision Center and platform events over real gRPC.

Fake SupervisorService and DecisionCenterService servicers run in-process on
port 0 (insecure: the transport has its own tests); ``mesh_channel`` is
patched to reach them, so every command goes through its real parser, its
handler, the generated stubs and the wire. Each fake records the requests it
got, so the tests check what the CLI sent as well as what it printed.
"""

from __future__ import annotations

import io
import sys
from collections import defaultdict
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2, timestamp_pb2

from agentmesh import assertion, errors, spiffe
from agentmesh.config import MeshConfig
from agentmesh.identities import PLATFORM_CLI
from agentmesh.signing import load_private_key
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import decision_center_service_pb2_grpc as dc_grpc
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2
from agentmesh.v1 import supervisor_service_pb2_grpc as sup_grpc
from agentmesh_cli import common, main

EXE = "exe-1"


def hint_program(mesh: Mesh) -> str:
    """How hints name the program when it runs as ``python -m agentmesh_cli`` (here: under pytest)."""
    return f"{sys.executable} -m agentmesh_cli --home {mesh.cfg.home}"
TOKEN = "ctok-single-use"
CAPABILITY = "workPermit.release"
PERMIT = "WP-10231"


def _ts(seconds_from_now: int = 300) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.GetCurrentTime()
    ts.seconds += seconds_from_now
    return ts


def action(state: int, **kw: Any) -> sup_pb2.ProposedAction:
    args = struct_pb2.Struct()
    args.update({"permit_id": PERMIT})
    return sup_pb2.ProposedAction(action_id="act-1", capability_id=CAPABILITY, resource_id=PERMIT, arguments=args,
                                  action_digest="d1", state=state, **kw)


def execution(status: int, act: sup_pb2.ProposedAction | None = None, **kw: Any) -> sup_pb2.Execution:
    kw.setdefault("decision", common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE)
    ex = sup_pb2.Execution(execution_id=EXE, status=status, tenant_id="acme", user_id="alice",
                           user_roles=["permit-manager"], summary="WP-10231 can be released.",
                           actor_type=common_pb2.ACTOR_TYPE_USER, **kw)
    if act is not None:
        ex.action.CopyFrom(act)
    return ex


def awaiting_confirmation() -> sup_pb2.Execution:
    return execution(sup_pb2.EXECUTION_STATUS_AWAITING_CONFIRMATION,
                     action(sup_pb2.ACTION_STATE_AWAITING_CONFIRMATION, confirmation_token=TOKEN,
                            confirmation_expires_at=_ts(), policy_decision=common_pb2.PolicyDecision(
                                effect=common_pb2.POLICY_EFFECT_CONFIRMATION_REQUIRED, policy_version="v7")))


def awaiting_approval() -> sup_pb2.Execution:
    return execution(sup_pb2.EXECUTION_STATUS_AWAITING_REVIEW,
                     action(sup_pb2.ACTION_STATE_AWAITING_APPROVAL, approval_review_id="rev-1"))


@dataclass
class FakeSupervisor(sup_grpc.SupervisorServiceServicer):  # type: ignore[misc]
    """Answers as the contract says; ``after_analysis`` is what the watch ends with."""

    after_analysis: sup_pb2.Execution = field(default_factory=awaiting_confirmation)
    # Successive GetExecution answers; the last one repeats.
    polls: list[sup_pb2.Execution] = field(default_factory=list)
    confirm_outcome: sup_pb2.ProposedAction | None = None
    requests: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    handled_events: dict[str, sup_pb2.Execution] = field(default_factory=dict)
    # What the watch sends instead of a task's end and ``after_analysis``, when given.
    watch_events: list[sup_pb2.WatchExecutionResponse] | None = None

    def Analyze(self, request: Any, context: Any) -> Any:
        self.requests["Analyze"].append(request)
        return sup_pb2.AnalyzeResponse(execution=sup_pb2.Execution(
            execution_id=EXE, status=sup_pb2.EXECUTION_STATUS_RUNNING))

    def WatchExecution(self, request: Any, context: Any) -> Iterator[Any]:
        self.requests["WatchExecution"].append(request)
        if self.watch_events is not None:
            yield from self.watch_events
            return
        yield sup_pb2.WatchExecutionResponse(event=sup_pb2.EXECUTION_EVENT_TASK_FINISHED, agent_id="training-agent",
                                             task_status=common_pb2.TASK_STATUS_COMPLETED,
                                             execution=sup_pb2.Execution(execution_id=EXE))
        yield sup_pb2.WatchExecutionResponse(event=sup_pb2.EXECUTION_EVENT_EXECUTION_FINISHED,
                                             execution=self.after_analysis)

    def GetExecution(self, request: Any, context: Any) -> Any:
        self.requests["GetExecution"].append(request)
        if request.execution_id != EXE:
            errors.abort(context, errors.NotFound("no such execution", reason="EXECUTION_NOT_FOUND",
                                                  field="execution_id"))
        ex = self.polls.pop(0) if len(self.polls) > 1 else (self.polls[0] if self.polls else self.after_analysis)
        return sup_pb2.GetExecutionResponse(execution=ex)

    def ConfirmAction(self, request: Any, context: Any) -> Any:
        self.requests["ConfirmAction"].append(request)
        if request.confirmation_token != TOKEN:
            errors.abort(context, errors.FailedPrecondition("the confirmation token is spent or wrong",
                                                            reason="CONFIRMATION_TOKEN_INVALID",
                                                            field="confirmation_token"))
        if request.decline:
            done = action(sup_pb2.ACTION_STATE_DECLINED, reason="the requester declined")
            return sup_pb2.ConfirmActionResponse(execution=execution(sup_pb2.EXECUTION_STATUS_SUCCEEDED, done))
        done = self.confirm_outcome or action(sup_pb2.ACTION_STATE_SUCCEEDED, verified=True)
        return sup_pb2.ConfirmActionResponse(execution=execution(sup_pb2.EXECUTION_STATUS_SUCCEEDED, done))

    def HandleEvent(self, request: Any, context: Any) -> Any:
        self.requests["HandleEvent"].append(request)
        seen = self.handled_events.get(request.event_id)
        if seen is not None:
            return sup_pb2.HandleEventResponse(execution=seen, duplicate=True)
        ex = sup_pb2.Execution(execution_id="exe-sys-1", status=sup_pb2.EXECUTION_STATUS_AWAITING_REVIEW,
                               tenant_id=request.tenant_id, actor_type=common_pb2.ACTOR_TYPE_SYSTEM,
                               system_actor="TrainingExpirationScanner", summary="2 permits depend on NR-10.",
                               decision=common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW,
                               recommended_resources=["WP-10231", "WP-10240"])
        self.handled_events[request.event_id] = ex
        return sup_pb2.HandleEventResponse(execution=ex)


def review_item(status: int = dc_pb2.REVIEW_STATUS_OPEN, **kw: Any) -> dc_pb2.ReviewItem:
    return dc_pb2.ReviewItem(
        review_id="rev-1", execution_id=EXE, tenant_id="acme", kind=dc_pb2.REVIEW_KIND_ACTION_APPROVAL,
        status=status, requester="alice", summary="Release WP-10231 (high risk) needs a second person.",
        action=action(sup_pb2.ACTION_STATE_AWAITING_APPROVAL, approval_review_id="rev-1"), **kw)


@dataclass
class FakeDecisionCenter(dc_grpc.DecisionCenterServiceServicer):  # type: ignore[misc]
    requests: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))

    def ListReviews(self, request: Any, context: Any) -> Any:
        self.requests["ListReviews"].append(request)
        conflict = dc_pb2.ReviewItem(review_id="rev-2", execution_id="exe-2", kind=dc_pb2.REVIEW_KIND_CONFLICT,
                                     status=dc_pb2.REVIEW_STATUS_INFORMATION_REQUESTED, requester="bob",
                                     assignee="carol", summary="training-agent and compliance-agent disagree " * 3)
        return dc_pb2.ListReviewsResponse(reviews=[review_item(), conflict])

    def GetReview(self, request: Any, context: Any) -> Any:
        self.requests["GetReview"].append(request)
        ev_a = common_pb2.EvidenceReference(source="lms", reference="TR-77",
                                            authority=common_pb2.AUTHORITY_LEVEL_VERIFIED_INTEGRATION,
                                            capability="training.getStatus@1.0.0")
        ev_b = common_pb2.EvidenceReference(source="compliance", reference="CK-3",
                                            authority=common_pb2.AUTHORITY_LEVEL_OFFICIAL_RECORD,
                                            capability="compliance.getChecklist@1.0.0")
        conflict = sup_pb2.Conflict(subject="worker:W-1001/NR-10", agent_a="training-agent",
                                    agent_b="compliance-agent", evidence_a=[ev_a], evidence_b=[ev_b],
                                    applicable_rules=["no authority outranks the other"], review_id="rev-2")
        history = [dc_pb2.ReviewEvent(decision=dc_pb2.REVIEW_DECISION_REQUEST_INFORMATION, reviewer="acme/carol",
                                      reason="is TR-77 the renewal?", at=_ts(-60))]
        review = dc_pb2.ReviewItem(review_id="rev-2", execution_id=EXE, kind=dc_pb2.REVIEW_KIND_CONFLICT,
                                   status=dc_pb2.REVIEW_STATUS_INFORMATION_REQUESTED, requester="alice",
                                   summary="Agents disagree on NR-10.", conflict=conflict, history=history)
        return dc_pb2.GetReviewResponse(review=review, execution=execution(
            sup_pb2.EXECUTION_STATUS_AWAITING_REVIEW, conflicts=[conflict]))

    def SubmitReviewDecision(self, request: Any, context: Any) -> Any:
        self.requests["SubmitReviewDecision"].append(request)
        if request.review_id == "rev-own":
            errors.abort(context, errors.PermissionDenied(
                "the requester cannot approve their own action", reason="SELF_APPROVAL_FORBIDDEN",
                field="review_id"))
        status, ex = {
            dc_pb2.REVIEW_DECISION_APPROVE: (dc_pb2.REVIEW_STATUS_APPROVED, awaiting_confirmation()),
            dc_pb2.REVIEW_DECISION_REJECT: (dc_pb2.REVIEW_STATUS_REJECTED, execution(
                sup_pb2.EXECUTION_STATUS_SUCCEEDED, action(sup_pb2.ACTION_STATE_REJECTED, reason="not today"))),
            dc_pb2.REVIEW_DECISION_REQUEST_INFORMATION: (dc_pb2.REVIEW_STATUS_INFORMATION_REQUESTED,
                                                         awaiting_approval()),
            dc_pb2.REVIEW_DECISION_OVERRIDE: (dc_pb2.REVIEW_STATUS_OVERRIDDEN, execution(
                sup_pb2.EXECUTION_STATUS_SUCCEEDED, action(sup_pb2.ACTION_STATE_NOT_ELIGIBLE))),
            dc_pb2.REVIEW_DECISION_ASSIGN: (dc_pb2.REVIEW_STATUS_OPEN, awaiting_approval()),
        }[request.decision]
        ex.action.confirmation_token = ""  # a reviewer never sees the requester's token
        review = review_item(status, assignee=request.assignee, history=[dc_pb2.ReviewEvent(
            decision=request.decision, reviewer="acme/bob", reason=request.reason, assignee=request.assignee)])
        return dc_pb2.SubmitReviewDecisionResponse(review=review, execution=ex)


@dataclass
class Mesh:
    cfg: MeshConfig
    supervisor: FakeSupervisor
    center: FakeDecisionCenter
    channels: list[tuple[str, spiffe.SpiffeId]]

    def run(self, *argv: str) -> int:
        return main.main(["--home", str(self.cfg.home), *argv])

    def verified_user(self, token: str) -> assertion.UserIdentity:
        key = load_private_key(self.cfg.mesh_home.idp_key).public_key()
        return assertion.verify(token, key)


@pytest.fixture
def mesh(mesh_config: MeshConfig, monkeypatch: pytest.MonkeyPatch) -> Iterator[Mesh]:
    supervisor, center = FakeSupervisor(), FakeDecisionCenter()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    sup_grpc.add_SupervisorServiceServicer_to_server(supervisor, server)
    dc_grpc.add_DecisionCenterServiceServicer_to_server(center, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channels: list[tuple[str, spiffe.SpiffeId]] = []

    def channel(cfg: MeshConfig, name: str, as_identity: spiffe.SpiffeId = PLATFORM_CLI) -> grpc.Channel:
        channels.append((name, as_identity))
        return grpc.insecure_channel(f"127.0.0.1:{port}")

    # Each command module reaches the mesh through mesh_channel: main's own commands by its name there,
    # the other modules' through agentmesh_cli.common.
    monkeypatch.setattr(main, "mesh_channel", channel)
    monkeypatch.setattr(common, "mesh_channel", channel)
    monkeypatch.setattr(common, "POLL_INTERVAL_S", 0.01)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # not a terminal unless a test says so
    try:
        yield Mesh(mesh_config, supervisor, center, channels)
    finally:
        server.stop(None)


class Terminal(io.StringIO):
    """A stdin that is a terminal with the user's typed answer."""

    def isatty(self) -> bool:
        return True


def typed(monkeypatch: pytest.MonkeyPatch, answer: str) -> None:
    monkeypatch.setattr(sys, "stdin", Terminal(answer))


ANALYZE = ("analyze", "Analyze permit WP-10231 and release it if everything is fine",
           "--tenant", "acme", "--user", "alice")


# --- analyze: progress ------------------------------------------------------------


def test_a_watch_that_joins_late_shows_what_already_happened_once(
        mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    # The analysis went faster than the watch: its first event is a snapshot with tasks already ended.
    done = execution(sup_pb2.EXECUTION_STATUS_SUCCEEDED)
    for task_id, agent, status, started in (
            ("t1", "work-permit-agent", common_pb2.TASK_STATUS_COMPLETED, True),
            ("t2", "training-agent", common_pb2.TASK_STATUS_RUNNING, True),
            ("t3", "risk-agent", common_pb2.TASK_STATUS_CANCELLED, False),  # never dispatched
            ("t4", "compliance-agent", common_pb2.TASK_STATUS_CREATED, False)):
        node = done.graph.nodes.add(task_id=task_id, target_agent_id=agent, status=status)
        if started:
            node.started_at.CopyFrom(_ts(-1))
    ended = sup_pb2.WatchExecutionResponse(event=sup_pb2.EXECUTION_EVENT_TASK_FINISHED, task_id="t2",
                                           agent_id="training-agent", task_status=common_pb2.TASK_STATUS_COMPLETED,
                                           execution=done)
    mesh.supervisor.watch_events = [
        sup_pb2.WatchExecutionResponse(event=sup_pb2.EXECUTION_EVENT_SNAPSHOT, execution=done),
        # Events the snapshot already showed, sent again, are not shown twice; a later one is.
        sup_pb2.WatchExecutionResponse(event=sup_pb2.EXECUTION_EVENT_TASK_FINISHED, task_id="t1",
                                       agent_id="work-permit-agent", task_status=common_pb2.TASK_STATUS_COMPLETED,
                                       execution=done),
        ended,
        # The same task ending again (delegated again after the snapshot): shown.
        sup_pb2.WatchExecutionResponse(event=sup_pb2.EXECUTION_EVENT_TASK_FINISHED, task_id="t1",
                                       agent_id="work-permit-agent", task_status=common_pb2.TASK_STATUS_FAILED,
                                       execution=done),
        sup_pb2.WatchExecutionResponse(event=sup_pb2.EXECUTION_EVENT_EXECUTION_FINISHED, execution=done)]
    assert mesh.run("analyze", "Analyze permit WP-10231", "--tenant", "acme", "--user", "alice") == 0
    progress = [line.split() for line in capsys.readouterr().err.splitlines() if line.startswith("  task")]
    assert progress == [["task", "started", "work-permit-agent", "RUNNING"],
                        ["task", "finished", "work-permit-agent", "COMPLETED"],
                        ["task", "started", "training-agent", "RUNNING"],
                        ["task", "finished", "risk-agent", "CANCELLED"],
                        ["task", "finished", "training-agent", "COMPLETED"],
                        ["task", "finished", "work-permit-agent", "FAILED"]]


# --- analyze --release ------------------------------------------------------------


def test_release_yes_confirms_the_exact_action(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    assert mesh.run(*ANALYZE, "--release", "--yes", "--confirm-ttl", "90") == 0
    out = capsys.readouterr().out
    analyze = mesh.supervisor.requests["Analyze"][0]
    assert analyze.request_release and analyze.confirmation_ttl_seconds == 90
    (confirm,) = mesh.supervisor.requests["ConfirmAction"]
    assert (confirm.execution_id, confirm.confirmation_token, confirm.capability_id, confirm.resource_id,
            confirm.decline) == (EXE, TOKEN, CAPABILITY, PERMIT, False)
    assert mesh.verified_user(confirm.user_assertion).user_id == "alice"
    assert f"capability  {CAPABILITY}" in out and f"permit      {PERMIT}" in out and '"permit_id": "WP-10231"' in out
    assert out.rstrip().endswith("WP-10231: released and verified")
    assert set(mesh.channels) == {("supervisor", PLATFORM_CLI)}


def test_prompt_y_confirms_and_n_declines(mesh: Mesh, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    typed(monkeypatch, "y\n")
    assert mesh.run(*ANALYZE, "--release") == 0
    assert "Release WP-10231 now? [y/N]" in capsys.readouterr().out
    typed(monkeypatch, "n\n")
    assert mesh.run(*ANALYZE, "--release") == 1
    out = capsys.readouterr().out
    assert [r.decline for r in mesh.supervisor.requests["ConfirmAction"]] == [False, True]
    assert "not released: declined by the requester" in out


def test_empty_answer_declines(mesh: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    typed(monkeypatch, "\n")
    assert mesh.run(*ANALYZE, "--release") == 1
    assert mesh.supervisor.requests["ConfirmAction"][0].decline


def test_without_a_terminal_the_action_stays_pending(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    assert mesh.run(*ANALYZE, "--release") == 0
    out = capsys.readouterr().out
    assert not mesh.supervisor.requests["ConfirmAction"]  # the token is not spent
    assert f"{hint_program(mesh)} confirm {EXE} --tenant acme --user alice --role permit-manager --yes" in out


def test_json_keeps_stdout_one_document(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert mesh.run(*ANALYZE, "--release", "--yes", "--json") == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["action"]["state"] == "ACTION_STATE_SUCCEEDED"
    assert "released and verified" in captured.err


def test_awaiting_review_waits_then_prompts(mesh: Mesh, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    mesh.supervisor.after_analysis = awaiting_approval()
    mesh.supervisor.polls = [awaiting_approval(), awaiting_approval(), awaiting_confirmation()]
    typed(monkeypatch, "y\n")
    assert mesh.run(*ANALYZE, "--release") == 0
    captured = capsys.readouterr()
    assert "review rev-1" in captured.out
    assert f"{hint_program(mesh)} reviews show rev-1 --tenant acme --user REVIEWER" in captured.out
    assert "waiting for review rev-1" in captured.err
    assert len(mesh.supervisor.requests["GetExecution"]) == 3
    assert "Release WP-10231 now? [y/N]" in captured.out
    assert mesh.supervisor.requests["ConfirmAction"][0].confirmation_token == TOKEN


def test_no_wait_returns_with_the_review_id(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    mesh.supervisor.after_analysis = awaiting_approval()
    assert mesh.run(*ANALYZE, "--release", "--no-wait") == 0
    assert "rev-1" in capsys.readouterr().out
    assert not mesh.supervisor.requests["GetExecution"]


def test_review_wait_times_out(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    mesh.supervisor.after_analysis = awaiting_approval()
    assert mesh.run(*ANALYZE, "--release", "--timeout", "0.3") == 1
    assert "timed out" in capsys.readouterr().out
    assert not mesh.supervisor.requests["ConfirmAction"]


def test_a_rejected_review_ends_the_wait(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    mesh.supervisor.after_analysis = awaiting_approval()
    mesh.supervisor.polls = [execution(sup_pb2.EXECUTION_STATUS_SUCCEEDED,
                                       action(sup_pb2.ACTION_STATE_REJECTED, reason="second person said no"))]
    assert mesh.run(*ANALYZE, "--release") == 1
    assert "not released: rejected by a reviewer: second person said no" in capsys.readouterr().out


def test_failed_release_reports_compensation(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    mesh.supervisor.confirm_outcome = action(sup_pb2.ACTION_STATE_FAILED, reason="read-back mismatch",
                                             compensated=True)
    assert mesh.run(*ANALYZE, "--release", "--yes") == 1
    out = capsys.readouterr().out
    assert "FAILED: read-back mismatch (compensated: previous state restored)" in out


@pytest.mark.parametrize(("effect", "said"), [
    (sup_pb2.ACTION_EFFECT_NONE, "(nothing was written: the permit is as it was)"),
    (sup_pb2.ACTION_EFFECT_NOT_RESTORED, "(NOT compensated: the previous state could not be restored)"),
    (sup_pb2.ACTION_EFFECT_UNKNOWN, "(whether anything was written is not known: read it before any retry)"),
])
def test_failed_release_says_what_it_did_to_the_permit(effect: int, said: str, mesh: Mesh,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    failed = action(sup_pb2.ACTION_STATE_FAILED, reason="RELEASE_REFUSED: PERMIT_NOT_RELEASABLE")
    failed.effect = effect  # type: ignore[assignment]
    mesh.supervisor.confirm_outcome = failed
    assert mesh.run(*ANALYZE, "--release", "--yes") == 1
    assert f"FAILED: RELEASE_REFUSED: PERMIT_NOT_RELEASABLE {said}" in capsys.readouterr().out


def test_not_eligible_asks_nothing(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    mesh.supervisor.after_analysis = execution(
        sup_pb2.EXECUTION_STATUS_SUCCEEDED, action(sup_pb2.ACTION_STATE_NOT_ELIGIBLE, reason="NR-10 expired"),
        decision=common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED)
    assert mesh.run(*ANALYZE, "--release", "--yes") == 1
    assert "not released: not eligible: NR-10 expired" in capsys.readouterr().out
    assert not mesh.supervisor.requests["ConfirmAction"]


def test_analysis_only_output_is_unchanged(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    mesh.supervisor.after_analysis = execution(sup_pb2.EXECUTION_STATUS_SUCCEEDED)
    assert mesh.run("analyze", "status of WP-10231", "--tenant", "acme", "--user", "alice") == 0
    out = capsys.readouterr().out
    assert not mesh.supervisor.requests["Analyze"][0].request_release
    assert "action" not in out and "actor" not in out


def test_a_spent_token_is_a_refusal(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    ex = awaiting_confirmation()
    ex.action.confirmation_token = "ctok-old"
    mesh.supervisor.after_analysis = ex
    mesh.supervisor.polls = [ex]
    assert mesh.run(*ANALYZE, "--release", "--yes") == 1
    err = capsys.readouterr().err
    assert "FAILED_PRECONDITION: CONFIRMATION_TOKEN_INVALID (field confirmation_token)" in err


# --- confirm ----------------------------------------------------------------------


def test_confirm_reads_the_execution_then_confirms(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    assert mesh.run("confirm", EXE, "--tenant", "acme", "--user", "alice", "--yes") == 0
    assert mesh.supervisor.requests["GetExecution"][0].execution_id == EXE
    confirm = mesh.supervisor.requests["ConfirmAction"][0]
    assert (confirm.confirmation_token, confirm.capability_id, confirm.resource_id, confirm.decline) == (
        TOKEN, CAPABILITY, PERMIT, False)
    assert "released and verified" in capsys.readouterr().out


def test_confirm_decline_is_what_was_asked(mesh: Mesh) -> None:
    assert mesh.run("confirm", EXE, "--tenant", "acme", "--user", "alice", "--decline") == 0
    assert mesh.supervisor.requests["ConfirmAction"][0].decline


def test_confirm_needs_an_answer_without_a_terminal(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    assert mesh.run("confirm", EXE, "--tenant", "acme", "--user", "alice") == 2
    assert "--yes" in capsys.readouterr().err and not mesh.supervisor.requests["ConfirmAction"]


def test_confirm_with_nothing_pending_exits_1(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    mesh.supervisor.after_analysis = awaiting_approval()
    assert mesh.run("confirm", EXE, "--tenant", "acme", "--user", "alice", "--yes") == 1
    assert "nothing to confirm" in capsys.readouterr().err


# --- reviews ----------------------------------------------------------------------

REVIEWER = ("--tenant", "acme", "--user", "bob")


@pytest.mark.parametrize(("argv", "decision", "expected", "printed"), [
    (("approve", "rev-1", "--reason", "checked"), dc_pb2.REVIEW_DECISION_APPROVE,
     {"reason": "checked"}, "review rev-1: APPROVED"),
    (("reject", "rev-1", "--reason", "not today"), dc_pb2.REVIEW_DECISION_REJECT,
     {"reason": "not today"}, "action workPermit.release WP-10231 REJECTED"),
    (("request-info", "rev-1", "--reason", "which LMS record?"), dc_pb2.REVIEW_DECISION_REQUEST_INFORMATION,
     {"reason": "which LMS record?"}, "review rev-1: INFORMATION_REQUESTED"),
    (("override", "rev-1", "--decision", "not-recommended", "--reason", "site closed"),
     dc_pb2.REVIEW_DECISION_OVERRIDE,
     {"reason": "site closed", "override_decision": common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED},
     "review rev-1: OVERRIDDEN"),
    (("assign", "rev-1", "--to", "carol"), dc_pb2.REVIEW_DECISION_ASSIGN,
     {"assignee": "carol"}, "review rev-1: OPEN, assigned to carol"),
])
def test_review_decisions_send_the_request(mesh: Mesh, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...],
                                           decision: int, expected: dict[str, Any], printed: str) -> None:
    assert mesh.run("reviews", *argv, *REVIEWER) == 0
    (req,) = mesh.center.requests["SubmitReviewDecision"]
    assert req.review_id == "rev-1" and req.decision == decision
    for name, value in expected.items():
        assert getattr(req, name) == value
    user = mesh.verified_user(req.user_assertion)
    assert (user.tenant_id, user.user_id) == ("acme", "bob")
    assert user.roles == (("admin",) if argv[0] == "override" else ("reviewer",))
    out = capsys.readouterr().out
    assert printed in out and f"execution {EXE}:" in out
    assert mesh.channels == [("supervisor", PLATFORM_CLI)]


def test_approval_tells_the_requester_how_to_confirm(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    assert mesh.run("reviews", "approve", "rev-1", *REVIEWER) == 0
    out = capsys.readouterr().out
    # Run as printed: this program, this home, and the roles alice asked with.
    assert f"{hint_program(mesh)} confirm {EXE} --tenant acme --user alice --role permit-manager\n" in out


def test_refused_decision_exits_1_with_reason(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    assert mesh.run("reviews", "approve", "rev-own", "--tenant", "acme", "--user", "alice") == 1
    err = capsys.readouterr().err
    assert "PERMISSION_DENIED: SELF_APPROVAL_FORBIDDEN (field review_id)" in err
    assert "cannot approve their own action" in err


def test_reviews_list_table_and_filters(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    assert mesh.run("reviews", "list", *REVIEWER, "--status", "information-requested", "--execution", "exe-2") == 0
    req = mesh.center.requests["ListReviews"][0]
    assert req.status == dc_pb2.REVIEW_STATUS_INFORMATION_REQUESTED and req.execution_id == "exe-2"
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["REVIEW", "KIND", "STATUS", "EXECUTION", "REQUESTER", "ASSIGNEE", "SUMMARY"]
    assert lines[1].split()[:6] == ["rev-1", "ACTION_APPROVAL", "OPEN", EXE, "alice", "-"]
    assert lines[2].split()[:6] == ["rev-2", "CONFLICT", "INFORMATION_REQUESTED", "exe-2", "bob", "carol"]
    assert lines[2].endswith("…")  # long summaries are cut in the table
    assert mesh.run("reviews", "list", *REVIEWER) == 0
    assert mesh.center.requests["ListReviews"][1].status == dc_pb2.REVIEW_STATUS_UNSPECIFIED


def test_reviews_show_prints_both_sides_and_the_execution(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    assert mesh.run("reviews", "show", "rev-2", *REVIEWER) == 0
    out = capsys.readouterr().out
    assert mesh.center.requests["GetReview"][0].review_id == "rev-2"
    assert "conflict on worker:W-1001/NR-10: training-agent vs compliance-agent" in out
    assert "training-agent evidence:" in out and "lms TR-77 (VERIFIED_INTEGRATION" in out
    assert "compliance-agent evidence:" in out and "compliance CK-3 (OFFICIAL_RECORD" in out
    assert "REQUEST_INFORMATION by acme/carol: is TR-77 the renewal?" in out
    assert f"execution {EXE}  (AWAITING_REVIEW)" in out


# --- events -----------------------------------------------------------------------

EVENT = ("events", "training-expired", "--tenant", "acme", "--worker", "W-1001", "--training", "NR-10",
         "--expired-on", "2026-11-30")


def test_training_expired_event_and_its_duplicate(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    assert mesh.run(*EVENT) == 0
    first = capsys.readouterr().out
    req = mesh.supervisor.requests["HandleEvent"][0]
    assert (req.tenant_id, req.training_expired.worker_id, req.training_expired.training_code,
            req.training_expired.expired_on) == ("acme", "W-1001", "NR-10", "2026-11-30")
    assert req.event_id.startswith("evt-")
    assert "actor     SYSTEM TrainingExpirationScanner" in first
    assert "recommended resources:\n  - WP-10231\n  - WP-10240" in first
    assert "duplicate" not in first
    assert mesh.run(*EVENT) == 0
    assert mesh.supervisor.requests["HandleEvent"][1].event_id == req.event_id  # same event, same id
    assert capsys.readouterr().out.startswith(f"duplicate: event {req.event_id} was already handled")
    assert mesh.channels == [("supervisor", PLATFORM_CLI)] * 2


def test_event_id_flag_and_bad_date(mesh: Mesh, capsys: pytest.CaptureFixture[str]) -> None:
    assert mesh.run(*EVENT, "--event-id", "evt-from-fabric") == 0
    assert mesh.supervisor.requests["HandleEvent"][0].event_id == "evt-from-fabric"
    with pytest.raises(SystemExit) as info:
        mesh.run(*EVENT[:-1], "30/11/2026")
    assert info.value.code == 2


# --- help ---------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "phrase"), [
    (("analyze",), "Release WP-10231 now? [y/N]"),
    (("analyze",), "exit status"),
    (("confirm",), "single-use confirmation"),
    (("reviews",), "Decision Center"),
    (("reviews", "list"), "undecided ones"),
    (("reviews", "show"), "both sides' evidence"),
    (("reviews", "approve"), "Approve a review"),
    (("reviews", "reject"), "will not run"),
    (("reviews", "request-info"), "INFORMATION_REQUESTED"),
    (("reviews", "override"), "administrators only"),
    (("reviews", "assign"), "Assign a review"),
    (("events", "training-expired"), "duplicate"),
])
def test_help_says_what_each_command_does(argv: tuple[str, ...], phrase: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main.main([*argv, "--help"])
    assert info.value.code == 0
    assert " ".join(phrase.split()) in " ".join(capsys.readouterr().out.split())
