"""``agentmesh up / status / down``: run every role as its own process, and keep it running.

Processes start in dependency order. Each binds its port (0 picks a free one)
and records its address under ``HOME/run``; the launcher passes those
addresses to the processes that depend on them, waits until each one answers
gRPC health SERVING over mTLS, and records the mesh in ``HOME/run/mesh.json``.

Before starting anything, ``up`` moves a home of the old layout (``certs/``,
``keys/``) to ``ca/``, ``trust/`` and ``workloads/`` and issues what is missing
or expiring. The sandbox LMS gets a fresh admin token in
``HOME/workloads/lms-sandbox/admin-token`` (0600) unless one is there.

**Supervision.** Once the mesh is up, a supervising loop restarts a process that
crashed (killed by a signal other than SIGTERM/SIGINT, or any exit code but 0) on
the port it had, after a backoff of 0.5 s doubling to 10 s, reset once the
process has been SERVING for 10 s. A process that exits 0 (it was stopped, e.g.
with SIGTERM) is left stopped. ``up`` runs the loop itself; ``up --detach``
starts it as a small background process (``python -m agentmesh.launcher``, its
log ``HOME/logs/launcher.log``) which starts the mesh, and returns once every
process is SERVING. ``mesh.json`` records the loop and, for each process, its
pid, restarts, last exit code and times, and where its current run's log lines
begin. ``down`` stops the loop, which stops the processes in reverse order.

**Certificates.** The supervising loop is the only long-lived part of the mesh
that reads ``HOME/ca/``: its :class:`LeafRenewer` thread re-issues every
workload's and CLI client's leaf once half its lifetime has passed (config
``leaf_validity_s``), with a new key, and logs each renewal; servers and
channels take the new leaf up without a restart (:mod:`agentmesh.transport`).
``status`` shows each process's leaf expiry and warns in its last tenth.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509

from agentmesh import health, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import (
    CONSOLE,
    OPERATOR,
    Workload,
    init_identities,
    leaf_due,
    leaf_validity,
    mesh_identities,
    migrate_legacy_layout,
    tls_files,
    workloads,
)
from agentmesh.pki import CertificateAuthority, PkiError, Validity, validity_of
from agentmesh.service import address_file

BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 10.0
BACKOFF_RESET_S = 10.0
"""A process SERVING this long starts again from the initial backoff if it crashes."""
TICK_S = 0.1
LOG_LINES = 5
LAUNCHER = "launcher"
"""The name (and ``kind``) of the supervising loop's row in ``status``."""
RENEW_CHECK_S = 1.0
"""How often the supervising loop looks at the mesh's certificates."""


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
    state: str = "running"
    """``starting`` (no address or no SERVING yet), ``running``, ``backoff`` (crashed, restart due at
    ``next_start_at``), ``stopped`` (exited 0: not restarted)."""
    started_at: float = 0.0
    serving_since: float = 0.0
    restarts: int = 0
    last_exit_code: int | None = None
    last_exit_at: float = 0.0
    next_start_at: float = 0.0
    log_offset: int = 0
    """Where the current (or last) run's lines begin in its log."""


@dataclass(frozen=True, slots=True)
class Supervisor:
    """The supervising loop as recorded in ``mesh.json``."""

    pid: int
    mode: str
    """``foreground`` (the ``up`` command itself) or ``detached``."""
    started_at: float
    phase: str = "starting"
    """``starting``, ``running``, ``stopping``."""


def state_file(config: MeshConfig) -> Path:
    """Where the launcher records the running mesh."""
    return config.mesh_home.run / "mesh.json"


def _read(config: MeshConfig) -> tuple[Supervisor | None, list[Running]]:
    try:
        data = json.loads(state_file(config).read_text())
    except (FileNotFoundError, ValueError):
        return None, []
    if isinstance(data, list):  # written before supervision existed
        return None, [Running(**r) for r in data]
    known = {f.name for f in fields(Running)}
    procs = [Running(**{k: v for k, v in r.items() if k in known}) for r in data.get("processes", [])]
    sup = data.get("supervisor")
    return (Supervisor(**sup) if sup else None), procs


def read_state(config: MeshConfig) -> list[Running]:
    """The recorded mesh, or [] when none is up."""
    return _read(config)[1]


def read_supervisor(config: MeshConfig) -> Supervisor | None:
    """The recorded supervising loop, or None (no mesh, or one started by :func:`up` without supervision)."""
    return _read(config)[0]


def _write_state(config: MeshConfig, procs: list[Running], supervisor: Supervisor | None = None) -> None:
    path = state_file(config)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"supervisor": asdict(supervisor) if supervisor else None,
                               "processes": [asdict(p) for p in procs]}, indent=2))
    os.replace(tmp, path)


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
    return health_probe(config, address, identity, timeout_s)[0]


def health_probe(config: MeshConfig, address: str, identity: str, timeout_s: float = 2.0) -> tuple[str, str]:
    """(health status name or ``UNREACHABLE (CODE)``, the process's reason when it is not SERVING)."""
    channel = transport.secure_channel(address, tls_files(config, OPERATOR), spiffe.parse(identity))
    with channel:
        return health.probe(channel, timeout_s)


def log_lines(path: Path, offset: int = 0, lines: int = LOG_LINES) -> list[str]:
    """The last ``lines`` lines of a log written from ``offset`` on (one run's own lines)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def _log_tail(path: Path, offset: int = 0, lines: int = LOG_LINES) -> str:
    return "\n".join(log_lines(path, offset, lines)) or "(nothing in its log)"


def _log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def demo_world() -> Path:
    """The demo world shipped with agentmesh: loaded on first start, served by the sandbox LMS."""
    return Path(str(resources.files("agentmesh"))) / "data" / "demo_world.yaml"


def demo_tenants() -> Path:
    """The demo tenants (acme, globex) shipped with agentmesh: applied on first start (see :func:`seed_tenants`)."""
    return Path(str(resources.files("agentmesh"))) / "data" / "demo_tenants.yaml"


def lms_world(config: MeshConfig) -> Path:
    """The world the sandbox LMS serves: every tenant loaded with ``agentmesh data load`` so far (merged), else
    the demo."""
    loaded = config.mesh_home.data / "lms-world.yaml"
    return loaded if loaded.exists() else demo_world()


def merge_lms_world(config: MeshConfig, world: Path) -> Path:
    """What the sandbox LMS serves after ``world`` is loaded: its tenants' ``lms`` sections replace theirs,
    every other tenant keeps what it had (loading one tenant never touches another's external data).
    Written to ``HOME/data/lms-world.yaml`` (only the tenants' ids and ``lms`` sections); returns it."""
    def tenants_of(path: Path) -> list[dict[str, Any]]:
        text = path.read_text(encoding="utf-8")
        doc = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
        listed = doc.get("tenants") if isinstance(doc, dict) else None
        return [t for t in listed or [] if isinstance(t, dict) and isinstance(t.get("id"), str)]

    new = tenants_of(world)
    replaced = {t["id"] for t in new}
    kept = [t for t in tenants_of(lms_world(config)) if t["id"] not in replaced]
    merged = {"format": "agentmesh-world/v1",
              "description": "What the sandbox LMS serves: the lms sections of every tenant loaded (merged by "
                             "agentmesh data load).",
              "tenants": [{"id": t["id"], "lms": t.get("lms") or {}} for t in kept + new]}
    target = config.mesh_home.data / "lms-world.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".yaml.partial")
    partial.write_text(yaml.safe_dump(merged, sort_keys=False, allow_unicode=True), encoding="utf-8")
    partial.replace(target)
    return target


def seed_tenants(config: MeshConfig, policy_address: str) -> list[str]:
    """On the first start of a mesh home (no tenant configured yet), applies the demo tenants through
    ``TenantService.ApplyTenants`` as the operator — the same path as ``agentmesh tenants apply``, audited.
    Returns the tenants applied (none when some tenant is configured already)."""
    from agentmesh.identities import OPERATOR, tls_files
    from agentmesh.tenant_file import apply_tenant_file, load_tenant_file
    from agentmesh.v1 import tenant_service_pb2 as tenant_pb2
    from agentmesh.v1 import tenant_service_pb2_grpc as tenant_grpc

    with transport.secure_channel(policy_address, tls_files(config, OPERATOR), spiffe.service("policy"),
                                  default_timeout_s=config.call_timeout_s) as channel:
        if tenant_grpc.TenantServiceStub(channel).ListTenants(tenant_pb2.ListTenantsRequest(),
                                                              timeout=config.call_timeout_s).tenants:
            return []
        response = apply_tenant_file(channel, load_tenant_file(demo_tenants()),
                                     timeout_s=max(30.0, config.call_timeout_s))
    return [r.tenant.tenant_id for r in response.results]


def _ensure_token_file(path: Path) -> Path:
    """A bearer token file, created (random, 0600, directory 0700) if missing."""
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


def ensure_lms_admin_token(config: MeshConfig) -> Path:
    """The sandbox LMS's admin token file, created (random, 0600, directory 0700) if missing."""
    return _ensure_token_file(config.mesh_home.lms_admin_token)


def ensure_model_sandbox_admin_token(config: MeshConfig) -> Path:
    """The sandbox model server's admin token file, created (random, 0600, directory 0700) if missing."""
    return _ensure_token_file(config.mesh_home.model_sandbox_admin_token)


def model_sandbox_admin_token(config: MeshConfig) -> str:
    """The bearer token of the running sandbox model server's ``/admin`` endpoints (``Authorization: Bearer …``)."""
    try:
        return config.mesh_home.model_sandbox_admin_token.read_text().strip()
    except OSError as err:
        raise LaunchError(f"no sandbox model server admin token at {config.mesh_home.model_sandbox_admin_token}: "
                          f"{err.strerror} (it is made by 'agentmesh up')") from err


MODEL_SANDBOX = "model-sandbox"
"""The process name of the sandbox model server (started when a model has no URL and ``model_url`` is unset)."""
HTTP_PROCESSES = ("lms", MODEL_SANDBOX)
"""The sandboxes: external systems over plain HTTP, outside the mesh."""


def lms_admin_token(config: MeshConfig) -> str:
    """The bearer token of the running sandbox LMS's ``/admin`` endpoints (``Authorization: Bearer …``)."""
    try:
        return config.mesh_home.lms_admin_token.read_text().strip()
    except OSError as err:
        raise LaunchError(f"no sandbox LMS admin token at {config.mesh_home.lms_admin_token}: "
                          f"{err.strerror} (it is made by 'agentmesh up')") from err


def _http_health(url: str) -> str:
    return _http_probe(url)[0]


def _http_probe(url: str) -> tuple[str, str]:
    """(``SERVING`` / ``NOT_SERVING`` / ``HTTP nnn`` / ``UNREACHABLE (…)``, the reason a web process gives)."""
    root = url.removesuffix("/v1")  # the sandbox model server's address is its API's base URL
    try:
        with urllib.request.urlopen(f"{root}/healthz", timeout=2) as resp:
            return ("SERVING", "") if resp.status == 200 else (f"HTTP {resp.status}", "")
    except urllib.error.HTTPError as err:
        try:
            body = json.loads(err.read(4096) or b"{}")
        except ValueError:
            body = {}
        status = body.get("status") if isinstance(body, dict) else None
        reason = body.get("reason", "") if isinstance(body, dict) else ""
        return (str(status) if status else f"HTTP {err.code}"), str(reason)[:600]
    except OSError as err:
        return f"UNREACHABLE ({err})", ""


def exit_text(code: int | None) -> str:
    if code is None:
        return ""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"{code} ({signal.Signals(-code).name})"
    return str(code)


def _clean_exit(code: int) -> bool:
    """Stopped on purpose (exit 0, or SIGTERM/SIGINT before a handler was installed): not restarted."""
    return code in (0, -signal.SIGTERM, -signal.SIGINT)


# --- one managed process ------------------------------------------------------------------------

@dataclass
class _Managed:
    """A process of the mesh as its supervisor knows it: how to start it, its run, its history."""

    config: MeshConfig
    name: str
    kind: str
    spiffe_id: str
    workload: Workload | None
    peers: dict[str, str]
    extra: tuple[str, ...] = ()
    port: int = 0
    module: str = ""
    """For a web process without a gRPC workload (``kind`` http): its module (none: the sandbox LMS)."""
    proc: subprocess.Popen[bytes] | None = None
    address: str = ""
    state: str = "starting"
    started_at: float = 0.0
    serving_since: float = 0.0
    restarts: int = 0
    failures: int = 0
    last_exit_code: int | None = None
    last_exit_at: float = 0.0
    next_start_at: float = 0.0
    log_offset: int = 0
    _last_probe: float = field(default=0.0)
    _bound: bool = False
    """Whether the current run recorded its address (the previous run's stays shown meanwhile)."""

    @property
    def log_path(self) -> Path:
        return self.config.mesh_home.logs / f"{self.name}.log"

    @property
    def addr_path(self) -> Path:
        if self._is_sandbox:
            return self.config.mesh_home.run / f"{self.name}.addr"
        return address_file(self.config, self.name)

    @property
    def _is_sandbox(self) -> bool:
        """The sandbox LMS or model server: an external system, its address a plain line in ``run/NAME.addr``."""
        return self.workload is None and not self.module

    def command(self) -> list[str]:
        if self._is_sandbox and self.name == MODEL_SANDBOX:
            return [sys.executable, "-m", "model_sandbox", "--host", self.config.host, "--port", str(self.port),
                    "--models", ",".join(b.model for b in self.config.model_backends if b.url is None),
                    "--address-file", str(self.addr_path),
                    "--admin-token-file", str(ensure_model_sandbox_admin_token(self.config))]
        if self.workload is None and self.module:  # a web process of the mesh (the console, the dev IdP)
            cmd = [sys.executable, "-m", self.module, *self.extra, "--home", str(self.config.home),
                   "--host", self.config.host, "--port", str(self.port)]
            for name, addr in self.peers.items():
                cmd += ["--peer", f"{name}={addr}"]
            return cmd
        if self.workload is None:  # the sandbox LMS; it serves the world loaded last
            return [sys.executable, "-m", "lms_sandbox", "--host", self.config.host, "--port", str(self.port),
                    "--data", str(lms_world(self.config)), "--address-file", str(self.addr_path),
                    "--admin-token-file", str(ensure_lms_admin_token(self.config))]
        w = self.workload
        cmd = [sys.executable, "-m", w.module, *w.extra_args, *self.extra, "--home", str(self.config.home),
               "--host", self.config.host, "--port", str(self.port)]
        for name, addr in self.peers.items():
            cmd += ["--peer", f"{name}={addr}"]
        return cmd

    def spawn(self) -> None:
        self.addr_path.unlink(missing_ok=True)
        self.log_offset = _log_size(self.log_path)
        env = dict(os.environ)
        if self.workload is not None:
            env["OTEL_SERVICE_NAME"] = self.name
        with open(self.log_path, "ab") as log:
            # A new session: Ctrl-C in the launcher's terminal must not kill children
            # before the launcher stops them in order.
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        self.state, self.started_at, self.serving_since, self.next_start_at = "starting", time.time(), 0.0, 0.0
        self._bound = False

    def read_address(self) -> str:
        """The address the process recorded, once it did."""
        try:
            text = self.addr_path.read_text().strip()
        except OSError:
            return ""
        if self._is_sandbox:
            return text
        try:
            return str(json.loads(text)["address"])
        except (ValueError, KeyError, TypeError):
            return ""

    def probe(self) -> str:
        if self.kind == "http":
            return _http_health(self.address)
        return health_check(self.config, self.address, self.spiffe_id)

    def record(self) -> Running:
        pid = self.proc.pid if self.proc is not None else 0
        return Running(self.name, self.spiffe_id, self.address, pid, self.kind, self.state, self.started_at,
                       self.serving_since, self.restarts, self.last_exit_code, self.last_exit_at,
                       self.next_start_at, self.log_offset)

    def wait_ready(self, stop: threading.Event | None = None) -> None:
        """Blocks until the first start reports SERVING; LaunchError with this run's log lines if not."""
        assert self.proc is not None
        deadline = time.monotonic() + self.config.startup_timeout_s
        while time.monotonic() < deadline:
            if stop is not None and stop.is_set():
                raise LaunchError("stopped while starting")
            if self.proc.poll() is not None:
                raise LaunchError(f"{self.name} exited with code {exit_text(self.proc.returncode)}:\n"
                                  f"{_log_tail(self.log_path, self.log_offset)}")
            address = self.address if self._bound else self.read_address()
            if address:
                self.address, self._bound = address, True
                if self.probe() == "SERVING":
                    self._serving()
                    return
            time.sleep(0.05)
        raise LaunchError(f"{self.name} did not report SERVING within {self.config.startup_timeout_s:.0f}s:\n"
                          f"{_log_tail(self.log_path, self.log_offset)}")

    def _serving(self) -> None:
        self.state = "running"
        self.serving_since = time.time()
        # From now on it restarts on the port it bound.
        self.port = int(self.address.removesuffix("/v1").rsplit(":", 1)[1])

    def tick(self, now: float, say: Any) -> bool:
        """Advances this process's supervision one step; True if anything changed."""
        if self.state == "stopped":
            return False
        if self.state == "backoff":
            if now < self.next_start_at:
                return False
            self.restarts += 1
            self.spawn()
            say(f"{self.name}: restart {self.restarts} (pid {self.proc.pid if self.proc else 0})")
            return True
        assert self.proc is not None
        code = self.proc.poll()
        if code is not None:
            self.last_exit_code, self.last_exit_at = code, now
            if not self._is_sandbox:
                self.addr_path.unlink(missing_ok=True)  # a crash leaves its address record behind
            lines = log_lines(self.log_path, self.log_offset, 2)
            last = f": {lines[-1]}" if lines else ""
            if _clean_exit(code):
                self.state = "stopped"
                say(f"{self.name} (pid {self.proc.pid}) stopped with code {exit_text(code)}; not restarted{last}")
                return True
            if self.serving_since and now - self.serving_since >= BACKOFF_RESET_S:
                self.failures = 0
            delay = min(BACKOFF_INITIAL_S * 2 ** self.failures, BACKOFF_MAX_S)
            self.failures += 1
            self.state, self.next_start_at = "backoff", now + delay
            say(f"{self.name} (pid {self.proc.pid}) exited with code {exit_text(code)}; "
                f"restarting in {delay:g} s{last}")
            return True
        if self.state == "starting":
            if not self._bound:
                address = self.read_address()
                if address:
                    self.address, self._bound = address, True
                elif now - self.started_at > self.config.startup_timeout_s:
                    say(f"{self.name} (pid {self.proc.pid}) did not start within "
                        f"{self.config.startup_timeout_s:g} s; killing it")
                    with contextlib.suppress(ProcessLookupError):
                        self.proc.kill()
                    return False
            if self._bound and now - self._last_probe >= 0.5:
                self._last_probe = now
                if self.probe() == "SERVING":
                    self._serving()
                    say(f"{self.name} SERVING again at {self.address} (pid {self.proc.pid})")
                    return True
        return False

    def stop_for_restart(self) -> None:
        """SIGTERM (SIGKILL after 10 s) and wait; used when asked to restart, not counted as a crash."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- certificate renewal -------------------------------------------------------------------------

def _say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} agentmesh: {text}", file=sys.stderr, flush=True)


class LeafRenewer:
    """Renews every leaf of the mesh from the mesh CA once half its lifetime has passed.

    Runs in the supervising loop's process (a thread, from before the first process
    starts until the mesh is stopped), the only long-lived part of the mesh that reads
    ``HOME/ca/``. Every workload's leaf and the CLI's two client leaves
    (:func:`agentmesh.identities.mesh_identities`) are looked at every
    :data:`RENEW_CHECK_S` (a stat of each file; a certificate is parsed again only
    when its files changed or its renewal time came), and one that is past half its
    lifetime, expired, not yet valid, missing or not from the current CA is issued
    again with a new key, valid ``leaf_validity_s`` (cert and key written side by side,
    then renamed). Servers take it up on their next handshake, channels within a
    second; nothing restarts. Each renewal is one line in the loop's log; a renewal
    that cannot happen (no CA key) is said once per leaf, and the mesh goes on with
    the current leaves until they expire (``status`` warns in their last tenth).
    """

    def __init__(self, config: MeshConfig, say: Any = _say) -> None:
        self.config = config
        self._say = say
        self._known: dict[str, tuple[tuple[int, ...], dt.datetime]] = {}
        self._trust: tuple[tuple[int, ...], x509.Certificate] | None = None
        self._complaints: dict[str, str] = {}
        self.renewed: list[str] = []
        """The SPIFFE id of each renewal so far, in order."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def _stamp(*paths: Path) -> tuple[int, ...]:
        out: list[int] = []
        for path in paths:
            try:
                st = path.stat()
                out += (st.st_ino, st.st_size, st.st_mtime_ns)
            except OSError:
                out += (0, 0, 0)
        return tuple(out)

    def _ca_cert(self) -> x509.Certificate:
        bundle = self.config.mesh_home.trust_bundle
        stamp = self._stamp(bundle)
        if self._trust is None or self._trust[0] != stamp:
            try:
                self._trust = (stamp, x509.load_pem_x509_certificate(bundle.read_bytes()))
            except (OSError, ValueError) as err:
                raise PkiError(f"cannot read the trust bundle {bundle}: {err}") from err
        return self._trust[1]

    def _complain(self, key: str, text: str) -> None:
        if self._complaints.get(key) != text:
            self._complaints[key] = text
            self._say(text)

    def step(self, now: dt.datetime | None = None) -> list[str]:
        """Renews what is due now; returns the SPIFFE ids renewed."""
        now = now or dt.datetime.now(dt.UTC)
        home = self.config.mesh_home
        ca_cert = self._ca_cert()
        ca_stamp = self._trust[0] if self._trust else ()
        due = []
        for identity in mesh_identities(self.config):
            paths = home.workload_files(identity)
            stamp = self._stamp(paths.cert, paths.key) + ca_stamp
            known = self._known.get(str(identity))
            if known is not None and known[0] == stamp and now < known[1]:
                continue
            why = leaf_due(paths, ca_cert, now)
            if why is None:
                self._known[str(identity)] = (stamp, validity_of(paths.cert.read_bytes()).renew_at)
                continue
            due.append((identity, paths, why))
        if not due:
            return []
        if not home.ca_key.exists():
            for identity, _, why in due:
                self._complain(str(identity), f"cannot renew the certificate of {identity} ({why}): the CA key "
                                              f"{home.ca_key} is not there; it is used until it expires")
            return []
        ca = CertificateAuthority.load(home.ca, home.trust_bundle)
        renewed = []
        for identity, paths, why in due:
            try:
                ca.issue(identity, paths, validity=leaf_validity(self.config))
            except PkiError as err:
                self._complain(str(identity), f"cannot renew the certificate of {identity} ({why}): {err}")
                continue
            self._complaints.pop(str(identity), None)
            cert = x509.load_pem_x509_certificate(paths.cert.read_bytes())
            self._say(f"renewed the certificate of {identity} ({why}): serial {cert.serial_number:x}, "
                      f"valid until {cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC ({paths.cert})")
            renewed.append(str(identity))
        self.renewed += renewed
        return renewed

    def _run(self) -> None:
        while True:
            try:
                self.step()
            except Exception as err:  # noqa: BLE001 - renewal trouble must never stop the loop
                self._complain("", f"certificate renewal failed: {err}")
            if self._stop.wait(RENEW_CHECK_S):
                return

    def start(self) -> LeafRenewer:
        self._thread = threading.Thread(target=self._run, name="leaf-renewer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def leaf_status(config: MeshConfig, spiffe_id: str, now: dt.datetime | None = None) -> dict[str, object]:
    """A process's leaf as ``status`` shows it: file, serial, validity and a warning in its last tenth."""
    try:
        paths = config.mesh_home.workload_files(spiffe.parse(spiffe_id))
    except spiffe.InvalidSpiffeId:
        return {}
    out: dict[str, object] = {"cert_file": str(paths.cert)}
    try:
        validity: Validity = validity_of(paths.cert.read_bytes())
    except (OSError, PkiError) as err:
        out.update(cert_expires_at=None, cert_warning=f"cannot read {paths.cert}: {err}")
        return out
    now = now or dt.datetime.now(dt.UTC)
    warning = ""
    problem = validity.problem(now)
    if problem is not None:
        warning = f"its certificate {problem} ({paths.cert})"
    elif now >= validity.warn_at:
        left = int((validity.not_after - now).total_seconds())
        warning = (f"its certificate expires in {left} s, at {validity.not_after:%Y-%m-%d %H:%M:%S} UTC "
                   f"(the last tenth of its lifetime: it was due for renewal at half; is the supervising "
                   f"loop running, and is {config.mesh_home.ca_key} there?)")
    out.update(cert_not_before=validity.not_before.timestamp(), cert_expires_at=validity.not_after.timestamp(),
               cert_warning=warning)
    return out


# --- the mesh -----------------------------------------------------------------------------------

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


def _already_running(config: MeshConfig) -> bool:
    sup, procs = _read(config)
    return (sup is not None and pid_alive(sup.pid)) or any(pid_alive(p.pid) for p in procs)


def prepare(config: MeshConfig) -> None:
    """Refuses a home where a mesh runs; moves an old layout; issues missing or expiring certificates."""
    if _already_running(config):
        raise LaunchError(f"a mesh is already running under {config.home}; run 'agentmesh down' first")
    report_migration(migrate_legacy_layout(config.mesh_home), config)  # LegacyLayoutError when it cannot
    try:
        init_identities(config)
    except PkiError as err:
        raise LaunchError(str(err)) from err


class Mesh:
    """Every process of one mesh, started by :func:`start`; :meth:`supervise` keeps them running."""

    def __init__(self, config: MeshConfig, supervisor: Supervisor | None) -> None:
        self.config = config
        self.supervisor = supervisor
        self.procs: list[_Managed] = []
        self._lock = threading.Lock()

    def running(self) -> list[Running]:
        return [m.record() for m in self.procs]

    def save(self) -> None:
        _write_state(self.config, self.running(), self.supervisor)

    def _say(self, text: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} agentmesh: {text}", file=sys.stderr, flush=True)

    def supervise(self, stop: threading.Event) -> None:
        """Restarts what crashes until ``stop`` is set, then stops every process (reverse order)."""
        if self.supervisor is not None:
            self.supervisor = replace(self.supervisor, phase="running")
        self.save()
        try:
            while not stop.wait(TICK_S):
                now = time.time()
                changed = False
                for m in self.procs:
                    try:
                        changed |= m.tick(now, self._say)
                    except Exception as err:  # noqa: BLE001 - one process's trouble must not stop the loop
                        self._say(f"{m.name}: supervision step failed: {err!r}")
                        if m.state == "backoff":  # e.g. it could not be spawned: try again later
                            m.next_start_at = now + BACKOFF_MAX_S
                changed |= self._restart_requested()
                if changed:
                    self.save()
        finally:
            self.stop()

    def _restart_requested(self) -> bool:
        changed = False
        for m in self.procs:
            request = _restart_request(self.config, m.name)
            if not request.exists():
                continue
            request.unlink(missing_ok=True)
            self._say(f"{m.name}: restart asked for")
            m.stop_for_restart()
            m.spawn()
            changed = True
        return changed

    def stop(self) -> None:
        """Stops every process in reverse start order and forgets the mesh."""
        if self.supervisor is not None:
            self._say("stopping the mesh")
            self.supervisor = replace(self.supervisor, phase="stopping")
            with contextlib.suppress(OSError):
                self.save()
        stop_all([m.record() for m in self.procs if m.proc is not None and m.proc.poll() is None])
        for m in self.procs:
            if m.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    m.proc.wait(timeout=1)
        state_file(self.config).unlink(missing_ok=True)
        for name in HTTP_PROCESSES:
            (self.config.mesh_home.run / f"{name}.addr").unlink(missing_ok=True)


def web_processes(config: MeshConfig, peers: dict[str, str], *, progress: bool = False) -> list[_Managed]:
    """The browser-facing processes, started after the gRPC roles: the dev identity provider (unless
    ``console_idp_url`` names another one, or its key ``HOME/ca/idp.key`` is not here: a home whose CA
    directory is kept offline has no dev IdP) and the web console (a client of the supervisor, audit and
    policy)."""
    procs = []
    if config.console_idp_url is None and config.mesh_home.idp_key.exists():
        procs.append(_Managed(config, "dev-idp", "http", "", None, {}, module="dev_idp", port=config.port("dev-idp")))
    elif config.console_idp_url is None and progress:
        print(f"  {'dev-idp':<18} not started: no {config.mesh_home.idp_key} (set console_idp_url to sign people "
              "in to the console)", file=sys.stderr)
    procs.append(_Managed(config, "console", "http", str(CONSOLE), None, dict(peers), module="console_svc",
                          port=config.port("console")))
    return procs


def supervisor_replicas(config: MeshConfig) -> list[Workload]:
    """The supervisor replicas after the first (``supervisor_replicas``): same module and identity, own names."""
    return [Workload(f"supervisor-{n}", spiffe.service("supervisor"), "supervisor_svc", ("--replica", str(n)))
            for n in range(2, config.supervisor_replicas + 1)]


def start(config: MeshConfig, *, progress: bool = True, supervisor: Supervisor | None = None,
          stop: threading.Event | None = None) -> Mesh:
    """Starts every process, each SERVING before the next (certificates must exist: see :func:`prepare`)."""
    config.mesh_home.logs.mkdir(parents=True, exist_ok=True)
    config.mesh_home.run.mkdir(parents=True, exist_ok=True)
    mesh = Mesh(config, supervisor)
    peers: dict[str, str] = dict(config.peers)
    extra: dict[str, tuple[str, ...]] = {"capability": ("--world", str(demo_world()))}
    if config.specialist_delay_ms:
        for agent in config.agents:
            extra[agent] = ("--fixed-delay-ms", str(config.specialist_delay_ms))
    for name, level in config.log_levels.items():
        extra[name] = (*extra.get(name, ()), "--log-level", level)
    try:
        lms_url = config.lms_url
        if lms_url is None:
            lms = _Managed(config, "lms", "http", "", None, {}, port=config.port("lms"))
            mesh.procs.append(lms)
            lms.spawn()
            lms.wait_ready(stop)
            lms_url = lms.address
            mesh.save()
            if progress:
                print(f"  {'lms (sandbox)':<18} SERVING  {lms_url}", file=sys.stderr)
        extra["capability"] += ("--lms-url", lms_url)
        if config.sandbox_models:
            sandbox = _Managed(config, MODEL_SANDBOX, "http", "", None, {}, port=config.port(MODEL_SANDBOX))
            mesh.procs.append(sandbox)
            sandbox.spawn()
            sandbox.wait_ready(stop)
            extra["model"] = ("--sandbox-url", sandbox.address)
            mesh.save()
            if progress:
                print(f"  {'model (sandbox)':<18} SERVING  {sandbox.address}", file=sys.stderr)
        for w in workloads(config) + supervisor_replicas(config):
            m = _Managed(config, w.name, "grpc", str(w.identity), w, dict(peers), extra.get(w.name, ()),
                         port=config.port(w.name))
            mesh.procs.append(m)
            m.spawn()
            mesh.save()
            m.wait_ready(stop)
            peers[w.name] = m.address
            mesh.save()
            if progress:
                print(f"  {w.name:<18} SERVING  {m.address}", file=sys.stderr)
            if w.name == "policy":
                try:
                    seeded = seed_tenants(config, m.address)
                except Exception as err:  # noqa: BLE001 - the mesh must not come up without its tenants' state known
                    raise LaunchError(f"the demo tenants could not be applied: {err}") from err
                if seeded and progress:
                    print(f"  {'tenants':<18} applied {', '.join(seeded)} (first start: {demo_tenants()})",
                          file=sys.stderr)
        for m in web_processes(config, peers, progress=progress):
            mesh.procs.append(m)
            m.spawn()
            mesh.save()
            m.wait_ready(stop)
            mesh.save()
            if progress:
                print(f"  {m.name:<18} SERVING  {m.address}", file=sys.stderr)
    except BaseException:
        mesh.stop()
        raise
    return mesh


def up(config: MeshConfig, *, progress: bool = True) -> list[Running]:
    """Starts every process (creating certificates first if needed), unsupervised; returns them."""
    prepare(config)
    return start(config, progress=progress).running()


def _signal_event() -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def up_foreground(config: MeshConfig, *, progress: bool = True,
                  on_up: Any = None) -> None:
    """``agentmesh up``: starts the mesh and supervises it here until Ctrl-C / SIGTERM (``down``)."""
    prepare(config)
    stop = _signal_event()
    sup = Supervisor(os.getpid(), "foreground", time.time())
    renewer = LeafRenewer(config).start()
    try:
        try:
            mesh = start(config, progress=progress, supervisor=sup, stop=stop)
        except LaunchError:
            if stop.is_set():
                return
            raise
        if on_up is not None:
            on_up(mesh.running())
        mesh.supervise(stop)
    finally:
        renewer.stop()


def _supervisor_config(config: MeshConfig) -> Path:
    return config.mesh_home.run / "launcher-config.json"


def _supervisor_error(config: MeshConfig) -> Path:
    return config.mesh_home.run / "launcher-error.txt"


def _restart_request(config: MeshConfig, name: str) -> Path:
    return config.mesh_home.run / f"restart-{name}.request"


def up_detached(config: MeshConfig, *, progress: bool = True) -> list[Running]:
    """``agentmesh up --detach``: a background supervisor starts the mesh; returns once all are SERVING."""
    prepare(config)
    home = config.mesh_home
    home.run.mkdir(parents=True, exist_ok=True)
    home.logs.mkdir(parents=True, exist_ok=True)
    cfg_path, err_path = _supervisor_config(config), _supervisor_error(config)
    cfg_path.write_text(config.model_dump_json())
    err_path.unlink(missing_ok=True)
    state_file(config).unlink(missing_ok=True)
    log_path = home.logs / f"{LAUNCHER}.log"
    offset = _log_size(log_path)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "agentmesh.launcher", "--config-json", str(cfg_path)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    shown: set[str] = set()
    deadline = time.monotonic() + config.startup_timeout_s * (len(workloads(config)) + 3) + 10
    while True:
        sup, procs = _read(config)
        for p in procs:
            if p.name not in shown and p.state == "running" and sup is not None and sup.pid == proc.pid:
                shown.add(p.name)
                if progress:
                    label = {"lms": "lms (sandbox)", MODEL_SANDBOX: "model (sandbox)"}.get(p.name, p.name)
                    print(f"  {label:<18} SERVING  {p.address}", file=sys.stderr)
        if sup is not None and sup.pid == proc.pid and sup.phase == "running":
            return procs
        code = proc.poll()
        if code is not None:
            try:
                message = err_path.read_text().strip()
            except OSError:
                message = f"the supervisor exited with code {code}:\n{_log_tail(log_path, offset)}"
            raise LaunchError(message)
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            down(config)
            raise LaunchError(f"the mesh did not come up in time:\n{_log_tail(log_path, offset)}")
        time.sleep(0.05)


def _supervisor_main(argv: list[str] | None = None) -> int:
    """``python -m agentmesh.launcher --config-json FILE``: the detached supervisor (started by ``up --detach``)."""
    parser = argparse.ArgumentParser(prog="python -m agentmesh.launcher",
                                     description="agentmesh supervisor: starts the mesh and restarts what crashes")
    parser.add_argument("--config-json", required=True, help="the mesh config, as written by 'agentmesh up'")
    args = parser.parse_args(argv)
    config_path = Path(args.config_json)
    config = MeshConfig.model_validate_json(config_path.read_text())
    config_path.unlink(missing_ok=True)
    stop = _signal_event()
    sup = Supervisor(os.getpid(), "detached", time.time())
    renewer = LeafRenewer(config).start()
    try:
        try:
            mesh = start(config, progress=True, supervisor=sup, stop=stop)
        except LaunchError as err:
            _supervisor_error(config).write_text(str(err) + "\n")
            print(f"agentmesh: {err}", file=sys.stderr)
            return 1
        print(f"{time.strftime('%H:%M:%S')} agentmesh: mesh up; supervising (pid {os.getpid()}); certificates "
              f"renewed at half their lifetime ({config.leaf_validity_s} s)", file=sys.stderr, flush=True)
        mesh.supervise(stop)
    finally:
        renewer.stop()
    print(f"{time.strftime('%H:%M:%S')} agentmesh: mesh stopped", file=sys.stderr, flush=True)
    return 0


def restart_lms(config: MeshConfig) -> str | None:
    """Restarts a running sandbox LMS on its port so it serves the current world; None if none runs."""
    sup, procs = _read(config)
    lms = next((p for p in procs if p.name == "lms" and pid_alive(p.pid)), None)
    if lms is None:
        return None
    if sup is not None and pid_alive(sup.pid):
        # The supervisor owns the process: ask it, and wait for the new one to answer.
        _restart_request(config, "lms").write_text("")
        deadline = time.monotonic() + config.startup_timeout_s + 15
        while time.monotonic() < deadline:
            now = next((p for p in read_state(config) if p.name == "lms"), None)
            if (now is not None and now.pid != lms.pid and now.state == "running"
                    and not _restart_request(config, "lms").exists()):
                return now.address
            time.sleep(0.05)
        raise LaunchError("the sandbox LMS did not come back after its restart")
    stop_all([lms])
    m = _Managed(config, "lms", "http", "", None, {}, port=int(lms.address.rsplit(":", 1)[1]))
    m.spawn()
    m.wait_ready()
    _write_state(config, [m.record() if p.name == "lms" else p for p in procs], sup)
    return m.address


def stop_all(procs: list[Running], grace_s: float = 10.0) -> list[str]:
    """SIGTERM in reverse start order, SIGKILL what is left after the grace; returns names killed."""
    for p in reversed(procs):
        if p.pid and pid_alive(p.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(p.pid and pid_alive(p.pid) for p in procs):
        time.sleep(0.05)
    killed = []
    for p in procs:
        if p.pid and pid_alive(p.pid):
            try:
                os.kill(p.pid, signal.SIGKILL)
                killed.append(p.name)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(p.pid and pid_alive(p.pid) for p in procs):
        time.sleep(0.05)
    return killed


def down(config: MeshConfig) -> list[Running]:
    """Stops the supervising loop and the recorded mesh; returns what was stopped."""
    sup, procs = _read(config)
    if sup is not None and sup.pid != os.getpid() and pid_alive(sup.pid):
        # The loop stops its processes itself (in order) and then exits.
        with contextlib.suppress(ProcessLookupError):
            os.kill(sup.pid, signal.SIGTERM)
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and pid_alive(sup.pid):
            time.sleep(0.05)
        if pid_alive(sup.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(sup.pid, signal.SIGKILL)
        procs = read_state(config) or procs  # it may have restarted one meanwhile
    stop_all(procs)
    state_file(config).unlink(missing_ok=True)
    # gRPC roles remove their own address files on a clean stop; the sandboxes do not.
    for name in HTTP_PROCESSES:
        (config.mesh_home.run / f"{name}.addr").unlink(missing_ok=True)
    for request in config.mesh_home.run.glob("restart-*.request"):
        request.unlink(missing_ok=True)
    return procs


def status(config: MeshConfig) -> list[dict[str, object]]:
    """Each recorded process with whether it is alive, its health and why it is not SERVING.

    A row per process: the record (pid, restarts, last exit, ...), ``alive``, ``health``
    (the process's own answer; ``RESTARTING`` / ``STARTING`` / ``STOPPED`` / ``DEAD``
    when it has none), ``reason`` and, unless it is SERVING, ``log`` (the last lines of
    its current or last run). The supervising loop, when there is one, is the last row
    (name and kind ``launcher``, health ``RUNNING``, ``STARTING`` while it has not started every
    process yet, ``STOPPING``, or ``DEAD``).
    """
    sup, procs = _read(config)
    rows: list[dict[str, object]] = []
    for p in procs:
        alive = bool(p.pid) and pid_alive(p.pid)
        reason = ""
        if not alive:
            health_name = {"backoff": "RESTARTING", "starting": "STARTING", "stopped": "STOPPED"}.get(p.state, "DEAD")
            if p.state == "backoff":
                reason = (f"exited with code {exit_text(p.last_exit_code)}; restart "
                          f"{p.restarts + 1} in {max(0.0, p.next_start_at - time.time()):.1f} s")
            elif p.state == "stopped":
                reason = f"exited with code {exit_text(p.last_exit_code)}; not restarted"
        elif p.kind == "grpc" and p.address:
            health_name, reason = health_probe(config, p.address, p.spiffe_id)
            if p.state == "starting" and health_name.startswith("UNREACHABLE"):
                health_name, reason = "STARTING", f"pid {p.pid} is not answering yet"
        elif p.kind == "grpc" or not p.address:
            health_name = "STARTING"
        else:
            health_name, reason = _http_probe(p.address)
        row: dict[str, object] = {**asdict(p), "alive": alive, "health": health_name, "reason": reason}
        if p.spiffe_id:
            row.update(leaf_status(config, p.spiffe_id))
        if health_name != "SERVING":
            row["log"] = log_lines(config.mesh_home.logs / f"{p.name}.log", p.log_offset)
            row["log_file"] = str(config.mesh_home.logs / f"{p.name}.log")
        rows.append(row)
    if sup is not None:
        alive = pid_alive(sup.pid)
        health_name, reason = "RUNNING", ""
        if not alive:
            health_name, reason = "DEAD", "the supervising loop is gone: crashed processes are not restarted"
        elif sup.phase != "running":
            # A loop still starting the mesh (or stopping it): what is listed is not the whole mesh.
            expected = (len(workloads(config)) + len(supervisor_replicas(config)) + (config.lms_url is None)
                        + config.sandbox_models + len(web_processes(config, {})))
            health_name = sup.phase.upper()
            reason = (f"starting the mesh: {len(procs)} of {expected} processes started so far"
                      if sup.phase == "starting" else f"{sup.phase} the mesh")
        rows.append({"name": LAUNCHER, "kind": LAUNCHER, "spiffe_id": "", "address": "", "pid": sup.pid,
                     "mode": sup.mode, "phase": sup.phase, "started_at": sup.started_at, "alive": alive,
                     "health": health_name, "reason": reason})
    return rows


def healthy(rows: list[dict[str, object]]) -> bool:
    """Every process SERVING and the supervising loop (if any) alive."""
    return bool(rows) and all(r["health"] == ("RUNNING" if r["kind"] == LAUNCHER else "SERVING") for r in rows)


__all__ = ["LaunchError", "Running", "Supervisor", "down", "healthy", "init_identities", "lms_admin_token",
           "model_sandbox_admin_token",
           "read_state", "read_supervisor", "status", "up", "up_detached", "up_foreground"]


if __name__ == "__main__":
    sys.exit(_supervisor_main())
