"""Benchmark of the model gateway: what one governed model call adds over the backend's own latency.

Run from the repository root::

    .venv/bin/python benchmarks/bench_model_gateway.py [--calls 300] [--latency-ms 0]

Starts, in a temporary mesh home, the sandbox model server (``--latency-ms`` added to every
answer, to stand in for a real model), audit, policy and the model service as their own
processes, then:

  * direct   the same chat completion the gateway sends (prompt ``risk.hazards_in_text``),
             POSTed straight to the sandbox over HTTP: the backend's own latency, p50 / p99
  * gateway  ModelService.Complete over mTLS as the risk agent, with a grant signed by the
             supervisor's key: grant and principal checks, the policy decision (an Authorize
             call), the budget reserved and settled (SQLite), the backend call, the answer's
             validation and the MODEL_CALL record made durable in audit before the answer
  * overhead gateway minus direct, at p50 and p99; and per call, the client's round trip
             minus the backend latency the gateway itself measured (``latency_ms``)

Everything runs on one host; on 2 cores the processes share the CPU with the client.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from agentmesh import config, grants, launcher, spiffe, transport  # noqa: E402
from agentmesh.identities import init_identities  # noqa: E402
from agentmesh.pki import leaf_paths  # noqa: E402
from agentmesh.service import address_file  # noqa: E402
from agentmesh.signing import load_private_key  # noqa: E402
from agentmesh.v1 import common_pb2  # noqa: E402
from agentmesh.v1 import model_service_pb2 as pb  # noqa: E402
from agentmesh.v1 import model_service_pb2_grpc as pb_grpc  # noqa: E402
from model_svc.prompting import DataPart, PromptRegistry, render  # noqa: E402

DESCRIPTION = "Rewire panel QD-B2. The crew reaches the feeders through the cable vault under building B."
REGISTERED = "Electric shock from adjacent live bus"
CATEGORIES = ["CHEMICAL", "CONFINED_SPACE", "ELECTRICAL", "HOT_WORK", "LIFTING", "WORK_AT_HEIGHT"]


def _start(home: Path, module: str, name: str, peers: dict[str, str],
           extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen[bytes], str]:
    cfg = config.load(home=str(home), environ={})
    address_file(cfg, name).unlink(missing_ok=True)
    cmd = [sys.executable, "-m", module, "--home", str(home), "--port", "0", "--log-level", "WARNING", *extra]
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


def _sandbox(home: Path, latency_ms: int) -> tuple[subprocess.Popen[bytes], str]:
    addr = home / "run" / "model-sandbox.addr"
    addr.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "model_sandbox", "--port", "0", "--latency-ms", str(latency_ms),
                             "--address-file", str(addr)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if addr.exists():
            return proc, addr.read_text().strip()
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("the sandbox model server did not start")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300, help="calls of each kind (default 300)")
    parser.add_argument("--latency-ms", type=int, default=0, help="the sandbox's added latency (default 0)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        cfg = config.load(home=str(home), environ={})
        init_identities(cfg)
        try:
            sandbox, sandbox_url = _sandbox(home, args.latency_ms)
            procs.append(sandbox)
            audit, audit_addr = _start(home, "audit_svc", "audit", {})
            procs.append(audit)
            policy, policy_addr = _start(home, "policy_svc", "policy", {"audit": audit_addr})
            procs.append(policy)
            # The demo tenants, as `agentmesh up` applies them: which models acme's risk agent may use is theirs.
            launcher.seed_tenants(cfg, policy_addr)
            model, model_addr = _start(home, "model_svc", "model", {"audit": audit_addr, "policy": policy_addr},
                                       ("--sandbox-url", sandbox_url))
            procs.append(model)
            figures = _measure(cfg, home, sandbox_url, model_addr, args.calls)
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
    figures["backend_latency_ms_added"] = args.latency_ms
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"calls per kind: {args.calls}; sandbox latency added: {args.latency_ms} ms")
        print(f"direct   p50 {figures['direct_p50_ms']:.2f} ms   p99 {figures['direct_p99_ms']:.2f} ms")
        print(f"gateway  p50 {figures['gateway_p50_ms']:.2f} ms   p99 {figures['gateway_p99_ms']:.2f} ms")
        print(f"overhead p50 {figures['overhead_p50_ms']:.2f} ms   p99 {figures['overhead_p99_ms']:.2f} ms  "
              f"(per call, round trip minus the backend's own latency: p50 {figures['per_call_p50_ms']:.2f} ms, "
              f"p99 {figures['per_call_p99_ms']:.2f} ms)")
    return 0


def _measure(cfg: config.MeshConfig, home: Path, sandbox_url: str, model_addr: str, calls: int) -> dict[str, float]:
    prompt = PromptRegistry.load().get("risk.hazards_in_text")
    assert prompt is not None
    backend = next(b for b in cfg.model_backends if b.id == "sandbox-large")
    data = [DataPart("permit.description", DESCRIPTION, "permit-registry"),
            DataPart("risk.registered_hazards", REGISTERED, "risk-register")]

    direct: list[float] = []
    with httpx.Client(timeout=30) as http:
        for i in range(calls + 20):
            rendered = render(prompt, {"categories": CATEGORIES}, data)
            body = {"model": backend.model, "messages": list(rendered.messages), "max_tokens": 300,
                    "temperature": 0, "response_format": {"type": "json_object"}, "stream": False}
            t0 = time.perf_counter()
            resp = http.post(f"{sandbox_url}/chat/completions", json=body)
            elapsed = (time.perf_counter() - t0) * 1000
            resp.raise_for_status()
            if i >= 20:  # warm-up
                direct.append(elapsed)

    signer = grants.GrantSigner(load_private_key(cfg.mesh_home.grant_signer_key))
    budget = common_pb2.AgentBudget(max_tokens=10_000_000, max_model_calls=calls + 100, max_model_cost=1000.0)
    grant = signer.issue(issuer=str(spiffe.service("supervisor")), audience=str(spiffe.agent("risk-agent")),
                         execution_id="exe-bench", task_id="task-bench", tenant_id="acme", user_id="alice",
                         assertion_digest="a" * 64, capabilities=[], roles=("analyst",),
                         model_budgets=(budget, budget), ttl=__import__("datetime").timedelta(hours=1))
    request = pb.CompleteRequest(grant=grant, principal=common_pb2.AgentPrincipal(grants=[grant]),
                                 prompt_id=prompt.id,
                                 data=[pb.ModelData(name=d.name, text=d.text, source=d.source) for d in data])
    request.parameters.update({"categories": CATEGORIES})
    tls = transport.TlsFiles.of(leaf_paths(cfg.mesh_home.workloads, spiffe.agent("risk-agent")),
                                cfg.mesh_home.trust_bundle)
    channel = transport.secure_channel(model_addr, tls, spiffe.service("model"), default_timeout_s=30)
    stub = pb_grpc.ModelServiceStub(channel)
    gateway: list[float] = []
    per_call: list[float] = []
    for i in range(calls + 20):
        t0 = time.perf_counter()
        resp = stub.Complete(request)
        elapsed = (time.perf_counter() - t0) * 1000
        assert resp.model_id == "sandbox-large", resp.model_id
        if i >= 20:
            gateway.append(elapsed)
            per_call.append(elapsed - resp.latency_ms)
    channel.close()
    return {
        "direct_p50_ms": statistics.median(direct), "direct_p99_ms": _pct(direct, 0.99),
        "gateway_p50_ms": statistics.median(gateway), "gateway_p99_ms": _pct(gateway, 0.99),
        "overhead_p50_ms": statistics.median(gateway) - statistics.median(direct),
        "overhead_p99_ms": _pct(gateway, 0.99) - _pct(direct, 0.99),
        "per_call_p50_ms": statistics.median(per_call), "per_call_p99_ms": _pct(per_call, 0.99),
    }


if __name__ == "__main__":
    sys.exit(main())
