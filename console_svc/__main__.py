"""``python -m console_svc``: the web console (started by ``agentmesh up``).

Serves HTTP on ``--port`` (0 picks one; default 7490) and records its URL in
``HOME/run/console.addr``; calls the supervisor, audit and policy given with
``--peer`` over mTLS as ``spiffe://agentmesh.local/svc/console``
(``HOME/workloads/svc-console``). Signs people in with the identity provider at
``console_idp_url``, else the dev IdP the launcher started
(``HOME/run/dev-idp.addr``). ``/healthz`` answers 200 while the supervisor
answers SERVING, else 503 with the reason. Exits 2 with one line when the
config, its certificate, the IdP's public key or the port cannot be used.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import signal
import sys
import threading

from agentmesh import assertion, health, signing, spiffe, transport
from agentmesh import config as mesh_config
from agentmesh.audit_client import AuditOutbox, AuditRecorder, outbox_path
from agentmesh.config import ConfigError, MeshConfig
from agentmesh.home import record_address
from agentmesh.http_app import HttpServer
from agentmesh.identities import CONSOLE, IDP_PUBLIC_KEY
from agentmesh.pki import PkiError
from console_svc.app import ConsoleApp, ConsoleConfig, Recorder
from console_svc.mesh import Mesh
from console_svc.signin import SessionStore

log = logging.getLogger("console_svc")


def _peers(values: list[str]) -> dict[str, str]:
    peers = {}
    for value in values:
        name, sep, addr = value.partition("=")
        if not sep or not name or not addr:
            raise ConfigError(f"--peer: expected NAME=HOST:PORT, got {value!r}")
        peers[name] = addr
    return peers


def idp_url(cfg: MeshConfig) -> str | None:
    """The identity provider's base URL now: the configured one, else the running dev IdP's."""
    if cfg.console_idp_url:
        return cfg.console_idp_url.rstrip("/")
    try:
        url = json.loads((cfg.mesh_home.run / "dev-idp.addr").read_text())["url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return url if isinstance(url, str) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m console_svc", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--home", help="mesh home directory (default: $AGENTMESH_HOME or ~/.agentmesh)")
    parser.add_argument("--config", help="YAML config file (default: HOME/config.yaml if present)")
    parser.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind; 0 picks a free one")
    parser.add_argument("--peer", action="append", default=[], metavar="NAME=ADDR",
                        help="address of a role, e.g. supervisor=127.0.0.1:7401 (repeatable)")
    parser.add_argument("--log-level", default=os.environ.get("AGENTMESH_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    os.environ.setdefault("OTEL_SERVICE_NAME", "console")
    try:
        overrides: dict[str, object] = {"host": args.host, "peers": _peers(args.peer) or None}
        if args.port is not None:
            overrides["ports"] = {"console": args.port}
        cfg = mesh_config.load(home=args.home, config_file=args.config, overrides=overrides)
        home = cfg.mesh_home
        tls = transport.TlsFiles.of(home.workload_files(CONSOLE), home.trust_bundle)
        tls.read()  # a missing or unreadable certificate stops us here, naming the file
        idp_key = signing.load_public_key(home.public_key_path(IDP_PUBLIC_KEY))
        cfg.address("supervisor")
        server = HttpServer(lambda request: app(request), cfg.host, cfg.port("console"), name="agentmesh-console")
    except (ConfigError, PkiError, signing.SigningKeyError) as err:
        print(f"console_svc: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"console_svc: cannot listen on {cfg.host}:{cfg.port('console')}: {err.strerror}", file=sys.stderr)
        return 2
    mesh = Mesh(cfg, tls)
    recorder: AuditRecorder | None = None
    try:
        cfg.address("audit")
    except ConfigError:
        log.warning("no audit address: the console's own refusals are not recorded")
    else:
        home.data.mkdir(parents=True, exist_ok=True)
        recorder = AuditRecorder(mesh.channel("audit"), timeout_s=min(5.0, cfg.call_timeout_s),
                                 outbox=AuditOutbox(outbox_path(home.data, "console")),
                                 connect=lambda: transport.secure_channel(
                                     cfg.address("audit"), tls, spiffe.service("audit"),
                                     default_timeout_s=cfg.call_timeout_s))
        recorder.start()
    monitor = health.HealthMonitor(health.HealthServicer(), ())
    monitor.add("peer supervisor", health.peer_check(lambda: mesh.channel("supervisor")), tolerate=1)
    monitor.add("http server", lambda: None if server.alive else "the HTTP server thread stopped")
    sessions = SessionStore(functools.partial(assertion.verify, key=idp_key))
    console = ConsoleConfig(
        url=server.url, idp_url=lambda: idp_url(cfg),
        audit_anchor=home.public_key_path("audit-checkpoint-ed25519.pub.pem"),
        verify_state=home.data / "console-audit-checkpoint.json", health=lambda: list(monitor.reasons))
    app = ConsoleApp(console, mesh, sessions, Recorder(recorder.record_durably if recorder else None))

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    monitor.start()
    addr = home.run / "console.addr"
    record_address(addr, {"address": server.url, "url": server.url, "pid": os.getpid(), "spiffe_id": str(CONSOLE)})
    log.info("web console serving on %s as %s (health checks: %s)", server.url, CONSOLE,
             ", ".join(monitor.checks))
    stop.wait()
    log.info("console stopping")
    monitor.stop()
    server.stop()
    if recorder is not None:
        recorder.close()
    mesh.close()
    addr.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
