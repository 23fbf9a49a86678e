"""``python -m audit_svc``: runs the audit role."""

from __future__ import annotations

import argparse
import sys

import grpc

from agentmesh import spiffe
from agentmesh.service import ServiceContext, ServiceSpec, base_parser, run
from agentmesh.unimplemented import unimplemented_servicer
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc

SERVICES = ("agentmesh.v1.AuditService",)


def register(server: grpc.Server, ctx: ServiceContext) -> None:
    """Adds the audit servicer."""
    audit_grpc.add_AuditServiceServicer_to_server(
        unimplemented_servicer(audit_grpc.AuditServiceServicer)(), server
    )


def spec(args: argparse.Namespace) -> ServiceSpec:
    """The audit role."""
    return ServiceSpec("audit", spiffe.service("audit"), SERVICES, register)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    return run(spec, base_parser("audit_svc", "agentmesh audit service"), argv)


if __name__ == "__main__":
    sys.exit(main())
