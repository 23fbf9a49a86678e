"""``python -m model_sandbox``: run the sandbox model server in the foreground.

Prints ``model_sandbox listening on http://HOST:PORT/v1`` once it accepts
connections (``--port 0`` picks a free port) and stops cleanly on SIGINT or
SIGTERM. The ``/admin`` endpoints require ``Authorization: Bearer TOKEN`` with
the token read from ``--admin-token-file`` (created, random and 0600, when the
file does not exist); without that option they are closed (a random token
nobody knows).
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import signal
import stat
import sys
import threading
from pathlib import Path
from types import FrameType

from model_sandbox.server import DEFAULT_MODELS, ModelSandbox


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m model_sandbox",
        description="Sandbox model server for agentmesh: an OpenAI-compatible /v1/chat/completions endpoint "
                    "with deterministic answers and fault injection (latency, timeout, 5xx, malformed, "
                    "over-long, hostile) via POST /admin/faults.")
    parser.add_argument("--port", type=int, default=0, help="TCP port (0 = pick a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help=f"comma-separated model names served (default {','.join(DEFAULT_MODELS)})")
    parser.add_argument("--latency-ms", type=int, default=0, help="added to every completion (default 0)")
    parser.add_argument("--admin-token-file", type=Path,
                        help="file holding the bearer token the /admin endpoints require (created, 0600, if "
                             "missing); without it the admin endpoints are closed")
    parser.add_argument("--address-file", help="write the base URL here once listening (read by the launcher)")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    return parser


def read_admin_token(path: Path) -> str:
    """The token in ``path``, creating the file (random, 0600) if missing; refuses one others may read."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(32) + "\n")
    mode = path.stat().st_mode
    token = path.read_text(encoding="utf-8").strip()
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(f"admin token file {path} is accessible by group or others (chmod 600 it)")
    if not token:
        raise ValueError(f"admin token file {path} is empty")
    return token


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(message)s")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models:
        print("model_sandbox: --models: at least one model name is required", file=sys.stderr)
        return 2
    if not 0 <= args.latency_ms <= 600_000:
        print("model_sandbox: --latency-ms: must be between 0 and 600000", file=sys.stderr)
        return 2
    try:
        token = read_admin_token(args.admin_token_file) if args.admin_token_file else None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        print(f"model_sandbox: {exc}", file=sys.stderr)
        return 2
    try:
        sandbox = ModelSandbox(host=args.host, port=args.port, models=models, admin_token=token,
                               latency_ms=args.latency_ms)
    except OSError as exc:
        print(f"model_sandbox: cannot bind {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 1

    def on_signal(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=sandbox.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"model_sandbox listening on {sandbox.base_url}", flush=True)
    if args.address_file:
        tmp = args.address_file + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(sandbox.base_url)
        os.replace(tmp, args.address_file)
    sandbox.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
