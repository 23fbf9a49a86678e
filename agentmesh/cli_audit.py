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
import datetime as dt
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
    from agentmesh.cli import CliError

    try:
        return path.read_bytes()
    except OSError as err:
        raise CliError(f"cannot read {what} {path}: {err.strerror or err}") from err


def _grant_keys(cfg: MeshConfig, args: argparse.Namespace) -> dict[str, Ed25519PublicKey]:
    """Trusted grant keys by key id; the home's grant signer unless --grant-key names others."""
    from agentmesh.cli import CliError
    from agentmesh.signing import SigningKeyError, key_id, load_public_key

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
    from agentmesh.cli import CliError
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
    from agentmesh.cli import CliError
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

    from agentmesh.cli import MeshUnreachable, mesh_channel, rpc_failure
    from agentmesh.v1 import audit_service_pb2 as audit_pb2
    from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc
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
    from agentmesh.cli import CliError, emit

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


def _name(enum: Any, value: int, prefix: str) -> str:
    try:
        return str(enum.Name(value)).removeprefix(prefix)
    except ValueError:
        return str(value)


def _full(enum: Any, value: int) -> str:
    """The contract's full enum name (``--json``), or the number when the enum does not know it."""
    return _name(enum, value, "")


def _when(rec: audit_pb2.AuditRecord) -> str:
    micros = rec.recorded_at.ToMicroseconds()
    when = dt.datetime.fromtimestamp(micros / 1e6, dt.UTC).isoformat(timespec="milliseconds")
    return when.replace("+00:00", "Z")


def _record_dict(rec: audit_pb2.AuditRecord) -> dict[str, Any]:
    """One record for ``--json``: enums by their full names, as the contracts spell them."""
    from agentmesh.v1 import audit_service_pb2 as audit_pb2
    from agentmesh.v1 import common_pb2

    d = rec.policy_decision
    return {
        "index": rec.index,
        "record_id": rec.record_id,
        "recorded_at": _when(rec),
        "recorded_by": rec.recorded_by,
        "event_type": _full(audit_pb2.AuditEventType, rec.event_type),
        "outcome": _full(audit_pb2.AuditOutcome, rec.outcome),
        "reason_codes": list(rec.reason_codes),
        "tenant_id": rec.tenant_id,
        "user_id": rec.user_id,
        "task_id": rec.task_id,
        "agent_id": rec.agent_id,
        "delegation_chain": list(rec.principal.delegation_chain),
        "grants": len(rec.principal.grants),
        "capability_id": rec.capability_id,
        "capability_version": rec.capability_version,
        "resource": rec.resource,
        "policy_decision": None if not rec.HasField("policy_decision") else {
            "effect": _full(common_pb2.PolicyEffect, d.effect),
            "reason_codes": list(d.reason_codes), "policy_version": d.policy_version,
            "decision_id": d.decision_id},
        "analysis_decision": _full(common_pb2.AnalysisDecision, rec.analysis_decision),
        "input_digest": rec.input_digest,
        "output_digest": rec.output_digest,
    }


@dataclass
class _Node:
    """One level of the trail tree; ``items`` are event lines and child nodes in the order first seen."""

    label: str
    items: list[str | _Node] = field(default_factory=list)
    children: dict[tuple[str, ...], _Node] = field(default_factory=dict)
    records: list[audit_pb2.AuditRecord] = field(default_factory=list)
    is_capability: bool = False

    def child(self, key: tuple[str, ...], label: str) -> _Node:
        node = self.children.get(key)
        if node is None:
            node = self.children[key] = _Node(label)
            self.items.append(node)
        return node

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label,
                "items": [i if isinstance(i, str) else i.to_dict() for i in self._rendered_items()]}

    def _rendered_items(self) -> list[str | _Node]:
        return _capability_lines(self.records) if self.is_capability else self.items

    def render(self, prefix: str = "", out: list[str] | None = None) -> list[str]:
        lines = out if out is not None else []
        items = self._rendered_items()
        for n, item in enumerate(items):
            last = n == len(items) - 1
            branch, more = ("└── ", "    ") if last else ("├── ", "│   ")
            if isinstance(item, str):
                lines.append(prefix + branch + item)
            else:
                lines.append(prefix + branch + item.label)
                item.render(prefix + more, lines)
        return lines


def _reasons(codes: Iterable[str]) -> str:
    codes = list(codes)
    return f"  [{', '.join(codes)}]" if codes else ""


def _event_line(rec: audit_pb2.AuditRecord) -> str:
    from agentmesh.v1 import audit_service_pb2 as audit_pb2
    from agentmesh.v1 import common_pb2

    parts = [f"#{rec.index}", _name(audit_pb2.AuditEventType, rec.event_type, "AUDIT_EVENT_TYPE_")]
    if rec.outcome:
        parts.append(_name(audit_pb2.AuditOutcome, rec.outcome, "AUDIT_OUTCOME_"))
    if rec.analysis_decision:
        parts.append("decision " + _name(common_pb2.AnalysisDecision, rec.analysis_decision, "ANALYSIS_DECISION_"))
    if rec.confidence:
        parts.append(f"confidence {rec.confidence:.2f}")
    return " ".join(parts) + _reasons(rec.reason_codes) + f"  ({_when(rec)[11:-1]}, by {_short(rec.recorded_by)})"


def _short(spiffe_id: str) -> str:
    """``spiffe://agentmesh.local/svc/capability`` → ``svc:capability``."""
    from agentmesh import spiffe

    try:
        ident = spiffe.parse(spiffe_id)
    except spiffe.InvalidSpiffeId:
        return spiffe_id or "?"
    return f"{ident.kind}:{ident.name}"


def _capability_lines(records: list[audit_pb2.AuditRecord]) -> list[str | _Node]:
    """policy decision(s) → verification → outcome of one capability call, from whichever of its records exist."""
    from agentmesh.v1 import audit_service_pb2 as audit_pb2
    from agentmesh.v1 import common_pb2

    lines: list[str | _Node] = []
    seen: list[common_pb2.PolicyDecision] = []
    for r in records:
        d = r.policy_decision
        if d.effect and d not in seen:
            # Each distinct decision in order, e.g. HUMAN_APPROVAL_REQUIRED, then CONFIRMATION_REQUIRED.
            seen.append(d)
            effect = _name(common_pb2.PolicyEffect, d.effect, "POLICY_EFFECT_")
            lines.append(f"policy: {effect}{_reasons(d.reason_codes)}"
                         f"  policy {_abbrev(d.policy_version) or '(version not recorded)'}  (#{r.index})")
    if not seen:
        if any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED for r in records):
            lines.append("policy: not reached (refused before the policy engine was asked)")
        else:
            lines.append("policy: no decision recorded")
    for r in records:
        if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_VERIFICATION:
            lines.append(f"verification: {_name(audit_pb2.AuditOutcome, r.outcome, 'AUDIT_OUTCOME_')}"
                         f"{_reasons(r.reason_codes)}  (#{r.index}, {_when(r)[11:-1]})")
    outcomes = [r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME]
    refused = [r for r in records if r.outcome == audit_pb2.AUDIT_OUTCOME_DENIED]
    if outcomes or refused:
        last = (outcomes or refused)[-1]
        digest = f"  output {_abbrev(last.output_digest)}" if last.output_digest else ""
        lines.append(f"outcome: {_name(audit_pb2.AuditOutcome, last.outcome, 'AUDIT_OUTCOME_')}"
                     f"{_reasons(last.reason_codes)}{digest}  (#{last.index}, {_when(last)[11:-1]})")
    elif all(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION for r in records):
        lines.append("outcome: none here (the policy engine was asked before the action was run)")
    else:
        newest = records[-1]
        lines.append(f"outcome: not recorded (last record #{newest.index} "
                     f"{_name(audit_pb2.AuditEventType, newest.event_type, 'AUDIT_EVENT_TYPE_')} "
                     f"{_name(audit_pb2.AuditOutcome, newest.outcome, 'AUDIT_OUTCOME_')})")
    return lines


def _abbrev(digest: str, keep: int = 12) -> str:
    """``sha256:f114545c87d7336a…`` → ``sha256:f114545c87d7…`` (``--json`` has them whole)."""
    algo, sep, hexdigits = digest.rpartition(":")
    return f"{algo}{sep}{hexdigits[:keep]}…" if len(hexdigits) > keep + 4 else digest


def _pick(chain: list[str], kind: str) -> str:
    return next((c for c in chain if c.startswith(kind + ":")), "")


def build_trail(execution_id: str, records: Iterable[audit_pb2.AuditRecord]) -> _Node:
    """Arranges an execution's records as user → supervisor → agent → capability → decision → outcome."""
    from agentmesh import spiffe

    supervisor_id = str(spiffe.service("supervisor"))
    root = _Node(f"execution {execution_id}")
    agents: dict[str, _Node] = {}
    for rec in sorted(records, key=lambda r: r.index):
        chain = list(rec.principal.delegation_chain)
        user = _pick(chain, "user") or (f"user:{rec.tenant_id}/{rec.user_id}" if rec.user_id else "")
        supervisor = _pick(chain, "svc") or ("svc:supervisor" if rec.recorded_by == supervisor_id else "")
        agent = _pick(chain, "agent") or (f"agent:{rec.agent_id}" if rec.agent_id else "")
        if not (user or supervisor or agent or rec.capability_id):
            # E.g. a call refused at a service's door: no principal, only the execution id.
            root.items.append(_event_line(rec))
            continue
        node = root.child(("user", user), user or "user: (not recorded)")
        node = node.child(("svc", supervisor), supervisor or "supervisor: (not recorded)")
        if not agent and not rec.capability_id:
            node.items.append(_event_line(rec))
            continue
        agent_label = agent or "agent: (not recorded)"
        if rec.task_id:
            agent_node = node.child(("agent", agent, rec.task_id), f"{agent_label}  task {rec.task_id}")
            agents.setdefault(agent, agent_node)
        else:
            agent_node = agents.get(agent) or node.child(("agent", agent, ""), agent_label)
            agents.setdefault(agent, agent_node)
        if not rec.capability_id:
            agent_node.items.append(_event_line(rec))
            continue
        label = f"capability:{rec.capability_id}"
        if rec.capability_version:
            label += f" v{rec.capability_version}"
        if rec.resource:
            label += f" on {rec.resource}"
        cap = agent_node.child(("cap", rec.capability_id, rec.resource, rec.input_digest), label)
        cap.is_capability = True
        cap.records.append(rec)
    return root


def _query_execution(cfg: MeshConfig, execution_id: str) -> Iterator[audit_pb2.AuditRecord]:
    import grpc

    from agentmesh.cli import mesh_channel, rpc_failure
    from agentmesh.v1 import audit_service_pb2 as audit_pb2
    from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc

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
    from agentmesh.cli import CliError, emit

    records = list(_query_execution(cfg, args.execution_id))
    if not records:
        raise CliError(f"no audit records for execution {args.execution_id!r}")
    tree = build_trail(args.execution_id, records)
    first, last = min(r.index for r in records), max(r.index for r in records)
    header = (f"{tree.label}: {len(records)} records (#{first}..#{last}), "
              f"{_when(min(records, key=lambda r: r.index))} .. {_when(max(records, key=lambda r: r.index))}")

    def human() -> None:
        print(header)
        for line in tree.render():
            print(line)

    emit(args, {"execution_id": args.execution_id, "tree": tree.to_dict(),
                "records": [_record_dict(r) for r in records]}, human)
    return 0

