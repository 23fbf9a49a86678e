"""``PolicyService.Authorize`` as a plain callable that raises mesh errors (for the services that ask it)."""

from __future__ import annotations

import grpc

from agentmesh import errors
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc

__all__ = ["PolicyClient"]


class PolicyClient:
    """PolicyService.Authorize over a channel; a failed call raises the typed :mod:`agentmesh.errors` error."""

    def __init__(self, channel: grpc.Channel, timeout_s: float) -> None:
        self._stub = policy_grpc.PolicyServiceStub(channel)
        self._timeout = timeout_s

    def __call__(self, request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        try:
            resp: policy_pb2.AuthorizeResponse = self._stub.Authorize(request, timeout=self._timeout)
        except grpc.RpcError as err:
            raise errors.from_rpc_error(err) from err
        return resp
