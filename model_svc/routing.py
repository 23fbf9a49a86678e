"""Routing (PRD §48): which model answers a call, by an explainable score.

Every configured model gets five factors in [0, 1] and their weighted sum:

=============  ======  ==========================================================================
factor         weight  how
=============  ======  ==========================================================================
complexity     0.30    the model's ``quality`` q against the prompt's complexity c: 1 − 0.1·(q − c)
                       when q ≥ c (a bigger model than needed costs a little), else 1 − 0.4·(c − q)
risk           0.20    the quality the prompt's risk asks for (LOW 1, MEDIUM 2, HIGH 3, CRITICAL 4):
                       1 when q reaches it, else 1 − 0.35 per step short
latency        0.15    the expected latency (configured, then the average of observed calls) against
                       the prompt's target t: 1 up to t/2, falling to 0 at 2t
cost           0.20    the call's estimated price (prompt estimate + the most answer tokens) against
                       the cheapest candidate's: cheapest / this
availability   0.15    1 healthy; 1 − 0.25 per consecutive failure (at least 0.25); 0.3 while the
                       circuit lets one probe through
=============  ======  ==========================================================================

A model is left out (``excluded_reason``, final score 0) when the call does not
fit its context (``CONTEXT_TOO_SMALL``), when its complexity or risk factor is 0
(``TOO_COMPLEX``, ``RISK_TOO_HIGH``), or while its circuit is open after three
consecutive failures (``UNAVAILABLE``, for 10 s, then one probe). Ties go to the
model id, so the same state gives the same route. The gateway then asks the
policy engine about the candidates in this order (``POLICY_DENIED`` is added
there).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from agentmesh.config import ModelBackend
from agentmesh.external import BreakerState, CircuitBreaker

__all__ = ["WEIGHTS", "Call", "Router", "Score"]

WEIGHTS = {"complexity": 0.30, "risk": 0.20, "latency": 0.15, "cost": 0.20, "availability": 0.15}
RISK_QUALITY = {"LOW": 1, "MEDIUM": 2, "HIGH": 3, "CRITICAL": 4}
FAILURES_TO_OPEN = 3
COOLDOWN_S = 10.0
LATENCY_SMOOTHING = 0.2
"""Weight of the newest observation in the moving average of a model's latency."""


@dataclass(frozen=True)
class Call:
    """What routing needs to know of one call."""

    complexity: int
    risk: str
    latency_target_ms: float
    prompt_tokens: int
    """The estimate reserved before the call."""
    max_output_tokens: int


@dataclass(frozen=True)
class Score:
    """One model's score for one call (``ModelRouteScore``)."""

    model_id: str
    complexity: float
    risk: float
    latency: float
    cost: float
    availability: float
    final: float
    excluded_reason: str = ""
    estimated_cost: float = 0.0
    max_tokens: int = 0
    """The answer limit this model gets for the call: the prompt's, within the model's own."""
    probe: bool = False
    """The call would be the half-open circuit's one probe."""

    def excluded(self, reason: str) -> Score:
        """The same score, left out for ``reason``."""
        return replace(self, final=0.0, excluded_reason=reason)


def _clamp(value: float) -> float:
    return max(0.0, min(1.0, value))


class _Stats:
    def __init__(self, backend: ModelBackend, clock: Callable[[], float]) -> None:
        self.backend = backend
        self.breaker = CircuitBreaker(FAILURES_TO_OPEN, COOLDOWN_S, clock=clock)
        self.latency_ms = backend.latency_ms


class Router:
    """Scores models for calls and learns their latency and availability from the outcomes. Thread-safe."""

    def __init__(self, backends: Sequence[ModelBackend], *, clock: Callable[[], float] = time.monotonic) -> None:
        self._stats = {b.id: _Stats(b, clock) for b in backends}
        self._lock = threading.Lock()

    def backend(self, model_id: str) -> ModelBackend:
        """The configuration of a model."""
        return self._stats[model_id].backend

    def models(self) -> list[ModelBackend]:
        """Every configured model."""
        return [s.backend for s in self._stats.values()]

    def expected_latency_ms(self, model_id: str) -> float:
        """The configured latency until calls are observed, then their moving average."""
        with self._lock:
            return self._stats[model_id].latency_ms

    def availability(self, model_id: str) -> str:
        """``AVAILABLE``, ``DEGRADED`` (recent failures, or probing) or ``UNAVAILABLE`` (circuit open)."""
        breaker = self._stats[model_id].breaker
        state = breaker.state
        if state is BreakerState.OPEN:
            return "UNAVAILABLE"
        if state is BreakerState.HALF_OPEN or breaker.consecutive_failures:
            return "DEGRADED"
        return "AVAILABLE"

    def rank(self, call: Call) -> list[Score]:
        """Every model's score, best first; excluded models last (with their reason)."""
        raw: list[Score] = []
        for model_id, stats in sorted(self._stats.items()):
            b = stats.backend
            q, c = b.quality, call.complexity
            complexity = _clamp(1 - 0.1 * (q - c)) if q >= c else _clamp(1 - 0.4 * (c - q))
            needed = RISK_QUALITY.get(call.risk, RISK_QUALITY["HIGH"])
            risk = 1.0 if q >= needed else _clamp(1 - 0.35 * (needed - q))
            expected = self.expected_latency_ms(model_id)
            target = call.latency_target_ms
            latency = _clamp(1 - (expected - target / 2) / (1.5 * target)) if expected > target / 2 else 1.0
            state = stats.breaker.state
            failures = stats.breaker.consecutive_failures
            availability = {BreakerState.OPEN: 0.0, BreakerState.HALF_OPEN: 0.3}.get(
                state, max(0.25, 1 - 0.25 * failures) if failures else 1.0)
            max_tokens = min(call.max_output_tokens, b.max_output_tokens)
            estimated = (call.prompt_tokens / 1000 * b.price_input_per_1k
                         + max_tokens / 1000 * b.price_output_per_1k)
            score = Score(model_id, round(complexity, 3), round(risk, 3), round(latency, 3), 0.0,
                          round(availability, 3), 0.0, estimated_cost=estimated, max_tokens=max_tokens,
                          probe=state is BreakerState.HALF_OPEN)
            if call.prompt_tokens + max_tokens > b.context_tokens:
                score = score.excluded("CONTEXT_TOO_SMALL")
            elif complexity == 0:
                score = score.excluded("TOO_COMPLEX")
            elif risk == 0:
                score = score.excluded("RISK_TOO_HIGH")
            elif state is BreakerState.OPEN:
                score = score.excluded("UNAVAILABLE")
            raw.append(score)
        eligible = [s for s in raw if not s.excluded_reason]
        cheapest = min((s.estimated_cost for s in eligible), default=0.0)
        ranked: list[Score] = []
        for s in raw:
            if s.estimated_cost <= 0:
                cost = 1.0
            else:  # against the cheapest candidate; next to a free one, any price scores 0
                cost = round(_clamp(cheapest / s.estimated_cost), 3) if cheapest > 0 else 0.0
            final = (WEIGHTS["complexity"] * s.complexity + WEIGHTS["risk"] * s.risk + WEIGHTS["latency"] * s.latency
                     + WEIGHTS["cost"] * cost + WEIGHTS["availability"] * s.availability)
            ranked.append(replace(s, cost=cost, final=0.0 if s.excluded_reason else round(final, 3)))
        return sorted(ranked, key=lambda s: (s.excluded_reason != "", -s.final, s.model_id))

    def acquire(self, model_id: str) -> bool | None:
        """Asks the model's circuit for one call: False normal, True the probe, None refused (open)."""
        return self._stats[model_id].breaker.acquire()

    def observe(self, model_id: str, *, ok: bool, probe: bool, latency_ms: float | None = None) -> None:
        """An outcome: a success closes the circuit, a transient failure counts towards opening it."""
        stats = self._stats[model_id]
        if ok:
            stats.breaker.record_success(probe)
        else:
            stats.breaker.record_failure(probe)
        if latency_ms is not None and math.isfinite(latency_ms) and latency_ms >= 0:
            with self._lock:
                stats.latency_ms = (1 - LATENCY_SMOOTHING) * stats.latency_ms + LATENCY_SMOOTHING * latency_ms
