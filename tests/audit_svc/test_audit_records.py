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
from audit_svc.servicer import (
    CHAIN_GRANT_SIGNATURES,
    CHAIN_KEY_IDS,
    CHAIN_RECORD_SIGNATURES,
    AuditServicer,
    attribute_check,
    grant_check,
    index_attributes,
    record_check,
)
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
    base = [sys.executable, "-m", "agentmesh_cli", "--home", str(tmp_path / "home"), "audit", "verify", "--offline",
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
    # The record form (what the log keeps) is accepted too: its record signature is what audit checks.
    servicer.append(_record("e-1", principal=common_pb2.AgentPrincipal(
        grants=[grants.record_form(g) for g in principal.grants])), recorded_by=CAPABILITY)
    audit_log.close()

    with sqlite3.connect(path) as db:
        entries = [entry for (entry,) in db.execute("SELECT entry FROM entries ORDER BY idx")]
    for entry in entries:
        stored = pb.AuditRecord.FromString(entry)
        assert list(stored.principal.grants) == [grants.record_form(g) for g in principal.grants]
        assert [g.signature for g in stored.principal.grants] == [b""]
        assert all(g.record_signature for g in stored.principal.grants)
        assert principal.grants[0].signature not in entry
        # What the log keeps can never be presented as a grant.
        with pytest.raises(grants.GrantInvalid):
            grants.verify(stored.principal.grants[0], TRUSTED)
    tally: dict[str, int] = {}
    report = verify_log(path, signer.public_key, origin=signer.origin, entry_check=record_check,
                        grant_check=grant_check(TRUSTED, tally), attribute_check=attribute_check)
    assert report.ok, report.summary()
    assert tally == {CHAIN_RECORD_SIGNATURES: 2}
    # Offline, a stored chain is held to the grant signer's key: another key's holder cannot pass it off.
    other_key = {"someone-else": Ed25519PrivateKey.generate().public_key()}
    assert [p.reason for p in verify_log(path, signer.public_key, grant_check=grant_check(other_key)).problems] == [
        "GRANT_CHAIN_INVALID"] * 2
    impostor = {signing.key_id(GRANT_KEY.public_key()): Ed25519PrivateKey.generate().public_key()}
    report = verify_log(path, signer.public_key, grant_check=grant_check(impostor))
    assert [p.reason for p in report.problems] == ["GRANT_CHAIN_INVALID"] * 2
    assert "record signature does not verify (GRANT_BAD_SIGNATURE)" in report.problems[0].detail


def _with_record_signature(principal: common_pb2.AgentPrincipal, change: str) -> common_pb2.AgentPrincipal:
    out = common_pb2.AgentPrincipal()
    out.CopyFrom(principal)
    link = out.grants[0]
    if change == "missing":
        link.record_signature = b""
    elif change == "tampered":
        link.record_signature = bytes([link.record_signature[0] ^ 0x01]) + link.record_signature[1:]
    elif change == "the grant signature":
        link.record_signature = link.signature
    elif change == "another key's":
        link.record_signature = Ed25519PrivateKey.generate().sign(grants.RECORD_CONTEXT + link.grant)
    return out


@pytest.mark.parametrize("change, reason", [
    ("missing", "GRANT_MISSING"),
    ("tampered", "GRANT_BAD_SIGNATURE"),
    ("the grant signature", "GRANT_BAD_SIGNATURE"),
    ("another key's", "GRANT_BAD_SIGNATURE"),
])
def test_a_chain_whose_record_signature_does_not_verify_is_refused(
        log_file: tuple[Path, CheckpointSigner, Callable[[], AuditLog]], change: str, reason: str) -> None:
    _, _, open_log = log_file
    audit_log = open_log()
    servicer = AuditServicer(audit_log, trusted_grant_keys=TRUSTED)
    # The grant signature is genuine: it is not what the log keeps, so it vouches for nothing here.
    bad = _with_record_signature(_principal("e-1"), change)
    grants.verify_chain(list(bad.grants), TRUSTED)
    with pytest.raises(errors.InvalidArgument) as info:
        servicer.append(_record("e-1", principal=bad), recorded_by=CAPABILITY)
    assert (info.value.reason, info.value.field) == ("PRINCIPAL_INVALID", "record.principal")
    assert reason in info.value.message and "link 0" in info.value.message
    assert "record signature" in info.value.message
    assert audit_log.size() == 0


def _append_as_stored(audit_log: AuditLog, record: pb.AuditRecord) -> None:
    """Appends a record as an older audit service stored it, grants untouched."""
    record.recorded_by = CAPABILITY

    def build(index: int) -> bytes:
        record.index = index
        return record.SerializeToString(deterministic=True)

    audit_log.append(build, index_attributes(record))


def test_verify_checks_older_records_as_they_were_stored_and_says_how(
        log_file: tuple[Path, CheckpointSigner, Callable[[], AuditLog]], tmp_path: Path) -> None:
    path, signer, open_log = log_file
    audit_log = open_log()
    AuditServicer(audit_log, trusted_grant_keys=TRUSTED).append(_record("e-0", principal=_principal("e-0")),
                                                                recorded_by=CAPABILITY)
    # Before record signatures: grants kept whole, and later kept without their signature.
    for i in (1, 2):
        legacy = _principal(f"e-{i}")
        for g in legacy.grants:
            g.record_signature = b""
        _append_as_stored(audit_log, _record(f"e-{i}", principal=legacy))
    stripped = _principal("e-3")
    for g in stripped.grants:
        g.signature, g.record_signature = b"", b""
    _append_as_stored(audit_log, _record("e-3", principal=stripped))
    _append_as_stored(audit_log, _record("e-4"))  # no chain at all
    audit_log.close()

    tally: dict[str, int] = {}
    report = verify_log(path, signer.public_key, origin=signer.origin, entry_check=record_check,
                        grant_check=grant_check(TRUSTED, tally), attribute_check=attribute_check)
    assert report.ok, report.summary()
    assert tally == {CHAIN_RECORD_SIGNATURES: 1, CHAIN_GRANT_SIGNATURES: 2, CHAIN_KEY_IDS: 1}

    public = tmp_path / "audit.pub.pem"
    public.write_text(signer.public_key_pem())
    grant_pub = tmp_path / "grant-signer.pub"
    grant_pub.write_bytes(signing.public_pem(GRANT_KEY.public_key()))
    base = [sys.executable, "-m", "agentmesh_cli", "--home", str(tmp_path / "home"), "audit", "verify", "--offline",
            "--db", str(path), "--public-key", str(public), "--grant-key", str(grant_pub)]
    human = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert human.returncode == 0, human.stdout + human.stderr
    assert ("ok    delegation chains: 1 verified by their grants' record signatures; "
            "2 of older records verified by the grant signatures they kept; "
            "1 of older records stored without signatures checked by key ids and links only") in human.stdout
    as_json = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=60)
    assert json.loads(as_json.stdout)["chains"] == {
        CHAIN_RECORD_SIGNATURES: 1, CHAIN_GRANT_SIGNATURES: 2, CHAIN_KEY_IDS: 1}


def test_offline_verify_reports_a_tampered_record_signature(
        log_file: tuple[Path, CheckpointSigner, Callable[[], AuditLog]], tmp_path: Path) -> None:
    path, signer, open_log = log_file
    audit_log = open_log()
    checking = AuditServicer(audit_log, trusted_grant_keys=TRUSTED)
    for i in range(3):
        checking.append(_record(f"e-{i}", principal=_principal(f"e-{i}")), recorded_by=CAPABILITY)
    # One audit service that did not check took a record whose record signature was tampered with.
    AuditServicer(audit_log).append(_record("e-3", principal=_with_record_signature(_principal("e-3"), "tampered")),
                                    recorded_by=CAPABILITY)
    checking.append(_record("e-4", principal=_principal("e-4")), recorded_by=CAPABILITY)
    audit_log.close()

    public = tmp_path / "audit.pub.pem"
    public.write_text(signer.public_key_pem())
    home = tmp_path / "home"
    (home / "trust").mkdir(parents=True)
    (home / "trust" / "grant-signer.pub").write_bytes(signing.public_pem(GRANT_KEY.public_key()))  # the default key
    base = [sys.executable, "-m", "agentmesh_cli", "--home", str(home), "audit", "verify", "--offline",
            "--db", str(path), "--public-key", str(public)]
    human = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert human.returncode == 1, human.stdout + human.stderr
    assert "FAIL GRANT_CHAIN_INVALID at record 3" in human.stdout
    assert "record signature does not verify (GRANT_BAD_SIGNATURE)" in human.stdout
    assert "delegation chains: 4 verified by their grants' record signatures" in human.stdout
    data = json.loads(subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=60).stdout)
    assert [(p["reason"], p["index"], p["kind"]) for p in data["problems"]] == [
        ("GRANT_CHAIN_INVALID", 3, "grant_chain")]


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
