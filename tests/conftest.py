"""Shared fixtures: a mesh home with certificates made once per test session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentmesh import config
from agentmesh.config import MeshConfig
from agentmesh.identities import init_identities


@pytest.fixture(scope="session")
def mesh_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshConfig]:
    """A mesh home with the CA, every identity and the dev keys (no processes)."""
    home: Path = tmp_path_factory.mktemp("mesh-home")
    cfg = config.load(home=str(home), environ={})
    init_identities(cfg)
    yield cfg
