"""Plain domain objects of the policy engine.

They mirror the ``agentmesh.v1`` messages field for field so the servicer's
mapping is mechanical (an absent sub-message is ``None``, an unset string is
``""``), but they import nothing from protobuf or gRPC. Enum members are named
after the proto values without their prefix: ``ActorType.USER`` is
``ACTOR_TYPE_USER``, so ``ActorType[name.removeprefix("ACTOR_TYPE_")]`` maps
one to the other.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime


class ActorType(enum.Enum):
    """Who started the work (``agentmesh.v1.ActorType``)."""

    UNSPECIFIED = "UNSPECIFIED"
    USER = "USER"
    SYSTEM = "SYSTEM"


class OperationKind(enum.Enum):
    """What the operation is (``agentmesh.v1.OperationKind``)."""

    UNSPECIFIED = "UNSPECIFIED"
    INVOKE = "INVOKE"
    OVERRIDE = "OVERRIDE"
    #: Deciding a review in the Decision Center (PRD §41).
    REVIEW = "REVIEW"
    #: Reading an execution (status, results, evidence): the requester, or a
    #: holder of ``execution.read`` in the tenant (reviewer, operator, admin).
    READ_EXECUTION = "READ_EXECUTION"
    #: Cancelling an execution: the requester, or a holder of
    #: ``execution.cancel`` in the tenant (admin).
    CANCEL_EXECUTION = "CANCEL_EXECUTION"
    #: Calling a language model through the model service: the resource is the
    #: model (type ``Model``), which the tenant's data lets the agent use or not.
    USE_MODEL = "USE_MODEL"
    #: Registering an agent version or moving it along its lifecycle (PRD §57):
    #: a holder of ``agent.manage`` (operator, admin); resource ``AgentVersion``.
    MANAGE_AGENT = "MANAGE_AGENT"
    #: Approving an evaluated agent version: a holder of ``agent.approve`` who
    #: did not register it (``context.subject_requester_id``).
    APPROVE_AGENT = "APPROVE_AGENT"
    #: Running a task on the fallback agent a primary agent declares, because the
    #: primary is unavailable (PRD §47): resource the fallback's AgentVersion, the
    #: agent the fallback agent; a holder of ``agent.fallback``.
    USE_FALLBACK_AGENT = "USE_FALLBACK_AGENT"


class RiskLevel(enum.Enum):
    """Declared potential impact (``agentmesh.v1.RiskLevel``).

    UNSPECIFIED is treated as high risk by the policies: fail closed.
    """

    UNSPECIFIED = "UNSPECIFIED"
    LOW = "LOW"
    MEDIUM = "MEDIUM"
    HIGH = "HIGH"
    CRITICAL = "CRITICAL"


class Effect(enum.Enum):
    """Outcome of a decision (``agentmesh.v1.PolicyEffect``)."""

    ALLOW = "ALLOW"
    DENY = "DENY"
    CONFIRMATION_REQUIRED = "CONFIRMATION_REQUIRED"
    HUMAN_APPROVAL_REQUIRED = "HUMAN_APPROVAL_REQUIRED"


class KillSwitchScope(enum.Enum):
    """What a kill switch stops (``agentmesh.v1.KillSwitchScope``)."""

    UNSPECIFIED = "UNSPECIFIED"
    AGENT = "AGENT"
    CAPABILITY = "CAPABILITY"
    TENANT = "TENANT"
    PLATFORM = "PLATFORM"


@dataclass(frozen=True, slots=True)
class UserContext:
    """The end user, as verified from the signed assertion (``UserContext``)."""

    #: Tenant the user belongs to; the work runs in this tenant.
    tenant_id: str = ""
    #: User id inside the tenant. Required for USER actors.
    user_id: str = ""
    session_id: str = ""
    conversation_id: str = ""
    #: Role names inside the tenant, e.g. ``("viewer",)``. Unknown names grant nothing.
    roles: tuple[str, ...] = ()
    #: SHA-256 of the assertion; carried for audit, not used to decide.
    assertion_digest: str = ""


@dataclass(frozen=True, slots=True)
class AgentPrincipal:
    """The acting agent (``AgentPrincipal``) plus its registered capabilities.

    ``capabilities`` is not in the proto message: the capability runtime fills
    it from the agent registry. Registration is necessary but never sufficient.
    """

    agent_id: str = ""
    agent_version: str = ""
    execution_id: str = ""
    parent_agent_id: str = ""
    #: Principals from the user to this agent, e.g. ``("user:acme/alice", "agent:training-agent")``.
    delegation_chain: tuple[str, ...] = ()
    #: Capability ids the agent has registered.
    capabilities: tuple[str, ...] = ()
    #: Knowledge scopes the agent has registered (its manifest's ``knowledge_scopes``, PRD §31).
    knowledge_scopes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceRef:
    """The resource an operation touches (``ResourceRef``)."""

    #: e.g. ``"WorkPermit"``.
    type: str = ""
    id: str = ""
    #: The tenant that owns the resource.
    tenant_id: str = ""


@dataclass(frozen=True, slots=True)
class RiskProfile:
    """The capability's declared potential impact (``RiskProfile``)."""

    max_risk: RiskLevel = RiskLevel.UNSPECIFIED
    can_mutate: bool = False
    can_external_write: bool = False
    can_bulk_operate: bool = False


@dataclass(frozen=True, slots=True)
class OperationContext:
    """Context of the operation as the capability runtime knows it (``OperationContext``)."""

    #: The user confirmed this exact action.
    confirmation_given: bool = False
    #: Id of a human approval; ``""`` when none.
    human_approval_id: str = ""
    #: User id of the human who approved; an agent's or the requester's own
    #: approval never counts.
    human_approver_id: str = ""
    risk_profile: RiskProfile = field(default_factory=RiskProfile)
    #: Reason given for an override; required for OVERRIDE.
    override_reason: str = ""
    #: For REVIEW and OVERRIDE: who asked for the work under review (user id,
    #: or the system actor), so nobody decides on their own request. For
    #: READ_EXECUTION and CANCEL_EXECUTION: the execution's requester (user id,
    #: or the system actor), so the requester reaches their own. Required for
    #: all four; ignored for INVOKE.
    subject_requester_id: str = ""
    #: For USE_MODEL: the model answers as a fallback for one that was unavailable.
    model_fallback: bool = False
    #: For INVOKE: what the calling agent version declared it may do (its manifest's ``risk_profile``);
    #: None when it declared nothing (it may do nothing with any risk: fail closed).
    agent_risk_profile: RiskProfile | None = None


@dataclass(frozen=True, slots=True)
class AuthorizationRequest:
    """One operation to decide (``AuthorizeRequest`` without the trace ids)."""

    user: UserContext | None = None
    actor_type: ActorType = ActorType.UNSPECIFIED
    #: For SYSTEM actors: the service actor, e.g. ``"TrainingExpirationScanner"``.
    system_actor: str = ""
    agent: AgentPrincipal | None = None
    delegation_depth: int = 0
    capability_id: str = ""
    capability_version: str = ""
    resource: ResourceRef | None = None
    context: OperationContext = field(default_factory=OperationContext)
    operation: OperationKind = OperationKind.UNSPECIFIED


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to one request (``PolicyDecision`` plus ``explanation``)."""

    #: Unique id of this decision, recorded in audit.
    decision_id: str
    effect: Effect
    #: The ``@id`` of every policy that decided, or a ``policy.*`` code for
    #: engine-level outcomes (evaluation error, timeout, ...). Never empty.
    reason_codes: tuple[str, ...]
    #: Digest of the policy set, schema and data that decided.
    policy_version: str
    #: Human-readable text built from the reason codes, for operators.
    explanation: str

    @property
    def allowed(self) -> bool:
        """True only for an unconditional ALLOW."""
        return self.effect is Effect.ALLOW


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    """What ``GetPolicyInfo`` returns."""

    policy_version: str
    #: The ``@id`` of every policy in the set, sorted.
    policy_ids: tuple[str, ...]
    #: The policy set's declared release (semver; "" when it declares none).
    policy_release: str = ""


@dataclass(frozen=True, slots=True)
class KillSwitch:
    """The current state of one kill switch (``KillSwitch``)."""

    scope: KillSwitchScope
    #: Agent id, capability id or tenant id; ``""`` for the platform scope.
    target: str
    #: True: the target is stopped.
    enabled: bool
    reason: str
    #: Identity of the operator who changed it (their SPIFFE id).
    changed_by: str
    #: When it was changed, timezone-aware UTC.
    changed_at: datetime

    @property
    def key(self) -> str:
        """The string the engine is fed with, e.g. ``"agent:training-agent"``."""
        return kill_switch_key(self.scope, self.target)


@dataclass(frozen=True, slots=True)
class KillSwitchChange:
    """One recorded change of a kill switch: who, why and when."""

    #: Monotonic sequence number of the change.
    seq: int
    scope: KillSwitchScope
    target: str
    enabled: bool
    reason: str
    changed_by: str
    changed_at: datetime


PLATFORM_KEY = "platform"

_KEY_PREFIXES: dict[KillSwitchScope, str] = {
    KillSwitchScope.AGENT: "agent:",
    KillSwitchScope.CAPABILITY: "capability:",
    KillSwitchScope.TENANT: "tenant:",
}


def kill_switch_key(scope: KillSwitchScope, target: str) -> str:
    """Encodes a switch as the engine's context string.

    ``"platform"``, ``"tenant:acme"``, ``"agent:training-agent"`` or
    ``"capability:training.external.update"``.
    """
    if scope is KillSwitchScope.PLATFORM:
        return PLATFORM_KEY
    try:
        return _KEY_PREFIXES[scope] + target
    except KeyError:
        raise ValueError(f"kill switch scope {scope.name} has no key") from None


def parse_kill_switch_key(key: str) -> tuple[KillSwitchScope, str]:
    """Inverse of :func:`kill_switch_key`; ``ValueError`` for anything else."""
    if key == PLATFORM_KEY:
        return KillSwitchScope.PLATFORM, ""
    for scope, prefix in _KEY_PREFIXES.items():
        if key.startswith(prefix) and len(key) > len(prefix):
            return scope, key[len(prefix) :]
    raise ValueError(f"not a kill switch key: {key!r}")
