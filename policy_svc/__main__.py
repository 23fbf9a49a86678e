"""``python -m policy_svc``: runs the policy role."""

from __future__ import annotations

import argparse
import sys

import grpc

from agentmesh import spiffe
from agentmesh.service import ServiceContext, ServiceSpec, base_parser, run
from agentmesh.unimplemented import unimplemented_servicer
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc

SERVICES = ("agentmesh.v1.PolicyService",)


def register(server: grpc.Server, ctx: ServiceContext) -> None:
    """Adds the policy servicer."""
    policy_grpc.add_PolicyServiceServicer_to_server(
        unimplemented_servicer(policy_grpc.PolicyServiceServicer)(), server
    )


def spec(args: argparse.Namespace) -> ServiceSpec:
    """The policy role."""
    return ServiceSpec("policy", spiffe.service("policy"), SERVICES, register)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    return run(spec, base_parser("policy_svc", "agentmesh policy service"), argv)


if __name__ == "__main__":
    sys.exit(main())
