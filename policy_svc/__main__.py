"""``python -m policy_svc``: runs the policy engine role."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc

from agentmesh import database, spiffe
from agentmesh.service import ServiceContext, ServiceSpec, StartupError, base_parser, knows_peer, run
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc
from agentmesh.v1 import tenant_service_pb2_grpc as tenant_grpc
from policy_svc.agent_registrations import AgentRegistrationError, AgentRegistrations
from policy_svc.engine import DEFAULT_POLICY_DIR, PolicyEngine
from policy_svc.errors import PolicyError
from policy_svc.kill_switches import KillSwitchStore
from policy_svc.servicer import PolicyServicer, TenantServicer
from policy_svc.tenants import TenantDirectory, TenantStore

SERVICES = ("agentmesh.v1.PolicyService", "agentmesh.v1.TenantService")


def register(server: grpc.Server, ctx: ServiceContext) -> None:
    """Loads and validates the policies once, opens the kill-switch and tenant stores (the stored tenants are
    put in force), adds the servicers."""
    args = ctx.args
    url = ctx.config.database_url
    try:
        engine = PolicyEngine.load(Path(args.policy_dir) if args.policy_dir else DEFAULT_POLICY_DIR)
        agents = AgentRegistrations.load(Path(args.agent_manifests) if args.agent_manifests else None)
        switches = KillSwitchStore(ctx.data_dir / "policy.db")
    except (PolicyError, AgentRegistrationError) as err:
        raise StartupError(str(err)) from err
    try:
        tenant_store = TenantStore(ctx.data_dir / "tenants.db", url=url)
    except database.DatabaseError as err:
        raise StartupError(f"tenants database: {err}") from err
    ctx.on_stop(switches.close)
    ctx.on_stop(tenant_store.close)
    ctx.check_database(ctx.data_dir / "policy.db")
    if database.is_postgresql(url):
        assert url is not None
        ctx.health_check("database tenants", database.postgresql_check(url), tolerate=1)
    else:
        ctx.check_database(ctx.data_dir / "tenants.db")
    audit = ctx.audit() if knows_peer(ctx.config, "audit") else None
    directory = TenantDirectory(tenant_store, engine, agents=agents.agent_ids(), operators=ctx.config.operators,
                                audit=audit)
    policy_grpc.add_PolicyServiceServicer_to_server(
        PolicyServicer(engine, switches, agents.capabilities, audit, agents.knowledge_scopes, agents.risk_profile),
        server)
    tenant_grpc.add_TenantServiceServicer_to_server(TenantServicer(directory), server)


def spec(args: argparse.Namespace) -> ServiceSpec:
    """The policy role."""
    return ServiceSpec("policy", spiffe.service("policy"), SERVICES, register)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = base_parser("policy_svc", "agentmesh policy engine (Cedar)")
    parser.add_argument("--policy-dir", help="directory of *.cedar, schema and entities (default: shipped policies)")
    parser.add_argument("--agent-manifests", help="directory of agent manifests (default: shipped agents)")
    return run(spec, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
