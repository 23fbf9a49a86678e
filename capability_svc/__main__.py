"""``python -m capability_svc``: runs the capability role."""

from __future__ import annotations

import argparse
import sys

import grpc

from agentmesh import spiffe
from agentmesh.service import ServiceContext, ServiceSpec, base_parser, run
from agentmesh.unimplemented import unimplemented_servicer
from agentmesh.v1 import capability_service_pb2_grpc as capability_grpc

SERVICES = ("agentmesh.v1.CapabilityService",)


def register(server: grpc.Server, ctx: ServiceContext) -> None:
    """Adds the capability servicer."""
    capability_grpc.add_CapabilityServiceServicer_to_server(
        unimplemented_servicer(capability_grpc.CapabilityServiceServicer)(), server
    )


def spec(args: argparse.Namespace) -> ServiceSpec:
    """The capability role."""
    return ServiceSpec("capability", spiffe.service("capability"), SERVICES, register)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    return run(spec, base_parser("capability_svc", "agentmesh capability service"), argv)


if __name__ == "__main__":
    sys.exit(main())
