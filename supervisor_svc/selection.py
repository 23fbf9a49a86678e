"""Agent discovery (PRD §9) and explainable selection (PRD §10–11).

Discovery is a deterministic filter over the registry, in this order; the
first rule an agent fails is recorded as its exclusion reason:

1. ``TENANT_NOT_ALLOWED``      the tenant's configuration does not allow the agent
2. ``NOT_ACTIVE``              its lifecycle status is not ACTIVE (e.g. DISABLED)
3. ``DOMAIN_MISMATCH``         it shares none of the requested domains
4. ``CAPABILITY_MISSING``      it lacks a required capability
5. ``KNOWLEDGE_SCOPE_MISSING`` it lacks a required knowledge scope

Every remaining candidate gets an :class:`AgentSelectionScore`; each component
is in [0, 1] and the final score is their weighted sum (:data:`WEIGHTS`):

=============  ======  ========================================================================
component      weight  how it is computed
=============  ======  ========================================================================
domain         0.30    Jaccard(requested domains, agent domains); 1 when none requested
capability     0.25    |required| / |agent capabilities| — the agent holding the fewest
                       capabilities beyond the need wins (least privilege); 1 when none required
knowledge      0.15    Jaccard(requested scopes, agent scopes); 1 when none requested
availability   0.15    the live health and circuit of the version the task would go to
                       (supervisor_svc.signals): SERVING 1, half-open circuit 0.5, NOT_SERVING,
                       unreachable or circuit open 0; 1.0 when no health source is attached
cost           0.05    1 / (1 + declared cost)
history        0.10    the success rate of the agent's last finished tasks (supervisor_svc.signals);
                       0.5 while it has none (neither trusted nor penalised)
=============  ======  ========================================================================

Each score also names the version the execution's task would go to and why (the
agent's ACTIVE version, or its CANARY for the canary's share: supervisor_svc.routing),
what its availability and history rest on, the task it was for and whether it was chosen.

Components and the final score are rounded to 4 decimals so that float noise
never decides; ties are broken by lower cost, then agent id. The scores are
kept in the execution record. A score never grants anything (§11): the chosen
agent still acts only with the user's authority, through policy.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from agentmesh.v1 import common_pb2
from supervisor_svc.errors import NoAgentAvailable
from supervisor_svc.registry import AgentEntry, AgentRegistry
from supervisor_svc.routing import Route
from supervisor_svc.tenants import TenantSource
from supervisor_svc.traffic import Traffic

__all__ = [
    "WEIGHTS",
    "AgentSelector",
    "Discovery",
    "Exclusion",
    "Requirement",
    "Selection",
    "SelectionWeights",
    "Signals",
    "discover",
    "score",
]


@dataclass(frozen=True)
class SelectionWeights:
    """Weights of the score components; they sum to 1."""

    domain: float = 0.30
    capability: float = 0.25
    knowledge: float = 0.15
    availability: float = 0.15
    cost: float = 0.05
    history: float = 0.10

    def __post_init__(self) -> None:
        total = self.domain + self.capability + self.knowledge + self.availability + self.cost + self.history
        if abs(total - 1.0) > 1e-9 or min(self.domain, self.capability, self.knowledge, self.availability,
                                          self.cost, self.history) < 0:
            raise ValueError("selection weights must be non-negative and sum to 1")


WEIGHTS = SelectionWeights()
"""The documented default weights."""

DEFAULT_HISTORY = 0.5
"""History score of an agent without history: neutral, neither trusted nor penalised."""


@dataclass(frozen=True)
class Requirement:
    """What a task needs from an agent."""

    domains: tuple[str, ...] = ()
    required_capabilities: tuple[str, ...] = ()
    knowledge_scopes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Signals:
    """Run-time inputs to selection, each in [0, 1] per agent id."""

    availability: Mapping[str, float] = field(default_factory=dict)
    """e.g. 0 while the agent's process fails health checks; missing = 1.0."""
    history: Mapping[str, float] = field(default_factory=dict)
    """Past success rate; missing = :data:`DEFAULT_HISTORY`."""


@dataclass(frozen=True)
class Exclusion:
    """Why discovery left an agent out."""

    agent_id: str
    reason: str
    """``TENANT_NOT_ALLOWED``, ``NOT_ACTIVE``, ``DOMAIN_MISMATCH``, ``CAPABILITY_MISSING``,
    ``KNOWLEDGE_SCOPE_MISSING``."""
    detail: str


@dataclass(frozen=True)
class Discovery:
    """The candidates for a requirement, best first, with their scores and the excluded agents."""

    candidates: tuple[AgentEntry, ...]
    scores: tuple[common_pb2.AgentSelectionScore, ...]
    """One per candidate, same order."""
    excluded: tuple[Exclusion, ...]
    routes: Mapping[str, Route] = field(default_factory=dict)
    """By candidate agent id: the version its task would go to (with a :class:`Traffic`)."""


@dataclass(frozen=True)
class Selection:
    """The chosen agent and every candidate's score (for the execution record)."""

    agent: AgentEntry
    scores: tuple[common_pb2.AgentSelectionScore, ...]
    route: Route | None = None
    """The version the chosen agent's task goes to (with a :class:`Traffic`)."""


def _jaccard(wanted: Collection[str], offered: Collection[str]) -> float:
    if not wanted:
        return 1.0
    union = set(wanted) | set(offered)
    return len(set(wanted) & set(offered)) / len(union)


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def score(
    entry: AgentEntry, requirement: Requirement, signals: Signals | None = None, weights: SelectionWeights = WEIGHTS
) -> common_pb2.AgentSelectionScore:
    """The explainable score of one agent for a requirement (see the module docstring)."""
    signals = signals or Signals()
    m = entry.manifest
    domain = _jaccard(requirement.domains, m.domains)
    if requirement.required_capabilities:
        covered = len(set(requirement.required_capabilities) & set(m.capabilities))
        capability = covered / max(len(m.capabilities), len(requirement.required_capabilities))
    else:
        capability = 1.0
    knowledge = _jaccard(requirement.knowledge_scopes, m.knowledge_scopes)
    availability = _clamp(signals.availability.get(m.agent_id, 1.0))
    cost = 1.0 / (1.0 + m.cost)
    history = _clamp(signals.history.get(m.agent_id, DEFAULT_HISTORY))
    parts = [round(v, 4) for v in (domain, capability, knowledge, availability, cost, history)]
    final = round(
        weights.domain * parts[0] + weights.capability * parts[1] + weights.knowledge * parts[2]
        + weights.availability * parts[3] + weights.cost * parts[4] + weights.history * parts[5],
        4,
    )
    return common_pb2.AgentSelectionScore(
        agent_id=m.agent_id, domain_score=parts[0], capability_score=parts[1], knowledge_score=parts[2],
        availability_score=parts[3], cost_score=parts[4], history_score=parts[5], final_score=final,
    )


def _exclusion(entry: AgentEntry, requirement: Requirement, allowed: Collection[str]) -> Exclusion | None:
    m = entry.manifest
    if m.agent_id not in allowed:
        return Exclusion(m.agent_id, "TENANT_NOT_ALLOWED", "not allowed by the tenant's configuration")
    if not entry.active:
        return Exclusion(m.agent_id, "NOT_ACTIVE", f"status is {entry.status.value}")
    if requirement.domains and not set(requirement.domains) & set(m.domains):
        return Exclusion(m.agent_id, "DOMAIN_MISMATCH", f"domains {list(m.domains)} share none of "
                                                        f"{list(requirement.domains)}")
    missing = sorted(set(requirement.required_capabilities) - set(m.capabilities))
    if missing:
        return Exclusion(m.agent_id, "CAPABILITY_MISSING", f"lacks {', '.join(missing)}")
    missing = sorted(set(requirement.knowledge_scopes) - set(m.knowledge_scopes))
    if missing:
        return Exclusion(m.agent_id, "KNOWLEDGE_SCOPE_MISSING", f"lacks {', '.join(missing)}")
    return None


def discover(
    agents: Iterable[AgentEntry],
    allowed_agents: Collection[str],
    requirement: Requirement,
    signals: Signals | None = None,
    weights: SelectionWeights = WEIGHTS,
) -> Discovery:
    """Filter and rank agents deterministically.

    Args:
        agents: The registry's entries with their current status.
        allowed_agents: The agents the tenant may use.
        requirement: What the task needs.
        signals: Availability and history, if known.
        weights: Score weights.
    """
    ranked: list[tuple[tuple[float, float, str], AgentEntry, common_pb2.AgentSelectionScore]] = []
    excluded: list[Exclusion] = []
    for entry in sorted(agents, key=lambda e: e.agent_id):
        why = _exclusion(entry, requirement, allowed_agents)
        if why is not None:
            excluded.append(why)
            continue
        s = score(entry, requirement, signals, weights)
        ranked.append(((-s.final_score, entry.manifest.cost, entry.agent_id), entry, s))
    ranked.sort(key=lambda item: item[0])
    return Discovery(tuple(e for _, e, _ in ranked), tuple(s for _, _, s in ranked), tuple(excluded))


PLAN_TENANT_AGE_S = 30.0
"""How old a read of the tenant's configuration a selection may use: the execution being planned read it
when it was accepted, moments before (the configuration is read fresh for every execution)."""


class AgentSelector:
    """Discovery and selection over the live registry and the tenants' configuration."""

    def __init__(
        self,
        registry: AgentRegistry,
        tenants: TenantSource,
        *,
        signals: Callable[[], Signals] | None = None,
        weights: SelectionWeights = WEIGHTS,
        traffic: Traffic | None = None,
    ) -> None:
        """Args:
        registry: The agent registry (status is read live, so DISABLED applies at once).
        tenants: Per-tenant allowed agents (the tenant directory).
        signals: Fixed availability / history signals (tests); ``traffic`` gives the live ones.
        weights: Score weights.
        traffic: Routes (the version each candidate's task would go to), live availability and history.
        """
        self._registry = registry
        self._tenants = tenants
        self._signals = signals
        self._weights = weights
        self._traffic = traffic

    def discover(self, tenant_id: str, requirement: Requirement, *, max_age_s: float = 0.0,
                 execution_id: str = "") -> Discovery:
        """Candidates for the tenant and requirement, best first (``DiscoverAgents``).

        ``max_age_s``: a read of the tenant's configuration that recent will do (a plan's selections
        read the one its execution was accepted with). ``execution_id``: the execution the task is for
        (the canary split); none (DiscoverAgents): each candidate's ACTIVE version.

        Raises:
            TenantNotConfigured: the tenant has no definition.
        """
        allowed = self._tenants.get(tenant_id, max_age_s=max_age_s).allowed_agents
        entries = self._registry.list()
        signals = self._signals() if self._signals else None
        traffic = self._traffic
        routes: dict[str, Route] = {}
        why_available: dict[str, str] = {}
        why_history: dict[str, str] = {}
        if traffic is not None:
            availability: dict[str, float] = {}
            history: dict[str, float] = {}
            for entry in entries:
                if _exclusion(entry, requirement, allowed) is not None:
                    continue  # excluded: nothing to route, nobody to ask
                route = traffic.route(entry, tenant_id=tenant_id, execution_id=execution_id,
                                      required_capabilities=requirement.required_capabilities)
                routes[entry.agent_id] = route
                reading = traffic.reading(route.endpoint)
                availability[entry.agent_id], why_available[entry.agent_id] = reading.score, reading.reason
                rate, why_history[entry.agent_id] = traffic.history.success_rate(entry.agent_id)
                if rate is not None:
                    history[entry.agent_id] = rate
            signals = Signals(availability={**availability, **(signals.availability if signals else {})},
                              history={**history, **(signals.history if signals else {})})
        found = discover(entries, allowed, requirement, signals, self._weights)
        for s, entry in zip(found.scores, found.candidates, strict=True):
            routed = routes.get(entry.agent_id)
            s.agent_version = routed.version if routed is not None else entry.manifest.version
            s.version_reason = routed.reason if routed is not None else "ACTIVE version"
            given = signals is not None and entry.agent_id in signals.availability
            s.availability_reason = why_available.get(entry.agent_id, "given" if given else "no health source")
            given = signals is not None and entry.agent_id in signals.history
            s.history_reason = why_history.get(entry.agent_id, "given" if given else "no finished task yet")
        return Discovery(found.candidates, found.scores, found.excluded, routes)

    def select(self, tenant_id: str, requirement: Requirement, *, execution_id: str = "") -> Selection:
        """The best candidate, and the version its task goes to for ``execution_id``.

        Raises:
            NoAgentAvailable: no candidate; ``excluded`` says why each agent was left out.
        """
        found = self.discover(tenant_id, requirement, max_age_s=PLAN_TENANT_AGE_S, execution_id=execution_id)
        if not found.candidates:
            wanted = ", ".join([*requirement.domains, *requirement.required_capabilities]) or "the task"
            raise NoAgentAvailable(
                f"no ACTIVE agent allowed for this tenant can handle {wanted}",
                excluded={x.agent_id: f"{x.reason}: {x.detail}" for x in found.excluded},
            )
        chosen = found.candidates[0]
        return Selection(chosen, found.scores, found.routes.get(chosen.agent_id))
