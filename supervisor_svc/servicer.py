"""SupervisorService and AgentRegistryService over gRPC: thin adapters over the orchestrator and registry."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import grpc

from agentmesh import assertion, errors, health, spiffe, transport, validation
from agentmesh.audit_client import AuditRecorder
from agentmesh.config import ConfigError
from agentmesh.v1 import agent_registry_service_pb2 as reg_pb2
from agentmesh.v1 import agent_registry_service_pb2_grpc as reg_grpc
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import capability_service_pb2_grpc as cap_grpc
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import decision_center_service_pb2_grpc as dc_grpc
from agentmesh.v1 import model_service_pb2 as model_pb2
from agentmesh.v1 import model_service_pb2_grpc as model_grpc
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from agentmesh.v1 import specialist_service_pb2_grpc as spec_grpc
from agentmesh.v1 import supervisor_service_pb2 as pb
from agentmesh.v1 import supervisor_service_pb2_grpc as pb_grpc
from agentmesh.v1 import tenant_service_pb2 as tenant_pb2
from agentmesh.v1 import tenant_service_pb2_grpc as tenant_grpc
from agentmesh.vocabulary import LifecycleStatus
from capability_svc.errors import DependencyError
from capability_svc.semver import Version, parse_dependency
from supervisor_svc import errors as sup_errors
from supervisor_svc import onboarding_grpc
from supervisor_svc.actions import ReleaseActions
from supervisor_svc.decision_center import DecisionCenter
from supervisor_svc.evaluation import DatasetError, DatasetNotFound
from supervisor_svc.events import EventHandler
from supervisor_svc.limits import LimitPolicy
from supervisor_svc.onboarding import (
    EvaluationRunner,
    OnboardingDenied,
    ReleaseBlocked,
    VersionExists,
    VersionNotFound,
)
from supervisor_svc.onboarding import Onboarding as _Onboarding
from supervisor_svc.orchestrator import Orchestrator
from supervisor_svc.registry import AgentRegistry, status_from_proto
from supervisor_svc.routing import Endpoint
from supervisor_svc.selection import AgentSelector, Requirement
from supervisor_svc.tenants import TenantConfig, tenant_config

log = logging.getLogger(__name__)

ERRORS: errors.ErrorTable = [
    (sup_errors.RequestInvalid, errors.InvalidArgument),
    (sup_errors.TenantMismatch, errors.PermissionDenied),
    (sup_errors.TenantNotConfigured, errors.FailedPrecondition),
    (sup_errors.AgentNotFound, errors.NotFound),
    (sup_errors.AgentNotActive, errors.FailedPrecondition),
    (sup_errors.StatusChangeRefused, errors.FailedPrecondition),
    (sup_errors.NoAgentAvailable, errors.FailedPrecondition),
    (sup_errors.AgentDependencyError, errors.FailedPrecondition),
    (sup_errors.HandoffRejected, errors.PermissionDenied),
    (sup_errors.LimitExceeded, errors.ResourceExhausted),
    (sup_errors.PlanError, errors.InvalidArgument),
    (VersionNotFound, errors.NotFound),
    (DatasetNotFound, errors.NotFound),
    (DatasetError, errors.FailedPrecondition),
    (VersionExists, errors.AlreadyExists),
    (OnboardingDenied, errors.PermissionDenied),
]
"""Supervisor-domain errors and their gRPC statuses."""


def mesh_error(err: sup_errors.SupervisorError) -> errors.MeshError:
    """Maps a supervisor-domain error to its mesh error (and so its gRPC status)."""
    return errors.translate(err, ERRORS)


class _GrpcTaskCall:
    def __init__(self, future: grpc.Future) -> None:
        self._future = future

    def result(self) -> common_pb2.AgentResult:
        try:
            response: spec_pb2.RunTaskResponse = self._future.result()
        except grpc.RpcError as err:
            raise errors.from_rpc_error(err) from err
        except grpc.FutureCancelledError as err:
            raise errors.Aborted("the task was cancelled", reason="CANCELLED") from err
        # An agent's answer is input to the supervisor, held to the rules every request is (an agent may be
        # written in any language, or be hostile): nothing of an answer outside them is read.
        bad = validation.problem(response)
        if bad is not None:
            raise errors.FailedPrecondition(f"the agent's answer is outside the mesh's input rules: {bad.message}",
                                            reason="AGENT_ANSWER_INVALID", field=bad.field,
                                            metadata={"rule": bad.reason})
        return response.result

    def cancel(self) -> None:
        self._future.cancel()


EXECUTION_ID_METADATA = "agentmesh-execution-id"
"""Initial-metadata key of Analyze: the execution id, sent before any task runs."""


class GrpcSpecialists:
    """Reaches each agent version over its own mTLS channel, and stops an execution's work at the capability
    service (and at the model service, when the mesh has one).

    A version shipped as a manifest file is reached at the address the mesh's configuration gives its agent
    (``channel_for(agent_id)``); a registered version at its registered endpoint, over a channel that
    verifies the server presents the registered SPIFFE id (``endpoint_channel(address, spiffe_id)``, kept
    per endpoint)."""

    def __init__(self, channel_for: Callable[[str], grpc.Channel], timeout_s: float = 5.0, *,
                 model_service: bool = False,
                 endpoint_channel: Callable[[str, spiffe.SpiffeId], grpc.Channel] | None = None) -> None:
        self._channel_for = channel_for
        self._timeout_s = timeout_s
        self._model_service = model_service
        self._endpoint_channel = endpoint_channel
        self._lock = threading.Lock()
        self._endpoints: dict[tuple[str, str], grpc.Channel] = {}

    def _channel(self, agent_id: str, endpoint: Endpoint | None) -> grpc.Channel:
        """The channel to the agent version; raises Unavailable when the mesh knows no way to it."""
        if endpoint is None or not endpoint.address:
            try:
                return self._channel_for(agent_id)
            except ConfigError as err:
                raise errors.Unavailable(f"no address is known for agent {agent_id!r}: {err}",
                                         reason="AGENT_ADDRESS_UNKNOWN") from err
        if self._endpoint_channel is None:
            raise errors.Unavailable(f"registered endpoints cannot be reached from here ({endpoint.address})",
                                     reason="AGENT_ADDRESS_UNKNOWN")
        key = (endpoint.address, endpoint.spiffe_id)
        with self._lock:
            channel = self._endpoints.get(key)
            if channel is None:
                try:
                    identity = spiffe.parse(endpoint.spiffe_id)
                except spiffe.InvalidSpiffeId as err:
                    raise errors.Unavailable(f"the registered SPIFFE id of {agent_id!r} is not valid: {err}",
                                             reason="AGENT_ADDRESS_UNKNOWN") from err
                channel = self._endpoints[key] = self._endpoint_channel(endpoint.address, identity)
        return channel

    def start(self, agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float,
              endpoint: Endpoint | None = None) -> _GrpcTaskCall:
        """RunTask of the agent version at ``endpoint`` (the configured address when None)."""
        stub = spec_grpc.SpecialistServiceStub(self._channel(agent_id, endpoint))
        return _GrpcTaskCall(stub.RunTask.future(request, timeout=timeout_s))

    def health(self, endpoint: Endpoint, timeout_s: float) -> str:
        """The gRPC health of an agent version over the channel its tasks take: ``SERVING``, ``NOT_SERVING``,
        ``UNREACHABLE (<code>)``, or ``NO_ADDRESS`` when the mesh knows no way to it."""
        try:
            channel = self._channel(endpoint.agent_id, endpoint)
        except errors.Unavailable:
            return "NO_ADDRESS"
        status, _ = health.probe(channel, timeout_s)
        return status

    def close(self) -> None:
        """Closes the channels to registered endpoints."""
        with self._lock:
            channels, self._endpoints = list(self._endpoints.values()), {}
        for channel in channels:
            channel.close()

    def revoke(self, execution_id: str, reason: str, issued_before: dt.datetime | None = None) -> None:
        """CapabilityService.RevokeExecution; raises a MeshError if the capability service does not take it."""
        request = cap_pb2.RevokeExecutionRequest(execution_id=execution_id, reason=reason)
        if issued_before is not None:
            request.issued_before.FromDatetime(issued_before)
        try:
            cap_grpc.CapabilityServiceStub(self._channel_for("capability")).RevokeExecution(
                request, timeout=self._timeout_s)
            if self._model_service:
                model_request = model_pb2.ModelServiceRevokeExecutionRequest(execution_id=execution_id, reason=reason)
                if issued_before is not None:
                    model_request.issued_before.FromDatetime(issued_before)
                model_grpc.ModelServiceStub(self._channel_for("model")).RevokeExecution(
                    model_request, timeout=self._timeout_s)
        except grpc.RpcError as err:
            raise errors.from_rpc_error(err) from err


class GrpcModels:
    """ModelService.Complete over the supervisor's mTLS channel; failures are MeshErrors."""

    def __init__(self, channel: grpc.Channel, timeout_s: float) -> None:
        self._stub = model_grpc.ModelServiceStub(channel)
        self._timeout_s = timeout_s

    def complete(self, request: model_pb2.CompleteRequest) -> model_pb2.CompleteResponse:
        try:
            response: model_pb2.CompleteResponse = self._stub.Complete(request, timeout=self._timeout_s)
        except grpc.RpcError as err:
            raise errors.from_rpc_error(err) from err
        return response


class PolicyTenants:
    """The tenant directory of the policy engine (TenantService.GetTenant) as a :class:`TenantSource`.

    Every :meth:`get` asks (a tenant applied a moment ago is in force for the next execution); a read
    at most ``max_age_s`` old may be used instead, for the selections of the execution just accepted.
    An UNAVAILABLE answer is asked again twice (the policy engine restarting), then raised.
    """

    def __init__(self, channel: grpc.Channel, defaults: LimitPolicy, timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._stub = tenant_grpc.TenantServiceStub(channel)
        self._defaults = defaults
        self._timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._recent: dict[str, tuple[float, TenantConfig]] = {}

    def get(self, tenant_id: str, *, max_age_s: float = 0.0) -> TenantConfig:
        if max_age_s > 0:
            with self._lock:
                seen = self._recent.get(tenant_id)
            if seen is not None and self._clock() - seen[0] <= max_age_s:
                return seen[1]
        for attempt in range(3):
            try:
                response = self._stub.GetTenant(tenant_pb2.GetTenantRequest(tenant_id=tenant_id),
                                                timeout=self._timeout_s)
                break
            except grpc.RpcError as err:
                failure = errors.from_rpc_error(err)
                if isinstance(failure, errors.NotFound) and failure.reason == "TENANT_NOT_CONFIGURED":
                    with self._lock:
                        self._recent.pop(tenant_id, None)
                    raise sup_errors.TenantNotConfigured(tenant_id) from err
                if not isinstance(failure, errors.Unavailable) or attempt == 2:
                    raise errors.Unavailable(f"the tenant directory could not be read: {failure.message}",
                                             reason="TENANT_DIRECTORY_UNAVAILABLE",
                                             metadata={"field": "tenant_id"}) from err
                time.sleep(0.3 * (attempt + 1))
        config = tenant_config(response.tenant, self._defaults)
        with self._lock:
            self._recent[tenant_id] = (self._clock(), config)
        return config


def dependency_checker(capabilities: Sequence[cap_pb2.CapabilityDefinition]) -> Callable[[str], None]:
    """A checker of declared capability dependencies against the capability service's registry (PRD §59)."""
    versions: dict[str, list[tuple[Version, int]]] = {}
    for c in capabilities:
        versions.setdefault(c.capability_id, []).append((Version.parse(c.version), c.status))

    def check(spec: str) -> None:
        try:
            capability_id, wanted = parse_dependency(spec)
        except ValueError as err:
            raise DependencyError(str(err), reason="DEPENDENCY_SYNTAX_INVALID", dependency=spec) from err
        known = versions.get(capability_id)
        if not known:
            raise DependencyError(f"no capability {capability_id!r} is registered", reason="DEPENDENCY_UNKNOWN",
                                  dependency=spec)
        usable = [v for v, status in known if status != common_pb2.LIFECYCLE_STATUS_RETIRED and wanted.contains(v)]
        if not usable:
            have = ", ".join(str(v) for v, _ in known)
            raise DependencyError(f"incompatible with the registered versions ({have})",
                                  reason="DEPENDENCY_VERSION_INCOMPATIBLE", dependency=spec)

    return check


class SupervisorServicer(pb_grpc.SupervisorServiceServicer):
    """Analyze, GetExecution, WatchExecution, CancelExecution, ConfirmAction, HandleEvent."""

    def __init__(self, orchestrator: Orchestrator, actions: ReleaseActions, events: EventHandler) -> None:
        self._orch = orchestrator
        self._actions = actions
        self._events = events

    def Analyze(self, request: pb.AnalyzeRequest, context: grpc.ServicerContext) -> pb.AnalyzeResponse:
        try:
            accepted = self._orch.accept(request, transport.caller_id(context))
        except sup_errors.SupervisorError as err:
            raise mesh_error(err) from err
        execution_id, user = accepted.execution_id, accepted.user
        # The execution is durable now; its id goes out before any task runs.
        context.send_initial_metadata(((EXECUTION_ID_METADATA, execution_id),))
        # The requester's own execution, just accepted (or retried): no need to ask whether they may read it.
        if accepted.duplicate:
            return pb.AnalyzeResponse(execution=self._orch.snapshot(user, execution_id) if request.detach
                                      else self._orch.outcome_of(user, execution_id))
        if request.detach:
            self._orch.run_async(execution_id)
            return pb.AnalyzeResponse(execution=self._orch.snapshot(user, execution_id))
        return pb.AnalyzeResponse(execution=self._orch.run(execution_id))

    def GetExecution(self, request: pb.GetExecutionRequest, context: grpc.ServicerContext) -> pb.GetExecutionResponse:
        user = self._orch.authenticate(request.user_assertion, transport.caller_id(context))
        return pb.GetExecutionResponse(execution=self._orch.visible(user, request.execution_id))

    def ListExecutions(
        self, request: pb.ListExecutionsRequest, context: grpc.ServicerContext
    ) -> pb.ListExecutionsResponse:
        user = self._orch.authenticate(request.user_assertion, transport.caller_id(context))
        return self._orch.list_visible(user, request)

    def WatchExecution(
        self, request: pb.WatchExecutionRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.WatchExecutionResponse]:
        user = self._orch.authenticate(request.user_assertion, transport.caller_id(context))
        yield from self._orch.watch(user, request.execution_id, context.is_active)

    def CancelExecution(
        self, request: pb.CancelExecutionRequest, context: grpc.ServicerContext
    ) -> pb.CancelExecutionResponse:
        user = self._orch.authenticate(request.user_assertion, transport.caller_id(context))
        return pb.CancelExecutionResponse(execution=self._orch.cancel(user, request.execution_id, request.reason))

    def ConfirmAction(
        self, request: pb.ConfirmActionRequest, context: grpc.ServicerContext
    ) -> pb.ConfirmActionResponse:
        user = self._orch.authenticate(request.user_assertion, transport.caller_id(context))
        self._actions.validate(request)
        # Only someone who may read the execution gets as far as its confirmation checks.
        self._orch.visible(user, request.execution_id)
        self._actions.confirm(user, request)
        return pb.ConfirmActionResponse(execution=self._orch.snapshot(user, request.execution_id))

    def HandleEvent(self, request: pb.HandleEventRequest, context: grpc.ServicerContext) -> pb.HandleEventResponse:
        execution, duplicate = self._events.handle(request, transport.caller_id(context))
        return pb.HandleEventResponse(execution=execution, duplicate=duplicate)


class DecisionCenterServicer(dc_grpc.DecisionCenterServiceServicer):
    """ListReviews, GetReview, SubmitReviewDecision: thin over :class:`DecisionCenter`."""

    def __init__(self, orchestrator: Orchestrator, center: DecisionCenter) -> None:
        self._orch = orchestrator
        self._center = center

    def ListReviews(
        self, request: dc_pb2.ListReviewsRequest, context: grpc.ServicerContext
    ) -> dc_pb2.ListReviewsResponse:
        user = self._orch.authenticate(request.user_assertion, transport.caller_id(context))
        return dc_pb2.ListReviewsResponse(reviews=self._center.list(user, request))

    def GetReview(self, request: dc_pb2.GetReviewRequest, context: grpc.ServicerContext) -> dc_pb2.GetReviewResponse:
        user = self._orch.authenticate(request.user_assertion, transport.caller_id(context))
        review, execution = self._center.get(user, request.review_id)
        return dc_pb2.GetReviewResponse(review=review, execution=execution)

    def SubmitReviewDecision(
        self, request: dc_pb2.SubmitReviewDecisionRequest, context: grpc.ServicerContext
    ) -> dc_pb2.SubmitReviewDecisionResponse:
        user = self._orch.authenticate(request.user_assertion, transport.caller_id(context))
        review, execution = self._center.submit(user, request)
        return dc_pb2.SubmitReviewDecisionResponse(review=review, execution=execution)


class AgentRegistryServicer(reg_grpc.AgentRegistryServiceServicer):
    """ListAgents, GetAgent, DiscoverAgents, SetAgentStatus."""

    def __init__(self, registry: AgentRegistry, selector: AgentSelector, audit: AuditRecorder,
                 onboarding: _Onboarding | None = None,
                 authenticate: Callable[[str, str], assertion.UserIdentity] | None = None,
                 evaluation_runner: Callable[[assertion.UserIdentity], EvaluationRunner] | None = None) -> None:
        self._evaluation_runner = evaluation_runner
        self._registry = registry
        self._selector = selector
        self._audit = audit
        self._onboarding = onboarding
        self._authenticate = authenticate

    def _onboard(self, context: grpc.ServicerContext) -> tuple[_Onboarding, Callable[[str], assertion.UserIdentity]]:
        if self._onboarding is None or self._authenticate is None:
            raise errors.Unimplemented("onboarding is not configured", reason="ONBOARDING_UNAVAILABLE")
        caller = transport.caller_id(context)
        auth = self._authenticate
        return self._onboarding, lambda token: auth(token, caller)

    def RegisterAgentVersion(
        self, request: reg_pb2.RegisterAgentVersionRequest, context: grpc.ServicerContext
    ) -> reg_pb2.RegisterAgentVersionResponse:
        onboarding, authenticate = self._onboard(context)
        user = authenticate(request.user_assertion)
        try:
            record = onboarding.register(user, onboarding_grpc.manifest_dict(request.manifest), request.endpoint,
                                         request.spiffe_id)
        except sup_errors.SupervisorError as err:
            raise self._onboarding_error(err) from err
        return reg_pb2.RegisterAgentVersionResponse(version=onboarding_grpc.to_proto(record, onboarding))

    def TransitionAgentVersion(
        self, request: reg_pb2.TransitionAgentVersionRequest, context: grpc.ServicerContext
    ) -> reg_pb2.TransitionAgentVersionResponse:
        onboarding, authenticate = self._onboard(context)
        user = authenticate(request.user_assertion)
        if request.to_status == common_pb2.LIFECYCLE_STATUS_UNSPECIFIED:
            raise errors.InvalidArgument("to_status is required", reason="MISSING_FIELD",
                                         metadata={"field": "to_status"})
        try:
            to = LifecycleStatus.from_proto(request.to_status)
            record, also = onboarding.transition(user, request.agent_id, request.version, to, request.reason)
        except ValueError:
            raise errors.InvalidArgument("to_status must be a lifecycle status", reason="STATUS_INVALID",
                                         metadata={"field": "to_status"}) from None
        except sup_errors.SupervisorError as err:
            raise self._onboarding_error(err) from err
        return reg_pb2.TransitionAgentVersionResponse(version=onboarding_grpc.to_proto(record, onboarding),
                                                      also_changed=[onboarding_grpc.to_proto(r, onboarding)
                                                                    for r in also])

    def EvaluateAgentVersion(
        self, request: reg_pb2.EvaluateAgentVersionRequest, context: grpc.ServicerContext
    ) -> reg_pb2.EvaluateAgentVersionResponse:
        onboarding, authenticate = self._onboard(context)
        if self._evaluation_runner is None:
            raise errors.Unimplemented("evaluation is not configured", reason="ONBOARDING_UNAVAILABLE")
        user = authenticate(request.user_assertion)
        try:
            blob, record = onboarding.evaluate(user, request.agent_id, request.version,
                                               self._evaluation_runner(user))
        except sup_errors.SupervisorError as err:
            raise self._onboarding_error(err) from err
        return reg_pb2.EvaluateAgentVersionResponse(evaluation=reg_pb2.AgentEvaluation.FromString(blob),
                                                    version=onboarding_grpc.to_proto(record, onboarding))

    def ListAgentVersions(
        self, request: reg_pb2.ListAgentVersionsRequest, context: grpc.ServicerContext
    ) -> reg_pb2.ListAgentVersionsResponse:
        onboarding, _ = self._onboard(context)
        return reg_pb2.ListAgentVersionsResponse(
            versions=[onboarding_grpc.to_proto(r, onboarding) for r in onboarding.list(request.agent_id)])

    @staticmethod
    def _onboarding_error(err: sup_errors.SupervisorError) -> errors.MeshError:
        if isinstance(err, ReleaseBlocked):
            metadata = {"field": "to_status", **{f"problem_{i}": p[:500] for i, p in enumerate(err.problems, 1)}}
            return errors.FailedPrecondition(err.message, reason=err.reason, metadata=metadata)
        mesh = mesh_error(err)
        # The onboarding recorded the policy refusal with its real cause.
        return errors.recorded(mesh) if isinstance(err, OnboardingDenied) else mesh

    def ListAgents(
        self, request: reg_pb2.ListAgentsRequest, context: grpc.ServicerContext
    ) -> reg_pb2.ListAgentsResponse:
        return reg_pb2.ListAgentsResponse(agents=[e.to_proto() for e in self._registry.list()])

    def GetAgent(self, request: reg_pb2.GetAgentRequest, context: grpc.ServicerContext) -> reg_pb2.GetAgentResponse:
        if not request.agent_id:
            raise errors.InvalidArgument("agent_id is required", reason="MISSING_FIELD", metadata={"field": "agent_id"})
        try:
            return reg_pb2.GetAgentResponse(agent=self._registry.get(request.agent_id).to_proto())
        except sup_errors.SupervisorError as err:
            raise mesh_error(err) from err

    def DiscoverAgents(
        self, request: reg_pb2.DiscoverAgentsRequest, context: grpc.ServicerContext
    ) -> reg_pb2.DiscoverAgentsResponse:
        if not request.tenant_id:
            raise errors.InvalidArgument("tenant_id is required", reason="MISSING_FIELD",
                                         metadata={"field": "tenant_id"})
        try:
            found = self._selector.discover(request.tenant_id, Requirement(
                tuple(request.domains), tuple(request.required_capabilities), tuple(request.knowledge_scopes)))
        except sup_errors.SupervisorError as err:
            raise mesh_error(err) from err
        return reg_pb2.DiscoverAgentsResponse(candidates=[c.to_proto() for c in found.candidates],
                                              scores=list(found.scores))

    def SetAgentStatus(
        self, request: reg_pb2.SetAgentStatusRequest, context: grpc.ServicerContext
    ) -> reg_pb2.SetAgentStatusResponse:
        operator = transport.caller_id(context)
        if not request.agent_id:
            raise errors.InvalidArgument("agent_id is required", reason="MISSING_FIELD", metadata={"field": "agent_id"})
        if request.status == common_pb2.LIFECYCLE_STATUS_UNSPECIFIED:
            raise errors.InvalidArgument("status is required", reason="MISSING_FIELD", metadata={"field": "status"})
        try:
            status = status_from_proto(request.status)
            served = self._onboarding is not None and request.agent_id in self._onboarding.active_manifests()
            if served and self._onboarding is not None:
                self._onboarding.set_agent_status(request.agent_id, status, request.reason, operator)
            else:
                self._registry.set_status(request.agent_id, status, request.reason, operator)
            entry = self._registry.get(request.agent_id)
        except sup_errors.SupervisorError as err:
            raise mesh_error(err) from err
        # The status is in force (a safety stop must not wait for audit); its record
        # reaches the log now or, through the outbox, as soon as audit is back.
        try:
            self._audit.record_durably(
                audit_pb2.AUDIT_EVENT_TYPE_STATUS_CHANGED, outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS,
                agent_id=request.agent_id,
                reason_codes=[f"status={common_pb2.LifecycleStatus.Name(request.status)}",
                              f"reason={request.reason}", f"changed_by={operator}"])
        except errors.MeshError:
            log.exception("agent status change not recorded in audit nor in the outbox (kept in the registry "
                          "history)")
        return reg_pb2.SetAgentStatusResponse(agent=entry.to_proto())
