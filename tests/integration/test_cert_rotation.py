"""Certificates rotate over real processes: renewed at half their lifetime, taken up without a restart.

A mesh under ``up --detach`` with 30 s leaves (``leaf_validity_s``): the
supervising loop renews every leaf while the mesh runs, every process keeps
its pid and keeps SERVING, and calls over the processes' own long-lived
channels still go through after the first leaves have expired — including
after a peer restarts, when those channels must make a new handshake with
whatever leaf they hold. A process started by hand with an expired leaf
exits 2 naming it, and a running one whose file is overwritten with an
expired leaf goes on serving the valid one.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from agentmesh import config, pki, spiffe
from agentmesh.config import MeshConfig
from agentmesh.identities import OPERATOR, init_identities, mesh_identities
from agentmesh.v1 import supervisor_service_pb2 as pb

from .conftest import RoleProcess, agentmesh_cli, launched_mesh
from .test_analysis_e2e import analyze

LEAF_S = 30
Rows = dict[str, dict[str, Any]]


def _status(home: Path) -> tuple[int, Rows]:
    result = agentmesh_cli(home, "status", "--json", timeout=60)
    rows = json.loads(result.stdout) if result.stdout.strip() else []
    return result.returncode, {r["name"]: r for r in rows}


def _wait_for(what: str, cond: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.2)


def _leaf(cfg: MeshConfig, identity: spiffe.SpiffeId) -> x509.Certificate:
    return x509.load_pem_x509_certificate(cfg.mesh_home.workload_files(identity).cert.read_bytes())


@pytest.fixture(scope="module")
def rotating_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshConfig]:
    home = tmp_path_factory.mktemp("rotating-mesh")
    (home / "config.yaml").write_text(f"leaf_validity_s: {LEAF_S}\n")
    with launched_mesh(home) as cfg:
        yield cfg


def test_every_leaf_is_renewed_and_taken_up_without_a_restart(rotating_mesh: MeshConfig) -> None:
    cfg, home = rotating_mesh, rotating_mesh.home
    rc, rows = _status(home)
    assert rc == 0, rows
    pids = {name: r["pid"] for name, r in rows.items() if r["kind"] == "grpc"}
    first = {str(i): _leaf(cfg, i) for i in mesh_identities(cfg)}
    assert all(c.not_valid_after_utc - c.not_valid_before_utc <= dt.timedelta(seconds=LEAF_S * 1.1 + 1)
               for c in first.values())
    # status shows each process's leaf expiry, read from its certificate file.
    for name in pids:
        assert rows[name]["cert_expires_at"] == pytest.approx(
            _leaf(cfg, spiffe.parse(rows[name]["spiffe_id"])).not_valid_after_utc.timestamp(), abs=60)
    assert "CERT_EXPIRES" in agentmesh_cli(home, "status").stdout

    # Within its lifetime every leaf (workloads and the CLI's clients) is renewed: a new serial.
    def all_renewed() -> bool:
        return all(_leaf(cfg, i).serial_number != first[str(i)].serial_number for i in mesh_identities(cfg))
    _wait_for("every leaf renewed", all_renewed, timeout=LEAF_S * 1.1 + 5)
    log = (cfg.mesh_home.logs / "launcher.log").read_text()
    assert "renewed the certificate of spiffe://agentmesh.local/svc/policy (past half its lifetime)" in log

    # Wait until the first leaves have expired: anything still holding one could not make a handshake.
    old_expiry = max(c.not_valid_after_utc for c in first.values())
    time.sleep(max(0.0, (old_expiry - dt.datetime.now(dt.UTC)).total_seconds() + 1))
    rc, rows = _status(home)
    assert rc == 0, rows
    assert {name: r["pid"] for name, r in rows.items() if r["kind"] == "grpc"} == pids  # nothing restarted
    assert all(r["restarts"] == 0 for name, r in rows.items() if name in pids)
    ex = analyze(cfg, "Analyze permit WP-10231 and tell me if it can be released")
    assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED, ex.summary

    # The capability service's long-lived channel to policy must reconnect now: it can only do so
    # with a leaf that is valid, i.e. the one it reloaded.
    os.kill(pids["policy"], signal.SIGKILL)
    _wait_for("policy restarted and every process SERVING", lambda: (
        (s := _status(home))[0] == 0 and s[1]["policy"]["pid"] != pids["policy"]), timeout=20)
    # status can say SERVING a moment before the capability service's channel has reconnected (its
    # health round may predate the kill): an analysis succeeds once it has, with the renewed leaf.
    _wait_for("an analysis over the reconnected channel", lambda: analyze(
        cfg, "Analyze permit WP-10232 and tell me if it can be released").status == pb.EXECUTION_STATUS_SUCCEEDED,
        timeout=10)
    capability_log = (cfg.mesh_home.logs / "capability.log").read_text()
    assert "took up the renewed certificate" in capability_log


# --- processes run by hand in a home of their own ---

@pytest.fixture()
def hand_home(tmp_path: Path) -> MeshConfig:
    cfg = config.load(home=str(tmp_path / "home"), environ={})
    init_identities(cfg)
    return cfg


def _expire(cfg: MeshConfig, identity: spiffe.SpiffeId) -> Path:
    ca = pki.CertificateAuthority.load(cfg.mesh_home.ca, cfg.mesh_home.trust_bundle)
    paths = cfg.mesh_home.workload_files(identity)
    ca.issue_unchecked(identity, paths, not_before=dt.datetime.now(dt.UTC) - dt.timedelta(days=2),
                       validity=dt.timedelta(hours=1))
    return paths.cert


def test_a_process_started_with_an_expired_leaf_exits_2_naming_it(hand_home: MeshConfig) -> None:
    cert = _expire(hand_home, spiffe.service("policy"))
    result = subprocess.run([sys.executable, "-m", "policy_svc", "--home", str(hand_home.home), "--port", "0"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert str(cert) in last and "expired at" in last and "(valid " in last, result.stderr


def _served_serial(cfg: MeshConfig, address: str, server: spiffe.SpiffeId) -> int:
    host, port = address.rsplit(":", 1)
    client = cfg.mesh_home.workload_files(OPERATOR)
    ctx = ssl.create_default_context(cafile=str(cfg.mesh_home.trust_bundle))
    ctx.load_cert_chain(str(client.cert), str(client.key))
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection((host, int(port)), timeout=5) as sock, ctx.wrap_socket(
        sock, server_hostname=server.dns_name
    ) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_a_running_server_whose_leaf_turns_expired_keeps_serving_the_valid_one(hand_home: MeshConfig) -> None:
    policy = spiffe.service("policy")
    proc = RoleProcess(hand_home, "policy", "policy_svc")
    try:
        valid = _leaf(hand_home, policy).serial_number
        assert _served_serial(hand_home, proc.address, policy) == valid
        cert = _expire(hand_home, policy)
        for _ in range(3):
            assert _served_serial(hand_home, proc.address, policy) == valid
        assert proc.proc.poll() is None
        log = proc.log.read_text()
        assert log.count("REFUSING to serve") == 1 and f"{cert}: the certificate expired at" in log
    finally:
        proc.stop()
