"""The release gate without a mesh: policy effects, confirmation checks, single use, expiry, durability."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest

from agentmesh import assertion, errors
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc import executions
from supervisor_svc.actions import ApprovalNotCounted, ReleaseActions
from supervisor_svc.definitions import default_catalog
from supervisor_svc.dispatch import Dispatched
from supervisor_svc.executions import ExecutionStore

ALICE = assertion.UserIdentity("acme", "alice", ("permit-manager",), "s1", "c1", "digest-a")
CAROL = assertion.UserIdentity("acme", "carol", ("permit-manager",), "s2", "c2", "digest-c")
RELEASE = default_catalog().action("workPermit.release")
assert RELEASE is not None


class FakePolicy:
    def __init__(self, *effects: int) -> None:
        self.effects = list(effects)
        self.requests: list[policy_pb2.AuthorizeRequest] = []

    def __call__(self, request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        self.requests.append(request)
        effect = self.effects.pop(0)
        return policy_pb2.AuthorizeResponse(decision=common_pb2.PolicyDecision(
            decision_id=f"d{len(self.requests)}", effect=effect, reason_codes=["rule"]))  # type: ignore[arg-type]


class FakeDispatcher:
    """Runs nothing; keeps the records it is given. ``audit_down`` makes every governing record fail."""

    def __init__(self, release: dict[str, Any] | None = None, error: str = "") -> None:
        self.release, self.error = release, error
        self.runs: list[dict[str, Any]] = []
        self.records: list[tuple[int, dict[str, Any]]] = []
        self.governing: list[tuple[int, dict[str, Any]]] = []
        self.audit_down = False

    def govern(self, event_type: int, **fields: Any) -> None:
        if self.audit_down:
            raise errors.Unavailable("audit could not make the record durable", reason="AUDIT_UNAVAILABLE")
        self.governing.append((event_type, fields))
        self.records.append((event_type, fields))

    def narrate(self, event_type: int, **fields: Any) -> None:
        self.records.append((event_type, fields))

    def run(self, ex: pb.Execution, **kw: Any) -> Dispatched:
        self.runs.append(kw)
        result = common_pb2.AgentResult(agent_id="work-permit-agent", status=common_pb2.RESULT_STATUS_SUCCESS)
        if self.error:
            result.status = common_pb2.RESULT_STATUS_FAILED
            result.error_reason = self.error
        if self.release is not None:
            result.result.update({"release": self.release})
        ex.results.append(result)
        return Dispatched(result)


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


def make(tmp_path: Path, policy: FakePolicy, dispatcher: FakeDispatcher | None = None,
         clock: Clock | None = None) -> tuple[ReleaseActions, ExecutionStore, FakeDispatcher]:
    store = ExecutionStore(tmp_path / "supervisor.db")
    dispatcher = dispatcher or FakeDispatcher({"verified": True})
    actions = ReleaseActions(store=store, dispatcher=dispatcher, authorize=policy, capabilities={},  # type: ignore[arg-type]
                             confirmation_ttl_s=60, clock=clock or Clock())
    return actions, store, dispatcher


def decided(store: ExecutionStore,
            decision: int = common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE) -> pb.Execution:
    ex = pb.Execution(execution_id="exe-1", tenant_id="acme", user_id="alice", decision=decision,  # type: ignore[arg-type]
                      status=pb.EXECUTION_STATUS_SUCCEEDED)
    store.save(ex)
    return ex


def confirmation(ex: pb.Execution, **kw: Any) -> pb.ConfirmActionRequest:
    fields = dict(execution_id=ex.execution_id, confirmation_token=ex.action.confirmation_token,
                  capability_id="workPermit.release", resource_id="WP-10231")
    fields.update(kw)
    return pb.ConfirmActionRequest(**fields)


def awaiting_confirmation(tmp_path: Path, **kw: Any) -> tuple[ReleaseActions, ExecutionStore, FakeDispatcher,
                                                            pb.Execution]:
    actions, store, dispatcher = make(tmp_path, FakePolicy(common_pb2.POLICY_EFFECT_CONFIRMATION_REQUIRED), **kw)
    ex = decided(store)
    actions.propose(ex, ALICE, RELEASE, {"permit": "WP-10231"})
    store.save(ex)
    assert ex.status == pb.EXECUTION_STATUS_AWAITING_CONFIRMATION and ex.action.confirmation_token
    return actions, store, dispatcher, ex


def test_a_decision_other_than_recommended_never_reaches_the_policy_engine(tmp_path: Path) -> None:
    policy = FakePolicy()
    actions, store, _ = make(tmp_path, policy)
    ex = decided(store, common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED)
    actions.propose(ex, ALICE, RELEASE, {"permit": "WP-10231"})
    assert ex.action.state == pb.ACTION_STATE_NOT_ELIGIBLE and not policy.requests


def test_human_approval_required_opens_an_approval_review(tmp_path: Path) -> None:
    policy = FakePolicy(common_pb2.POLICY_EFFECT_HUMAN_APPROVAL_REQUIRED)
    actions, store, _ = make(tmp_path, policy)
    ex = decided(store)
    actions.propose(ex, ALICE, RELEASE, {"permit": "WP-10231"})
    assert ex.status == pb.EXECUTION_STATUS_AWAITING_REVIEW and ex.action.state == pb.ACTION_STATE_AWAITING_APPROVAL
    (review,) = store.reviews("acme")
    assert review.kind == dc_pb2.REVIEW_KIND_ACTION_APPROVAL and review.requester == "alice"
    assert policy.requests[0].context.confirmation_given is False
    assert policy.requests[0].user.roles == ["permit-manager"]


def test_an_approval_the_policy_does_not_count_is_refused(tmp_path: Path) -> None:
    policy = FakePolicy(common_pb2.POLICY_EFFECT_HUMAN_APPROVAL_REQUIRED,
                        common_pb2.POLICY_EFFECT_HUMAN_APPROVAL_REQUIRED)
    actions, store, _ = make(tmp_path, policy)
    ex = decided(store)
    actions.propose(ex, ALICE, RELEASE, {"permit": "WP-10231"})
    with pytest.raises(ApprovalNotCounted):
        actions.gate(ex, approval_review_id="rev-1", approver="alice")
    assert policy.requests[1].context.human_approver_id == "alice"


def test_policy_deny_and_unavailable_close_the_action(tmp_path: Path) -> None:
    actions, store, _ = make(tmp_path, FakePolicy(common_pb2.POLICY_EFFECT_DENY))
    ex = decided(store)
    actions.propose(ex, ALICE, RELEASE, {"permit": "WP-10231"})
    assert ex.action.state == pb.ACTION_STATE_DENIED and not ex.action.confirmation_token

    def down(request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        raise errors.Unavailable("policy down")

    actions2, store2, _ = make(tmp_path / "b", FakePolicy())
    actions2._authorize = down
    ex2 = decided(store2)
    actions2.propose(ex2, ALICE, RELEASE, {"permit": "WP-10231"})
    assert ex2.action.state == pb.ACTION_STATE_DENIED and "POLICY_UNAVAILABLE" in ex2.action.reason


def test_confirmation_runs_the_release_once_with_the_digest_in_the_grant(tmp_path: Path) -> None:
    actions, store, dispatcher, ex = awaiting_confirmation(tmp_path)
    done = actions.confirm(ALICE, confirmation(ex))
    assert done.action.state == pb.ACTION_STATE_SUCCEEDED and done.status == pb.EXECUTION_STATUS_SUCCEEDED
    (run,) = dispatcher.runs
    assert run["confirmed_action_digest"] == ex.action.action_digest
    assert run["input"]["idempotency_key"] == ex.action.action_id
    with pytest.raises(errors.FailedPrecondition) as replay:
        actions.confirm(ALICE, confirmation(ex))
    assert replay.value.reason == "CONFIRMATION_ALREADY_USED"
    assert len(dispatcher.runs) == 1
    assert store.action("exe-1").state == executions.USED  # type: ignore[union-attr]


@pytest.mark.parametrize(("user", "kw", "reason", "field"), [
    (CAROL, {}, "CONFIRMATION_USER_MISMATCH", "user_assertion"),
    (ALICE, {"resource_id": "WP-10232"}, "CONFIRMATION_ACTION_MISMATCH", "resource_id"),
    (ALICE, {"capability_id": "workPermit.updateValidity"}, "CONFIRMATION_ACTION_MISMATCH", "capability_id"),
    (ALICE, {"confirmation_token": "guess"}, "CONFIRMATION_TOKEN_INVALID", "confirmation_token"),
    (ALICE, {"confirmation_token": ""}, "MISSING_FIELD", "confirmation_token"),
])
def test_a_wrong_confirmation_is_refused_audited_and_changes_nothing(
        tmp_path: Path, user: assertion.UserIdentity, kw: dict[str, str], reason: str, field: str) -> None:
    actions, store, dispatcher, ex = awaiting_confirmation(tmp_path)
    with pytest.raises(errors.MeshError) as refused:
        actions.confirm(user, confirmation(ex, **kw))
    assert (refused.value.reason, refused.value.field) == (reason, field)
    assert not dispatcher.runs
    assert store.action("exe-1").state == executions.PENDING_CONFIRMATION  # type: ignore[union-attr]
    if reason != "MISSING_FIELD":
        assert dispatcher.records[-1][1]["reason_codes"][0] == reason
    # The rightful confirmation still works afterwards.
    assert actions.confirm(ALICE, confirmation(ex)).action.state == pb.ACTION_STATE_SUCCEEDED


def test_an_expired_token_is_refused_and_ends_the_action(tmp_path: Path) -> None:
    clock = Clock()
    actions, store, dispatcher, ex = awaiting_confirmation(tmp_path, clock=clock)
    clock.now += dt.timedelta(seconds=61)
    with pytest.raises(errors.FailedPrecondition) as expired:
        actions.confirm(ALICE, confirmation(ex))
    assert expired.value.reason == "CONFIRMATION_EXPIRED" and not dispatcher.runs
    stored = store.get("exe-1")
    assert stored is not None and stored.action.state == pb.ACTION_STATE_EXPIRED
    assert not stored.action.confirmation_token


def test_a_failed_release_is_reported_failed_with_its_compensation(tmp_path: Path) -> None:
    failing = FakeDispatcher({"verified": False, "compensated": True},
                             error="RELEASE_VERIFICATION_FAILED: not visible; compensated: true")
    actions, store, _, ex = awaiting_confirmation(tmp_path, dispatcher=failing)
    done = actions.confirm(ALICE, confirmation(ex))
    assert done.status == pb.EXECUTION_STATUS_FAILED
    assert done.action.state == pb.ACTION_STATE_FAILED and done.action.compensated and not done.action.verified
    assert "RELEASE_VERIFICATION_FAILED" in done.reason
    assert done.action.effect == pb.ACTION_EFFECT_COMPENSATED
    assert done.summary.endswith("The permit was restored to its previous state.")


def test_a_failed_compensation_says_the_permit_could_not_be_restored(tmp_path: Path) -> None:
    failing = FakeDispatcher({"verified": False, "compensated": False},
                             error="RELEASE_VERIFICATION_FAILED: not visible; compensated: false")
    actions, _, _, ex = awaiting_confirmation(tmp_path, dispatcher=failing)
    done = actions.confirm(ALICE, confirmation(ex))
    assert done.action.effect == pb.ACTION_EFFECT_NOT_RESTORED and not done.action.compensated
    assert "could NOT be restored" in done.summary


def test_a_result_without_verification_is_never_success(tmp_path: Path) -> None:
    actions, _, _, ex = awaiting_confirmation(tmp_path, dispatcher=FakeDispatcher({}))
    assert actions.confirm(ALICE, confirmation(ex)).action.state == pb.ACTION_STATE_FAILED


def test_a_requested_ttl_is_capped_by_the_supervisors(tmp_path: Path) -> None:
    clock = Clock()
    actions, store, _ = make(tmp_path, FakePolicy(common_pb2.POLICY_EFFECT_CONFIRMATION_REQUIRED), clock=clock)
    ex = decided(store)
    actions.propose(ex, ALICE, RELEASE, {"permit": "WP-10231"}, ttl_s=10_000)
    assert ex.action.confirmation_expires_at.ToDatetime(dt.UTC) == clock.now + dt.timedelta(seconds=60)


# -- fail closed on audit ---------------------------------------------------------------------------

def test_audit_down_the_confirmation_does_not_happen_and_the_token_stays_usable(tmp_path: Path) -> None:
    actions, store, dispatcher, ex = awaiting_confirmation(tmp_path)
    dispatcher.audit_down = True
    with pytest.raises(errors.Unavailable) as err:
        actions.confirm(ALICE, confirmation(ex))
    assert err.value.reason == "AUDIT_UNAVAILABLE" and not dispatcher.runs
    assert store.action("exe-1").state == executions.PENDING_CONFIRMATION  # type: ignore[union-attr]
    stored = store.get("exe-1")
    assert stored is not None and stored.action.state == pb.ACTION_STATE_AWAITING_CONFIRMATION
    dispatcher.audit_down = False
    assert actions.confirm(ALICE, confirmation(ex)).action.state == pb.ACTION_STATE_SUCCEEDED
    given = [f for t, f in dispatcher.governing if t == audit_pb2.AUDIT_EVENT_TYPE_CONFIRMATION]
    assert given[-1]["reason_codes"][0] == "CONFIRMATION_GIVEN" and len(dispatcher.runs) == 1


def test_audit_down_a_decline_still_stops_the_action(tmp_path: Path) -> None:
    actions, store, dispatcher, ex = awaiting_confirmation(tmp_path)
    dispatcher.audit_down = True
    done = actions.confirm(ALICE, confirmation(ex, decline=True))
    assert done.action.state == pb.ACTION_STATE_DECLINED and not dispatcher.runs
    assert dispatcher.records[-2][1]["reason_codes"][0] == "CONFIRMATION_DECLINED"  # kept, never lost


def test_audit_down_an_unrecorded_policy_decision_releases_nothing(tmp_path: Path) -> None:
    actions, store, dispatcher = make(tmp_path, FakePolicy(common_pb2.POLICY_EFFECT_CONFIRMATION_REQUIRED))
    dispatcher.audit_down = True
    ex = decided(store)
    actions.propose(ex, ALICE, RELEASE, {"permit": "WP-10231"})
    assert ex.action.state == pb.ACTION_STATE_DENIED and not ex.action.confirmation_token
    assert ex.action.reason.startswith("AUDIT_UNAVAILABLE")
    record = store.action("exe-1")
    assert record is not None and not record.token_digest and record.state == executions.CLOSED


def test_a_denial_is_recorded_as_a_refusal_an_allowing_decision_before_it_counts(tmp_path: Path) -> None:
    actions, store, dispatcher = make(tmp_path, FakePolicy(common_pb2.POLICY_EFFECT_DENY))
    actions.propose(decided(store), ALICE, RELEASE, {"permit": "WP-10231"})
    assert not dispatcher.governing and dispatcher.records[0][0] == audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION
    actions, store, dispatcher = make(tmp_path / "b", FakePolicy(common_pb2.POLICY_EFFECT_CONFIRMATION_REQUIRED))
    actions.propose(decided(store), ALICE, RELEASE, {"permit": "WP-10231"})
    assert [t for t, _ in dispatcher.governing] == [audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION]


# -- a release in flight when the supervisor stopped ----------------------------------------------------

def _confirmed_then_crashed(tmp_path: Path, dispatcher: FakeDispatcher) -> tuple[ReleaseActions, ExecutionStore]:
    actions, store, _, ex = awaiting_confirmation(tmp_path, dispatcher=dispatcher)
    # The token is spent and the action marked EXECUTING; the process dies before the release ends.
    assert store.spend(ex.action.action_id, executions.USED)
    ex.action.state = pb.ACTION_STATE_EXECUTING
    ex.action.confirmation_token = ""
    ex.status = pb.EXECUTION_STATUS_RUNNING
    store.save(ex)
    return actions, store


def test_a_resumed_release_runs_again_under_the_same_key_and_says_what_the_permit_is(tmp_path: Path) -> None:
    dispatcher = FakeDispatcher({"verified": True})
    actions, store = _confirmed_then_crashed(tmp_path, dispatcher)
    stored = store.get("exe-1")
    assert stored is not None
    actions.resume(stored, pause_s=0)
    done = store.get("exe-1")
    assert done is not None
    assert (done.action.state, done.status, done.action.verified) == (
        pb.ACTION_STATE_SUCCEEDED, pb.EXECUTION_STATUS_SUCCEEDED, True)
    (run,) = dispatcher.runs
    assert run["input"]["idempotency_key"] == done.action.action_id
    assert run["confirmed_action_digest"] == done.action.action_digest
    assert run["actor"].user_id == "alice" and run["actor"].assertion_digest == "digest-a"
    assert any("RELEASE_RESUMED" in f.get("reason_codes", []) for _, f in dispatcher.records)


def test_a_release_task_the_dead_process_delegated_is_closed_on_the_record_when_the_release_resumes(
        tmp_path: Path) -> None:
    dispatcher = FakeDispatcher({"verified": True})
    actions, store = _confirmed_then_crashed(tmp_path, dispatcher)
    stored = store.get("exe-1")
    assert stored is not None
    # The previous process delegated the release task (on the record) and died while it ran.
    stored.graph.nodes.add(task_id="task-work-permit-dead", target_agent_id="work-permit-agent",
                           status=common_pb2.TASK_STATUS_RUNNING)
    store.save(stored)
    actions.resume(stored, pause_s=0)
    closed = [f for t, f in dispatcher.records if t == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED]
    assert [f["task_id"] for f in closed] == ["task-work-permit-dead"]
    assert "DELEGATED_BEFORE_RESTART" in closed[0]["reason_codes"]
    done = store.get("exe-1")
    assert done is not None and done.action.state == pb.ACTION_STATE_SUCCEEDED
    (node,) = [n for n in done.graph.nodes if n.task_id == "task-work-permit-dead"]
    assert node.status == common_pb2.TASK_STATUS_CANCELLED and node.HasField("finished_at")


@pytest.mark.parametrize("error", [
    "RELEASE_NOT_VERIFIED: workPermit.release answered RELEASED but the read-back failed: PERMIT_REGISTRY_UNAVAILABLE",
    "GOVERNANCE_UNAVAILABLE: workPermit.release POLICY_UNAVAILABLE: no policy decision",
])
def test_an_answer_that_says_nothing_definite_is_asked_again_never_failed(tmp_path: Path, error: str) -> None:
    # The work-permit definition's unknown_codes: the release may have happened (or was not decided yet).
    class UnknownOnce(FakeDispatcher):
        def run(self, ex: pb.Execution, **kw: Any) -> Dispatched:
            self.error = error if not self.runs else ""
            return super().run(ex, **kw)

    dispatcher = UnknownOnce({"verified": True})
    actions, store = _confirmed_then_crashed(tmp_path, dispatcher)
    stored = store.get("exe-1")
    assert stored is not None
    actions.resume(stored, pause_s=0)
    done = store.get("exe-1")
    assert done is not None and done.action.state == pb.ACTION_STATE_SUCCEEDED
    assert len(dispatcher.runs) == 2


def test_a_resumed_release_waits_while_the_first_call_is_still_in_flight(tmp_path: Path) -> None:
    class InFlightOnce(FakeDispatcher):
        def run(self, ex: pb.Execution, **kw: Any) -> Dispatched:
            self.error = "RELEASE_OUTCOME_UNKNOWN: workPermit.release IDEMPOTENCY_KEY_IN_FLIGHT: still running" \
                if not self.runs else ""
            return super().run(ex, **kw)

    dispatcher = InFlightOnce({"verified": True})
    actions, store = _confirmed_then_crashed(tmp_path, dispatcher)
    stored = store.get("exe-1")
    assert stored is not None
    actions.resume(stored, pause_s=0)
    done = store.get("exe-1")
    assert done is not None and done.action.state == pb.ACTION_STATE_SUCCEEDED
    assert len(dispatcher.runs) == 2


def test_a_resumed_release_whose_first_call_failed_ends_failed_at_once(tmp_path: Path) -> None:
    # The previous process's release failed verification and it died before storing that answer: under the
    # same key the capability service answers that the first call failed, for good. Not asked again.
    dispatcher = FakeDispatcher({"verified": False, "reason_code": "IDEMPOTENCY_KEY_FAILED",
                                 "status": "PENDING_RELEASE"},
                                error="RELEASE_FAILED_EARLIER: workPermit.release IDEMPOTENCY_KEY_FAILED: the first "
                                      "call with idempotency key 'act-1' failed after its effect was attempted "
                                      "(VERIFICATION_FAILED); workPermit.get reads back PENDING_RELEASE")
    actions, store = _confirmed_then_crashed(tmp_path, dispatcher)
    stored = store.get("exe-1")
    assert stored is not None
    actions.resume(stored, pause_s=0)
    done = store.get("exe-1")
    assert done is not None
    assert (done.action.state, done.status, done.action.verified) == (
        pb.ACTION_STATE_FAILED, pb.EXECUTION_STATUS_FAILED, False)
    assert "RELEASE_FAILED_EARLIER" in done.reason and "PENDING_RELEASE" in done.action.reason
    assert len(dispatcher.runs) == 1


def test_a_release_never_confirmed_is_not_run_on_resume(tmp_path: Path) -> None:
    dispatcher = FakeDispatcher({"verified": True})
    actions, store, _, ex = awaiting_confirmation(tmp_path, dispatcher=dispatcher)
    ex.action.state = pb.ACTION_STATE_EXECUTING
    store.save(ex)
    actions.resume(ex, pause_s=0)
    done = store.get("exe-1")
    assert done is not None and done.action.state == pb.ACTION_STATE_FAILED and not dispatcher.runs


# -- a release whose attempt got no definite answer ---------------------------------------------------

class LostAnswers(FakeDispatcher):
    """The release takes effect on the first call, but the first ``lost`` answers never come back
    (the agent or the capability service died): UNAVAILABLE, a timeout, the key still in flight."""

    FAILURES = (Dispatched(None, "UNAVAILABLE : the work-permit agent is unreachable", started=True),
                Dispatched(None, "DEADLINE_EXCEEDED after 10000 ms: deadline", timed_out=True, started=True))

    def __init__(self, lost: int) -> None:
        super().__init__({"verified": True})
        self.lost = lost

    def run(self, ex: pb.Execution, **kw: Any) -> Dispatched:
        if len(self.runs) < self.lost:
            self.runs.append(kw)
            if len(self.runs) == self.lost and self.lost > 2:
                self.error = "RELEASE_OUTCOME_UNKNOWN: workPermit.release IDEMPOTENCY_KEY_IN_FLIGHT: still running"
                done = super().run(ex, **kw)
                self.runs.pop()
                self.error = ""
                return done
            return self.FAILURES[(len(self.runs) - 1) % 2]
        return super().run(ex, **kw)  # the replay under the key: the stored outcome, verified


def _fast(actions: ReleaseActions, settle_s: float = 5.0) -> ReleaseActions:
    actions._settle_s, actions._pause_s, actions._retry_s = settle_s, 0.0, 0.0
    return actions


def test_a_release_whose_answer_was_lost_is_asked_again_under_its_key_until_it_is_known(tmp_path: Path) -> None:
    dispatcher = LostAnswers(lost=3)
    actions, store, _, ex = awaiting_confirmation(tmp_path, dispatcher=dispatcher)
    done = _fast(actions).confirm(ALICE, confirmation(ex))
    assert (done.action.state, done.status, done.action.verified) == (
        pb.ACTION_STATE_SUCCEEDED, pb.EXECUTION_STATUS_SUCCEEDED, True), done.action.reason
    assert len(dispatcher.runs) == 4
    assert {r["input"]["idempotency_key"] for r in dispatcher.runs} == {done.action.action_id}


def test_a_release_still_unknown_at_the_bound_says_so_and_is_settled_later(tmp_path: Path) -> None:
    dispatcher = LostAnswers(lost=10**9)
    actions, store, _, ex = awaiting_confirmation(tmp_path, dispatcher=dispatcher)
    done = _fast(actions, settle_s=0.05).confirm(ALICE, confirmation(ex))
    # Never FAILED as if nothing happened: still EXECUTING, saying the outcome is unknown.
    assert (done.action.state, done.status) == (pb.ACTION_STATE_EXECUTING, pb.EXECUTION_STATUS_RUNNING)
    assert done.action.reason.startswith("RELEASE_OUTCOME_UNKNOWN")
    stored = store.get("exe-1")
    assert stored is not None and stored.action.state == pb.ACTION_STATE_EXECUTING
    assert not [f for t, f in dispatcher.records if t == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED]
    dispatcher.lost = len(dispatcher.runs)  # the capability service is back: the replay tells what happened
    started = actions.settle_due()
    assert started == ["exe-1"]
    for _ in range(200):
        settled = store.get("exe-1")
        assert settled is not None
        if settled.action.state != pb.ACTION_STATE_EXECUTING:
            break
        time.sleep(0.01)
    assert (settled.action.state, settled.status, settled.action.verified) == (
        pb.ACTION_STATE_SUCCEEDED, pb.EXECUTION_STATUS_SUCCEEDED, True)
    assert any("RELEASE_OUTCOME_UNKNOWN" in f.get("reason_codes", []) for _, f in dispatcher.records)


def test_a_definite_refusal_ends_the_release_at_once(tmp_path: Path) -> None:
    refused = FakeDispatcher({"verified": False}, error="RELEASE_REFUSED: workPermit.release PERMIT_NOT_RELEASABLE")
    actions, _, _, ex = awaiting_confirmation(tmp_path, dispatcher=refused)
    done = _fast(actions).confirm(ALICE, confirmation(ex))
    assert (done.action.state, done.status) == (pb.ACTION_STATE_FAILED, pb.EXECUTION_STATUS_FAILED)
    assert "RELEASE_REFUSED" in done.reason and len(refused.runs) == 1
    # Refused before anything was written: it says so, never "could not be restored".
    assert done.action.effect == pb.ACTION_EFFECT_NONE and not done.action.compensated
    assert done.summary.endswith("Nothing was written: the permit is as it was.")
    assert "restored" not in done.summary


def test_a_release_that_never_reached_the_agent_is_a_definite_failure(tmp_path: Path) -> None:
    class Disabled(FakeDispatcher):
        def run(self, ex: pb.Execution, **kw: Any) -> Dispatched:
            self.runs.append(kw)
            return Dispatched(None, "AGENT_NOT_ACTIVE: work-permit-agent is DISABLED")

    dispatcher = Disabled()
    actions, _, _, ex = awaiting_confirmation(tmp_path, dispatcher=dispatcher)
    done = _fast(actions).confirm(ALICE, confirmation(ex))
    assert (done.action.state, done.status) == (pb.ACTION_STATE_FAILED, pb.EXECUTION_STATUS_FAILED)
    assert len(dispatcher.runs) == 1
    assert done.action.effect == pb.ACTION_EFFECT_NONE
