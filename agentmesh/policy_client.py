"""``PolicyService.Authorize`` as a plain callable that raises mesh errors (for the services that ask it)."""

from __future__ import annotations

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
        try:
            resp: policy_pb2.AuthorizeResponse = self._stub.Authorize(request, timeout=self._timeout)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE:
                raise errors.from_rpc_error(err) from err
            try:
                resp = self._stub.Authorize(request, timeout=min(self._timeout, RECONNECT_WAIT_S),
                                            wait_for_ready=True)
            except grpc.RpcError as again:
                if again.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise errors.Unavailable(
                        f"the policy engine could not be reached within {RECONNECT_WAIT_S:g} s: {err.details()}",
                        reason="POLICY_UNAVAILABLE") from again
                raise errors.from_rpc_error(again) from again
        return resp
