"""Which capabilities, knowledge scopes and risk profile each agent has registered, read from the agent manifests.

The policy engine checks "agent ≤ user" against this data: registration is
necessary, never sufficient. The manifests are the agent registry's own
files (``supervisor_svc/agents/*.yaml`` by default), read once at start-up;
an agent that is not registered has no capabilities and no knowledge scopes
(fail closed).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from policy_svc.model import RiskLevel, RiskProfile


class AgentRegistrationError(Exception):
    """A manifest cannot be read; the message names the file and field."""


def default_manifest_dir() -> Path:
    """The agent manifests shipped with the supervisor."""
    return Path(str(resources.files("supervisor_svc"))) / "agents"


class AgentRegistrations:
    """agent id → registered capability ids and knowledge scopes."""

    def __init__(self, capabilities: dict[str, tuple[str, ...]],
                 knowledge_scopes: dict[str, tuple[str, ...]] | None = None,
                 risk_profiles: dict[str, RiskProfile] | None = None) -> None:
        self._capabilities = dict(capabilities)
        self._knowledge_scopes = dict(knowledge_scopes or {})
        self._risk_profiles = dict(risk_profiles or {})

    @classmethod
    def load(cls, manifest_dir: Path | None = None) -> AgentRegistrations:
        """Reads every ``*.yaml`` manifest in the directory."""
        root = manifest_dir or default_manifest_dir()
        if not root.is_dir():
            raise AgentRegistrationError(f"{root}: agent manifest directory does not exist")
        found: dict[str, tuple[str, ...]] = {}
        scopes: dict[str, tuple[str, ...]] = {}
        profiles: dict[str, RiskProfile] = {}
        for path in sorted(root.glob("*.yaml")):
            try:
                doc: Any = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError) as err:
                raise AgentRegistrationError(f"{path}: cannot read agent manifest: {err}") from err
            if not isinstance(doc, dict):
                raise AgentRegistrationError(f"{path}: expected a mapping")
            agent_id, caps = doc.get("agent_id"), doc.get("capabilities")
            if not isinstance(agent_id, str) or not agent_id:
                raise AgentRegistrationError(f"{path}: agent_id is required")
            if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
                raise AgentRegistrationError(f"{path}: capabilities must be a list of capability ids")
            found[agent_id] = tuple(caps)
            knowledge = doc.get("knowledge_scopes", [])
            if not isinstance(knowledge, list) or not all(isinstance(s, str) and s for s in knowledge):
                raise AgentRegistrationError(f"{path}: knowledge_scopes must be a list of scope ids")
            scopes[agent_id] = tuple(knowledge)
            profiles[agent_id] = _risk_profile(doc.get("risk_profile"), path)
        return cls(found, scopes, profiles)

    def agent_ids(self) -> tuple[str, ...]:
        """Every registered agent id."""
        return tuple(sorted(self._capabilities))

    def capabilities(self, agent_id: str) -> tuple[str, ...]:
        """The agent's registered capabilities; () for an unknown agent."""
        return self._capabilities.get(agent_id, ())

    def knowledge_scopes(self, agent_id: str) -> tuple[str, ...]:
        """The agent's registered knowledge scopes; () for an unknown agent."""
        return self._knowledge_scopes.get(agent_id, ())

    def risk_profile(self, agent_id: str) -> RiskProfile | None:
        """The agent's declared risk profile; None for an unknown agent (it declared nothing)."""
        return self._risk_profiles.get(agent_id)


def _risk_profile(data: Any, path: Path) -> RiskProfile:
    if not isinstance(data, dict):
        raise AgentRegistrationError(f"{path}: risk_profile is required (max_risk, can_mutate, ...)")
    try:
        level = RiskLevel(str(data.get("max_risk")))
    except ValueError:
        raise AgentRegistrationError(f"{path}: risk_profile.max_risk must be LOW, MEDIUM, HIGH or CRITICAL") from None
    flags = [data.get(k, False) for k in ("can_mutate", "can_external_write", "can_bulk_operate")]
    if not all(isinstance(f, bool) for f in flags):
        raise AgentRegistrationError(f"{path}: risk_profile flags must be true or false")
    return RiskProfile(level, *flags)
