"""The ``agentmesh`` command line: certificates, tokens, the launcher, operator tools.

Every command has ``--help``; those that print results accept ``--json``.
Exit codes: 0 success, 1 the operation failed or was refused, 2 bad usage or
configuration.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from agentmesh import assertion, config, launcher, spiffe
from agentmesh.config import ConfigError, MeshConfig
from agentmesh.identities import init_identities
from agentmesh.pki import CertificateAuthority, PkiError
from agentmesh.signing import SigningKeyError, load_private_key

Handler = Callable[[argparse.Namespace, MeshConfig], int]


class CliError(Exception):
    """A command failed; printed as one line, exit code 1."""


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """Prints rows as an aligned plain-text table."""
    widths = {c: max([len(c)] + [len(str(r.get(c, ""))) for r in rows]) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))


def emit(args: argparse.Namespace, data: Any, human: Callable[[], None]) -> None:
    """Prints JSON with ``--json``, else the human form."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str))
    else:
        human()


# --- certs -----------------------------------------------------------------

def cmd_certs_init(args: argparse.Namespace, cfg: MeshConfig) -> int:
    issued = init_identities(cfg, force=args.force)
    data = {"home": str(cfg.home), "ca": str(cfg.mesh_home.certs / "ca.pem"), "issued": issued}
    emit(args, data, lambda: print(
        f"mesh CA and identities in {cfg.mesh_home.certs} ({len(issued)} issued now)"))
    return 0


def cmd_certs_issue(args: argparse.Namespace, cfg: MeshConfig) -> int:
    try:
        ident = spiffe.parse(args.spiffe_id)
    except spiffe.InvalidSpiffeId as err:
        raise CliError(f"--spiffe-id: {err}") from err
    ca = CertificateAuthority.load(cfg.mesh_home.certs)
    paths = ca.issue(ident, validity=dt.timedelta(hours=args.validity_hours))
    data = {"spiffe_id": str(ident), "cert": str(paths.cert), "key": str(paths.key),
            "valid_hours": args.validity_hours}
    emit(args, data, lambda: print(f"issued {ident}: {paths.cert}"))
    return 0


# --- token -----------------------------------------------------------------

def cmd_token_issue(args: argparse.Namespace, cfg: MeshConfig) -> int:
    try:
        key = load_private_key(cfg.mesh_home.keys / "idp.key")
    except SigningKeyError as err:
        raise CliError(f"{err} (run 'agentmesh certs init' first)") from err
    token = assertion.issue(key, tenant_id=args.tenant, user_id=args.user, roles=args.role or [],
                            session_id=args.session, conversation_id=args.conversation,
                            ttl_s=args.ttl)
    emit(args, {"token": token, "tenant": args.tenant, "user": args.user, "roles": args.role or []},
         lambda: print(token))
    return 0


# --- launcher --------------------------------------------------------------

def _show_mesh(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    emit(args, rows, lambda: print_table(rows, ["name", "spiffe_id", "address", "pid", "health"]))


def cmd_up(args: argparse.Namespace, cfg: MeshConfig) -> int:
    if args.ports_auto:
        cfg = cfg.model_copy(update={"ports": {k: 0 for k in cfg.ports}})
    try:
        procs = launcher.up(cfg, progress=not args.json)
    except launcher.LaunchError as err:
        raise CliError(str(err)) from err
    _show_mesh(args, launcher.status(cfg))
    if args.detach:
        return 0
    print("agentmesh: running; press Ctrl-C to stop", file=sys.stderr)
    launcher.wait_foreground(cfg, procs)
    return 0


def cmd_status(args: argparse.Namespace, cfg: MeshConfig) -> int:
    rows = launcher.status(cfg)
    if not rows:
        emit(args, [], lambda: print(f"no mesh running under {cfg.home}"))
        return 1
    _show_mesh(args, rows)
    return 0 if all(r["health"] in ("SERVING", "RUNNING") for r in rows) else 1


def cmd_down(args: argparse.Namespace, cfg: MeshConfig) -> int:
    procs = launcher.down(cfg)
    emit(args, {"stopped": [p.name for p in procs]},
         lambda: print(f"stopped {len(procs)} processes" if procs else "no mesh was running"))
    return 0


# --- parser ----------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """The full command tree."""
    # SUPPRESS: the options may come before or after the subcommand, and a
    # subcommand's unset default must not overwrite a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", default=argparse.SUPPRESS,
                        help="mesh home directory (default: $AGENTMESH_HOME or ~/.agentmesh)")
    common.add_argument("--config", default=argparse.SUPPRESS,
                        help="YAML config file (default: HOME/config.yaml if present)")
    out = argparse.ArgumentParser(add_help=False)
    out.add_argument("--json", action="store_true", help="print machine-readable JSON")

    parser = argparse.ArgumentParser(
        prog="agentmesh", description="Governed multi-agent work over a gRPC mesh with mTLS.",
        parents=[common])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    certs = sub.add_parser("certs", help="mesh CA and workload certificates")
    certs_sub = certs.add_subparsers(dest="certs_command", required=True, metavar="SUBCOMMAND")
    p = certs_sub.add_parser("init", parents=[common, out],
                             help="create the mesh CA, every workload identity and the dev signing keys")
    p.add_argument("--force", action="store_true", help="replace existing CA, certificates and keys")
    p.set_defaults(handler=cmd_certs_init)
    p = certs_sub.add_parser("issue", parents=[common, out], help="issue (or re-issue) one certificate")
    p.add_argument("--spiffe-id", required=True,
                   help="e.g. spiffe://agentmesh.local/client/my-service")
    p.add_argument("--validity-hours", type=float, default=24.0, help="validity (default 24)")
    p.set_defaults(handler=cmd_certs_issue)

    token = sub.add_parser("token", help="signed user assertions (dev identity provider)")
    token_sub = token.add_subparsers(dest="token_command", required=True, metavar="SUBCOMMAND")
    p = token_sub.add_parser("issue", parents=[common, out], help="mint a user assertion (JWT, EdDSA)")
    p.add_argument("--tenant", required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--role", action="append", help="a role of the user (repeatable)")
    p.add_argument("--session", help="session id (default: a new one)")
    p.add_argument("--conversation", help="conversation id (default: a new one)")
    p.add_argument("--ttl", type=int, default=assertion.DEFAULT_TTL_S, help="seconds valid (default 3600)")
    p.set_defaults(handler=cmd_token_issue)

    p = sub.add_parser("up", parents=[common, out], help="start every role as its own process")
    p.add_argument("--detach", action="store_true", help="return once all report SERVING")
    p.add_argument("--ports-auto", action="store_true", help="let every process pick a free port")
    p.set_defaults(handler=cmd_up)
    p = sub.add_parser("status", parents=[common, out], help="show the running mesh and its health")
    p.set_defaults(handler=cmd_status)
    p = sub.add_parser("down", parents=[common, out], help="stop every process of the mesh")
    p.set_defaults(handler=cmd_down)

    for extend in _EXTENSIONS:
        extend(sub, common, out)
    return parser


_EXTENSIONS: list[Callable[[Any, argparse.ArgumentParser, argparse.ArgumentParser], None]] = []


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentmesh`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = config.load(home=getattr(args, "home", None), config_file=getattr(args, "config", None))
        handler: Handler = args.handler
        return handler(args, cfg)
    except ConfigError as err:
        print(f"agentmesh: {err}", file=sys.stderr)
        return 2
    except (CliError, PkiError, SigningKeyError) as err:
        print(f"agentmesh: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
