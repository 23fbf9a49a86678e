"""The :class:`~specialist_svc.rules.CapabilityClient` port over gRPC: InvokeCapability with the task's grant.

One client serves one task. Every call carries the grant the agent received
for that task, the principal (agent, version, delegation chain and the grants
that make it up) and the trace ids; its deadline is what is left of the
incoming RunTask deadline, minus a small reserve so that a capability timeout
comes back as an UNCERTAINTY in a result rather than the supervisor's own
timeout. Failed calls raise the typed :mod:`agentmesh.errors` exception
(never a raw ``grpc.RpcError``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import struct_pb2

from agentmesh import errors
from agentmesh.structs import plain_struct
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import capability_service_pb2_grpc as cap_grpc
from agentmesh.v1 import common_pb2
from specialist_svc.rules import Answered

__all__ = ["MAX_BATCH", "Deadline", "GrpcCapabilityClient", "principal_for"]

MAX_BATCH = 16
"""Most calls in one InvokeCapabilities (the capability service's limit); more go in several."""


class Deadline:
    """An absolute deadline from a remaining time (``None``: no deadline, the channel's default applies)."""

    def __init__(self, remaining_s: float | None, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._at = None if remaining_s is None else monotonic() + remaining_s

    def remaining(self) -> float | None:
        """Seconds left, or None without a deadline."""
        return None if self._at is None else self._at - self._monotonic()

    def call_timeout(self) -> float | None:
        """The timeout for one outgoing call: what is left, minus a reserve for answering."""
        left = self.remaining()
        if left is None:
            return None
        return left - min(0.25, max(left, 0.0) * 0.1)


def principal_for(
    received: common_pb2.AgentPrincipal,
    grant: common_pb2.SignedTaskGrant,
    *,
    agent_id: str,
    agent_version: str,
    execution_id: str,
) -> common_pb2.AgentPrincipal:
    """The principal this agent acts as: the one received, naming this agent and carrying this task's grant.

    The delegation chain received (e.g. ``["user:acme/alice", "svc:supervisor"]``)
    is extended with ``agent:<agent_id>`` unless it already ends there.
    """
    principal = common_pb2.AgentPrincipal()
    principal.CopyFrom(received)
    principal.agent_id = agent_id
    principal.agent_version = agent_version
    principal.execution_id = execution_id or received.execution_id
    me = f"agent:{agent_id}"
    # An empty chain stays empty: the capability service then derives it from the grant
    # (user, issuer, agent) rather than from a chain that would start at this agent.
    if principal.delegation_chain and principal.delegation_chain[-1] != me:
        principal.delegation_chain.append(me)
    known = {g.SerializeToString(deterministic=True) for g in principal.grants}
    if grant.grant and grant.SerializeToString(deterministic=True) not in known:
        principal.grants.append(grant)
    return principal


class GrpcCapabilityClient:
    """Calls ``CapabilityService.InvokeCapability`` (and ``InvokeCapabilities``) for one task. Thread-safe."""

    def __init__(
        self,
        stub: cap_grpc.CapabilityServiceStub,
        *,
        grant: common_pb2.SignedTaskGrant,
        principal: common_pb2.AgentPrincipal,
        trace: common_pb2.TraceContext,
        deadline: Deadline,
    ) -> None:
        """Args:
        stub: A stub on the mTLS channel to the capability service.
        grant: The task grant received with the task, sent unchanged.
        principal: From :func:`principal_for`.
        trace: The task's trace, correlation and execution ids.
        deadline: The incoming call's deadline.
        """
        self._stub = stub
        self._grant = grant
        self._principal = principal
        self._trace = trace
        self._deadline = deadline
        self._lock = threading.Lock()
        self._policy_versions: set[str] = set()
        self._knowledge_versions: set[str] = set()

    @property
    def policy_versions(self) -> list[str]:
        """The policy versions of the decisions that allowed this task's calls."""
        with self._lock:
            return sorted(self._policy_versions)

    @property
    def knowledge_versions(self) -> list[str]:
        """The knowledge this task's calls read, as the capability service named it (``<scope>@<digest>``)."""
        with self._lock:
            return sorted(self._knowledge_versions)

    def call(
        self, capability_id: str, input: Mapping[str, Any], idempotency_key: str | None = None
    ) -> tuple[dict[str, Any], list[common_pb2.EvidenceReference]]:
        """One governed call (see :class:`specialist_svc.rules.CapabilityClient`).

        Raises:
            agentmesh.errors.MeshError: the call failed; ``DeadlineExceeded`` without a call when no time is left.
        """
        timeout = self._deadline.call_timeout()
        if timeout is not None and timeout <= 0:
            raise errors.DeadlineExceeded(f"no time left to call {capability_id}", reason="TASK_DEADLINE_EXCEEDED")
        request = self._request(capability_id, input, idempotency_key)
        try:
            response: cap_pb2.InvokeCapabilityResponse = self._stub.InvokeCapability(request, timeout=timeout)
        except grpc.RpcError as err:
            raise errors.from_rpc_error(err) from err
        return self._answered(response)

    def call_all(self, calls: Sequence[tuple[str, Mapping[str, Any]]], *,
                 traceparents: Sequence[str] = ()) -> list[Answered | errors.MeshError]:
        """Independent reads in one ``InvokeCapabilities`` (see :class:`specialist_svc.rules.CapabilityClient`).

        One call goes as :meth:`call`. When the RPC itself fails (or no time is left), every slot holds
        that error: nothing was answered.
        """
        if not calls:
            return []
        if len(calls) == 1:
            try:
                return [self.call(*calls[0])]
            except errors.MeshError as err:
                return [err]
        out: list[Answered | errors.MeshError] = []
        for start in range(0, len(calls), MAX_BATCH):
            out.extend(self._batch(calls[start:start + MAX_BATCH], traceparents[start:start + MAX_BATCH]))
        return out

    def _batch(self, calls: Sequence[tuple[str, Mapping[str, Any]]],
               traceparents: Sequence[str]) -> list[Answered | errors.MeshError]:
        timeout = self._deadline.call_timeout()
        if timeout is not None and timeout <= 0:
            return [errors.DeadlineExceeded(f"no time left to call {', '.join(c for c, _ in calls)}",
                                            reason="TASK_DEADLINE_EXCEEDED")] * len(calls)
        requests = [self._request(capability_id, input) for capability_id, input in calls]
        try:
            response: cap_pb2.InvokeCapabilitiesResponse = self._stub.InvokeCapabilities(
                cap_pb2.InvokeCapabilitiesRequest(calls=requests, traceparents=list(traceparents)), timeout=timeout)
        except grpc.RpcError as err:
            return [errors.from_rpc_error(err)] * len(calls)
        if len(response.results) != len(calls):
            return [errors.Unavailable(f"the capability service answered {len(response.results)} results for "
                                       f"{len(calls)} calls", reason="CAPABILITY_ANSWER_MALFORMED")] * len(calls)
        return [self._answered(r.response) if r.WhichOneof("outcome") == "response" else errors.from_status(r.error)
                for r in response.results]

    def _request(self, capability_id: str, input: Mapping[str, Any],
                 idempotency_key: str | None = None) -> cap_pb2.InvokeCapabilityRequest:
        """One call under this task's grant, principal and trace."""
        arguments = struct_pb2.Struct()
        arguments.update(dict(input))
        return cap_pb2.InvokeCapabilityRequest(
            grant=self._grant, capability_id=capability_id, input=arguments,
            idempotency_key=idempotency_key or "", principal=self._principal, trace=self._trace)

    def _answered(self, response: cap_pb2.InvokeCapabilityResponse) -> Answered:
        with self._lock:
            if response.decision.policy_version:
                self._policy_versions.add(response.decision.policy_version)
            if response.knowledge_version:
                self._knowledge_versions.add(response.knowledge_version)
        output: dict[str, Any] = plain_struct(response.output)
        return output, list(response.evidence)
