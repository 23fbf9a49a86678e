"""``python -m supervisor_svc``: runs the supervisor role."""

from __future__ import annotations

import argparse
import sys

import grpc

from agentmesh import spiffe
from agentmesh.service import ServiceContext, ServiceSpec, base_parser, run
from agentmesh.unimplemented import unimplemented_servicer
from agentmesh.v1 import agent_registry_service_pb2_grpc as registry_grpc
from agentmesh.v1 import supervisor_service_pb2_grpc as supervisor_grpc

SERVICES = ("agentmesh.v1.SupervisorService", "agentmesh.v1.AgentRegistryService")


def register(server: grpc.Server, ctx: ServiceContext) -> None:
    """Adds the supervisor's servicers."""
    supervisor_grpc.add_SupervisorServiceServicer_to_server(
        unimplemented_servicer(supervisor_grpc.SupervisorServiceServicer)(), server
    )
    registry_grpc.add_AgentRegistryServiceServicer_to_server(
        unimplemented_servicer(registry_grpc.AgentRegistryServiceServicer)(), server
    )


def spec(args: argparse.Namespace) -> ServiceSpec:
    """The supervisor role."""
    return ServiceSpec("supervisor", spiffe.service("supervisor"), SERVICES, register)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    return run(spec, base_parser("supervisor_svc", "agentmesh supervisor"), argv)


if __name__ == "__main__":
    sys.exit(main())
