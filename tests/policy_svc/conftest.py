"""Fixtures for the policy engine tests: the real policy set and request builders."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentmesh.tenant_file import load_tenant_file
from policy_svc.engine import DEFAULT_POLICY_DIR, PolicyEngine
from policy_svc.model import (
    ActorType,
    AgentPrincipal,
    AuthorizationRequest,
    OperationContext,
    OperationKind,
    ResourceRef,
    RiskLevel,
    RiskProfile,
    UserContext,
)
from policy_svc.tenants import check_definitions

ALL_CAPABILITIES = (
    "workPermit.get",
    "workPermit.search",
    "workPermit.updateValidity",
    "workPermit.release",
    "training.getStatus",
    "training.external.getStatus",
    "training.external.update",
    "risk.evaluate",
    "employee.get",
    "medical.getEligibility",
    "compliance.getChecklist",
    "worker.get",
    "knowledge.search",
)

RequestFactory = Callable[..., AuthorizationRequest]


DEMO_TENANTS = Path(__file__).resolve().parents[2] / "agentmesh" / "data" / "demo_tenants.yaml"
AGENTS = ("work-permit-agent", "training-agent", "risk-agent", "compliance-agent", "employee-agent", "medical-agent")


def with_demo_tenants(engine: PolicyEngine) -> PolicyEngine:
    """The engine with the demo tenants (acme, globex) in force, as `agentmesh up` applies them."""
    checked = check_definitions(load_tenant_file(DEMO_TENANTS).definitions, engine, AGENTS)
    engine.set_tenants({d.tenant_id: roles for d, roles in checked})
    return engine


@pytest.fixture(scope="session")
def engine() -> PolicyEngine:
    """The shipped policy set with the demo tenants, as the service runs it."""
    return with_demo_tenants(PolicyEngine.load(DEFAULT_POLICY_DIR))


@pytest.fixture(scope="session")
def validating_engine() -> PolicyEngine:
    """The shipped policy set with the demo tenants, validating every request against the schema."""
    return with_demo_tenants(PolicyEngine.load(DEFAULT_POLICY_DIR, validate_requests=True))


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    """A private copy of the shipped policy directory, to break on purpose."""
    target = tmp_path / "policies"
    shutil.copytree(DEFAULT_POLICY_DIR, target)
    return target


DECLARES_EVERYTHING = RiskProfile(RiskLevel.CRITICAL, True, True, True)
"""The test agent's declared risk profile: it may do anything (the rules under test decide)."""


def build_request(
    *,
    tenant: str = "acme",
    user_id: str = "alice",
    roles: tuple[str, ...] = ("viewer",),
    actor_type: ActorType = ActorType.USER,
    system_actor: str = "",
    agent_id: str = "permit-agent",
    agent_capabilities: tuple[str, ...] = ALL_CAPABILITIES,
    agent_knowledge_scopes: tuple[str, ...] = (),
    delegation_chain: tuple[str, ...] | None = None,
    delegation_depth: int = 2,
    capability: str = "workPermit.get",
    resource_tenant: str | None = None,
    resource_type: str = "WorkPermit",
    resource_id: str = "WP-10231",
    operation: OperationKind = OperationKind.INVOKE,
    max_risk: RiskLevel = RiskLevel.LOW,
    can_mutate: bool = False,
    can_external_write: bool = False,
    can_bulk_operate: bool = False,
    confirmation_given: bool = False,
    approval_id: str = "",
    approver_id: str = "",
    override_reason: str = "",
    subject_requester_id: str = "",
    model_fallback: bool = False,
    agent_risk: RiskProfile | None = DECLARES_EVERYTHING,
) -> AuthorizationRequest:
    """A well-formed request; every keyword changes one aspect of it. The agent declared it may do
    everything (``agent_risk``) unless a test says otherwise."""
    chain = delegation_chain
    if chain is None:
        chain = (f"user:{tenant}/{user_id}", "svc:supervisor", f"agent:{agent_id}")
    return AuthorizationRequest(
        user=UserContext(
            tenant_id=tenant,
            user_id=user_id,
            session_id="s-1",
            conversation_id="c-1",
            roles=roles,
        ),
        actor_type=actor_type,
        system_actor=system_actor,
        agent=AgentPrincipal(
            agent_id=agent_id,
            agent_version="1.0.0",
            delegation_chain=chain,
            capabilities=agent_capabilities,
            knowledge_scopes=agent_knowledge_scopes,
        ),
        delegation_depth=delegation_depth,
        capability_id=capability,
        capability_version="1.0.0",
        resource=ResourceRef(
            type=resource_type,
            id=resource_id,
            tenant_id=resource_tenant if resource_tenant is not None else tenant,
        ),
        context=OperationContext(
            confirmation_given=confirmation_given,
            human_approval_id=approval_id,
            human_approver_id=approver_id,
            risk_profile=RiskProfile(
                max_risk=max_risk,
                can_mutate=can_mutate,
                can_external_write=can_external_write,
                can_bulk_operate=can_bulk_operate,
            ),
            override_reason=override_reason,
            subject_requester_id=subject_requester_id,
            model_fallback=model_fallback,
            agent_risk_profile=agent_risk,
        ),
        operation=operation,
    )


@pytest.fixture
def make_request() -> RequestFactory:
    """Builds a well-formed request; keywords as in :func:`build_request`."""
    return build_request


@pytest.fixture
def modify() -> Callable[..., Any]:
    """``dataclasses.replace``, for one-off changes to a built request."""
    return replace
