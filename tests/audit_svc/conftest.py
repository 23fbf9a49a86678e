"""Fixtures for the audit log's domain core: a signing key and an open log per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit_svc.checkpoints import CheckpointSigner
from audit_svc.log_store import AuditLog, AuditLogConfig

ORIGIN = "agentmesh.local/audit"


@pytest.fixture(scope="session")
def signer() -> CheckpointSigner:
    """One in-memory key for the session (key files have their own tests)."""
    return CheckpointSigner(Ed25519PrivateKey.generate(), ORIGIN)


@pytest.fixture
def open_log(tmp_path: Path, signer: CheckpointSigner) -> Iterator[Callable[..., AuditLog]]:
    """Opens logs under tmp_path (default ``audit.db``) and closes them after the test."""
    opened: list[AuditLog] = []

    def _open(name: str = "audit.db", config: AuditLogConfig | None = None) -> AuditLog:
        log = AuditLog.open(tmp_path / name, signer=signer, config=config)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()
