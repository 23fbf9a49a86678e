"""``agentmesh up / status / down``: run every role as its own process.

Processes start in dependency order. Each binds its port (0 picks a free one)
and records its address under ``HOME/run``; the launcher passes those
addresses to the processes that depend on them, waits until each one answers
gRPC health SERVING over mTLS, and records the mesh in ``HOME/run/mesh.json``.

Before starting anything, ``up`` moves a home of the old layout (``certs/``,
``keys/``) to ``ca/``, ``trust/`` and ``workloads/`` and issues what is missing
or expiring. The sandbox LMS gets a fresh admin token in
``HOME/workloads/lms-sandbox/admin-token`` (0600) unless one is there.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh import spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import (
    OPERATOR,
    Workload,
    init_identities,
    migrate_legacy_layout,
    tls_files,
    workloads,
)
from agentmesh.pki import PkiError
from agentmesh.service import address_file


class LaunchError(Exception):
    """A process did not come up; the message names it and quotes its log."""


@dataclass(frozen=True, slots=True)
class Running:
    """A started process as recorded in ``mesh.json``."""

    name: str
    spiffe_id: str
    address: str
    pid: int
    kind: str = "grpc"


def state_file(config: MeshConfig) -> Path:
    """Where the launcher records the running mesh."""
    return config.mesh_home.run / "mesh.json"


def read_state(config: MeshConfig) -> list[Running]:
    """The recorded mesh, or [] when none is up."""
    try:
        return [Running(**r) for r in json.loads(state_file(config).read_text())]
    except FileNotFoundError:
        return []


def _write_state(config: MeshConfig, procs: list[Running]) -> None:
    state_file(config).write_text(json.dumps([asdict(p) for p in procs], indent=2))


def pid_alive(pid: int) -> bool:
    """Whether a process exists (and is not a zombie we could reap)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


def health_check(config: MeshConfig, address: str, identity: str, timeout_s: float = 2.0) -> str:
    """The process's health status name over mTLS, or the error that prevented it."""
    tls = tls_files(config, OPERATOR)
    try:
        channel = transport.secure_channel(address, tls, spiffe.parse(identity))
        with channel:
            resp = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout_s
            )
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status))
    except grpc.RpcError as err:
        return f"UNREACHABLE ({err.code().name})"


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def demo_world() -> Path:
    """The demo world shipped with agentmesh: loaded on first start, served by the sandbox LMS."""
    return Path(str(resources.files("agentmesh"))) / "data" / "demo_world.yaml"


def _start(config: MeshConfig, w: Workload, peers: dict[str, str],
           extra: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    log_path = config.mesh_home.logs / f"{w.name}.log"
    address_file(config, w.name).unlink(missing_ok=True)
    cmd = [sys.executable, "-m", w.module, *w.extra_args, *extra, "--home", str(config.home),
           "--host", config.host, "--port", str(config.port(w.name))]
    for name, addr in peers.items():
        cmd += ["--peer", f"{name}={addr}"]
    with open(log_path, "ab") as log:
        # A new session: Ctrl-C in the launcher's terminal must not kill children
        # before the launcher stops them in order.
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "OTEL_SERVICE_NAME": w.name})


def _wait_ready(config: MeshConfig, w: Workload, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + config.startup_timeout_s
    addr_path = address_file(config, w.name)
    log_path = config.mesh_home.logs / f"{w.name}.log"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LaunchError(f"{w.name} exited with code {proc.returncode}:\n{_log_tail(log_path)}")
        if addr_path.exists():
            try:
                address = str(json.loads(addr_path.read_text())["address"])
            except (ValueError, KeyError):
                address = ""
            if address and health_check(config, address, str(w.identity)) == "SERVING":
                return address
        time.sleep(0.05)
    raise LaunchError(f"{w.name} did not report SERVING within {config.startup_timeout_s:.0f}s:\n"
                      f"{_log_tail(log_path)}")


def lms_world(config: MeshConfig) -> Path:
    """The world the sandbox LMS serves: the last one loaded with ``agentmesh data load``, else the demo."""
    loaded = config.mesh_home.data / "lms-world.yaml"
    return loaded if loaded.exists() else demo_world()


def ensure_lms_admin_token(config: MeshConfig) -> Path:
    """The sandbox LMS's admin token file, created (random, 0600, directory 0700) if missing."""
    path = config.mesh_home.lms_admin_token
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.parent.chmod(0o700)
        tmp = path.with_name(path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(32) + "\n")
        os.replace(tmp, path)
    return path


def lms_admin_token(config: MeshConfig) -> str:
    """The bearer token of the running sandbox LMS's ``/admin`` endpoints (``Authorization: Bearer …``)."""
    try:
        return config.mesh_home.lms_admin_token.read_text().strip()
    except OSError as err:
        raise LaunchError(f"no sandbox LMS admin token at {config.mesh_home.lms_admin_token}: "
                          f"{err.strerror} (it is made by 'agentmesh up')") from err


def _start_lms(config: MeshConfig, port: int | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Starts the sandbox LMS (plain HTTP, an external system) and waits for /healthz."""
    addr_path = config.mesh_home.run / "lms.addr"
    addr_path.unlink(missing_ok=True)
    log_path = config.mesh_home.logs / "lms.log"
    cmd = [sys.executable, "-m", "lms_sandbox", "--host", config.host,
           "--port", str(config.port("lms") if port is None else port),
           "--data", str(lms_world(config)), "--address-file", str(addr_path),
           "--admin-token-file", str(ensure_lms_admin_token(config))]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + config.startup_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LaunchError(f"lms exited with code {proc.returncode}:\n{_log_tail(log_path)}")
        if addr_path.exists():
            url = addr_path.read_text().strip()
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        return proc, url
            except OSError:
                pass
        time.sleep(0.05)
    proc.kill()
    raise LaunchError(f"lms did not answer /healthz within {config.startup_timeout_s:.0f}s")


def restart_lms(config: MeshConfig) -> str | None:
    """Restarts a running sandbox LMS on its port so it serves the current world; None if none runs."""
    procs = read_state(config)
    lms = next((p for p in procs if p.name == "lms" and pid_alive(p.pid)), None)
    if lms is None:
        return None
    stop_all([lms])
    port = int(lms.address.rsplit(":", 1)[1])
    proc, url = _start_lms(config, port)
    _write_state(config, [Running("lms", "", url, proc.pid, kind="http") if p.name == "lms" else p for p in procs])
    return url


def report_migration(moved: list[str], config: MeshConfig) -> None:
    """One line on stderr when a home was moved to the current layout (and what was left)."""
    if not moved:
        return
    files = [m for m in moved if not m.startswith("left in ")]
    print(f"agentmesh: moved {len(files)} files of {config.home} to the separated key layout "
          f"(ca/, trust/, workloads/)", file=sys.stderr)
    for line in moved:
        if line.startswith("left in "):
            print(f"agentmesh: {line}", file=sys.stderr)


def up(config: MeshConfig, *, progress: bool = True) -> list[Running]:
    """Starts every process (creating certificates first if needed); returns them."""
    if any(pid_alive(p.pid) for p in read_state(config)):
        raise LaunchError(f"a mesh is already running under {config.home}; run 'agentmesh down' first")
    report_migration(migrate_legacy_layout(config.mesh_home), config)  # LegacyLayoutError when it cannot
    try:
        init_identities(config)
    except PkiError as err:
        raise LaunchError(str(err)) from err
    peers: dict[str, str] = dict(config.peers)
    started: list[Running] = []
    extra: dict[str, tuple[str, ...]] = {"capability": ("--world", str(demo_world()))}
    if config.specialist_delay_ms:
        for agent in config.agents:
            extra[agent] = ("--fixed-delay-ms", str(config.specialist_delay_ms))
    try:
        lms_url = config.lms_url
        if lms_url is None:
            lms_proc, lms_url = _start_lms(config)
            started.append(Running("lms", "", lms_url, lms_proc.pid, kind="http"))
            _write_state(config, started)
            if progress:
                print(f"  {'lms (sandbox)':<18} SERVING  {lms_url}", file=sys.stderr)
        extra["capability"] += ("--lms-url", lms_url)
        for w in workloads(config):
            proc = _start(config, w, peers, extra.get(w.name, ()))
            started.append(Running(w.name, str(w.identity), "", proc.pid))
            address = _wait_ready(config, w, proc)
            started[-1] = Running(w.name, str(w.identity), address, proc.pid)
            peers[w.name] = address
            _write_state(config, started)
            if progress:
                print(f"  {w.name:<18} SERVING  {address}", file=sys.stderr)
    except BaseException:
        stop_all(started)
        state_file(config).unlink(missing_ok=True)
        raise
    return started


def stop_all(procs: list[Running], grace_s: float = 10.0) -> list[str]:
    """SIGTERM in reverse start order, SIGKILL what is left after the grace; returns names killed."""
    for p in reversed(procs):
        if pid_alive(p.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(pid_alive(p.pid) for p in procs):
        time.sleep(0.05)
    killed = []
    for p in procs:
        if pid_alive(p.pid):
            try:
                os.kill(p.pid, signal.SIGKILL)
                killed.append(p.name)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(pid_alive(p.pid) for p in procs):
        time.sleep(0.05)
    return killed


def down(config: MeshConfig) -> list[Running]:
    """Stops the recorded mesh; returns what was stopped."""
    procs = read_state(config)
    stop_all(procs)
    state_file(config).unlink(missing_ok=True)
    # gRPC roles remove their own address files on a clean stop; the LMS does not.
    (config.mesh_home.run / "lms.addr").unlink(missing_ok=True)
    return procs


def status(config: MeshConfig) -> list[dict[str, object]]:
    """Each recorded process with whether it is alive and its health."""
    rows: list[dict[str, object]] = []
    for p in read_state(config):
        alive = pid_alive(p.pid)
        if not alive:
            health = "DEAD"
        elif p.kind == "grpc":
            health = health_check(config, p.address, p.spiffe_id)
        else:
            health = _http_health(p.address)
        rows.append({**asdict(p), "alive": alive, "health": health})
    return rows


def _http_health(url: str) -> str:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as resp:
            return "SERVING" if resp.status == 200 else f"HTTP {resp.status}"
    except OSError as err:
        return f"UNREACHABLE ({err})"


def wait_foreground(config: MeshConfig, procs: list[Running]) -> None:
    """Blocks until Ctrl-C / SIGTERM, warning when a process dies, then stops all."""
    stop = {"now": False}

    def handler(*_: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    reported: set[str] = set()
    while not stop["now"]:
        for p in procs:
            if p.name not in reported and not pid_alive(p.pid):
                reported.add(p.name)
                print(f"agentmesh: {p.name} (pid {p.pid}) exited; see "
                      f"{config.mesh_home.logs / (p.name + '.log')}", file=sys.stderr)
        time.sleep(0.2)
    print("agentmesh: stopping…", file=sys.stderr)
    down(config)


__all__ = ["LaunchError", "Running", "down", "init_identities", "lms_admin_token", "read_state", "status", "up",
           "wait_foreground"]
