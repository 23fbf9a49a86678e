"""``python -m lms_sandbox``: run the sandbox LMS in the foreground.

Prints ``lms_sandbox listening on http://HOST:PORT`` on stdout once it accepts
connections (``--port 0`` picks a free port), and stops cleanly on SIGINT or
SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
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
        "--admin-token",
        help="require 'Authorization: Bearer TOKEN' on /admin endpoints",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    parser.add_argument(
        "--address-file",
        help="write the base URL here once listening (the agentmesh launcher reads it with --port 0)",
    )
    return parser


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
        sandbox = LmsSandbox(data, host=args.host, port=args.port, admin_token=args.admin_token)
    except OSError as exc:
        print(f"lms_sandbox: cannot bind {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 1
    if args.host not in ("127.0.0.1", "::1", "localhost") and args.admin_token is None:
        print(
            "lms_sandbox: warning: admin endpoints are unauthenticated on a non-loopback address",
            file=sys.stderr,
        )

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
