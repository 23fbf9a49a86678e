"""What the selection knows about agents at run time (PRD §10, §47, §57): availability, history, canary health.

**Availability** of an agent version is read at its endpoint, never assumed:

* its **circuit** (:class:`AvailabilityTracker`): every call of the version that fails
  UNAVAILABLE or DEADLINE_EXCEEDED counts; ``circuit_failures`` in a row open it for
  ``circuit_open_ms`` (score 0, "circuit open"); then it is half-open — one call is let
  through, score 0.5 — and the next answered call closes it;
* its **live gRPC health**, asked over the channel the supervisor calls it on, at most every
  ``probe_ttl_ms`` (a failed call asks again at once): SERVING scores 1.0; NOT_SERVING, a
  process that cannot be reached (``UNREACHABLE (UNAVAILABLE)``: nothing listens, the wrong
  identity answers) or an agent the configuration has no address for (``NO_ADDRESS``) scores 0
  and makes the version *down*: a task for it is not sent (the primary is unavailable; see the
  fallback in :mod:`supervisor_svc.orchestrator`). A probe that only ran out of time
  (``UNREACHABLE (DEADLINE_EXCEEDED)``: a busy or stalled process) scores 0.5 and the task is
  still sent — its own deadline decides, and its failure counts in the circuit — so a loaded
  machine never makes a healthy agent look gone.

Without a probe (unit tests of one piece) only the circuit counts.

**History** (:class:`TaskHistory`) is the success rate of the agent's last ``window`` finished
tasks, all versions together, kept in this supervisor's memory: it starts empty (score 0.5,
"no finished task yet") at every start and in every replica, and fills from the results it
sees. A task succeeded when its agent answered with a result that is not FAILED (PARTIAL and
UNCERTAIN are honest answers); it failed when the agent could not be reached, timed out, broke
its contract or answered FAILED. A cancelled task does not count.

**The canary guard** (:class:`CanaryGuard`) judges a CANARY version by the same outcomes over
its own last ``canary.window`` tasks: once it has ``canary.min_tasks``, a failure rate above
``canary.max_failure_rate`` rolls it back (CANARY -> APPROVED, a system move audited by the
onboarding, metric ``agentmesh.canary.rollbacks``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from opentelemetry import metrics

from supervisor_svc.routing import AvailabilityConfig, CanaryConfig, Endpoint, Route

__all__ = [
    "AvailabilityTracker",
    "CanaryGuard",
    "HealthProbe",
    "Reading",
    "TaskHistory",
]

log = logging.getLogger(__name__)

_meter = metrics.get_meter("agentmesh.supervisor")
_rollbacks = _meter.create_counter("agentmesh.canary.rollbacks",
                                   description="CANARY versions rolled back automatically (PRD §57), by agent")

HealthProbe = Callable[[Endpoint, float], str]
"""``(endpoint, timeout_s) -> status``: ``SERVING``, ``NOT_SERVING``, ``UNREACHABLE (<code>)`` or ``NO_ADDRESS``."""

SERVING = "SERVING"
SLOW = "UNREACHABLE (DEADLINE_EXCEEDED)"
"""A health probe that ran out of time: the process may be busy; not taken as down."""


@dataclass(frozen=True)
class Reading:
    """What is known of one endpoint now."""

    score: float
    """The selection's availability component, 0 to 1."""
    reason: str
    """What it rests on, e.g. ``SERVING``, ``UNREACHABLE (UNAVAILABLE)``, ``circuit open``."""
    down: bool
    """A task sent there now would not be answered: the primary is unavailable."""


@dataclass
class _Circuit:
    failures: int = 0
    open_until: float = 0.0
    half_open: bool = False


class AvailabilityTracker:
    """Live health and circuit of each agent version's endpoint (see the module docstring)."""

    def __init__(self, probe: HealthProbe | None, config: AvailabilityConfig | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """Args:
        probe: Asks an endpoint's gRPC health; none: only the circuit counts.
        config: TTL, timeout and circuit settings.
        clock: Monotonic seconds.
        """
        self._probe = probe
        self._config = config or AvailabilityConfig()
        self._clock = clock
        self._lock = threading.Lock()
        self._circuits: dict[str, _Circuit] = {}
        self._health: dict[str, tuple[float, str]] = {}

    def _status(self, endpoint: Endpoint) -> str | None:
        if self._probe is None:
            return None
        now = self._clock()
        with self._lock:
            seen = self._health.get(endpoint.key)
        if seen is not None and now - seen[0] < self._config.probe_ttl_ms / 1000:
            return seen[1]
        try:
            status = self._probe(endpoint, self._config.probe_timeout_ms / 1000)
        except Exception as err:  # noqa: BLE001 - a probe that cannot even be made says the endpoint is not usable
            log.warning("health probe of %s failed: %s", endpoint.key, err)
            status = "UNREACHABLE (PROBE_FAILED)"
        with self._lock:
            self._health[endpoint.key] = (self._clock(), status)
        return status

    def reading(self, endpoint: Endpoint) -> Reading:
        """The endpoint's availability now (asks its health when the last answer is older than the TTL)."""
        now = self._clock()
        half_open = False
        with self._lock:
            circuit = self._circuits.get(endpoint.key)
            if circuit is not None and circuit.open_until:
                if now < circuit.open_until:
                    return Reading(0.0, f"circuit open after {circuit.failures} failed calls", True)
                circuit.half_open = True
            half_open = circuit is not None and circuit.half_open
        status = self._status(endpoint)
        if status == SLOW:
            return Reading(0.5, f"{status}, circuit half-open" if half_open else status, False)
        if status is not None and status != SERVING:
            return Reading(0.0, status, True)
        shown = status or "circuit closed (not probed)"
        if half_open:
            return Reading(0.5, f"{shown}, circuit half-open", False)
        return Reading(1.0, shown, False)

    def observe(self, endpoint: Endpoint, *, reached: bool) -> None:
        """A call of the endpoint ended: ``reached`` when the agent answered (whatever it said), not when the
        call failed UNAVAILABLE or DEADLINE_EXCEEDED."""
        now = self._clock()
        with self._lock:
            circuit = self._circuits.setdefault(endpoint.key, _Circuit())
            if reached:
                circuit.failures, circuit.open_until, circuit.half_open = 0, 0.0, False
                return
            circuit.failures += 1
            # Ask its health again before the next task rather than trust an answer from before the failure.
            self._health.pop(endpoint.key, None)
            if circuit.half_open or circuit.failures >= self._config.circuit_failures:
                circuit.open_until = now + self._config.circuit_open_ms / 1000
                circuit.half_open = False


class TaskHistory:
    """The outcomes of the agents' most recent finished tasks, in memory (see the module docstring)."""

    def __init__(self, window: int = 50, version_window: int = 20) -> None:
        """Args:
        window: Tasks per agent (all versions) for the history score.
        version_window: Tasks per agent version (the canary's failure rate).
        """
        self._window = window
        self._version_window = version_window
        self._lock = threading.Lock()
        self._agents: dict[str, deque[bool]] = {}
        self._versions: dict[tuple[str, str], deque[bool]] = {}

    def record(self, agent_id: str, version: str, *, succeeded: bool) -> None:
        """One finished task of ``agent_id@version``."""
        with self._lock:
            self._agents.setdefault(agent_id, deque(maxlen=self._window)).append(succeeded)
            self._versions.setdefault((agent_id, version), deque(maxlen=self._version_window)).append(succeeded)

    def success_rate(self, agent_id: str) -> tuple[float | None, str]:
        """The agent's success rate over its window, and what it rests on; None without any finished task."""
        with self._lock:
            seen = list(self._agents.get(agent_id, ()))
        if not seen:
            return None, "no finished task yet"
        ok = sum(seen)
        return ok / len(seen), f"{ok} of {len(seen)} recent tasks succeeded"

    def version_outcomes(self, agent_id: str, version: str) -> tuple[int, int]:
        """``(tasks, failed)`` of one version over its window."""
        with self._lock:
            seen = list(self._versions.get((agent_id, version), ()))
        return len(seen), sum(1 for s in seen if not s)

    def forget_version(self, agent_id: str, version: str) -> None:
        """Starts the version's window afresh (a canary rolled back is judged anew if it comes back)."""
        with self._lock:
            self._versions.pop((agent_id, version), None)


Rollback = Callable[[str, str, str, Sequence[str]], object]
"""``(agent_id, version, reason, reason_codes)``: moves a CANARY version back to APPROVED (durably audited)."""


class CanaryGuard:
    """Rolls a failing canary back automatically (see the module docstring)."""

    def __init__(self, config: CanaryConfig, history: TaskHistory, rollback: Rollback | None) -> None:
        """Args:
        config: The window, minimum and threshold.
        history: Where the canary's outcomes are kept.
        rollback: The onboarding's system move; none: canaries are never rolled back automatically.
        """
        self._config = config
        self._history = history
        self._rollback = rollback
        self._lock = threading.Lock()
        self._rolling: set[tuple[str, str]] = set()

    def finished(self, route: Route, *, succeeded: bool) -> bool:
        """A task routed by ``route`` finished; True when it rolled the canary back."""
        self._history.record(route.agent_id, route.version, succeeded=succeeded)
        if not route.canary or self._rollback is None:
            return False
        tasks, failed = self._history.version_outcomes(route.agent_id, route.version)
        if tasks < self._config.min_tasks or failed / tasks <= self._config.max_failure_rate:
            return False
        key = (route.agent_id, route.version)
        with self._lock:
            if key in self._rolling:
                return False
            self._rolling.add(key)
        rate = failed / tasks
        reason = (f"canary failure rate {rate:.0%} ({failed} of its last {tasks} tasks) is above "
                  f"{self._config.max_failure_rate:.0%}")
        try:
            self._rollback(route.agent_id, route.version, reason,
                           ["CANARY_ROLLBACK", f"failure_rate={rate:.4f}", f"failed={failed}", f"tasks={tasks}",
                            f"threshold={self._config.max_failure_rate:g}"])
        except Exception:  # noqa: BLE001 - not rolled back now (audit down, moved meanwhile): judged again next task
            log.exception("canary %s@%s could not be rolled back", route.agent_id, route.version)
            with self._lock:
                self._rolling.discard(key)
            return False
        self._history.forget_version(route.agent_id, route.version)
        with self._lock:
            self._rolling.discard(key)
        _rollbacks.add(1, {"agent": route.agent_id, "version": route.version})
        log.warning("canary %s@%s rolled back: %s", route.agent_id, route.version, reason)
        return True
