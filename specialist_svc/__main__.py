"""``python -m specialist_svc --agent ID``: runs one specialist agent."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys

import grpc

from agentmesh import spiffe
from agentmesh.agent_manifest import ManifestError
from agentmesh.clock import mesh_today
from agentmesh.service import ServiceContext, ServiceSpec, StartupError, base_parser, knows_peer, run
from agentmesh.v1 import capability_service_pb2_grpc as capability_grpc
from agentmesh.v1 import model_service_pb2_grpc as model_grpc
from agentmesh.v1 import specialist_service_pb2_grpc as specialist_grpc
from specialist_svc.agent import SpecialistAgent, UnknownAgent
from specialist_svc.servicer import SpecialistServicer

SERVICES = ("agentmesh.v1.SpecialistService",)


def spec(args: argparse.Namespace) -> ServiceSpec:
    """One specialist agent, named by ``--agent``: its manifest, rules and servicer."""
    try:
        agent = SpecialistAgent.load(args.agent)
    except UnknownAgent as err:
        raise StartupError(f"--agent: {err}") from err
    except ManifestError as err:
        raise StartupError(str(err)) from err
    try:
        identity = spiffe.agent(agent.agent_id)
    except spiffe.InvalidSpiffeId as err:
        raise StartupError(f"--agent: {err}") from err
    if args.fixed_delay_ms is not None and not 0 <= args.fixed_delay_ms <= 600_000:
        raise StartupError(f"--fixed-delay-ms: must be between 0 and 600000, got {args.fixed_delay_ms}")

    def register(server: grpc.Server, ctx: ServiceContext) -> None:
        # The flag wins; else the config's specialist_delay_ms (file or $AGENTMESH_SPECIALIST_DELAY_MS).
        delay_ms = args.fixed_delay_ms if args.fixed_delay_ms is not None else ctx.config.specialist_delay_ms
        delay_s = delay_ms / 1000.0
        stub = capability_grpc.CapabilityServiceStub(ctx.channel("capability"))
        # The rules measure "already ended" by the mesh's date (config `today`, else the host's UTC date).
        running = dataclasses.replace(agent, today=mesh_today(ctx.config))
        # The same recorder (and outbox) as the caller table's refusals at this agent's door.
        audit = ctx.audit() if knows_peer(ctx.config, "audit") else None
        ctx.require_peer("capability")  # an agent acts only through capabilities
        # An agent whose rules may ask a model reaches one only through the model service; without it,
        # they run deterministic rules only (the model is never required for health).
        models = model_grpc.ModelServiceStub(ctx.channel("model")) \
            if agent.rules.models and knows_peer(ctx.config, "model") else None
        specialist_grpc.add_SpecialistServiceServicer_to_server(
            SpecialistServicer(running, stub, fixed_delay_s=delay_s, audit=audit, models=models), server)

    instance = args.instance or agent.agent_id
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,62}", instance):
        raise StartupError(f"--instance: {instance!r} is not a process name ([a-z][a-z0-9-]{{0,62}})")
    return ServiceSpec(instance, identity, SERVICES, register)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = base_parser("specialist_svc", "agentmesh specialist agent (one process per agent)")
    parser.add_argument("--agent", required=True,
                        help="agent id, e.g. training-agent (one of supervisor_svc/agents/*.yaml)")
    parser.add_argument(
        "--instance", default=None, metavar="NAME",
        help="process name of this run (its address file, port key, log and audit outbox), default the agent "
             "id: a second process of the agent — another version at another endpoint, registered with "
             "'agentmesh agents register' — takes its own name; its identity stays the agent's")
    parser.add_argument(
        "--fixed-delay-ms", type=int, default=None, metavar="MS",
        help="sleep MS milliseconds inside every RunTask before the rules run, to stand in for an agent's own "
             "work in benchmarks and parallelism tests (default: specialist_delay_ms from the config or "
             "$AGENTMESH_SPECIALIST_DELAY_MS, else 0)")
    return run(spec, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
