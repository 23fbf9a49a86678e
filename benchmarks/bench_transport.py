"""Benchmark of what the mesh's transport stack costs per RPC over a bare gRPC mTLS call.

Run from the repository root::

    .venv/bin/python benchmarks/bench_transport.py [--calls 3000] [--rounds 3]

In one process, a server whose one method does nothing and a client calling it
sequentially, over mTLS with the mesh's certificates, two ways:

  * bare  ``grpc.server`` / ``grpc.secure_channel``, no interceptors;
  * mesh  ``transport.create_server`` (OpenTelemetry's server interceptor, the mesh
          interceptor: caller check, edge validation, error mapping) and
          ``transport.secure_channel`` (deadline, context propagation), nothing exporting.

Every call is made in a trace with the mesh's ids in baggage, as every call in the mesh is
(the mesh client carries them; the bare one sends no such headers).

It prints, per round and as medians: the round trip p50, and the CPU time
(user + system of the process: client and server together) per call. The
difference is what the mesh adds to every RPC. Rounds alternate the two, so a
noisy neighbour slows both.

Targets on the 2-core machine class: the stack adds <= 0.15 CPU-ms per RPC;
a mesh round trip <= 1.5 x the bare one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmesh import config, spiffe, telemetry, transport  # noqa: E402
from agentmesh.access import AccessTable  # noqa: E402
from agentmesh.identities import init_identities  # noqa: E402
from agentmesh.pki import leaf_paths  # noqa: E402
from agentmesh.v1 import common_pb2  # noqa: E402
from agentmesh.v1 import policy_service_pb2 as pb  # noqa: E402

SERVICE = "agentmesh.v1.PolicyService"
METHOD = f"/{SERVICE}/Authorize"
SERVER, CLIENT = spiffe.service("policy"), spiffe.service("capability")
REQUEST = pb.AuthorizeRequest(
    user=common_pb2.UserContext(tenant_id="acme", user_id="alice", roles=["analyst"]),
    agent=common_pb2.AgentPrincipal(agent_id="training-agent",
                                    delegation_chain=["user:acme/alice", "svc:supervisor", "agent:training-agent"]),
    capability_id="training.getStatus", capability_version="2.1.0",
    resource=pb.ResourceRef(type="Worker", id="W-1001", tenant_id="acme"))


def _nothing(request: pb.AuthorizeRequest, context: grpc.ServicerContext) -> pb.AuthorizeResponse:
    return pb.AuthorizeResponse(explanation="ok")


def _handlers() -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(SERVICE, {"Authorize": grpc.unary_unary_rpc_method_handler(
        _nothing, request_deserializer=pb.AuthorizeRequest.FromString,
        response_serializer=pb.AuthorizeResponse.SerializeToString)})


def bare_server(cfg: config.MeshConfig) -> tuple[grpc.Server, int]:
    """A started bare mTLS server (no interceptors) of the no-op method, and its port."""
    srv_paths = leaf_paths(cfg.mesh_home.workloads, SERVER)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((_handlers(),))
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(
        [(srv_paths.key.read_bytes(), srv_paths.cert.read_bytes())],
        root_certificates=cfg.mesh_home.trust_bundle.read_bytes(), require_client_auth=True))
    server.start()
    return server, port


def _bare(cfg: config.MeshConfig) -> tuple[grpc.Server, grpc.Channel]:
    server, port = bare_server(cfg)
    return server, bare_channel(cfg, port)


def _mesh(cfg: config.MeshConfig) -> tuple[grpc.Server, grpc.Channel]:
    access = AccessTable.parse({"rules": [{"methods": [f"/{SERVICE}/*"], "callers": [str(CLIENT)]}]})
    server = transport.create_server(access, max_workers=8)
    server.add_generic_rpc_handlers((_handlers(),))
    port = transport.bind(server, "127.0.0.1", 0, transport.TlsFiles.of(
        leaf_paths(cfg.mesh_home.workloads, SERVER), cfg.mesh_home.trust_bundle))
    server.start()
    channel = transport.secure_channel(f"127.0.0.1:{port}", transport.TlsFiles.of(
        leaf_paths(cfg.mesh_home.workloads, CLIENT), cfg.mesh_home.trust_bundle), SERVER)
    return server, channel


def _measure(make: Callable[[config.MeshConfig], tuple[grpc.Server, grpc.Channel]], cfg: config.MeshConfig,
             calls: int) -> tuple[float, float]:
    """(round trip p50 ms, CPU ms per call) of ``calls`` sequential calls after a warm-up."""
    server, channel = make(cfg)
    try:
        return measure_channel(channel, calls)
    finally:
        channel.close()
        server.stop(None)


def in_a_trace() -> Any:
    """A context as every call in the mesh has one: a trace, and the execution and correlation ids in baggage."""
    span = trace.NonRecordingSpan(trace.SpanContext(
        trace_id=0x5CE0_0000_0000_0000_0000_0000_0000_0001, span_id=0x5CE0_0000_0000_0001, is_remote=False,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)))
    ctx = trace.set_span_in_context(span)
    ctx = baggage.set_baggage(telemetry.EXECUTION_ID, "ex-7f3a9c2e-bench", ctx)
    return baggage.set_baggage(telemetry.CORRELATION_ID, "corr-bench-0001", ctx)


def measure_channel(channel: grpc.Channel, calls: int) -> tuple[float, float]:
    """(round trip p50 ms, CPU ms per call of this process) of ``calls`` no-op calls on ``channel``, in a trace."""
    token = otel_context.attach(in_a_trace())
    try:
        return _measure_calls(channel, calls)
    finally:
        otel_context.detach(token)


def _measure_calls(channel: grpc.Channel, calls: int) -> tuple[float, float]:
    call: Any = channel.unary_unary(METHOD, request_serializer=pb.AuthorizeRequest.SerializeToString,
                                    response_deserializer=pb.AuthorizeResponse.FromString)
    for _ in range(200):
        call(REQUEST, timeout=10)
    walls = []
    cpu0 = os.times()
    for _ in range(calls):
        t0 = time.perf_counter()
        call(REQUEST, timeout=10)
        walls.append(time.perf_counter() - t0)
    cpu1 = os.times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return statistics.median(walls) * 1000, cpu * 1000 / calls


def serve_bare(home: str) -> None:
    """The bare server alone, for a client in another process: prints its port, serves until stdin closes."""
    server, port = bare_server(config.load(home=home, environ={}))
    print(port, flush=True)
    sys.stdin.read()
    server.stop(None)


def bare_channel(cfg: config.MeshConfig, port: int) -> grpc.Channel:
    """A bare mTLS channel (no interceptors) to a bare server on ``port``."""
    cli_paths = leaf_paths(cfg.mesh_home.workloads, CLIENT)
    return grpc.secure_channel(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(
        root_certificates=cfg.mesh_home.trust_bundle.read_bytes(), private_key=cli_paths.key.read_bytes(),
        certificate_chain=cli_paths.cert.read_bytes()), options=[
        ("grpc.ssl_target_name_override", SERVER.dns_name), ("grpc.default_authority", SERVER.dns_name)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000, help="sequential calls per measurement (default 3000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--serve-bare", metavar="HOME", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_bare:
        serve_bare(args.serve_bare)
        return 0
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        os.environ.pop(var, None)  # what the mesh costs when nothing exports
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config.load(home=tmp, environ={})
        init_identities(cfg)
        results: dict[str, list[tuple[float, float]]] = {"bare": [], "mesh": []}
        for r in range(args.rounds):
            for name, make in (("bare", _bare), ("mesh", _mesh)):
                wall, cpu = _measure(make, cfg, args.calls)
                results[name].append((wall, cpu))
                print(f"round {r + 1} {name:<4}  round trip p50 {wall:6.3f} ms   CPU {cpu:6.3f} ms per call")
        bare_wall = statistics.median(w for w, _ in results["bare"])
        bare_cpu = statistics.median(c for _, c in results["bare"])
        mesh_wall = statistics.median(w for w, _ in results["mesh"])
        mesh_cpu = statistics.median(c for _, c in results["mesh"])
        print(f"medians: bare {bare_wall:.3f} ms / {bare_cpu:.3f} CPU-ms; mesh {mesh_wall:.3f} ms / "
              f"{mesh_cpu:.3f} CPU-ms")
        print(f"the mesh stack adds {mesh_cpu - bare_cpu:.3f} CPU-ms per RPC (target <= 0.15); "
              f"round trip {mesh_wall / bare_wall:.2f} x bare (target <= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
