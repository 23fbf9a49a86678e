"""``PolicyService.Authorize`` as a plain callable that raises mesh errors (for the services that ask it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

from agentmesh import errors
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc

__all__ = ["RECONNECT_WAIT_S", "PolicyClient"]

RECONNECT_WAIT_S = 2.0
"""How long a call refused because the policy engine was unreachable waits for it to be reached again.

A restarted engine is reached again within about a second (the mesh channels' reconnect backoff);
an engine that stays down still ends in UNAVAILABLE, so the caller denies.
"""


class PolicyClient:
    """PolicyService.Authorize over a channel; a failed call raises the typed :mod:`agentmesh.errors` error.

    A call that fails UNAVAILABLE (no connection: the engine restarting) is asked once more,
    waiting up to :data:`RECONNECT_WAIT_S` for the channel to connect. A decision is a read;
    asking twice changes nothing but the decision log.
    """

    def __init__(self, channel: grpc.Channel, timeout_s: float) -> None:
        self._stub = policy_grpc.PolicyServiceStub(channel)
        self._timeout = timeout_s

    def __call__(self, request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        resp: policy_pb2.AuthorizeResponse = self._ask(self._stub.Authorize, request)
        return resp

    def authorize_all(self, requests: Sequence[policy_pb2.AuthorizeRequest]
                      ) -> list[policy_pb2.AuthorizeResponse | errors.MeshError]:
        """The decisions of several requests in one round trip (``AuthorizeBatch``), in order; never raises.

        Each slot holds its decision or its own error. When no decision came back at all (the engine
        unreachable, the kill switches unreadable), every slot holds that error: no slot is ever an ALLOW
        that was not decided. One request is asked as ``Authorize``.
        """
        if not requests:
            return []
        try:
            if len(requests) == 1:
                return [self(requests[0])]
            batch: policy_pb2.AuthorizeBatchResponse = self._ask(
                self._stub.AuthorizeBatch, policy_pb2.AuthorizeBatchRequest(requests=list(requests)))
        except errors.MeshError as err:
            return [err] * len(requests)
        if len(batch.results) != len(requests):
            failure = errors.Unavailable(f"the policy engine answered {len(batch.results)} results for "
                                         f"{len(requests)} requests", reason="POLICY_UNAVAILABLE")
            return [failure] * len(requests)
        return [r.response if r.WhichOneof("outcome") == "response" else errors.from_status(r.error)
                for r in batch.results]

    def _ask(self, method: Any, request: Any) -> Any:
        try:
            return method(request, timeout=self._timeout)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE:
                raise errors.from_rpc_error(err) from err
            try:
                return method(request, timeout=min(self._timeout, RECONNECT_WAIT_S), wait_for_ready=True)
            except grpc.RpcError as again:
                if again.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise errors.Unavailable(
                        f"the policy engine could not be reached within {RECONNECT_WAIT_S:g} s: {err.details()}",
                        reason="POLICY_UNAVAILABLE") from again
                raise errors.from_rpc_error(again) from again
