"""Shared fixtures for the supervisor's domain: the shipped registry and configuration."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor_svc.registry import AgentRegistry
from supervisor_svc.selection import AgentSelector
from supervisor_svc.tenants import TenantDirectory


@pytest.fixture()
def registry(tmp_path: Path) -> Iterator[AgentRegistry]:
    """The shipped agent manifests over a fresh status database."""
    with AgentRegistry(tmp_path / "agents.db") as reg:
        yield reg


@pytest.fixture()
def tenants() -> TenantDirectory:
    """The shipped tenant configuration."""
    return TenantDirectory.load()


@pytest.fixture()
def selector(registry: AgentRegistry, tenants: TenantDirectory) -> AgentSelector:
    """Selection over the shipped registry and tenants."""
    return AgentSelector(registry, tenants)
