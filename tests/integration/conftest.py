"""A real mesh for integration tests: every role as its own process on free ports."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentmesh import config, launcher, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import client_paths


def agentmesh_cli(home: Path, *args: str, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    """Runs the real ``agentmesh`` command as a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "agentmesh.cli", "--home", str(home), *args],
        capture_output=True, text=True, timeout=timeout, **kw,  # type: ignore[call-overload]
    )


@pytest.fixture(scope="session")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshConfig]:
    """``agentmesh up --detach --ports-auto`` in a fresh home; ``down`` afterwards."""
    home = tmp_path_factory.mktemp("mesh")
    result = agentmesh_cli(home, "up", "--detach", "--ports-auto", "--json")
    cfg = config.load(home=str(home), environ={})
    try:
        assert result.returncode == 0, result.stderr
        yield cfg
    finally:
        launcher.down(cfg)


def peer_address(cfg: MeshConfig, name: str) -> str:
    """The bound address of a running process."""
    for p in launcher.read_state(cfg):
        if p.name == name:
            return p.address
    raise KeyError(name)


def client_tls(cfg: MeshConfig, identity: object) -> transport.TlsFiles:
    """TLS files of a client identity issued in the mesh home."""
    return transport.TlsFiles.of(client_paths(cfg, identity), cfg.mesh_home.certs / "ca.pem")  # type: ignore[arg-type]
