"""Executions are private (PRD §26, §41): who may read or cancel one is the policy engine's decision.

An execution of another tenant and one that does not exist are the same
answer, byte for byte: NOT_FOUND ``EXECUTION_NOT_FOUND``, message
``execution '<id>' not found``, metadata ``field=execution_id`` — decided before
the policy engine is asked, so nothing about the other tenant is looked at.

Within the tenant the supervisor asks ``PolicyService.Authorize`` with
operation READ_EXECUTION or CANCEL_EXECUTION on resource
``Execution::<id>`` (owning tenant = the execution's), the caller's verified
assertion as the user, the execution's requester (its user, or its system
actor) as ``context.subject_requester_id`` and the supervisor as the agent.
The policies (``policy_svc/policies/execution.cedar``): the requester reads
and cancels their own; ``execution.read`` (reviewer, operator, admin) reads any
of the tenant; ``execution.cancel`` (admin) cancels any. Anything but ALLOW is
PERMISSION_DENIED ``POLICY_DENIED``; no decision at all is UNAVAILABLE
``POLICY_UNAVAILABLE``. Every refusal — not found included — is audited.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentmesh import assertion, errors
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc.recording import Recorder, narrative

Authorizer = Callable[[policy_pb2.AuthorizeRequest], policy_pb2.AuthorizeResponse]

READ = policy_pb2.OPERATION_KIND_READ_EXECUTION
CANCEL = policy_pb2.OPERATION_KIND_CANCEL_EXECUTION


def not_found(execution_id: str) -> errors.NotFound:
    """The one answer for an execution of another tenant and for one that does not exist."""
    return errors.NotFound(f"execution {execution_id!r} not found", reason="EXECUTION_NOT_FOUND",
                           field="execution_id")


def requester_of(ex: pb.Execution) -> str:
    """Who asked for the execution: its user, or the system actor of an event."""
    return ex.user_id if ex.actor_type != common_pb2.ACTOR_TYPE_SYSTEM else ex.system_actor


class ExecutionGuard:
    """Finds an execution for a caller and asks the policy engine whether they may read or cancel it."""

    def __init__(self, *, authorize: Authorizer, audit: Recorder, agent_id: str = "supervisor") -> None:
        self._authorize = authorize
        self._audit = audit
        self._agent_id = agent_id

    def _refuse(self, err: errors.MeshError, user: assertion.UserIdentity, execution_id: str, operation: int,
                decision: common_pb2.PolicyDecision | None = None) -> errors.MeshError:
        fields: dict[str, Any] = {"policy_decision": decision} if decision is not None else {}
        if not isinstance(err, errors.NotFound):
            # The caller's own tenant's execution: the refusal belongs to its trail.
            fields["execution_id"] = execution_id
        narrative(self._audit, audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                  tenant_id=user.tenant_id, user_id=user.user_id, resource=f"execution:{execution_id}",
                  reason_codes=[err.reason, policy_pb2.OperationKind.Name(operation),
                                *(decision.reason_codes if decision is not None else [])], **fields)
        return errors.recorded(err)

    def may_read_all_of(self, user: assertion.UserIdentity, requester: str) -> bool:
        """Whether the policy engine lets ``user`` read the executions ``requester`` asked for (listing).

        One READ_EXECUTION decision on ``Execution::"-"`` (no particular one) of the user's tenant, ``requester`` as
        ``context.subject_requester_id``: the execution policies decide on the requester and the
        caller's roles, never on the execution's id. Used to list: an execution the answer leaves out
        was not asked for, so nothing is refused or recorded for it.

        Raises:
            agentmesh.errors.Unavailable: ``POLICY_UNAVAILABLE`` (no decision, so no listing; audited).
        """
        request = policy_pb2.AuthorizeRequest(
            user=user.to_context(), actor_type=common_pb2.ACTOR_TYPE_USER,
            agent=common_pb2.AgentPrincipal(agent_id=self._agent_id,
                                            delegation_chain=[f"user:{user.tenant_id}/{user.user_id}",
                                                              f"svc:{self._agent_id}"]),
            delegation_depth=1, capability_id="",
            resource=policy_pb2.ResourceRef(type="Execution", id="-", tenant_id=user.tenant_id),
            context=policy_pb2.OperationContext(subject_requester_id=requester), operation=READ)
        try:
            decision = self._authorize(request).decision
        except errors.MeshError as err:
            raise self._refuse(errors.Unavailable(f"no policy decision, so no listing: {err.message}",
                                                  reason="POLICY_UNAVAILABLE"), user, "-", READ) from err
        return bool(decision.effect == common_pb2.POLICY_EFFECT_ALLOW)

    def require(self, user: assertion.UserIdentity, execution_id: str, execution: pb.Execution | None,
                operation: int) -> pb.Execution:
        """``execution`` if the caller may do ``operation`` on it; the refusal (audited) otherwise.

        Raises:
            agentmesh.errors.NotFound: ``EXECUTION_NOT_FOUND`` — none, or another tenant's.
            agentmesh.errors.PermissionDenied: ``POLICY_DENIED``.
            agentmesh.errors.Unavailable: ``POLICY_UNAVAILABLE`` (no decision, so no access).
        """
        if execution is None or execution.tenant_id != user.tenant_id:
            raise self._refuse(not_found(execution_id), user, execution_id, operation)
        request = policy_pb2.AuthorizeRequest(
            user=user.to_context(), actor_type=common_pb2.ACTOR_TYPE_USER,
            agent=common_pb2.AgentPrincipal(agent_id=self._agent_id, execution_id=execution.execution_id,
                                            delegation_chain=[f"user:{user.tenant_id}/{user.user_id}",
                                                              f"svc:{self._agent_id}"]),
            delegation_depth=1, capability_id="",
            resource=policy_pb2.ResourceRef(type="Execution", id=execution.execution_id,
                                            tenant_id=execution.tenant_id),
            context=policy_pb2.OperationContext(subject_requester_id=requester_of(execution)),
            operation=operation)  # type: ignore[arg-type]
        try:
            decision = self._authorize(request).decision
        except errors.MeshError as err:
            raise self._refuse(errors.Unavailable(f"no policy decision, so no access: {err.message}",
                                                  reason="POLICY_UNAVAILABLE"),
                               user, execution_id, operation) from err
        if decision.effect != common_pb2.POLICY_EFFECT_ALLOW:
            raise self._refuse(errors.PermissionDenied(
                f"the policy engine refused: {', '.join(decision.reason_codes) or 'no reason given'}",
                reason="POLICY_DENIED",
                metadata={"field": "user_assertion", "decision_id": decision.decision_id,
                          "reason_codes": ",".join(decision.reason_codes)}),
                user, execution_id, operation, decision)
        return execution
