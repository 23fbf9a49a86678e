"""Benchmark of PolicyService.Authorize over mTLS against a real policy process.

Run from the repository root::

    .venv/bin/python benchmarks/bench_policy_authorize.py [--calls 3000] [--threads 8]

Starts a policy process (and the audit process it records to) in a temporary
mesh home, then, as the capability service's identity:

  * sequential  one call at a time on one channel: round-trip p50 / p99 (ms); then the same
                requests each with a new execution id, as an analysis' calls come (p50)
  * concurrent  --threads callers sharing one channel: decisions per second
  * grouped     --threads callers through the services' ``PolicyClient``, which carries the
                requests asked while calls are in flight together in one ``AuthorizeBatch``,
                against the same client sending one RPC each (no limit on the calls in
                flight), in alternating rounds: decisions per second, the policy process's
                and this process's CPU per decision, and decisions per call

and, for the ratio, the bare gRPC mTLS round trip of ``bench_transport.py`` (no
interceptors, a servicer that does nothing) measured in the same run, in alternating
rounds, two ways: client and server in one process (as ``bench_transport.py`` runs it),
and the server in a process of its own (as the policy engine is).

Targets on the 2-core machine class: round trip <= 1.5 ms p50, and <= 1.5 x the bare round trip.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
from opentelemetry import context as otel_context

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_transport  # noqa: E402
from proc_usage import usage  # noqa: E402

from agentmesh import config, launcher, spiffe, transport  # noqa: E402
from agentmesh.identities import init_identities  # noqa: E402
from agentmesh.pki import leaf_paths  # noqa: E402
from agentmesh.policy_client import PolicyClient  # noqa: E402
from agentmesh.service import address_file  # noqa: E402
from agentmesh.v1 import common_pb2  # noqa: E402
from agentmesh.v1 import policy_service_pb2 as pb  # noqa: E402
from agentmesh.v1 import policy_service_pb2_grpc as pb_grpc  # noqa: E402


def _start(home: Path, module: str, name: str, peers: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    cfg = config.load(home=str(home), environ={})
    address_file(cfg, name).unlink(missing_ok=True)
    cmd = [sys.executable, "-m", module, "--home", str(home), "--port", "0", "--log-level", "WARNING"]
    for k, v in peers.items():
        cmd += ["--peer", f"{k}={v}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if address_file(cfg, name).exists():
            return proc, json.loads(address_file(cfg, name).read_text())["address"]
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{name} did not start")


def _request(i: int) -> pb.AuthorizeRequest:
    return pb.AuthorizeRequest(
        user=common_pb2.UserContext(tenant_id="acme", user_id="alice", roles=["analyst"]),
        actor_type=common_pb2.ACTOR_TYPE_USER,
        agent=common_pb2.AgentPrincipal(agent_id="training-agent", delegation_chain=[
            "user:acme/alice", "svc:supervisor", "agent:training-agent"]),
        delegation_depth=2, capability_id="training.getStatus", capability_version="2.1.0",
        resource=pb.ResourceRef(type="Worker", id=f"W-{i % 50}", tenant_id="acme" if i % 5 else "globex"),
        context=pb.OperationContext(risk_profile=common_pb2.RiskProfile(max_risk=common_pb2.RISK_LEVEL_LOW)),
        operation=pb.OPERATION_KIND_INVOKE,
    )


def _callers(client: PolicyClient, requests: list[pb.AuthorizeRequest], threads: int, seconds: float) -> int:
    """``threads`` callers asking ``client`` for ``seconds``; the decisions they got."""
    count = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def worker() -> None:
        i = 0
        while time.monotonic() < stop:
            client(requests[i % len(requests)])
            i += 1
        with lock:
            count[0] += i

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return count[0]


GroupedRound = tuple[float, float, float, float]
"""Decisions/s, the policy process's CPU-ms per decision, this process's CPU-ms per decision, decisions per call."""


def _grouped(channel: grpc.Channel, policy_pid: int, requests: list[pb.AuthorizeRequest], threads: int,
             seconds: float, rounds: int) -> dict[str, list[GroupedRound]]:
    """``threads`` callers through ``PolicyClient``: grouped (its default) against one RPC each, alternating."""
    import os

    clients = {"grouped": PolicyClient(channel, 5.0), "one RPC each": PolicyClient(channel, 5.0, senders=1 << 20)}
    for client in clients.values():
        for i in range(100):
            client(requests[i % len(requests)])
    out: dict[str, list[GroupedRound]] = {name: [] for name in clients}
    for _ in range(rounds):
        for name, client in clients.items():
            policy_before, own_before, calls_before = usage(policy_pid), usage(os.getpid()), client.batches
            t0 = time.monotonic()
            n = max(1, _callers(client, requests, threads, seconds))
            elapsed = time.monotonic() - t0
            out[name].append((n / elapsed, (usage(policy_pid).cpu_s - policy_before.cpu_s) / n * 1000,
                              (usage(os.getpid()).cpu_s - own_before.cpu_s) / n * 1000,
                              n / max(1, client.batches - calls_before)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000, help="sequential calls (default 3000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, alternated with the bare round trip (default 3)")
    parser.add_argument("--threads", type=int, default=8, help="concurrent callers (default 8)")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of the concurrent run (default 5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        cfg = config.load(home=str(home), environ={})
        init_identities(cfg)
        audit, audit_addr = _start(home, "audit_svc", "audit", {})
        policy, policy_addr = _start(home, "policy_svc", "policy", {"audit": audit_addr})
        launcher.seed_tenants(cfg, policy_addr)  # the demo tenants, as `agentmesh up` applies them
        # The bare server of bench_transport.py in a process of its own, as the policy engine is.
        bare_server = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent / "bench_transport.py"),
                                        "--serve-bare", str(home)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        bare_channel: grpc.Channel | None = None
        try:
            assert bare_server.stdout is not None
            bare_channel = bench_transport.bare_channel(cfg, int(bare_server.stdout.readline()))
            tls = transport.TlsFiles.of(leaf_paths(cfg.mesh_home.workloads, spiffe.service("capability")),
                                        cfg.mesh_home.trust_bundle)
            channel = transport.secure_channel(policy_addr, tls, spiffe.service("policy"))
            # Every call in a trace with the mesh's ids in baggage, as the capability service's are.
            otel_context.attach(bench_transport.in_a_trace())
            stub = pb_grpc.PolicyServiceStub(channel)
            # The requests, built before the clock runs: the figure is the round trip, not the client
            # building its messages. They repeat (the resource is the capability; the resource tenant is
            # acme or globex), so after the first of each the engine answers from its memory.
            requests = [_request(i) for i in range(250)]
            for i in range(200):  # warm-up: connection, caches
                stub.Authorize(requests[i % 250])
            # Rounds alternate Authorize and the bare round trips, so a noisy neighbour slows all of them.
            lat: list[float] = []
            ratios: dict[str, list[float]] = {"in one process": [], "across two processes": []}
            bares: dict[str, list[float]] = {k: [] for k in ratios}
            per_round = args.calls // args.rounds
            for _ in range(args.rounds):
                round_lat = []
                for i in range(per_round):
                    t0 = time.perf_counter()
                    stub.Authorize(requests[i % 250])
                    round_lat.append((time.perf_counter() - t0) * 1000)
                lat += round_lat
                alone, _ = bench_transport._measure(bench_transport._bare, cfg, per_round)
                across, _ = bench_transport.measure_channel(bare_channel, per_round)
                for key, bare in (("in one process", alone), ("across two processes", across)):
                    bares[key].append(bare)
                    ratios[key].append(statistics.median(round_lat) / bare)
            lat.sort()
            # As calls of analyses come: each a new execution id, so never the same bytes twice (the engine
            # still answers from its memory of the Cedar request, which has no execution id).
            fresh = []
            for i in range(per_round):
                one = pb.AuthorizeRequest()
                one.CopyFrom(requests[i % 250])
                one.agent.execution_id = f"ex-bench-{i:06d}"
                fresh.append(one)
            fresh_lat = []
            for one in fresh:
                t0 = time.perf_counter()
                stub.Authorize(one)
                fresh_lat.append((time.perf_counter() - t0) * 1000)
            count = [0]
            stop = time.monotonic() + args.seconds
            lock = threading.Lock()

            def worker() -> None:
                i = n = 0
                while time.monotonic() < stop:
                    stub.Authorize(requests[i % 250])
                    i += 1
                    n += 1
                with lock:
                    count[0] += n

            threads = [threading.Thread(target=worker) for _ in range(args.threads)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            rate = count[0] / (time.monotonic() - t0)
            grouped = _grouped(channel, policy.pid, requests, args.threads, args.seconds, args.rounds)
            print("PolicyService.Authorize over mTLS (client and server on this machine)")
            print(f"  sequential calls   {args.calls}")
            print(f"  round trip p50     {statistics.median(lat):.3f} ms")
            print(f"  round trip p99     {lat[int(len(lat) * 0.99) - 1]:.3f} ms")
            across = statistics.median(bares["across two processes"])
            print(f"  new bytes each     {statistics.median(fresh_lat):.3f} ms p50 ({len(fresh)} calls, a new "
                  f"execution id each): {statistics.median(fresh_lat) / across:.2f} x the bare round trip "
                  "across two processes")
            print(f"  decisions/s        {rate:.0f}  ({args.threads} concurrent callers, one channel)")
            for name, rows in grouped.items():
                print(f"  {name + ':':17s}  {args.threads} callers through PolicyClient, {args.rounds} rounds of "
                      f"{args.seconds:g} s: " + "; ".join(
                          f"{r[0]:.0f}/s, policy {r[1]:.3f} + client {r[2]:.3f} CPU-ms per decision, {r[3]:.2f} "
                          "per call" for r in rows))
            for key in ratios:
                print(f"  bare mTLS p50      {statistics.median(bares[key]):.3f} ms, client and no-op server "
                      f"{key} (median of {args.rounds} rounds)")
                print(f"  Authorize / bare   {statistics.median(ratios[key]):.2f} x, median of the rounds' ratios "
                      f"({min(ratios[key]):.2f}-{max(ratios[key]):.2f}; target <= 1.5)")
        finally:
            if bare_channel is not None:
                bare_channel.close()
            bare_server.communicate(timeout=10)  # closes its stdin: it stops
            for proc in (policy, audit):
                proc.terminate()
                proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
