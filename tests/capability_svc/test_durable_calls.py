"""Calls that outlive their process: IN_FLIGHT keys whose owner died, and revoked executions."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import capability_service_pb2 as pb
from capability_svc.governance import _digest
from capability_svc.idempotency import IdempotencyStore, KeyHolder, owner_alive, process_owner

from .governed import NOW, SUPERVISOR, Mesh, error_info

ARGS = {"permit_id": "WP-10231", "reason": "all checks passed"}
HOLDER = KeyHolder("acme", "alice", "work-permit-agent")
DEAD = "999999999:1:gone"


def _orphan(mesh: Mesh, tmp_path: Path, key: str = "act-1") -> None:
    """A claim made by a capability process that then died mid-call."""
    m = mesh.runtime.registry.get("workPermit.release").manifest
    dead = IdempotencyStore(tmp_path / "idempotency.db", owner=DEAD)
    try:
        assert dead.claim(HOLDER, m.id, key, _digest({"capability": m.key, "input": ARGS})).new
    finally:
        dead.close()


def _reasons(mesh: Mesh) -> list[str]:
    return [c for _, f in mesh.audit.records for c in f.get("reason_codes", [])]


def test_an_orphaned_key_whose_effect_is_there_completes_with_it(mesh: Mesh, tmp_path: Path) -> None:
    _orphan(mesh, tmp_path)
    # The dead process had released the permit before it died.
    mesh.store.scope("acme").release_permit("WP-10231", actor="alice via work-permit-agent", reason="x",
                                            today=NOW.date(), at="2026-11-30T09:00:00Z")
    calls = len(mesh.policy.requests)
    resp = mesh.invoke("workPermit.release", "act-1", **ARGS)
    assert (resp.verified, resp.replayed, resp.output["status"]) == (True, True, "RELEASED")
    assert len(mesh.policy.requests) == calls + 1, "resolved only under a new ALLOW"
    assert {"IN_FLIGHT_RESOLVED", "EFFECT_PRESENT"} <= set(_reasons(mesh))
    assert not any(t == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED for t, _ in mesh.audit.records), \
        "nothing is written again"
    # The key is complete now: the next replay is an ordinary one.
    again = mesh.invoke("workPermit.release", "act-1", **ARGS)
    assert again.replayed and "IDEMPOTENT_REPLAY" in _reasons(mesh)


def test_an_orphaned_key_whose_effect_is_absent_is_taken_over_and_run(mesh: Mesh, tmp_path: Path) -> None:
    _orphan(mesh, tmp_path)
    assert mesh.permit("WP-10231").status == "PENDING_RELEASE"
    resp = mesh.invoke("workPermit.release", "act-1", **ARGS)
    assert (resp.verified, resp.replayed) == (True, False)
    assert mesh.permit("WP-10231").status == "RELEASED"
    assert {"EFFECT_ABSENT", "TAKEN_OVER", f"dead_owner={DEAD}"} <= set(_reasons(mesh))


def test_a_release_by_someone_else_is_not_this_keys_effect(mesh: Mesh, tmp_path: Path) -> None:
    _orphan(mesh, tmp_path)
    mesh.store.scope("acme").release_permit("WP-10231", actor="bob via work-permit-agent", reason="x",
                                            today=NOW.date(), at="2026-11-30T09:00:00Z")
    err = mesh.refused("workPermit.release", "act-1", **ARGS)
    assert (err.code, err.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "PERMIT_ALREADY_RELEASED")


def test_a_key_in_flight_in_a_live_process_is_still_running(mesh: Mesh, tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        live = process_owner(sleeper.pid, "other")
        assert owner_alive(live, process_owner(instance="me"))
        m = mesh.runtime.registry.get("workPermit.release").manifest
        other = IdempotencyStore(tmp_path / "idempotency.db", owner=live)
        try:
            other.claim(HOLDER, m.id, "act-2", _digest({"capability": m.key, "input": ARGS}))
        finally:
            other.close()
        err = mesh.refused("workPermit.release", "act-2", **ARGS)
        assert (err.code, err.reason) == (grpc.StatusCode.ABORTED, "IDEMPOTENCY_KEY_IN_FLIGHT")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not owner_alive(live, process_owner(instance="me"))
    assert mesh.invoke("workPermit.release", "act-2", **ARGS).verified


def test_owners(tmp_path: Path) -> None:
    me = process_owner(instance="a")
    assert owner_alive(me, me)
    assert not owner_alive(process_owner(instance="b"), me), "another store of this process: that call is over"
    assert not owner_alive("", me) and not owner_alive(None, me) and not owner_alive("x:y:z", me)


def _ts(moment: dt.datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(moment)
    return ts


def test_a_revoked_execution_s_grants_are_refused_and_audited(mesh: Mesh) -> None:
    assert mesh.invoke("workPermit.get", permit_id="WP-10231").output["permit_id"] == "WP-10231"
    mesh.invoker.revoke(SUPERVISOR, pb.RevokeExecutionRequest(execution_id="exe-1", reason="CANCELLED"))
    err = mesh.refused("workPermit.get", permit_id="WP-10231")
    assert (err.code, err.reason, error_info(err).metadata["field"]) == (
        grpc.StatusCode.PERMISSION_DENIED, "GRANT_REVOKED", "grant")
    event, fields = mesh.audit.records[-1]
    assert (event, fields["outcome"]) == (audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, audit_pb2.AUDIT_OUTCOME_DENIED)
    assert fields["reason_codes"][:2] == ["GRANT_REVOKED", "CANCELLED"] and fields["execution_id"] == "exe-1"
    assert any("GRANTS_REVOKED" in f.get("reason_codes", []) for _, f in mesh.audit.records)
    # Other executions are not touched.
    other = mesh.grant(resources=["permit:WP-10231"], execution_id="exe-2")
    assert mesh.call(mesh.request("workPermit.get", grant=other, permit_id="WP-10231")).output


def test_revoking_grants_issued_before_a_restart_keeps_the_fresh_ones(mesh: Mesh) -> None:
    restart = NOW + dt.timedelta(milliseconds=500)
    mesh.invoker.revoke(SUPERVISOR, pb.RevokeExecutionRequest(execution_id="exe-1", issued_before=_ts(restart),
                                                              reason="SUPERVISOR_RESTARTED"))
    old = mesh.grant(resources=["permit:WP-10231"])
    fresh = mesh.grant(resources=["permit:WP-10231"], now=restart + dt.timedelta(milliseconds=1))
    assert mesh.refusal(mesh.request("workPermit.get", grant=old, permit_id="WP-10231")).reason == "GRANT_REVOKED"
    assert mesh.call(mesh.request("workPermit.get", grant=fresh, permit_id="WP-10231")).output
    # A revocation only ever widens: revoking everything afterwards wins, a narrower one later does not.
    resp = mesh.invoker.revoke(SUPERVISOR, pb.RevokeExecutionRequest(execution_id="exe-1", reason="CANCELLED"))
    assert not resp.HasField("issued_before")
    resp = mesh.invoker.revoke(SUPERVISOR, pb.RevokeExecutionRequest(
        execution_id="exe-1", issued_before=_ts(restart), reason="SUPERVISOR_RESTARTED"))
    assert not resp.HasField("issued_before")
    assert mesh.refusal(mesh.request("workPermit.get", grant=fresh, permit_id="WP-10231")).reason == "GRANT_REVOKED"


def test_revocations_survive_a_restart(tmp_path: Path) -> None:
    first = IdempotencyStore(tmp_path / "i.db")
    first.revoke("exe-9", None, "CANCELLED", NOW)
    first.close()
    again = IdempotencyStore(tmp_path / "i.db")
    try:
        held = again.revocation("exe-9")
        assert held is not None and held.covers(NOW + dt.timedelta(days=1)) and held.reason == "CANCELLED"
        assert again.revocation("exe-8") is None
    finally:
        again.close()
