"""``python -m dev_idp``: the development identity provider (started by ``agentmesh up``).

Reads the dev IdP signing key ``HOME/ca/idp.key`` and the users file
(``dev_idp_users`` in the config, else the shipped ``dev_idp/users.yaml``),
serves HTTP on ``--port`` (0 picks one) and records its URL in
``HOME/run/dev-idp.addr``. Its one client is the web console, whose redirect URI
is read from ``HOME/run/console.addr``. Exits 2 with one line when the key, the
users file or the port cannot be used.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading

from agentmesh import config as mesh_config
from agentmesh.config import ConfigError, MeshConfig
from agentmesh.home import record_address
from agentmesh.http_app import HttpServer
from agentmesh.signing import SigningKeyError, load_private_key
from dev_idp.directory import DirectoryError, load
from dev_idp.server import DevIdp

CONSOLE_CLIENT = "console"
CALLBACK_PATH = "/auth/callback"


def console_redirect_uri(cfg: MeshConfig) -> str | None:
    """The console's sign-in callback, from the address it recorded; None while no console runs."""
    try:
        url = json.loads((cfg.mesh_home.run / "console.addr").read_text())["url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return f"{url}{CALLBACK_PATH}" if isinstance(url, str) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dev_idp", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--home", help="mesh home directory (default: $AGENTMESH_HOME or ~/.agentmesh)")
    parser.add_argument("--config", help="YAML config file (default: HOME/config.yaml if present)")
    parser.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind; 0 picks a free one")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        overrides: dict[str, object] = {"host": args.host}
        if args.port is not None:
            overrides["ports"] = {"dev-idp": args.port}
        cfg = mesh_config.load(home=args.home, config_file=args.config, overrides=overrides)
        key = load_private_key(cfg.mesh_home.idp_key)
        users = load(cfg.dev_idp_users)
        idp = DevIdp(key, users, {CONSOLE_CLIENT: lambda: console_redirect_uri(cfg)})
        server = HttpServer(idp, cfg.host, cfg.port("dev-idp"), name="agentmesh-dev-idp")
    except (ConfigError, SigningKeyError, DirectoryError) as err:
        print(f"dev_idp: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"dev_idp: cannot listen on {cfg.host}:{cfg.port('dev-idp')}: {err.strerror}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    addr = cfg.mesh_home.run / "dev-idp.addr"
    record_address(addr, {"address": server.url, "url": server.url, "pid": os.getpid()})
    logging.getLogger("dev_idp").info("dev identity provider serving %d users on %s", len(users), server.url)
    stop.wait()
    server.stop()
    addr.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
