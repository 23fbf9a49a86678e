"""One task outside a planned analysis: a confirmed release, or a step of an event-triggered execution.

:class:`TaskDispatcher` does for a single task what the orchestrator does for
each planned one: checks the agent is ACTIVE, signs a fresh grant carrying only
the task's capabilities that the agent registered and naming the resources of
its input (plus, for a confirmed action, the confirmation and human approval
bound to it), adds the task to the
execution's graph, audits the delegation (durably, before the agent hears of it: if audit
cannot take the record the task does not run), runs it within a deadline on the agent
version the router chooses (supervisor_svc.routing: at its registered endpoint, or the
configured address of a shipped version) and audits the outcome. A timeout is reported as
a timeout, never as a result. Each call is an attempt in the execution
(``Execution.attempts``); a task that only reads (an event's step) is tried again after a
transient failure as the orchestrator's tasks are (supervisor_svc.attempts); a mutation
(the release) runs once, under its idempotency key, and is never retried here.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh import assertion, errors, grants, spiffe, telemetry
from agentmesh.structs import struct_dict
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc import errors as sup_errors
from supervisor_svc.attempts import TRANSIENT, outcome_of
from supervisor_svc.executions import ExecutionStore
from supervisor_svc.projection import ResourceRules
from supervisor_svc.recording import Recorder, governing, narrative
from supervisor_svc.registry import AgentEntry, AgentRegistry
from supervisor_svc.routing import Endpoint
from supervisor_svc.traffic import Traffic

log = logging.getLogger(__name__)


class TaskCall(Protocol):
    def result(self) -> common_pb2.AgentResult: ...

    def cancel(self) -> None: ...


class SpecialistPort(Protocol):
    def start(self, agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float,
              endpoint: Endpoint | None = None) -> TaskCall: ...


def now_ts() -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(dt.datetime.now(dt.UTC))
    return ts


@dataclass(frozen=True)
class Actor:
    """On whose authority a task runs: a user (with the assertion digest) or a system actor."""

    tenant_id: str
    user_id: str
    roles: tuple[str, ...] = ()
    session_id: str = ""
    conversation_id: str = ""
    assertion_digest: str = ""
    actor_type: int = common_pb2.ACTOR_TYPE_USER

    @classmethod
    def of_user(cls, user: assertion.UserIdentity) -> Actor:
        """A verified end user as the actor."""
        return cls(tenant_id=user.tenant_id, user_id=user.user_id, roles=tuple(user.roles), session_id=user.session_id,
                   conversation_id=user.conversation_id, assertion_digest=user.digest)

    @property
    def chain_head(self) -> str:
        """First link of the delegation chain."""
        kind = "user" if self.actor_type == common_pb2.ACTOR_TYPE_USER else "system"
        return f"{kind}:{self.tenant_id}/{self.user_id}"


def delegate(signer: grants.GrantSigner, issuer: spiffe.SpiffeId, entry: AgentEntry, node: common_pb2.AgentTask,
             actor: Actor, *, rules: ResourceRules, ttl: dt.timedelta, confirmed_action_digest: str = "",
             confirmation_id: str = "", human_approval_id: str = "", human_approver_id: str = "",
             model_budgets: tuple[common_pb2.AgentBudget, common_pb2.AgentBudget] | None = None,
             ) -> tuple[common_pb2.SignedTaskGrant, common_pb2.AgentPrincipal]:
    """The signed grant and the principal of one task (user -> supervisor -> agent).

    The grant lists never more than the agent registered, whatever the task asks for,
    and names the resources of the task's input (``rules``; see supervisor_svc.projection):
    the capability runtime refuses any other resource. ``model_budgets`` (the task's and the
    execution's, :meth:`supervisor_svc.limits.ExecutionBudget.grant_budgets`) go into the grant
    for the model service; without them the task can make no model call.
    """
    agent_id = entry.agent_id
    allowed = [c for c in node.required_capabilities if c in entry.manifest.capabilities]
    resources = rules.resources(struct_dict(node.input), allowed, actor.tenant_id,
                                entry.manifest.knowledge_scopes)
    grant = signer.issue(
        issuer=str(issuer), audience=str(spiffe.agent(agent_id)), execution_id=node.execution_id,
        task_id=node.task_id, tenant_id=actor.tenant_id, user_id=actor.user_id,
        assertion_digest=actor.assertion_digest, capabilities=allowed, resources=resources,
        projection_digest=node.projection.digest,
        depth=node.depth, roles=actor.roles, actor_type=actor.actor_type, session_id=actor.session_id,
        conversation_id=actor.conversation_id, confirmed_action_digest=confirmed_action_digest,
        confirmation_id=confirmation_id, human_approval_id=human_approval_id, human_approver_id=human_approver_id,
        ttl=ttl, model_budgets=model_budgets, agent_risk_profile=entry.manifest.risk_profile.to_proto())
    principal = common_pb2.AgentPrincipal(
        agent_id=agent_id, agent_version=entry.manifest.version, execution_id=node.execution_id,
        parent_agent_id=node.source_agent_id,
        delegation_chain=[actor.chain_head, f"svc:{issuer.name}", f"agent:{agent_id}"], grants=[grant])
    return grant, principal


def delegated_unfinished(node: common_pb2.AgentTask) -> bool:
    """A stored task that may have been delegated without its end being stored: RUNNING, or started
    and not yet marked RUNNING (its started_at is stored before the delegation is on the record)."""
    return node.status == common_pb2.TASK_STATUS_RUNNING or (
        node.status == common_pb2.TASK_STATUS_CREATED and node.HasField("started_at"))


def close_stored_delegations(narrate: Callable[..., None], ex: pb.Execution, nodes: Iterable[common_pb2.AgentTask],
                             state: str, reason: str) -> list[str]:
    """Tasks of a stored execution another process may have delegated (:func:`delegated_unfinished`)
    that will not run again here: each gets its TASK_FINISHED through the outbox, so a delegation by
    a dead or superseded process is never left open on the record (``narrate`` is the caller's
    narrative recorder, see supervisor_svc.recording). Returns their task ids."""
    closed: list[str] = []
    for n in nodes:
        if delegated_unfinished(n):
            narrate(audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED,
                      outcome=audit_pb2.AUDIT_OUTCOME_FAILURE, execution_id=ex.execution_id,
                      tenant_id=ex.tenant_id, user_id=ex.user_id, task_id=n.task_id, agent_id=n.target_agent_id,
                      reason_codes=[state, reason, "DELEGATED_BEFORE_RESTART"])
            closed.append(n.task_id)
    return closed


@dataclass(frozen=True)
class Dispatched:
    """What came back: the agent's result, or why there is none."""

    result: common_pb2.AgentResult | None
    failure: str = ""
    timed_out: bool = False
    started: bool = False
    """The agent was called: whatever it was asked may have taken effect, even without a result."""


class TaskDispatcher:
    """Runs single tasks for the supervisor (see the module docstring)."""

    def __init__(self, *, identity: spiffe.SpiffeId, registry: AgentRegistry, signer: grants.GrantSigner,
                 specialists: SpecialistPort, audit: Recorder, store: ExecutionStore,
                 task_timeout_s: float, resources: ResourceRules, traffic: Traffic | None = None) -> None:
        """``traffic``: versions, availability and retries (supervisor_svc.traffic); by default every agent
        is its shipped version and nothing is retried."""
        self._id = identity
        self._traffic = traffic or Traffic.build()
        self._resources = resources
        self._registry = registry
        self._signer = signer
        self._specialists = specialists
        self._audit = audit
        self._store = store
        self._timeout_s = task_timeout_s

    def govern(self, event_type: int, **fields: Any) -> None:
        """The record that lets an action take effect (see supervisor_svc.recording).

        Raises:
            agentmesh.errors.Unavailable: ``AUDIT_UNAVAILABLE``; the action must not happen.
        """
        governing(self._audit, event_type, **fields)

    def narrate(self, event_type: int, **fields: Any) -> None:
        """A refusal or what already happened: kept durably, never holding it back."""
        narrative(self._audit, event_type, **fields)

    def run(self, ex: pb.Execution, *, agent_id: str, objective: str, input: dict[str, Any],
            capabilities: list[str], actor: Actor, confirmed_action_digest: str = "", confirmation_id: str = "",
            human_approval_id: str = "", human_approver_id: str = "") -> Dispatched:
        """Runs one task of ``ex`` on ``agent_id``; ``ex`` gets the task node and the result, and is saved."""
        task_id = f"task-{agent_id.removesuffix('-agent')}-{uuid.uuid4().hex[:8]}"
        try:
            entry = self._registry.ensure_active(agent_id)
        except sup_errors.SupervisorError as err:
            return Dispatched(None, f"{err.reason}: {err.message}")
        # The version this execution's task goes to (its ACTIVE one, or its CANARY for the canary's share).
        route = self._traffic.route(entry, tenant_id=actor.tenant_id, execution_id=ex.execution_id,
                                    required_capabilities=capabilities)
        entry = route.entry
        node = common_pb2.AgentTask(
            task_id=task_id, execution_id=ex.execution_id, source_agent_id="supervisor", target_agent_id=agent_id,
            tenant_id=actor.tenant_id, user_id=actor.user_id, session_id=actor.session_id,
            conversation_id=actor.conversation_id, objective=objective, required_capabilities=capabilities,
            priority=common_pb2.TASK_PRIORITY_HIGH, status=common_pb2.TASK_STATUS_RUNNING, depth=1,
            correlation_id=ex.trace.correlation_id,
            # In the language the execution's first tasks were asked in (the request's).
            locale=next((n.locale for n in ex.graph.nodes if n.locale), ""))
        node.input.update(input)
        deadline = Timestamp()
        deadline.FromDatetime(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=self._timeout_s))
        node.deadline.CopyFrom(deadline)
        node.started_at.CopyFrom(now_ts())
        grant, principal = delegate(
            self._signer, self._id, entry, node, actor, rules=self._resources,
            ttl=dt.timedelta(seconds=self._timeout_s + 30),
            confirmed_action_digest=confirmed_action_digest, confirmation_id=confirmation_id,
            human_approval_id=human_approval_id, human_approver_id=human_approver_id)
        # Stored (started, not yet RUNNING) before the delegation is on the record: a process killed in between
        # leaves a task whoever resumes the execution closes on the record (delegated_unfinished), never a
        # delegation nobody knows of.
        node.status = common_pb2.TASK_STATUS_CREATED
        ex.graph.nodes.append(node)
        self._store.save(ex)
        stored = ex.graph.nodes[-1]
        try:
            # The delegation is durable in the audit log before the agent hears of it.
            self.govern(audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED, outcome=audit_pb2.AUDIT_OUTCOME_PENDING,
                        execution_id=ex.execution_id, tenant_id=actor.tenant_id, user_id=actor.user_id,
                        task_id=task_id, agent_id=agent_id, principal=principal, reason_codes=[objective],
                        versions=common_pb2.VersionStamp(agent_version=route.version))
        except errors.Unavailable as err:
            stored.status = common_pb2.TASK_STATUS_FAILED
            stored.finished_at.CopyFrom(now_ts())
            self._store.save(ex)
            return Dispatched(None, f"{err.code.name} {err.reason}: {err.message}")
        node.status = stored.status = common_pb2.TASK_STATUS_RUNNING
        self._store.save(ex)
        request = spec_pb2.RunTaskRequest(task=node, grant=grant, principal=principal, trace=ex.trace)
        started = time.monotonic()
        outcome = Dispatched(None, started=True)
        reads, _ = self._traffic.idempotent([c for c in capabilities if c in entry.manifest.capabilities])
        with telemetry.tracer().start_as_current_span(f"AgentTask {agent_id}") as span:
            span.set_attribute("agentmesh.task_id", task_id)
            span.set_attribute("agentmesh.agent_version", route.version)
            number, backoff_ms = 0, 0
            while True:
                number += 1
                attempt = pb.TaskAttempt(
                    task_id=task_id, attempt=number, agent_id=agent_id, agent_version=route.version,
                    kind=pb.ATTEMPT_KIND_FIRST if number == 1 else pb.ATTEMPT_KIND_RETRY,
                    endpoint=route.endpoint.shown, backoff_ms=backoff_ms, started_at=now_ts())
                error: errors.MeshError | None = None
                try:
                    answer = self._specialists.start(agent_id, request, self._timeout_s,
                                                     endpoint=route.endpoint).result()
                    answer.versions.agent_version = route.version  # the version dispatched to
                    outcome = Dispatched(answer, started=True)
                except errors.DeadlineExceeded as err:
                    error = err
                    outcome = Dispatched(None, f"DEADLINE_EXCEEDED after {self._timeout_s * 1000:.0f} ms: "
                                               f"{err.message}", timed_out=True, started=True)
                except errors.MeshError as err:
                    error = err
                    outcome = Dispatched(None, f"{err.code.name} {err.reason}: {err.message}", started=True)
                attempt.outcome = outcome_of(outcome.result, error)
                attempt.reason = (outcome.failure or common_pb2.ResultStatus.Name(
                    outcome.result.status if outcome.result else 0))[:1000]
                attempt.finished_at.CopyFrom(now_ts())
                ex.attempts.append(attempt)
                self._traffic.availability.observe(route.endpoint, reached=attempt.outcome not in (
                    pb.ATTEMPT_OUTCOME_UNAVAILABLE, pb.ATTEMPT_OUTCOME_TIMED_OUT))
                span.add_event("agentmesh.attempt", {
                    "agentmesh.task_id": task_id, "agentmesh.attempt": number,
                    "agentmesh.agent_version": route.version, "agentmesh.backoff_ms": backoff_ms,
                    "agentmesh.outcome": pb.AttemptOutcome.Name(attempt.outcome)})
                if attempt.outcome not in TRANSIENT or not reads or number >= self._traffic.retry.max_attempts:
                    break
                backoff_ms = self._traffic.retry.backoff_ms(number)
                time.sleep(backoff_ms / 1000)
        result = outcome.result
        failed = result is None or result.status == common_pb2.RESULT_STATUS_FAILED
        reasons = [outcome.failure] if result is None else [
            common_pb2.ResultStatus.Name(result.status), *([result.error_reason] if result.error_reason else []),
            *(s.code for s in result.statements if s.code)]
        # The record first (kept in the outbox if audit is down), then the stored end: a task stored as
        # ended always has its TASK_FINISHED; one stored RUNNING is closed by whoever resumes it.
        self.narrate(audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED,
                     outcome=(audit_pb2.AUDIT_OUTCOME_TIMEOUT if outcome.timed_out else
                              audit_pb2.AUDIT_OUTCOME_FAILURE if failed else audit_pb2.AUDIT_OUTCOME_SUCCESS),
                     execution_id=ex.execution_id, tenant_id=actor.tenant_id, user_id=actor.user_id,
                     task_id=task_id, agent_id=agent_id, reason_codes=reasons,
                     evidence=list(result.evidence) if result else [],
                     confidence=result.confidence if result else 0.0, versions=result.versions if result else None)
        for n in ex.graph.nodes:
            if n.task_id == task_id:
                n.status = common_pb2.TASK_STATUS_FAILED if result is None else common_pb2.TASK_STATUS_COMPLETED
                n.finished_at.CopyFrom(now_ts())
        if result is not None:
            ex.results.append(result)
        self._store.save(ex)
        log.info("task %s on %s: %s in %.0f ms", task_id, agent_id, reasons[0], (time.monotonic() - started) * 1000)
        return outcome
