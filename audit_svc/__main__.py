"""``python -m audit_svc``: runs the audit role.

The log lives in ``HOME/data/audit.db``; its checkpoint signing key (created on
first start, mode 0600) lives in ``HOME/workloads/svc-audit``, its public key in ``HOME/trust``. The
grant signer's public key (``grant-signer.pub``) is read at start: a record
whose delegation chain does not verify against it is refused.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import grpc
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentmesh import signing, spiffe, transport
from agentmesh.home import MeshHome
from agentmesh.service import ServiceContext, ServiceSpec, StartupError, base_parser, run
from audit_svc.checkpoints import PUBLIC_KEY_FILE, CheckpointSigner
from audit_svc.errors import AuditError
from audit_svc.log_store import AuditLog, AuditLogConfig
from audit_svc.servicer import MAX_RECORD_BYTES, ORIGIN, AuditServicer, add_to_server

log = logging.getLogger(__name__)

SERVICES = ("agentmesh.v1.AuditService",)
DB_FILE = "audit.db"
GRANT_KEY_FILE = "grant-signer.pub"
"""The supervisor's grant verification key, beside the other published keys."""


def db_path(home: MeshHome) -> Path:
    """The audit log's SQLite file under a mesh home."""
    return home.data / DB_FILE


def public_key_path(home: MeshHome) -> Path:
    """The exported checkpoint public key (PEM) under a mesh home."""
    return home.public_key_path(PUBLIC_KEY_FILE)


def grant_key_path(home: MeshHome) -> Path:
    """The grant signer's public key (PEM): records' delegation chains must verify against it."""
    return home.public_key_path(GRANT_KEY_FILE)


def load_grant_keys(home: MeshHome) -> dict[str, Ed25519PublicKey]:
    """The trusted grant keys by key id; none when the mesh has no grant signer yet (then any grant is refused)."""
    path = grant_key_path(home)
    if not path.exists():
        log.warning("no grant key at %s: records carrying grants will be refused", path)
        return {}
    try:
        key = signing.load_public_key(path)
    except signing.SigningKeyError as err:
        raise StartupError(f"grant key {path}: {err}") from err
    return {signing.key_id(key): key}


def open_log(home: MeshHome) -> AuditLog:
    """Opens (creating on first start) the log and its signing key; StartupError names what is wrong."""
    path = db_path(home)
    try:
        signer = CheckpointSigner.load_or_create(home.workload_dir(spiffe.service("audit")), ORIGIN)
        # Headroom over the record limit for the stamped fields.
        return AuditLog.open(path, signer=signer, config=AuditLogConfig(max_entry_bytes=MAX_RECORD_BYTES + 1024))
    except AuditError as err:
        where = "audit log" if str(path) in str(err) else f"audit log {path}"
        raise StartupError(f"{where}: {err} ({err.reason})") from err
    except OSError as err:
        raise StartupError(f"audit log {path}: {err.strerror or err}") from err


def register(server: grpc.Server, ctx: ServiceContext) -> transport.DenialHook:
    """Opens the log, adds the servicer, and records this service's own refusals in it."""
    audit_log = open_log(ctx.config.mesh_home)
    ctx.on_stop(audit_log.close)
    # NOT_SERVING while the log cannot commit (full disk, I/O error, file removed); it retries by itself.
    ctx.health_check("audit log", audit_log.health)
    servicer = AuditServicer(audit_log, trusted_grant_keys=load_grant_keys(ctx.config.mesh_home),
                             identity=ctx.identity)
    add_to_server(servicer, server)
    return servicer.denial_hook()


def spec(args: argparse.Namespace) -> ServiceSpec:
    """The audit role."""
    return ServiceSpec("audit", spiffe.service("audit"), SERVICES, register)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    return run(spec, base_parser("audit_svc", "agentmesh audit service (tamper-evident Merkle log)"), argv)


if __name__ == "__main__":
    sys.exit(main())
