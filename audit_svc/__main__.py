"""``python -m audit_svc``: runs the audit role.

The log lives in ``HOME/data/audit.db``; its checkpoint signing key (created on
first start, mode 0600) and the exported public key live in ``HOME/keys``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc

from agentmesh import spiffe, transport
from agentmesh.home import MeshHome
from agentmesh.service import ServiceContext, ServiceSpec, StartupError, base_parser, run
from audit_svc.checkpoints import PUBLIC_KEY_FILE, CheckpointSigner
from audit_svc.errors import AuditError
from audit_svc.log_store import AuditLog, AuditLogConfig
from audit_svc.servicer import MAX_RECORD_BYTES, ORIGIN, AuditServicer, add_to_server

SERVICES = ("agentmesh.v1.AuditService",)
DB_FILE = "audit.db"


def db_path(home: MeshHome) -> Path:
    """The audit log's SQLite file under a mesh home."""
    return home.data / DB_FILE


def public_key_path(home: MeshHome) -> Path:
    """The exported checkpoint public key (PEM) under a mesh home."""
    return home.keys / PUBLIC_KEY_FILE


def open_log(home: MeshHome) -> AuditLog:
    """Opens (creating on first start) the log and its signing key; StartupError names what is wrong."""
    path = db_path(home)
    try:
        signer = CheckpointSigner.load_or_create(home.keys, ORIGIN)
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
    servicer = AuditServicer(audit_log)
    add_to_server(servicer, server)
    return servicer.denial_hook(ctx.identity)


def spec(args: argparse.Namespace) -> ServiceSpec:
    """The audit role."""
    return ServiceSpec("audit", spiffe.service("audit"), SERVICES, register)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    return run(spec, base_parser("audit_svc", "agentmesh audit service (tamper-evident Merkle log)"), argv)


if __name__ == "__main__":
    sys.exit(main())
