"""Specialist agents: one process per agent, deterministic rules first.

Public API::

    from specialist_svc import SpecialistAgent, CapabilityClient, RULES

    agent = SpecialistAgent.load("training-agent")       # manifest + rules
    result = agent.run(task, client)                      # AgentResult, contract-shaped
    training.run(task_input, client)                      # the bare rules (specialist_svc.agents.*)

- :mod:`specialist_svc.rules` — the :class:`CapabilityClient` port, result building,
  what a failed capability call means (:func:`classify`).
- :mod:`specialist_svc.agents` — one module of rules per agent, and :data:`RULES`.
- :mod:`specialist_svc.agent` — :class:`SpecialistAgent`: input/output schema checks, stamping.
- :mod:`specialist_svc.capability_client` — :class:`GrpcCapabilityClient` (InvokeCapability with the grant).
- :mod:`specialist_svc.servicer` — :class:`SpecialistServicer` (RunTask, DescribeAgent).
"""

from specialist_svc.agent import RUNTIME_VERSION, SpecialistAgent, UnknownAgent
from specialist_svc.agents import RULES, AgentRules
from specialist_svc.capability_client import Deadline, GrpcCapabilityClient, principal_for
from specialist_svc.rules import AgentFailed, CallFailure, CapabilityClient, RuleFn, TaskInputInvalid, classify
from specialist_svc.servicer import SpecialistServicer

__all__ = [
    "RULES",
    "RUNTIME_VERSION",
    "AgentFailed",
    "AgentRules",
    "CallFailure",
    "CapabilityClient",
    "Deadline",
    "GrpcCapabilityClient",
    "RuleFn",
    "SpecialistAgent",
    "SpecialistServicer",
    "TaskInputInvalid",
    "UnknownAgent",
    "classify",
    "principal_for",
]
