"""What the audit service lets into the log, and what ``audit verify`` says about real records.

The servicer is called directly (no network): a record whose delegation
chain does not verify never enters the log; agents record refusals only;
and ``verify`` reports every problem in a log, telling a record whose chain
does not verify (written by an audit service that did not check) from
tampering.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import errors, grants, signing, spiffe
from agentmesh.v1 import audit_service_pb2 as pb
from agentmesh.v1 import common_pb2
from audit_svc.checkpoints import CheckpointSigner
from audit_svc.log_store import AuditLog, AuditLogConfig
from audit_svc.servicer import AuditServicer, attribute_check, grant_check, record_check
from audit_svc.verify import verify_log

CAPABILITY = str(spiffe.service("capability"))
AGENT = str(spiffe.agent("training-agent"))
GRANT_KEY = Ed25519PrivateKey.generate()
TRUSTED = {signing.key_id(GRANT_KEY.public_key()): GRANT_KEY.public_key()}


def _principal(execution_id: str, *, forge: bool = False, self_signed_extra: bool = False) -> common_pb2.AgentPrincipal:
    signer = grants.GrantSigner(GRANT_KEY)
    signed = signer.issue(issuer=str(spiffe.service("supervisor")), audience=AGENT, execution_id=execution_id,
                          task_id="t-1", tenant_id="acme", user_id="alice", assertion_digest="sha256:0",
                          capabilities=["training.getStatus"])
    chain = [signed]
    if forge:  # a wider grant under the real key id, with the old signature
        body = grants.decode(signed)
        body.capabilities.append("workPermit.release")
        signed.grant = body.SerializeToString(deterministic=True)
    if self_signed_extra:  # the attack of issue 11: one more link, signed by the caller's own key
        own = grants.GrantSigner(Ed25519PrivateKey.generate())
        chain.append(own.issue(issuer=AGENT, audience=AGENT, execution_id=execution_id, task_id="t-1",
                               tenant_id="acme", user_id="alice", assertion_digest="sha256:0",
                               capabilities=["training.getStatus"], parent_grant_id=grants.decode(signed).grant_id))
    return common_pb2.AgentPrincipal(agent_id="training-agent", execution_id=execution_id, grants=chain)


def _record(execution_id: str, event: int = pb.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, **fields: object) -> pb.AuditRecord:
    return pb.AuditRecord(event_type=event, execution_id=execution_id, tenant_id="acme", **fields)  # type: ignore[arg-type]


@pytest.fixture()
def log_file(tmp_path: Path) -> Iterator[tuple[Path, CheckpointSigner, Callable[[], AuditLog]]]:
    signer = CheckpointSigner(Ed25519PrivateKey.generate(), "agentmesh.local/audit")
    path = tmp_path / "audit.db"
    opened: list[AuditLog] = []

    def open_log() -> AuditLog:
        log = AuditLog.open(path, signer=signer, config=AuditLogConfig(checkpoint_every_entries=4))
        opened.append(log)
        return log

    yield path, signer, open_log
    for log in opened:
        log.close()


def test_a_record_whose_chain_does_not_verify_never_enters_the_log(log_file: tuple[Path, CheckpointSigner,
                                                                                   Callable[[], AuditLog]]) -> None:
    _, _, open_log = log_file
    audit_log = open_log()
    servicer = AuditServicer(audit_log, trusted_grant_keys=TRUSTED)
    servicer.append(_record("e-1", principal=_principal("e-1")), recorded_by=CAPABILITY)
    for bad in (_principal("e-2", forge=True), _principal("e-2", self_signed_extra=True)):
        with pytest.raises(errors.InvalidArgument) as info:
            servicer.append(_record("e-2", principal=bad), recorded_by=CAPABILITY)
        assert (info.value.reason, info.value.field) == ("PRINCIPAL_INVALID", "record.principal")
    with pytest.raises(errors.InvalidArgument) as info:  # all or nothing, naming the record in the batch
        servicer.append_many([_record("e-3"), _record("e-3", principal=_principal("e-3", forge=True))],
                             recorded_by=CAPABILITY)
    assert info.value.field == "records[1].principal"
    assert audit_log.size() == 1


def test_agents_record_refusals_only(log_file: tuple[Path, CheckpointSigner, Callable[[], AuditLog]]) -> None:
    _, _, open_log = log_file
    servicer = AuditServicer(open_log(), trusted_grant_keys=TRUSTED)
    ok = servicer.append(_record("e-1", pb.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=pb.AUDIT_OUTCOME_DENIED),
                         recorded_by=AGENT)
    assert ok.index == 0
    for event in (pb.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, pb.AUDIT_EVENT_TYPE_KILL_SWITCH_CHANGED,
                  pb.AUDIT_EVENT_TYPE_POLICY_DECISION):
        with pytest.raises(errors.PermissionDenied) as info:
            servicer.append(_record("e-1", event), recorded_by=AGENT)
        assert (info.value.reason, info.value.field) == ("AGENT_EVENT_TYPE_NOT_ALLOWED", "record.event_type")
    # Services record anything.
    servicer.append(_record("e-1", pb.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME), recorded_by=CAPABILITY)


def _write_log_with_a_bad_chain_and_a_later_tamper(open_log: Callable[[], AuditLog], path: Path) -> tuple[int, int]:
    # An audit service that did not verify chains (before this check existed) took a forged one.
    audit_log = open_log()
    unchecked = AuditServicer(audit_log)
    for i in range(12):
        principal = _principal(f"e-{i}", self_signed_extra=(i == 3))
        unchecked.append(_record(f"e-{i}", principal=principal), recorded_by=CAPABILITY)
    audit_log.close()
    db = sqlite3.connect(path)
    try:
        entry = bytearray(db.execute("SELECT entry FROM entries WHERE idx = 9").fetchone()[0])
        entry[-1] ^= 0x01
        db.execute("UPDATE entries SET entry = ? WHERE idx = 9", (bytes(entry),))
        db.commit()
    finally:
        db.close()
    return 3, 9


def test_verify_reports_a_bad_chain_and_a_later_tamper(log_file: tuple[Path, CheckpointSigner,
                                                                       Callable[[], AuditLog]]) -> None:
    path, signer, open_log = log_file
    bad_chain, tampered = _write_log_with_a_bad_chain_and_a_later_tamper(open_log, path)
    report = verify_log(path, signer.public_key, origin=signer.origin, entry_check=record_check,
                        grant_check=grant_check(TRUSTED), attribute_check=attribute_check)
    assert [(p.reason, p.index, p.kind) for p in report.problems] == [
        ("GRANT_CHAIN_INVALID", bad_chain, "grant_chain"), ("LEAF_HASH_MISMATCH", tampered, "tampering")]
    assert "GRANT_" in report.problems[0].detail


def test_the_cli_lists_every_problem_and_exits_non_zero(log_file: tuple[Path, CheckpointSigner,
                                                                        Callable[[], AuditLog]],
                                                        tmp_path: Path) -> None:
    path, signer, open_log = log_file
    bad_chain, tampered = _write_log_with_a_bad_chain_and_a_later_tamper(open_log, path)
    public = tmp_path / "audit.pub.pem"
    public.write_text(signer.public_key_pem())
    grant_pub = tmp_path / "grant-signer.pub"
    grant_pub.write_bytes(signing.public_pem(GRANT_KEY.public_key()))
    base = [sys.executable, "-m", "agentmesh.cli", "--home", str(tmp_path / "home"), "audit", "verify", "--offline",
            "--db", str(path), "--public-key", str(public), "--grant-key", str(grant_pub)]
    human = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert human.returncode == 1, human.stdout + human.stderr
    assert f"FAIL GRANT_CHAIN_INVALID at record {bad_chain}" in human.stdout
    assert f"FAIL LEAF_HASH_MISMATCH at record {tampered}" in human.stdout
    assert "FAIL: 2 problems (1 delegation chain not verifying, 1 tampering)" in human.stdout
    as_json = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=60)
    assert as_json.returncode == 1
    data = json.loads(as_json.stdout)
    assert not data["ok"] and data["counts"] == {"grant_chain": 1, "tampering": 1}
    assert [(p["reason"], p["index"], p["kind"]) for p in data["problems"]] == [
        ("GRANT_CHAIN_INVALID", bad_chain, "grant_chain"), ("LEAF_HASH_MISMATCH", tampered, "tampering")]


def test_the_log_keeps_no_grant_signature_and_still_verifies(log_file: tuple[Path, CheckpointSigner,
                                                                            Callable[[], AuditLog]]) -> None:
    path, signer, open_log = log_file
    audit_log = open_log()
    servicer = AuditServicer(audit_log, trusted_grant_keys=TRUSTED)
    principal = _principal("e-1")
    servicer.append(_record("e-1", principal=principal), recorded_by=CAPABILITY)
    # A link sent without its signature cannot be verified: refused, not stored.
    unsigned = common_pb2.AgentPrincipal()
    unsigned.CopyFrom(principal)
    unsigned.grants[0].signature = b""
    with pytest.raises(errors.InvalidArgument) as info:
        servicer.append(_record("e-2", principal=unsigned), recorded_by=CAPABILITY)
    assert info.value.reason == "PRINCIPAL_INVALID" and "GRANT_MISSING" in info.value.message
    audit_log.close()

    with sqlite3.connect(path) as db:
        [(entry,)] = db.execute("SELECT entry FROM entries").fetchall()
    stored = pb.AuditRecord.FromString(entry)
    assert [g.signature for g in stored.principal.grants] == [b""]
    assert [(g.grant, g.key_id) for g in stored.principal.grants] == [
        (g.grant, g.key_id) for g in principal.grants]
    assert principal.grants[0].signature not in entry
    report = verify_log(path, signer.public_key, origin=signer.origin, entry_check=record_check,
                        grant_check=grant_check(TRUSTED), attribute_check=attribute_check)
    assert report.ok, report.summary()
    # Offline, a stored chain is still held to its keys and links.
    other_key = {"someone-else": Ed25519PrivateKey.generate().public_key()}
    assert [p.reason for p in verify_log(path, signer.public_key, grant_check=grant_check(other_key)).problems] == [
        "GRANT_CHAIN_INVALID"]


def test_a_stored_chain_that_widens_is_reported(log_file: tuple[Path, CheckpointSigner,
                                                                Callable[[], AuditLog]]) -> None:
    path, signer, open_log = log_file
    audit_log = open_log()
    signer_ = grants.GrantSigner(GRANT_KEY)
    first = _principal("e-1").grants[0]
    wider = signer_.issue(issuer=AGENT, audience=AGENT, execution_id="e-1", task_id="t-1", tenant_id="acme",
                          user_id="alice", assertion_digest="sha256:0",
                          capabilities=["training.getStatus", "workPermit.release"],
                          parent_grant_id=grants.decode(first).grant_id)
    principal = common_pb2.AgentPrincipal(agent_id="training-agent", grants=[first, wider])
    with pytest.raises(errors.InvalidArgument):  # what a checking audit does
        AuditServicer(audit_log, trusted_grant_keys=TRUSTED).append(_record("e-1", principal=principal),
                                                                    recorded_by=CAPABILITY)
    AuditServicer(audit_log).append(_record("e-1", principal=principal), recorded_by=CAPABILITY)  # one that did not
    audit_log.close()
    report = verify_log(path, signer.public_key, grant_check=grant_check(TRUSTED))
    assert [(p.reason, p.kind) for p in report.problems] == [("GRANT_CHAIN_INVALID", "grant_chain")]
    assert "CHAIN_WIDENED" in report.problems[0].detail
