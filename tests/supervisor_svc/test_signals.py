"""Availability, history and the canary guard (PRD §10, §47, §57): what the selection knows at run time."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentmesh.vocabulary import LifecycleStatus as S
from supervisor_svc.registry import AgentEntry, AgentRegistry
from supervisor_svc.routing import AvailabilityConfig, CanaryConfig, Endpoint, Route
from supervisor_svc.signals import AvailabilityTracker, CanaryGuard, TaskHistory

ENDPOINT = Endpoint("risk-agent", "1.0.0", "", "spiffe://agentmesh.local/agent/risk-agent")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Probe:
    def __init__(self, status: str = "SERVING") -> None:
        self.status = status
        self.asked = 0

    def __call__(self, endpoint: Endpoint, timeout_s: float) -> str:
        self.asked += 1
        return self.status


def _tracker(probe: Probe | None, clock: Clock, **config: int) -> AvailabilityTracker:
    return AvailabilityTracker(probe, AvailabilityConfig(**config), clock)


@pytest.mark.parametrize(("status", "score", "down"), [
    ("SERVING", 1.0, False), ("NOT_SERVING", 0.0, True), ("UNREACHABLE (UNAVAILABLE)", 0.0, True),
    ("UNREACHABLE (DEADLINE_EXCEEDED)", 0.5, False),  # busy, not gone: the task's own deadline decides
    ("NO_ADDRESS", 0.0, True),
])
def test_live_health_decides_the_score(status: str, score: float, down: bool) -> None:
    reading = _tracker(Probe(status), Clock()).reading(ENDPOINT)
    assert (reading.score, reading.reason, reading.down) == (score, status, down)


def test_a_probe_that_cannot_be_made_is_not_serving() -> None:
    def broken(endpoint: Endpoint, timeout_s: float) -> str:
        raise RuntimeError("no channel")

    reading = AvailabilityTracker(broken).reading(ENDPOINT)
    assert reading.down and reading.score == 0.0 and "PROBE_FAILED" in reading.reason


def test_health_is_asked_again_only_after_its_ttl_or_a_failed_call() -> None:
    probe, clock = Probe(), Clock()
    tracker = _tracker(probe, clock, probe_ttl_ms=1000)
    tracker.reading(ENDPOINT)
    tracker.reading(ENDPOINT)
    assert probe.asked == 1
    clock.now += 1.5
    tracker.reading(ENDPOINT)
    assert probe.asked == 2
    tracker.observe(ENDPOINT, reached=False)
    probe.status = "UNREACHABLE (UNAVAILABLE)"
    assert tracker.reading(ENDPOINT).down
    assert probe.asked == 3


def test_the_circuit_opens_after_failed_calls_then_half_opens_then_closes() -> None:
    probe, clock = Probe(), Clock()
    tracker = _tracker(probe, clock, circuit_failures=3, circuit_open_ms=5000)
    for _ in range(2):
        tracker.observe(ENDPOINT, reached=False)
    assert not tracker.reading(ENDPOINT).down  # two failures: still closed
    tracker.observe(ENDPOINT, reached=False)
    opened = tracker.reading(ENDPOINT)
    assert (opened.score, opened.down, opened.reason) == (0.0, True, "circuit open after 3 failed calls")
    clock.now += 5.1
    half = tracker.reading(ENDPOINT)
    assert (half.score, half.down, half.reason) == (0.5, False, "SERVING, circuit half-open")
    tracker.observe(ENDPOINT, reached=False)  # the call let through failed: open again at once
    assert tracker.reading(ENDPOINT).down
    clock.now += 5.1
    tracker.reading(ENDPOINT)
    tracker.observe(ENDPOINT, reached=True)
    assert tracker.reading(ENDPOINT).score == 1.0


def test_without_a_probe_only_the_circuit_counts() -> None:
    tracker = _tracker(None, Clock(), circuit_failures=1)
    assert tracker.reading(ENDPOINT).score == 1.0
    tracker.observe(ENDPOINT, reached=False)
    assert tracker.reading(ENDPOINT).down


def test_history_is_the_success_rate_of_the_last_tasks() -> None:
    history = TaskHistory(window=4)
    assert history.success_rate("risk-agent") == (None, "no finished task yet")
    for ok in (False, False, True, True, True, False):
        history.record("risk-agent", "1.0.0", succeeded=ok)
    assert history.success_rate("risk-agent") == (0.75, "3 of 4 recent tasks succeeded")
    history.record("risk-agent", "1.1.0", succeeded=False)  # every version of the agent counts
    assert history.success_rate("risk-agent")[0] == 0.5
    assert history.version_outcomes("risk-agent", "1.1.0") == (1, 1)


class Rollbacks:
    def __init__(self, fail: int = 0) -> None:
        self.calls: list[tuple[str, str, str, Sequence[str]]] = []
        self.fail = fail

    def __call__(self, agent_id: str, version: str, reason: str, codes: Sequence[str]) -> None:
        self.calls.append((agent_id, version, reason, codes))
        if self.fail:
            self.fail -= 1
            raise RuntimeError("audit unavailable")


def _canary(registry: AgentRegistry) -> Route:
    manifest = registry.get("training-agent").manifest
    return Route(AgentEntry(manifest, S.CANARY, "", "", ""),
                 Endpoint("training-agent", "1.0.0", "127.0.0.1:7601", manifest.spiffe_id), True, "canary share 20%")


def test_a_canary_is_not_judged_before_its_minimum_of_tasks(registry: AgentRegistry) -> None:
    rollbacks = Rollbacks()
    guard = CanaryGuard(CanaryConfig(window=4, min_tasks=3, max_failure_rate=0.5), TaskHistory(50, 4), rollbacks)
    canary = _canary(registry)
    assert not guard.finished(canary, succeeded=False)  # 1 task, all failed: not judged yet
    assert not guard.finished(canary, succeeded=False)  # 2 tasks: not judged yet
    assert rollbacks.calls == []
    assert guard.finished(canary, succeeded=True)  # 2 of 3 failed: 67% > 50%
    assert len(rollbacks.calls) == 1


def test_the_rollback_threshold(registry: AgentRegistry) -> None:
    rollbacks = Rollbacks()
    guard = CanaryGuard(CanaryConfig(window=4, min_tasks=4, max_failure_rate=0.5), TaskHistory(50, 4), rollbacks)
    canary = _canary(registry)
    for ok in (False, True, False, True, False):  # the last 4 fail 2 of 4 times: 50% is not above 50%
        assert not guard.finished(canary, succeeded=ok)
    assert guard.finished(canary, succeeded=False)  # the last 4 are F T F F: 3 of 4 failed
    assert len(rollbacks.calls) == 1
    agent_id, version, reason, codes = rollbacks.calls[0]
    assert (agent_id, version) == ("training-agent", "1.0.0")
    assert reason == "canary failure rate 75% (3 of its last 4 tasks) is above 50%"
    assert codes[0] == "CANARY_ROLLBACK" and "failed=3" in codes and "tasks=4" in codes
    # Judged anew: its window starts again.
    assert not guard.finished(canary, succeeded=False)


def test_an_active_version_is_never_rolled_back(registry: AgentRegistry) -> None:
    rollbacks = Rollbacks()
    guard = CanaryGuard(CanaryConfig(window=2, min_tasks=1, max_failure_rate=0.0), TaskHistory(50, 2), rollbacks)
    active = Route(registry.get("training-agent"), ENDPOINT, False, "ACTIVE version")
    for _ in range(5):
        assert not guard.finished(active, succeeded=False)
    assert rollbacks.calls == []


def test_a_rollback_that_fails_is_tried_again_at_the_next_task(registry: AgentRegistry) -> None:
    rollbacks = Rollbacks(fail=1)
    guard = CanaryGuard(CanaryConfig(window=2, min_tasks=1, max_failure_rate=0.0), TaskHistory(50, 2), rollbacks)
    canary = _canary(registry)
    assert not guard.finished(canary, succeeded=False)
    assert guard.finished(canary, succeeded=False)
    assert len(rollbacks.calls) == 2
