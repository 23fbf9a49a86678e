"""Shared fixtures for the supervisor's domain: the shipped registry and configuration."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentmesh.tenant_file import load_tenant_file
from supervisor_svc.registry import AgentRegistry
from supervisor_svc.selection import AgentSelector
from supervisor_svc.tenants import TenantDirectory

DEMO_TENANTS = Path(__file__).resolve().parents[2] / "agentmesh" / "data" / "demo_tenants.yaml"


def demo_tenants() -> TenantDirectory:
    """The demo tenants (acme, globex) over the shipped default limits, as the tenant directory serves them."""
    return TenantDirectory.of(load_tenant_file(DEMO_TENANTS).definitions)


@pytest.fixture()
def registry(tmp_path: Path) -> Iterator[AgentRegistry]:
    """The shipped agent manifests over a fresh status database."""
    with AgentRegistry(tmp_path / "agents.db") as reg:
        yield reg


@pytest.fixture()
def tenants() -> TenantDirectory:
    """The demo tenants' configuration."""
    return demo_tenants()


@pytest.fixture()
def selector(registry: AgentRegistry, tenants: TenantDirectory) -> AgentSelector:
    """Selection over the shipped registry and tenants."""
    return AgentSelector(registry, tenants)
