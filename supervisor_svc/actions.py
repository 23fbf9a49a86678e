"""An intent's action, e.g. the release (PRD §67, §73): decision → policy → human approval → the user's
confirmation → the action → verification.

What the action is comes from the domain definition (``actions`` of
``supervisor_svc/domains/*.yaml``, :class:`~supervisor_svc.definitions.ActionDef`):
its capability, the agent that performs it, the resource it acts on, its
arguments and the task's input, and the result field that says it was read
back. The work-permit domain's is the release, ``workPermit.release`` by the
work-permit agent; the text below speaks of it.

When the user asks for the release ("... e libere se estiver tudo correto",
or ``request_release``), the finished analysis proposes ``workPermit.release``
as a :class:`ProposedAction`; nothing is released unless, in this order:

1. the decision is RECOMMENDED_FOR_RELEASE (otherwise NOT_ELIGIBLE, and a
   REQUIRES_REVIEW decision waits for the conflict's review first);
2. the policy engine, asked about the exact action on the user's authority,
   does not deny it. HUMAN_APPROVAL_REQUIRED opens an ACTION_APPROVAL review in
   the Decision Center; an approval counts only if the policy engine, asked
   again with it, no longer requires one (a human other than the requester);
3. the requester confirms with the single-use token (bound to user, tenant,
   execution and the action's digest; it expires). The supervisor asks for
   this confirmation before any mutation even if a policy would ALLOW it
   without one: it never acts for a user more freely than the policy, only
   more carefully;
4. the work-permit agent releases under a fresh grant that carries the
   confirmation and the approval, bound to the action's digest — the
   capability service asks the policy engine again and verifies the effect by
   reading it back; it compensates (restores the previous state) if that fails.

A release in flight when the supervisor stopped (the token spent, the action
EXECUTING or not yet marked so) is settled on restart by :meth:`ReleaseActions.resume`:
it runs again under the same idempotency key (the action id), so the capability
service answers with what happened — the stored outcome, or, if the call was
cut off, what reading the permit back shows — and only runs the release if it
never took effect. The execution then says what the permit is. The same holds
for a confirmed release whose attempt got no definite answer (the agent or the
capability service died, a timeout, the key still in flight): it is asked again
under the same key with backoff for ``settle_s``, then, if still unknown, left
EXECUTING ``RELEASE_OUTCOME_UNKNOWN`` and asked again later (:meth:`ReleaseActions.settle_due`)
— it never ends FAILED as if nothing had happened.

Every step is audited with the execution id: the policy decision, the review,
the confirmation (issued, used, refused, declined, expired), the release task.
The records that let the release move on are durable before it does (fail
closed, see supervisor_svc.recording): the policy decision that allows it
(else the action is DENIED, ``AUDIT_UNAVAILABLE``) and the confirmation given
(else the confirmation is refused UNAVAILABLE ``AUDIT_UNAVAILABLE`` and the
token stays unused). Refusals, a decline and what happened afterwards are
kept durably without holding anything back.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import hashlib
import hmac
import logging
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh import assertion, errors, grants, telemetry
from agentmesh.structs import struct_dict
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc import executions
from supervisor_svc.definitions import ActionDef, DomainCatalog, default_catalog
from supervisor_svc.dispatch import Actor, Dispatched, TaskDispatcher, close_stored_delegations, now_ts
from supervisor_svc.executions import ExecutionStore
from supervisor_svc.privacy import not_found
from supervisor_svc.recording import AUDIT_UNAVAILABLE

log = logging.getLogger(__name__)

DEFAULT_CONFIRMATION_TTL_S = 300

Authorizer = Callable[[policy_pb2.AuthorizeRequest], policy_pb2.AuthorizeResponse]


class ApprovalNotCounted(Exception):
    """The policy engine still requires a human approval after this one: it does not count."""

    def __init__(self, decision: common_pb2.PolicyDecision) -> None:
        super().__init__(", ".join(decision.reason_codes))
        self.decision = decision


SUCCEEDED, FAILED, UNKNOWN = "succeeded", "failed", "unknown"
"""What one release attempt says happened to the permit."""
OUTCOME_UNKNOWN = "RELEASE_OUTCOME_UNKNOWN"
DEFAULT_SETTLE_S = 30.0
"""How long a release is asked again, under its key, while its outcome is unknown, before it is left for later."""
DEFAULT_RETRY_S = 5.0
"""How long a release whose outcome is still unknown waits before it is asked again (see settle_due)."""

_UNKNOWN_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED")
"""A dispatch that failed with these never got an answer from the capability service."""
_UNKNOWN_REASONS = ("IDEMPOTENCY_KEY_IN_FLIGHT", OUTCOME_UNKNOWN)
"""What any agent says when the action may have taken effect, or was not decided yet (the definition adds its own)."""


def _effect(result: common_pb2.AgentResult | None, action: ActionDef) -> dict[str, Any]:
    """The effect record the agent reports (``result.release``), or ``{}``."""
    if result is None or action.effect_field not in result.result.fields:
        return {}
    value = result.result.fields[action.effect_field]
    if value.WhichOneof("kind") != "struct_value":
        return {}
    out: dict[str, Any] = struct_dict(value.struct_value)
    return out


def _verdict(done: Dispatched, may_have_happened: bool, action: ActionDef) -> str:
    """What one attempt says: SUCCEEDED (read back RELEASED), FAILED (a definite answer) or UNKNOWN.

    UNKNOWN is anything that does not say what the permit is: the agent or the capability service
    unavailable, a timeout, a crash, the first call under the key still in flight, a release
    acknowledged but not read back. A dispatch that never reached the agent (it is not ACTIVE)
    is definite only if no earlier attempt may have taken effect.
    """
    result = done.result
    if result is None:
        transient = done.failure.split(" ", 1)[0].split(":", 1)[0] in _UNKNOWN_CODES
        return UNKNOWN if (transient or done.timed_out or done.started or may_have_happened) else FAILED
    if result.status != common_pb2.RESULT_STATUS_FAILED and _verified(result, action):
        return SUCCEEDED
    if any(reason in result.error_reason for reason in (*_UNKNOWN_REASONS, *action.unknown_codes)):
        return UNKNOWN
    return FAILED


def _verified(result: common_pb2.AgentResult, action: ActionDef) -> bool:
    """Whether the agent read the effect back (the definition's ``verified`` field is true)."""
    return _effect(result, action).get(action.verified.split(".", 1)[1]) is True


def token_digest(token: str) -> str:
    """How a confirmation token is stored and compared."""
    return hashlib.sha256(token.encode()).hexdigest()


def _ts(moment: dt.datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(moment)
    return ts


_NOTHING_WRITTEN = ("NOT_AUTHORISED", "GOVERNANCE_UNAVAILABLE", "CAPABILITY_REJECTED", "CAPABILITY_REFUSED",
                    "AGENT_DISABLED", "AGENT_RETIRED", "AGENT_NOT_ACTIVE", "AGENT_NOT_FOUND")
"""Error codes of a failed action that was refused before anything was written, whatever the domain: the
governance refused the capability call, or the task was never dispatched (the definition adds its own)."""


def action_effect(done: Dispatched, why: str, compensated: bool, action: ActionDef) -> pb.ActionEffect:
    """What a failed action did to its resource: never "could not be restored" for one that wrote nothing."""
    code = why.split(":", 1)[0].split(" ", 1)[0]
    if done.result is None:
        return pb.ACTION_EFFECT_UNKNOWN if done.started else pb.ACTION_EFFECT_NONE
    if action.verification_failed_code and code == action.verification_failed_code:
        return pb.ACTION_EFFECT_COMPENSATED if compensated else pb.ACTION_EFFECT_NOT_RESTORED
    if code in _NOTHING_WRITTEN or code in action.nothing_written_codes:
        return pb.ACTION_EFFECT_NONE
    return pb.ACTION_EFFECT_UNKNOWN


class ReleaseActions:
    """Proposes, gates, confirms and executes the release of a permit (see the module docstring)."""

    def __init__(self, *, store: ExecutionStore, dispatcher: TaskDispatcher, authorize: Authorizer,
                 capabilities: Mapping[str, cap_pb2.CapabilityDefinition],
                 confirmation_ttl_s: float = DEFAULT_CONFIRMATION_TTL_S,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
                 settle_s: float = DEFAULT_SETTLE_S, pause_s: float = 0.5, retry_s: float = DEFAULT_RETRY_S,
                 domains: DomainCatalog | None = None) -> None:
        """``settle_s``: how long a release whose outcome is unknown is asked again (backoff from
        ``pause_s``, doubling up to 4 s) before it is left EXECUTING ``RELEASE_OUTCOME_UNKNOWN``;
        ``retry_s``: how long it then waits before :meth:`settle_due` asks again; ``domains``: where
        each action's definition is found (by its capability), the shipped definitions by default."""
        self._domains = domains or default_catalog()
        self._settle_s = settle_s
        self._pause_s = pause_s
        self._retry_s = retry_s
        self._settling: set[str] = set()
        """Executions whose release this process is asking about right now."""
        self._unsettled: dict[str, float] = {}
        """Executions whose release outcome is still unknown -> when to ask again (monotonic)."""
        self._settle_lock = threading.Lock()
        self._store = store
        self._dispatch = dispatcher
        self._authorize = authorize
        self._capabilities = dict(capabilities)
        self._ttl_s = confirmation_ttl_s
        self._clock = clock
        self.lock = threading.RLock()
        """Held while an execution's action or reviews change: one decision at a time."""

    # -- proposing -------------------------------------------------------------

    def definition(self, ex: pb.Execution) -> ActionDef:
        """The definition of an execution's proposed action (by its capability).

        Raises:
            agentmesh.errors.FailedPrecondition: ``ACTION_NOT_DEFINED`` — no domain defines it (any more).
        """
        found = self._domains.action(ex.action.capability_id)
        if found is None:
            raise errors.FailedPrecondition(f"no domain definition defines the action {ex.action.capability_id!r}",
                                            reason="ACTION_NOT_DEFINED", field="capability_id")
        return found

    def propose(self, ex: pb.Execution, user: assertion.UserIdentity, spec: ActionDef,
                subjects: Mapping[str, str], ttl_s: int = 0) -> None:
        """Attaches the action to a decided execution and moves it as far as it can go without a human."""
        resource_id = subjects[spec.subject]
        values = {**subjects, "tenant": user.tenant_id, "user": user.user_id, "execution": ex.execution_id}
        arguments = {k: t.render(values) for k, t in spec.arguments.items()}
        action = pb.ProposedAction(action_id=f"act-{uuid.uuid4().hex[:16]}", capability_id=spec.capability,
                                   resource_id=resource_id,
                                   action_digest=grants.action_digest(spec.capability, arguments))
        action.arguments.update(arguments)
        ex.action.CopyFrom(action)
        self._store.add_action(action.action_id, ex.execution_id, user.to_context(), max(0, ttl_s))
        decision = ex.decision
        if decision == common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW:
            reviews = [c.review_id for c in ex.conflicts if c.review_id]
            if not reviews:
                # Review required without a conflict (e.g. a weak FAIL): the release itself goes to a human.
                review = dc_pb2.ReviewItem(
                    execution_id=ex.execution_id, tenant_id=ex.tenant_id, kind=dc_pb2.REVIEW_KIND_ACTION_APPROVAL,
                    status=dc_pb2.REVIEW_STATUS_OPEN, requester=user.user_id, analysis_decision=decision,
                    summary=f"The analysis of {spec.resource_type} {resource_id} requires a human review "
                            f"({ex.reason}); approve or reject its {spec.verb}", created_at=now_ts(),
                    updated_at=now_ts())
                review.action.CopyFrom(ex.action)
                reviews = [self._store.add_review(review)]
            self._set(ex, pb.ACTION_STATE_AWAITING_APPROVAL,
                      f"REVIEW_REQUIRED: the analysis needs a human review first ({', '.join(reviews)}); "
                      "its approval by a reviewer other than the requester is the human approval of the release")
            ex.status = pb.EXECUTION_STATUS_AWAITING_REVIEW
            return
        if decision != common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE:
            self._close(ex, pb.ACTION_STATE_NOT_ELIGIBLE,
                        f"DECISION_NOT_RECOMMENDED: the decision is "
                        f"{common_pb2.AnalysisDecision.Name(decision).removeprefix('ANALYSIS_DECISION_')}; "
                        f"a {spec.verb} needs RECOMMENDED_FOR_RELEASE")
            return
        self.gate(ex)

    def gate(self, ex: pb.Execution, *, approval_review_id: str = "", approver: str = "",
             before_effect: Callable[[], None] | None = None) -> None:
        """Asks the policy engine about the action (with the approval, if any) and moves it on.

        ``before_effect`` runs once the policy engine's decision is known and
        recorded, just before the action changes state (a reviewer's decision
        is recorded there); if it raises, nothing changes.

        Raises:
            ApprovalNotCounted: an approval was given and the policy engine still requires one.
            agentmesh.errors.MeshError: with an approval, no (recorded) policy decision.
        """
        record = self._store.action(ex.execution_id)
        assert record is not None, "gate() on an execution without a proposed action"
        try:
            decision = self._policy(ex, record.requester, approval_review_id, approver)
        except errors.MeshError as err:
            if approval_review_id:
                raise
            if err.reason == AUDIT_UNAVAILABLE:
                why = f"{AUDIT_UNAVAILABLE}: the policy decision could not be recorded, so no release"
            else:
                why = f"POLICY_UNAVAILABLE: no policy decision, so no release ({err.message})"
            self._close(ex, pb.ACTION_STATE_DENIED, why)
            return
        ex.action.policy_decision.CopyFrom(decision)
        spec = self.definition(ex)
        effect = decision.effect
        if effect == common_pb2.POLICY_EFFECT_HUMAN_APPROVAL_REQUIRED:
            if approval_review_id:
                raise ApprovalNotCounted(decision)
            review = dc_pb2.ReviewItem(
                execution_id=ex.execution_id, tenant_id=ex.tenant_id, kind=dc_pb2.REVIEW_KIND_ACTION_APPROVAL,
                status=dc_pb2.REVIEW_STATUS_OPEN, requester=record.user_id,
                summary=f"Approve the {spec.verb} of {spec.resource_type} {ex.action.resource_id}, asked by "
                        f"{record.user_id} and recommended by the team analysis ({', '.join(decision.reason_codes)})",
                analysis_decision=ex.decision, created_at=now_ts(), updated_at=now_ts())
            review.action.CopyFrom(ex.action)
            review.action.state = pb.ACTION_STATE_AWAITING_APPROVAL
            review_id = self._store.add_review(review)
            self._set(ex, pb.ACTION_STATE_AWAITING_APPROVAL,
                      f"HUMAN_APPROVAL_REQUIRED: a human other than the requester must approve review {review_id}")
            ex.status = pb.EXECUTION_STATUS_AWAITING_REVIEW
            self._dispatch.narrate(audit_pb2.AUDIT_EVENT_TYPE_REVIEW_CREATED, outcome=audit_pb2.AUDIT_OUTCOME_PENDING,
                                 execution_id=ex.execution_id, tenant_id=ex.tenant_id, user_id=ex.user_id,
                                 reason_codes=[review_id, "ACTION_APPROVAL", f"{spec.capability}:"
                                               f"{ex.action.resource_id}"], analysis_decision=ex.decision,
                                 policy_decision=decision)
            return
        if before_effect is not None:
            before_effect()
        if effect in (common_pb2.POLICY_EFFECT_CONFIRMATION_REQUIRED, common_pb2.POLICY_EFFECT_ALLOW):
            ex.action.approval_review_id = approval_review_id
            ex.action.approved_by = approver
            self._issue_token(ex, record)
            return
        self._close(ex, pb.ACTION_STATE_DENIED, "POLICY_DENIED: " + ", ".join(decision.reason_codes))

    def _policy(self, ex: pb.Execution, requester: common_pb2.UserContext, approval_review_id: str,
                approver: str) -> common_pb2.PolicyDecision:
        spec = self.definition(ex)
        definition = self._capabilities.get(spec.capability)
        chain = [f"user:{requester.tenant_id}/{requester.user_id}", "svc:supervisor", f"agent:{spec.agent}"]
        request = policy_pb2.AuthorizeRequest(
            user=requester, actor_type=common_pb2.ACTOR_TYPE_USER,
            agent=common_pb2.AgentPrincipal(agent_id=spec.agent, execution_id=ex.execution_id,
                                            delegation_chain=chain),
            delegation_depth=2, capability_id=spec.capability,
            capability_version=definition.version if definition else "",
            resource=policy_pb2.ResourceRef(type=spec.policy_resource_type, id=ex.action.resource_id,
                                            tenant_id=ex.tenant_id),
            context=policy_pb2.OperationContext(
                confirmation_given=False, human_approval_id=approval_review_id, human_approver_id=approver,
                # Unknown risk is treated as high by the policies (fail closed).
                risk_profile=definition.risk_profile if definition else common_pb2.RiskProfile()),
            operation=policy_pb2.OPERATION_KIND_INVOKE, trace=ex.trace)
        with telemetry.tracer().start_as_current_span("Policy") as span:
            decision = self._authorize(request).decision
            span.set_attribute("agentmesh.policy_effect", common_pb2.PolicyEffect.Name(decision.effect))
        allowed = decision.effect in (common_pb2.POLICY_EFFECT_ALLOW, common_pb2.POLICY_EFFECT_CONFIRMATION_REQUIRED)
        goes_on = allowed or decision.effect == common_pb2.POLICY_EFFECT_HUMAN_APPROVAL_REQUIRED
        # A decision that lets the release move on is durable first; a denial is a refusal (kept durably).
        (self._dispatch.govern if goes_on else self._dispatch.narrate)(
            audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION,
            outcome=audit_pb2.AUDIT_OUTCOME_PENDING if goes_on else audit_pb2.AUDIT_OUTCOME_DENIED,
            execution_id=ex.execution_id, tenant_id=ex.tenant_id, user_id=requester.user_id, agent_id=spec.agent,
            capability_id=spec.capability, resource=f"{spec.resource_type}:{ex.action.resource_id}",
            policy_decision=decision,
            reason_codes=[common_pb2.PolicyEffect.Name(decision.effect), *decision.reason_codes,
                          *([f"approval={approval_review_id}", f"approver={approver}"] if approval_review_id else [])],
            input_digest=ex.action.action_digest)
        return decision

    def _issue_token(self, ex: pb.Execution, record: executions.ActionRecord) -> None:
        ttl = min(record.ttl_s or self._ttl_s, self._ttl_s)
        token = secrets.token_urlsafe(32)
        expires = self._clock() + dt.timedelta(seconds=ttl)
        self._store.await_confirmation(record.action_id, token_digest(token), expires)
        ex.action.confirmation_token = token
        ex.action.confirmation_expires_at.CopyFrom(_ts(expires))
        self._set(ex, pb.ACTION_STATE_AWAITING_CONFIRMATION,
                  f"CONFIRMATION_REQUIRED: {record.user_id} must confirm the {self.definition(ex).verb} of "
                  f"{ex.action.resource_id} "
                  f"before {expires.isoformat(timespec='seconds')}")
        ex.status = pb.EXECUTION_STATUS_AWAITING_CONFIRMATION
        self._dispatch.narrate(audit_pb2.AUDIT_EVENT_TYPE_CONFIRMATION, outcome=audit_pb2.AUDIT_OUTCOME_PENDING,
                             execution_id=ex.execution_id, tenant_id=ex.tenant_id, user_id=record.user_id,
                             resource=self._resource(ex.action.capability_id, ex.action.resource_id),
                             reason_codes=["CONFIRMATION_REQUESTED", record.action_id,
                                           f"expires={expires.isoformat(timespec='seconds')}",
                                           *([f"approval={ex.action.approval_review_id}",
                                              f"approver={ex.action.approved_by}"]
                                             if ex.action.approval_review_id else [])],
                             input_digest=ex.action.action_digest)

    def _set(self, ex: pb.Execution, state: int, reason: str) -> None:
        ex.action.state = state  # type: ignore[assignment]
        ex.action.reason = reason
        ex.action.updated_at.CopyFrom(now_ts())

    def _close(self, ex: pb.Execution, state: int, reason: str) -> None:
        """Ends the action without executing it; the execution is done."""
        self._set(ex, state, reason)
        ex.action.confirmation_token = ""
        record = self._store.action(ex.execution_id)
        if record is not None and record.state not in (executions.USED,):
            self._store.set_action_state(record.action_id, executions.CLOSED)
        if ex.status in (pb.EXECUTION_STATUS_AWAITING_REVIEW, pb.EXECUTION_STATUS_AWAITING_CONFIRMATION):
            ex.status = pb.EXECUTION_STATUS_SUCCEEDED

    def reject(self, ex: pb.Execution, reason: str) -> None:
        """A reviewer rejected the action (or the decision behind it)."""
        self._close(ex, pb.ACTION_STATE_REJECTED, reason)

    # -- confirming ------------------------------------------------------------

    def _resource(self, capability_id: str, resource_id: str) -> str:
        """``TYPE:ID`` of what an action acts on, for the audit record (``resource`` when no domain defines it)."""
        spec = self._domains.action(capability_id)
        return f"{spec.resource_type if spec else 'resource'}:{resource_id}"

    def _refuse(self, err: errors.MeshError, user: assertion.UserIdentity, execution_id: str,
                resource_id: str, capability_id: str = "") -> errors.MeshError:
        self._dispatch.narrate(audit_pb2.AUDIT_EVENT_TYPE_CONFIRMATION, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                             execution_id=execution_id, tenant_id=user.tenant_id, user_id=user.user_id,
                             resource=self._resource(capability_id, resource_id),
                             reason_codes=[err.reason, err.message])
        return errors.recorded(err)

    @staticmethod
    def validate(req: pb.ConfirmActionRequest) -> None:
        """The fields a confirmation needs; INVALID_ARGUMENT naming the first one missing."""
        for name in ("execution_id", "confirmation_token", "capability_id", "resource_id"):
            if not getattr(req, name):
                raise errors.InvalidArgument(f"{name} is required", reason="MISSING_FIELD", field=name)

    def confirm(self, user: assertion.UserIdentity, req: pb.ConfirmActionRequest) -> pb.Execution:
        """Checks the confirmation and, if it holds, runs the release; every refusal is audited.

        The confirmation given is durable in the audit log before the token is spent and the
        release runs: if audit cannot take it, UNAVAILABLE ``AUDIT_UNAVAILABLE``, nothing changed.
        """
        self.validate(req)
        with self.lock:
            ex = self._store.get(req.execution_id)
            if ex is None or ex.tenant_id != user.tenant_id:
                raise self._refuse(not_found(req.execution_id), user, req.execution_id, req.resource_id,
                                   req.capability_id)
            record = self._store.action(ex.execution_id)
            if record is None or not ex.HasField("action"):
                raise self._refuse(errors.FailedPrecondition("the execution proposes no action",
                                                             reason="NO_PROPOSED_ACTION", field="execution_id"),
                                   user, ex.execution_id, req.resource_id, req.capability_id)
            # Refusals name what the execution's action acts on, whatever the request claims.
            cap = ex.action.capability_id
            if not record.token_digest or not hmac.compare_digest(record.token_digest,
                                                                   token_digest(req.confirmation_token)):
                raise self._refuse(errors.PermissionDenied(
                    "the confirmation token is not the one issued for this execution's action",
                    reason="CONFIRMATION_TOKEN_INVALID", field="confirmation_token"),
                    user, ex.execution_id, req.resource_id, cap)
            if user.user_id != record.user_id:
                raise self._refuse(errors.PermissionDenied(
                    "only the user who asked for the action may confirm it", reason="CONFIRMATION_USER_MISMATCH",
                    field="user_assertion"), user, ex.execution_id, req.resource_id, cap)
            for name, wanted in (("capability_id", ex.action.capability_id), ("resource_id", ex.action.resource_id)):
                if getattr(req, name) != wanted:
                    raise self._refuse(errors.PermissionDenied(
                        f"the token confirms {ex.action.capability_id} on {ex.action.resource_id}, not "
                        f"{req.capability_id} on {req.resource_id}", reason="CONFIRMATION_ACTION_MISMATCH",
                        field=name), user, ex.execution_id, req.resource_id, cap)
            if record.state == executions.USED:
                raise self._refuse(errors.FailedPrecondition("this confirmation token was already used",
                                                             reason="CONFIRMATION_ALREADY_USED",
                                                             field="confirmation_token"),
                                   user, ex.execution_id, req.resource_id, cap)
            if record.state != executions.PENDING_CONFIRMATION:
                raise self._refuse(errors.FailedPrecondition(
                    f"the action no longer waits for a confirmation ({record.state})",
                    reason="CONFIRMATION_NOT_PENDING", field="confirmation_token"),
                    user, ex.execution_id, req.resource_id, cap)
            if record.expires_at is None or self._clock() >= record.expires_at:
                self._store.spend(record.action_id, executions.EXPIRED)
                self._close(ex, pb.ACTION_STATE_EXPIRED, "CONFIRMATION_EXPIRED: the confirmation was not given "
                                                         "in time; nothing was changed")
                self._store.save(ex)
                raise self._refuse(errors.FailedPrecondition(
                    "the confirmation expired; ask for the release again", reason="CONFIRMATION_EXPIRED",
                    field="confirmation_token"), user, ex.execution_id, req.resource_id, cap)
            with telemetry.mesh_ids(execution_id=ex.execution_id, correlation_id=ex.trace.correlation_id):
                if not req.decline:
                    # The confirmation is what lets the release run: durable before the token is spent.
                    self._dispatch.govern(
                        audit_pb2.AUDIT_EVENT_TYPE_CONFIRMATION, outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS,
                        execution_id=ex.execution_id, tenant_id=ex.tenant_id, user_id=user.user_id,
                        resource=self._resource(ex.action.capability_id, req.resource_id),
                        reason_codes=["CONFIRMATION_GIVEN", record.action_id,
                                      *([f"approval={ex.action.approval_review_id}",
                                         f"approver={ex.action.approved_by}"] if ex.action.approval_review_id else [])],
                        input_digest=ex.action.action_digest)
                if not self._store.spend(record.action_id, executions.DECLINED if req.decline else executions.USED):
                    raise self._refuse(errors.FailedPrecondition("this confirmation token was already used",
                                                                 reason="CONFIRMATION_ALREADY_USED",
                                                                 field="confirmation_token"),
                                       user, ex.execution_id, req.resource_id, cap)
                if req.decline:
                    # Saying no stops the action: it does not wait for audit.
                    self._close(ex, pb.ACTION_STATE_DECLINED, f"DECLINED: {user.user_id} said no; nothing was changed")
                    self._dispatch.narrate(audit_pb2.AUDIT_EVENT_TYPE_CONFIRMATION,
                                           outcome=audit_pb2.AUDIT_OUTCOME_FAILURE, execution_id=ex.execution_id,
                                           tenant_id=ex.tenant_id, user_id=user.user_id,
                                           resource=self._resource(ex.action.capability_id, req.resource_id),
                                           reason_codes=["CONFIRMATION_DECLINED", record.action_id])
                    self._finish(ex, "ACTION_DECLINED")
                    return ex
                self._mark_executing(ex)
        # The token is spent and the release marked EXECUTING (nothing else can decide this action now):
        # the release and its retries run without holding every other action's decision back.
        with telemetry.mesh_ids(execution_id=ex.execution_id, correlation_id=ex.trace.correlation_id):
            self._settle(ex, Actor.of_user(user), may_have_happened=False)
        return ex

    def resume(self, stored: pb.Execution, *, why: str = "SUPERVISOR_RESTARTED", settle_s: float | None = None,
               pause_s: float | None = None) -> None:
        """Settles a release confirmed but not seen to end: by the previous supervisor process
        (``SUPERVISOR_RESTARTED``), or by this one, whose attempts found no definite answer
        (``RELEASE_OUTCOME_UNKNOWN``, asked again by :meth:`settle_due`).

        The release runs again under its idempotency key (the action id): the capability
        service gives the first call's outcome, resolves a call cut off by reading the permit
        back, or runs it if it never happened. While the answer is unknown (the first call still
        in flight, the agent or the capability service unavailable, a timeout) it asks again
        with backoff, for ``settle_s`` at most (see :meth:`_settle`).
        """
        with self.lock:
            with self._settle_lock:
                if stored.execution_id in self._settling:
                    return  # this process is already asking
            ex = self._store.get(stored.execution_id) or stored
            record = self._store.action(ex.execution_id)
            with telemetry.mesh_ids(execution_id=ex.execution_id, correlation_id=ex.trace.correlation_id):
                # A release task a previous process (or an attempt of this one cut off before it stored its
                # end) delegated is closed on the record; what it did is read back by the release below.
                for task_id in close_stored_delegations(
                        self._dispatch.narrate, ex, ex.graph.nodes, "CANCELLED",
                        f"{why}: its outcome is read back by the release that follows"):
                    for n in ex.graph.nodes:
                        if n.task_id == task_id:
                            n.status = common_pb2.TASK_STATUS_CANCELLED
                            n.finished_at.CopyFrom(now_ts())
                if record is None or record.state != executions.USED or not ex.HasField("action"):
                    self._set(ex, pb.ACTION_STATE_FAILED, "SUPERVISOR_RESTARTED: the release was not confirmed; "
                                                          "nothing was done")
                    ex.status = pb.EXECUTION_STATUS_FAILED
                    ex.reason = "SUPERVISOR_RESTARTED: the release was not confirmed"
                    self._finish(ex, "ACTION_FAILED")
                    return
                requester = record.requester
                actor = Actor(tenant_id=requester.tenant_id, user_id=requester.user_id, roles=tuple(requester.roles),
                              session_id=requester.session_id, conversation_id=requester.conversation_id,
                              assertion_digest=requester.assertion_digest)
                self._dispatch.narrate(audit_pb2.AUDIT_EVENT_TYPE_CONFIRMATION, outcome=audit_pb2.AUDIT_OUTCOME_PENDING,
                                       execution_id=ex.execution_id, tenant_id=ex.tenant_id, user_id=record.user_id,
                                       resource=self._resource(ex.action.capability_id, ex.action.resource_id),
                                       reason_codes=["RELEASE_RESUMED", why, record.action_id],
                                       input_digest=ex.action.action_digest)
                self._mark_executing(ex)
        with telemetry.mesh_ids(execution_id=ex.execution_id, correlation_id=ex.trace.correlation_id):
            self._settle(ex, actor, may_have_happened=True, settle_s=settle_s, pause_s=pause_s)

    def settle_due(self) -> list[str]:
        """Asks again (in the background, see :meth:`resume`) about each release of this process whose
        outcome was still unknown and whose wait is over; returns their execution ids.

        Called by the supervisor's lease loop about every second.
        """
        now = time.monotonic()
        with self._settle_lock:
            due = [e for e, at in self._unsettled.items() if at <= now and e not in self._settling]
            for execution_id in due:
                del self._unsettled[execution_id]
        started: list[str] = []
        for execution_id in due:
            stored = self._store.get(execution_id)
            if stored is None or stored.status != pb.EXECUTION_STATUS_RUNNING or not stored.HasField("action") or \
                    stored.action.state != pb.ACTION_STATE_EXECUTING:
                continue
            held = self._store.owner_of(execution_id) if self._store.shared else None
            if held is not None and held[0] != self._store.owner:
                continue  # another replica took it over: it settles it
            threading.Thread(target=contextvars.copy_context().run, args=(self.resume, stored),
                             kwargs={"why": OUTCOME_UNKNOWN}, name=f"settle-{execution_id[-6:]}", daemon=True).start()
            started.append(execution_id)
        return started

    def _mark_executing(self, ex: pb.Execution) -> None:
        ex.action.confirmation_token = ""
        self._set(ex, pb.ACTION_STATE_EXECUTING, "EXECUTING: confirmed by the requester")
        ex.status = pb.EXECUTION_STATUS_RUNNING
        self._store.save(ex)

    def _settle(self, ex: pb.Execution, actor: Actor, *, may_have_happened: bool, settle_s: float | None = None,
                pause_s: float | None = None) -> None:
        """Runs the release under its idempotency key until there is a definite answer, for ``settle_s`` at most.

        Only a definite answer ends the action (:meth:`_conclude`): read back RELEASED →
        SUCCEEDED; a refusal or a failed verification → FAILED with the reason. An attempt whose
        outcome is unknown (see :func:`_verdict`) is followed by another under the SAME key, after
        a pause that doubles up to 4 s: the capability service answers with what happened (the
        stored outcome of a completed key; an orphaned IN_FLIGHT key resolved by reading the
        permit back). Still unknown at the bound, the action stays EXECUTING with reason
        ``RELEASE_OUTCOME_UNKNOWN`` (the execution RUNNING) and :meth:`settle_due` asks again
        later — never FAILED as if nothing had happened.
        """
        execution_id = ex.execution_id
        with self._settle_lock:
            if execution_id in self._settling:
                return
            self._settling.add(execution_id)
            self._unsettled.pop(execution_id, None)
        try:
            bound = time.monotonic() + (self._settle_s if settle_s is None else settle_s)
            pause = self._pause_s if pause_s is None else pause_s
            while True:
                done = self._release(ex, actor)
                may_have_happened = may_have_happened or done.started
                verdict = _verdict(done, may_have_happened, self.definition(ex))
                if verdict != UNKNOWN or time.monotonic() + pause >= bound:
                    break
                log.info("release of %s: outcome unknown (%s); asking again in %.1f s", execution_id,
                         done.failure if done.result is None else done.result.error_reason, pause)
                time.sleep(pause)
                pause = min(pause * 2, 4.0)
            if verdict == UNKNOWN:
                self._undecided(ex, done)
            else:
                self._conclude(ex, done)
        finally:
            with self._settle_lock:
                self._settling.discard(execution_id)

    def _undecided(self, ex: pb.Execution, done: Dispatched) -> None:
        """No definite answer yet: the action stays EXECUTING, saying the outcome is unknown, and is asked again."""
        action = ex.action
        spec = self.definition(ex)
        what = f"the {spec.verb} of {spec.resource_type} {action.resource_id}"
        why = done.failure if done.result is None else (done.result.error_reason or "no definite answer")
        self._set(ex, pb.ACTION_STATE_EXECUTING,
                  f"{OUTCOME_UNKNOWN}: no definite answer yet on {what} "
                  f"({why}); it may have taken effect, and is asked again under the same idempotency key")
        ex.status = pb.EXECUTION_STATUS_RUNNING
        ex.reason = f"{OUTCOME_UNKNOWN}: {what} is being settled"
        self._store.save(ex)
        log.warning("release of %s: outcome still unknown (%s); asked again in %.0f s", ex.execution_id, why,
                    self._retry_s)
        with self._settle_lock:
            self._unsettled[ex.execution_id] = time.monotonic() + self._retry_s

    def _release(self, ex: pb.Execution, actor: Actor) -> Dispatched:
        action = ex.action
        spec = self.definition(ex)
        arguments = struct_dict(action.arguments)
        values = {"arguments": arguments, "action_id": action.action_id}
        return self._dispatch.run(
            ex, agent_id=spec.agent,
            objective=f"{spec.verb.capitalize()} {spec.resource_type} {action.resource_id} (confirmed by the user)",
            input={k: t.render(values) for k, t in spec.input.items()},
            capabilities=list(spec.capabilities), actor=actor,
            confirmed_action_digest=action.action_digest, confirmation_id=action.action_id,
            human_approval_id=action.approval_review_id, human_approver_id=action.approved_by)

    def _conclude(self, ex: pb.Execution, done: Dispatched) -> None:
        """The execution says what the release did: SUCCEEDED only once the permit reads back RELEASED."""
        action = ex.action
        spec = self.definition(ex)
        noun = f"{spec.resource_type} {action.resource_id}"
        result = done.result
        effect = _effect(result, spec)
        if result is not None and result.status != common_pb2.RESULT_STATUS_FAILED and _verified(result, spec):
            action.verified = True
            action.effect = pb.ACTION_EFFECT_APPLIED
            self._set(ex, pb.ACTION_STATE_SUCCEEDED,
                      f"{spec.past}: {noun} is {spec.past}, verified by reading it back")
            ex.status = pb.EXECUTION_STATUS_SUCCEEDED
            ex.summary = f"{ex.summary}\n{spec.past.capitalize()}: {noun} is {spec.past} (verified).".strip()
            self._finish(ex, "ACTION_SUCCEEDED")
            return
        why = done.failure if result is None else (result.error_reason or f"the {spec.verb} was not verified")
        action.compensated = bool(effect.get("compensated") is True or "compensated: true" in why)
        action.effect = action_effect(done, why, action.compensated, spec)
        if done.timed_out:
            why = (f"{why}; the outcome of the {spec.verb} is unknown (timeout): check the {spec.resource_type} "
                   "before retrying")
        self._set(ex, pb.ACTION_STATE_FAILED, why)
        ex.status = pb.EXECUTION_STATUS_FAILED
        ex.reason = f"{spec.verb.upper().replace(' ', '_')}_FAILED: {why}"
        kind = spec.resource_type
        said = {pb.ACTION_EFFECT_COMPENSATED: f" The {kind} was restored to its previous state.",
                pb.ACTION_EFFECT_NONE: f" Nothing was written: the {kind} is as it was.",
                pb.ACTION_EFFECT_NOT_RESTORED: f" The {kind} could NOT be restored to its previous state: check it.",
                pb.ACTION_EFFECT_UNKNOWN: f" Whether anything was written is not known: read the {kind} before any "
                                          "retry."}.get(action.effect, "")
        ex.summary = f"{ex.summary}\nThe {spec.verb} of {noun} FAILED: {why}{said}".strip()
        self._finish(ex, "ACTION_FAILED")

    def _finish(self, ex: pb.Execution, code: str) -> None:
        ex.finished_at.CopyFrom(now_ts())
        # The record first (outbox if audit is down), then the stored end: a release a restart will
        # not settle again always has its EXECUTION_FINISHED record.
        self._dispatch.narrate(
            audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED,
            outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS if ex.status == pb.EXECUTION_STATUS_SUCCEEDED
            else audit_pb2.AUDIT_OUTCOME_FAILURE,
            execution_id=ex.execution_id, tenant_id=ex.tenant_id, user_id=ex.user_id, analysis_decision=ex.decision,
            resource=self._resource(ex.action.capability_id, ex.action.resource_id),
            reason_codes=[pb.ExecutionStatus.Name(ex.status), code, ex.action.reason])
        self._store.save(ex)
