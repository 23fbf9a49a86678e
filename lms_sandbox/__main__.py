"""``python -m lms_sandbox``: run the sandbox LMS in the foreground.

Prints ``lms_sandbox listening on http://HOST:PORT`` on stdout once it accepts
connections (``--port 0`` picks a free port), and stops cleanly on SIGINT or
SIGTERM. The ``/admin`` endpoints require ``Authorization: Bearer TOKEN`` with
the token read from ``--admin-token-file`` (created, random and 0600, when the
file does not exist); without that option a random token nobody knows is used,
so the admin endpoints are closed. The token never appears in a command line
or a log.
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

from lms_sandbox.data import LmsData, LmsDataError, load_lms_data
from lms_sandbox.server import LmsSandbox


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m lms_sandbox",
        description=(
            "Sandbox LMS for agentmesh: serves training records per tenant and worker "
            "from a world data file, with fault injection (latency, timeout, 5xx, "
            "malformed, oversized, hostile) set in the file or via POST /admin/faults."
        ),
    )
    parser.add_argument("--port", type=int, default=0, help="TCP port (0 = pick a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument(
        "--data", type=Path, help="world data file (YAML/JSON) whose tenants[].lms sections to serve"
    )
    parser.add_argument(
        "--admin-token-file",
        type=Path,
        help="file holding the bearer token the /admin endpoints require (created, 0600, if missing); "
        "without it the admin endpoints are closed",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    parser.add_argument(
        "--address-file",
        help="write the base URL here once listening (the agentmesh launcher reads it with --port 0)",
    )
    return parser


class AdminTokenError(Exception):
    """The admin token file cannot be used; the message names it."""


def read_admin_token(path: Path) -> str:
    """The token in ``path``, creating the file (random token, 0600) if it does not exist.

    Refuses a file others may read, or an empty one.
    """
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # created meanwhile by someone else: use theirs
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(32) + "\n")
    try:
        mode = path.stat().st_mode
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise AdminTokenError(f"cannot read admin token file {path}: {exc}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AdminTokenError(f"admin token file {path} is accessible by group or others (chmod 600 it)")
    if not token:
        raise AdminTokenError(f"admin token file {path} is empty")
    return token


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(message)s",
    )
    try:
        data = load_lms_data(args.data) if args.data is not None else LmsData()
    except LmsDataError as exc:
        print(f"lms_sandbox: {exc}", file=sys.stderr)
        return 2
    try:
        token = read_admin_token(args.admin_token_file) if args.admin_token_file else None
    except AdminTokenError as exc:
        print(f"lms_sandbox: {exc}", file=sys.stderr)
        return 2
    try:
        sandbox = LmsSandbox(data, host=args.host, port=args.port, admin_token=token)
    except OSError as exc:
        print(f"lms_sandbox: cannot bind {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 1

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # shutdown() blocks until serve_forever returns, so it must not run
        # in the serving thread itself (the signal handler's thread).
        threading.Thread(target=sandbox.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"lms_sandbox listening on {sandbox.base_url}", flush=True)
    if args.address_file:
        tmp = args.address_file + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(sandbox.base_url)
        os.replace(tmp, args.address_file)
    sandbox.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
