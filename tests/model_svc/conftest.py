"""The model gateway against a real sandbox model server (loopback HTTP), with fake policy and audit ports."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import errors, grants, signing
from agentmesh.config import DEFAULT_MODEL_BACKENDS, ModelBackend
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from model_sandbox import ModelSandbox
from model_svc.backends import ChatBackend
from model_svc.gateway import ModelGateway
from model_svc.ledger import BudgetLedger
from model_svc.prompting import PromptRegistry
from model_svc.routing import Router

SUPERVISOR = "spiffe://agentmesh.local/svc/supervisor"
RISK_AGENT = "spiffe://agentmesh.local/agent/risk-agent"


@dataclass
class FakePolicy:
    """Allows the (agent, model) pairs in ``allowed``; a fallback also needs ``fallback``."""

    allowed: set[tuple[str, str]] = field(default_factory=lambda: {
        (a, m) for a in ("risk-agent", "supervisor") for m in ("sandbox-small", "sandbox-large")})
    fallback: set[tuple[str, str]] = field(default_factory=set)
    down: bool = False
    asked: list[policy_pb2.AuthorizeRequest] = field(default_factory=list)

    def __call__(self, request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        if self.down:
            raise errors.Unavailable("policy down", reason="UNAVAILABLE")
        self.asked.append(request)
        key = (request.agent.agent_id, request.resource.id)
        ok = key in self.allowed and (not request.context.model_fallback or key in self.fallback)
        code = "model.use" if ok else ("model.fallback_not_permitted" if key in self.allowed else
                                       "model.not_permitted")
        return policy_pb2.AuthorizeResponse(decision=common_pb2.PolicyDecision(
            decision_id=f"d-{len(self.asked)}", effect=common_pb2.POLICY_EFFECT_ALLOW if ok
            else common_pb2.POLICY_EFFECT_DENY, reason_codes=[code], policy_version="sha256:test"))


@dataclass
class FakeAudit:
    """Keeps every record; ``down`` refuses the durable ones."""

    records: list[audit_pb2.AuditRecord] = field(default_factory=list)
    down: bool = False

    def record(self, event_type: int, **fields: Any) -> audit_pb2.AppendRecordResponse:
        if self.down:
            raise errors.Unavailable("audit down", reason="UNAVAILABLE")
        self.records.append(audit_pb2.AuditRecord(event_type=event_type, **fields))
        return audit_pb2.AppendRecordResponse()

    def record_durably(self, event_type: int, **fields: Any) -> None:
        self.records.append(audit_pb2.AuditRecord(event_type=event_type, **fields))

    def of(self, event_type: int) -> list[audit_pb2.AuditRecord]:
        return [r for r in self.records if r.event_type == event_type]


@dataclass
class World:
    sandbox: ModelSandbox
    gateway: ModelGateway
    policy: FakePolicy
    audit: FakeAudit
    ledger: BudgetLedger
    signer: grants.GrantSigner
    grant: Callable[..., tuple[common_pb2.SignedTaskGrant, common_pb2.AgentPrincipal]]


def budget(tokens: int = 5000, calls: int = 5, cost: float = 1.0) -> common_pb2.AgentBudget:
    return common_pb2.AgentBudget(max_tokens=tokens, max_model_calls=calls, max_model_cost=cost)


@pytest.fixture
def sandbox() -> Iterator[ModelSandbox]:
    server = ModelSandbox(admin_token="t").start()
    try:
        yield server
    finally:
        server.stop()


def backends_for(url: str, configs: tuple[ModelBackend, ...] = DEFAULT_MODEL_BACKENDS,
                 timeout_s: float = 2.0) -> dict[str, ChatBackend]:
    return {b.id: ChatBackend(b.model_copy(update={"timeout_s": timeout_s}), url) for b in configs}


@pytest.fixture
def world(sandbox: ModelSandbox, tmp_path: Path) -> Iterator[World]:
    key = Ed25519PrivateKey.generate()
    signer = grants.GrantSigner(key)
    policy, audit = FakePolicy(), FakeAudit()
    ledger = BudgetLedger(tmp_path / "ledger.db")
    clients = backends_for(sandbox.base_url)
    gateway = ModelGateway(prompts=PromptRegistry.load(), router=Router(DEFAULT_MODEL_BACKENDS), backends=clients,
                           ledger=ledger, authorize=policy, audit=audit,
                           trusted_grant_keys={signing.key_id(key.public_key()): key.public_key()})

    def make(audience: str = RISK_AGENT, *, execution_id: str = "exe-1", task_id: str = "task-risk",
             task_budget: common_pb2.AgentBudget | None = None,
             execution_budget: common_pb2.AgentBudget | None = None, tenant: str = "acme",
             ttl: dt.timedelta = dt.timedelta(minutes=5),
             no_budget: bool = False) -> tuple[common_pb2.SignedTaskGrant, common_pb2.AgentPrincipal]:
        signed = signer.issue(
            issuer=SUPERVISOR, audience=audience, execution_id=execution_id, task_id=task_id, tenant_id=tenant,
            user_id="alice", assertion_digest="a" * 64, capabilities=[], roles=("analyst",), ttl=ttl,
            model_budgets=None if no_budget else (task_budget or budget(), execution_budget or budget()))
        name = audience.rsplit("/", 1)[-1]
        return signed, common_pb2.AgentPrincipal(agent_id=name, execution_id=execution_id, grants=[signed])

    try:
        yield World(sandbox, gateway, policy, audit, ledger, signer, make)
    finally:
        for c in clients.values():
            c.close()
        ledger.close()


@pytest.fixture
def w(world: World) -> World:
    """Short for ``world``."""
    return world
