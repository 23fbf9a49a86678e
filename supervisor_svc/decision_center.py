"""The Decision Center (PRD §40–42, §66): humans decide what agents may not.

Reviews are opened by executions: a conflict no rule resolves, a high-risk
action needing a human approver, a system execution's recommendation. Every
call needs a verified user assertion; what the user may do is decided by the
policy engine (operation REVIEW, or OVERRIDE for an override), never here:
reviewer role in the tenant, never on one's own request, overrides only for
administrators with a reason. A review of another tenant does not exist for
the caller (NOT_FOUND).

Decisions resume the execution under review:

* APPROVE — a conflict review's approval resolves that conflict; when no
  conflict of the execution is left open the decision becomes
  RECOMMENDED_FOR_RELEASE (by a human, recorded as such). If the user asked for
  the release, the approval is also the human approval of it: the policy
  engine is asked again with it, and only if it counts (a human other than the
  requester) does the release move on to the requester's confirmation —
  otherwise the APPROVE is refused and nothing changes. An ACTION_APPROVAL
  review's approval works the same way. A RECOMMENDATION review's approval
  records that a human accepted it; nothing is executed.
* REJECT — the decision becomes NOT_RECOMMENDED (conflict), the action is
  REJECTED; the execution ends.
* REQUEST_INFORMATION — the review waits (INFORMATION_REQUESTED) with what is
  asked added to the execution's ``missing``; it can still be decided later.
* OVERRIDE — an administrator sets the decision (RECOMMENDED_FOR_RELEASE or
  NOT_RECOMMENDED) with a reason; as APPROVE / REJECT from there. An override
  changes the analysis decision, never the policy: the release still needs the
  policy engine and the requester's confirmation.
* ASSIGN — records who should decide; nothing else changes.

A LIMIT review (an execution reached a limit its tenant sends to human review,
PRD §51): APPROVE lets the execution go on past that limit — it runs on from its
checkpoint with the limit waived (``Execution.waived_limits``); REJECT stops it
there (STOPPED, the limit and the reviewer's reason named). It cannot be
overridden: nothing was analysed that a decision could be set on.

Reading the execution behind a review is also an act the policy engine
decides (READ_EXECUTION, see supervisor_svc.privacy), after the review check.
A decision is recorded in the audit log (REVIEW_DECIDED) before it applies:
if audit cannot take it, UNAVAILABLE ``AUDIT_UNAVAILABLE`` and nothing changed.
Refusals are kept durably (the refusal stands anyway).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from agentmesh import assertion, errors, telemetry
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc.actions import ApprovalNotCounted, Authorizer, ReleaseActions
from supervisor_svc.aggregation import missing_item
from supervisor_svc.definitions import DomainCatalog, default_catalog
from supervisor_svc.dispatch import TaskDispatcher, now_ts
from supervisor_svc.executions import UNDECIDED, ExecutionStore

log = logging.getLogger(__name__)


# Policy reason codes → the ErrorInfo reason a refused reviewer sees.
_REFUSALS = {
    "review.requires_reviewer": "REVIEWER_ROLE_REQUIRED",
    "review.own_request": "OWN_REQUEST",
    "override.own_request": "OWN_REQUEST",
    "override.requires_admin": "ADMIN_ROLE_REQUIRED",
    "override.requires_reason": "OVERRIDE_REASON_REQUIRED",
}


def _decision_name(value: int) -> str:
    return str(dc_pb2.ReviewDecision.Name(value)).removeprefix("REVIEW_DECISION_")


class DecisionCenter:
    """List, show and decide reviews (see the module docstring)."""

    def __init__(self, *, store: ExecutionStore, actions: ReleaseActions, authorize: Authorizer,
                 dispatcher: TaskDispatcher, visible: Callable[[assertion.UserIdentity, str], pb.Execution],
                 snapshot: Callable[[assertion.UserIdentity, str], pb.Execution] | None = None,
                 domains: DomainCatalog | None = None,
                 continue_past_limit: Callable[[dc_pb2.ReviewItem, str], pb.Execution] | None = None) -> None:
        """Args:
        visible: The execution if the policy engine lets the user read it (PERMISSION_DENIED otherwise).
        snapshot: The execution as the user may see it, without asking again (after ``visible`` allowed it).
        domains: The domain definitions (what a review is about; the shipped ones by default).
        continue_past_limit: ``(approved review, reviewer)``: lets an execution stopped at a limit go on
            past it, storing the review with it (``Orchestrator.continue_past_limit``).
        """
        self._domains = domains or default_catalog()
        self._queue_capability = _queue_capability(self._domains)
        self._continue = continue_past_limit
        self._store = store
        self._actions = actions
        self._authorize = authorize
        self._dispatch = dispatcher
        self._visible = visible
        self._snapshot = snapshot or visible

    # -- authority ---------------------------------------------------------------

    def _check(self, user: assertion.UserIdentity, *, operation: int, resource: str, requester: str = "",
               capability_id: str = "", reason: str = "", execution_id: str = "",
               review_id: str = "", resource_type: str = "") -> common_pb2.PolicyDecision:
        """The policy engine's decision on a review operation; PERMISSION_DENIED (audited) unless ALLOW."""
        request = policy_pb2.AuthorizeRequest(
            user=user.to_context(),
            actor_type=common_pb2.ACTOR_TYPE_USER,
            agent=common_pb2.AgentPrincipal(agent_id="supervisor", execution_id=execution_id,
                                            delegation_chain=[f"user:{user.tenant_id}/{user.user_id}",
                                                              "svc:supervisor"]),
            delegation_depth=1, capability_id=capability_id or self._queue_capability,
            resource=policy_pb2.ResourceRef(type=resource_type or "ReviewQueue", id=resource or "-",
                                            tenant_id=user.tenant_id),
            # Reading the queue decides nothing about anyone's request: "-" names no requester.
            context=policy_pb2.OperationContext(subject_requester_id=requester or "-", override_reason=reason),
            operation=operation)  # type: ignore[arg-type]
        try:
            decision = self._authorize(request).decision
        except errors.MeshError as err:
            self._dispatch.narrate(audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                                   execution_id=execution_id, tenant_id=user.tenant_id, user_id=user.user_id,
                                   resource=f"review:{review_id}" if review_id else "decision-center",
                                   reason_codes=["POLICY_UNAVAILABLE", policy_pb2.OperationKind.Name(operation),
                                                 err.reason])
            raise errors.recorded(errors.Unavailable(f"no policy decision, so no review: {err.message}",
                                                     reason="POLICY_UNAVAILABLE")) from err
        if decision.effect != common_pb2.POLICY_EFFECT_ALLOW:
            reason = next((_REFUSALS[c] for c in decision.reason_codes if c in _REFUSALS), "POLICY_DENIED")
            self._dispatch.narrate(audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                                   execution_id=execution_id, tenant_id=user.tenant_id, user_id=user.user_id,
                                   resource=f"review:{review_id}" if review_id else "decision-center",
                                   policy_decision=decision,
                                   reason_codes=[reason, policy_pb2.OperationKind.Name(operation),
                                                 *decision.reason_codes])
            raise errors.recorded(errors.PermissionDenied(
                f"the policy engine refused: {', '.join(decision.reason_codes)}", reason=reason,
                metadata={"decision_id": decision.decision_id, "reason_codes": ",".join(decision.reason_codes),
                          "field": "user_assertion"}))
        return decision

    def _review(self, user: assertion.UserIdentity, review_id: str) -> dc_pb2.ReviewItem:
        if not review_id:
            raise errors.InvalidArgument("review_id is required", reason="MISSING_FIELD", field="review_id")
        item = self._store.review(review_id)
        if item is None or item.tenant_id != user.tenant_id:
            raise self._not_found(user, review_id)
        return item

    def _not_found(self, user: assertion.UserIdentity, review_id: str) -> errors.NotFound:
        """The one answer for a review of another tenant and one that does not exist (audited)."""
        self._dispatch.narrate(audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                               tenant_id=user.tenant_id, user_id=user.user_id, resource=f"review:{review_id}",
                               reason_codes=["REVIEW_NOT_FOUND"])
        return errors.recorded(errors.NotFound(f"review {review_id!r} not found", reason="REVIEW_NOT_FOUND",
                                               field="review_id"))

    # -- reading -----------------------------------------------------------------

    def list(self, user: assertion.UserIdentity, req: dc_pb2.ListReviewsRequest) -> list[dc_pb2.ReviewItem]:
        """Reviews of the user's tenant (undecided ones unless a status is asked)."""
        self._check(user, operation=policy_pb2.OPERATION_KIND_REVIEW, resource="review-queue")
        statuses = (req.status,) if req.status else UNDECIDED
        return self._store.reviews(user.tenant_id, statuses=statuses, execution_id=req.execution_id)

    def get(self, user: assertion.UserIdentity, review_id: str) -> tuple[dc_pb2.ReviewItem, pb.Execution]:
        """One review and its execution, evidence included."""
        item = self._review(user, review_id)
        self._check(user, operation=policy_pb2.OPERATION_KIND_REVIEW, resource="review-queue",
                    execution_id=item.execution_id, review_id=review_id)
        return item, self._visible(user, item.execution_id)

    # -- deciding ------------------------------------------------------------------

    def submit(self, user: assertion.UserIdentity,
               req: dc_pb2.SubmitReviewDecisionRequest) -> tuple[dc_pb2.ReviewItem, pb.Execution]:
        """Validates, authorises (policy), applies and audits one human decision."""
        decision = req.decision
        if decision == dc_pb2.REVIEW_DECISION_UNSPECIFIED:
            raise errors.InvalidArgument("decision is required", reason="MISSING_FIELD", field="decision")
        if decision not in dc_pb2.ReviewDecision.values():
            raise errors.InvalidArgument(f"unknown decision {decision}", reason="INVALID_DECISION", field="decision")
        if decision in (dc_pb2.REVIEW_DECISION_REJECT, dc_pb2.REVIEW_DECISION_REQUEST_INFORMATION,
                        dc_pb2.REVIEW_DECISION_OVERRIDE) and not req.reason.strip():
            raise errors.InvalidArgument(f"{_decision_name(decision)} needs a reason", reason="MISSING_FIELD",
                                         field="reason")
        if decision == dc_pb2.REVIEW_DECISION_ASSIGN and not req.assignee.strip():
            raise errors.InvalidArgument("ASSIGN needs an assignee", reason="MISSING_FIELD", field="assignee")
        if decision == dc_pb2.REVIEW_DECISION_OVERRIDE and req.override_decision not in (
                common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE, common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED):
            raise errors.InvalidArgument("OVERRIDE needs override_decision RECOMMENDED_FOR_RELEASE or NOT_RECOMMENDED",
                                         reason="INVALID_OVERRIDE_DECISION", field="override_decision")
        with self._actions.lock:
            item = self._review(user, req.review_id)
            ex = self._store.get(item.execution_id)
            if ex is None:
                raise self._not_found(user, req.review_id)
            with telemetry.mesh_ids(execution_id=ex.execution_id, correlation_id=ex.trace.correlation_id):
                return self._submit(user, req, item, ex)

    def _submit(self, user: assertion.UserIdentity, req: dc_pb2.SubmitReviewDecisionRequest,
                item: dc_pb2.ReviewItem, ex: pb.Execution) -> tuple[dc_pb2.ReviewItem, pb.Execution]:
        decision = req.decision
        if item.status not in UNDECIDED:
            raise errors.FailedPrecondition(
                f"review {item.review_id} is already {dc_pb2.ReviewStatus.Name(item.status)}",
                reason="REVIEW_CLOSED", field="review_id")
        override = decision == dc_pb2.REVIEW_DECISION_OVERRIDE
        about = _about(ex, self._domains)
        limit = item.kind == dc_pb2.REVIEW_KIND_LIMIT
        if limit and override:
            raise errors.FailedPrecondition("a limit review is approved (the execution goes on) or rejected (it "
                                            "stops); there is no analysis decision to override",
                                            reason="REVIEW_NOT_OVERRIDABLE", field="decision")
        policy_decision = self._check(
            user, operation=policy_pb2.OPERATION_KIND_OVERRIDE if override else policy_pb2.OPERATION_KIND_REVIEW,
            resource=item.action.resource_id or about.resource_id, requester=item.requester,
            capability_id=item.action.capability_id or about.capability_id, resource_type=about.resource_type,
            reason=req.reason if override else "", execution_id=ex.execution_id, review_id=item.review_id)
        approve = decision == dc_pb2.REVIEW_DECISION_APPROVE or (
            override and req.override_decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE)
        reject = decision == dc_pb2.REVIEW_DECISION_REJECT or (
            override and req.override_decision == common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED)
        waiting = ex.status in (pb.EXECUTION_STATUS_AWAITING_REVIEW, pb.EXECUTION_STATUS_SUCCEEDED,
                                pb.EXECUTION_STATUS_PARTIAL) and (
            not ex.HasField("action") or ex.action.state == pb.ACTION_STATE_AWAITING_APPROVAL)
        if limit and ex.status != pb.EXECUTION_STATUS_AWAITING_REVIEW:
            waiting = False
        if (approve or reject) and not waiting:
            raise errors.FailedPrecondition("the execution no longer waits for this review",
                                            reason="EXECUTION_NOT_AWAITING_REVIEW", field="review_id")
        # Reading the execution under review is the policy engine's to allow, too (its answer carries it).
        self._visible(user, ex.execution_id)
        reviewer = f"{user.tenant_id}/{user.user_id}"
        event = dc_pb2.ReviewEvent(decision=decision, reviewer=reviewer, reason=req.reason,
                                   assignee=req.assignee.strip(), override_decision=req.override_decision,
                                   policy_decision_id=policy_decision.decision_id, at=now_ts())
        before = pb.Execution()
        before.CopyFrom(ex)
        recorded: list[bool] = []
        closed: tuple[dc_pb2.ReviewItem, ...] = ()  # the execution's other reviews a rejection closes

        def record_decision() -> None:
            """REVIEW_DECIDED, durable before the decision changes anything (once)."""
            if recorded:
                return
            self._dispatch.govern(
                audit_pb2.AUDIT_EVENT_TYPE_REVIEW_DECIDED, outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS,
                execution_id=ex.execution_id, tenant_id=ex.tenant_id, user_id=user.user_id,
                resource=f"review:{item.review_id}", policy_decision=policy_decision, analysis_decision=ex.decision,
                reason_codes=[_decision_name(decision), item.review_id,
                              f"kind={dc_pb2.ReviewKind.Name(item.kind).removeprefix('REVIEW_KIND_')}",
                              f"requester={item.requester}", f"reviewer={reviewer}",
                              *([f"assignee={req.assignee.strip()}"] if decision == dc_pb2.REVIEW_DECISION_ASSIGN
                                else []),
                              *([req.reason] if req.reason else [])])
            recorded.append(True)

        if decision == dc_pb2.REVIEW_DECISION_ASSIGN:
            item.assignee = req.assignee.strip()
        elif decision == dc_pb2.REVIEW_DECISION_REQUEST_INFORMATION:
            item.status = dc_pb2.REVIEW_STATUS_INFORMATION_REQUESTED
            ex.missing.append(missing_item(
                pb.MISSING_KIND_INFORMATION_REQUESTED, "", req.reason,
                f"information requested by {reviewer} ({item.review_id}): {req.reason}"))
        elif approve and limit:
            if self._continue is None:
                raise errors.FailedPrecondition("this Decision Center cannot resume executions",
                                                reason="EXECUTION_NOT_RESUMABLE", field="review_id")
            record_decision()
            item.status = dc_pb2.REVIEW_STATUS_APPROVED
            item.history.append(event)
            item.updated_at.CopyFrom(now_ts())
            # The orchestrator takes the stored execution from here (RUNNING again, past the limit), and
            # stores the review with it.
            self._continue(item, reviewer)
            return item, self._snapshot(user, ex.execution_id)
        elif reject and limit:
            record_decision()
            ex.status = pb.EXECUTION_STATUS_STOPPED
            ex.decision = common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE
            ex.reason = f"{item.limit.limit_reason}: stopped at the limit by {reviewer} in review {item.review_id}: " \
                        f"{req.reason}"
            ex.summary = f"{ex.summary}\nStopped at the limit by {reviewer}: {req.reason}"
            item.status = dc_pb2.REVIEW_STATUS_REJECTED
        elif approve:
            try:
                self._approve(user, item, ex, override=override, reason=req.reason, before_effect=record_decision)
            except ApprovalNotCounted as refused:
                ex.CopyFrom(before)
                self._dispatch.narrate(
                    audit_pb2.AUDIT_EVENT_TYPE_REVIEW_DECIDED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                    execution_id=ex.execution_id, tenant_id=ex.tenant_id, user_id=user.user_id,
                    resource=f"review:{item.review_id}", policy_decision=refused.decision,
                    reason_codes=["APPROVAL_NOT_INDEPENDENT", _decision_name(decision), *refused.decision.reason_codes])
                raise errors.recorded(errors.PermissionDenied(
                    "this approval does not count: a high-risk action needs a human approver other than the "
                    f"requester ({', '.join(refused.decision.reason_codes)})", reason="APPROVAL_NOT_INDEPENDENT",
                    metadata={"field": "user_assertion", "reason_codes": ",".join(refused.decision.reason_codes)})) \
                    from refused
            item.status = dc_pb2.REVIEW_STATUS_OVERRIDDEN if override else dc_pb2.REVIEW_STATUS_APPROVED
        elif reject:
            closed = self._reject(item, ex, reviewer, req.reason, override=override, before_effect=record_decision)
            item.status = dc_pb2.REVIEW_STATUS_OVERRIDDEN if override else dc_pb2.REVIEW_STATUS_REJECTED
        record_decision()
        item.history.append(event)
        item.updated_at.CopyFrom(now_ts())
        if ex.HasField("action"):
            item.action.CopyFrom(ex.action)
            item.action.confirmation_token = ""
        if approve or reject:
            ex.finished_at.CopyFrom(now_ts())
        # The review, the execution it moves and the reviews closed with it, in one transaction: a crash
        # between two writes would leave the review decided and the execution waiting for it, with no review
        # left to decide.
        self._store.save(ex, reviews=[item, *closed])
        if approve or reject:
            self._dispatch.narrate(
                audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED if ex.status != pb.EXECUTION_STATUS_AWAITING_REVIEW
                and ex.status != pb.EXECUTION_STATUS_AWAITING_CONFIRMATION
                else audit_pb2.AUDIT_EVENT_TYPE_STATUS_CHANGED,
                outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS, execution_id=ex.execution_id, tenant_id=ex.tenant_id,
                user_id=ex.user_id, analysis_decision=ex.decision,
                reason_codes=[pb.ExecutionStatus.Name(ex.status), f"after review {item.review_id}",
                              *([ex.action.reason] if ex.HasField("action") else [])])
        out = self._snapshot(user, ex.execution_id)
        return item, out

    def _approve(self, user: assertion.UserIdentity, item: dc_pb2.ReviewItem, ex: pb.Execution, *, override: bool,
                 reason: str, before_effect: Callable[[], None]) -> None:
        who = f"{user.tenant_id}/{user.user_id}"
        how = "overridden" if override else "approved"
        if item.kind == dc_pb2.REVIEW_KIND_RECOMMENDATION:
            _stop_waiting(ex)
            ex.summary = f"{ex.summary}\nRecommendation accepted by {who}" + (f": {reason}" if reason else ".")
            return
        if item.kind == dc_pb2.REVIEW_KIND_CONFLICT:
            for c in ex.conflicts:
                if c.review_id == item.review_id:
                    c.resolution = f"human: {how} by {who}" + (f" ({reason})" if reason else "")
            still_open = [r.review_id for r in self._store.reviews(ex.tenant_id, statuses=UNDECIDED,
                                                                  execution_id=ex.execution_id)
                          if r.review_id != item.review_id and r.kind == dc_pb2.REVIEW_KIND_CONFLICT]
            if still_open:
                return
        if override or ex.decision == common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW:
            # A reviewer's approval settles only what the analysis left open (a definitive FAIL elsewhere
            # stands); an administrator's override sets the decision. Recorded as theirs, never the agents'.
            ex.decision = common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
            ex.reason = f"HUMAN_REVIEW: {how} by {who}"
            ex.summary = f"{ex.summary}\nRecommended for release after human review ({how} by {who})."
        if ex.HasField("action") and ex.action.state == pb.ACTION_STATE_AWAITING_APPROVAL:
            # The approval of the review is the human approval of the release — if the policy says it counts.
            self._actions.gate(ex, approval_review_id=item.review_id, approver=user.user_id,
                               before_effect=before_effect)
        else:
            _stop_waiting(ex)

    def _reject(self, item: dc_pb2.ReviewItem, ex: pb.Execution, reviewer: str, reason: str, *,
                override: bool, before_effect: Callable[[], None]) -> tuple[dc_pb2.ReviewItem, ...]:
        """Rejects ``ex`` by ``item``; returns its other undecided reviews, closed with it (to be stored with it)."""
        how = "overridden" if override else "rejected"
        if item.kind == dc_pb2.REVIEW_KIND_CONFLICT or override:
            ex.decision = common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED
            ex.reason = f"HUMAN_REVIEW: {how} by {reviewer}: {reason}"
            for c in ex.conflicts:
                if c.review_id == item.review_id:
                    c.resolution = f"human: {how} by {reviewer} ({reason})"
        ex.summary = f"{ex.summary}\n{how.capitalize()} by {reviewer}: {reason}"
        before_effect()
        if ex.HasField("action"):
            self._actions.reject(ex, f"REJECTED: {how} by {reviewer} in review {item.review_id}: {reason}")
        _stop_waiting(ex)
        # The execution is decided: its other undecided reviews close with it.
        others = tuple(other for other in self._store.reviews(ex.tenant_id, statuses=UNDECIDED,
                                                              execution_id=ex.execution_id)
                       if other.review_id != item.review_id)
        for other in others:
            other.status = dc_pb2.REVIEW_STATUS_REJECTED
            other.history.append(dc_pb2.ReviewEvent(decision=dc_pb2.REVIEW_DECISION_REJECT, reviewer=reviewer,
                                                    reason=f"closed with review {item.review_id}", at=now_ts()))
        return others


def _stop_waiting(ex: pb.Execution) -> None:
    """The execution no longer waits for a human; an analysis' own status (e.g. PARTIAL) stays as it was."""
    if ex.status == pb.EXECUTION_STATUS_AWAITING_REVIEW:
        ex.status = pb.EXECUTION_STATUS_SUCCEEDED


@dataclass(frozen=True)
class _About:
    """What a review of an execution is asked of the policy engine about."""

    capability_id: str
    resource_type: str
    resource_id: str


def _queue_capability(domains: DomainCatalog) -> str:
    """The capability Decision Center reads (the queue, one review) are asked about: the first action's of the
    catalogue (domains in priority order), else the first task's first capability."""
    for d in domains.domains:
        for a in d.actions.values():
            return a.capability
    for d in domains.domains:
        for plan in d.plans.values():
            for t in plan.tasks:
                if t.requirement.required_capabilities:
                    return t.requirement.required_capabilities[0]
    return "-"


def _about(ex: pb.Execution, domains: DomainCatalog) -> _About:
    """What an execution's review is about: its intent's action (capability and resource) when it has one,
    else its first task's first capability and the intent's first subject (from the domain definition)."""
    from supervisor_svc.intent import parse_intent

    parsed = parse_intent(ex.request_text, catalog=domains) if ex.request_text.strip() else None
    if parsed is None or parsed.domain is None or parsed.definition is None:
        return _About("", "", "-")
    domain, intent, subjects = parsed.domain, parsed.definition, parsed.subjects
    action = domain.actions.get(intent.action) if intent.action else None
    if action is not None:
        return _About(action.capability, action.policy_resource_type, subjects.get(action.subject, "-"))
    first = ex.graph.nodes[0].required_capabilities[0] if ex.graph.nodes and \
        ex.graph.nodes[0].required_capabilities else ""
    subject = intent.subjects[0]
    return _About(first, subject.capitalize(), subjects.get(subject, "-"))
