"""``agentmesh tenants``: tenants are data, applied to the running mesh by an operator.

``agentmesh tenants apply FILE``
    Checks the tenant file (``agentmesh-tenants/v1``, see agentmesh.tenant_file), then
    sends every tenant in it to ``TenantService.ApplyTenants`` as the operator, all or
    nothing. Each tenant is in force at once — in the policy engine (its roles) and for
    the next execution the supervisor accepts (its agents and limits) — with no restart,
    and each change is in the audit log (``TENANT_CHANGED``). A refusal names the file,
    the line and the field (``tenants.yaml:14 at 'tenants[0].roles.analyst.capabilities[1]'``);
    nothing is applied then.
``agentmesh tenants list`` / ``agentmesh tenants show ID``
    What is in force: every tenant with its revision, or one tenant as a tenant file writes it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from agentmesh.tenant_file import (
    TenantApplyFailed,
    TenantFileError,
    apply_tenant_file,
    definition_to_mapping,
    load_tenant_file,
)
from agentmesh.v1 import tenant_service_pb2 as tenant_pb2
from agentmesh.v1 import tenant_service_pb2_grpc as tenant_grpc

if TYPE_CHECKING:
    from agentmesh.config import MeshConfig

__all__ = ["register"]


def register(sub: Any, common: argparse.ArgumentParser, out: argparse.ArgumentParser) -> None:
    """Adds ``agentmesh tenants apply|list|show`` to the command tree."""
    tenants = sub.add_parser(
        "tenants", help="configure tenants (roles, agents, limits) on the running mesh",
        description="Tenants are data: an operator applies them to the running mesh (the policy engine's tenant "
                    "directory); they are in force at once, persisted and audited. Format: agentmesh/tenant_file.py "
                    "(README 'Tenants are data').")
    tsub = tenants.add_subparsers(dest="tenants_command", required=True, metavar="SUBCOMMAND")
    p = tsub.add_parser(
        "apply", parents=[common, out], help="create or change the tenants of a tenant file (all or nothing)",
        description="Check FILE, then apply every tenant in it as the operator: in force at once, no restart, each "
                    "change audited (TENANT_CHANGED). A tenant whose definition is already in force is UNCHANGED. "
                    "Exits 1 when refused (the error names the file, line and field) and nothing is applied then.")
    p.add_argument("file", help="tenant file (agentmesh-tenants/v1, YAML or JSON)")
    p.set_defaults(handler=cmd_tenants_apply)
    p = tsub.add_parser("list", parents=[common, out], help="the tenants in force")
    p.set_defaults(handler=cmd_tenants_list)
    p = tsub.add_parser("show", parents=[common, out], help="one tenant in force, as a tenant file writes it")
    p.add_argument("tenant_id", metavar="TENANT_ID")
    p.set_defaults(handler=cmd_tenants_show)


def _change(value: int) -> str:
    from agentmesh.execution_text import enum_name

    return enum_name(tenant_pb2.TenantChange, value, "TENANT_CHANGE_")


def cmd_tenants_apply(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from agentmesh_cli.common import CliError, emit, mesh_channel

    try:
        tenants = load_tenant_file(Path(args.file))
    except TenantFileError as err:
        raise CliError(f"{err} (nothing was applied)") from err
    try:
        with mesh_channel(cfg, "policy") as channel:
            response = apply_tenant_file(channel, tenants, timeout_s=max(30.0, cfg.call_timeout_s))
    except TenantApplyFailed as err:
        raise CliError(str(err)) from err
    rows = [{"tenant": r.tenant.tenant_id, "change": _change(r.change), "revision": r.tenant.revision,
             "digest": r.tenant.digest[:12]} for r in response.results]

    def human() -> None:
        for row in rows:
            print(f"tenant {row['tenant']}: {row['change']} (revision {row['revision']})")
        print(f"policy version now {response.policy_version}")

    emit(args, {"source": args.file, "tenants": rows, "policy_version": response.policy_version}, human)
    return 0


def cmd_tenants_list(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from agentmesh_cli.common import emit, exchange, print_table

    response = exchange(cfg, "policy", tenant_grpc.TenantServiceStub,
                        lambda stub: stub.ListTenants(tenant_pb2.ListTenantsRequest()))
    rows = [{"tenant": t.tenant_id, "name": t.display_name, "revision": t.revision,
             "roles": len(t.roles), "agents": ",".join(t.allowed_agents), "changed_by": t.changed_by,
             "changed_at": t.changed_at.ToDatetime().isoformat(timespec="seconds")} for t in response.tenants]
    emit(args, rows, lambda: print_table(rows, ["tenant", "name", "revision", "roles", "agents", "changed_by",
                                                "changed_at"]) if rows else print("no tenant is configured"))
    return 0


def cmd_tenants_show(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from agentmesh_cli.common import exchange

    tenant = exchange(cfg, "policy", tenant_grpc.TenantServiceStub,
                      lambda stub: stub.GetTenant(tenant_pb2.GetTenantRequest(tenant_id=args.tenant_id)).tenant)
    data = {**definition_to_mapping(tenant), "revision": tenant.revision, "digest": tenant.digest,
            "changed_by": tenant.changed_by, "changed_at": tenant.changed_at.ToDatetime().isoformat()}
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        yaml.safe_dump(data, sys.stdout, sort_keys=False)
    return 0
