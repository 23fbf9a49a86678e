"""Benchmark of what a gRPC server process spends per RPC: the thread-pool server against the asyncio one.

Run from the repository root::

    .venv/bin/python benchmarks/bench_server_stacks.py [--calls 3000] [--rounds 3]

Each round starts a server in a process of its own — ``grpc.server`` with a thread pool
(what every mesh service runs) or ``grpc.aio.server`` on an event loop — whose one
method does nothing, over mTLS with the mesh's certificates, and calls it from this
process with a bare channel: one caller at a time, then 8 callers in threads. It prints
the server process's CPU time per RPC (user + system, from /proc), the calls per
second and the server threads' voluntary context switches per RPC, as medians of the
rounds; rounds alternate the two servers, so a noisy neighbour slows both.

It answers one question of issue 13 ("asyncio servers where thread hand-offs
dominate"): whether the server side of a round trip gets cheaper on an event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import threading
import time
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

KINDS = ("threads", "asyncio")


def _serve_asyncio(cfg: config.MeshConfig) -> None:
    async def nothing(request: Any, context: Any) -> Any:
        return bt.pb.AuthorizeResponse(explanation="ok")

    async def main() -> None:
        paths = leaf_paths(cfg.mesh_home.workloads, bt.SERVER)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(bt.SERVICE, {
            "Authorize": grpc.unary_unary_rpc_method_handler(
                nothing, request_deserializer=bt.pb.AuthorizeRequest.FromString,
                response_serializer=bt.pb.AuthorizeResponse.SerializeToString)}),))
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(
            [(paths.key.read_bytes(), paths.cert.read_bytes())],
            root_certificates=cfg.mesh_home.trust_bundle.read_bytes(), require_client_auth=True))
        await server.start()
        print(port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await server.stop(None)

    asyncio.run(main())


def serve(kind: str, home: str) -> None:
    """One server of ``kind`` alone: prints its port, serves until stdin closes."""
    cfg = config.load(home=home, environ={})
    if kind == "asyncio":
        _serve_asyncio(cfg)
        return
    server, port = bt.bare_server(cfg)
    print(port, flush=True)
    sys.stdin.read()
    server.stop(None)


def _measure(cfg: config.MeshConfig, home: str, kind: str, calls: int) -> dict[str, tuple[float, float, float]]:
    """{"1 caller": (server CPU-ms per RPC, calls/s, server context switches per RPC), "8 callers": (...)}
    for one server of ``kind``."""
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, home], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdin is not None
    channel = bt.bare_channel(cfg, int(proc.stdout.readline()))
    try:
        call: Any = channel.unary_unary(bt.METHOD, request_serializer=bt.pb.AuthorizeRequest.SerializeToString,
                                        response_deserializer=bt.pb.AuthorizeResponse.FromString)
        for _ in range(300):
            call(bt.REQUEST, timeout=10)
        out = {}
        for name, threads in (("1 caller", 1), ("8 callers", 8)):
            def work(n: int) -> None:
                for _ in range(n):
                    call(bt.REQUEST, timeout=10)

            workers = [threading.Thread(target=work, args=(calls // threads,)) for _ in range(threads)]
            before, t0 = usage(proc.pid), time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            wall, after = time.perf_counter() - t0, usage(proc.pid)
            done = threads * (calls // threads)
            out[name] = ((after.cpu_s - before.cpu_s) * 1000 / done, done / wall,
                         (after.voluntary - before.voluntary) / done)
        return out
    finally:
        channel.close()
        proc.stdin.close()
        proc.wait(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000, help="calls per measurement (default 3000)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "HOME"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config.load(home=tmp, environ={})
        init_identities(cfg)
        results: dict[str, list[dict[str, tuple[float, float, float]]]] = {k: [] for k in KINDS}
        for r in range(args.rounds):
            for kind in KINDS:
                got = _measure(cfg, tmp, kind, args.calls)
                results[kind].append(got)
                print(f"round {r + 1} {kind:<8} " + "   ".join(
                    f"{name}: {cpu:.3f} CPU-ms/RPC, {rate:.0f} calls/s, {cs:.1f} switches/RPC"
                    for name, (cpu, rate, cs) in got.items()))
        print("medians (server process only):")
        for kind in KINDS:
            for name in ("1 caller", "8 callers"):
                cpu = statistics.median(r[name][0] for r in results[kind])
                rate = statistics.median(r[name][1] for r in results[kind])
                cs = statistics.median(r[name][2] for r in results[kind])
                print(f"  {kind:<8} {name:<10} {cpu:.3f} CPU-ms per RPC   {rate:.0f} calls/s   "
                      f"{cs:.1f} voluntary context switches per RPC")
    return 0


if __name__ == "__main__":
    sys.exit(main())
