"""Risk rules agent: the risk agent's deterministic rules alone — the risk agent's declared fallback (PRD §47).

It judges a permit's registered hazards and open controls exactly as the risk
agent does (:mod:`specialist_svc.agents.risk`: one ``risk.evaluate`` call, the
same subjects, verdicts and codes), and never reads the permit's free-text
description: it asks no model, so it has no model service to depend on and its
``model_reading`` is always ``NOT_ASKED``. The supervisor runs it for a risk
task only while the risk agent is unavailable, and only when the policy engine
lets the tenant's work run on a fallback (``use_fallback_agent``). It is not
started by default (``agents`` of the config) and no demo tenant lists it among
its agents, so it is never selected on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentmesh.v1 import common_pb2
from specialist_svc.agents import risk
from specialist_svc.rules import CapabilityClient

AGENT_ID = "risk-rules-agent"
CAPABILITIES = risk.CAPABILITIES
"""Capabilities these rules call (each must be among the agent's registered ones)."""


def run(data: Mapping[str, Any], client: CapabilityClient) -> common_pb2.AgentResult:
    """The risk agent's analysis of one permit without a model (see :func:`specialist_svc.agents.risk.run`).

    Raises:
        TaskInputInvalid: ``permit_id`` is missing or not a permit id.
    """
    return risk.run({k: v for k, v in data.items() if k != "description"}, client, models=None)
