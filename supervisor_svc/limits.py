"""Orchestration limits (PRD §21) and budgets (PRD §51).

Limits are configured per tenant (a tenant definition's ``limits``, over the
platform defaults of ``config/limits.yaml``); a request may bring an ``AgentBudget`` that can only
*tighten* them, never loosen them. An :class:`ExecutionBudget` tracks one
execution's usage and refuses — before the fact — whatever would exceed a
limit, raising :class:`~supervisor_svc.errors.LimitExceeded` whose ``reason``
names the limit and whose ``action`` (``STOP`` or ``HUMAN_REVIEW``) comes from
the tenant's ``on_exceeded`` configuration.

=========================  ===========================  =========================  =======
limit                      reason                       request budget field       default
=========================  ===========================  =========================  =======
max_depth                  MAX_DEPTH_EXCEEDED           —                          5
max_tasks                  MAX_TASKS_EXCEEDED           —                          30
max_handoffs               MAX_HANDOFFS_EXCEEDED        budget.max_delegations     10
max_execution_time_ms      MAX_EXECUTION_TIME_EXCEEDED  budget.max_execution_time  60000
max_cost                   MAX_COST_EXCEEDED            budget.max_cost            100.0
max_tokens                 MAX_TOKENS_EXCEEDED          budget.max_tokens          none
max_model_calls            MAX_MODEL_CALLS_EXCEEDED     budget.max_model_calls     none
max_model_cost             MAX_MODEL_COST_EXCEEDED      budget.max_model_cost      none
=========================  ===========================  =========================  =======

A reviewer may let one execution go past a limit it reached (a
``REVIEW_KIND_LIMIT`` approval): :meth:`ExecutionBudget.waive` lifts that limit
for the rest of the execution, and only that one.

The three model limits travel signed in every grant (:meth:`ExecutionBudget.grant_budgets`):
the model service reserves each call's maximum against the task's and the
execution's budget before the call and refuses what would exceed them; a limit
left unset means no model use at all (the grant carries 0, which the model
service refuses). Agents report their usage with their results
(``AgentResult.model_usage``): :meth:`ExecutionBudget.record_model_usage` adds
it, and a call the model service refused for a limit
(``model_usage.exhausted_reason``) ends the execution as the tenant's
``on_exceeded`` says (:meth:`ExecutionBudget.model_budget_exhausted`).

The domain never reads a clock: the caller passes elapsed time, so the checks
are deterministic and testable.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from agentmesh.v1 import common_pb2
from supervisor_svc.errors import LimitExceeded, RequestInvalid

__all__ = [
    "LIMIT_REASONS",
    "ExecutionBudget",
    "LimitAction",
    "LimitPolicy",
    "Limits",
    "Usage",
]


class LimitAction(StrEnum):
    """What happens when a limit is exceeded (PRD §51)."""

    STOP = "STOP"
    """The execution stops with the reason; nothing past the limit runs."""
    HUMAN_REVIEW = "HUMAN_REVIEW"
    """The execution stops and a review item asks a human to decide."""


LIMIT_REASONS = (
    "MAX_DEPTH_EXCEEDED",
    "MAX_TASKS_EXCEEDED",
    "MAX_HANDOFFS_EXCEEDED",
    "MAX_EXECUTION_TIME_EXCEEDED",
    "MAX_COST_EXCEEDED",
    "MAX_TOKENS_EXCEEDED",
    "MAX_MODEL_CALLS_EXCEEDED",
    "MAX_MODEL_COST_EXCEEDED",
)
"""Every reason a LimitExceeded can carry (also the valid keys of ``on_exceeded``)."""


@dataclass(frozen=True)
class Limits:
    """Limits of one execution. ``None`` means unlimited (only for tokens / model calls)."""

    max_depth: int = 5
    """Deepest task: the supervisor's own tasks have depth 1, a handoff adds 1."""
    max_tasks: int = 30
    """Tasks created in one execution, handoffs included."""
    max_handoffs: int = 10
    """Handoffs (agent-requested delegations) in one execution."""
    max_execution_time_ms: int = 60_000
    """Wall time of the whole execution."""
    max_cost: float = 100.0
    """Sum of the selected agents' declared per-task cost."""
    max_tokens: int | None = None
    """Model tokens across the execution (deterministic agents use none)."""
    max_model_calls: int | None = None
    """Model calls across the execution."""
    max_model_cost: float | None = None
    """Money spent on model calls across the execution (the backends' per-token prices)."""

    def __post_init__(self) -> None:
        for name in ("max_depth", "max_tasks", "max_handoffs", "max_execution_time_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if not math.isfinite(self.max_cost) or self.max_cost < 0:
            raise ValueError("max_cost must be a finite, non-negative number")
        if self.max_model_cost is not None and (not math.isfinite(self.max_model_cost) or self.max_model_cost < 0):
            raise ValueError("max_model_cost must be a finite, non-negative number")


@dataclass(frozen=True)
class LimitPolicy:
    """A tenant's limits and what to do when one is exceeded."""

    limits: Limits = field(default_factory=Limits)
    default_action: LimitAction = LimitAction.STOP
    actions: Mapping[str, LimitAction] = field(default_factory=dict)
    """Per-reason override of ``default_action``, e.g. ``{"MAX_COST_EXCEEDED": HUMAN_REVIEW}``."""

    def action_for(self, reason: str) -> LimitAction:
        """The configured action for a limit reason."""
        return self.actions.get(reason, self.default_action)


@dataclass(frozen=True)
class Usage:
    """What an execution has used so far (rebuildable from its persisted tasks)."""

    tasks: int = 0
    handoffs: int = 0
    cost: float = 0.0
    max_depth: int = 0
    tokens: int = 0
    model_calls: int = 0
    model_cost: float = 0.0


def _tighten(
    current: float | None, budget_value: float, budget_field: str, limit_field: str
) -> tuple[float | None, str]:
    """The smaller of a limit and a request budget value (0 = not set in proto3)."""
    if budget_value < 0 or not math.isfinite(budget_value):
        raise RequestInvalid(f"{budget_field} must be a non-negative number", reason="BUDGET_INVALID",
                             field=budget_field)
    if budget_value == 0:
        return current, limit_field
    if current is None or budget_value < current:
        return budget_value, budget_field
    return current, limit_field


class ExecutionBudget:
    """Usage of one execution against its effective limits. Thread-safe.

    Every ``admit_*`` method checks first and records only if nothing would be
    exceeded, so a refused step leaves the usage unchanged.
    """

    def __init__(
        self,
        policy: LimitPolicy,
        request_budget: common_pb2.AgentBudget | None = None,
        *,
        usage: Usage | None = None,
    ) -> None:
        """Combine the tenant's policy with the request's budget.

        Args:
            policy: The tenant's limits and actions.
            request_budget: The caller's ``AgentBudget``; its non-zero fields tighten the limits.
            usage: Usage to resume from (after a restart).

        Raises:
            RequestInvalid: ``BUDGET_INVALID`` for a negative budget field.
        """
        self._policy = policy
        self._usage = usage or Usage()
        self._lock = threading.Lock()
        self._waived: frozenset[str] = frozenset()
        base = policy.limits
        # Which configuration field binds each limit, for the error's ``field``.
        self._source: dict[str, str] = {
            "max_depth": "limits.max_depth",
            "max_tasks": "limits.max_tasks",
        }
        budget = request_budget or common_pb2.AgentBudget()
        handoffs, self._source["max_handoffs"] = _tighten(
            base.max_handoffs, budget.max_delegations, "budget.max_delegations", "limits.max_handoffs")
        time_ms, self._source["max_execution_time_ms"] = _tighten(
            base.max_execution_time_ms, budget.max_execution_time_ms, "budget.max_execution_time_ms",
            "limits.max_execution_time_ms")
        cost, self._source["max_cost"] = _tighten(base.max_cost, budget.max_cost, "budget.max_cost", "limits.max_cost")
        tokens, self._source["max_tokens"] = _tighten(
            base.max_tokens, budget.max_tokens, "budget.max_tokens", "limits.max_tokens")
        calls, self._source["max_model_calls"] = _tighten(
            base.max_model_calls, budget.max_model_calls, "budget.max_model_calls", "limits.max_model_calls")
        model_cost, self._source["max_model_cost"] = _tighten(
            base.max_model_cost, budget.max_model_cost, "budget.max_model_cost", "limits.max_model_cost")
        self.limits = replace(
            base,
            max_handoffs=int(handoffs) if handoffs is not None else base.max_handoffs,
            max_execution_time_ms=int(time_ms) if time_ms is not None else base.max_execution_time_ms,
            max_cost=float(cost) if cost is not None else base.max_cost,
            max_tokens=int(tokens) if tokens is not None else None,
            max_model_calls=int(calls) if calls is not None else None,
            max_model_cost=float(model_cost) if model_cost is not None else None,
        )
        """The effective limits: the tenant's, tightened by the request budget."""

    @property
    def usage(self) -> Usage:
        """A snapshot of the usage so far."""
        with self._lock:
            return self._usage

    @property
    def waived(self) -> frozenset[str]:
        """The limit reasons no longer checked for this execution."""
        return self._waived

    def waive(self, reasons: Iterable[str]) -> None:
        """Lifts limits (by reason, e.g. ``MAX_COST_EXCEEDED``) for the rest of the execution: a human
        reviewer decided it may go past them. Usage is still counted.

        Raises:
            ValueError: an unknown limit reason.
        """
        wanted = frozenset(reasons)
        unknown = sorted(wanted - set(LIMIT_REASONS))
        if unknown:
            raise ValueError(f"unknown limit reason(s): {', '.join(unknown)}")
        with self._lock:
            self._waived = self._waived | wanted

    def _exceeded(self, reason: str, name: str, limit: float, observed: float, what: str) -> LimitExceeded:
        action = self._policy.action_for(reason)
        return LimitExceeded(
            f"{what}: {observed:g} would exceed {name} = {limit:g} ({self._source[name]}); action {action.value}",
            reason=reason, field=self._source[name], limit=limit, observed=observed, action=action.value,
        )

    def admit_task(self, *, depth: int, cost: float, handoff: bool = False) -> None:
        """Record a new task (and a handoff, if it is one) after checking every limit it touches.

        Raises:
            LimitExceeded: ``MAX_DEPTH_EXCEEDED``, ``MAX_TASKS_EXCEEDED``, ``MAX_HANDOFFS_EXCEEDED``
                or ``MAX_COST_EXCEEDED`` — checked in that order.
        """
        limits = self.limits
        with self._lock:
            u, waived = self._usage, self._waived
            if depth > limits.max_depth and "MAX_DEPTH_EXCEEDED" not in waived:
                raise self._exceeded("MAX_DEPTH_EXCEEDED", "max_depth", limits.max_depth, depth, "task depth")
            if u.tasks + 1 > limits.max_tasks and "MAX_TASKS_EXCEEDED" not in waived:
                raise self._exceeded("MAX_TASKS_EXCEEDED", "max_tasks", limits.max_tasks, u.tasks + 1, "tasks")
            if handoff and u.handoffs + 1 > limits.max_handoffs and "MAX_HANDOFFS_EXCEEDED" not in waived:
                raise self._exceeded(
                    "MAX_HANDOFFS_EXCEEDED", "max_handoffs", limits.max_handoffs, u.handoffs + 1, "handoffs")
            if u.cost + cost > limits.max_cost + 1e-9 and "MAX_COST_EXCEEDED" not in waived:
                raise self._exceeded("MAX_COST_EXCEEDED", "max_cost", limits.max_cost, u.cost + cost, "cost")
            self._usage = replace(
                u, tasks=u.tasks + 1, handoffs=u.handoffs + (1 if handoff else 0), cost=u.cost + cost,
                max_depth=max(u.max_depth, depth),
            )

    def admit_plan(self, tasks: list[tuple[int, float]]) -> None:
        """Admit a whole plan's tasks, given as ``(depth, cost)``, all or nothing.

        Raises:
            LimitExceeded: as :meth:`admit_task`; no task is recorded then.
        """
        with self._lock:
            saved = self._usage
        try:
            for depth, cost in tasks:
                self.admit_task(depth=depth, cost=cost)
        except LimitExceeded:
            with self._lock:
                self._usage = saved
            raise

    def check_time(self, elapsed_ms: int) -> None:
        """Check the execution's wall time so far.

        Raises:
            LimitExceeded: ``MAX_EXECUTION_TIME_EXCEEDED``.
        """
        limit = self.limits.max_execution_time_ms
        if elapsed_ms > limit and "MAX_EXECUTION_TIME_EXCEEDED" not in self._waived:
            raise self._exceeded(
                "MAX_EXECUTION_TIME_EXCEEDED", "max_execution_time_ms", limit, elapsed_ms, "elapsed ms")

    def remaining_ms(self, elapsed_ms: int) -> int | None:
        """Time left before ``max_execution_time_ms`` (0 when none), the deadline for new tasks;
        None once a reviewer waived the time limit."""
        if "MAX_EXECUTION_TIME_EXCEEDED" in self._waived:
            return None
        return max(0, self.limits.max_execution_time_ms - elapsed_ms)

    def record_model_usage(self, *, tokens: int = 0, model_calls: int = 0, cost: float = 0.0) -> None:
        """Record model tokens / calls / cost reported by an agent.

        Unlike admission this records first: the tokens were spent already. The
        error tells the caller to stop before anything else runs.

        Raises:
            LimitExceeded: ``MAX_TOKENS_EXCEEDED``, ``MAX_MODEL_CALLS_EXCEEDED`` or ``MAX_MODEL_COST_EXCEEDED``.
        """
        limits = self.limits
        with self._lock:
            u = replace(self._usage, tokens=self._usage.tokens + tokens,
                        model_calls=self._usage.model_calls + model_calls,
                        model_cost=self._usage.model_cost + cost)
            self._usage = u
        waived = self._waived
        if limits.max_tokens is not None and u.tokens > limits.max_tokens and "MAX_TOKENS_EXCEEDED" not in waived:
            raise self._exceeded("MAX_TOKENS_EXCEEDED", "max_tokens", limits.max_tokens, u.tokens, "tokens")
        if limits.max_model_calls is not None and u.model_calls > limits.max_model_calls and \
                "MAX_MODEL_CALLS_EXCEEDED" not in waived:
            raise self._exceeded(
                "MAX_MODEL_CALLS_EXCEEDED", "max_model_calls", limits.max_model_calls, u.model_calls, "model calls")
        if limits.max_model_cost is not None and u.model_cost > limits.max_model_cost + 1e-12 and \
                "MAX_MODEL_COST_EXCEEDED" not in waived:
            raise self._exceeded(
                "MAX_MODEL_COST_EXCEEDED", "max_model_cost", limits.max_model_cost, u.model_cost, "model cost")

    _MODEL_LIMITS = {"MAX_TOKENS_EXCEEDED": ("max_tokens", "tokens", "tokens"),
                     "MAX_MODEL_CALLS_EXCEEDED": ("max_model_calls", "model_calls", "model calls"),
                     "MAX_MODEL_COST_EXCEEDED": ("max_model_cost", "model_cost", "model cost")}

    def model_budget_exhausted(self, reason: str) -> LimitExceeded | None:
        """The LimitExceeded for a model call the model service refused for ``reason``; None if not a limit."""
        known = self._MODEL_LIMITS.get(reason)
        if known is None:
            return None
        name, used, what = known
        limit = getattr(self.limits, name)
        observed = getattr(self.usage, used)
        return self._exceeded(reason, name, limit if limit is not None else 0, observed,
                              f"{what} (the model service refused the next call)")

    def grant_budgets(self) -> tuple[common_pb2.AgentBudget, common_pb2.AgentBudget]:
        """The model budgets a task's grant carries: the task's (what is left of the execution's, as the
        supervisor knows it) and the whole execution's. An unset limit is 0: no model use."""
        limits, u = self.limits, self.usage
        execution = common_pb2.AgentBudget(
            max_tokens=limits.max_tokens or 0, max_model_calls=limits.max_model_calls or 0,
            max_model_cost=limits.max_model_cost or 0.0)
        task = common_pb2.AgentBudget(
            max_tokens=max(0, execution.max_tokens - u.tokens), max_model_calls=max(
                0, execution.max_model_calls - u.model_calls),
            max_model_cost=max(0.0, execution.max_model_cost - u.model_cost))
        return task, execution

    def task_budget(self, elapsed_ms: int) -> common_pb2.AgentBudget:
        """The budget to put on a new task: what is left of the execution's."""
        limits, u = self.limits, self.usage
        remaining = self.remaining_ms(elapsed_ms)
        return common_pb2.AgentBudget(
            max_tokens=max(0, limits.max_tokens - u.tokens) if limits.max_tokens is not None else 0,
            max_model_calls=(max(0, limits.max_model_calls - u.model_calls)
                             if limits.max_model_calls is not None else 0),
            max_execution_time_ms=remaining if remaining is not None else 0,
            max_cost=max(0.0, limits.max_cost - u.cost),
            max_delegations=max(0, limits.max_handoffs - u.handoffs),
            max_model_cost=(max(0.0, limits.max_model_cost - u.model_cost)
                            if limits.max_model_cost is not None else 0.0),
        )
