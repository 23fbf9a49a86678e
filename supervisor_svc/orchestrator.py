"""The supervisor's executor: one governed, parallel, evidence-first analysis.

``start`` verifies the request and plans it (intent → discovery/selection →
task graph from the domain definition's template, all persisted); ``run``
executes the plan stage by stage — in the work-permit domain the work-permit
task first, then the other specialists in parallel — each task with a freshly
signed grant (naming the resources of its projected input), its context
projection and a deadline; a task whose incoming edge's condition does not
hold is skipped; then it aggregates the results into a decision (or a report)
with the domain's evidence rules and decision mapping. Nothing here knows a
domain (supervisor_svc.definitions). Every step is audited, every state change persisted, and watchers
are told as it happens. Audit fails closed (supervisor_svc.recording): an
execution is accepted, and a task delegated, only once its record is durable.
Executions are private (supervisor_svc.privacy): reading or cancelling one is
the policy engine's decision.

Executions are durable workflows. Each completed task's result is stored with
the execution (the checkpoint), never before the task's TASK_FINISHED is durable
(the record that ends a stage travels while the next stage is prepared, and the
execution's next record or store waits for it: :meth:`Orchestrator._finish_record`);
after a crash, :meth:`Orchestrator.end_interrupted` (called at start) first revokes
the grants the dead process issued (the capability service refuses its orphaned
tasks, ``GRANT_REVOKED``), then
resumes every execution left RUNNING from its checkpoint under the same id:
completed tasks are not run again, the others are (they only read); a release
in flight is handed to :meth:`ReleaseActions.resume`, which re-runs it under
its idempotency key (the capability service reads the effect back). A
cancellation revokes every grant of the execution. ``client_request_id`` makes
a retried Analyze the same execution.

Replicas (a PostgreSQL store shared by several supervisor processes): each RUNNING
execution is owned by one replica through a lease in the store, renewed every
:data:`LEASE_RENEW_S` by :meth:`Orchestrator.end_interrupted`'s background loop;
the same loop takes over executions whose lease expired (their replica died) and
resumes them exactly as after a restart. Reads (GetExecution, Watch) work on any
replica; a Cancel on a replica that does not run the execution marks it in the
store and revokes its grants, and the owner stops it when it sees the mark.

Transport-free: specialists are reached through :class:`SpecialistPort`,
audit through a recorder; the servicer supplies gRPC adapters.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime as dt
import functools
import hashlib
import hmac
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from google.protobuf.timestamp_pb2 import Timestamp
from opentelemetry import metrics

from agentmesh import assertion, errors, grants, spiffe, telemetry
from agentmesh.result_contract import context_of
from agentmesh.structs import struct_dict
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc import errors as sup_errors
from supervisor_svc import listing
from supervisor_svc.actions import ReleaseActions
from supervisor_svc.aggregation import (
    Assessment,
    TaskOutcome,
    TaskState,
    aggregate,
    missing_item,
    report,
)
from supervisor_svc.attempts import AGENT_UNAVAILABLE, TRANSIENT, RetryBudget, outcome_of
from supervisor_svc.definitions import DomainCatalog, default_catalog, execution_intent
from supervisor_svc.dispatch import Actor, close_stored_delegations, delegate, delegated_unfinished
from supervisor_svc.executions import ClaimLost, ExecutionStore, LeaseLost, ResumeInfo, new_review_id
from supervisor_svc.intent import UNKNOWN, Classification, Intent, check_tenant, parse_intent
from supervisor_svc.limits import ExecutionBudget, LimitAction, Usage
from supervisor_svc.model_intent import IntentClassifier
from supervisor_svc.planner import (
    HandoffRequest,
    NotRun,
    Plan,
    admit_handoff,
    build_plan,
    restore_plan,
)
from supervisor_svc.privacy import CANCEL, READ, Authorizer, ExecutionGuard, not_found
from supervisor_svc.projection import Projector, to_struct
from supervisor_svc.recording import GATHER_S, Gathering, Recorder, governing, governing_all, narrative, narrative_all
from supervisor_svc.registry import AgentRegistry
from supervisor_svc.routing import Endpoint, Route
from supervisor_svc.selection import AgentSelector
from supervisor_svc.tenants import TenantConfig, TenantSource
from supervisor_svc.traffic import Traffic

log = logging.getLogger(__name__)

LEASE_RENEW_S = 1.0
"""How often a replica renews its executions' leases and looks for expired ones to take over."""
FOLLOW_POLL_S = 0.5
"""How often Watch on a replica that does not run the execution reads the shared store."""

DEFAULT_TASK_TIMEOUT_S = 10.0
MAX_HANDOFF_ROUNDS = 3
"""How many times one task may answer WAITING (ask for handoffs) before it is failed."""
HANDOFF = "handoff"
"""``RequestedAction.action`` of a handoff request."""
_meter = metrics.get_meter("agentmesh.supervisor")
_task_latency = _meter.create_histogram("agentmesh.agent_task.duration", unit="ms",
                                        description="Latency of agent tasks (PRD §52)")
_task_outcomes = _meter.create_counter("agentmesh.agent_task.outcomes",
                                       description="Agent tasks by agent and outcome (success / failure rates)")
_handoffs = _meter.create_counter("agentmesh.handoffs", description="Handoffs requested, by result")
_conflicts = _meter.create_counter("agentmesh.conflicts", description="Agent conflicts found (PRD §53)")
_escalations = _meter.create_counter("agentmesh.escalations", description="Executions sent to human review")
_decisions = _meter.create_counter("agentmesh.executions", description="Executions by decision and status")
_retries = _meter.create_counter("agentmesh.agent_task.retries",
                                 description="Agent-level retries of reads after a transient failure (PRD §45)")
_fallbacks = _meter.create_counter("agentmesh.agent_task.fallbacks",
                                   description="Fallbacks weighed for an unavailable primary agent (PRD §47), by "
                                               "result: USED, FALLBACK_DENIED, FALLBACK_UNAVAILABLE, ...")
_tasks = _meter.create_counter("agentmesh.agent_task.tasks",
                               description="Finished tasks by planned agent, the agent that ran them and whether "
                                           "that was its fallback: the fallback rate is tasks{fallback=yes} / tasks")
MIN_RETRY_TIME_MS = 100
"""A retry is made only when the execution has at least this much time left after the backoff."""


class TaskCall(Protocol):
    """A running RunTask call."""

    def result(self) -> common_pb2.AgentResult:
        """Waits for the agent's result; raises a MeshError (DeadlineExceeded, Unavailable, ...)."""
        ...

    def cancel(self) -> None:
        """Cancels the call."""
        ...


class SpecialistPort(Protocol):
    """How the supervisor reaches specialist agents: each agent version at its endpoint."""

    def start(self, agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float,
              endpoint: Endpoint | None = None) -> TaskCall:
        """Starts RunTask on the agent version at ``endpoint`` (None: the address the configuration gives the
        agent)."""
        ...


@runtime_checkable
class Revoker(Protocol):
    """How the supervisor stops the work of an execution: CapabilityService.RevokeExecution."""

    def revoke(self, execution_id: str, reason: str, issued_before: dt.datetime | None = None) -> None:
        """Revokes the execution's grants (all, or those issued before ``issued_before``); raises a MeshError."""
        ...


@dataclass(frozen=True)
class Accepted:
    """An Analyze accepted: its execution, the verified caller, and whether it was a retry of an earlier one."""

    execution_id: str
    user: assertion.UserIdentity
    duplicate: bool = False


_TASK_STATUS = {TaskState.COMPLETED: common_pb2.TASK_STATUS_COMPLETED,
                TaskState.CANCELLED: common_pb2.TASK_STATUS_CANCELLED}
_TASK_OUTCOME = {TaskState.COMPLETED: audit_pb2.AUDIT_OUTCOME_SUCCESS,
                 TaskState.TIMED_OUT: audit_pb2.AUDIT_OUTCOME_TIMEOUT}
"""How a task's end is stored and recorded (any other state: FAILED, FAILURE)."""


def request_digest(request: pb.AnalyzeRequest) -> str:
    """What a client request id is bound to: the request's text and what it asks for."""
    body = "\0".join([request.request_text, str(request.request_release), str(request.confirmation_ttl_seconds),
                       request.budget.SerializeToString(deterministic=True).hex()])
    return hashlib.sha256(body.encode()).hexdigest()


def _first_resource(intent: Intent) -> str:
    """The record an execution is about, for its EXECUTION_STARTED record: the intent's first subject as
    ``name:value`` (``permit:WP-10231``; subjects are named after the resource types they are)."""
    if intent.definition is None:
        return ""
    name = intent.definition.subjects[0]
    return f"{name}:{intent.subjects.get(name, '')}"


def _ts(moment: dt.datetime | None = None) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(moment or dt.datetime.now(dt.UTC))
    return ts


_RUNNING: contextvars.ContextVar[_Live | None] = contextvars.ContextVar("agentmesh_running_execution",
                                                                        default=None)
"""The execution whose work the current thread does (set by :meth:`Orchestrator._execute`)."""


@dataclass
class _Live:
    """In-memory state of a running execution (rebuilt from the store is never needed: see end_interrupted)."""

    execution: pb.Execution
    plan: Plan | None
    user: assertion.UserIdentity
    budget: ExecutionBudget
    language: str
    started: float = field(default_factory=time.monotonic)
    cancelled: threading.Event = field(default_factory=threading.Event)
    calls: dict[str, TaskCall] = field(default_factory=dict)
    watchers: list[queue.Queue[pb.WatchExecutionResponse | None]] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.RLock = field(default_factory=threading.RLock)
    release_requested: bool = False
    """The user asked for the intent's action too (the release, phase two): proposed once the analysis is
    decided."""
    confirmation_ttl_s: int = 0
    """A model budget a task's agent found exhausted: the execution stops at the end of the stage."""
    delegated_before: set[str] = field(default_factory=set)
    """Tasks a previous supervisor process may have delegated (TASK_DELEGATED on the record) without
    finishing them: if one ends here without running, its delegation is closed (see _close_delegation)."""
    allowed_agents: frozenset[str] = frozenset()
    """The agents the tenant may use (handoff targets included), as configured when it was accepted."""
    limit: sup_errors.LimitExceeded | None = None
    """The limit a task or handoff reached: the stage ends and the execution stops there."""
    retries: RetryBudget | None = None
    """The retries the execution may still make (``retry.execution_budget``), made at its first retry."""
    gathering: Gathering | None = None
    """The running stage's first delegations, appended together (None: a stage of one task)."""
    stage_running: set[str] = field(default_factory=set)
    """The running stage's tasks that have not ended yet (see :meth:`Orchestrator._finish_record`)."""
    ahead: list[tuple[str, futures.Future[None]]] = field(default_factory=list)
    """Records sent on ahead of the execution (a stage's last TASK_FINISHED), by task id: whatever the
    execution records or stores next waits until they are durable (see :meth:`Orchestrator._catch_up`)."""
    ahead_failure: BaseException | None = None
    """Why a record sent ahead could not be made (not even kept in the outbox): the execution fails on it."""
    ahead_failed: set[str] = field(default_factory=set)
    """The tasks whose record sent ahead could not be made: FAILED in every state stored from then on."""
    final_stage: bool = False
    """The running stage is the plan's last."""
    held: dict[str, Any] | None = None
    """The TASK_FINISHED of the task that ended the plan's last stage, held back to go in one append with the
    execution's EXECUTION_FINISHED (see :meth:`Orchestrator._finish_record`); anything else the execution
    records or stores as required first sends it on its own (:meth:`Orchestrator._catch_up`)."""


@dataclass(frozen=True)
class _Call:
    """How one RunTask of a task ended, or the task's outcome if it was never delegated."""

    state: TaskState = TaskState.COMPLETED
    result: common_pb2.AgentResult | None = None
    reason: str = ""
    not_run: TaskOutcome | None = None
    outcome: int = pb.ATTEMPT_OUTCOME_UNSPECIFIED
    """How the attempt ended (supervisor_svc.attempts)."""
    error: errors.MeshError | None = None
    """The error the call failed with, if it failed."""


class _Fixed:
    """A classifier that gives one reading already found (a model's accepted answer) to the intent parser."""

    def __init__(self, found: Classification) -> None:
        self._found = found

    def classify(self, text: str, catalog: DomainCatalog) -> Classification | None:
        return self._found


class Orchestrator:
    """Plans, runs, aggregates, persists and audits executions."""

    def __init__(
        self,
        *,
        identity: spiffe.SpiffeId,
        registry: AgentRegistry,
        selector: AgentSelector,
        tenants: TenantSource,
        projector: Projector,
        store: ExecutionStore,
        signer: grants.GrantSigner,
        specialists: SpecialistPort,
        audit: Recorder,
        verify_assertion: Callable[[str], assertion.UserIdentity],
        authorize: Authorizer,
        task_timeout_s: float = DEFAULT_TASK_TIMEOUT_S,
        max_parallel: int = 16,
        actions: ReleaseActions | None = None,
        revoker: Revoker | None = None,
        domains: DomainCatalog | None = None,
        intents: IntentClassifier | None = None,
        traffic: Traffic | None = None,
        gather_s: float = GATHER_S,
    ) -> None:
        """``revoker`` stops an execution's work at the capability service; by default the
        specialists port, when it can (``GrpcSpecialists`` reaches the capability service too).
        ``domains``: the domain definitions served (the shipped ones by default); ``intents``
        classifies, through the model service, a request no rule of theirs understands; without it
        such a request is refused. ``traffic``: versions, availability, history and retries
        (supervisor_svc.traffic); by default every agent is its shipped version, only circuits count
        and no task is retried (no capability risk profiles). ``gather_s``: how long the first delegation
        record of a stage's tasks waits for its siblings' (supervisor_svc.recording.Gathering)."""
        self._id = identity
        self._registry = registry
        self._selector = selector
        self._tenants = tenants
        self._projector = projector
        self._domains = domains or default_catalog()
        self._intents = intents
        self._store = store
        self._signer = signer
        self._specialists = specialists
        self._audit = audit
        self._verify = verify_assertion
        self._guard = ExecutionGuard(authorize=authorize, audit=audit, agent_id=identity.name)
        self._authorize = authorize
        self._traffic = traffic or Traffic.build()
        self._task_timeout_s = task_timeout_s
        self._gather_s = gather_s
        self._actions = actions
        self._intents = intents
        self._revoker = revoker if revoker is not None else (
            specialists if isinstance(specialists, Revoker) else None)
        self._pool = futures.ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="task")
        # Its own threads: a task waiting for a record sent ahead never holds the thread that sends it.
        self._ahead = futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="record-ahead")
        self._live: dict[str, _Live] = {}
        self._live_lock = threading.Lock()
        self._accepting: set[str] = set()
        """Executions this process claimed a client_request_id for and is still accepting."""
        self._closed = threading.Event()
        self._lease_thread: threading.Thread | None = None

    # -- identity and access ---------------------------------------------------

    def authenticate(self, user_assertion: str, caller: str = "") -> assertion.UserIdentity:
        """Verifies the signed user assertion; UNAUTHENTICATED otherwise, and the rejection is audited.

        The record names what was presented — its SHA-256, the caller's SPIFFE id
        and the unverified claims that are safe to show (``alg``, ``iss``, ``sub``,
        ``tenant``, checked and shortened) — never the token itself.
        """
        try:
            return self._verify(user_assertion)
        except assertion.AssertionInvalid as err:
            self._narrate(audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                          reason_codes=[err.reason, *assertion.rejection_codes(user_assertion, err),
                                        f"caller={caller or 'none'}"])
            raise errors.recorded(errors.Unauthenticated(str(err), reason=err.reason,
                                                         metadata={"field": "user_assertion"})) from err

    def _narrate(self, event_type: int, **fields: Any) -> None:
        live = _RUNNING.get()
        if live is not None:
            self._catch_up(live)  # the log keeps the execution's order
        narrative(self._audit, event_type, **fields)

    @staticmethod
    def _settle(live: _Live) -> None:
        """With the lock held: forgets the records sent ahead that are done. One whose making raised (not a
        refusal or an absent audit, which the outbox takes, but a failure of the supervisor) fails the
        execution as it would have on the task's own thread: the task is FAILED, its end is on the record
        as SUPERVISOR_ERROR (see :meth:`_record_ahead`), and :meth:`_catch_up` raises from then on."""
        kept = []
        for task_id, sent in live.ahead:
            if not sent.done():
                kept.append((task_id, sent))
                continue
            error = sent.exception()
            if error is not None:
                live.ahead_failure = live.ahead_failure or error
                live.ahead_failed.add(task_id)
        live.ahead = kept
        if live.ahead_failed:  # also over a later in-memory change of the task (its own thread's tail)
            for node in live.execution.graph.nodes:
                if node.task_id in live.ahead_failed:
                    node.status = common_pb2.TASK_STATUS_FAILED

    def _catch_up(self, live: _Live, *, keep_held: bool = False) -> None:
        """Returns once every record sent on ahead of the execution is durable (in the log or the outbox),
        and the record held back for the execution's end (:attr:`_Live.held`) too, unless ``keep_held``.

        What the execution records or stores next comes after it, so the log keeps the order in which
        things happened, and a stored state never gets ahead of its records (a task stored as ended always
        has its TASK_FINISHED).

        Raises:
            RuntimeError: such a record could not be made; the execution does not go on (see :meth:`_settle`).
        """
        if not keep_held:
            self._send_held(live)
        with live.lock:
            if not live.ahead and live.ahead_failure is None:
                return
            waiting = [sent for _, sent in live.ahead if not sent.done()]
        if waiting:
            futures.wait(waiting)
        with live.lock:
            self._settle(live)
            failure = live.ahead_failure
        if failure is not None:
            raise RuntimeError("a TASK_FINISHED record sent ahead could not be made") from failure

    def _save(self, live: _Live, *, deferrable: bool = False) -> None:
        """Stores the execution as it is now, provided every record sent on ahead of it is durable.

        Called with the execution's lock held, after :meth:`_catch_up` outside it (a record travels for a
        round trip to audit, or longer while audit is slow, and the lock serves the execution's readers and
        its cancellation meanwhile). ``deferrable``: while such a record is still on its way nothing is
        stored now; the execution's next store (before its next delegation, at the latest its end) stores
        this state with the rest.
        """
        with live.lock:
            if live.held is not None:
                if deferrable:
                    return
                # As below: the execution's own steps catch up first, which sends it.
                self._send_held(live)
            pending = [sent for _, sent in live.ahead if not sent.done()]
            if pending:
                if deferrable:
                    return
                # Not reached by the execution's own steps (each catches up first); if it were, the store
                # waits rather than get ahead of a record (a record sent ahead never needs this lock).
                futures.wait(pending)
            self._settle(live)
            if live.ahead_failure is not None:
                if deferrable:
                    return  # the execution fails on it at its next step (see _catch_up)
                raise RuntimeError("a TASK_FINISHED record sent ahead could not be made") from live.ahead_failure
            self._store.save(live.execution)

    def _refuse(self, err: errors.MeshError, user: assertion.UserIdentity | None, **fields: Any) -> errors.MeshError:
        self._narrate(audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                      reason_codes=[err.reason], tenant_id=user.tenant_id if user else "",
                      user_id=user.user_id if user else "", **fields)
        return errors.recorded(err)

    def _find(self, execution_id: str) -> tuple[_Live | None, pb.Execution | None]:
        if not execution_id:
            raise errors.InvalidArgument("execution_id is required", reason="MISSING_FIELD",
                                         metadata={"field": "execution_id"})
        live = self._live.get(execution_id)
        return live, live.execution if live else self._store.get(execution_id)

    def snapshot(self, user: assertion.UserIdentity, execution_id: str) -> pb.Execution:
        """The execution as ``user`` may see it, WITHOUT asking whether they may (see :meth:`visible`).

        For answers about an execution the caller was just allowed to act on (their own
        Analyze, a confirmation, a review decision). NOT_FOUND as in :meth:`visible`.
        """
        live, execution = self._find(execution_id)
        if execution is None or execution.tenant_id != user.tenant_id:
            raise not_found(execution_id)
        snapshot = pb.Execution()
        if live:
            with live.lock:
                snapshot.CopyFrom(live.execution)
        else:
            snapshot.CopyFrom(execution)
        if snapshot.action.confirmation_token and (
                user.user_id != snapshot.user_id or snapshot.action.state != pb.ACTION_STATE_AWAITING_CONFIRMATION):
            # The token is for the requester's eyes only.
            snapshot.action.confirmation_token = ""
        return snapshot

    def visible(self, user: assertion.UserIdentity, execution_id: str) -> pb.Execution:
        """An execution the policy engine lets ``user`` read (see supervisor_svc.privacy).

        Raises:
            agentmesh.errors.NotFound: ``EXECUTION_NOT_FOUND`` — none, or another tenant's (no hint which).
            agentmesh.errors.PermissionDenied: ``POLICY_DENIED`` (audited).
        """
        _, execution = self._find(execution_id)
        self._guard.require(user, execution_id, execution, READ)
        return self.snapshot(user, execution_id)

    def list_visible(self, user: assertion.UserIdentity,
                     request: pb.ListExecutionsRequest) -> pb.ListExecutionsResponse:
        """A page of the executions of the user's tenant the policy engine lets them read (supervisor_svc.listing)."""
        return listing.list_visible(self._store, self._guard, user, request, self.snapshot)

    # -- start: verify, parse, plan --------------------------------------------

    def start(self, request: pb.AnalyzeRequest, caller: str) -> str:
        """Verifies and plans a request; returns the execution id (the execution is persisted RUNNING).

        The execution is accepted only once its EXECUTION_STARTED record is durable in the audit
        log: if audit cannot take it, UNAVAILABLE ``AUDIT_UNAVAILABLE`` and nothing exists or ran.
        See :meth:`accept` for a retried request (``client_request_id``).
        """
        return self.accept(request, caller).execution_id

    def accept(self, request: pb.AnalyzeRequest, caller: str) -> Accepted:
        """:meth:`start`, telling a retry apart: a request whose (tenant, user, ``client_request_id``)
        started an execution before answers that one (``duplicate``) and starts nothing.

        Raises:
            agentmesh.errors.Aborted: ``CLIENT_REQUEST_ID_REUSED`` — the id was used for another request.
        """
        user = self.authenticate(request.user_assertion, caller)
        if request.tenant_id and request.tenant_id != user.tenant_id:
            raise self._refuse(errors.PermissionDenied(
                "tenant_id does not match the tenant of the user assertion", reason="TENANT_MISMATCH",
                metadata={"field": "tenant_id"}), user)
        try:
            # Read for every execution: a tenant applied or changed a moment ago is in force for this one.
            tenant = self._tenants.get(user.tenant_id)
        except sup_errors.TenantNotConfigured as err:
            raise self._refuse(errors.FailedPrecondition(err.message, reason=err.reason,
                                                         metadata={"field": "tenant_id"}), user) from err
        if not request.request_text.strip():
            raise errors.InvalidArgument("request_text is required", reason="MISSING_FIELD",
                                         metadata={"field": "request_text"})
        intent = self.parse(request.request_text)
        try:
            check_tenant(intent, user.tenant_id)
        except sup_errors.TenantMismatch as err:
            raise self._refuse(errors.PermissionDenied(err.message, reason=err.reason,
                                                       metadata={"field": "request_text"}), user) from err
        if not intent.actionable and not self._model_may_classify(intent):
            # An unknown request, or no permit named: refused (only a request the rules have no rule for
            # may go to a model, in _begin, once the execution has its id).
            raise errors.InvalidArgument(intent.message, reason="UNKNOWN_INTENT", metadata={"field": "request_text"})

        execution_id = f"exe-{uuid.uuid4().hex[:16]}"
        crid = request.client_request_id
        if crid:
            digest = request_digest(request)
            with self._live_lock:
                self._accepting.add(execution_id)
            owner, held = self._store.claim_request(user.tenant_id, user.user_id, crid, execution_id, digest)
            if owner != execution_id:
                with self._live_lock:
                    self._accepting.discard(execution_id)
                if not hmac.compare_digest(held, digest):
                    raise self._refuse(errors.Aborted(
                        "client_request_id was already used for another request; use a new id",
                        reason="CLIENT_REQUEST_ID_REUSED", metadata={"field": "client_request_id"}), user)
                if self._claimed_by_a_dead_process(user, crid, owner):
                    # The process that claimed it was killed before its execution existed: nothing ran
                    # under that id, so this retry takes the request over (on a shared store one retry
                    # wins the release; the others find its claim) and starts it.
                    log.warning("client_request_id of %s was claimed by a process that stopped before its "
                                "execution existed; starting it again", owner)
                    self._store.release_request(user.tenant_id, user.user_id, crid, owner, abandoned=True)
                    return self.accept(request, caller)
                self._await_existence(owner)
                return Accepted(owner, user, duplicate=True)
        try:
            self._begin(request, user, intent, caller, execution_id, tenant)
        except ClaimLost as err:  # this process was too slow: a retry took the request over
            raise self._refuse(errors.Aborted(
                "client_request_id was taken over by a retry while this request was being accepted",
                reason="CLIENT_REQUEST_ID_REUSED", metadata={"field": "client_request_id"}), user) from err
        except BaseException:
            if crid and self._store.get(execution_id) is None:
                self._store.release_request(user.tenant_id, user.user_id, crid, execution_id)
            raise
        finally:
            with self._live_lock:
                self._accepting.discard(execution_id)
        return Accepted(execution_id, user)

    def parse(self, request_text: str) -> Intent:
        """The intent of a request, from the domain definitions' rules."""
        return parse_intent(request_text, catalog=self._domains)

    def _claimed_by_a_dead_process(self, user: assertion.UserIdentity, crid: str, execution_id: str) -> bool:
        """Whether a client request's execution can never come to exist: on a store of one supervisor
        (not shared), one this process is not accepting and that is not stored was claimed by a
        previous process that died; on a shared store, the replica that claimed it has lost its
        lease and nothing was stored (if it was only slow, its store finds the claim gone)."""
        if self._store.shared:
            return self._store.claim_abandoned(user.tenant_id, user.user_id, crid, execution_id)
        with self._live_lock:
            if execution_id in self._accepting or execution_id in self._live:
                return False
        return self._store.get(execution_id) is None

    def _await_existence(self, execution_id: str, timeout_s: float = 10.0) -> None:
        """Waits until a just-claimed execution exists (its first Analyze is still accepting it)."""
        deadline = time.monotonic() + timeout_s
        while execution_id not in self._live and self._store.get(execution_id) is None:
            if time.monotonic() > deadline:
                raise errors.Unavailable("the execution of this client_request_id is still being accepted; "
                                         "retry", reason="EXECUTION_STARTING", metadata={"field": "client_request_id"})
            time.sleep(0.02)

    def _model_may_classify(self, intent: Intent) -> bool:
        """Deterministic first (PRD §49): only a request the rules have no rule for may go to a model."""
        return self._intents is not None and intent.kind == UNKNOWN and intent.rule == "NO_RULE"

    def _classify(self, request: pb.AnalyzeRequest, user: assertion.UserIdentity, rules: Intent,
                  execution_id: str, budget: ExecutionBudget) -> tuple[Intent, pb.IntentClassification]:
        """A request the rules do not understand, classified by a model (supervisor_svc.model_intent).

        The call runs on the user's authority under a grant the supervisor issues to itself for
        this execution (no capability, no resource; the execution's model budget). Anything but
        an accepted answer refuses the request, naming why.
        """
        assert self._intents is not None
        grant = self._signer.issue(
            issuer=str(self._id), audience=str(self._id), execution_id=execution_id, task_id=f"intent-{execution_id}",
            tenant_id=user.tenant_id, user_id=user.user_id, assertion_digest=user.digest, capabilities=[],
            resources=[], depth=1, roles=tuple(user.roles), session_id=user.session_id,
            conversation_id=user.conversation_id, model_budgets=budget.grant_budgets(),
            ttl=dt.timedelta(seconds=60))
        principal = common_pb2.AgentPrincipal(agent_id=self._id.name, execution_id=execution_id, grants=[grant])
        trace = common_pb2.TraceContext(execution_id=execution_id,
                                        correlation_id=telemetry.current_ids().get(telemetry.CORRELATION_ID, ""))
        try:
            found = self._intents.classify(request.request_text, grant=grant, principal=principal, trace=trace)
        except errors.MeshError as err:
            if isinstance(err, errors.Unavailable | errors.DeadlineExceeded):
                raise errors.Unavailable(
                    f"{rules.message} (the model service that could classify it failed: {err.reason})",
                    reason="INTENT_MODEL_UNAVAILABLE", metadata={"field": "request_text"}) from err
            raise errors.InvalidArgument(f"{rules.message} (no model could classify it: {err.reason})",
                                         reason="UNKNOWN_INTENT", metadata={"field": "request_text"}) from err
        if found is None:  # nothing relevant to show a model: no call was made
            raise errors.InvalidArgument(rules.message, reason="UNKNOWN_INTENT", metadata={"field": "request_text"})
        with contextlib.suppress(sup_errors.LimitExceeded):  # enforced by the model service; spent already
            budget.record_model_usage(tokens=found.usage.prompt_tokens + found.usage.completion_tokens,
                                      model_calls=found.usage.calls, cost=found.usage.cost)
        intent = None if found.classification is None else self._resolve(request.request_text, found.classification)
        if intent is None or not intent.actionable:
            why = found.why_not or "NOT_RESOLVED"
            raise errors.InvalidArgument(
                f"{rules.message} (a model was asked; its answer was not accepted: {why})",
                reason="UNKNOWN_INTENT",
                metadata={"field": "request_text", "model_call_id": found.record.model_call_id})
        return intent, found.record

    def _resolve(self, text: str, found: Classification) -> Intent:
        """A model's accepted reading, resolved through the domain definitions as a rule's would be (never
        asking for the intent's action: that takes words the rules understand, or ``request_release``)."""
        reading = Classification(found.kind, dict(found.subjects), found.name, action_requested=False)
        return parse_intent(text, catalog=self._domains, classifier=_Fixed(reading))

    @staticmethod
    def _budget(request: pb.AnalyzeRequest, tenant: TenantConfig) -> ExecutionBudget:
        try:
            return ExecutionBudget(tenant.limit_policy, request.budget if request.HasField("budget") else None)
        except sup_errors.SupervisorError as err:
            raise errors.InvalidArgument(err.message, reason=err.reason,
                                         metadata={"field": err.field or "budget"}) from err

    def _begin(self, request: pb.AnalyzeRequest, user: assertion.UserIdentity, intent: Intent, caller: str,
               execution_id: str, tenant: TenantConfig) -> None:
        correlation_id = request.correlation_id or f"corr-{uuid.uuid4().hex[:12]}"
        with telemetry.mesh_ids(execution_id=execution_id, correlation_id=correlation_id):
            budget = self._budget(request, tenant)
            if intent.actionable:
                classification = pb.IntentClassification(source="RULES", intent=intent.kind,
                                                          subjects=dict(intent.subjects))
            else:
                intent, classification = self._classify(request, user, intent, execution_id, budget)
            ids = telemetry.current_ids()
            execution = pb.Execution(
                execution_id=execution_id, status=pb.EXECUTION_STATUS_RUNNING, request_text=request.request_text,
                intent=execution_intent(intent.kind), intent_kind=intent.kind, domain=intent.domain_id,
                intent_rule=intent.rule, tenant_id=user.tenant_id,
                user_id=user.user_id, actor_type=common_pb2.ACTOR_TYPE_USER, user_roles=user.roles,
                trace=common_pb2.TraceContext(trace_id=ids.get("trace_id", ""), correlation_id=correlation_id,
                                              execution_id=execution_id),
                started_at=_ts(), client_request_id=request.client_request_id,
                intent_classification=classification)
            user_ctx = user.to_context()
            live = _Live(execution, None, user, budget, intent.language if intent.language != "unknown" else "en",
                         allowed_agents=tenant.allowed_agents,
                         release_requested=(intent.action_requested or request.request_release)
                         and intent.action is not None,
                         confirmation_ttl_s=max(0, request.confirmation_ttl_seconds))
            started = (audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED, dict(
                outcome=audit_pb2.AUDIT_OUTCOME_PENDING, execution_id=execution_id,
                correlation_id=correlation_id, tenant_id=user.tenant_id, user_id=user.user_id,
                reason_codes=[f"intent={intent.kind}", f"rule={intent.rule}", f"caller={caller}",
                              f"domain={intent.domain_id}",
                              *([f"model={classification.model_id}", f"model_call={classification.model_call_id}"]
                                if classification.source == "MODEL" else [])],
                resource=_first_resource(intent)))
            with telemetry.tracer().start_as_current_span("AgentSelection") as span:
                try:
                    # Admitted against the limits below, once the plan is stored: a plan that exceeds
                    # one stops (or waits for a reviewer, who may let it go on) with its tasks known.
                    plan = build_plan(intent, execution_id=execution_id, user=user_ctx,
                                      correlation_id=correlation_id, selector=self._selector)
                except sup_errors.NoAgentAvailable as err:
                    governing(self._audit, started[0], **started[1])
                    execution.status = pb.EXECUTION_STATUS_FAILED
                    execution.decision = common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE
                    execution.reason = f"{err.reason}: {err.message}"
                    execution.summary = f"No agent can run this request: {err.message}"
                    self._finish(live)
                    self._register(live)
                    live.done.set()
                    return
                span.set_attribute("agentmesh.tasks", len(plan.graph.nodes))
            live.plan = plan
            execution.graph.CopyFrom(plan.graph)
            execution.selection_scores.extend(plan.selection_scores())
            for node in plan.graph.nodes:
                node.status = common_pb2.TASK_STATUS_CREATED
            execution.graph.CopyFrom(plan.graph)
            # The execution's start and its agents' selection: one append, durable before it is accepted.
            governing_all(self._audit, [started, *(
                (audit_pb2.AUDIT_EVENT_TYPE_AGENT_SELECTED, dict(
                    outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS, execution_id=execution_id, correlation_id=correlation_id,
                    tenant_id=user.tenant_id, user_id=user.user_id, task_id=node.task_id,
                    agent_id=node.target_agent_id,
                    reason_codes=[f"score={s.final_score:.3f}" for s in plan.selection_scores()
                                  if s.agent_id == node.target_agent_id][:1]))
                for node in plan.graph.nodes)])
        # What a restarted supervisor needs to resume it, stored with the execution: before any task runs.
        resume = ResumeInfo(
            user_ctx, request.budget if request.HasField("budget") else None, live.release_requested,
            live.confirmation_ttl_s, live.language, tuple((n.analysis, n.reason) for n in plan.not_run))
        try:
            budget.admit_plan([(node.depth, plan.specs[node.task_id].agent.manifest.cost)
                               for node in plan.graph.nodes])
        except sup_errors.LimitExceeded as err:
            # A reviewer may let it go on past the limit: it is resumed from what is kept here.
            self._store.save_resume(execution_id, resume)
            with telemetry.mesh_ids(execution_id=execution_id, correlation_id=correlation_id):
                self._stop_for_limit(live, err)
                self._finish(live)
            self._register(live)
            live.done.set()
            return
        self._store.save(execution, resume=resume)
        self._register(live)

    def _register(self, live: _Live) -> None:
        with self._live_lock:
            self._live[live.execution.execution_id] = live

    # -- run ---------------------------------------------------------------------

    def outcome_of(self, user: assertion.UserIdentity, execution_id: str) -> pb.Execution:
        """The execution once it has ended (waits while it runs here), as ``user`` may see it: a retried Analyze."""
        live = self._live.get(execution_id)
        if live is not None:
            live.done.wait()
        return self.snapshot(user, execution_id)

    def run(self, execution_id: str) -> pb.Execution:
        """Executes a planned execution to its end; returns the final execution."""
        live = self._live[execution_id]
        try:
            if not live.done.is_set():
                try:
                    self._execute(live)
                except LeaseLost:
                    # Another replica took the execution over: it is theirs to finish.
                    log.warning("execution %s was taken over by another replica; stopping here", execution_id)
                    live.cancelled.set()
                    live.done.set()
                    self._close_watchers(live)
            return self._snapshot(live)
        finally:
            # Finished executions are served from the store; memory holds only running ones.
            with self._live_lock:
                self._live.pop(execution_id, None)

    def _execute(self, live: _Live) -> None:
        ex = live.execution
        execution_id = ex.execution_id
        running = _RUNNING.set(live)
        try:
            with telemetry.mesh_ids(execution_id=execution_id, correlation_id=ex.trace.correlation_id):
                try:
                    self._run_stages(live)
                    self._propose_release(live)
                except LeaseLost:
                    self._send_held(live)  # the task did end here
                    raise  # the new owner resumes it, delegations included (see run)
                except Exception:  # noqa: BLE001 - an execution never vanishes: it ends FAILED, with the reason
                    log.exception("execution %s failed", execution_id)
                    with live.lock:
                        pending = [sent for _, sent in live.ahead if not sent.done()]
                    # A record its stage's last task sent on ahead before the failure ends first, so the end
                    # recorded below never meets its failure.
                    futures.wait(pending)
                    with live.lock:
                        self._settle(live)
                        live.ahead_failure = None  # seen: the execution ends on it here
                        left = sorted(live.delegated_before)
                    for task_id in left:
                        # Delegated by an earlier process, not run again here: closed on the record.
                        self._close_delegation(live, task_id, TaskState.NOT_RUN, "SUPERVISOR_ERROR")
                    with live.lock:
                        ex.status = pb.EXECUTION_STATUS_FAILED
                        ex.reason = "SUPERVISOR_ERROR: the execution failed inside the supervisor"
                        ex.summary = "The analysis failed inside the supervisor; no decision was made."
                        for node in ex.graph.nodes:
                            if node.status == common_pb2.TASK_STATUS_RUNNING:
                                # Its call's end went wrong on its own thread (its TASK_FINISHED says
                                # SUPERVISOR_ERROR): stored FAILED, not RUNNING in an execution that ended.
                                node.status = common_pb2.TASK_STATUS_FAILED
                self._finish(live)
        finally:
            _RUNNING.reset(running)
        live.done.set()
        self._notify(live, pb.EXECUTION_EVENT_EXECUTION_FINISHED)
        self._close_watchers(live)

    def _propose_release(self, live: _Live) -> None:
        """After the decision, the release the user asked for starts on its way (see supervisor_svc.actions)."""
        ex = live.execution
        if not live.release_requested or self._actions is None or live.plan is None or live.cancelled.is_set():
            return
        if ex.status not in (pb.EXECUTION_STATUS_SUCCEEDED, pb.EXECUTION_STATUS_PARTIAL,
                             pb.EXECUTION_STATUS_AWAITING_REVIEW):
            return
        intent = live.plan.intent
        action = intent.domain.actions.get(intent.action) if intent.domain is not None and intent.action else None
        if action is None:
            return
        self._catch_up(live)  # the proposal's records and stores come after the execution's
        with live.lock, self._actions.lock:
            self._actions.propose(ex, live.user, action, intent.subjects, live.confirmation_ttl_s)
            if ex.HasField("action"):
                for conflict in ex.conflicts:
                    if conflict.review_id:
                        item = self._store.review(conflict.review_id)
                        if item is not None:
                            item.action.CopyFrom(ex.action)
                            self._store.save_review(item)

    def run_async(self, execution_id: str) -> None:
        """Runs the execution in the background (for detached requests)."""
        ctx = contextvars.copy_context()
        threading.Thread(target=ctx.run, args=(self.run, execution_id), name=f"exe-{execution_id[-6:]}",
                         daemon=True).start()

    def _run_stages(self, live: _Live) -> None:
        plan = live.plan
        assert plan is not None
        outcomes: dict[str, TaskOutcome] = {}
        results: dict[str, common_pb2.AgentResult] = {}
        stages = plan.stages()
        for number, stage in enumerate(stages):
            live.final_stage = number == len(stages) - 1
            try:
                live.budget.check_time(self._elapsed_ms(live))
            except sup_errors.LimitExceeded as err:
                self._stop_for_limit(live, err, outcomes)
                return
            runnable: list[str] = []
            for task_id in stage:
                done = self._checkpoint(live, task_id)
                if done is not None:
                    # Completed before a restart: its stored result is the checkpoint, not run again.
                    outcomes[task_id] = done
                    if done.result is not None:
                        results[task_id] = done.result
                    continue
                skip = next((e for e in plan.incoming(task_id) if not plan.edge_holds(e, results)), None)
                if skip is not None:
                    outcomes[task_id] = self._outcome(plan, task_id, TaskState.SKIPPED,
                                                      error_reason=f"CONDITION_NOT_MET: {skip.condition or 'done'}",
                                                      off_path=plan.branch_not_taken(skip, results))
                    self._close_delegation(live, task_id, TaskState.SKIPPED, f"CONDITION_NOT_MET: {skip.condition}")
                    self._set_status(live, task_id, common_pb2.TASK_STATUS_SKIPPED)
                elif live.cancelled.is_set():
                    outcomes[task_id] = self._outcome(plan, task_id, TaskState.CANCELLED, error_reason="CANCELLED")
                    self._close_delegation(live, task_id, TaskState.CANCELLED, "CANCELLED")
                    self._set_status(live, task_id, common_pb2.TASK_STATUS_CANCELLED)
                else:
                    runnable.append(task_id)
            context = self._context_for_stage(plan, results)
            ctx = contextvars.copy_context()
            # The stage's tasks are delegated at nearly the same moment: their records go in one append,
            # after one store of the execution with all of them as sent (not one store each).
            live.gathering = Gathering(self._audit, runnable, wait_s=self._gather_s,
                                       store=functools.partial(self._save, live)) if len(runnable) > 1 else None
            with live.lock:
                live.stage_running = set(runnable)
            running = {t: self._pool.submit(ctx.copy().run, self._run_in_stage, live, t, context)
                       for t in runnable}
            # Every task of the stage ends (and is on the record) before anything is concluded, also when
            # one of them fails inside the supervisor.
            futures.wait(running.values())
            live.gathering = None
            for task_id, fut in running.items():
                outcome = fut.result()
                outcomes[task_id] = outcome
                if outcome.result is not None:
                    results[task_id] = outcome.result
            if live.limit is not None:
                # A task or a handoff reached a limit: the execution stops after this stage's work.
                self._stop_for_limit(live, live.limit, outcomes)
                return
        self._decide(live, outcomes)

    def _checkpoint(self, live: _Live, task_id: str) -> TaskOutcome | None:
        """The outcome of a task that completed before (its result is stored), or None if it must run."""
        plan = live.plan
        assert plan is not None
        with live.lock:
            node = next((n for n in live.execution.graph.nodes if n.task_id == task_id), None)
            if node is None or node.status != common_pb2.TASK_STATUS_COMPLETED:
                return None
            result = next((r for r in live.execution.results if r.task_id == task_id), None)
        if result is None:
            return None
        return self._outcome(plan, task_id, TaskState.COMPLETED, result=result)

    def _context_for_stage(self, plan: Plan, results: dict[str, common_pb2.AgentResult]) -> dict[str, Any] | None:
        """What later tasks are projected from: the ``context`` fields of the planned tasks' results so far."""
        found = [(results[task_id], spec.template.contract, spec.template.context)
                 for task_id, spec in plan.specs.items()
                 if task_id in results and spec.template is not None and spec.template.context]
        return context_of(found) or None

    def _outcome(self, plan: Plan, task_id: str, state: TaskState, *, result: common_pb2.AgentResult | None = None,
                 error_reason: str = "", off_path: bool = False) -> TaskOutcome:
        spec = plan.specs[task_id]
        template = spec.template
        return TaskOutcome(spec.analysis, state, task_id, spec.agent.agent_id, result, error_reason,
                           contract=template.contract if template else None,
                           template_task=template.task_id if template else "", off_path=off_path)

    def _elapsed_ms(self, live: _Live) -> int:
        return int((time.monotonic() - live.started) * 1000)

    def _set_status(self, live: _Live, task_id: str, status: int, *, finished: bool = False,
                    deferrable: bool = False) -> None:
        if not deferrable:
            self._catch_up(live)
        with live.lock:
            for node in live.execution.graph.nodes:
                if node.task_id == task_id:
                    node.status = status  # type: ignore[assignment]
                    if finished:
                        node.finished_at.CopyFrom(_ts())
            self._save(live, deferrable=deferrable)

    def _close_delegation(self, live: _Live, task_id: str, state: TaskState, reason: str,
                          why: str = "DELEGATED_BEFORE_RESTART") -> None:
        """A task a previous supervisor process delegated ends here without running: its TASK_FINISHED
        (the state and the reason) goes on the record through the outbox, so the earlier delegation is
        never left open. A task never delegated before gets nothing (nothing to close)."""
        with live.lock:
            if task_id not in live.delegated_before:
                return
            live.delegated_before.discard(task_id)
            node = next((n for n in live.execution.graph.nodes if n.task_id == task_id), None)
        self._narrate(audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED,
                      outcome=audit_pb2.AUDIT_OUTCOME_FAILURE, execution_id=live.execution.execution_id,
                      tenant_id=live.user.tenant_id, user_id=live.user.user_id, task_id=task_id,
                      agent_id=node.target_agent_id if node is not None else "",
                      reason_codes=[state.value, reason, why])

    def _run_in_stage(self, live: _Live, task_id: str, context: dict[str, Any] | None) -> TaskOutcome:
        """:meth:`_run_task`, then out of its stage's gathering (a task that ended before its delegation
        holds back none of its siblings' records)."""
        try:
            return self._run_task(live, task_id, context)
        finally:
            gathering = live.gathering
            if gathering is not None:
                gathering.leave(task_id)

    def _run_task(self, live: _Live, task_id: str, context: dict[str, Any] | None) -> TaskOutcome:
        """Runs one task to its end: the agent version the router chooses is called (again after a transient
        failure of a read, or its fallback while it is unavailable: :meth:`_attempt`), and called again with
        the outcome of each handoff it asks for while its result is WAITING (see :meth:`_run_handoffs`)."""
        plan = live.plan
        assert plan is not None
        spec = plan.specs[task_id]
        agent_id = spec.agent.agent_id
        user = live.user
        with telemetry.tracer().start_as_current_span(f"AgentTask {agent_id}") as span:
            span.set_attribute("agentmesh.task_id", task_id)
            span.set_attribute("agentmesh.agent_id", agent_id)
            try:
                # Status is read at dispatch: a DISABLED agent takes no new task (PRD §63).
                entry = self._registry.ensure_active(agent_id)
            except sup_errors.SupervisorError as err:
                self._close_delegation(live, task_id, TaskState.NOT_RUN, f"{err.reason}: {err.message}")
                self._set_status(live, task_id, common_pb2.TASK_STATUS_FAILED)
                return self._outcome(plan, task_id, TaskState.NOT_RUN, error_reason=f"{err.reason}: {err.message}")
            node = common_pb2.AgentTask()
            node.CopyFrom(plan.task(task_id))
            projected = not node.HasField("input")
            if projected:
                projected_input, projection = self._projector.project(context or {}, agent_id, spec.purpose,
                                                                      source_context_id=live.execution.execution_id)
                node.input.CopyFrom(to_struct(projected_input))
                node.projection.CopyFrom(projection)
            # The version this execution's task goes to (its ACTIVE one, or its CANARY for the canary's share).
            route = self._traffic.route(entry, tenant_id=user.tenant_id, execution_id=live.execution.execution_id,
                                        required_capabilities=node.required_capabilities)
            span.set_attribute("agentmesh.agent_version", route.version)
            primary = route
            handoffs: list[common_pb2.HandoffOutcome] = []
            rounds = 0
            while True:
                call, route, node = self._attempt(live, task_id, route, node, handoffs, span, again=rounds > 0,
                                                  context=context if projected else None)
                agent_id = route.agent_id
                if call.not_run is not None:
                    return call.not_run
                state, result, reason = call.state, call.result, call.reason
                if result is not None and result.HasField("model_usage"):
                    self._model_usage(live, result.model_usage)
                if result is None or result.status != common_pb2.RESULT_STATUS_WAITING:
                    break
                # The agent waits for the handoffs it asked for (PRD §12, §20).
                rounds += 1
                if not any(a.action == HANDOFF for a in result.requested_actions):
                    state, result, reason = TaskState.FAILED, None, (
                        "RESULT_WAITING_WITHOUT_HANDOFF: the agent answered WAITING but asked for no handoff")
                    break
                if live.limit is not None or live.cancelled.is_set():
                    return self._waiting_cut_short(live, task_id, agent_id)
                if rounds > MAX_HANDOFF_ROUNDS:
                    state, result, reason = TaskState.FAILED, None, (
                        f"HANDOFF_ROUNDS_EXCEEDED: {agent_id} was still WAITING after {MAX_HANDOFF_ROUNDS} rounds "
                        "of handoffs")
                    self._narrate(audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                                  tenant_id=user.tenant_id, user_id=user.user_id, task_id=task_id, agent_id=agent_id,
                                  reason_codes=["HANDOFF_ROUNDS_EXCEEDED", f"rounds={MAX_HANDOFF_ROUNDS}"])
                    break
                self._set_status(live, task_id, common_pb2.TASK_STATUS_WAITING)
                self._notify(live, pb.EXECUTION_EVENT_TASK_WAITING, task_id=task_id, agent_id=agent_id,
                             task_status=common_pb2.TASK_STATUS_WAITING)
                handoffs = self._run_handoffs(live, task_id, result)
                if live.limit is not None or live.cancelled.is_set():
                    return self._waiting_cut_short(live, task_id, agent_id)
            status = _TASK_STATUS.get(state, common_pb2.TASK_STATUS_FAILED)
            with live.lock:
                if result is not None:
                    live.execution.results.append(result)
            self._set_status(live, task_id, status, finished=True, deferrable=True)
            self._notify(live, pb.EXECUTION_EVENT_TASK_FINISHED, task_id=task_id, agent_id=agent_id, task_status=status)
            if state is not TaskState.CANCELLED:
                # The task's end feeds the agent's history and, for a canary, its judgement (PRD §57).
                self._traffic.guard.finished(route, succeeded=result is not None
                                             and result.status != common_pb2.RESULT_STATUS_FAILED)
                _tasks.add(1, {"agent": primary.agent_id, "ran_on": route.agent_id,
                               "fallback": "yes" if route.agent_id != primary.agent_id else "no"})
            if result is not None:
                self._ignored_handoffs(live, task_id, result)
            return self._outcome(plan, task_id, state, result=result, error_reason=reason)

    def _attempt(self, live: _Live, task_id: str, route: Route, node: common_pb2.AgentTask,
                 handoffs: list[common_pb2.HandoffOutcome], span: Any, *, again: bool,
                 context: dict[str, Any] | None) -> tuple[_Call, Route, common_pb2.AgentTask]:
        """One call of a task (the first, or again after WAITING) with its retries and its fallback (PRD §45, §47;
        see supervisor_svc.attempts): returns how it ended, the route that ended it and the task as sent.

        A transient failure (UNAVAILABLE, DEADLINE_EXCEEDED, the version down, a PARTIAL result whose source
        was unavailable) is tried again on the same version after an exponential backoff, while the task only
        reads, attempts and the execution's retry budget last and the execution has time. When the agent
        itself stays unavailable, its declared fallback runs if the policy engine allows it (not for a call
        after WAITING, nor for a handoff task: their input was made for the primary). ``context``: what a
        projected task's input was projected from (the fallback gets its own projection); None for a task
        whose input came from the plan.
        """
        kind = pb.ATTEMPT_KIND_CONTINUE if again else pb.ATTEMPT_KIND_FIRST
        fallback_for = decision_id = ""
        while True:
            granted = [c for c in node.required_capabilities if c in route.entry.manifest.capabilities]
            reads, not_read = self._traffic.idempotent(granted)
            calls, backoff_ms = 0, 0
            while True:
                calls += 1
                call = self._one_attempt(live, task_id, route, node, handoffs, span, kind=kind, again=again,
                                         backoff_ms=backoff_ms, fallback_for=fallback_for, decision_id=decision_id)
                if call.not_run is not None or call.outcome not in TRANSIENT:
                    return call, route, node
                backoff_ms = self._traffic.retry.backoff_ms(calls)
                why_not = self._no_retry(live, reads, not_read, calls, backoff_ms)
                if why_not:
                    span.add_event("agentmesh.no_retry", {"agentmesh.task_id": task_id, "agentmesh.reason": why_not})
                    break
                _retries.add(1, {"agent": route.agent_id, "after": pb.AttemptOutcome.Name(call.outcome)})
                if live.cancelled.wait(backoff_ms / 1000):
                    return call, route, node
                kind = pb.ATTEMPT_KIND_RETRY
            if fallback_for or again or call.outcome not in AGENT_UNAVAILABLE:
                return call, route, node
            primary = route
            # A task that may change something runs on a fallback only if the primary never got it.
            may_have_acted = "" if reads or call.outcome == pb.ATTEMPT_OUTCOME_NOT_CALLED else not_read
            found = self._fallback(live, task_id, primary, node, call.reason, context, may_have_acted)
            if found is None:
                return call, route, node
            # The primary's part ends failed (its history says so); the task is the fallback's from here on.
            self._traffic.guard.finished(primary, succeeded=False)
            route, node, decision_id = found
            fallback_for, kind = primary.agent_id, pb.ATTEMPT_KIND_FALLBACK

    def _no_retry(self, live: _Live, reads: bool, not_read: str, calls: int, backoff_ms: int) -> str:
        """Why a task whose attempt failed transiently is not tried again ("" when it is; the budget is spent)."""
        if not reads:
            return f"NOT_IDEMPOTENT: {not_read}; only a read is retried"
        if calls >= self._traffic.retry.max_attempts:
            return f"ATTEMPTS_SPENT: {calls} of {self._traffic.retry.max_attempts}"
        if live.cancelled.is_set():
            return "CANCELLED"
        if live.limit is not None:
            return f"{live.limit.reason}: the execution reached a limit"
        remaining_ms = live.budget.remaining_ms(self._elapsed_ms(live))
        if remaining_ms is not None and remaining_ms <= backoff_ms + MIN_RETRY_TIME_MS:
            return f"NO_TIME_LEFT: {remaining_ms} ms of the execution's time left"
        with live.lock:
            if live.retries is None:
                live.retries = RetryBudget(self._traffic.retry.execution_budget)
            budget = live.retries
        if not budget.take():
            return f"RETRY_BUDGET_SPENT: {self._traffic.retry.execution_budget} retries per execution"
        return ""

    def _one_attempt(self, live: _Live, task_id: str, route: Route, node: common_pb2.AgentTask,
                     handoffs: list[common_pb2.HandoffOutcome], span: Any, *, kind: int, again: bool,
                     backoff_ms: int, fallback_for: str, decision_id: str) -> _Call:
        """One attempt: the version is called unless it is known to be down; the attempt is recorded in the
        execution, as an event of the task's span, and in the version's circuit."""
        with live.lock:
            number = 1 + sum(1 for a in live.execution.attempts if a.task_id == task_id)
        attempt = pb.TaskAttempt(task_id=task_id, attempt=number, kind=kind,  # type: ignore[arg-type]
                                 agent_id=route.agent_id, agent_version=route.version,
                                 endpoint=route.endpoint.shown, backoff_ms=backoff_ms, fallback_for=fallback_for,
                                 decision_id=decision_id, started_at=_ts())
        reading = self._traffic.reading(route.endpoint)
        if reading.down:
            # Not called: what it would answer is known (PRD §47). Its TASK_FINISHED says so (and closes a
            # delegation an earlier process may have left open).
            reason = f"AGENT_UNAVAILABLE: {route.agent_id}@{route.version} at {route.endpoint.shown}: {reading.reason}"
            with live.lock:
                live.delegated_before.discard(task_id)
            self._narrate(audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED, outcome=audit_pb2.AUDIT_OUTCOME_FAILURE,
                          tenant_id=live.user.tenant_id, user_id=live.user.user_id, task_id=task_id,
                          agent_id=route.agent_id, reason_codes=[TaskState.NOT_RUN.value, "NOT_CALLED", reason,
                                                                 f"attempt={number}"],
                          versions=common_pb2.VersionStamp(agent_version=route.version))
            call = _Call(state=TaskState.FAILED, reason=reason, outcome=pb.ATTEMPT_OUTCOME_NOT_CALLED)
        else:
            call = self._call_agent(live, task_id, route, node, handoffs, span, again=again, attempt=number)
            if call.not_run is None and call.state is not TaskState.CANCELLED:
                self._traffic.availability.observe(route.endpoint, reached=call.outcome not in (
                    pb.ATTEMPT_OUTCOME_UNAVAILABLE, pb.ATTEMPT_OUTCOME_TIMED_OUT))
        if call.not_run is not None:
            return call
        attempt.outcome = call.outcome  # type: ignore[assignment]
        attempt.reason = (call.reason or (
            common_pb2.ResultStatus.Name(call.result.status)
            + (f": {call.result.error_reason}" if call.result.error_reason else "") if call.result else ""))[:1000]
        attempt.finished_at.CopyFrom(_ts())
        with live.lock:
            live.execution.attempts.append(attempt)
            if call.outcome in TRANSIENT:
                # Tried again, or on its fallback, after a wait: stored now (deferred while the stage
                # before's last record travels, see _finish_record). Any other attempt ends the call,
                # and the task's next store, which follows at once, stores it.
                self._save(live, deferrable=True)
        span.add_event("agentmesh.attempt", {
            "agentmesh.task_id": task_id, "agentmesh.attempt": number,
            "agentmesh.attempt_kind": pb.AttemptKind.Name(kind), "agentmesh.agent_id": route.agent_id,
            "agentmesh.agent_version": route.version, "agentmesh.endpoint": route.endpoint.shown,
            "agentmesh.outcome": pb.AttemptOutcome.Name(call.outcome), "agentmesh.backoff_ms": backoff_ms,
            "agentmesh.reason": attempt.reason[:200]})
        return call

    def _fallback(self, live: _Live, task_id: str, primary: Route, node: common_pb2.AgentTask, failure: str,
                  context: dict[str, Any] | None, may_have_acted: str = "",
                  ) -> tuple[Route, common_pb2.AgentTask, str] | None:
        """The fallback of an unavailable primary, if it may run (PRD §47): the route, the task for it and the
        policy decision id; None (recorded, with why) when the primary declares none or it may not.

        A task whose grant may change something (``may_have_acted`` says why) has no fallback once the primary
        was called: what the primary did is not known, so it is not done again elsewhere.
        The fallback must be ACTIVE, hold the task's capabilities, be available, get its own projection of the
        task's context (a task whose input came from the plan keeps it), and the policy engine must allow the
        tenant's work on it (``use_fallback_agent``, the user's authority, fail closed). The decision is on the
        record (AGENT_SELECTED, durable before the fallback runs; a refusal ACCESS_DENIED) and in the execution
        (``Execution.fallbacks``).
        """
        plan = live.plan
        assert plan is not None
        fallback_id = primary.entry.manifest.fallback
        if not fallback_id:
            return None
        user = live.user
        decision = pb.FallbackDecision(task_id=task_id, primary_agent_id=primary.agent_id,
                                       primary_version=primary.version, primary_failure=failure[:1000],
                                       fallback_agent_id=fallback_id)

        def refuse(*codes: str, policy: common_pb2.PolicyDecision | None = None) -> None:
            decision.allowed = False
            decision.reason_codes.extend(codes)
            self._catch_up(live)
            with live.lock:
                live.execution.fallbacks.append(decision)
                self._save(live)
            _fallbacks.add(1, {"agent": primary.agent_id, "fallback": fallback_id, "result": codes[0]})
            self._narrate(audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                          tenant_id=user.tenant_id, user_id=user.user_id, task_id=task_id, agent_id=fallback_id,
                          reason_codes=["FALLBACK_NOT_USED", *codes, f"primary={primary.agent_id}@{primary.version}",
                                        f"why={failure}"[:500]],
                          **({"policy_decision": policy} if policy is not None else {}))

        if node.parent_task_id:
            refuse("FALLBACK_NOT_FOR_HANDOFF", "a handoff's input was projected for its target")
            return None
        if may_have_acted:
            refuse("FALLBACK_NOT_IDEMPOTENT", f"{may_have_acted}; the primary was called and may have acted")
            return None
        try:
            entry = self._registry.ensure_active(fallback_id)
        except sup_errors.SupervisorError as err:
            refuse("FALLBACK_NOT_ACTIVE", f"{err.reason}: {err.message}")
            return None
        lacking = sorted(set(node.required_capabilities) - set(entry.manifest.capabilities))
        if lacking:
            refuse("FALLBACK_CAPABILITY_MISSING", f"{fallback_id} lacks {', '.join(lacking)}")
            return None
        route = self._traffic.route(entry, tenant_id=user.tenant_id, execution_id=live.execution.execution_id,
                                    required_capabilities=node.required_capabilities)
        decision.fallback_version = route.version
        reading = self._traffic.reading(route.endpoint)
        if reading.down:
            refuse("FALLBACK_UNAVAILABLE", reading.reason)
            return None
        task = common_pb2.AgentTask()
        task.CopyFrom(node)
        task.target_agent_id = fallback_id
        if context is not None:
            spec = plan.specs[task_id]
            projected, projection = self._projector.project(context, fallback_id, spec.purpose,
                                                            source_context_id=live.execution.execution_id)
            if not projection.allowed_fields:
                refuse("FALLBACK_NO_PROJECTION", f"no projection for {fallback_id} and purpose {spec.purpose}")
                return None
            task.input.CopyFrom(to_struct(projected))
            task.projection.CopyFrom(projection)
        request = policy_pb2.AuthorizeRequest(
            user=user.to_context(), actor_type=common_pb2.ACTOR_TYPE_USER,
            agent=common_pb2.AgentPrincipal(agent_id=fallback_id, agent_version=route.version,
                                            execution_id=live.execution.execution_id,
                                            parent_agent_id=primary.agent_id,
                                            delegation_chain=[f"user:{user.tenant_id}/{user.user_id}",
                                                              f"svc:{self._id.name}", f"agent:{fallback_id}"]),
            delegation_depth=node.depth, capability_id="",
            resource=policy_pb2.ResourceRef(type="AgentVersion", id=f"{fallback_id}@{route.version}",
                                            tenant_id=user.tenant_id),
            operation=policy_pb2.OPERATION_KIND_USE_FALLBACK_AGENT)
        try:
            policy = self._authorize(request).decision
        except errors.MeshError as err:
            refuse("POLICY_UNAVAILABLE", f"{err.code.name} {err.reason}: no decision, so no fallback")
            return None
        decision.decision_id = policy.decision_id
        if policy.effect != common_pb2.POLICY_EFFECT_ALLOW:
            refuse("FALLBACK_DENIED", *policy.reason_codes, policy=policy)
            return None
        try:
            # The decision that lets the fallback run is durable before it runs.
            self._catch_up(live)
            governing(self._audit, audit_pb2.AUDIT_EVENT_TYPE_AGENT_SELECTED, outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS,
                      tenant_id=user.tenant_id, user_id=user.user_id, task_id=task_id, agent_id=fallback_id,
                      policy_decision=policy, versions=common_pb2.VersionStamp(
                          agent_version=route.version, policy_version=policy.policy_version),
                      reason_codes=["FALLBACK", f"primary={primary.agent_id}@{primary.version}",
                                    f"fallback={fallback_id}@{route.version}", f"decision={policy.decision_id}",
                                    f"why={failure}"[:500]])
        except errors.Unavailable as err:
            refuse("AUDIT_UNAVAILABLE", err.message)
            return None
        decision.allowed = True
        decision.reason_codes.extend(policy.reason_codes)
        self._catch_up(live)
        with live.lock:
            live.execution.fallbacks.append(decision)
            plan.specs[task_id] = dataclasses.replace(plan.specs[task_id], agent=entry)
            for n in live.execution.graph.nodes:
                if n.task_id == task_id:
                    n.target_agent_id = fallback_id  # the task says it runs on the fallback
            plan.task(task_id).target_agent_id = fallback_id
            self._save(live)
        _fallbacks.add(1, {"agent": primary.agent_id, "fallback": fallback_id, "result": "USED"})
        return route, task, policy.decision_id

    def _waiting_cut_short(self, live: _Live, task_id: str, agent_id: str) -> TaskOutcome:
        """A WAITING task the execution's cancellation or a reached limit ends before it is called again:
        CANCELLED (its delegations are already closed: each RunTask's TASK_FINISHED is on the record)."""
        plan = live.plan
        assert plan is not None
        why = "CANCELLED" if live.cancelled.is_set() else \
            f"{live.limit.reason}: the limit was reached" if live.limit else ""
        self._set_status(live, task_id, common_pb2.TASK_STATUS_CANCELLED, finished=True)
        self._notify(live, pb.EXECUTION_EVENT_TASK_FINISHED, task_id=task_id, agent_id=agent_id,
                     task_status=common_pb2.TASK_STATUS_CANCELLED)
        return self._outcome(plan, task_id, TaskState.CANCELLED, error_reason=why)

    def _call_agent(self, live: _Live, task_id: str, route: Route, node: common_pb2.AgentTask,
                    handoffs: list[common_pb2.HandoffOutcome], span: Any, *, again: bool, attempt: int = 1) -> _Call:
        """One RunTask of a task on the version ``route`` names, at its endpoint: a fresh grant, the delegation
        on the record (durably) before the agent hears of it, the call within the task's deadline, and its end
        on the record. ``again``: the agent answered WAITING before; ``handoffs`` are the outcomes of what it
        asked for; ``attempt``: the task's attempt number (supervisor_svc.attempts)."""
        plan = live.plan
        assert plan is not None
        entry = route.entry
        agent_id = entry.agent_id
        user = live.user
        remaining_ms = live.budget.remaining_ms(self._elapsed_ms(live))
        timeout_s = self._task_timeout_s if remaining_ms is None else max(
            0.05, min(self._task_timeout_s, remaining_ms / 1000))
        deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=timeout_s)
        node.deadline.CopyFrom(_ts(deadline))
        node.status = common_pb2.TASK_STATUS_RUNNING
        if not node.HasField("started_at"):
            node.started_at.CopyFrom(_ts())
        # The user's language, so the agent writes its statements in it (the supervisor knows no words).
        node.locale = live.language
        grant, principal = delegate(self._signer, self._id, entry, node, Actor.of_user(user),
                                    rules=self._projector.resource_rules,
                                    ttl=dt.timedelta(seconds=timeout_s + 30),
                                    model_budgets=live.budget.grant_budgets())
        # The records sent on ahead of this execution (the stage before ends with one) are durable first:
        # this store and this delegation come after them.
        self._catch_up(live)
        gathering = live.gathering
        with live.lock:
            # Stored RUNNING, as sent, before the delegation is on the record: a restart in between knows
            # the task may have been delegated (see _rebuild), and closes that delegation if it does not
            # run it. One store for both: the delegation changes nothing that is stored. In a stage of
            # several tasks, the gathering of their delegations stores once for all of them, before the
            # append (or before this record, if it goes alone).
            for n in live.execution.graph.nodes:
                if n.task_id == task_id:
                    n.CopyFrom(node)
            if gathering is None:
                self._save(live)
        try:
            # The delegation is durable in the audit log before the agent hears of it (together with its
            # siblings' when the stage's tasks are delegated at once).
            record = functools.partial(gathering.governing, task_id) if gathering is not None \
                else functools.partial(governing, self._audit)
            record(audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED,
                   outcome=audit_pb2.AUDIT_OUTCOME_PENDING, tenant_id=user.tenant_id, user_id=user.user_id,
                   task_id=task_id, agent_id=agent_id, principal=principal,
                   input_digest=node.projection.digest,
                   reason_codes=[*(["HANDOFF_OUTCOMES", *(f"{h.action_id}={common_pb2.HandoffState.Name(h.state)}"
                                                          for h in handoffs)] if again else []),
                                 f"attempt={attempt}", f"agent_version={route.version}",
                                 f"endpoint={route.endpoint.shown}", *([route.reason] if route.canary else [])],
                   versions=common_pb2.VersionStamp(agent_version=route.version))
        except errors.Unavailable as err:
            # Not run. Whether the delegation record is in the log is unknown (audit may have written
            # it and gone before answering), so it is closed either way, through the outbox: no
            # delegation is ever left open. A TASK_FINISHED with no delegation before it says NOT_RUN.
            with live.lock:
                earlier = task_id in live.delegated_before
                live.delegated_before.add(task_id)
            self._close_delegation(live, task_id, TaskState.NOT_RUN, f"{err.code.name} {err.reason}: {err.message}",
                                   why="DELEGATED_BEFORE_RESTART" if earlier else "DELEGATION_UNACKNOWLEDGED")
            self._set_status(live, task_id, common_pb2.TASK_STATUS_FAILED, finished=True)
            span.set_attribute("agentmesh.task_state", TaskState.NOT_RUN.value)
            return _Call(not_run=self._outcome(plan, task_id, TaskState.NOT_RUN,
                                               error_reason=f"{err.code.name} {err.reason}: {err.message}"))
        finished = False
        state, result, reason = TaskState.COMPLETED, None, ""
        failure: errors.MeshError | None = None
        try:
            with live.lock:
                # Delegated again under the same task id: its TASK_FINISHED below closes both delegations.
                live.delegated_before.discard(task_id)
            self._notify(live, pb.EXECUTION_EVENT_TASK_STARTED, task_id=task_id, agent_id=agent_id,
                         task_status=common_pb2.TASK_STATUS_RUNNING)
            request = spec_pb2.RunTaskRequest(task=node, grant=grant, principal=principal,
                                              trace=live.execution.trace, handoff_outcomes=handoffs)
            started = time.monotonic()
            if live.cancelled.is_set():
                state, reason = TaskState.CANCELLED, "CANCELLED"
            else:
                try:
                    call = self._specialists.start(agent_id, request, timeout_s, endpoint=route.endpoint)
                    with live.lock:
                        live.calls[task_id] = call
                    result = call.result()
                    # The version that answered is the one dispatched to (its registration), whatever the
                    # process says of itself.
                    result.versions.agent_version = route.version
                except errors.DeadlineExceeded as err:
                    failure = err
                    state, reason = TaskState.TIMED_OUT, f"DEADLINE_EXCEEDED after {timeout_s * 1000:.0f} ms: {err}"
                except errors.MeshError as err:
                    failure = err
                    if live.cancelled.is_set():
                        state, reason = TaskState.CANCELLED, "CANCELLED"
                    else:
                        state, reason = TaskState.FAILED, f"{err.code.name} {err.reason}: {err.message}"
                finally:
                    with live.lock:
                        live.calls.pop(task_id, None)
            latency = (time.monotonic() - started) * 1000
            _task_latency.record(latency, {"agent": agent_id, "version": route.version})
            waiting = result is not None and result.status == common_pb2.RESULT_STATUS_WAITING
            _task_outcomes.add(1, {"agent": agent_id, "version": route.version,
                                   "state": "WAITING" if waiting else state.value})
            span.set_attribute("agentmesh.task_state", "WAITING" if waiting else state.value)
            if waiting:
                assert result is not None
                outcome = audit_pb2.AUDIT_OUTCOME_PENDING
                codes = ["WAITING", *(f"handoff:{a.action_id or '-'}->{a.target_agent_id}"
                                      for a in result.requested_actions if a.action == HANDOFF)]
            else:
                outcome = _TASK_OUTCOME.get(state, audit_pb2.AUDIT_OUTCOME_FAILURE)
                codes = [state.value, *([reason] if reason else []),
                         *(s.code for s in result.statements if s.code)] if result else [state.value, reason]
            codes.append(f"attempt={attempt}")
            # The record first (kept in the outbox if audit is down), then the checkpoint: a task whose
            # stored result makes a restarted supervisor skip it always has its TASK_FINISHED record;
            # a call that ended WAITING has its TASK_FINISHED before the task is stored WAITING.
            attempt_outcome = outcome_of(result, failure, cancelled=state is TaskState.CANCELLED)
            ends = not waiting and state is not TaskState.CANCELLED and attempt_outcome not in TRANSIENT
            self._finish_record(
                live, ends,
                outcome=outcome,
                tenant_id=user.tenant_id, user_id=user.user_id, task_id=task_id, agent_id=agent_id,
                reason_codes=codes,
                evidence=list(result.evidence) if result else [], confidence=result.confidence if result else 0.0,
                versions=result.versions if result else None)
            finished = True
        finally:
            if not finished:
                # Failed inside the supervisor after the delegation was on the record: closed there too, whatever
                # failed (not through _narrate, whose catching up raises once a record sent ahead failed).
                narrative(self._audit, audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED,
                          outcome=audit_pb2.AUDIT_OUTCOME_FAILURE, tenant_id=user.tenant_id, user_id=user.user_id,
                          task_id=task_id, agent_id=agent_id, reason_codes=[TaskState.FAILED.value, "SUPERVISOR_ERROR"])
        return _Call(state=state, result=result, reason=reason, error=failure, outcome=attempt_outcome)

    def _finish_record(self, live: _Live, ends: bool, **fields: Any) -> None:
        """A task's TASK_FINISHED (``ends``: the task ends here, no retry, no WAITING).

        The record of the task that ends its stage, the last of the stage's tasks to end, is sent on ahead:
        the stage's next step (the next stage's delegations, or the execution's decision and end) is made
        while it travels, and what the execution records or stores next waits until it is durable
        (:meth:`_catch_up`, :meth:`_save`), so the log keeps the order of events and the task is stored as
        ended only after its record. Its siblings' records went while it still ran, each before its task's
        stored end, as every other record does.
        """
        task_id = fields["task_id"]
        with live.lock:
            last = ends and live.stage_running == {task_id}
            if ends:
                live.stage_running.discard(task_id)
        if not last:
            # Nothing sent on ahead comes before it (its stage's is sent after the last of its tasks ends, and
            # the stage before was caught up before its delegation), so it goes at once: never held back, or
            # refused, because another task's record sent ahead could not be made.
            narrative(self._audit, audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED, **fields)
            return
        self._catch_up(live)
        if live.final_stage:
            # The plan's last task to end: its record goes with the execution's end, in one append (see
            # _finish), unless something is recorded or stored before (see _catch_up). Made now, so a record
            # that cannot be made fails the execution before its decision, as one sent ahead does.
            try:
                self._audit.build(audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED, **fields)
            except Exception as err:  # noqa: BLE001 - the execution fails on it (see _settle)
                log.exception("the TASK_FINISHED of %s cannot be made", task_id)
                self._supervisor_error_end(fields)
                self._failed_ahead(live, task_id, err)
                return
            with live.lock:
                live.held = fields
            return
        with live.lock:
            # Among the records sent ahead before it can be on its way: a catch-up on another thread (a
            # cancellation's) that comes while it travels waits for it. Its sending never takes this lock.
            sent: futures.Future[None] = self._ahead.submit(contextvars.copy_context().run, self._record_ahead, fields)
            live.ahead.append((task_id, sent))

    def _record_ahead(self, fields: dict[str, Any]) -> None:
        """A record sent ahead (see :meth:`_finish_record`), on the pool of its own. If making it raises, its
        task's end goes on the record as the supervisor's failure, as it would from the task's own thread,
        and the exception stays with the future (the execution fails on it, see :meth:`_settle`)."""
        try:
            narrative(self._audit, audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED, **fields)
        except Exception:
            self._supervisor_error_end(fields)
            raise

    def _supervisor_error_end(self, fields: dict[str, Any]) -> None:
        """The TASK_FINISHED of a task whose own end record could not be made: the supervisor's failure."""
        narrative(self._audit, audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED, outcome=audit_pb2.AUDIT_OUTCOME_FAILURE,
                  tenant_id=fields["tenant_id"], user_id=fields["user_id"], task_id=fields["task_id"],
                  agent_id=fields["agent_id"], reason_codes=[TaskState.FAILED.value, "SUPERVISOR_ERROR"])

    def _send_held(self, live: _Live) -> None:
        """Sends the record held back for the execution's end (:attr:`_Live.held`) on its own, now, as one sent
        ahead: what the execution records or stores next comes after it (see :meth:`_catch_up`)."""
        with live.lock:
            fields, sent = self._take_held(live)
        if fields is None or sent is None:
            return
        try:
            self._record_ahead(fields)
        except Exception as err:  # noqa: BLE001 - the execution fails on it (see _settle)
            sent.set_exception(err)
        else:
            sent.set_result(None)

    @staticmethod
    def _take_held(live: _Live) -> tuple[dict[str, Any] | None, futures.Future[None] | None]:
        """With the lock held: the record held back, no longer held, and the future of its sending, among the
        records sent ahead, so that a catch-up on another thread (a cancellation's) waits for it too."""
        fields, live.held = live.held, None
        if fields is None:
            return None, None
        sent: futures.Future[None] = futures.Future()
        live.ahead.append((fields["task_id"], sent))
        return fields, sent

    @staticmethod
    def _failed_ahead(live: _Live, task_id: str, error: BaseException) -> None:
        """A record made as one sent ahead that could not be made: the execution fails on it (see _settle)."""
        failed: futures.Future[None] = futures.Future()
        failed.set_exception(error)
        with live.lock:
            live.ahead.append((task_id, failed))

    def _run_handoffs(self, live: _Live, task_id: str,
                      result: common_pb2.AgentResult) -> list[common_pb2.HandoffOutcome]:
        """The handoffs a WAITING result asks for, each through the supervisor's checks (PRD §20–22), then
        run; their outcomes go back to the agent that asked.

        Admitted only if the target is allowed for the tenant, is not already in the task's lineage
        (a loop), is in the requester's ``allowed_delegations``, is ACTIVE and has the capabilities,
        and the limits allow one more task and handoff. The handoff task's input is what the
        requester proposed, projected for the target and purpose (nothing else passes). A refusal is
        audited and returned as REFUSED; a limit the handoff would exceed stops the execution (the
        tenant's action: STOP, or HUMAN_REVIEW) and nothing more is run.
        """
        plan = live.plan
        assert plan is not None
        outcomes: list[common_pb2.HandoffOutcome] = []
        for i, action in enumerate(result.requested_actions):
            if action.action != HANDOFF:
                continue
            action_id = action.action_id or f"handoff-{i + 1}"
            if live.limit is not None or live.cancelled.is_set():
                outcomes.append(common_pb2.HandoffOutcome(
                    action_id=action_id, target_agent_id=action.target_agent_id,
                    state=common_pb2.HANDOFF_STATE_REFUSED,
                    reason="CANCELLED: the execution was cancelled" if live.cancelled.is_set()
                    else f"{live.limit.reason if live.limit else ''}: the execution reached a limit"))
                continue
            params = struct_dict(action.parameters)
            caps = params.get("required_capabilities", [])
            proposed = params.get("input")
            req = HandoffRequest(from_task_id=task_id, target_agent_id=action.target_agent_id,
                                 objective=action.reason or "handoff",
                                 required_capabilities=tuple(str(c) for c in caps) if isinstance(caps, list) else (),
                                 correlation_id=live.execution.trace.correlation_id,
                                 purpose=str(params.get("purpose", "")))
            try:
                if action.target_agent_id not in live.allowed_agents:
                    raise sup_errors.HandoffRejected(
                        f"{action.target_agent_id} is not an agent tenant {live.user.tenant_id} may use",
                        reason="HANDOFF_TARGET_NOT_ALLOWED_FOR_TENANT", source_agent_id=result.agent_id,
                        target_agent_id=action.target_agent_id)
                self._catch_up(live)
                with live.lock:
                    task = admit_handoff(plan, req, lookup=self._registry.ensure_active,
                                         execution_correlation_id=live.execution.trace.correlation_id,
                                         budget=live.budget, task_id=self._next_task_id(live))
                    projected, projection = self._projector.project(
                        proposed if isinstance(proposed, dict) else {}, task.target_agent_id, req.purpose,
                        source_context_id=task_id)
                    task.input.CopyFrom(to_struct(projected))
                    task.projection.CopyFrom(projection)
                    plan.task(task.task_id).CopyFrom(task)
                    live.execution.graph.nodes.append(task)
                    self._save(live)
            except sup_errors.LimitExceeded as err:
                _handoffs.add(1, {"result": "limit"})
                self._limit_reached(live, err)
                outcomes.append(common_pb2.HandoffOutcome(
                    action_id=action_id, target_agent_id=action.target_agent_id,
                    state=common_pb2.HANDOFF_STATE_REFUSED, reason=f"{err.reason}: {err.message}"))
                continue
            except sup_errors.SupervisorError as err:
                _handoffs.add(1, {"result": "rejected"})
                with live.lock:
                    live.execution.missing.append(missing_item(
                        pb.MISSING_KIND_HANDOFF, f"{result.agent_id} -> {action.target_agent_id}",
                        f"{err.reason}: {err.message}",
                        f"handoff {result.agent_id} -> {action.target_agent_id}: {err.reason}: {err.message}"))
                self._narrate(audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                              tenant_id=live.user.tenant_id, user_id=live.user.user_id, task_id=task_id,
                              agent_id=result.agent_id, reason_codes=[err.reason, f"to={action.target_agent_id}"])
                outcomes.append(common_pb2.HandoffOutcome(
                    action_id=action_id, target_agent_id=action.target_agent_id,
                    state=common_pb2.HANDOFF_STATE_REFUSED, reason=f"{err.reason}: {err.message}"))
                continue
            _handoffs.add(1, {"result": "admitted"})
            done = self._run_task(live, task.task_id, None)
            if done.state is TaskState.COMPLETED and done.result is not None:
                outcomes.append(common_pb2.HandoffOutcome(
                    action_id=action_id, task_id=task.task_id, target_agent_id=task.target_agent_id,
                    state=common_pb2.HANDOFF_STATE_COMPLETED, result=done.result))
            else:
                outcomes.append(common_pb2.HandoffOutcome(
                    action_id=action_id, task_id=task.task_id, target_agent_id=task.target_agent_id,
                    state=common_pb2.HANDOFF_STATE_FAILED,
                    reason=f"{done.state.value}: {done.error_reason or 'no result'}"))
        return outcomes

    def _ignored_handoffs(self, live: _Live, task_id: str, result: common_pb2.AgentResult) -> None:
        """A finished result that still asks for a handoff: nobody would get its outcome, so none is run."""
        asked = [a for a in result.requested_actions if a.action == HANDOFF]
        if not asked:
            return
        with live.lock:
            for a in asked:
                why = "HANDOFF_NOT_WAITING: asked for in a finished result, so not run (a handoff is asked with a " \
                      "WAITING result)"
                live.execution.missing.append(missing_item(
                    pb.MISSING_KIND_HANDOFF, f"{result.agent_id} -> {a.target_agent_id}", why,
                    f"handoff {result.agent_id} -> {a.target_agent_id}: {why}"))
        self._narrate(audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                      tenant_id=live.user.tenant_id, user_id=live.user.user_id, task_id=task_id,
                      agent_id=result.agent_id,
                      reason_codes=["HANDOFF_NOT_WAITING", *(f"to={a.target_agent_id}" for a in asked)])

    def _next_task_id(self, live: _Live) -> str:
        """A task id not used in the execution (its graph keeps the handoffs of earlier runs too)."""
        with live.lock:
            used = {n.task_id for n in live.execution.graph.nodes}
        n = len(used) + 1
        while f"{live.execution.execution_id}-t{n}" in used:
            n += 1
        return f"{live.execution.execution_id}-t{n}"

    def _limit_reached(self, live: _Live, err: sup_errors.LimitExceeded) -> None:
        """A task or handoff hit a limit: the first one stands; the stage ends and the execution stops there."""
        with live.lock:
            if live.limit is None:
                live.limit = err

    def _model_usage(self, live: _Live, usage: common_pb2.ModelUsage) -> None:
        """An agent's model usage feeds the execution's limits; an exhausted budget stops the execution
        once the stage ends (the tenant's ``on_exceeded``: STOP or HUMAN_REVIEW)."""
        hit: sup_errors.LimitExceeded | None = None
        try:
            live.budget.record_model_usage(tokens=usage.prompt_tokens + usage.completion_tokens,
                                           model_calls=usage.calls, cost=usage.cost)
        except sup_errors.LimitExceeded as err:
            hit = err
        if hit is None and usage.exhausted_reason:
            hit = live.budget.model_budget_exhausted(usage.exhausted_reason)
        if hit is not None:
            self._limit_reached(live, hit)

    def _stop_for_limit(self, live: _Live, err: sup_errors.LimitExceeded,
                        outcomes: dict[str, TaskOutcome] | None = None) -> None:
        """The execution stops at a limit: STOPPED, or with the tenant's HUMAN_REVIEW for that limit
        AWAITING_REVIEW with a LIMIT review item (a reviewer lets it go on past the limit, or stops it)."""
        ex = live.execution
        review = LimitAction(err.action) is LimitAction.HUMAN_REVIEW
        self._catch_up(live)
        with live.lock:
            ex.status = pb.EXECUTION_STATUS_AWAITING_REVIEW if review else pb.EXECUTION_STATUS_STOPPED
            ex.decision = (common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW if review
                           else common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE)
            ex.reason = f"{err.reason}: {err.message}"
            ex.summary = (f"Stopped: {err.message}" if not review
                          else f"Sent to human review: {err.message}")
            for node in ex.graph.nodes:
                if node.status in (common_pb2.TASK_STATUS_CREATED, common_pb2.TASK_STATUS_UNSPECIFIED,
                                   common_pb2.TASK_STATUS_WAITING) or (
                        node.task_id in live.delegated_before and node.status == common_pb2.TASK_STATUS_RUNNING):
                    node.status = common_pb2.TASK_STATUS_CANCELLED
            left = sorted(live.delegated_before)
        for task_id in left:
            self._close_delegation(live, task_id, TaskState.CANCELLED, f"{err.reason}: {err.message}")
        if review:
            _escalations.add(1)
            item = dc_pb2.ReviewItem(
                execution_id=ex.execution_id, tenant_id=ex.tenant_id, kind=dc_pb2.REVIEW_KIND_LIMIT,
                status=dc_pb2.REVIEW_STATUS_OPEN, requester=ex.user_id,
                summary=f"The execution reached {err.reason} ({err.message}); approve to let it go on past this "
                        "limit, reject to stop it",
                limit=dc_pb2.LimitReached(limit_reason=err.reason, source=err.field or "", limit=err.limit,
                                          observed=err.observed),
                analysis_decision=ex.decision, created_at=_ts(), updated_at=_ts())
            # A resumed execution stopped at the same limit again asks in the review it had.
            item, to_record = self._store.open_review(item)
            if to_record:
                self._narrate(audit_pb2.AUDIT_EVENT_TYPE_REVIEW_CREATED, outcome=audit_pb2.AUDIT_OUTCOME_PENDING,
                              execution_id=ex.execution_id, tenant_id=ex.tenant_id, user_id=ex.user_id,
                              reason_codes=[item.review_id, "LIMIT", err.reason], analysis_decision=ex.decision)
                self._store.review_on_record(item.review_id)

    def _decide(self, live: _Live, outcomes: dict[str, TaskOutcome]) -> None:
        plan = live.plan
        assert plan is not None
        ex = live.execution
        all_outcomes = list(outcomes.values()) + [
            TaskOutcome(n.analysis, TaskState.NOT_RUN, error_reason=n.reason) for n in plan.not_run]
        domain = plan.intent.domain
        template = plan.template
        assert domain is not None and template is not None
        conditions = tuple(template.conditions.values())
        with telemetry.tracer().start_as_current_span("Aggregation"):
            if template.report is not None:
                first = template.tasks[0]
                assessment: Assessment = report(
                    all_outcomes[0], template.report, decisions=domain.outcomes, conditions=conditions,
                    context=first.context, subjects=plan.intent.subjects, language=live.language)
            else:
                assessment = aggregate(all_outcomes, expected=plan.expected, policy=domain.evidence,
                                       decisions=domain.outcomes, conditions=conditions,
                                       subjects=plan.intent.subjects, language=live.language)
        # Decided while the last task's record travelled, recorded and stored after it; a record held back for
        # the execution's end still waits for it, unless a review is opened here (its record comes after).
        self._catch_up(live, keep_held=not assessment.review_required or live.cancelled.is_set())
        with live.lock:
            handoff_notes = list(ex.missing)
            assessment.apply_to(ex)
            ex.missing.extend(handoff_notes)
            if live.cancelled.is_set():
                ex.status = pb.EXECUTION_STATUS_CANCELLED
                ex.reason = f"CANCELLED: {ex.reason}"
            _conflicts.add(len(ex.conflicts))
            if assessment.review_required and not live.cancelled.is_set():
                _escalations.add(1)
                for conflict in ex.conflicts:
                    if not conflict.resolution:
                        item = dc_pb2.ReviewItem(
                            execution_id=ex.execution_id, tenant_id=ex.tenant_id, kind=dc_pb2.REVIEW_KIND_CONFLICT,
                            status=dc_pb2.REVIEW_STATUS_OPEN, requester=ex.user_id, conflict=conflict,
                            summary=(f"Records of {conflict.subject} ({conflict.agent_a}) disagree; no issuer "
                                     "authority rule decides it" if conflict.agent_a == conflict.agent_b else
                                     f"{conflict.agent_a} and {conflict.agent_b} disagree on {conflict.subject}; "
                                     "no rule decides it"),
                            analysis_decision=ex.decision, created_at=_ts(), updated_at=_ts())
                        item.review_id = item.conflict.review_id = new_review_id()
                        # A resumed execution that finds the same conflict again asks in the review it had.
                        item, to_record = self._store.open_review(item)
                        conflict.review_id = item.review_id
                        if to_record:
                            self._narrate(audit_pb2.AUDIT_EVENT_TYPE_REVIEW_CREATED,
                                          outcome=audit_pb2.AUDIT_OUTCOME_PENDING, tenant_id=ex.tenant_id,
                                          user_id=ex.user_id, reason_codes=[conflict.review_id, conflict.subject],
                                          analysis_decision=ex.decision)
                            self._store.review_on_record(item.review_id)

    def _finish(self, live: _Live) -> None:
        ex = live.execution
        _decisions.add(1, {"decision": common_pb2.AnalysisDecision.Name(ex.decision),
                           "status": pb.ExecutionStatus.Name(ex.status)})
        # The record first (outbox if audit is down), then the stored end: an execution a restart
        # will not resume again always has its EXECUTION_FINISHED record.
        end = dict(outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS if ex.status == pb.EXECUTION_STATUS_SUCCEEDED
                   else audit_pb2.AUDIT_OUTCOME_PENDING if ex.status in (
                       pb.EXECUTION_STATUS_AWAITING_REVIEW, pb.EXECUTION_STATUS_AWAITING_CONFIRMATION)
                   else audit_pb2.AUDIT_OUTCOME_FAILURE,
                   execution_id=ex.execution_id, tenant_id=ex.tenant_id, user_id=ex.user_id,
                   analysis_decision=ex.decision,
                   reason_codes=[pb.ExecutionStatus.Name(ex.status), ex.reason][: 2 if ex.reason else 1])
        try:
            self._catch_up(live, keep_held=True)  # anything sent ahead before (nothing, as a rule)
        except Exception:
            self._send_held(live)  # the task did end
            raise
        with live.lock:
            held, sent = self._take_held(live)
        if held is None or sent is None:
            self._narrate(audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED, **end)
        else:
            try:
                # The last task's end and the execution's, in their order, in one append.
                narrative_all(self._audit, [(audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED, held),
                                            (audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED, end)])
            except Exception:  # noqa: BLE001 - not made together: each is made on its own
                log.exception("the end records of %s could not be made together", ex.execution_id)
                narrative(self._audit, audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED, **held)
                narrative(self._audit, audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED, **end)
            finally:
                sent.set_result(None)
        self._catch_up(live)
        with live.lock:
            ex.finished_at.CopyFrom(_ts())
            self._save(live)

    # -- watch / cancel / recovery ---------------------------------------------

    def _snapshot(self, live: _Live) -> pb.Execution:
        out = pb.Execution()
        with live.lock:
            out.CopyFrom(live.execution)
        return out

    def _notify(self, live: _Live, event: pb.ExecutionEvent, **fields: Any) -> None:
        with live.lock:
            watchers = list(live.watchers)
        if not watchers:
            return  # nobody watches: no copy of the execution is made
        message = pb.WatchExecutionResponse(event=event, execution=self._snapshot(live), **fields)
        for q in watchers:
            q.put(message)

    def _close_watchers(self, live: _Live) -> None:
        with live.lock:
            watchers, live.watchers = list(live.watchers), []
        for q in watchers:
            q.put(None)

    def watch(self, user: assertion.UserIdentity, execution_id: str,
              is_active: Callable[[], bool]) -> Iterator[pb.WatchExecutionResponse]:
        """The current state, then every change until the execution ends."""
        snapshot = self.visible(user, execution_id)
        live = self._live.get(execution_id)
        q: queue.Queue[pb.WatchExecutionResponse | None] = queue.Queue()
        watching = False
        if live is not None:
            with live.lock:
                if not live.done.is_set():
                    live.watchers.append(q)
                    watching = True
        yield pb.WatchExecutionResponse(event=pb.EXECUTION_EVENT_SNAPSHOT, execution=snapshot)
        if not watching and self._store.shared and snapshot.status == pb.EXECUTION_STATUS_RUNNING:
            # Another replica runs it: follow it in the shared store.
            yield from self._follow(user, snapshot, is_active)
            return
        if not watching:
            yield pb.WatchExecutionResponse(event=pb.EXECUTION_EVENT_EXECUTION_FINISHED,
                                            execution=self.snapshot(user, execution_id))
            return
        while is_active():
            try:
                item = q.get(timeout=0.5)
            except queue.Empty:
                continue
            if item is None:
                return
            if item.execution.action.confirmation_token and user.user_id != item.execution.user_id:
                # The token is for the requester's eyes only, also while watching.
                shown = pb.WatchExecutionResponse()
                shown.CopyFrom(item)
                shown.execution.action.confirmation_token = ""
                item = shown
            yield item

    def _follow(self, user: assertion.UserIdentity, last: pb.Execution,
                is_active: Callable[[], bool]) -> Iterator[pb.WatchExecutionResponse]:
        """Every change another replica stores, until the execution is no longer RUNNING."""
        seen = last.SerializeToString(deterministic=True)
        while is_active():
            time.sleep(FOLLOW_POLL_S)
            current = self.snapshot(user, last.execution_id)
            body = current.SerializeToString(deterministic=True)
            if current.status != pb.EXECUTION_STATUS_RUNNING:
                yield pb.WatchExecutionResponse(event=pb.EXECUTION_EVENT_EXECUTION_FINISHED, execution=current)
                return
            if body != seen:
                seen = body
                yield pb.WatchExecutionResponse(event=pb.EXECUTION_EVENT_EXECUTION_UPDATED, execution=current)

    def _cancel_elsewhere(self, user: assertion.UserIdentity, execution_id: str, reason: str) -> pb.Execution:
        """Cancels an execution another replica runs: marked in the store, its grants revoked; waits for the end."""
        if not self._store.request_cancel(execution_id, reason):
            raise errors.FailedPrecondition("the execution is not running", reason="EXECUTION_NOT_RUNNING",
                                            metadata={"field": "execution_id"})
        self._revoke(execution_id, "CANCELLED")
        self._narrate(audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED, outcome=audit_pb2.AUDIT_OUTCOME_PENDING,
                      execution_id=execution_id, tenant_id=user.tenant_id, user_id=user.user_id,
                      reason_codes=["CANCEL_REQUESTED", reason or "no reason given"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            stored = self._store.get(execution_id)
            if stored is None or stored.status != pb.EXECUTION_STATUS_RUNNING:
                break
            time.sleep(FOLLOW_POLL_S)
        return self.snapshot(user, execution_id)

    def cancel(self, user: assertion.UserIdentity, execution_id: str, reason: str) -> pb.Execution:
        """Cancels a running execution: running tasks' calls are cancelled, nothing new starts.

        Only the requester or a holder of ``execution.cancel`` (the policy engine decides); a
        cancellation is a safety stop, so its record does not wait for audit (outbox). An
        execution another replica runs is cancelled through the store (see :meth:`_cancel_elsewhere`).
        """
        live, execution = self._find(execution_id)
        self._guard.require(user, execution_id, execution, CANCEL)
        if live is None and self._store.shared and execution is not None and \
                execution.status == pb.EXECUTION_STATUS_RUNNING:
            return self._cancel_elsewhere(user, execution_id, reason)
        if live is None or live.done.is_set():
            raise errors.FailedPrecondition("the execution is not running", reason="EXECUTION_NOT_RUNNING",
                                            metadata={"field": "execution_id"})
        self._stop_calls(live)
        # Whatever a cancelled task still tries is refused at the capability service.
        self._revoke(execution_id, "CANCELLED")
        # Stopped already; on the record after what the execution did before it (a task's end sent ahead or held
        # back is made first), so the log keeps the order of events.
        with contextlib.suppress(RuntimeError):  # such a record could not be made: the execution fails on it
            self._catch_up(live)
        narrative(self._audit, audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED, outcome=audit_pb2.AUDIT_OUTCOME_PENDING,
                  execution_id=execution_id, tenant_id=user.tenant_id, user_id=user.user_id,
                  reason_codes=["CANCEL_REQUESTED", reason or "no reason given"])
        live.done.wait(timeout=30)
        return self._snapshot(live)

    @staticmethod
    def _stop_calls(live: _Live) -> None:
        live.cancelled.set()
        with live.lock:
            calls = list(live.calls.values())
        for call in calls:
            call.cancel()

    def _revoke(self, execution_id: str, reason: str, issued_before: dt.datetime | None = None) -> bool:
        """Revokes an execution's grants at the capability service; False (logged) if it could not be told."""
        if self._revoker is None:
            return False
        for attempt in range(3):
            try:
                self._revoker.revoke(execution_id, reason, issued_before)
                return True
            except errors.MeshError as err:
                log.warning("revoking the grants of %s failed (%s %s), attempt %d", execution_id, err.code.name,
                            err.reason, attempt + 1)
                time.sleep(0.2 * (attempt + 1))
        log.error("the grants of %s could not be revoked; they expire on their own", execution_id)
        return False

    def end_interrupted(self) -> list[str]:
        """At start: resumes, in the background, what a previous supervisor process left unfinished,
        then keeps this replica's leases (see :meth:`lease_tick`) about every second.

        Returns the ids of the executions it resumes or ends (see :meth:`resume_interrupted`).
        """
        touched = self.resume_interrupted(background=True)
        if self._lease_thread is None:
            self._lease_thread = threading.Thread(target=self._lease_loop, name="leases", daemon=True)
            self._lease_thread.start()
        return touched

    def _lease_loop(self) -> None:
        while not self._closed.wait(LEASE_RENEW_S):
            try:
                self.lease_tick()
            except Exception:  # noqa: BLE001 - the next tick tries again (the database may be back)
                log.warning("lease upkeep failed", exc_info=True)

    def lease_tick(self, *, background: bool = True) -> list[str]:
        """Renews this replica's leases, stops what another replica cancelled, asks again about its
        releases whose outcome was unknown (:meth:`ReleaseActions.settle_due`), and (shared store)
        takes over and resumes executions whose owner's lease expired. Returns the ids taken over."""
        owned = set(self._store.renew_leases())
        for execution_id, _reason in self._store.cancel_requests():
            live = self._live.get(execution_id)
            if live is not None and not live.cancelled.is_set():
                log.info("execution %s was cancelled on another replica; stopping it", execution_id)
                self._stop_calls(live)
        with self._live_lock:
            lives = list(self._live.values())
        for live in lives:
            ex_id = live.execution.execution_id
            if not live.done.is_set() and ex_id not in owned and self._store.shared:
                held = self._store.owner_of(ex_id)
                if held is not None and held[0] != self._store.owner:
                    log.warning("execution %s is now owned by %s; stopping here", ex_id, held[0])
                    self._stop_calls(live)
        if self._actions is not None:
            # Releases of this process whose outcome was still unknown are asked again.
            self._actions.settle_due()
        if not self._store.shared:
            return []
        return self.resume_interrupted(background=background, expired_only=True)

    def resume_interrupted(self, *, background: bool = True, expired_only: bool = False) -> list[str]:
        """Executions a previous process left RUNNING go on from their checkpoint, under the same id.

        Each is first taken over in the store (this replica becomes its owner): on a store of
        one supervisor (SQLite) every RUNNING execution; on a shared store only those whose
        owner's lease expired (``expired_only``, or always when shared), atomically, so two
        replicas never resume the same execution.

        First the dead process's grants are revoked (those issued before now), so its orphaned
        tasks are refused at the capability service; then each analysis continues from its
        last completed task (only unfinished tasks run, with fresh grants) and each release in
        flight is settled by :meth:`ReleaseActions.resume`. An execution that cannot be rebuilt
        (stored before resumption existed) ends FAILED ``SUPERVISOR_RESTARTED``, naming what did
        not finish.
        """
        restarted = dt.datetime.now(dt.UTC)
        lives: list[_Live] = []
        releases: list[pb.Execution] = []
        touched: list[str] = []
        shared = self._store.shared or expired_only
        if shared:
            candidates = [self._store.take_over(i) for i in self._store.expired() if i not in self._live]
        else:
            candidates = [self._store.take_over(e.execution_id, force=True) for e in self._store.running()]
        for ex in candidates:
            if ex is None:
                continue  # another replica took it first
            touched.append(ex.execution_id)
            if ex.HasField("action") and ex.action.state == pb.ACTION_STATE_EXECUTING:
                releases.append(ex)
                continue
            live = self._rebuild(ex, restarted)
            if live is None:
                self._end_interrupted(ex)
                continue
            self._register(live)
            lives.append(live)
        for execution_id in self._store.used_actions():
            confirmed = self._store.get(execution_id)
            # Confirmed (the token spent) but stopped before the release was marked EXECUTING.
            if confirmed is not None and execution_id not in touched and confirmed.HasField("action") and \
                    confirmed.action.state == pb.ACTION_STATE_AWAITING_CONFIRMATION:
                if shared:
                    # A live replica marks the release EXECUTING within moments of spending the token.
                    if not self._store.spent_before(execution_id, self._store.lease_s):
                        continue
                    taken = self._store.take_over(execution_id, status=confirmed.status)
                    if taken is None:
                        continue
                touched.append(execution_id)
                releases.append(confirmed)
        if not touched:
            return touched

        def resume() -> None:
            for execution_id in touched:
                self._revoke(execution_id, "SUPERVISOR_RESTARTED", restarted)
            threads = [threading.Thread(target=contextvars.copy_context().run,
                                        args=(self.run, live.execution.execution_id),
                                        name=f"resume-{live.execution.execution_id[-6:]}", daemon=True)
                       for live in lives]
            if self._actions is not None:
                actions = self._actions
                threads += [threading.Thread(target=contextvars.copy_context().run, args=(actions.resume, ex),
                                             name=f"release-{ex.execution_id[-6:]}", daemon=True) for ex in releases]
            for t in threads:
                t.start()
            if not background:
                for t in threads:
                    t.join()

        if background:
            threading.Thread(target=contextvars.copy_context().run, args=(resume,), name="resume",
                             daemon=True).start()
        else:
            resume()
        return touched

    def _rebuild(self, ex: pb.Execution, restarted: dt.datetime, *, why: tuple[str, ...] = ("SUPERVISOR_RESTARTED",),
                 elapsed_s: float | None = None) -> _Live | None:
        """The in-memory state of a stored RUNNING execution, to go on from its checkpoint; None if it cannot be.

        ``why``: the reason codes of its EXECUTION_STARTED ``RESUMED`` record. ``elapsed_s``: the wall
        time it had used (default: since it was accepted, downtime included).
        """
        info = self._store.resume_info(ex.execution_id)
        if info is None:
            return None
        try:
            intent = self.parse(ex.request_text)
            found = ex.intent_classification
            if found.source == "MODEL" and not intent.actionable:
                # Understood by a model when it was accepted: the accepted reading, not a new call.
                intent = self._resolve(ex.request_text, Classification(found.intent, dict(found.subjects), "MODEL"))
            stored_kind = ex.intent_kind or pb.ExecutionIntent.Name(ex.intent).removeprefix("EXECUTION_INTENT_")
            if stored_kind != intent.kind or ex.intent_rule != intent.rule:
                raise sup_errors.PlanError(f"the request now reads as {intent.kind}:{intent.rule}, not "
                                           f"{stored_kind}:{ex.intent_rule}",
                                           reason="PLAN_MISMATCH", field="intent")
            requester = info.requester
            user = assertion.UserIdentity(requester.tenant_id, requester.user_id, tuple(requester.roles),
                                          requester.session_id, requester.conversation_id, requester.assertion_digest)
            tenant = self._tenants.get(user.tenant_id)
            # Model usage already spent counts again; the planned tasks are admitted below.
            used = Usage(tokens=sum(r.model_usage.prompt_tokens + r.model_usage.completion_tokens for r in ex.results),
                         model_calls=sum(r.model_usage.calls for r in ex.results),
                         model_cost=sum(r.model_usage.cost for r in ex.results))
            budget = ExecutionBudget(tenant.limit_policy, info.budget, usage=used)
            budget.waive(ex.waived_limits)
            graph = common_pb2.AgentTaskGraph()
            graph.CopyFrom(ex.graph)
            # Handoff tasks run inside their parent's task; one unfinished at the crash is not re-run.
            handoffs = [n for n in ex.graph.nodes if n.parent_task_id]
            del graph.nodes[:]
            graph.nodes.extend(n for n in ex.graph.nodes if not n.parent_task_id)
            for nodes in (graph.nodes, ex.graph.nodes):
                for n in nodes:
                    if n.status == common_pb2.TASK_STATUS_WAITING and not n.parent_task_id:
                        # Its last call ended (WAITING, on the record); it runs again from the start.
                        n.status = common_pb2.TASK_STATUS_CREATED
                        n.ClearField("started_at")
            plan = restore_plan(intent, ex.execution_id, graph, [NotRun(a, reason) for a, reason in info.not_run],
                                self._registry.get)
            specs = plan.specs
            with contextlib.suppress(sup_errors.LimitExceeded):  # admitted when it was planned
                budget.admit_plan([(n.depth, specs[n.task_id].agent.manifest.cost) for n in graph.nodes])
        except Exception:  # noqa: BLE001 - what cannot be rebuilt ends truthfully instead
            log.exception("execution %s cannot be resumed", ex.execution_id)
            return None
        self._close_stored_delegations(ex, handoffs, TaskState.CANCELLED,
                                       "SUPERVISOR_RESTARTED: a handoff is not re-run")
        for node in handoffs:
            if node.status not in (common_pb2.TASK_STATUS_COMPLETED, common_pb2.TASK_STATUS_FAILED,
                                   common_pb2.TASK_STATUS_SKIPPED, common_pb2.TASK_STATUS_CANCELLED):
                node.status = common_pb2.TASK_STATUS_CANCELLED
                ex.missing.append(missing_item(
                    pb.MISSING_KIND_NOT_FINISHED, f"{node.source_agent_id} -> {node.target_agent_id}",
                    "did not finish before the supervisor stopped",
                    f"handoff {node.source_agent_id} -> {node.target_agent_id} ({node.task_id}): "
                    "did not finish before the supervisor stopped"))
        done = [n.task_id for n in graph.nodes if n.status == common_pb2.TASK_STATUS_COMPLETED]
        live = _Live(ex, plan, user, budget, info.language, release_requested=info.release_requested,
                     confirmation_ttl_s=info.ttl_s, allowed_agents=tenant.allowed_agents)
        # Delegated (RUNNING), or about to be (started, not yet marked RUNNING), when the process stopped.
        live.delegated_before = {n.task_id for n in graph.nodes if delegated_unfinished(n)}
        # The execution's time limit counts from when it was accepted, downtime included.
        if elapsed_s is None:
            elapsed_s = (restarted - ex.started_at.ToDatetime(tzinfo=dt.UTC)).total_seconds()
        live.started = time.monotonic() - max(0.0, elapsed_s)
        self._store.save(ex)
        self._narrate(audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED, outcome=audit_pb2.AUDIT_OUTCOME_PENDING,
                      execution_id=ex.execution_id, correlation_id=ex.trace.correlation_id, tenant_id=ex.tenant_id,
                      user_id=ex.user_id, reason_codes=["RESUMED", *why,
                                                        f"completed={','.join(done) or 'none'}"])
        log.info("resuming %s from its checkpoint (completed: %s)", ex.execution_id, ", ".join(done) or "none")
        return live

    def continue_past_limit(self, review: dc_pb2.ReviewItem, reviewer: str) -> pb.Execution:
        """A reviewer approved the LIMIT ``review`` of an execution that stopped AWAITING_REVIEW at a limit: the
        limit is waived for it (``Execution.waived_limits``) and it goes on from its checkpoint, in the
        background — completed tasks are kept, the others run. Its wall time keeps what it had used before
        it stopped (not the time it waited for the reviewer). The review, as the Decision Center decided it,
        is stored in the same transaction as the execution RUNNING again: a crash between two writes would
        leave the review approved and the execution waiting at its limit, with nothing left to decide.
        Returns the execution, RUNNING again.

        Raises:
            agentmesh.errors.FailedPrecondition: ``EXECUTION_NOT_AWAITING_REVIEW``.
        """
        execution_id, limit_reason = review.execution_id, review.limit.limit_reason
        ex = self._store.get(execution_id)
        if ex is None or ex.status != pb.EXECUTION_STATUS_AWAITING_REVIEW or execution_id in self._live:
            raise errors.FailedPrecondition("the execution no longer waits at a limit",
                                            reason="EXECUTION_NOT_AWAITING_REVIEW", metadata={"field": "review_id"})
        elapsed_s = 0.0
        if ex.HasField("finished_at"):
            elapsed_s = (ex.finished_at.ToDatetime(tzinfo=dt.UTC)
                         - ex.started_at.ToDatetime(tzinfo=dt.UTC)).total_seconds()
        if limit_reason not in ex.waived_limits:
            ex.waived_limits.append(limit_reason)
        ex.status = pb.EXECUTION_STATUS_RUNNING
        ex.decision = common_pb2.ANALYSIS_DECISION_UNSPECIFIED
        ex.reason = ""
        ex.summary = ""
        del ex.missing[:]
        ex.ClearField("finished_at")
        for n in ex.graph.nodes:
            if not n.parent_task_id and n.status == common_pb2.TASK_STATUS_CANCELLED:
                # Stopped at the limit before it ran (or while it waited for a handoff): it runs now.
                n.status = common_pb2.TASK_STATUS_CREATED
                n.ClearField("started_at")
                n.ClearField("finished_at")
        self._store.save(ex, reviews=[review])  # RUNNING again, owned (leased) by this replica
        with telemetry.mesh_ids(execution_id=execution_id, correlation_id=ex.trace.correlation_id):
            live = self._rebuild(ex, dt.datetime.now(dt.UTC), why=("LIMIT_WAIVED", limit_reason, f"by={reviewer}"),
                                 elapsed_s=elapsed_s)
            if live is None:
                self._end_interrupted(ex)
                raise errors.FailedPrecondition("the execution cannot go on from its checkpoint; it ended",
                                                reason="EXECUTION_NOT_RESUMABLE", metadata={"field": "review_id"})
        self._register(live)
        self.run_async(execution_id)
        return self._snapshot(live)

    def _close_stored_delegations(self, ex: pb.Execution, nodes: Iterable[common_pb2.AgentTask], state: TaskState,
                                  reason: str) -> None:
        """Delegations of a dead or superseded process that will not run again here are closed on the record."""
        close_stored_delegations(self._narrate, ex, nodes, state.value, reason)

    def _end_interrupted(self, ex: pb.Execution) -> None:
        """Ends an execution that cannot be resumed: FAILED, naming what did not finish."""
        self._close_stored_delegations(ex, ex.graph.nodes, TaskState.NOT_RUN,
                                       "SUPERVISOR_RESTARTED: the execution could not be resumed")
        stopped = [n for n in ex.graph.nodes
                   if n.status in (common_pb2.TASK_STATUS_RUNNING, common_pb2.TASK_STATUS_CREATED)]
        unfinished = [f"{n.target_agent_id} ({n.task_id})" for n in stopped]
        for n in ex.graph.nodes:
            if n.status in (common_pb2.TASK_STATUS_RUNNING, common_pb2.TASK_STATUS_CREATED):
                n.status = common_pb2.TASK_STATUS_FAILED
        ex.status = pb.EXECUTION_STATUS_FAILED
        ex.decision = common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE
        ex.reason = "SUPERVISOR_RESTARTED: the supervisor stopped while the execution was running"
        ex.missing.extend(missing_item(pb.MISSING_KIND_NOT_FINISHED, n.target_agent_id,
                                       "did not finish before the supervisor stopped",
                                       f"{n.target_agent_id} ({n.task_id}): did not finish before the supervisor "
                                       "stopped") for n in stopped)
        ex.summary = ("The supervisor restarted during this analysis; it ended without a decision. "
                      "Missing: " + (", ".join(unfinished) or "nothing was running"))
        ex.finished_at.CopyFrom(_ts())
        self._store.save(ex)
        self._narrate(audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED, outcome=audit_pb2.AUDIT_OUTCOME_FAILURE,
                      execution_id=ex.execution_id, tenant_id=ex.tenant_id, user_id=ex.user_id,
                      reason_codes=["SUPERVISOR_RESTARTED"])

    def close(self) -> None:
        """Stops the lease loop and the task pool."""
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._ahead.shutdown(wait=False)
