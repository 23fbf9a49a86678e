"""Benchmark of what an analysis' gRPC calls cost on their own: its call graph with no-op servers.

Run from the repository root::

    .venv/bin/python benchmarks/bench_call_graph.py [--seconds 15] [--concurrency 8] [--rounds 2]

Nine server processes stand for the mesh's nine on an analysis' path (supervisor, policy,
audit, capability, model gateway, the four agents). Each serves one method that does no
work of its own: it makes the calls its part of the graph makes, then answers. The graph
is the one a demo analysis makes when it runs alone (no appends carried together), 32 gRPC
calls in all, with the same order, the same fan-out and the same calls one after another:

    Analyze -> supervisor: GetTenant (policy); the start and four selections (audit);
      stage one:  delegation (audit), RunTask (work-permit agent), task end (audit)
      stage two:  three delegations (audit), then side by side, each followed by its task end:
                  RunTask (compliance agent), RunTask (risk agent), RunTask (training agent)
      the finish (audit)
    each agent: its capability calls one after another (work-permit 1, compliance 2 — the
      second a batch of 3 —, risk 1 and the model, training 1 batch of 2); each capability
      call or batch: its policy decision, then its records (audit); the model: its decision,
      then its record

Requests and answers carry filler of about the real messages' size (a record about 1 KB,
other requests 600 bytes, answers 200 bytes; a task's answer 2 KB). The HTTP calls to the
LMS and the model server are left out. Stage-two branches run on threads, as the supervisor
runs them.

Two transport stacks, in alternating rounds:

  * bare  ``grpc.server`` with a thread pool / ``grpc.secure_channel``, no interceptors;
  * mesh  ``transport.create_server`` / ``transport.secure_channel`` (the caller check, edge
          validation, error mapping, deadlines, the trace and the mesh ids carried along),
          nothing exporting — the stack every mesh service runs.

For each: one analysis at a time (latency p50 / p99), then --concurrency callers for
--seconds (analyses/s), with the CPU each server process spent per analysis (user + system, from
/proc; the benchmark's client is shown apart and not in the total, as in `bench_analysis.py`).
Set against `bench_analysis.py` on the same machine, it splits an analysis' cost into what
its calls cost as calls and what the mesh does on them.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from opentelemetry import context as otel_context

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_transport as bt  # noqa: E402
from proc_usage import usage  # noqa: E402

from agentmesh import config, transport  # noqa: E402
from agentmesh.access import AccessTable  # noqa: E402
from agentmesh.identities import init_identities  # noqa: E402
from agentmesh.pki import leaf_paths  # noqa: E402

SERVICE = "agentmesh.bench.CallGraph"
METHOD = f"/{SERVICE}/Call"
ROLES = ("supervisor", "policy", "audit", "capability", "model",
         "work-permit-agent", "compliance-agent", "risk-agent", "training-agent")
STACKS = ("bare", "mesh")
RECORD, REQUEST, ANSWER, TASK_ANSWER = 1000, 600, 200, 2000


def _call(to: str, node: str, pad: int = REQUEST) -> dict[str, Any]:
    return {"to": to, "node": node, "pad": pad}


def _append(records: int) -> dict[str, Any]:
    return _call("audit", "append", records * RECORD)


# node name -> (stages, answer size); a stage is a list of branches run side by side, a
# branch a list of calls made one after another. A node without stages answers at once.
GRAPH: dict[str, tuple[list[list[list[dict[str, Any]]]], int]] = {
    "analysis": ([
        [[_call("policy", "get_tenant", 100)]],
        [[_append(5)]],
        [[_append(1)]],
        [[_call("work-permit-agent", "permit_task", 2000)]],
        [[_append(1)]],
        [[_append(3)]],
        [[_call("compliance-agent", "compliance_task", 2000), _append(1)],
         [_call("risk-agent", "risk_task", 2000), _append(1)],
         [_call("training-agent", "training_task", 2000), _append(1)]],
        [[_append(1)]],
    ], 3000),
    "permit_task": ([[[_call("capability", "read")]]], TASK_ANSWER),
    "compliance_task": ([[[_call("capability", "read")]], [[_call("capability", "read_3", 1500)]]], TASK_ANSWER),
    "risk_task": ([[[_call("capability", "read")]], [[_call("model", "complete", 1500)]]], TASK_ANSWER),
    "training_task": ([[[_call("capability", "read_2", 1200)]]], TASK_ANSWER),
    "read": ([[[_call("policy", "authorize")]], [[_append(2)]]], 1000),
    "read_3": ([[[_call("policy", "authorize", 1800)]], [[_append(6)]]], 3000),
    "read_2": ([[[_call("policy", "authorize", 1200)]], [[_append(4)]]], 2000),
    "complete": ([[[_call("policy", "authorize")]], [[_append(1)]]], 1000),
    "get_tenant": ([], 800),
    "authorize": ([], ANSWER),
    "append": ([], ANSWER),
}


def calls_in(node: str) -> int:
    """The gRPC calls ``node`` makes, itself excluded, all the way down."""
    return sum(1 + calls_in(c["node"]) for stage in GRAPH[node][0] for branch in stage for c in branch)


def _encode(node: str, pad: int) -> bytes:
    return node.encode() + b"\n" + b"x" * pad


class Node:
    """One role's server: makes the calls of the node it is asked for, then answers."""

    def __init__(self, stack: str, cfg: config.MeshConfig, ports: dict[str, int]) -> None:
        self._calls = {role: self._channel(stack, cfg, port).unary_unary(METHOD) for role, port in ports.items()}
        self._branches = futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="branch")

    @staticmethod
    def _channel(stack: str, cfg: config.MeshConfig, port: int) -> grpc.Channel:
        if stack == "bare":
            return bt.bare_channel(cfg, port)
        return transport.secure_channel(f"127.0.0.1:{port}", transport.TlsFiles.of(
            leaf_paths(cfg.mesh_home.workloads, bt.CLIENT), cfg.mesh_home.trust_bundle), bt.SERVER)

    def _branch(self, calls: list[dict[str, Any]]) -> None:
        for c in calls:
            self._calls[c["to"]](_encode(c["node"], c["pad"]), timeout=10)

    def handle(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        stages, answer = GRAPH[request.split(b"\n", 1)[0].decode()]
        for stage in stages:
            if len(stage) == 1:
                self._branch(stage[0])
                continue
            running = [self._branches.submit(contextvars.copy_context().run, self._branch, b) for b in stage]
            for f in running:
                f.result()
        return b"y" * answer

    def handlers(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(SERVICE, {"Call": grpc.unary_unary_rpc_method_handler(
            self.handle)})


def serve(stack: str, home: str) -> None:
    """One role's server: prints its port, reads the others' ports (one JSON line), serves until stdin closes."""
    cfg = config.load(home=home, environ={})
    if stack == "bare":
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="rpc"))
    else:
        access = AccessTable.parse({"rules": [{"methods": [f"/{SERVICE}/*"], "callers": [str(bt.CLIENT)]}]})
        server = transport.create_server(access)
    paths = leaf_paths(cfg.mesh_home.workloads, bt.SERVER)
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(
        [(paths.key.read_bytes(), paths.cert.read_bytes())],
        root_certificates=cfg.mesh_home.trust_bundle.read_bytes(), require_client_auth=True))
    print(port, flush=True)
    node = Node(stack, cfg, json.loads(sys.stdin.readline()))
    server.add_generic_rpc_handlers((node.handlers(),))
    server.start()
    print("ready", flush=True)
    sys.stdin.read()
    server.stop(None)


def _start(stack: str, home: str) -> tuple[dict[str, subprocess.Popen[bytes]], dict[str, int]]:
    """The nine servers of ``stack``, started and told each other's ports, and their ports."""
    env = {**os.environ, "GRPC_VERBOSITY": "ERROR"}  # no GOAWAY notes when the servers stop
    procs = {role: subprocess.Popen([sys.executable, __file__, "--serve", stack, home], env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE) for role in ROLES}
    ports = {role: int(p.stdout.readline()) for role, p in procs.items()}  # type: ignore[union-attr]
    for p in procs.values():
        p.stdin.write(json.dumps(ports).encode() + b"\n")  # type: ignore[union-attr]
        p.stdin.flush()  # type: ignore[union-attr]
    for p in procs.values():
        assert p.stdout.readline().strip() == b"ready"  # type: ignore[union-attr]
    return procs, ports


def _stop(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for p in procs.values():
        p.stdin.close()  # type: ignore[union-attr]
    for p in procs.values():
        p.wait(timeout=20)


def _measure(stack: str, cfg: config.MeshConfig, home: str, runs: int, seconds: float,
             concurrency: int) -> dict[str, Any]:
    procs, ports = _start(stack, home)
    try:
        channel = Node._channel(stack, cfg, ports["supervisor"])
        analyze = channel.unary_unary(METHOD)
        request = _encode("analysis", 800)
        token = otel_context.attach(bt.in_a_trace())
        try:
            for _ in range(20):
                analyze(request, timeout=30)
            walls = []
            for _ in range(runs):
                t0 = time.perf_counter()
                analyze(request, timeout=30)
                walls.append((time.perf_counter() - t0) * 1000)
            done = [0] * concurrency
            stop = time.monotonic() + seconds

            def caller(i: int) -> None:
                while time.monotonic() < stop:
                    analyze(request, timeout=30)
                    done[i] += 1

            ctx = contextvars.copy_context()
            workers = [threading.Thread(target=ctx.copy().run, args=(caller, i)) for i in range(concurrency)]
            before = {role: usage(p.pid) for role, p in procs.items()}
            client0, t0 = usage(os.getpid()), time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            wall = time.perf_counter() - t0
            client1 = usage(os.getpid())
            after = {role: usage(p.pid) for role, p in procs.items()}
        finally:
            otel_context.detach(token)
        channel.close()
        n = sum(done)
        cpu = {role: (after[role].cpu_s - before[role].cpu_s) * 1000 / n for role in ROLES}
        cpu["(benchmark client)"] = (client1.cpu_s - client0.cpu_s) * 1000 / n
        walls.sort()
        return {"p50": statistics.median(walls), "p99": walls[min(len(walls) - 1, int(len(walls) * 0.99))],
                "rate": n / wall, "cpu": cpu}
    finally:
        _stop(procs)


def _servers_total(cpu: dict[str, float]) -> float:
    """CPU-ms per analysis of the nine servers (the benchmark's own client left out, as bench_analysis.py does)."""
    return sum(ms for role, ms in cpu.items() if role in ROLES)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=15, help="duration of each throughput run (default 15)")
    parser.add_argument("--concurrency", type=int, default=8, help="parallel callers for throughput (default 8)")
    parser.add_argument("--runs", type=int, default=100, help="sequential analyses for the latency (default 100)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of the two stacks (default 2)")
    parser.add_argument("--serve", nargs=2, metavar=("STACK", "HOME"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return 0
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        os.environ.pop(var, None)  # what the calls cost when nothing exports
    print(f"an analysis' call graph: {1 + calls_in('analysis')} gRPC calls, across {len(ROLES)} server processes")
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in STACKS}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config.load(home=tmp, environ={})
        init_identities(cfg)
        for r in range(args.rounds):
            for stack in STACKS:
                got = _measure(stack, cfg, tmp, args.runs, args.seconds, args.concurrency)
                results[stack].append(got)
                total = _servers_total(got["cpu"])
                print(f"round {r + 1} {stack:<4}  one at a time p50 {got['p50']:.1f} ms, p99 {got['p99']:.1f} ms;  "
                      f"{args.concurrency} callers {got['rate']:.1f} analyses/s, {total:.1f} CPU-ms per analysis "
                      f"(2 cores allow {2000 / total:.0f}/s)", flush=True)
    print("medians:")
    for stack in STACKS:
        rs = results[stack]
        cpu = {role: statistics.median(r["cpu"][role] for r in rs) for role in rs[0]["cpu"]}
        print(f"  {stack}: one at a time p50 {statistics.median(r['p50'] for r in rs):.1f} ms, "
              f"{args.concurrency} callers {statistics.median(r['rate'] for r in rs):.1f} analyses/s, "
              f"CPU per analysis {_servers_total(cpu):.1f} ms in the servers")
        print("    " + ", ".join(f"{role} {ms:.2f}" for role, ms in sorted(cpu.items(), key=lambda kv: -kv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
