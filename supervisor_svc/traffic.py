"""The supervisor's run-time view of agent traffic, in one place: routes, availability, history, retries.

:class:`Traffic` bundles what the selection (:mod:`supervisor_svc.selection`) and the
executor (:mod:`supervisor_svc.orchestrator`, :mod:`supervisor_svc.dispatch`) share:

* the :class:`~supervisor_svc.routing.Router` (which version of an agent, where — the canary split);
* the :class:`~supervisor_svc.signals.AvailabilityTracker` (live health and circuit per endpoint);
* the :class:`~supervisor_svc.signals.TaskHistory` and :class:`~supervisor_svc.signals.CanaryGuard`
  (success rates, the automatic canary rollback);
* the retry settings and the capability registry's risk profiles (which tasks only read,
  :func:`supervisor_svc.attempts.idempotent`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from supervisor_svc.attempts import idempotent
from supervisor_svc.registry import AgentEntry
from supervisor_svc.routing import Endpoint, RetryConfig, Route, Router, RoutingConfig, VersionSource
from supervisor_svc.signals import AvailabilityTracker, CanaryGuard, HealthProbe, Reading, Rollback, TaskHistory

__all__ = ["Traffic"]


@dataclass(frozen=True)
class Traffic:
    """Routes, availability, history and retries of agent tasks (see the module docstring)."""

    router: Router
    availability: AvailabilityTracker
    history: TaskHistory
    guard: CanaryGuard
    retry: RetryConfig
    mutating: Mapping[str, bool] | None
    """Capability id -> whether it mutates or writes externally; None: unknown (no task is retried)."""

    @classmethod
    def build(cls, config: RoutingConfig | None = None, *, versions: VersionSource | None = None,
              probe: HealthProbe | None = None, rollback: Rollback | None = None,
              mutating: Mapping[str, bool] | None = None) -> Traffic:
        """Args:
        config: The routing file's settings (the shipped defaults when None).
        versions: The agent versions (onboarding); none: every agent is its shipped version.
        probe: Asks an endpoint's gRPC health; none: only circuits count.
        rollback: Rolls a failing canary back (the onboarding's system move).
        mutating: The capability registry's risk profiles (see :attr:`mutating`).
        """
        config = config or RoutingConfig()
        history = TaskHistory(config.history.window, config.canary.window)
        return cls(Router(versions, config.canary), AvailabilityTracker(probe, config.availability), history,
                   CanaryGuard(config.canary, history, rollback), config.retry, mutating)

    def route(self, entry: AgentEntry, *, tenant_id: str, execution_id: str = "",
              required_capabilities: Iterable[str] = ()) -> Route:
        """The version of the agent an execution's task goes to (:meth:`Router.route`)."""
        return self.router.route(entry, tenant_id=tenant_id, execution_id=execution_id,
                                 required_capabilities=required_capabilities)

    def reading(self, endpoint: Endpoint) -> Reading:
        """The endpoint's availability now."""
        return self.availability.reading(endpoint)

    def idempotent(self, capabilities: Iterable[str]) -> tuple[bool, str]:
        """Whether a task whose grant lists ``capabilities`` only reads, and why not."""
        return idempotent(capabilities, self.mutating)
