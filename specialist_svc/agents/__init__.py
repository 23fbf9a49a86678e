"""Each agent's deterministic rules, one module per agent, and the table naming them.

Every module exposes ``AGENT_ID``, ``CAPABILITIES`` (what its rules call) and
``run(task_input, client) -> AgentResult`` (:data:`specialist_svc.rules.RuleFn`).
"""

from __future__ import annotations

from dataclasses import dataclass

from specialist_svc.agents import compliance, risk, training, work_permit
from specialist_svc.rules import RuleFn

__all__ = ["RULES", "AgentRules"]


@dataclass(frozen=True)
class AgentRules:
    """The rules of one agent and the capabilities they call."""

    agent_id: str
    capabilities: tuple[str, ...]
    run: RuleFn
    models: bool = False
    """The rules take ``models`` (a ModelPort) by keyword: they may ask a model."""


RULES: dict[str, AgentRules] = {
    m.AGENT_ID: AgentRules(m.AGENT_ID, m.CAPABILITIES, m.run, bool(getattr(m, "USES_MODELS", False)))
    for m in (work_permit, training, risk, compliance)
}
"""Agent id → its rules."""
