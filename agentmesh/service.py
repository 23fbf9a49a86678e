"""The process shell shared by every role: flags, config, certificates, serve, stop.

A role's ``__main__`` describes itself with a :class:`ServiceSpec` and calls
:func:`run`. Anything wrong at start-up (config, certificate, port, a role's
own files) ends the process with exit code 2 and one line naming the cause.

Health is true (:mod:`agentmesh.health`): while serving, a monitor thread runs
the checks the role registered on its :class:`ServiceContext` (its databases,
required peers, the audit log's writer; the audit outbox is checked by
:meth:`ServiceContext.audit`) about once a second, and the process answers
NOT_SERVING, with the reasons, while any of them fails.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from agentmesh import config as mesh_config
from agentmesh import errors, health, spiffe, transport
from agentmesh.access import AccessTable, AccessTableError
from agentmesh.audit_client import AuditOutbox, AuditRecorder, outbox_path
from agentmesh.config import ConfigError, MeshConfig
from agentmesh.home import record_address
from agentmesh.pki import PkiError, leaf_paths

log = logging.getLogger(__name__)


class StartupError(Exception):
    """A role cannot start; the message names the file, field or port at fault."""


@dataclass
class ServiceContext:
    """What a role needs to build its servicers: config, identity, channels to peers."""

    name: str
    identity: spiffe.SpiffeId
    config: MeshConfig
    tls: transport.TlsFiles
    args: argparse.Namespace
    _channels: dict[str, grpc.Channel] = field(default_factory=dict)
    _on_stop: list[Callable[[], None]] = field(default_factory=list)
    _audit: AuditRecorder | None = None
    _checks: list[tuple[str, health.Check, int]] = field(default_factory=list)

    @property
    def data_dir(self) -> Path:
        """Where this role keeps its SQLite files."""
        path = self.config.mesh_home.data
        path.mkdir(parents=True, exist_ok=True)
        return path

    def channel(self, peer: str, peer_id: spiffe.SpiffeId | None = None, *, address: str = "") -> grpc.Channel:
        """A shared mTLS channel to a peer process (a role or an agent id; or any name, with its ``address``)."""
        if peer not in self._channels:
            ident = peer_id or (spiffe.service(peer) if peer in mesh_config.ROLES else spiffe.agent(peer))
            self._channels[peer] = transport.secure_channel(
                address or self.config.address(peer), self.tls, ident,
                default_timeout_s=self.config.call_timeout_s,
            )
        return self._channels[peer]

    def audit(self) -> AuditRecorder:
        """This process's one recorder to the audit service, with its durable outbox.

        The outbox is ``<data dir>/<role>-audit-outbox.db``; its delivery thread
        starts here (delivering what a previous run left too) and stops when
        the service stops. Raises StartupError if the outbox cannot be opened.
        """
        if self._audit is None:
            try:
                outbox = AuditOutbox(outbox_path(self.data_dir, self.name))
            except errors.MeshError as err:
                raise StartupError(str(err)) from err
            recorder = AuditRecorder(self.channel("audit"), timeout_s=min(5.0, self.config.call_timeout_s),
                                     outbox=outbox, connect=self._audit_channel)
            recorder.start()
            self._audit = recorder
            self.on_stop(recorder.close)
            self.check_database(outbox.path)
        return self._audit

    def _audit_channel(self) -> grpc.Channel:
        """A channel of its own for the audit outbox's delivery (see ``AuditRecorder``'s ``connect``)."""
        return transport.secure_channel(self.config.address("audit"), self.tls, spiffe.service("audit"),
                                        default_timeout_s=self.config.call_timeout_s)

    def on_stop(self, fn: Callable[[], None]) -> None:
        """Registers cleanup run after the server has stopped."""
        self._on_stop.append(fn)

    def health_check(self, name: str, check: health.Check, *, tolerate: int = 0) -> None:
        """Registers a health check: while it returns a reason the process is NOT_SERVING.

        ``tolerate`` consecutive failures are ignored (a probe over the network).
        Checks run on the health monitor's thread, about once a second.
        """
        self._checks.append((name, check, tolerate))

    def check_database(self, path: Path) -> None:
        """Health depends on the SQLite file at ``path`` being usable."""
        self.health_check(f"database {path.name}", health.sqlite_check(path))

    def require_peer(self, peer: str) -> None:
        """Health depends on ``peer`` (a role or agent id) answering SERVING over this process's channel to it."""
        if not knows_peer(self.config, peer):
            self.health_check(f"peer {peer}", lambda: f"no address known (set --peer {peer}=HOST:PORT)")
            return
        self.health_check(f"peer {peer}", health.peer_check(lambda: self.channel(peer)), tolerate=1)


Register = Callable[[grpc.Server, ServiceContext], transport.DenialHook | None]


@dataclass(frozen=True)
class ServiceSpec:
    """How to run one role: its name, identity, gRPC services and how to register them."""

    name: str
    identity: spiffe.SpiffeId
    service_names: Sequence[str]
    register: Register
    description: str = ""


def base_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The flags every role accepts."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--home", help="mesh home directory (default: $AGENTMESH_HOME or ~/.agentmesh)")
    parser.add_argument("--config", help="YAML config file (default: HOME/config.yaml if present)")
    parser.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind; 0 picks a free one")
    parser.add_argument(
        "--peer", action="append", default=[], metavar="NAME=ADDR",
        help="address of a peer process, e.g. policy=127.0.0.1:7402 (repeatable)",
    )
    parser.add_argument("--log-level", default=os.environ.get("AGENTMESH_LOG_LEVEL", "INFO"))
    return parser


def _peers(values: list[str]) -> dict[str, str]:
    peers = {}
    for value in values:
        name, sep, addr = value.partition("=")
        if not sep or not name or not addr:
            raise ConfigError(f"--peer: expected NAME=HOST:PORT, got {value!r}")
        peers[name] = addr
    return peers


def knows_peer(cfg: MeshConfig, peer: str) -> bool:
    try:
        cfg.address(peer)
    except ConfigError:
        return False
    return True


def address_file(config: MeshConfig, name: str) -> Path:
    """Where a running process records the address it bound (read by the launcher)."""
    return config.mesh_home.run / f"{name}.addr"


def run(
    make_spec: Callable[[argparse.Namespace], ServiceSpec],
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None = None,
) -> int:
    """Parses flags, builds and serves the role until SIGTERM / SIGINT; returns the exit code."""
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        spec = make_spec(args)
        os.environ.setdefault("OTEL_SERVICE_NAME", spec.name)
        overrides: dict[str, object] = {"host": args.host, "peers": _peers(args.peer) or None}
        if args.port is not None:
            overrides["ports"] = {spec.name: args.port}
        cfg = mesh_config.load(home=args.home, config_file=args.config, overrides=overrides)
        tls = transport.TlsFiles.of(leaf_paths(cfg.mesh_home.workloads, spec.identity), cfg.mesh_home.trust_bundle)
        tls.read()  # a missing or unreadable certificate stops us here, naming the file
        access = AccessTable.load(cfg.access_file, operators=cfg.operators)
        ctx = ServiceContext(spec.name, spec.identity, cfg, tls, args)
        hooks: list[transport.DenialHook] = []

        def on_denied(call: transport.DeniedCall) -> None:
            log.warning("denied %s to %s: %s", call.method, call.caller or "<no identity>", call.reason)
            for hook in hooks:
                hook(call)

        server = transport.create_server(access, on_denied=on_denied)
        # Bind first: a port in use is reported before the role loads anything.
        port = transport.bind(server, cfg.host, cfg.port(spec.name), tls)
        hook = spec.register(server, ctx)
        if hook is not None:
            hooks.append(hook)
        elif spec.name != "audit" and knows_peer(cfg, "audit"):
            hooks.append(ctx.audit().denial_hook())
        health_servicer = health.add_to_server(server, spec.service_names)
        monitor = health.HealthMonitor(health_servicer, spec.service_names)
        for name, check, tolerate in ctx._checks:
            monitor.add(name, check, tolerate=tolerate)
    except (ConfigError, PkiError, AccessTableError, StartupError, transport.PortInUse) as err:
        print(f"{parser.prog}: {err}", file=sys.stderr)
        return 2

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    addr_file = address_file(cfg, spec.name)
    record_address(addr_file, {"address": f"{cfg.host}:{port}", "pid": os.getpid(), "spiffe_id": str(spec.identity)})
    monitor.start()
    log.info("%s serving as %s on %s:%d (health checks: %s)", spec.name, spec.identity, cfg.host, port,
             ", ".join(monitor.checks) or "none")
    stop.wait()
    log.info("%s stopping", spec.name)
    monitor.stop()
    server.stop(grace=5).wait()
    for fn in ctx._on_stop:
        try:
            fn()
        except Exception:  # noqa: BLE001 - keep stopping the rest
            log.exception("cleanup failed")
    for channel in ctx._channels.values():
        channel.close()
    addr_file.unlink(missing_ok=True)
    from agentmesh import telemetry

    telemetry.shutdown_tracing()
    return 0
