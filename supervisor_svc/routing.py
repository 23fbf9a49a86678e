"""Which version of an agent a task goes to, and where (PRD §57): version-aware dispatch and the canary split.

The selection chooses an *agent*; the router chooses the agent's *version* for one
execution and says where it listens:

* an agent's **ACTIVE version** takes the traffic: a registered version at the endpoint it
  was registered with (its process must present the registered SPIFFE id), or the version
  shipped as a manifest file at the address the mesh's configuration gives the agent;
* while the agent has a **CANARY version**, a share of each tenant's executions goes to it
  instead: an execution is the canary's when its *bucket*, ``SHA-256(execution id, NUL,
  agent id)`` read as a number in [0, 100), is below the share (``canary.share_percent`` of
  the routing file, or the tenant's entry in ``canary.tenants``). The same execution always
  gets the same version (a resumed one too), and different agents split independently.
  With several CANARY versions the latest registered one is the canary.

Every route carries why it was chosen (``"canary share 20%: execution bucket 7.31 < 20"``,
``"ACTIVE version"``), which the selection records with the scores.

The routing file (``supervisor_svc/config/routing.yaml``, or the config's ``routing_file``)
also holds the retry, availability and history settings (:mod:`supervisor_svc.attempts`,
:mod:`supervisor_svc.signals`). It is read at start; a bad one stops the supervisor naming
the file, the field and the line.

Plain domain code: no gRPC here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Protocol

import pydantic

from agentmesh.agent_manifest import AGENT_ID_PATTERN, AgentManifest
from agentmesh.vocabulary import LifecycleStatus
from supervisor_svc._datafile import load_document, validation_error
from supervisor_svc.registry import AgentEntry

__all__ = [
    "CONFIG_ENDPOINT",
    "AvailabilityConfig",
    "CanaryConfig",
    "Endpoint",
    "HistoryConfig",
    "RetryConfig",
    "Route",
    "Router",
    "RoutingConfig",
    "VersionRecord",
    "VersionSource",
    "canary_bucket",
    "default_routing_file",
    "load_routing",
]

CONFIG_ENDPOINT = "config"
"""How an attempt names the address the mesh's configuration gives an agent (a shipped version)."""


# --- configuration ------------------------------------------------------------------------------

@dataclass(frozen=True)
class CanaryConfig:
    """The canary split and its automatic rollback (PRD §57)."""

    share_percent: float = 20.0
    """Share of a tenant's executions whose task for an agent goes to the agent's CANARY version, 0 to 100."""
    tenants: Mapping[str, float] = field(default_factory=dict)
    """Per tenant id, a share replacing ``share_percent`` (0: that tenant's work never runs on a canary)."""
    window: int = 20
    """How many of the canary's most recent tasks its failure rate is measured over."""
    min_tasks: int = 5
    """The canary is not judged before it has finished this many tasks."""
    max_failure_rate: float = 0.5
    """A failure rate above this (failed tasks / tasks in the window) rolls the canary back (CANARY -> APPROVED)."""

    def share_for(self, tenant_id: str) -> float:
        """The canary share of one tenant's executions, in percent."""
        return self.tenants.get(tenant_id, self.share_percent)


@dataclass(frozen=True)
class RetryConfig:
    """Agent-level retries of a task whose agent failed transiently (PRD §45); reads only."""

    max_attempts: int = 3
    """Calls of one agent version for one task, the first included (1: no retry)."""
    initial_backoff_ms: int = 200
    """Wait before the first retry."""
    multiplier: float = 2.0
    """Each further wait is the previous one times this."""
    max_backoff_ms: int = 2000
    """No wait is longer."""
    execution_budget: int = 6
    """Retries one execution may make over all its tasks."""

    def backoff_ms(self, retry: int) -> int:
        """The wait before retry number ``retry`` (1 for the first retry): exponential, capped, no jitter."""
        return int(min(self.max_backoff_ms, self.initial_backoff_ms * self.multiplier ** max(0, retry - 1)))


@dataclass(frozen=True)
class AvailabilityConfig:
    """How the supervisor knows whether an agent version's endpoint can take a task."""

    probe_ttl_ms: int = 1000
    """A health answer is reused for this long before the endpoint is asked again."""
    probe_timeout_ms: int = 500
    """Deadline of one health probe."""
    circuit_failures: int = 3
    """Consecutive calls failing UNAVAILABLE or DEADLINE_EXCEEDED that open the endpoint's circuit."""
    circuit_open_ms: int = 10_000
    """How long an open circuit keeps tasks away; then one call is let through (half-open)."""


@dataclass(frozen=True)
class HistoryConfig:
    """The success rate that feeds the selection's history score."""

    window: int = 50
    """How many of an agent's most recent tasks (all its versions) the rate is measured over."""


@dataclass(frozen=True)
class RoutingConfig:
    """The routing file: canary, retry, availability, history."""

    canary: CanaryConfig = CanaryConfig()
    retry: RetryConfig = RetryConfig()
    availability: AvailabilityConfig = AvailabilityConfig()
    history: HistoryConfig = HistoryConfig()


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)


_Percent = Annotated[float | int, pydantic.Field(ge=0, le=100)]
_TenantId = Annotated[str, pydantic.StringConstraints(pattern=AGENT_ID_PATTERN)]


class _CanaryModel(_Strict):
    share_percent: _Percent = 20.0
    tenants: dict[_TenantId, _Percent] = {}
    window: int = pydantic.Field(default=20, ge=1, le=10_000)
    min_tasks: int = pydantic.Field(default=5, ge=1, le=10_000)
    max_failure_rate: float | int = pydantic.Field(default=0.5, ge=0, le=1)

    @pydantic.model_validator(mode="after")
    def _window_holds_min(self) -> _CanaryModel:
        if self.min_tasks > self.window:
            raise ValueError(f"min_tasks ({self.min_tasks}) must not exceed window ({self.window})")
        return self


class _RetryModel(_Strict):
    max_attempts: int = pydantic.Field(default=3, ge=1, le=10)
    initial_backoff_ms: int = pydantic.Field(default=200, ge=0, le=60_000)
    multiplier: float | int = pydantic.Field(default=2.0, ge=1, le=10)
    max_backoff_ms: int = pydantic.Field(default=2000, ge=0, le=60_000)
    execution_budget: int = pydantic.Field(default=6, ge=0, le=1000)


class _AvailabilityModel(_Strict):
    probe_ttl_ms: int = pydantic.Field(default=1000, ge=0, le=600_000)
    probe_timeout_ms: int = pydantic.Field(default=500, ge=10, le=60_000)
    circuit_failures: int = pydantic.Field(default=3, ge=1, le=1000)
    circuit_open_ms: int = pydantic.Field(default=10_000, ge=0, le=3_600_000)


class _HistoryModel(_Strict):
    window: int = pydantic.Field(default=50, ge=1, le=10_000)


class _RoutingModel(_Strict):
    canary: _CanaryModel = _CanaryModel()
    retry: _RetryModel = _RetryModel()
    availability: _AvailabilityModel = _AvailabilityModel()
    history: _HistoryModel = _HistoryModel()


def default_routing_file() -> Path:
    """The routing settings shipped with the supervisor."""
    return Path(__file__).parent / "config" / "routing.yaml"


def load_routing(path: Path | None = None) -> RoutingConfig:
    """The routing settings of ``path`` (default: the shipped file).

    Raises:
        ConfigError: naming the file, the field and the line.
    """
    path = path or default_routing_file()
    doc = load_document(path)
    try:
        m = _RoutingModel.model_validate(doc.data if doc.data is not None else {})
    except pydantic.ValidationError as exc:
        raise validation_error(exc, doc, str(path)) from None
    c, r, a = m.canary, m.retry, m.availability
    return RoutingConfig(
        canary=CanaryConfig(float(c.share_percent), {k: float(v) for k, v in c.tenants.items()}, c.window,
                            c.min_tasks, float(c.max_failure_rate)),
        retry=RetryConfig(r.max_attempts, r.initial_backoff_ms, float(r.multiplier), r.max_backoff_ms,
                          r.execution_budget),
        availability=AvailabilityConfig(a.probe_ttl_ms, a.probe_timeout_ms, a.circuit_failures, a.circuit_open_ms),
        history=HistoryConfig(m.history.window),
    )


# --- versions and routes ------------------------------------------------------------------------

@dataclass(frozen=True)
class Endpoint:
    """Where one agent version listens and whom it must prove to be."""

    agent_id: str
    version: str
    address: str
    """``host:port`` of a registered version; "" for the address the mesh's configuration gives the agent."""
    spiffe_id: str
    """The SPIFFE id its process must present (the agent's own)."""

    @property
    def key(self) -> str:
        """What its health and circuit are kept under: the address, or ``config:<agent>``."""
        return self.address or f"{CONFIG_ENDPOINT}:{self.agent_id}"

    @property
    def shown(self) -> str:
        """The address, or ``config`` (as an attempt records it)."""
        return self.address or CONFIG_ENDPOINT


@dataclass(frozen=True)
class Route:
    """The version of an agent one execution's task goes to, and why."""

    entry: AgentEntry
    """The agent as that version (its manifest and lifecycle status)."""
    endpoint: Endpoint
    canary: bool
    """The version is the agent's CANARY and this execution is in its share."""
    reason: str

    @property
    def agent_id(self) -> str:
        """The agent."""
        return self.entry.agent_id

    @property
    def version(self) -> str:
        """The version."""
        return self.entry.manifest.version


class VersionRecord(Protocol):
    """What the router reads of one agent version (:class:`supervisor_svc.onboarding.AgentVersionRecord`)."""

    @property
    def manifest(self) -> AgentManifest: ...

    @property
    def status(self) -> LifecycleStatus: ...

    @property
    def endpoint(self) -> str: ...

    @property
    def spiffe_id(self) -> str: ...

    @property
    def shipped(self) -> bool: ...


class VersionSource(Protocol):
    """Every version of an agent, shipped first then by registration (:meth:`Onboarding.list`)."""

    def list(self, agent_id: str = "") -> Sequence[VersionRecord]: ...


def canary_bucket(execution_id: str, agent_id: str) -> float:
    """Where an execution falls for an agent's canary split: a number in [0, 100), two decimals, the same
    for the same execution and agent wherever it is computed."""
    digest = hashlib.sha256(f"{execution_id}\0{agent_id}".encode()).digest()
    return (int.from_bytes(digest[:8], "big") % 10_000) / 100


def _share(value: float) -> str:
    return f"{value:g}%"


class Router:
    """Routes an agent's tasks to its versions (see the module docstring)."""

    def __init__(self, versions: VersionSource | None = None, canary: CanaryConfig | None = None) -> None:
        """Args:
        versions: The agent versions (onboarding); none: every agent is its shipped version.
        canary: The canary split.
        """
        self._versions = versions
        self._canary = canary or CanaryConfig()

    @property
    def canary(self) -> CanaryConfig:
        """The canary settings."""
        return self._canary

    def route(self, entry: AgentEntry, *, tenant_id: str, execution_id: str = "",
              required_capabilities: Iterable[str] = ()) -> Route:
        """The version of ``entry``'s agent that ``execution_id``'s task goes to.

        ``entry`` is the agent as the registry serves it (its ACTIVE version). Without an
        execution id (DiscoverAgents) the ACTIVE version; a canary that does not register every
        one of the task's ``required_capabilities`` gets none of its traffic.
        """
        agent_id = entry.agent_id
        records = list(self._versions.list(agent_id)) if self._versions is not None else []
        served = next((r for r in records if not r.shipped and r.status is LifecycleStatus.ACTIVE), None)
        if served is not None:
            active = Endpoint(agent_id, served.manifest.version, served.endpoint, served.spiffe_id)
        else:
            active = Endpoint(agent_id, entry.manifest.version, "", entry.manifest.spiffe_id)
        canaries = [r for r in records if r.status is LifecycleStatus.CANARY]
        if not canaries:
            return Route(entry, active, False, "ACTIVE version")
        canary = canaries[-1]
        version = canary.manifest.version
        share = self._canary.share_for(tenant_id)
        if not execution_id:
            return Route(entry, active, False, f"ACTIVE version (canary {version} takes executions only)")
        if share <= 0:
            return Route(entry, active, False, f"ACTIVE version (canary {version} has no share for {tenant_id})")
        lacking = sorted(set(required_capabilities) - set(canary.manifest.capabilities))
        if lacking:
            return Route(entry, active, False, f"ACTIVE version (canary {version} lacks {', '.join(lacking)})")
        bucket = canary_bucket(execution_id, agent_id)
        if bucket < share:
            return Route(AgentEntry(canary.manifest, LifecycleStatus.CANARY, "", "", ""),
                         Endpoint(agent_id, version, canary.endpoint, canary.spiffe_id), True,
                         f"canary share {_share(share)}: execution bucket {bucket:.2f} < {share:g}")
        return Route(entry, active, False,
                     f"ACTIVE version (canary {version} share {_share(share)}: execution bucket {bucket:.2f} "
                     f">= {share:g})")
