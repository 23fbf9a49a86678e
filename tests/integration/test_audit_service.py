"""AuditService in its own process over mTLS: the service stamps who recorded a
record, only operators read the log, bad input names the field and appends
nothing, proofs verify against signed checkpoints, a kill -9 loses no
acknowledged record, and ``agentmesh audit verify / trail`` work end to end."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from agentmesh import config, errors, grants, spiffe, telemetry, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import OPERATOR, PLATFORM_CLI, init_identities
from agentmesh.pki import leaf_paths
from agentmesh.signing import load_private_key
from agentmesh.v1 import audit_service_pb2 as pb
from agentmesh.v1 import audit_service_pb2_grpc as pb_grpc
from agentmesh.v1 import common_pb2
from audit_svc import merkle
from audit_svc.checkpoints import load_public_key_pem, verify_checkpoint
from audit_svc.servicer import ORIGIN, checkpoint_from_pb

from .conftest import RoleProcess, agentmesh_cli

CAPABILITY = spiffe.service("capability")
SUPERVISOR = spiffe.service("supervisor")
TRAINING_AGENT = spiffe.agent("training-agent")
APPEND = "/agentmesh.v1.AuditService/AppendRecord"

@dataclass
class AuditHome:
    """A mesh home of its own (the session's certificates and keys) and a CLI config naming its audit process."""

    cfg: MeshConfig
    cli_config: Path

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``agentmesh --home HOME --config CONFIG ARGS...`` as a subprocess."""
        return agentmesh_cli(self.cfg.home, "--config", str(self.cli_config), *args)

    def start(self) -> RoleProcess:
        """Starts the audit process on this home (port 0) and points the CLI at it."""
        proc = RoleProcess(self.cfg, "audit", "audit_svc")
        self.cli_config.write_text(f'peers:\n  audit: "{proc.address}"\n')
        return proc

    def stub(self, proc: RoleProcess, identity: spiffe.SpiffeId) -> pb_grpc.AuditServiceStub:
        return pb_grpc.AuditServiceStub(self.channel(proc, identity))

    def channel(self, proc: RoleProcess, identity: spiffe.SpiffeId) -> grpc.Channel:
        tls = transport.TlsFiles.of(leaf_paths(self.cfg.mesh_home.workloads, identity),
                                    self.cfg.mesh_home.trust_bundle)
        return transport.secure_channel(proc.address, tls, spiffe.service("audit"))

    @property
    def db(self) -> Path:
        return self.cfg.mesh_home.data / "audit.db"


def _new_home(base: MeshConfig, path: Path, *, audit_key: bool = False) -> AuditHome:
    # Certificates and the grant / IdP keys of `base`; the audit key is made fresh unless kept.
    for part in ("ca", "trust", "workloads"):
        shutil.copytree(base.mesh_home.root / part, path / part,
                        ignore=None if audit_key else shutil.ignore_patterns("audit-*"))
    cfg = config.load(home=str(path), environ={})
    init_identities(cfg)  # a fresh audit key (published in trust/) unless kept; nothing else is issued
    return AuditHome(cfg, path / "cli-config.yaml")


@pytest.fixture(scope="module")
def home(mesh_config: MeshConfig, tmp_path_factory: pytest.TempPathFactory) -> AuditHome:
    return _new_home(mesh_config, tmp_path_factory.mktemp("audit-home"))


@pytest.fixture(scope="module")
def audit(home: AuditHome) -> Iterator[RoleProcess]:
    proc = home.start()
    try:
        yield proc
    finally:
        proc.stop()


def _grant_chain(cfg: MeshConfig, execution_id: str, *, forge: bool = False) -> common_pb2.AgentPrincipal:
    signer = grants.GrantSigner(load_private_key(cfg.mesh_home.grant_signer_key))
    signed = signer.issue(issuer=str(SUPERVISOR), audience=str(TRAINING_AGENT), execution_id=execution_id,
                          task_id="t-1", tenant_id="acme", user_id="alice", assertion_digest="sha256:0",
                          capabilities=["training.getStatus"])
    if forge:  # a wider grant under the real key id, with the old signature
        body = grants.decode(signed)
        body.capabilities.append("workPermit.release")
        signed.grant = body.SerializeToString(deterministic=True)
    return common_pb2.AgentPrincipal(
        agent_id="training-agent", execution_id=execution_id, grants=[signed],
        delegation_chain=["user:acme/alice", "svc:supervisor", "agent:training-agent",
                          "capability:training.getStatus"])


def _record(execution_id: str, event: int = pb.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, **fields: object) -> pb.AuditRecord:
    values: dict[str, object] = {"tenant_id": "acme", "user_id": "alice", **fields}
    return pb.AuditRecord(event_type=event, execution_id=execution_id, **values)  # type: ignore[arg-type]


def _append(stub: pb_grpc.AuditServiceStub, record: pb.AuditRecord) -> pb.AppendRecordResponse:
    resp: pb.AppendRecordResponse = stub.AppendRecord(pb.AppendRecordRequest(record=record))
    return resp


def _query(stub: pb_grpc.AuditServiceStub, **filters: object) -> list[pb.AuditRecord]:
    return [r for page in stub.QueryRecords(pb.QueryRecordsRequest(**filters)) for r in page.records]  # type: ignore[arg-type]


def _size(stub: pb_grpc.AuditServiceStub) -> int:
    return int(stub.GetCheckpoint(pb.GetCheckpointRequest()).checkpoint.tree_size)


def _field_of(err: grpc.RpcError) -> str:
    info = errors.error_info(err)
    assert info is not None and info.domain == "agentmesh.local"
    return str(info.metadata["field"])


# --------------------------------------------------------------- who recorded it


def test_recorded_by_is_the_callers_mtls_identity(home: AuditHome, audit: RoleProcess) -> None:
    execution_id = f"exe-{uuid.uuid4().hex[:8]}"
    forged = _record(execution_id, recorded_by=str(SUPERVISOR), record_id="mine", index=12345)
    forged.recorded_at.FromSeconds(1)
    resp = _append(home.stub(audit, CAPABILITY), forged)
    assert resp.tree_size == resp.index + 1 and resp.record_id != "mine"

    [stored] = _query(home.stub(audit, OPERATOR), execution_id=execution_id)
    assert stored.recorded_by == str(CAPABILITY)
    assert (stored.record_id, stored.index) == (resp.record_id, resp.index)
    assert stored.recorded_at.seconds > 1
    # The Merkle leaf is the record's own deterministic encoding, its index included.
    proof = home.stub(audit, OPERATOR).GetInclusionProof(pb.GetInclusionProofRequest(leaf_index=resp.index))
    assert proof.leaf_hash == merkle.leaf_hash(stored.SerializeToString(deterministic=True))


@pytest.mark.parametrize("identity", [TRAINING_AGENT, PLATFORM_CLI, OPERATOR])
def test_only_services_append_and_the_refusal_is_audited(home: AuditHome, audit: RoleProcess,
                                                         identity: spiffe.SpiffeId) -> None:
    # Agents may append their own refusals (ACCESS_DENIED) only; clients nothing.
    execution_id = f"exe-{uuid.uuid4().hex[:8]}"
    with telemetry.mesh_ids(execution_id=execution_id), pytest.raises(grpc.RpcError) as info:
        _append(home.stub(audit, identity), _record(execution_id, pb.AUDIT_EVENT_TYPE_EXECUTION_FINISHED))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    detail = errors.error_info(info.value)
    reason = "AGENT_EVENT_TYPE_NOT_ALLOWED" if identity.kind == "agent" else "CALLER_NOT_ALLOWED"
    assert detail is not None and detail.reason == reason

    # The refusal is in the log (under the execution id the caller propagated); the record is not.
    [refusal] = _query(home.stub(audit, OPERATOR), execution_id=execution_id)
    assert refusal.event_type == pb.AUDIT_EVENT_TYPE_ACCESS_DENIED
    assert refusal.outcome == pb.AUDIT_OUTCOME_DENIED
    assert refusal.recorded_by == str(spiffe.service("audit"))
    field = ["field=record.event_type"] if identity.kind == "agent" else []
    assert list(refusal.reason_codes) == [reason, *field, f"caller={identity}", f"method={APPEND}"]
    assert refusal.agent_id == (identity.name if identity.kind == "agent" else "")


@pytest.mark.parametrize("identity, code", [
    (PLATFORM_CLI, grpc.StatusCode.PERMISSION_DENIED),  # refused by the caller table first
    (spiffe.agent("risk-agent"), grpc.StatusCode.INVALID_ARGUMENT),  # may append refusals: the bad id is refused
])
def test_a_refused_caller_cannot_dodge_the_audit_with_bad_ids(home: AuditHome, audit: RoleProcess,
                                                              identity: spiffe.SpiffeId,
                                                              code: grpc.StatusCode) -> None:
    correlation_id = f"corr-{uuid.uuid4().hex[:8]}"
    with telemetry.mesh_ids(execution_id="x" * 600, correlation_id=correlation_id), \
            pytest.raises(grpc.RpcError) as info:
        _append(home.stub(audit, identity), _record("exe-1", pb.AUDIT_EVENT_TYPE_ACCESS_DENIED))
    assert info.value.code() == code
    [refusal] = _query(home.stub(audit, OPERATOR), correlation_id=correlation_id)
    assert refusal.event_type == pb.AUDIT_EVENT_TYPE_ACCESS_DENIED
    assert refusal.agent_id == (identity.name if identity.kind == "agent" else "")
    assert refusal.execution_id == ""  # the bad id is refused, never recorded
    assert not any("x" * 129 in code for code in refusal.reason_codes)


@pytest.mark.parametrize("identity", [CAPABILITY, SUPERVISOR, TRAINING_AGENT, PLATFORM_CLI])
def test_only_operators_read_the_log(home: AuditHome, audit: RoleProcess, identity: spiffe.SpiffeId) -> None:
    stub = home.stub(audit, identity)
    with pytest.raises(grpc.RpcError) as info:
        _query(stub)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as info:
        stub.GetInclusionProof(pb.GetInclusionProofRequest(leaf_index=0))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


# --------------------------------------------------------------- bad input


def _oversized() -> pb.AppendRecordRequest:
    return pb.AppendRecordRequest(record=_record("exe-big", reason_codes=["x" * 1000] * 70))


@pytest.mark.parametrize("request_, field, reason", [
    (pb.AppendRecordRequest(), "record", "MISSING_FIELD"),
    (pb.AppendRecordRequest(record=_record("exe-1", pb.AUDIT_EVENT_TYPE_UNSPECIFIED)), "record.event_type",
     "MISSING_FIELD"),
    (pb.AppendRecordRequest(record=_record("exe-1", 99)), "record.event_type", "ENUM_VALUE_UNKNOWN"),
    (pb.AppendRecordRequest(record=_record("exe-1", outcome=42)), "record.outcome", "ENUM_VALUE_UNKNOWN"),
    (pb.AppendRecordRequest(record=_record("exe-1", confidence=1.5)), "record.confidence", "INVALID_FIELD"),
    (pb.AppendRecordRequest(record=_record("x" * 600)), "record.execution_id", "FIELD_TOO_LONG"),
    (pb.AppendRecordRequest(record=_record("exe-1", tenant_id="ac\x00me")), "record.tenant_id",
     "FIELD_INVALID_CHARACTERS"),
    (_oversized(), "record", "RECORD_TOO_LARGE"),
    # Not an AppendRecordRequest at all: a string field holding invalid UTF-8.
    (b"\x0a\x05\x52\x03\xff\xfe\xfd", "record", "REQUEST_UNDECODABLE"),
], ids=["no-record", "no-event-type", "unknown-event-type", "unknown-outcome", "confidence", "long-id", "nul",
        "oversized", "undecodable"])
def test_bad_records_are_invalid_argument_and_append_nothing(
        home: AuditHome, audit: RoleProcess, request_: pb.AppendRecordRequest | bytes, field: str,
        reason: str) -> None:
    operator = home.stub(audit, OPERATOR)
    before = _size(operator)
    channel = home.channel(audit, CAPABILITY)
    if isinstance(request_, bytes):
        call: Callable[[object], object] = channel.unary_unary(APPEND)
    else:
        call = pb_grpc.AuditServiceStub(channel).AppendRecord
    with pytest.raises(grpc.RpcError) as info:
        call(request_)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _field_of(info.value) == field
    assert errors.error_info(info.value).reason == reason  # type: ignore[union-attr]
    # Nothing appended but the refusal itself, recorded by audit.
    assert _size(operator) == before + 1
    refusal = _query(operator)[-1]
    assert (refusal.event_type, refusal.outcome, refusal.recorded_by) == (
        pb.AUDIT_EVENT_TYPE_ACCESS_DENIED, pb.AUDIT_OUTCOME_DENIED, str(spiffe.service("audit")))
    assert refusal.reason_codes[0] == reason and f"caller={CAPABILITY}" in refusal.reason_codes


_BAD_READS: list[tuple[str, Callable[[pb_grpc.AuditServiceStub, int], object], str]] = [
    ("page_size", lambda s, n: _query(s, page_size=-1), "page_size"),
    ("max_records", lambda s, n: _query(s, max_records=-5), "max_records"),
    ("token-text", lambda s, n: _query(s, page_token="abc"), "page_token"),
    ("token-negative", lambda s, n: _query(s, page_token="-1"), "page_token"),
    ("token-beyond", lambda s, n: _query(s, page_token=str(n + 10)), "page_token"),
    ("time-range", lambda s, n: _query(s, start_time={"seconds": 2_000_000_000}, end_time={"seconds": 1}),
     "end_time"),
    ("time-before-1970", lambda s, n: _query(s, start_time={"seconds": -10}), "start_time"),
    ("long-filter", lambda s, n: _query(s, agent_id="a" * 600), "agent_id"),
    ("leaf-negative", lambda s, n: s.GetInclusionProof(pb.GetInclusionProofRequest(leaf_index=-1)), "leaf_index"),
    ("leaf-beyond", lambda s, n: s.GetInclusionProof(pb.GetInclusionProofRequest(leaf_index=n + 5)), "leaf_index"),
    ("leaf-outside-size", lambda s, n: s.GetInclusionProof(pb.GetInclusionProofRequest(leaf_index=3, tree_size=2)),
     "leaf_index"),
    ("tree-beyond", lambda s, n: s.GetInclusionProof(pb.GetInclusionProofRequest(leaf_index=0, tree_size=n + 5)),
     "tree_size"),
    ("first-after-second", lambda s, n: s.GetConsistencyProof(
        pb.GetConsistencyProofRequest(first_tree_size=3, second_tree_size=2)), "first_tree_size"),
    ("second-beyond", lambda s, n: s.GetConsistencyProof(
        pb.GetConsistencyProofRequest(first_tree_size=1, second_tree_size=n + 5)), "second_tree_size"),
    ("first-negative", lambda s, n: s.GetConsistencyProof(
        pb.GetConsistencyProofRequest(first_tree_size=-1)), "first_tree_size"),
]


@pytest.mark.parametrize("call, field", [(c, f) for _, c, f in _BAD_READS], ids=[i for i, _, _ in _BAD_READS])
def test_bad_ranges_are_invalid_argument_naming_the_field(
        home: AuditHome, audit: RoleProcess, call: Callable[[pb_grpc.AuditServiceStub, int], object],
        field: str) -> None:
    operator = home.stub(audit, OPERATOR)
    for _ in range(4):  # a log big enough for the small ranges above to be valid
        _append(home.stub(audit, CAPABILITY), _record("exe-range"))
    with pytest.raises(grpc.RpcError) as info:
        call(operator, _size(operator))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _field_of(info.value) == field


# --------------------------------------------------------------- start-up


def _run_audit(cfg: MeshConfig) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "audit_svc", "--home", str(cfg.home), "--port", "0"],
                          capture_output=True, text=True, timeout=60)


def test_a_log_that_cannot_be_opened_stops_start_up_with_one_line(
        home: AuditHome, audit: RoleProcess, mesh_config: MeshConfig, tmp_path: Path) -> None:
    # Another audit process holds this home's log.
    locked = _run_audit(home.cfg)
    assert locked.returncode == 2
    assert locked.stderr.strip().splitlines() == [locked.stderr.strip()]
    assert "LOG_LOCKED" in locked.stderr and str(home.db) in locked.stderr

    corrupted = _new_home(mesh_config, tmp_path / "home")
    corrupted.db.write_bytes(b"not a database, just bytes" * 100)
    result = _run_audit(corrupted.cfg)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert str(corrupted.db) in result.stderr and "not a database" in result.stderr


# --------------------------------------------------------------- reading


def test_query_pages_resume_from_the_token_and_stop_at_max_records(home: AuditHome, audit: RoleProcess) -> None:
    execution_id = f"exe-{uuid.uuid4().hex[:8]}"
    writer, operator = home.stub(audit, CAPABILITY), home.stub(audit, OPERATOR)
    indexes = [_append(writer, _record(execution_id, task_id=f"t-{i}")).index for i in range(5)]
    _append(writer, _record("exe-other"))

    pages = list(operator.QueryRecords(pb.QueryRecordsRequest(execution_id=execution_id, page_size=2)))
    assert [[r.index for r in p.records] for p in pages] == [indexes[0:2], indexes[2:4], indexes[4:]]
    assert [p.next_page_token for p in pages] == [str(indexes[1]), str(indexes[3]), ""]

    first = list(operator.QueryRecords(pb.QueryRecordsRequest(execution_id=execution_id, max_records=3)))
    assert [r.task_id for p in first for r in p.records] == ["t-0", "t-1", "t-2"]
    rest = _query(operator, execution_id=execution_id, page_token=first[-1].next_page_token)
    assert [r.task_id for r in rest] == ["t-3", "t-4"]
    # An oversized page is capped (AIP-158), not refused; end_time is exclusive.
    everything = _query(operator, execution_id=execution_id, page_size=50_000)
    assert [r.index for r in everything] == indexes
    window = _query(operator, execution_id=execution_id, start_time=everything[1].recorded_at,
                    end_time=everything[4].recorded_at)
    assert {r.index for r in window} <= set(indexes[1:4]) and indexes[1] in {r.index for r in window}
    assert _query(operator, execution_id="exe-nothing-here") == []


def test_proofs_over_grpc_verify_against_signed_checkpoints(home: AuditHome, audit: RoleProcess) -> None:
    writer, operator = home.stub(audit, CAPABILITY), home.stub(audit, OPERATOR)
    for i in range(7):
        _append(writer, _record("exe-proofs", task_id=f"t-{i}"))
    first = operator.GetCheckpoint(pb.GetCheckpointRequest())
    key = load_public_key_pem(first.public_key_pem)
    cp1 = checkpoint_from_pb(first.checkpoint)
    verify_checkpoint(cp1, key, origin=ORIGIN)
    assert (home.cfg.mesh_home.workload_dir(spiffe.service("audit")) / "audit-checkpoint-ed25519.pub.pem").read_text() \
        == first.public_key_pem

    for leaf in sorted({0, 1, cp1.tree_size // 2, cp1.tree_size - 2, cp1.tree_size - 1}):
        proof = operator.GetInclusionProof(pb.GetInclusionProofRequest(leaf_index=leaf, tree_size=cp1.tree_size))
        assert proof.root_hash == cp1.root_hash
        assert merkle.verify_inclusion(leaf, cp1.tree_size, proof.leaf_hash, list(proof.audit_path), cp1.root_hash)
        assert not merkle.verify_inclusion(leaf, cp1.tree_size, merkle.leaf_hash(b"forged"),
                                           list(proof.audit_path), cp1.root_hash)

    for i in range(5):
        _append(writer, _record("exe-proofs", task_id=f"u-{i}"))
    cp2 = checkpoint_from_pb(operator.GetCheckpoint(pb.GetCheckpointRequest()).checkpoint)
    verify_checkpoint(cp2, key, origin=ORIGIN)
    assert cp2.tree_size == cp1.tree_size + 5
    proof = operator.GetConsistencyProof(pb.GetConsistencyProofRequest(first_tree_size=cp1.tree_size))
    assert (proof.first_tree_size, proof.second_tree_size) == (cp1.tree_size, cp2.tree_size)  # 0 = current
    assert (proof.first_root_hash, proof.second_root_hash) == (cp1.root_hash, cp2.root_hash)
    assert merkle.verify_consistency(cp1.tree_size, cp2.tree_size, list(proof.proof), cp1.root_hash, cp2.root_hash)
    # The newest record's inclusion at the current size, by default.
    newest = operator.GetInclusionProof(pb.GetInclusionProofRequest(leaf_index=cp2.tree_size - 1))
    assert newest.tree_size == cp2.tree_size
    assert merkle.verify_inclusion(newest.leaf_index, cp2.tree_size, newest.leaf_hash, list(newest.audit_path),
                                   cp2.root_hash)


# --------------------------------------------------------------- the CLI


def test_trail_prints_the_delegation_tree(home: AuditHome, audit: RoleProcess) -> None:
    import json

    execution_id = f"exe-{uuid.uuid4().hex[:8]}"
    supervisor, capability = home.stub(audit, SUPERVISOR), home.stub(audit, CAPABILITY)
    principal = _grant_chain(home.cfg, execution_id)
    allow = common_pb2.PolicyDecision(decision_id="d-1", effect=common_pb2.POLICY_EFFECT_ALLOW,
                                      reason_codes=["training.read.allowed"], policy_version="sha256:p1")
    deny = common_pb2.PolicyDecision(decision_id="d-2", effect=common_pb2.POLICY_EFFECT_DENY,
                                     reason_codes=["tenant.isolation"], policy_version="sha256:p1")
    call = dict(task_id="t-1", agent_id="training-agent", principal=principal, capability_id="training.getStatus",
                capability_version="1.2.0")
    _append(supervisor, _record(execution_id, pb.AUDIT_EVENT_TYPE_EXECUTION_STARTED,
                                outcome=pb.AUDIT_OUTCOME_SUCCESS))
    _append(supervisor, _record(execution_id, pb.AUDIT_EVENT_TYPE_TASK_DELEGATED, task_id="t-1",
                                agent_id="training-agent"))
    for event, outcome, reasons in [(pb.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, pb.AUDIT_OUTCOME_PENDING, []),
                                    (pb.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, pb.AUDIT_OUTCOME_SUCCESS, ["VERIFIED"])]:
        _append(capability, _record(execution_id, event, outcome=outcome, reason_codes=reasons,
                                    resource="Worker:W-1001", input_digest="sha256:a", policy_decision=allow, **call))
    _append(capability, _record(execution_id, pb.AUDIT_EVENT_TYPE_POLICY_DECISION, outcome=pb.AUDIT_OUTCOME_DENIED,
                                reason_codes=["RESOURCE_NOT_FOUND", "tenant.isolation"], resource="Worker:G-7",
                                input_digest="sha256:b", policy_decision=deny, **call))
    # Invoked, but its outcome never recorded; no EXECUTION_FINISHED either.
    _append(capability, _record(execution_id, pb.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED,
                                outcome=pb.AUDIT_OUTCOME_PENDING, resource="Worker:W-1002",
                                input_digest="sha256:c", policy_decision=allow, **call))

    result = home.cli("audit", "trail", execution_id)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"execution {execution_id}: 6 records")

    def depth(text: str) -> int:
        """How deep in the tree the first line containing ``text`` sits."""
        line = next(x for x in lines if text in x)
        return len(line) - len(line.lstrip(" │├└─"))

    # user → supervisor → agent → capability → policy decision / outcome, each one level deeper.
    assert depth("user:acme/alice") < depth("svc:supervisor") < depth("agent:training-agent  task t-1") \
        < depth("capability:training.getStatus v1.2.0 on Worker:W-1001") < depth("policy: ALLOW")
    assert depth("EXECUTION_STARTED") == depth("agent:training-agent")
    assert depth("TASK_DELEGATED") == depth("capability:training.getStatus v1.2.0 on Worker:W-1001")
    assert "policy: ALLOW  [training.read.allowed]  policy sha256:p1" in result.stdout
    assert "outcome: SUCCESS  [VERIFIED]" in result.stdout
    assert "policy: DENY  [tenant.isolation]" in result.stdout
    assert "outcome: DENIED  [RESOURCE_NOT_FOUND, tenant.isolation]" in result.stdout
    assert "outcome: not recorded" in result.stdout  # the W-1002 call

    as_json = home.cli("audit", "trail", execution_id, "--json")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert [r["event_type"].removeprefix("AUDIT_EVENT_TYPE_") for r in data["records"]] == [
        "EXECUTION_STARTED", "TASK_DELEGATED", "CAPABILITY_INVOKED", "CAPABILITY_OUTCOME", "POLICY_DECISION",
        "CAPABILITY_INVOKED"]
    assert data["records"][0]["event_type"] == "AUDIT_EVENT_TYPE_EXECUTION_STARTED"  # --json: full enum names
    assert data["tree"]["items"][0]["label"] == "user:acme/alice"

    missing = home.cli("audit", "trail", "exe-that-never-ran")
    assert missing.returncode == 1 and "no audit records" in missing.stderr


def test_a_record_whose_delegation_chain_is_forged_never_enters_the_log(home: AuditHome,
                                                                        audit: RoleProcess) -> None:
    # What a caller sends cannot make `audit verify` fail: the chain is verified at append.
    capability = home.stub(audit, CAPABILITY)
    _append(capability, _record("exe-good", principal=_grant_chain(home.cfg, "exe-good")))
    size = _size(home.stub(audit, OPERATOR))
    with pytest.raises(grpc.RpcError) as info:
        _append(capability, _record("exe-forged", principal=_grant_chain(home.cfg, "exe-forged", forge=True)))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    detail = errors.error_info(info.value)
    assert detail is not None and detail.reason == "PRINCIPAL_INVALID"
    assert detail.metadata["field"] == "record.principal" and "GRANT_BAD_SIGNATURE" in info.value.details()
    # Only the refusal is appended (by audit), not the record.
    assert _size(home.stub(audit, OPERATOR)) == size + 1
    refusal = _query(home.stub(audit, OPERATOR))[-1]
    assert refusal.event_type == pb.AUDIT_EVENT_TYPE_ACCESS_DENIED and not refusal.principal.grants
    assert refusal.reason_codes[:2] == ["PRINCIPAL_INVALID", "field=record.principal"]
    assert _query(home.stub(audit, OPERATOR), execution_id="exe-forged") == []
    result = home.cli("audit", "verify", "--offline")
    assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------- crash


def test_kill_9_during_concurrent_appends_loses_no_acknowledged_record(mesh_config: MeshConfig,
                                                                       tmp_path: Path) -> None:
    home = _new_home(mesh_config, tmp_path / "home")
    writers, kill_after = 6, 400
    acked: list[tuple[pb.AppendRecordResponse, pb.AuditRecord]] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    enough, killed = threading.Event(), threading.Event()
    proc = home.start()
    try:
        def write(n: int) -> None:
            stub = home.stub(proc, CAPABILITY)
            seq = 0
            while True:
                rec = _record(f"crash-{n}", task_id=f"t-{seq}", reason_codes=[f"seq={seq}"],
                              input_digest=f"sha256:{uuid.uuid4().hex}", recorded_by=str(SUPERVISOR))
                try:
                    resp = stub.AppendRecord(pb.AppendRecordRequest(record=rec), timeout=20)
                except grpc.RpcError as err:
                    if not killed.is_set():
                        failures.append(err)
                    return
                with lock:
                    acked.append((resp, rec))
                    if len(acked) >= kill_after:
                        enough.set()
                seq += 1

        threads = [threading.Thread(target=write, args=(n,), daemon=True) for n in range(writers)]
        for t in threads:
            t.start()
        assert enough.wait(120), "the writers never got going"
        proc.proc.kill()  # kill -9 while appends are in flight
        killed.set()
        proc.proc.wait()
        for t in threads:
            t.join(60)
        assert not failures, failures[:1]
        assert not any(t.is_alive() for t in threads)
    finally:
        proc.stop()

    restarted = home.start()
    try:
        result = home.cli("audit", "verify", "--offline")
        assert result.returncode == 0, result.stdout + result.stderr
        operator = home.stub(restarted, OPERATOR)
        stored = {r.index: r for n in range(writers) for r in _query(operator, execution_id=f"crash-{n}",
                                                                       page_size=1000)}
        assert len(acked) >= kill_after and len(stored) >= len(acked)
        for resp, sent in acked:
            record = stored[resp.index]
            assert record.record_id == resp.record_id
            assert record.recorded_by == str(CAPABILITY)
            expected = pb.AuditRecord()
            expected.CopyFrom(sent)
            expected.record_id, expected.index, expected.recorded_by = resp.record_id, resp.index, str(CAPABILITY)
            expected.recorded_at.CopyFrom(record.recorded_at)
            assert record == expected
        # The restarted log carries on where it stopped.
        size = _size(operator)
        assert _append(home.stub(restarted, CAPABILITY), _record("after-crash")).index == size
    finally:
        restarted.stop()


# --------------------------------------------------------------- tampering, via the CLI

TAMPER_RECORDS = 30


@pytest.fixture(scope="module")
def tamper_base(mesh_config: MeshConfig, tmp_path_factory: pytest.TempPathFactory) -> tuple[AuditHome, Path]:
    """A cleanly stopped log of 30 records with delegation chains, and a checkpoint saved by the CLI."""
    home = _new_home(mesh_config, tmp_path_factory.mktemp("tamper-home"))
    saved = home.cfg.home / "saved-checkpoint.json"
    proc = home.start()
    try:
        stub = home.stub(proc, CAPABILITY)
        for i in range(TAMPER_RECORDS):
            execution_id = f"exe-t{i // 3}"
            _append(stub, _record(execution_id, task_id=f"t-{i}", principal=_grant_chain(home.cfg, execution_id)))
        result = home.cli("audit", "verify", "--save-checkpoint", str(saved))
        assert result.returncode == 0, result.stdout + result.stderr
    finally:
        proc.stop()
    assert proc.proc.returncode == 0
    assert not home.db.with_name("audit.db-wal").exists()  # closed cleanly: one self-contained file
    return home, saved


def _flip_byte(db: sqlite3.Connection) -> None:
    entry = bytearray(db.execute("SELECT entry FROM entries WHERE idx = 17").fetchone()[0])
    entry[len(entry) // 2] ^= 0x01
    db.execute("UPDATE entries SET entry = ? WHERE idx = 17", (bytes(entry),))


def _delete_newest(db: sqlite3.Connection, keep: int = 25) -> None:
    # A careful attacker: records, their subtree hashes, checkpoints and query index all made to match.
    db.execute("DELETE FROM entries WHERE idx >= ?", (keep,))
    db.execute("DELETE FROM subtrees WHERE ((idx + 1) << level) > ?", (keep,))
    db.execute("DELETE FROM checkpoints WHERE tree_size > ?", (keep,))
    db.execute("DELETE FROM attr_index WHERE idx >= ?", (keep,))
    db.execute("UPDATE meta SET value = ? WHERE key = 'indexed_size' AND CAST(value AS INTEGER) > ?",
               (str(keep), keep))


def _swap(db: sqlite3.Connection, a: int = 12, b: int = 13) -> None:
    rows = {i: db.execute("SELECT entry, leaf_hash FROM entries WHERE idx = ?", (i,)).fetchone() for i in (a, b)}
    for i, j in ((a, b), (b, a)):
        db.execute("UPDATE entries SET entry = ?, leaf_hash = ? WHERE idx = ?", (*rows[j], i))


def _insert(db: sqlite3.Connection, at: int = 25, *, with_attributes: bool = False) -> None:
    record = _record("exe-t8", task_id="t-forged", index=at)
    record.recorded_at.FromSeconds(1_800_000_000)
    forged = record.SerializeToString(deterministic=True)
    db.execute("UPDATE entries SET idx = -(idx + 1) WHERE idx >= ?", (at,))
    db.execute("UPDATE entries SET idx = -idx WHERE idx < 0")
    db.execute("INSERT INTO entries (idx, leaf_hash, entry) VALUES (?, ?, ?)", (at, merkle.leaf_hash(forged), forged))
    if with_attributes:  # filed for queries like a real record, so only the tree gives it away
        db.execute("UPDATE entries SET execution_id = ?, tenant_id = ?, recorded_at = ? WHERE idx = ?",
                   ("exe-t8", "acme", record.recorded_at.ToMicroseconds(), at))


@pytest.mark.parametrize("tamper, expected", [
    (_flip_byte, "FAIL LEAF_HASH_MISMATCH at record 17"),
    (lambda db: db.execute("DELETE FROM entries WHERE idx = 20"), "FAIL RECORD_MISSING at record 20"),
    (_delete_newest, f"FAIL TRUNCATED in records [25, {TAMPER_RECORDS})"),
    (_swap, "FAIL ENTRY_CHECK_FAILED at record 12: the record says it is record 13"),
    (_insert, "FAIL ATTRIBUTES_MISMATCH at record 25"),
    (lambda db: _insert(db, with_attributes=True), "FAIL SUBTREE_HASH_MISMATCH in records [24, 26)"),
    (None, f"OK: {TAMPER_RECORDS} records"),
], ids=["changed-byte", "deleted-middle", "newest-deleted", "swapped", "inserted", "inserted-and-filed",
        "untouched"])
def test_verify_offline_names_the_first_bad_record(tamper_base: tuple[AuditHome, Path], tmp_path: Path,
                                                   tamper: Callable[[sqlite3.Connection], object] | None,
                                                   expected: str) -> None:
    home, saved = tamper_base
    copy = tmp_path / "audit.db"
    shutil.copyfile(home.db, copy)
    if tamper is not None:
        db = sqlite3.connect(copy)
        try:
            tamper(db)
            db.commit()
        finally:
            db.close()
    result = home.cli("audit", "verify", "--offline", "--db", str(copy), "--checkpoint", str(saved))
    assert result.returncode == (0 if tamper is None else 1), result.stdout + result.stderr
    assert expected in result.stdout, result.stdout


def test_deleting_the_newest_records_needs_a_saved_checkpoint_to_show(tamper_base: tuple[AuditHome, Path],
                                                                      tmp_path: Path) -> None:
    home, saved = tamper_base
    copy = tmp_path / "audit.db"
    shutil.copyfile(home.db, copy)
    db = sqlite3.connect(copy)
    try:
        _delete_newest(db)
        db.commit()
    finally:
        db.close()
    # Self-consistent without the user's checkpoint ...
    alone = home.cli("audit", "verify", "--offline", "--db", str(copy), "--json")
    assert alone.returncode == 0, alone.stdout
    assert '"tree_size": 25' in alone.stdout
    # ... and a missing or unreadable checkpoint file is a usage error, not a pass.
    broken = home.cli("audit", "verify", "--offline", "--db", str(copy), "--checkpoint", str(tmp_path / "nope.json"))
    assert broken.returncode == 1 and "--checkpoint" in broken.stderr


def test_online_verify_catches_a_rolled_back_then_rewritten_log(tamper_base: tuple[AuditHome, Path],
                                                                 tmp_path: Path) -> None:
    base, saved = tamper_base
    # The same log (and signing key) served again after its newest records were deleted.
    home = _new_home(base.cfg, tmp_path / "home", audit_key=True)
    shutil.copyfile(base.db, home.db)
    db = sqlite3.connect(home.db)
    try:
        _delete_newest(db)
        db.commit()
    finally:
        db.close()
    proc = home.start()
    try:
        rolled_back = home.cli("audit", "verify", "--checkpoint", str(saved))
        assert rolled_back.returncode == 1
        assert f"FAIL TRUNCATED in records [25, {TAMPER_RECORDS})" in rolled_back.stdout, rolled_back.stdout
        # Refilled to the old size with other records, and signed with the real key ...
        stub = home.stub(proc, CAPABILITY)
        for i in range(TAMPER_RECORDS - 25):
            _append(stub, _record("exe-rewritten", task_id=f"r-{i}"))
        assert _size(home.stub(proc, OPERATOR)) == TAMPER_RECORDS
        assert home.cli("audit", "verify").returncode == 0  # ... it is self-consistent,
        rewritten = home.cli("audit", "verify", "--checkpoint", str(saved))
        assert rewritten.returncode == 1  # but not the history the user saw.
        assert "FAIL SAVED_CHECKPOINT_INCONSISTENT" in rewritten.stdout, rewritten.stdout
    finally:
        proc.stop()
