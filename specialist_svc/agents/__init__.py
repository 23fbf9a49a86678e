"""Each agent's deterministic rules, one module per agent, and the table naming them.

Every module exposes ``AGENT_ID``, ``CAPABILITIES`` (what its rules call) and
``run(task_input, client) -> AgentResult`` (:data:`specialist_svc.rules.RuleFn`).
"""

from __future__ import annotations

from dataclasses import dataclass

from specialist_svc.agents import compliance, employee, medical, risk, training, work_permit
from specialist_svc.rules import RuleFn

__all__ = ["RULES", "AgentRules"]


@dataclass(frozen=True)
class AgentRules:
    """The rules of one agent and the capabilities they call."""

    agent_id: str
    capabilities: tuple[str, ...]
    run: RuleFn


RULES: dict[str, AgentRules] = {
    m.AGENT_ID: AgentRules(m.AGENT_ID, m.CAPABILITIES, m.run)
    for m in (work_permit, training, risk, compliance, employee, medical)
}
"""Agent id → its rules."""
