"""``agentmesh audit``: verify the tamper-evident log; show an execution's trail.

``agentmesh audit verify``
    Online (default): fetches the audit service's signed checkpoint, checks its
    signature, and proves with a consistency proof that the log still extends
    every checkpoint saved earlier (``--checkpoint FILE``); when the log file
    is on this machine it then also runs the offline check. ``--offline``
    reads ``HOME/data/audit.db`` (or ``--db``) with only the public key:
    recomputes every leaf and subtree hash, checks every stored checkpoint's
    signature and their mutual consistency, that each record is an
    AuditRecord at its own index, that its delegation chain holds against
    the grant signer's key (``HOME/trust/grant-signer.pub`` or
    ``--grant-key``): the log keeps grants in their record form, without
    the grant signature, and verify checks each link's record signature and
    the chain rules; older records are checked as they were stored (their
    grant signatures where they kept them, else key ids and links only), and
    the output says how many chains were checked each way. It also checks
    that the query index files every record under its own ids. Every problem is reported (a bad record does
    not hide a later one), each as tampering (hashes, roots, checkpoints,
    indexes do not match) or as a delegation chain that does not verify;
    ``--json`` lists them all. Exit 0 when all holds, 1 otherwise.
    ``--save-checkpoint FILE`` keeps the verified checkpoint so a later run
    detects records deleted from the end or rewritten history.

``agentmesh audit trail EXECUTION_ID``
    Reads the execution's records (as the operator) and prints them as a tree:
    user → supervisor → agent (task) → capability → policy decision → outcome.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from agentmesh.config import MeshConfig
    from agentmesh.v1 import audit_service_pb2 as audit_pb2
    from audit_svc.checkpoints import Checkpoint
    from audit_svc.verify import Problem

GRANT_KEY_FILE = "grant-signer.pub"
"""The supervisor's grant verification key under ``HOME/trust``."""


def register(sub: Any, common: argparse.ArgumentParser, out: argparse.ArgumentParser) -> None:
    """Adds ``agentmesh audit verify`` and ``agentmesh audit trail`` to the command tree."""
    audit = sub.add_parser("audit", help="verify the tamper-evident audit log; show an execution's trail")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True, metavar="SUBCOMMAND")

    p = audit_sub.add_parser(
        "verify", parents=[common, out], help="verify the audit log (against the service, or --offline)",
        description="Verify the audit log: signatures, Merkle tree, consistency with saved checkpoints, "
                    "records at their own index and their delegation chains. Reports every problem; exits 1 if any.")
    p.add_argument("--offline", action="store_true",
                   help="verify the log file only (HOME/data/audit.db or --db); no service needed")
    p.add_argument("--checkpoint", action="append", default=[], metavar="FILE",
                   help="a checkpoint saved earlier with --save-checkpoint; the log must extend it (repeatable)")
    p.add_argument("--save-checkpoint", metavar="FILE",
                   help="after a successful check, save the verified checkpoint here (JSON)")
    p.add_argument("--db", metavar="FILE", help="the log file to verify (default HOME/data/audit.db)")
    p.add_argument("--public-key", metavar="FILE",
                   help="the audit service's checkpoint public key, PEM (default HOME/trust/"
                        "audit-checkpoint-ed25519.pub.pem)")
    p.add_argument("--grant-key", action="append", default=[], metavar="FILE",
                   help=f"a public key that signs task grants, PEM (repeatable; default HOME/trust/{GRANT_KEY_FILE})")
    p.set_defaults(handler=cmd_audit_verify)

    p = audit_sub.add_parser(
        "trail", parents=[common, out], help="print an execution's audit records as a delegation tree",
        description="Print the audit trail of one execution as a tree: user -> supervisor -> agent -> "
                    "capability -> policy decision -> outcome.")
    p.add_argument("execution_id", metavar="EXECUTION_ID", help="the execution to show")
    p.set_defaults(handler=cmd_audit_trail)


# --- verify ------------------------------------------------------------------


@dataclass
class _Verification:
    """What one ``audit verify`` run found, for both output forms: every problem, not just the first."""

    mode: str
    checks: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    tree_size: int = 0
    root_hash: bytes = b""
    notes: list[str] = field(default_factory=list)
    chains: dict[str, int] = field(default_factory=dict)
    """Delegation chains that verified offline, by how (``audit_svc.servicer.CHAIN_CHECKS``)."""

    def fail(self, reason: str, detail: str, index: int | None = None, end_index: int | None = None) -> None:
        from audit_svc.verify import Problem

        self.problems.append(Problem(reason, detail, index, end_index))

    def counts(self) -> dict[str, int]:
        """Problems per kind (tampering, grant_chain, unverifiable)."""
        counts: dict[str, int] = {}
        for p in self.problems:
            counts[p.kind] = counts.get(p.kind, 0) + 1
        return counts

    def summary(self) -> str:
        if not self.problems:
            return f"OK: {self.tree_size} records, root {self.root_hash.hex()}"
        words = {"tampering": "tampering", "grant_chain": "delegation chain not verifying",
                 "unverifiable": "could not be verified"}
        kinds = ", ".join(f"{n} {words.get(kind, kind)}" for kind, n in sorted(self.counts().items()))
        n = len(self.problems)
        return f"FAIL: {n} problem{'s' * (n > 1)} ({kinds})"

    def to_dict(self) -> dict[str, Any]:
        first = self.problems[0] if self.problems else None
        return {
            "ok": not self.problems,
            "mode": self.mode,
            "tree_size": self.tree_size,
            "root_hash": self.root_hash.hex(),
            "checks": self.checks,
            "notes": self.notes,
            "chains": self.chains,
            "checkpoint": self.checkpoint.to_dict() if self.checkpoint else None,
            "problems": [p.to_dict() for p in self.problems],
            "counts": self.counts(),
            "problem": None if first is None else first.to_dict(),
            "summary": self.summary(),
        }


def _read(path: Path, what: str) -> bytes:
    from agentmesh_cli.common import CliError

    try:
        return path.read_bytes()
    except OSError as err:
        raise CliError(f"cannot read {what} {path}: {err.strerror or err}") from err


def _grant_keys(cfg: MeshConfig, args: argparse.Namespace) -> dict[str, Ed25519PublicKey]:
    """Trusted grant keys by key id; the home's grant signer unless --grant-key names others."""
    from agentmesh.signing import SigningKeyError, key_id, load_public_key
    from agentmesh_cli.common import CliError

    paths = [Path(p) for p in args.grant_key] or [cfg.mesh_home.public_key_path(GRANT_KEY_FILE)]
    keys: dict[str, Ed25519PublicKey] = {}
    for path in paths:
        if not args.grant_key and not path.exists():
            # No grant key here: records without grants still verify; any grant
            # will be reported as signed by an unknown key.
            continue
        try:
            key = load_public_key(_read(path, "grant key"))
        except SigningKeyError as err:
            raise CliError(f"grant key {path}: {err}") from err
        keys[key_id(key)] = key
    return keys


def _saved_checkpoints(paths: Iterable[str]) -> list[Checkpoint]:
    from agentmesh_cli.common import CliError
    from audit_svc.errors import CheckpointInvalidError
    from audit_svc.verify import load_saved_checkpoint

    saved = []
    for name in paths:
        try:
            saved.append(load_saved_checkpoint(Path(name)))
        except CheckpointInvalidError as err:
            raise CliError(f"--checkpoint {name}: {err}") from err
    return saved


def _db_path(cfg: MeshConfig, args: argparse.Namespace) -> Path:
    from audit_svc.__main__ import db_path

    return Path(args.db) if args.db else db_path(cfg.mesh_home)


def _verify_offline(cfg: MeshConfig, args: argparse.Namespace, result: _Verification,
                    saved: list[Checkpoint]) -> None:
    from agentmesh_cli.common import CliError
    from audit_svc.__main__ import public_key_path
    from audit_svc.servicer import CHAIN_CHECKS, ORIGIN, attribute_check, grant_check, record_check
    from audit_svc.verify import verify_log

    db = _db_path(cfg, args)
    if not db.is_file():
        raise CliError(f"no audit log at {db}")
    pem = _read(Path(args.public_key) if args.public_key else public_key_path(cfg.mesh_home),
                "the audit public key")
    trusted = _grant_keys(cfg, args)
    tally: dict[str, int] = {}
    report = verify_log(db, pem, origin=ORIGIN, saved_checkpoints=saved, entry_check=record_check,
                        grant_check=grant_check(trusted, tally), attribute_check=attribute_check)
    result.tree_size, result.root_hash = report.tree_size, report.root_hash
    result.notes.extend(report.notes)
    result.chains = {how: tally.get(how, 0) for how in CHAIN_CHECKS}
    if any(tally.values()):
        result.checks.append(_chains_line(tally))
    if report.problems:
        result.problems.extend(report.problems)
        return
    result.checks.append(
        f"log file {db}: {report.tree_size} records re-hashed, each at its own index with a verifiable "
        f"delegation chain; {report.checkpoints_checked} checkpoint signatures and roots verified; "
        f"signed up to {report.signed_size}")
    if result.checkpoint is None:
        result.checkpoint = _newest_stored_checkpoint(db)


def _chains_line(tally: dict[str, int]) -> str:
    """How the delegation chains that verified were checked, e.g. ``delegation chains: 12 verified by ...``."""
    from audit_svc.servicer import CHAIN_GRANT_SIGNATURES, CHAIN_KEY_IDS, CHAIN_RECORD_SIGNATURES

    def n(how: str) -> int:
        return tally.get(how, 0)

    parts = [f"{n(CHAIN_RECORD_SIGNATURES)} verified by their grants' record signatures"]
    if n(CHAIN_GRANT_SIGNATURES):
        parts.append(f"{n(CHAIN_GRANT_SIGNATURES)} of older records verified by the grant signatures they kept")
    if n(CHAIN_KEY_IDS):
        parts.append(f"{n(CHAIN_KEY_IDS)} of older records stored without signatures checked by key ids and "
                     "links only (audit verified their signatures when it appended them)")
    return "delegation chains: " + "; ".join(parts)


def _newest_stored_checkpoint(db: Path) -> Checkpoint | None:
    """The newest checkpoint stored in a log file (verify_log has just checked it)."""
    from audit_svc.log_store import CHECKPOINT_COLUMNS, checkpoint_from_row

    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        row = conn.execute(f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints ORDER BY id DESC LIMIT 1").fetchone()
    finally:
        conn.close()
    return checkpoint_from_row(row) if row else None


def _verify_online(cfg: MeshConfig, args: argparse.Namespace, result: _Verification,
                   saved: list[Checkpoint]) -> None:
    import grpc

    from agentmesh.v1 import audit_service_pb2 as audit_pb2
    from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc
    from agentmesh_cli.common import MeshUnreachable, mesh_channel, rpc_failure
    from audit_svc import merkle
    from audit_svc.__main__ import public_key_path
    from audit_svc.checkpoints import key_id_for, load_public_key_pem, verify_checkpoint
    from audit_svc.errors import CheckpointInvalidError, KeyFileError
    from audit_svc.servicer import ORIGIN, checkpoint_from_pb

    try:
        with mesh_channel(cfg, "audit") as channel:
            stub = audit_grpc.AuditServiceStub(channel)
            resp = stub.GetCheckpoint(audit_pb2.GetCheckpointRequest())
            cp = checkpoint_from_pb(resp.checkpoint)
            result.checkpoint, result.tree_size, result.root_hash = cp, cp.tree_size, cp.root_hash
            try:
                key = load_public_key_pem(resp.public_key_pem)
            except KeyFileError as err:
                return result.fail("PUBLIC_KEY_INVALID", f"the service's public key: {err}")
            local = Path(args.public_key) if args.public_key else public_key_path(cfg.mesh_home)
            if local.exists():
                # The key on disk is the trust anchor; a service signing with another key is not this log.
                try:
                    anchor = load_public_key_pem(_read(local, "the audit public key"))
                except KeyFileError as err:
                    return result.fail("PUBLIC_KEY_INVALID", f"{local}: {err}")
                if key_id_for(anchor) != key_id_for(key):
                    return result.fail("KEY_MISMATCH", f"the service signs with key {key_id_for(key)}, "
                                                       f"not {key_id_for(anchor)} from {local}")
            try:
                verify_checkpoint(cp, key, origin=ORIGIN)
            except CheckpointInvalidError as err:
                return result.fail(err.reason, f"the service's checkpoint (size {cp.tree_size}): {err}")
            result.checks.append(f"service checkpoint: size {cp.tree_size}, signature by key {cp.key_id} verified")
            for i, old in enumerate(saved, 1):
                # Each saved checkpoint on its own: one that fails does not hide the next.
                label = f"saved checkpoint {i} (size {old.tree_size})"
                try:
                    verify_checkpoint(old, key, origin=ORIGIN)
                except CheckpointInvalidError as err:
                    result.fail("SAVED_" + err.reason, f"{label}: {err}")
                    continue
                if old.tree_size > cp.tree_size:
                    result.fail("TRUNCATED", f"{label} covers {old.tree_size} records but the service's "
                                             f"log holds only {cp.tree_size}: the newest records were deleted",
                                cp.tree_size, old.tree_size)
                    continue
                proof = stub.GetConsistencyProof(audit_pb2.GetConsistencyProofRequest(
                    first_tree_size=old.tree_size, second_tree_size=cp.tree_size))
                if old.tree_size and not (
                    proof.second_root_hash == cp.root_hash
                    and merkle.verify_consistency(old.tree_size, cp.tree_size, list(proof.proof), old.root_hash,
                                                  cp.root_hash)):
                    result.fail("SAVED_CHECKPOINT_INCONSISTENT",
                                f"the service's log does not extend {label}: records before "
                                f"{old.tree_size} were changed, removed, inserted or reordered")
                    continue
                result.checks.append(f"{label}: the service's log extends it (consistency proof verified)")
    except grpc.RpcError as err:
        failure = rpc_failure(err)
        if isinstance(failure, MeshUnreachable):
            failure.hint = "'audit verify --offline' checks the log file alone"
        raise failure from err
    if args.db or _db_path(cfg, args).is_file():
        # On the same machine: the file must match what the service signed, too
        # (and says what it finds even when the service's answers failed already).
        _verify_offline(cfg, args, result, [*saved, cp])
    else:
        result.notes.append("the log file is not on this machine; only the service's answers were checked")


def _save(path: Path, cp: Checkpoint) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(cp.to_json())
    os.replace(tmp, path)


def cmd_audit_verify(args: argparse.Namespace, cfg: MeshConfig) -> int:
    """``agentmesh audit verify``."""
    from agentmesh_cli.common import CliError, emit

    saved = _saved_checkpoints(args.checkpoint)
    result = _Verification("offline" if args.offline else "online")
    if args.offline:
        _verify_offline(cfg, args, result, saved)
    else:
        _verify_online(cfg, args, result, saved)
    if not result.problems and args.save_checkpoint:
        if result.checkpoint is None:
            raise CliError("the log has no checkpoint yet to save")
        try:
            _save(Path(args.save_checkpoint), result.checkpoint)
        except OSError as err:
            raise CliError(f"--save-checkpoint {args.save_checkpoint}: {err.strerror or err}") from err
        result.checks.append(f"saved checkpoint (size {result.checkpoint.tree_size}) to {args.save_checkpoint}")

    def human() -> None:
        for line in result.checks:
            print(f"ok    {line}")
        for line in result.notes:
            print(f"note  {line}")
        for problem in result.problems:
            print(f"{problem.line()}  [{problem.kind}]")
        print(result.summary())

    emit(args, result.to_dict(), human)
    return 0 if not result.problems else 1


# --- trail -------------------------------------------------------------------


def _query_execution(cfg: MeshConfig, execution_id: str) -> Iterator[audit_pb2.AuditRecord]:
    import grpc

    from agentmesh.v1 import audit_service_pb2 as audit_pb2
    from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc
    from agentmesh_cli.common import mesh_channel, rpc_failure

    try:
        with mesh_channel(cfg, "audit") as channel:
            stub = audit_grpc.AuditServiceStub(channel)
            token = ""
            while True:
                last = ""
                for page in stub.QueryRecords(audit_pb2.QueryRecordsRequest(
                        execution_id=execution_id, page_size=1000, page_token=token)):
                    yield from page.records
                    last = page.next_page_token
                if not last:
                    return
                token = last
    except grpc.RpcError as err:
        raise rpc_failure(err) from err


def cmd_audit_trail(args: argparse.Namespace, cfg: MeshConfig) -> int:
    """``agentmesh audit trail EXECUTION_ID``."""
    from agentmesh.audit_trail import build_trail, record_dict, recorded_at_text
    from agentmesh_cli.common import CliError, emit

    records = list(_query_execution(cfg, args.execution_id))
    if not records:
        raise CliError(f"no audit records for execution {args.execution_id!r}")
    tree = build_trail(args.execution_id, records)
    first, last = min(r.index for r in records), max(r.index for r in records)
    earliest, latest = min(records, key=lambda r: r.index), max(records, key=lambda r: r.index)
    header = (f"{tree.label}: {len(records)} records (#{first}..#{last}), "
              f"{recorded_at_text(earliest)} .. {recorded_at_text(latest)}")

    def human() -> None:
        print(header)
        for line in tree.render():
            print(line)

    emit(args, {"execution_id": args.execution_id, "tree": tree.to_dict(),
                "records": [record_dict(r) for r in records]}, human)
    return 0

