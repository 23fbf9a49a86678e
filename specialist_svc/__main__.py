"""``python -m specialist_svc --agent ID``: runs one specialist agent."""

from __future__ import annotations

import argparse
import sys

import grpc

from agentmesh import spiffe
from agentmesh.service import ServiceContext, ServiceSpec, StartupError, base_parser, run
from agentmesh.unimplemented import unimplemented_servicer
from agentmesh.v1 import specialist_service_pb2_grpc as specialist_grpc

SERVICES = ("agentmesh.v1.SpecialistService",)


def register(server: grpc.Server, ctx: ServiceContext) -> None:
    """Adds the specialist servicer."""
    specialist_grpc.add_SpecialistServiceServicer_to_server(
        unimplemented_servicer(specialist_grpc.SpecialistServiceServicer)(), server
    )


def spec(args: argparse.Namespace) -> ServiceSpec:
    """One specialist agent, named by ``--agent``."""
    try:
        identity = spiffe.agent(args.agent)
        spiffe.parse(str(identity))
    except spiffe.InvalidSpiffeId as err:
        raise StartupError(f"--agent: {err}") from err
    return ServiceSpec(args.agent, identity, SERVICES, register)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = base_parser("specialist_svc", "agentmesh specialist agent (one process per agent)")
    parser.add_argument("--agent", required=True, help="agent id, e.g. training-agent")
    return run(spec, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
