"""Benchmark of what a round trip costs when it follows idleness, as each hop of one analysis does.

Run from the repository root::

    .venv/bin/python benchmarks/bench_idle_round_trip.py [--calls 200] [--rounds 2]

One analysis alone is a chain of about twenty calls made one after another, each
into a process that had nothing to do since its last call some milliseconds
before. This measures a round trip after an idle gap of 0, 1, 3, 10 and 30 ms
(the caller sleeps, then times one call), against a server in a process of its
own, three ways:

  * raw TCP   a one-byte echo over a loopback socket (TCP_NODELAY): the machine's
              own wake-up cost;
  * gRPC      the no-op method of ``bench_transport.py`` over bare gRPC mTLS;
  * audit     ``AuditService/AppendRecord`` of a real audit service, durable
              (fsync), a record shaped like the capability runtime's.

It prints p50 and p90 per gap, and how much slower than back to back (gap 0) a
call is after each gap. Rounds alternate the gaps, so a noisy neighbour slows all.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_audit_grpc  # noqa: E402
import bench_transport  # noqa: E402

from agentmesh import config, spiffe  # noqa: E402
from agentmesh.identities import init_identities  # noqa: E402
from agentmesh.v1 import audit_service_pb2 as audit_pb2  # noqa: E402

GAPS_MS = (0, 1, 3, 10, 30)


def _echo_server() -> tuple[subprocess.Popen[bytes], socket.socket]:
    """A one-byte TCP echo in a process of its own, and a connected client socket."""
    code = ("import socket,sys\n"
            "s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(1); print(s.getsockname()[1], flush=True)\n"
            "c,_=s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
            "while (d := c.recv(64)): c.sendall(d)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    client = socket.create_connection(("127.0.0.1", port))
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return proc, client


def _times(call: Callable[[], object], gap_ms: float, calls: int) -> list[float]:
    """Round trips (ms) of ``calls`` calls, each after sleeping ``gap_ms``."""
    out = []
    for _ in range(calls):
        if gap_ms:
            time.sleep(gap_ms / 1000)
        t0 = time.perf_counter()
        call()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--calls", type=int, default=200, help="calls per gap and round (default 200)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over all gaps (default 2)")
    args = parser.parse_args()
    if args.calls < 10 or args.rounds < 1:
        parser.error("--calls must be >= 10 and --rounds >= 1")
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        os.environ.pop(var, None)
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        cfg = config.load(home=str(Path(tmp) / "home"), environ={})
        init_identities(cfg)
        echo, sock = _echo_server()
        grpc_server = subprocess.Popen([sys.executable, bench_transport.__file__, "--serve-bare", str(cfg.home)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        audit = bench_audit_grpc.AuditProcess(cfg)
        try:
            assert grpc_server.stdout is not None
            channel = bench_transport.bare_channel(cfg, int(grpc_server.stdout.readline()))
            noop = channel.unary_unary(bench_transport.METHOD,
                                       request_serializer=bench_transport.pb.AuthorizeRequest.SerializeToString,
                                       response_deserializer=bench_transport.pb.AuthorizeResponse.FromString)
            audit_channel, audit_stub = bench_audit_grpc._stub(cfg, audit.address, spiffe.service("capability"))
            record = audit_pb2.AppendRecordRequest(record=bench_audit_grpc._record(cfg))

            def tcp() -> None:
                sock.sendall(b"x")
                sock.recv(64)

            targets: dict[str, Callable[[], object]] = {
                "raw TCP": tcp,
                "gRPC mTLS": lambda: noop(bench_transport.REQUEST, timeout=10),
                "audit append": lambda: audit_stub.AppendRecord(record, timeout=10),
            }
            for call in targets.values():  # warm up: connections made, code paths run
                _times(call, 0, 50)
            results: dict[tuple[str, int], list[float]] = {(n, g): [] for n in targets for g in GAPS_MS}
            for _ in range(args.rounds):
                for gap in GAPS_MS:
                    for name, call in targets.items():
                        results[(name, gap)] += _times(call, gap, args.calls)
            audit_channel.close()
            channel.close()
        finally:
            audit.stop()
            if grpc_server.stdin is not None:
                grpc_server.stdin.close()
            grpc_server.wait(timeout=30)
            sock.close()
            echo.wait(timeout=30)
    print(f"round trip after an idle gap, {args.rounds} x {args.calls} calls per gap, {os.cpu_count()} CPUs")
    print(f"{'what':<14} {'gap ms':>6}  {'p50 ms':>7}  {'p90 ms':>7}  {'p50 over gap 0':>14}")
    for name in targets:
        base = statistics.median(results[(name, 0)])
        for gap in GAPS_MS:
            values = sorted(results[(name, gap)])
            p50, p90 = statistics.median(values), values[int(0.9 * (len(values) - 1))]
            print(f"{name:<14} {gap:>6}  {p50:>7.3f}  {p90:>7.3f}  {p50 - base:>+13.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
