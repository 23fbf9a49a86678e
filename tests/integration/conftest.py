"""A real mesh for integration tests: every role as its own process on free ports."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agentmesh import config, launcher, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import tls_files


def agentmesh_cli(home: Path, *args: str, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    """Runs the real ``agentmesh`` command as a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "agentmesh_cli", "--home", str(home), *args],
        capture_output=True, text=True, timeout=timeout, **kw,  # type: ignore[call-overload]
    )


PG_URL = os.environ.get("AGENTMESH_TEST_DATABASE_URL", "")
"""A PostgreSQL server for tests (``scripts/postgres start``); CI always sets it."""
MESH_ON_POSTGRESQL = os.environ.get("AGENTMESH_TEST_MESH_DB", "") == "postgresql"
"""The ``mesh`` fixture keeps its executions and idempotency keys in PostgreSQL (``scripts/test`` runs
the integration suite this way as well as on SQLite)."""


def fresh_database(url: str = "") -> str:
    """A new, empty database on the test PostgreSQL server; its URL."""
    import psycopg

    base = url or PG_URL
    name = f"agentmesh_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return base.rsplit("/", 1)[0] + "/" + name


def write_config(home: Path, **fields: object) -> None:
    """``HOME/config.yaml`` with ``fields`` (read by every process of the mesh)."""
    import yaml

    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump(fields))


@pytest.fixture(scope="session")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshConfig]:
    """``agentmesh up --detach --ports-auto`` in a fresh home; ``down`` afterwards (PostgreSQL: see
    :data:`MESH_ON_POSTGRESQL`). The medical agent logs what it receives (DEBUG), so a test can read what
    the agent process itself was given (tests/integration/test_worker_assignment.py)."""
    home = tmp_path_factory.mktemp("mesh")
    fields: dict[str, object] = {"log_levels": {"medical-agent": "DEBUG"}}
    if MESH_ON_POSTGRESQL:
        assert PG_URL, "AGENTMESH_TEST_MESH_DB=postgresql needs AGENTMESH_TEST_DATABASE_URL"
        fields["database_url"] = fresh_database()
    write_config(home, **fields)
    with launched_mesh(home) as cfg:
        yield cfg


@contextlib.contextmanager
def launched_mesh(home: Path, env: dict[str, str] | None = None) -> Iterator[MeshConfig]:
    """``agentmesh up --detach --ports-auto`` in ``home`` (as its config.yaml says); ``down`` afterwards.

    ``env`` is added to the environment of ``up``, so of every process of the mesh (e.g. an OTLP endpoint).
    """
    result = agentmesh_cli(home, "up", "--detach", "--ports-auto", "--json",
                           **({"env": {**os.environ, **env}} if env else {}))
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


def client_tls(cfg: MeshConfig, identity: spiffe.SpiffeId) -> transport.TlsFiles:
    """TLS files of a client identity issued in the mesh home (its own directory and the trust bundle)."""
    return tls_files(cfg, identity)


def lms_admin_headers(cfg: MeshConfig) -> dict[str, str]:
    """The header the running sandbox LMS's ``/admin`` endpoints require."""
    return {"Authorization": f"Bearer {launcher.lms_admin_token(cfg)}"}


class RoleProcess:
    """One role started as its own process on a free port; stop() in finally."""

    def __init__(self, cfg: MeshConfig, name: str, module: str, *, peers: dict[str, str] | None = None,
                 env: dict[str, str] | None = None, extra: tuple[str, ...] = (), demo_tenants: bool = False) -> None:
        """``demo_tenants`` (a policy engine with its audit peer): the demo tenants are applied once it
        listens, as ``agentmesh up`` does on a first start (nothing when some tenant is configured already)."""
        import json
        import os
        import time

        from agentmesh.service import address_file

        self.name = name
        addr_path = address_file(cfg, name)
        addr_path.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", module, *extra, "--home", str(cfg.home), "--port", "0"]
        for peer, addr in (peers or {}).items():
            cmd += ["--peer", f"{peer}={addr}"]
        self.log = cfg.mesh_home.logs / f"{name}-test.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, "OTEL_SERVICE_NAME": name, **(env or {})})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            if addr_path.exists():
                try:
                    self.address = str(json.loads(addr_path.read_text())["address"])
                except (ValueError, KeyError):
                    time.sleep(0.05)
                    continue
                if demo_tenants:
                    self._seed(cfg)
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{name} did not start: {self.log.read_text()[-2000:]}")

    def _seed(self, cfg: MeshConfig) -> None:
        import time

        deadline = time.monotonic() + 30
        while True:
            try:
                launcher.seed_tenants(cfg, self.address)
                return
            except grpc.RpcError:
                if time.monotonic() > deadline:  # not listening yet, or its audit peer not yet
                    self.stop()
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not stop."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        """kill -9."""
        self.proc.kill()
        self.proc.wait()
