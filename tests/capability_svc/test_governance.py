"""The governed path of a mutation, in process: read-back verification, compensation and their audit records.

Grant, policy and audit are the real invoker's ports: grants are signed with a
key made per test, the policy engine allows everything, and audit is a recorder
that keeps what it was given (and can be told to fail).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import struct_pb2
from google.rpc import error_details_pb2

from agentmesh import errors, grants, spiffe
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import capability_service_pb2 as pb
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from capability_svc.executor import CapabilityExecutor
from capability_svc.external_gateway import LmsClient
from capability_svc.governance import GovernedInvoker
from capability_svc.idempotency import IdempotencyStore
from capability_svc.internal_runtime import InternalBackend, InternalStore
from capability_svc.registry import CapabilityRegistry
from capability_svc.runtime import CapabilityRuntime

from .conftest import NOW

AGENT = str(spiffe.agent("work-permit-agent"))
SUPERVISOR = str(spiffe.service("supervisor"))
MUTATIONS = ["workPermit.release", "workPermit.updateValidity"]

INVOKED = (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, audit_pb2.AUDIT_OUTCOME_PENDING, [])
VERIFIED = (audit_pb2.AUDIT_EVENT_TYPE_VERIFICATION, audit_pb2.AUDIT_OUTCOME_SUCCESS, ["VERIFIED", "EFFECT_VISIBLE"])
NOT_VISIBLE = (audit_pb2.AUDIT_EVENT_TYPE_VERIFICATION, audit_pb2.AUDIT_OUTCOME_FAILURE,
               ["VERIFICATION_FAILED", "EFFECT_NOT_VISIBLE"])


def outcome(result: int, *reasons: str) -> tuple[int, int, list[str]]:
    return (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, result, list(reasons))


class Recorder:
    """Keeps every record it is given; ``failing`` lists event types it refuses (audit down)."""

    def __init__(self) -> None:
        self.records: list[tuple[int, dict[str, Any]]] = []
        self.failing: set[int] = set()

    def record(self, event_type: int, **fields: Any) -> audit_pb2.AppendRecordResponse:
        if event_type in self.failing:
            raise errors.Unavailable("audit down", reason="AUDIT_UNAVAILABLE")
        self.records.append((event_type, fields))
        return audit_pb2.AppendRecordResponse()

    def record_later(self, event_type: int, **fields: Any) -> Any:
        self.record(event_type, **fields)
        return None

    def wait(self, sent: Any) -> bool:
        return True

    def trail(self) -> list[tuple[int, int, list[str]]]:
        return [(t, f["outcome"], list(f.get("reason_codes", []))) for t, f in self.records]


def allow(request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
    return policy_pb2.AuthorizeResponse(decision=common_pb2.PolicyDecision(
        decision_id="d-1", effect=common_pb2.POLICY_EFFECT_ALLOW, policy_version="test"))


class Mesh:
    """A GovernedInvoker over the demo world, and what it recorded."""

    def __init__(self, runtime: CapabilityRuntime, invoker: GovernedInvoker, audit: Recorder,
                 signer: grants.GrantSigner, store: InternalStore) -> None:
        self.runtime = runtime
        self.invoker = invoker
        self.audit = audit
        self.signer = signer
        self.store = store

    def invoke(self, capability: str, key: str = "k-1", **arguments: Any) -> pb.InvokeCapabilityResponse:
        grant = self.signer.issue(issuer=SUPERVISOR, audience=AGENT, execution_id="exe-1", task_id="task-1",
                                  tenant_id="acme", user_id="alice", assertion_digest="0" * 64,
                                  roles=["permit-manager"], capabilities=MUTATIONS, now=NOW)
        struct = struct_pb2.Struct()
        struct.update(arguments)
        req = pb.InvokeCapabilityRequest(grant=grant, capability_id=capability, input=struct, idempotency_key=key)
        return self.invoker.invoke(AGENT, req, deadline_s=5.0)

    def refused(self, capability: str, key: str = "k-1", **arguments: Any) -> errors.MeshError:
        with pytest.raises(errors.MeshError) as info:
            self.invoke(capability, key, **arguments)
        return info.value

    def permit(self, permit_id: str) -> Any:
        permit = self.store.scope("acme").get_permit(permit_id)
        assert permit is not None
        return permit


@pytest.fixture
def mesh(tmp_path: Path, registry: CapabilityRegistry, store: InternalStore,
         backend: InternalBackend) -> Iterator[Mesh]:
    executor = CapabilityExecutor(registry, backend, {})
    # The LMS is not on this path; the runtime only needs the internal systems.
    runtime = CapabilityRuntime(registry, store, backend, cast(LmsClient, None), executor)
    idempotency = IdempotencyStore(tmp_path / "idempotency.db")
    key = Ed25519PrivateKey.generate()
    signer = grants.GrantSigner(key)
    audit = Recorder()
    invoker = GovernedInvoker(runtime, idempotency, allow, audit, {signer.key_id: key.public_key()},
                              clock=lambda: NOW + dt.timedelta(seconds=1))
    try:
        yield Mesh(runtime, invoker, audit, signer, store)
    finally:
        idempotency.close()


def error_info(err: errors.MeshError) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo the caller receives (as the servicer aborts with ``err.to_status()``)."""
    (detail,) = err.to_status().details
    info = error_details_pb2.ErrorInfo()
    assert detail.Unpack(info)
    return info


def test_verified_release_records_the_verification(mesh: Mesh) -> None:
    resp = mesh.invoke("workPermit.release", permit_id="WP-10231", reason="all checks passed")
    assert resp.verified
    assert mesh.audit.trail() == [INVOKED, VERIFIED, outcome(audit_pb2.AUDIT_OUTCOME_SUCCESS, "VERIFIED")]
    # The verification record names the call like every other record of it.
    _, verification = mesh.audit.records[1]
    assert verification["capability_id"] == "workPermit.release" and verification["resource"] == "permit:WP-10231"
    assert verification["output_digest"] == mesh.audit.records[2][1]["output_digest"] != ""


def test_lost_write_is_aborted_and_reported_compensated(mesh: Mesh) -> None:
    before = mesh.permit("WP-10241")
    err = mesh.refused("workPermit.release", permit_id="WP-10241", reason="all checks passed")
    assert (err.code, err.reason) == (grpc.StatusCode.ABORTED, "VERIFICATION_FAILED")
    info = error_info(err)
    assert (info.reason, dict(info.metadata)) == ("VERIFICATION_FAILED", {
        "compensated": "true", "restored": "status=PENDING_RELEASE", "compensation": "ALREADY_IN_PREVIOUS_STATE"})
    assert mesh.permit("WP-10241") == before
    assert mesh.audit.trail() == [
        INVOKED, NOT_VISIBLE,
        outcome(audit_pb2.AUDIT_OUTCOME_FAILURE, "VERIFICATION_FAILED", "COMPENSATED",
                "ALREADY_IN_PREVIOUS_STATE status=PENDING_RELEASE")]
    # The key stays failed: a replay never runs the write again.
    again = mesh.refused("workPermit.release", permit_id="WP-10241", reason="all checks passed")
    assert (again.code, again.reason) == (grpc.StatusCode.ABORTED, "IDEMPOTENCY_KEY_FAILED")
    assert len(mesh.audit.trail()) == 3 + 1  # only the refusal of the replay


def test_partial_write_is_compensated_back_to_pending_release(mesh: Mesh) -> None:
    before = mesh.permit("WP-10244")
    err = mesh.refused("workPermit.release", permit_id="WP-10244", reason="all checks passed")
    assert (err.code, err.reason) == (grpc.StatusCode.ABORTED, "VERIFICATION_FAILED")
    assert dict(error_info(err).metadata) == {
        "compensated": "true", "restored": "status=PENDING_RELEASE", "compensation": "RESTORED"}
    assert "compensated" in err.message and "COMPENSATION_FAILED" not in err.message
    after = mesh.permit("WP-10244")
    assert after == before
    assert (after.status, after.released_at, after.released_by, after.release_reason) == (
        "PENDING_RELEASE", None, None, None)
    assert mesh.audit.trail() == [
        INVOKED, NOT_VISIBLE,
        outcome(audit_pb2.AUDIT_OUTCOME_FAILURE, "VERIFICATION_FAILED", "COMPENSATED",
                "RESTORED status=PENDING_RELEASE")]


def test_failing_compensation_is_said_never_hidden(mesh: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("registry connection lost")

    monkeypatch.setattr(mesh.runtime.executor, "compensate", broken)
    err = mesh.refused("workPermit.release", permit_id="WP-10244", reason="all checks passed")
    assert (err.code, err.reason) == (grpc.StatusCode.ABORTED, "VERIFICATION_FAILED")
    assert dict(error_info(err).metadata) == {
        "compensated": "false", "restored": "", "compensation": "COMPENSATION_ERROR"}
    assert "COMPENSATION_FAILED (COMPENSATION_ERROR)" in err.message
    # The half-applied write is still there, and the answer says so.
    assert mesh.permit("WP-10244").status == "RELEASED"
    assert mesh.audit.trail() == [
        INVOKED, NOT_VISIBLE,
        outcome(audit_pb2.AUDIT_OUTCOME_FAILURE, "VERIFICATION_FAILED", "COMPENSATION_FAILED",
                "COMPENSATION_ERROR")]


def test_compensation_refused_by_a_later_write_is_a_failure(mesh: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    compensate = mesh.runtime.executor.compensate

    def suspended_first(*args: Any) -> Any:
        # Another writer suspends the permit between the write and its compensation.
        conn = mesh.store._connect  # noqa: SLF001 - the test plays the other writer
        with conn() as db:
            db.execute("UPDATE permits SET status = 'SUSPENDED' WHERE tenant_id = 'acme' AND permit_id = 'WP-10244'")
        return compensate(*args)

    monkeypatch.setattr(mesh.runtime.executor, "compensate", suspended_first)
    err = mesh.refused("workPermit.release", permit_id="WP-10244", reason="all checks passed")
    assert dict(error_info(err).metadata) == {
        "compensated": "false", "restored": "", "compensation": "CHANGED_BY_ANOTHER_WRITE"}
    assert mesh.permit("WP-10244").status == "SUSPENDED"  # not this call's to undo
    assert mesh.audit.trail()[-1] == outcome(audit_pb2.AUDIT_OUTCOME_FAILURE, "VERIFICATION_FAILED",
                                             "COMPENSATION_FAILED", "CHANGED_BY_ANOTHER_WRITE")


@pytest.mark.parametrize(("permit_id", "mode", "how"), [
    ("WP-10241", None, "ALREADY_IN_PREVIOUS_STATE"),
    ("WP-10235", "partial_write", "RESTORED"),
])
def test_update_validity_is_compensated(mesh: Mesh, permit_id: str, mode: str | None, how: str) -> None:
    if mode:
        mesh.store.scope("acme").set_simulated_verification_failure(permit_id, mode)  # type: ignore[arg-type]
    before = mesh.permit(permit_id)
    err = mesh.refused("workPermit.updateValidity", permit_id=permit_id, valid_until="2026-12-24",
                       reason="holiday shift")
    assert (err.code, err.reason) == (grpc.StatusCode.ABORTED, "VERIFICATION_FAILED")
    assert dict(error_info(err).metadata) == {
        "compensated": "true", "restored": f"valid_until={before.valid_until}", "compensation": how}
    assert mesh.permit(permit_id) == before
    assert mesh.audit.trail() == [
        INVOKED, NOT_VISIBLE,
        outcome(audit_pb2.AUDIT_OUTCOME_FAILURE, "VERIFICATION_FAILED", "COMPENSATED",
                f"{how} valid_until={before.valid_until}")]


def test_compensation_runs_even_when_audit_of_the_failed_check_is_lost(mesh: Mesh) -> None:
    mesh.audit.failing.add(audit_pb2.AUDIT_EVENT_TYPE_VERIFICATION)
    err = mesh.refused("workPermit.release", permit_id="WP-10244", reason="all checks passed")
    assert error_info(err).metadata["compensated"] == "true"
    assert mesh.permit("WP-10244").status == "PENDING_RELEASE"
    assert [t for t, _, _ in mesh.audit.trail()] == [audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED,
                                                      audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME]
