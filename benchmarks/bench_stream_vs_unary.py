"""Benchmark of a message on a kept gRPC stream against a unary call, as an audit append would send it.

Run from the repository root::

    .venv/bin/python benchmarks/bench_stream_vs_unary.py [--calls 2000] [--rounds 3]

Issue 13 names two ways of carrying audit records with fewer round trips: in batches
(``AppendRecords``, what every process does today, see ``agentmesh/audit_appends.py``) or on
a stream with a durability acknowledgement per record. This measures what the second would
save per append before any of it is built: a server in a process of its own (the thread-pool
server every mesh service runs, over mTLS with the mesh's certificates) with a no-op unary
method and a bidirectional stream that answers each message, and a caller here that sends
one request and waits for its answer, ``--calls`` times, as a durable append waits for its
acknowledgement. Rounds alternate the two, so a noisy neighbour slows both. It prints the
round trip p50 and the CPU time per message of this process (the caller) and of the server
process (from /proc), as medians of the rounds.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_transport as bt  # noqa: E402
from proc_usage import usage  # noqa: E402

from agentmesh import config  # noqa: E402
from agentmesh.identities import init_identities  # noqa: E402
from agentmesh.pki import leaf_paths  # noqa: E402

STREAM = f"/{bt.SERVICE}/Stream"
KINDS = ("unary", "stream")


def _answer_each(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
    for _ in requests:
        yield bt.pb.AuthorizeResponse(explanation="ok")


def serve(home: str) -> None:
    """The server alone: prints its port, serves until stdin closes."""
    cfg = config.load(home=home, environ={})
    codec = {"request_deserializer": bt.pb.AuthorizeRequest.FromString,
             "response_serializer": bt.pb.AuthorizeResponse.SerializeToString}
    handlers = grpc.method_handlers_generic_handler(bt.SERVICE, {
        "Authorize": grpc.unary_unary_rpc_method_handler(bt._nothing, **codec),
        "Stream": grpc.stream_stream_rpc_method_handler(_answer_each, **codec)})
    paths = leaf_paths(cfg.mesh_home.workloads, bt.SERVER)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((handlers,))
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(
        [(paths.key.read_bytes(), paths.cert.read_bytes())],
        root_certificates=cfg.mesh_home.trust_bundle.read_bytes(), require_client_auth=True))
    server.start()
    print(port, flush=True)
    sys.stdin.read()
    server.stop(None)


def _senders(channel: grpc.Channel) -> tuple[dict[str, Callable[[], None]], Callable[[], None]]:
    """One send-and-wait per kind, and what closes the stream."""
    codec = {"request_serializer": bt.pb.AuthorizeRequest.SerializeToString,
             "response_deserializer": bt.pb.AuthorizeResponse.FromString}
    unary: Any = channel.unary_unary(bt.METHOD, **codec)
    outgoing: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def requests() -> Iterator[Any]:
        while (message := outgoing.get()) is not None:
            yield message

    answers = channel.stream_stream(STREAM, **codec)(requests())

    def on_stream() -> None:
        outgoing.put(bt.REQUEST)
        next(answers)

    return {"unary": lambda: unary(bt.REQUEST, timeout=10), "stream": on_stream}, lambda: outgoing.put(None)


def _measure(send: Callable[[], None], server_pid: int, calls: int) -> tuple[float, float, float]:
    """(round trip p50 ms, caller CPU-ms, server CPU-ms) per message."""
    for _ in range(200):
        send()
    walls = []
    mine, theirs = os.times(), usage(server_pid).cpu_s
    for _ in range(calls):
        t0 = time.perf_counter()
        send()
        walls.append(time.perf_counter() - t0)
    after, theirs_after = os.times(), usage(server_pid).cpu_s
    caller = (after.user - mine.user) + (after.system - mine.system)
    return statistics.median(walls) * 1000, caller * 1000 / calls, (theirs_after - theirs) * 1000 / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000, help="messages per measurement (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--serve", metavar="HOME", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config.load(home=tmp, environ={})
        init_identities(cfg)
        proc = subprocess.Popen([sys.executable, __file__, "--serve", tmp], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdin is not None
        channel = bt.bare_channel(cfg, int(proc.stdout.readline()))
        try:
            send, close = _senders(channel)
            results: dict[str, list[tuple[float, float, float]]] = {k: [] for k in KINDS}
            for r in range(args.rounds):
                for kind in KINDS:
                    got = _measure(send[kind], proc.pid, args.calls)
                    results[kind].append(got)
                    print(f"round {r + 1} {kind:<6}  round trip p50 {got[0]:.3f} ms   caller {got[1]:.3f} CPU-ms"
                          f"   server {got[2]:.3f} CPU-ms per message")
            close()
        finally:
            channel.close()
            proc.stdin.close()
            proc.wait(timeout=10)
        print("medians:")
        for kind in KINDS:
            wall, caller, server = (statistics.median(x[i] for x in results[kind]) for i in range(3))
            print(f"  {kind:<6} round trip {wall:.3f} ms   caller {caller:.3f} + server {server:.3f} CPU-ms "
                  f"= {caller + server:.3f} CPU-ms per message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
