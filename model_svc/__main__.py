"""``python -m model_svc``: runs the model service role."""

from __future__ import annotations

import argparse
import sys

import grpc

from agentmesh import database, signing, spiffe
from agentmesh.config import MeshConfig
from agentmesh.policy_client import PolicyClient
from agentmesh.service import ServiceContext, ServiceSpec, StartupError, base_parser, run
from agentmesh.v1 import model_service_pb2_grpc as model_grpc
from model_svc.backends import ChatBackend
from model_svc.gateway import ModelGateway
from model_svc.ledger import BudgetLedger
from model_svc.prompting import PromptError, PromptRegistry
from model_svc.routing import Router
from model_svc.servicer import ModelServicer

SERVICES = ("agentmesh.v1.ModelService",)
LEDGER_DB = "model-ledger.db"


def backends(config: MeshConfig, sandbox_url: str | None) -> dict[str, ChatBackend]:
    """One client per configured model: its own URL, else ``model_url``, else the sandbox's."""
    out = {}
    for b in config.model_backends:
        url = b.url or config.model_url or sandbox_url
        if not url:
            raise StartupError(f"model_backends: {b.id} has no url, and neither model_url nor --sandbox-url is "
                               "set (the launcher passes the sandbox model server's)")
        out[b.id] = ChatBackend(b, url)
    return out


def register(server: grpc.Server, ctx: ServiceContext) -> None:
    """Loads prompts, models and the budget ledger, checks the wiring and adds the servicer."""
    try:
        grant_key = signing.load_public_key(ctx.config.mesh_home.public_key_path("grant-signer.pub"))
    except signing.SigningKeyError as err:
        raise StartupError(f"{err} (the supervisor's grant-signing key; run 'agentmesh certs init')") from err
    try:
        prompts = PromptRegistry.load()
    except PromptError as err:
        raise StartupError(str(err)) from err
    clients = backends(ctx.config, ctx.args.sandbox_url)
    url = ctx.config.database_url
    try:
        ledger = BudgetLedger(ctx.data_dir / LEDGER_DB, url=url)
    except database.DatabaseError as err:
        raise StartupError(f"model ledger: {err}") from err
    ctx.on_stop(ledger.close)
    for client in clients.values():
        ctx.on_stop(client.close)
    if database.is_postgresql(url):
        assert url is not None
        ctx.health_check("database model ledger", database.postgresql_check(url), tolerate=1)
    else:
        ctx.check_database(ctx.data_dir / LEDGER_DB)
    # No decision without policy, no call without its record: both are required peers. The
    # backends are external systems (like the LMS): their availability is routing's, not health's.
    ctx.require_peer("policy")
    ctx.require_peer("audit")
    gateway = ModelGateway(prompts=prompts, router=Router(ctx.config.model_backends), backends=clients,
                           ledger=ledger, authorize=PolicyClient(ctx.channel("policy"), ctx.config.call_timeout_s),
                           audit=ctx.audit(), trusted_grant_keys={signing.key_id(grant_key): grant_key})
    model_grpc.add_ModelServiceServicer_to_server(ModelServicer(gateway), server)


def spec(args: argparse.Namespace) -> ServiceSpec:
    """The model role."""
    return ServiceSpec("model", spiffe.service("model"), SERVICES, register)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = base_parser("model_svc", "agentmesh model service: the only way to a language model")
    parser.add_argument("--sandbox-url", help="base URL (…/v1) of the sandbox model server, for the models "
                                              "without a url of their own when model_url is unset")
    return run(spec, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
