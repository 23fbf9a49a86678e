"""The operator pages' domain: an execution's audit trail as a tree, and what a verify found.

The tree is the CLI's (:func:`agentmesh.audit_trail.build_trail`): user → supervisor →
agent (task) → capability → policy decision → outcome.

:func:`verify` checks, against the audit service's answers and this home's trust
anchor only (the console never reads the log's file):

* the service's signed checkpoint: its key is the one in
  ``HOME/trust/audit-checkpoint-ed25519.pub.pem`` and its signature verifies;
* that the log still extends the checkpoint this console verified last
  (``HOME/data/console-audit-checkpoint.json``), by a consistency proof — so
  records removed from the end or history rewritten since are caught;
* for an execution, that every record of its trail is in the signed tree: the
  record as served is hashed as the log hashes it (RFC 9162 leaf over its
  deterministic encoding) and its inclusion proof leads to the signed root.

Every problem is reported, one line each; a verify that found none saves the
checkpoint for the next one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmesh import errors
from agentmesh.audit_trail import build_trail
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from console_svc.mesh import Mesh


@dataclass
class Verification:
    """The outcome of one verify: what held, what did not."""

    checks: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    tree_size: int = 0
    root_hash: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def summary(self) -> str:
        if self.ok:
            return f"OK: {len(self.checks)} checks held; the log has {self.tree_size} records, root {self.root_hash}"
        n = len(self.problems)
        return f"FAIL: {n} problem{'s' * (n > 1)}"


def trail(execution_id: str, records: Sequence[audit_pb2.AuditRecord]) -> dict[str, Any]:
    """The records as the CLI's tree: ``{"label", "items": [line | subtree]}``."""
    return build_trail(execution_id, records).to_dict()


def verify(mesh: Mesh, anchor_path: Path, state_path: Path,
           records: Sequence[audit_pb2.AuditRecord] = ()) -> Verification:
    """See the module docstring. Failing calls are reported as problems, never as success."""
    from audit_svc import merkle
    from audit_svc.checkpoints import key_id_for, load_public_key_pem, verify_checkpoint
    from audit_svc.errors import AuditError
    from audit_svc.servicer import ORIGIN, checkpoint_from_pb
    from audit_svc.verify import load_saved_checkpoint

    out = Verification()
    try:
        resp = mesh.checkpoint()
        cp = checkpoint_from_pb(resp.checkpoint)
    except (errors.MeshError, AuditError) as err:
        out.problems.append(f"no checkpoint from the audit service: {err}")
        return out
    out.tree_size, out.root_hash = cp.tree_size, cp.root_hash.hex()
    try:
        anchor = load_public_key_pem(anchor_path.read_bytes())
    except (OSError, AuditError) as err:
        out.problems.append(f"the trust anchor {anchor_path} cannot be read: {err}")
        return out
    if cp.key_id != key_id_for(anchor):
        out.problems.append(f"the checkpoint is signed by key {cp.key_id}, not by {key_id_for(anchor)} "
                            f"from {anchor_path.name}")
        return out
    try:
        verify_checkpoint(cp, anchor, origin=ORIGIN)
    except AuditError as err:
        out.problems.append(f"the checkpoint (size {cp.tree_size}) does not verify: {err}")
        return out
    out.checks.append(f"signed checkpoint: size {cp.tree_size}, signature by key {cp.key_id} verified")
    if state_path.exists():
        try:
            old = load_saved_checkpoint(state_path)
            verify_checkpoint(old, anchor, origin=ORIGIN)
        except AuditError as err:
            out.problems.append(f"the checkpoint saved by the last verify cannot be used: {err}")
        else:
            if old.tree_size > cp.tree_size:
                out.problems.append(f"the last verify saw {old.tree_size} records, the log now has {cp.tree_size}:"
                                    " records were removed from the end")
            elif old.tree_size:
                try:
                    proof = mesh.consistency_proof(old.tree_size, cp.tree_size)
                    consistent = proof.second_root_hash == cp.root_hash and merkle.verify_consistency(
                        old.tree_size, cp.tree_size, list(proof.proof), old.root_hash, cp.root_hash)
                except errors.MeshError as err:
                    out.problems.append(f"no consistency proof from size {old.tree_size}: {err}")
                else:
                    if consistent:
                        out.checks.append(f"the log extends the checkpoint of the last verify (size "
                                          f"{old.tree_size}): consistency proof verified")
                    else:
                        out.problems.append(f"the log does not extend the checkpoint of the last verify (size "
                                            f"{old.tree_size}): records were changed, removed or reordered")
    included = 0
    for rec in records:
        if rec.index >= cp.tree_size:
            out.problems.append(f"record #{rec.index} is not covered by the signed checkpoint yet "
                                f"(size {cp.tree_size}); verify again in a moment")
            continue
        leaf = merkle.leaf_hash(rec.SerializeToString(deterministic=True))
        try:
            inclusion = mesh.inclusion_proof(rec.index, cp.tree_size)
        except errors.MeshError as err:
            out.problems.append(f"record #{rec.index}: no inclusion proof: {err}")
            continue
        if inclusion.leaf_hash != leaf or not merkle.verify_inclusion(rec.index, cp.tree_size, leaf,
                                                                      list(inclusion.audit_path), cp.root_hash):
            out.problems.append(f"record #{rec.index} ({rec.record_id}) is not in the signed log as served: "
                                "its hash or its inclusion proof does not match")
            continue
        included += 1
    if records and included == len(records):
        out.checks.append(f"all {included} records of the trail are in the signed log (inclusion proofs verified)")
    if out.ok:
        tmp = state_path.with_name(f".{state_path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(cp.to_json())
            os.replace(tmp, state_path)
        except OSError as err:
            out.checks.append(f"(the checkpoint could not be saved for the next verify: {err.strerror})")
    return out
