"""Supervision and true health over real processes: restarts with backoff, reasons in ``status``, recovery.

One mesh under ``up --detach`` for the module; every test leaves it whole again
(all SERVING) except the last, which kills the supervising loop itself. A second
mesh runs ``up`` in the foreground.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh import config, launcher, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import OPERATOR, PLATFORM_CLI
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc
from agentmesh.v1 import supervisor_service_pb2 as pb

from .conftest import agentmesh_cli, client_tls
from .test_analysis_e2e import analyze

Rows = dict[str, dict[str, Any]]


def status(home: Path) -> tuple[int, Rows]:
    result = agentmesh_cli(home, "status", "--json", timeout=60)
    rows = json.loads(result.stdout) if result.stdout.strip() else []
    return result.returncode, {r["name"]: r for r in rows}


def wait_for(what: str, cond: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.1)


def all_serving(home: Path) -> Rows | None:
    rc, rows = status(home)
    return rows if rc == 0 else None


@pytest.fixture(scope="module")
def sup_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshConfig]:
    home = tmp_path_factory.mktemp("supervised-mesh")
    result = agentmesh_cli(home, "up", "--detach", "--ports-auto", "--json")
    cfg = config.load(home=str(home), environ={})
    try:
        assert result.returncode == 0, result.stderr
        yield cfg
    finally:
        launcher.down(cfg)


def _channel(cfg: MeshConfig, row: dict[str, Any]) -> grpc.Channel:
    return transport.secure_channel(row["address"], client_tls(cfg, OPERATOR), spiffe.parse(row["spiffe_id"]))


def _health(channel: grpc.Channel) -> int:
    return int(health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2).status)


def test_kill_9_restarts_the_process_on_its_port_and_channels_reach_it_within_a_second(
        sup_mesh: MeshConfig) -> None:
    home = sup_mesh.home
    rc, rows = status(home)
    assert rc == 0 and rows["launcher"]["mode"] == "detached" and rows["launcher"]["health"] == "RUNNING"
    before = rows["training-agent"]
    assert before["restarts"] == 0 and before["last_exit_code"] is None
    channel = _channel(sup_mesh, before)  # connected before the kill, like a peer's channel
    assert _health(channel) == health_pb2.HealthCheckResponse.SERVING

    os.kill(before["pid"], signal.SIGKILL)
    # Restarted at all, within wait_for's bound; how fast is a figure of the machine's load, not asserted.
    after = wait_for("training-agent restarted and SERVING", lambda: (
        (r := status(home)[1]["training-agent"])["health"] == "SERVING" and r["pid"] != before["pid"] and r),
        timeout=30)
    assert (after["restarts"], after["last_exit_code"], after["address"]) == (1, -9, before["address"])
    assert after["last_exit_at"] > 0 and after["started_at"] >= after["last_exit_at"] - 1
    seen_serving = time.monotonic()
    # The channel opened before the kill reaches the new process within about a second.
    while True:
        try:
            if _health(channel) == health_pb2.HealthCheckResponse.SERVING:
                break
        except grpc.RpcError:
            pass
        # Bounded well below gRPC's default backoff (which grows past 10 s); the ~1 s figure is measured, not asserted.
        assert time.monotonic() - seen_serving < 5, "an existing channel did not reconnect in time"
        time.sleep(0.02)
    channel.close()
    text = agentmesh_cli(home, "status").stdout
    assert "-9 (SIGKILL) at" in text
    # And the supervisor's own channel to the agent: a whole analysis goes through again.
    time.sleep(1.0)
    ex = analyze(sup_mesh, "Analyze permit WP-10231 and tell me if it can be released")
    assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED, ex.summary
    assert status(home)[0] == 0


def test_a_process_that_fails_at_start_backs_off_shows_its_fresh_lines_and_comes_back(
        sup_mesh: MeshConfig) -> None:
    home = sup_mesh.home
    db = sup_mesh.mesh_home.data / "policy.db"
    away = db.with_name("policy.db.away")
    policy = status(home)[1]["policy"]
    db.rename(away)
    db.mkdir()  # the kill switch database cannot be opened any more
    try:
        # The running policy engine says so ...
        rows = wait_for("policy NOT_SERVING", lambda: (r := status(home)[1])["policy"]["health"] == "NOT_SERVING"
                        and r, timeout=10)
        assert "database policy.db" in rows["policy"]["reason"] and str(db) in rows["policy"]["reason"]
        # ... and once it crashes, every restart fails at start, further and further apart.
        os.kill(policy["pid"], signal.SIGKILL)
        rc, rows = wait_for("three failed restarts", lambda: (
            (s := status(home))[1]["policy"]["restarts"] >= 3 and s[1]["policy"]["health"] == "RESTARTING" and s),
            timeout=30)
        assert rc != 0
        row = rows["policy"]
        assert row["last_exit_code"] == 2
        assert row["next_start_at"] - row["last_exit_at"] >= 2.0  # 0.5, 1, 2, 4 ... s
        assert "restart" in row["reason"] and "exited with code 2" in row["reason"]
        # Its own fresh lines: the last attempt's, ending in its refusal, which appears once (there were
        # three such attempts); nothing of the run before the crash.
        refusals = [line for line in row["log"] if "cannot open kill switch store" in line and str(db) in line]
        assert len(refusals) == 1 and row["log"][-1] == refusals[0], row["log"]
        assert not any("serving as" in line for line in row["log"]), row["log"]
        # The capability service cannot decide anything without policy: NOT_SERVING, naming the peer.
        cap = rows["capability"]
        assert cap["health"] == "NOT_SERVING" and "peer policy" in cap["reason"], cap
        # The human table says the same (sampled again until it catches policy between two attempts).
        human = wait_for("status saying policy: RESTARTING", lambda: (
            h := agentmesh_cli(home, "status")).returncode == 1 and "policy: RESTARTING" in h.stdout and h,
            timeout=30)
        assert "cannot open kill switch store" in human.stdout and str(db) in human.stdout
        assert "capability: NOT_SERVING: peer policy" in human.stdout
    finally:
        db.rmdir()
        away.rename(db)
    rows = wait_for("the whole mesh SERVING again", lambda: all_serving(home), timeout=30)
    assert rows["policy"]["restarts"] >= 3 and rows["policy"]["address"] == policy["address"]


def test_a_hung_required_peer_makes_its_callers_not_serving_until_it_answers(sup_mesh: MeshConfig) -> None:
    home = sup_mesh.home
    policy = wait_for("the whole mesh SERVING", lambda: all_serving(home), timeout=30)["policy"]
    os.kill(policy["pid"], signal.SIGSTOP)
    try:
        # Each process notices on its own next check round: wait for both callers, not the first.
        rows = wait_for("capability and supervisor NOT_SERVING", lambda: (r := status(home)[1])["capability"]["health"]
                        == "NOT_SERVING" and r["supervisor"]["health"] == "NOT_SERVING" and r, timeout=15)
        assert rows["capability"]["reason"].startswith("peer policy: UNREACHABLE")
        assert rows["supervisor"]["health"] == "NOT_SERVING" and "peer policy" in rows["supervisor"]["reason"]
        assert rows["policy"]["health"].startswith("UNREACHABLE") and rows["policy"]["restarts"] == policy["restarts"]
    finally:
        os.kill(policy["pid"], signal.SIGCONT)
    rows = wait_for("the whole mesh SERVING again", lambda: all_serving(home), timeout=15)
    assert rows["policy"]["pid"] == policy["pid"]  # alive all along: nothing was restarted


def _full_disk(db: Path, on: bool) -> None:
    with sqlite3.connect(db, timeout=10) as conn:
        for table in ("entries", "meta", "attr_index"):
            if on:
                conn.execute(f"CREATE TRIGGER test_full_{table} BEFORE INSERT ON {table}"
                             " BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
            else:
                conn.execute(f"DROP TRIGGER test_full_{table}")


def test_audit_with_a_failed_commit_is_not_serving_and_serves_again_when_it_can_write(sup_mesh: MeshConfig) -> None:
    home = sup_mesh.home
    audit = status(home)[1]["audit"]
    db = sup_mesh.mesh_home.data / "audit.db"
    _full_disk(db, True)
    try:
        # Something audit must write: its own record of a refused caller.
        with transport.secure_channel(audit["address"], client_tls(sup_mesh, PLATFORM_CLI),
                                      spiffe.service("audit")) as channel, pytest.raises(grpc.RpcError):
            list(audit_grpc.AuditServiceStub(channel).QueryRecords(audit_pb2.QueryRecordsRequest(), timeout=10))
        rc, rows = wait_for("audit NOT_SERVING", lambda: (
            (s := status(home))[1]["audit"]["health"] == "NOT_SERVING" and s), timeout=10)
        assert rc != 0
        reason = rows["audit"]["reason"]
        assert reason.startswith("audit log: audit log writer failed") and "disk is full" in reason, reason
        assert rows["audit"]["pid"] == audit["pid"]  # alive: its writer retries, nothing to restart
        rows = wait_for("capability NOT_SERVING", lambda: (r := status(home)[1])["capability"]["health"]
                        == "NOT_SERVING" and r, timeout=10)
        assert "peer audit: NOT_SERVING (audit log: " in rows["capability"]["reason"]
    finally:
        _full_disk(db, False)
    rows = wait_for("the whole mesh SERVING again", lambda: all_serving(home), timeout=15)
    assert rows["audit"]["pid"] == audit["pid"] and rows["audit"]["restarts"] == 0
    ex = analyze(sup_mesh, "Analyze permit WP-10231 and tell me if it can be released")
    assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED, ex.summary


def test_a_stopped_process_is_not_restarted_and_a_dead_loop_is_reported(sup_mesh: MeshConfig) -> None:
    """Last: it leaves the mesh without its supervising loop (the fixture's down stops the rest)."""
    home = sup_mesh.home
    rows = status(home)[1]
    os.kill(rows["risk-agent"]["pid"], signal.SIGTERM)  # asked to stop: exits 0, stays stopped
    rows = wait_for("risk-agent STOPPED", lambda: (r := status(home)[1])["risk-agent"]["health"] == "STOPPED" and r)
    assert rows["risk-agent"]["last_exit_code"] == 0 and "not restarted" in rows["risk-agent"]["reason"]
    time.sleep(1.0)
    rc, rows = status(home)
    assert rc == 1 and rows["risk-agent"]["health"] == "STOPPED" and rows["risk-agent"]["restarts"] == 0

    loop = rows["launcher"]["pid"]
    os.kill(loop, signal.SIGKILL)
    wait_for("the loop gone", lambda: not launcher.pid_alive(loop), timeout=10)
    rc, rows = status(home)
    assert rc == 1 and rows["launcher"]["health"] == "DEAD" and "not restarted" in rows["launcher"]["reason"]
    pids = [r["pid"] for r in rows.values() if r["alive"]]
    assert agentmesh_cli(home, "down").returncode == 0
    assert not any(launcher.pid_alive(p) for p in pids)
    assert agentmesh_cli(home, "status").returncode == 1


def test_up_in_the_foreground_supervises_until_down(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = subprocess.Popen([sys.executable, "-m", "agentmesh_cli", "--home", str(home), "up", "--ports-auto"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cfg = config.load(home=str(home), environ={})
    try:
        # While a foreground `up` is still starting processes, status says so and exits 1.
        starting = wait_for("the loop starting", lambda: (
            (r := agentmesh_cli(home, "status", "--json")).stdout.strip().startswith("[")
            and (rows := {x["name"]: x for x in json.loads(r.stdout)}).get("launcher", {}).get("health") == "STARTING"
            and (r, rows)), timeout=90)
        assert starting[0].returncode == 1
        assert "processes started so far" in starting[1]["launcher"]["reason"]
        rows = wait_for("the mesh SERVING", lambda: (r := all_serving(home)) and "supervisor" in r
                        and "compliance-agent" in r and r, timeout=90)
        assert rows["launcher"]["mode"] == "foreground" and rows["launcher"]["pid"] == proc.pid
        agent = rows["compliance-agent"]
        os.kill(agent["pid"], signal.SIGKILL)
        rows = wait_for("compliance-agent restarted", lambda: (
            (r := all_serving(home)) and r["compliance-agent"]["restarts"] == 1 and r))
        assert rows["compliance-agent"]["last_exit_code"] == -9
        pids = [r["pid"] for r in rows.values()]
        down = agentmesh_cli(home, "down")
        assert down.returncode == 0, down.stderr
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "compliance-agent (pid" in err and "restarting in 0.5 s" in err
        assert not any(launcher.pid_alive(p) for p in pids)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        launcher.down(cfg)
