"""ModelService over gRPC: the thin face of the gateway."""

from __future__ import annotations

import grpc

from agentmesh import transport
from agentmesh.v1 import model_service_pb2 as pb
from agentmesh.v1 import model_service_pb2_grpc as pb_grpc
from model_svc.gateway import ModelGateway

__all__ = ["ModelServicer"]


class ModelServicer(pb_grpc.ModelServiceServicer):
    """Complete, ListModels, RevokeExecution."""

    def __init__(self, gateway: ModelGateway) -> None:
        self._gateway = gateway

    def Complete(self, request: pb.CompleteRequest, context: grpc.ServicerContext) -> pb.CompleteResponse:
        remaining = context.time_remaining()
        # Keep a little of the caller's deadline back, so a backend timeout is reported as such.
        deadline = None if remaining is None else remaining - min(0.25, remaining * 0.1)
        return self._gateway.complete(transport.caller_id(context), request, deadline_s=deadline)

    def ListModels(self, request: pb.ListModelsRequest, context: grpc.ServicerContext) -> pb.ListModelsResponse:
        return self._gateway.models()

    def RevokeExecution(self, request: pb.ModelServiceRevokeExecutionRequest,
                        context: grpc.ServicerContext) -> pb.ModelServiceRevokeExecutionResponse:
        # Only the supervisor gets here (the caller table).
        return self._gateway.revoke(transport.caller_id(context), request)
