"""Each agent's deterministic rules, one module per agent, and the table naming them.

Every module exposes ``AGENT_ID``, ``CAPABILITIES`` (what its rules call) and
``run(task_input, client) -> AgentResult`` (:data:`specialist_svc.rules.RuleFn`); a
module whose rules also read the mesh's date or the outcomes of their handoffs
exposes ``run_in_context(task_input, client, context)`` instead
(:data:`specialist_svc.rules.ContextRuleFn`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from agentmesh.v1 import common_pb2
from specialist_svc.agents import compliance, employee, medical, risk, risk_rules, training, work_permit
from specialist_svc.rules import CapabilityClient, ContextRuleFn, RuleFn, TaskContext

__all__ = ["RULES", "AgentRules", "rules_of"]


@dataclass(frozen=True)
class AgentRules:
    """The rules of one agent and the capabilities they call."""

    agent_id: str
    capabilities: tuple[str, ...]
    run: ContextRuleFn
    models: bool = False
    """The rules take ``models`` (a ModelPort or None) by keyword: they may ask a model."""


def _without_context(rules: RuleFn) -> ContextRuleFn:
    def run(data: Mapping[str, Any], client: CapabilityClient, context: TaskContext,
            **models: Any) -> common_pb2.AgentResult:
        return rules(data, client, **models)

    return run


def rules_of(module: ModuleType) -> AgentRules:
    """The :class:`AgentRules` of one agent module."""
    run: ContextRuleFn = getattr(module, "run_in_context", None) or _without_context(module.run)
    return AgentRules(module.AGENT_ID, tuple(module.CAPABILITIES), run, bool(getattr(module, "USES_MODELS", False)))


RULES: dict[str, AgentRules] = {
    m.AGENT_ID: rules_of(m) for m in (work_permit, training, risk, risk_rules, compliance, employee, medical)
}
"""Agent id → its rules."""
