"""``python -m capability_svc``: runs the capability runtime role."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc

from agentmesh import database, signing, spiffe
from agentmesh.clock import mesh_today
from agentmesh.service import ServiceContext, ServiceSpec, StartupError, base_parser, run
from agentmesh.v1 import capability_service_pb2_grpc as capability_grpc
from capability_svc.errors import CapabilityError
from capability_svc.governance import GovernedInvoker
from capability_svc.idempotency import IdempotencyStore
from capability_svc.knowledge_store import KnowledgeError
from capability_svc.runtime import CAPABILITY_DB, INTERNAL_DB, open_runtime
from capability_svc.servicer import CapabilityServicer, PolicyClient

SERVICES = ("agentmesh.v1.CapabilityService",)


def register(server: grpc.Server, ctx: ServiceContext) -> None:
    """Opens the runtime, checks its wiring and adds the servicer."""
    lms_url = ctx.args.lms_url or ctx.config.lms_url
    if not lms_url:
        raise StartupError("no LMS address: set --lms-url or lms_url in the config")
    try:
        grant_key = signing.load_public_key(ctx.config.mesh_home.public_key_path("grant-signer.pub"))
    except signing.SigningKeyError as err:
        raise StartupError(f"{err} (the supervisor's grant-signing key; run 'agentmesh certs init')") from err
    try:
        runtime = open_runtime(ctx.data_dir, lms_url, knowledge_dir=ctx.config.knowledge_dir,
                               today=mesh_today(ctx.config))
        if ctx.args.world:
            runtime.load_world_if_empty(Path(ctx.args.world))
    except CapabilityError as err:
        raise StartupError(str(err)) from err
    except KnowledgeError as err:
        raise StartupError(f"knowledge store: {err}") from err
    url = ctx.config.database_url
    try:
        idempotency = IdempotencyStore(ctx.data_dir / "idempotency.db", url=url)
    except database.DatabaseError as err:
        raise StartupError(f"idempotency database: {err}") from err
    ctx.on_stop(runtime.close)
    ctx.on_stop(idempotency.close)
    for db in (CAPABILITY_DB, INTERNAL_DB):
        ctx.check_database(ctx.data_dir / db)
    if database.is_postgresql(url):
        assert url is not None
        ctx.health_check("database idempotency", database.postgresql_check(url), tolerate=1)
    else:
        ctx.check_database(ctx.data_dir / "idempotency.db")
    # No decision without policy, no governed call without its record: both are required peers.
    ctx.require_peer("policy")
    ctx.require_peer("audit")
    audit = ctx.audit()
    invoker = GovernedInvoker(runtime, idempotency, PolicyClient(ctx.channel("policy"), ctx.config.call_timeout_s),
                              audit, {signing.key_id(grant_key): grant_key})
    capability_grpc.add_CapabilityServiceServicer_to_server(
        CapabilityServicer(invoker, runtime.registry, audit,
                           runtime.executor.knowledge.library if runtime.executor.knowledge else None), server)


def spec(args: argparse.Namespace) -> ServiceSpec:
    """The capability role."""
    return ServiceSpec("capability", spiffe.service("capability"), SERVICES, register)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = base_parser("capability_svc", "agentmesh capability runtime")
    parser.add_argument("--lms-url", help="base URL of the LMS (default: lms_url from the config)")
    parser.add_argument("--world", help="world file to load when the data directory holds none yet")
    return run(spec, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
