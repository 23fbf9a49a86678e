"""``python -m supervisor_svc``: the supervisor role (Supervisor, AgentRegistry and DecisionCenter services)."""

from __future__ import annotations

import argparse
import functools
import os
import sys
import uuid

import grpc

from agentmesh import assertion, database, errors, grants, signing, spiffe
from agentmesh.policy_client import PolicyClient
from agentmesh.service import ServiceContext, ServiceSpec, StartupError, base_parser, knows_peer, run
from agentmesh.v1 import agent_registry_service_pb2_grpc as registry_grpc
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import capability_service_pb2_grpc as cap_grpc
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2_grpc as dc_grpc
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from agentmesh.v1 import supervisor_service_pb2_grpc as supervisor_grpc
from supervisor_svc import evaluation
from supervisor_svc.actions import ReleaseActions
from supervisor_svc.decision_center import DecisionCenter
from supervisor_svc.definitions import DomainCatalog, projection_config
from supervisor_svc.dispatch import TaskDispatcher
from supervisor_svc.errors import SupervisorError
from supervisor_svc.events import EventHandler
from supervisor_svc.executions import ExecutionStore
from supervisor_svc.model_intent import IntentCatalogue, IntentClassifier
from supervisor_svc.onboarding import AgentVersionRecord, EvaluationRunner, Onboarding, ReleaseManager
from supervisor_svc.onboarding_grpc import audit_adapter, capability_facts, policy_adapter
from supervisor_svc.orchestrator import Orchestrator
from supervisor_svc.projection import ProjectionConfig, Projector
from supervisor_svc.registry import AgentRegistry
from supervisor_svc.routing import Endpoint, load_routing
from supervisor_svc.selection import AgentSelector
from supervisor_svc.servicer import (
    AgentRegistryServicer,
    DecisionCenterServicer,
    GrpcModels,
    GrpcSpecialists,
    PolicyTenants,
    SupervisorServicer,
    dependency_checker,
)
from supervisor_svc.tenants import load_limit_defaults
from supervisor_svc.traffic import Traffic

SERVICES = ("agentmesh.v1.SupervisorService", "agentmesh.v1.AgentRegistryService",
            "agentmesh.v1.DecisionCenterService")


def register(server: grpc.Server, ctx: ServiceContext) -> None:
    """Loads the registry (checking agents' capability dependencies), ends interrupted executions, adds servicers."""
    home = ctx.config.mesh_home
    try:
        idp_key = signing.load_public_key(home.public_key_path("idp.pub"))
        signer = grants.GrantSigner(signing.load_private_key(home.workload_dir(ctx.identity) / "grant-signer.key"))
    except signing.SigningKeyError as err:
        raise StartupError(f"{err} (run 'agentmesh certs init')") from err
    try:
        caps = cap_grpc.CapabilityServiceStub(ctx.channel("capability")).ListCapabilities(
            cap_pb2.ListCapabilitiesRequest(), timeout=ctx.config.call_timeout_s).capabilities
    except grpc.RpcError as err:
        raise StartupError(f"cannot list capabilities to check agent dependencies: "
                           f"{errors.from_rpc_error(err).message}") from err
    try:
        registry = AgentRegistry(ctx.data_dir / "supervisor-agents.db", dependency_checker=dependency_checker(caps))
        # Tenants are data in the policy engine's tenant directory, read for every execution; the
        # platform's default limits are this file.
        tenants = PolicyTenants(ctx.channel("policy"), load_limit_defaults(), ctx.config.call_timeout_s)
        known = {e.agent_id for e in registry.list()}
        # Every domain definition, validated completely before anything runs (errors name file:line:field).
        platform_projections = ProjectionConfig.load()
        domains = DomainCatalog.load(sensitive_fields=platform_projections.sensitive_fields)
        unknown = sorted(domains.agents() - known)
        if unknown:
            raise SupervisorError(f"the domain definitions name agents the registry does not know: "
                                  f"{', '.join(unknown)}", reason="CONFIG_REFERENCE_INVALID")
        projector = Projector(projection_config(domains, platform_projections))
        routing = load_routing(ctx.config.routing_file)
    except SupervisorError as err:
        raise StartupError(f"{err.reason}: {err.message}") from err
    url = ctx.config.database_url
    try:
        # Each replica (process) is its own owner of the executions it runs (leases, see supervisor_svc.orchestrator).
        store = ExecutionStore(ctx.data_dir / "supervisor.db", url=url,
                               owner=f"{ctx.name}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
    except database.DatabaseError as err:
        raise StartupError(f"executions database: {err}") from err
    audit = ctx.audit()
    cap_channel = ctx.channel("capability")

    def release_manager() -> ReleaseManager:
        # What the mesh has now, asked at each validation: the capability registry and the knowledge
        # stores the capability service serves, and the policies the policy engine has in force.
        try:
            now = cap_grpc.CapabilityServiceStub(cap_channel).ListCapabilities(
                cap_pb2.ListCapabilitiesRequest(), timeout=ctx.config.call_timeout_s)
            policies = policy_grpc.PolicyServiceStub(ctx.channel("policy")).GetPolicyInfo(
                policy_pb2.GetPolicyInfoRequest(), timeout=ctx.config.call_timeout_s)
        except grpc.RpcError as err:
            raise errors.from_rpc_error(err) from err
        return ReleaseManager(capability_facts(now.capabilities),
                              knowledge={k.scope: [k.release] for k in now.knowledge_stores if k.release},
                              policies={p: [policies.policy_release] for p in policies.policy_ids
                                        if policies.policy_release})

    authorize = PolicyClient(ctx.channel("policy"), ctx.config.call_timeout_s)
    onboarding = Onboarding(ctx.data_dir / "supervisor-lifecycle.db", registry, release_manager,
                            authorize=policy_adapter(authorize), audit=audit_adapter(audit))
    ctx.on_stop(onboarding.close)
    # With a model service, a request the rules do not understand may be classified by a model.
    models = knows_peer(ctx.config, "model")
    # A registered agent version is reached at its own endpoint, verified as its registered SPIFFE id.
    specialists = GrpcSpecialists(
        ctx.channel, timeout_s=ctx.config.call_timeout_s, model_service=models,
        endpoint_channel=lambda address, identity: ctx.channel(f"{identity.name}@{address}", identity,
                                                               address=address))
    # Which task only reads: a capability mutates when any registered version of it mutates or writes out.
    mutating: dict[str, bool] = {}
    for c in caps:
        mutating[c.capability_id] = mutating.get(c.capability_id, False) or c.risk_profile.can_mutate \
            or c.risk_profile.can_external_write
    traffic = Traffic.build(
        routing, versions=onboarding, probe=specialists.health, mutating=mutating,
        rollback=onboarding.roll_back_canary)
    selector = AgentSelector(registry, tenants, traffic=traffic)
    intents = IntentClassifier(IntentCatalogue.of(domains),
                               GrpcModels(ctx.channel("model"), ctx.config.call_timeout_s)) \
        if models else None
    dispatcher = TaskDispatcher(identity=ctx.identity, registry=registry, signer=signer, specialists=specialists,
                                audit=audit, store=store, task_timeout_s=ctx.config.task_timeout_s,
                                resources=projector.resource_rules, traffic=traffic)
    actions = ReleaseActions(store=store, dispatcher=dispatcher, authorize=authorize,
                             capabilities={c.capability_id: c for c in caps},
                             confirmation_ttl_s=ctx.config.confirmation_ttl_s, domains=domains)
    orchestrator = Orchestrator(
        identity=ctx.identity, registry=registry, selector=selector, tenants=tenants, projector=projector,
        store=store, signer=signer, specialists=specialists, audit=audit,
        verify_assertion=functools.partial(assertion.verify, key=idp_key), authorize=authorize,
        task_timeout_s=ctx.config.task_timeout_s, actions=actions, revoker=specialists, domains=domains,
        intents=intents, traffic=traffic)
    center = DecisionCenter(store=store, actions=actions, authorize=authorize, dispatcher=dispatcher,
                            visible=orchestrator.visible, snapshot=orchestrator.snapshot, domains=domains,
                            continue_past_limit=orchestrator.continue_past_limit)
    events = EventHandler(store=store, dispatcher=dispatcher, tenants=tenants, domains=domains)
    orchestrator.end_interrupted()
    ctx.on_stop(orchestrator.close)
    ctx.on_stop(store.close)
    ctx.on_stop(registry.close)
    if database.is_postgresql(url):
        assert url is not None
        ctx.health_check("database executions", database.postgresql_check(url), tolerate=1)
        ctx.check_database(ctx.data_dir / "supervisor-agents.db")
    else:
        for db in ("supervisor.db", "supervisor-agents.db"):
            ctx.check_database(ctx.data_dir / db)
    ctx.require_peer("audit")
    ctx.require_peer("policy")
    supervisor_grpc.add_SupervisorServiceServicer_to_server(SupervisorServicer(orchestrator, actions, events), server)
    dc_grpc.add_DecisionCenterServiceServicer_to_server(DecisionCenterServicer(orchestrator, center), server)
    evaluator = evaluation.Evaluator(identity=ctx.identity, signer=signer, timeout_s=ctx.config.task_timeout_s)

    def evaluation_runner(user: assertion.UserIdentity) -> EvaluationRunner:
        return evaluation.runner(evaluator, functools.partial(_reach_version, specialists), tenant_id=user.tenant_id,
                                 user_id=user.user_id)

    registry_grpc.add_AgentRegistryServiceServicer_to_server(
        AgentRegistryServicer(registry, selector, audit, onboarding, orchestrator.authenticate,
                              evaluation_runner=evaluation_runner), server)


def _reach_version(specialists: GrpcSpecialists, record: AgentVersionRecord) -> evaluation.RunTask:
    """RunTask on one agent version's process, as the dispatcher reaches it: a registered version at its
    endpoint, verified as its SPIFFE id; a shipped one at its configured address."""
    endpoint = Endpoint(record.agent_id, record.version, record.endpoint, record.spiffe_id)

    def run_task(request: spec_pb2.RunTaskRequest, timeout_s: float) -> common_pb2.AgentResult:
        return specialists.start(record.agent_id, request, timeout_s, endpoint=endpoint).result()

    return run_task

def replica_name(replica: int) -> str:
    """The process name of supervisor replica ``replica`` (1: ``supervisor``, then ``supervisor-2``, …)."""
    return "supervisor" if replica <= 1 else f"supervisor-{replica}"


def spec(args: argparse.Namespace) -> ServiceSpec:
    """The supervisor role (one replica: its own name, port and address file; the same identity)."""
    return ServiceSpec(replica_name(args.replica), spiffe.service("supervisor"), SERVICES, register)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = base_parser("supervisor_svc", "agentmesh supervisor")
    parser.add_argument("--replica", type=int, default=1,
                        help="which supervisor replica this is (1, 2, …; more than one needs a PostgreSQL "
                             "database_url)")
    return run(spec, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
